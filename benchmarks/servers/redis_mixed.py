"""Redis with mixed fates: one command path, objects that die at very different times.

Written to break per-context lifetime prediction, not to confirm it (issue 21, item 2).
In a real Redis the same `SET` path stores a value that an overwrite frees in a second,
one that a TTL frees, one that the application deletes, and one that lives forever;
the same `HSET` / `SADD` / `RPUSH` paths hold persistent entities and temporary ones.
Here every stream draws each key's fate at random, with the same value-size
distribution for every fate, so neither the stack nor the size tells them apart:

  kv     SET k:N v             fates: EX 1 | EX 10 | EX 45 | cache (no TTL; a random
                               share DELeted in `shrink`, the rest kept) | DEL after
                               0.5-20 s | kept forever
  hot    SET hk:I v            a small key space (HOT_KEYS) overwritten all the time:
                               each value lives ~HOT_KEYS / rate seconds
  hash   HSET o:N f v ...      2-6 fields (some values > 64 B: hashtable encoding, the
                               rest listpack/ziplist); kept | DEL after 1-30 s | one
                               field HDELeted after 0.5-10 s | EXPIRE 10
  set    SADD t:N m ...        3-8 string members; the same fates as hash (SREM)
  list   RPUSH q:J item ...    queues: every item LPOPped 20 ms - 3 s later;
         RPUSH l:N item ...    logs: never popped; RPUSH tl:N ...: DEL after 1-30 s
  read   GET / HGETALL / SMEMBERS / LRANGE on keys written before (replies)
  churn  every CHURN_EVERY ticks a new connection: SET c:N v EX 10, GET c:N, close

Phases (wall clock, PHASES): warm, grow (a write burst: most keys of the peak),
peak (reads and overwrites), shrink (DEL of a random subset of the cache keys; the
EX 10 keys of grow expire), steady (create-and-free traffic on the same paths; the
EX 45 keys of grow expire inside it, i.e. inside the simulator's steady state, the
second half of the trace).  Rates per stream and phase are in RATES.

Pacing.  The load is paced by the wall clock in ticks of TICK_S: tick i is sent at
t0 + i * TICK_S, and the commands of tick i are a pure function of (seed, i).  So what
the server receives is the same on every machine and every run for a seed (its
order within a connection too), and lifetimes set by the load (TTLs, scheduled DELs,
LPOPs, overwrites at a fixed rate) do not scale with the machine's speed; only when
the server (or the driver) cannot keep up do ticks go late, and the run record says by
how much (`pacing`: late ticks, max and mean lag), beside the machine's load
(`machine`: load average, CPU busy / steal, the server's CPU share).

Commands exist in Redis 5.0.6.  Redis 7.0+ is refused (redis.check_version).

    python3 -m benchmarks.servers.redis_mixed plan --seed 1      # counts per phase
"""

from __future__ import annotations

import collections
import hashlib
import os
import pathlib
import random
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from typing import Iterator

from benchmarks.servers import common, machine, redis
from benchmarks.servers.redis import resp

TICK_S = 0.02
PHASES = (("warm", 3.0), ("grow", 10.0), ("peak", 5.0), ("shrink", 8.0), ("steady", 40.0))
# commands per second by stream, per phase (scheduled DEL / LPOP / HDEL / SREM come on top)
RATES = {
    "warm":   {"kv": 1500, "hot": 1000, "hash": 200, "set": 200, "list": 600, "read": 1500},
    "grow":   {"kv": 14000, "hot": 1500, "hash": 2500, "set": 2000, "list": 2000, "read": 1500},
    "peak":   {"kv": 2500, "hot": 4000, "hash": 400, "set": 400, "list": 1500, "read": 7000},
    "shrink": {"kv": 1500, "hot": 1500, "hash": 300, "set": 300, "list": 800, "read": 2000},
    "steady": {"kv": 2500, "hot": 1500, "hash": 500, "set": 500, "list": 1000, "read": 2000},
}
# fate weights of the kv stream: in grow most keys of the peak; elsewhere steady traffic
KV_FATES = {
    "grow": {"ex1": 0.10, "ex10": 0.30, "ex45": 0.15, "cache": 0.32, "del_later": 0.08,
             "keep": 0.05},
    "other": {"ex1": 0.35, "ex10": 0.30, "ex45": 0.05, "cache": 0.0, "del_later": 0.27,
              "keep": 0.03},
}
# hash and set streams: kept | deleted later | one member/field removed later | EXPIRE 10
COLL_FATES = {
    "grow": {"keep": 0.20, "del_later": 0.45, "shrink_member": 0.15, "expire": 0.20},
    "other": {"keep": 0.05, "del_later": 0.65, "shrink_member": 0.10, "expire": 0.20},
}
LIST_KINDS = {"queue": 0.75, "log": 0.10, "temp": 0.15}
READS = {"get": 0.50, "hgetall": 0.20, "smembers": 0.15, "lrange": 0.15}
CACHE_DEL_SHARE = 0.85      # of the cache keys alive when shrink starts
CACHE_DEL_SECONDS = 4.0     # spread over the first seconds of shrink
HOT_KEYS = 2000
QUEUES = 200
LOG_LISTS_EVERY = 20        # a new log list every 20 log pushes (so they grow a bit)
CHURN_EVERY = 10            # ticks between short-lived connections
CONNECTIONS = 4             # 0: kv, 1: hot, 2: hash + set, 3: list + read
RECENT = 50_000             # reads pick among the last RECENT keys of each kind
LIFETIME = str(pathlib.Path(__file__).resolve().parents[2] / ".venv" / "bin" / "lifetime")


def command_name(cmd: bytes) -> str:
    """The (lower-case) command name of one RESP-encoded command."""
    first = cmd.index(b"\r\n", cmd.index(b"\r\n") + 2) + 2
    return cmd[first:cmd.index(b"\r\n", first)].decode().lower()


def commandstats(port: int) -> dict[str, int]:
    """calls per command (lower case) from INFO commandstats."""
    text = redis.command(port, "INFO", "commandstats").decode(errors="replace")
    out = {}
    for line in text.splitlines():
        if line.startswith("cmdstat_"):
            name, _, rest = line[len("cmdstat_"):].partition(":")
            fields = dict(kv.split("=", 1) for kv in rest.split(",") if "=" in kv)
            out[name] = int(fields.get("calls", 0))
    return out


class Tick:
    __slots__ = ("index", "phase", "batches", "counts", "churn")

    def __init__(self, index: int, phase: str):
        self.index = index
        self.phase = phase
        self.batches: dict[int, list[bytes]] = collections.defaultdict(list)
        self.counts: collections.Counter = collections.Counter()
        self.churn: list[bytes] = []


class Plan:
    """The load of one seed, tick by tick (`ticks()`): a pure function of SEED and
    SCALE (a factor on every rate; 1.0 is the benchmark's)."""

    def __init__(self, seed: int, scale: float = 1.0, phases=PHASES):
        self.seed = seed
        self.scale = scale
        self.phases = tuple(phases)
        self.total_ticks = sum(round(s / TICK_S) for _, s in self.phases)
        self.seconds = self.total_ticks * TICK_S

    def phase_starts(self) -> dict[str, float]:
        out, t = {}, 0.0
        for name, s in self.phases:
            out[name] = round(t, 3)
            t += round(s / TICK_S) * TICK_S
        return out

    def ticks(self) -> Iterator[Tick]:
        rng = random.Random(f"redis-mixed-{self.seed}")
        alphabet = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
        pool = bytes(rng.choice(alphabet) for _ in range(1 << 17))
        randint, random_ = rng.randint, rng.random

        def val(lo: int, hi: int) -> bytes:
            n = randint(lo, hi)
            off = randint(0, len(pool) - n)
            return pool[off:off + n]

        def value() -> bytes:  # one size distribution for every fate
            r = random_()
            if r < 0.6:
                return val(16, 64)
            if r < 0.9:
                return val(65, 512)
            return val(513, 4096)

        def pick(weights: dict[str, float]) -> str:
            r, acc = random_() * sum(weights.values()), 0.0
            for k, w in weights.items():
                acc += w
                if r < acc:
                    return k
            return k

        ids = collections.Counter()
        recent = {k: collections.deque(maxlen=RECENT) for k in ("kv", "hash", "set")}
        cache_keys: list[bytes] = []
        scheduled: dict[int, list[tuple[int, bytes, str]]] = collections.defaultdict(list)
        carry = collections.Counter()   # fractional commands carried to the next tick
        log_key = b"l:0"
        index = 0
        for phase, seconds in self.phases:
            n_ticks = round(seconds / TICK_S)
            fates = "grow" if phase == "grow" else "other"
            if phase == "shrink":  # DEL a random subset of the cache keys alive now
                doomed = rng.sample(cache_keys, int(len(cache_keys) * CACHE_DEL_SHARE))
                spread = max(1, round(CACHE_DEL_SECONDS / TICK_S))
                for j, key in enumerate(doomed):
                    scheduled[index + j * spread // max(1, len(doomed))].append(
                        (0, resp(b"DEL", key), "del_cache"))
                cache_keys = []
            for _ in range(n_ticks):
                t = Tick(index, phase)
                for conn, cmd, what in scheduled.pop(index, ()):
                    t.batches[conn].append(cmd)
                    t.counts[what] += 1

                def later(seconds_: float, conn: int, cmd: bytes, what: str) -> None:
                    scheduled[index + max(1, round(seconds_ / TICK_S))].append((conn, cmd, what))

                for stream, rate in RATES[phase].items():
                    carry[stream] += rate * self.scale * TICK_S
                    n = int(carry[stream])
                    carry[stream] -= n
                    for _ in range(n):
                        if stream == "kv":
                            fate = pick(KV_FATES[fates])
                            ids["kv"] += 1
                            key = b"k:%d" % ids["kv"]
                            if fate.startswith("ex"):
                                cmd = resp(b"SET", key, value(), b"EX", fate[2:].encode())
                            else:
                                cmd = resp(b"SET", key, value())
                                if fate == "cache":
                                    cache_keys.append(key)
                                elif fate == "del_later":
                                    later(rng.uniform(0.5, 20.0), 0, resp(b"DEL", key), "del_kv")
                            t.batches[0].append(cmd)
                            t.counts["set_" + fate] += 1
                            recent["kv"].append(key)
                        elif stream == "hot":
                            key = b"hk:%d" % rng.randrange(HOT_KEYS)
                            t.batches[1].append(resp(b"SET", key, value()))
                            t.counts["set_hot"] += 1
                        elif stream in ("hash", "set"):
                            fate = pick(COLL_FATES[fates])
                            ids[stream] += 1
                            if stream == "hash":
                                key = b"o:%d" % ids["hash"]
                                n_f = randint(2, 6)
                                big = random_() < 0.5
                                args = []
                                for f in range(n_f):
                                    args += [b"f%d" % f, val(65, 300) if big and f == 0
                                             else val(4, 48)]
                                cmd = resp(b"HSET", key, *args)
                                member = (b"HDEL", key, b"f%d" % randint(0, n_f - 1))
                            else:
                                key = b"t:%d" % ids["set"]
                                members = [b"m-%s" % val(8, 48) for _ in range(randint(3, 8))]
                                cmd = resp(b"SADD", key, *members)
                                member = (b"SREM", key, members[randint(0, len(members) - 1)])
                            t.batches[2].append(cmd)
                            t.counts[f"{stream}_{fate}"] += 1
                            if fate == "del_later":
                                later(rng.uniform(1.0, 30.0), 2, resp(b"DEL", key), f"del_{stream}")
                            elif fate == "shrink_member":
                                later(rng.uniform(0.5, 10.0), 2, resp(*member),
                                      member[0].decode().lower())
                            elif fate == "expire":
                                t.batches[2].append(resp(b"EXPIRE", key, b"10"))
                                t.counts["expire"] += 1
                            recent[stream].append(key)
                        elif stream == "list":
                            kind = pick(LIST_KINDS)
                            items = [value() for _ in range(randint(1, 3))]
                            if kind == "queue":
                                key = b"q:%d" % rng.randrange(QUEUES)
                                for _ in items:
                                    later(min(3.0, rng.expovariate(1 / 0.4)) + 0.02, 3,
                                          resp(b"LPOP", key), "lpop")
                            elif kind == "log":
                                ids["log"] += 1
                                if ids["log"] % LOG_LISTS_EVERY == 1:
                                    log_key = b"l:%d" % ids["log"]
                                key = log_key
                            else:
                                ids["tl"] += 1
                                key = b"tl:%d" % ids["tl"]
                                later(rng.uniform(1.0, 30.0), 3, resp(b"DEL", key), "del_list")
                            t.batches[3].append(resp(b"RPUSH", key, *items))
                            t.counts["rpush_" + kind] += 1
                        else:
                            kind = pick(READS)
                            src = {"get": "kv", "hgetall": "hash", "smembers": "set"}.get(kind)
                            if src and recent[src]:
                                key = recent[src][rng.randrange(len(recent[src]))]
                                t.batches[3].append(resp(kind.upper().encode(), key))
                            else:
                                t.batches[3].append(resp(b"LRANGE", b"q:%d" % rng.randrange(QUEUES),
                                                         b"0", b"9"))
                                kind = "lrange"
                            t.counts[kind] += 1
                if index % CHURN_EVERY == 0:
                    ids["churn"] += 1
                    key = b"c:%d" % ids["churn"]
                    t.churn = [resp(b"SET", key, value(), b"EX", b"10"), resp(b"GET", key)]
                    t.counts["churn_connections"] += 1
                yield t
                index += 1
        # scheduled past the end are not sent (the keys stay; censored at the end)

    def summary(self) -> dict:
        """Commands per phase and kind, and a digest of every byte sent per connection
        (equal for equal seeds: what the driver sends is this plan)."""
        per_phase: dict[str, collections.Counter] = {}
        by_command: collections.Counter = collections.Counter()
        digest = hashlib.sha256()
        total_bytes = 0
        for t in self.ticks():
            per_phase.setdefault(t.phase, collections.Counter()).update(t.counts)
            for conn in sorted(t.batches):
                data = b"".join(t.batches[conn])
                digest.update(b"%d:%d:" % (t.index, conn) + data)
                total_bytes += len(data)
                by_command.update(command_name(c) for c in t.batches[conn])
            for c in t.churn:
                digest.update(b"%d:c:" % t.index + c)
                by_command[command_name(c)] += 1
        commands = {p: sum(v for k, v in c.items() if k != "churn_connections")
                    for p, c in per_phase.items()}
        return {"seed": self.seed, "scale": self.scale, "seconds": self.seconds,
                "ticks": self.total_ticks, "tick_s": TICK_S, "phase_starts": self.phase_starts(),
                "commands": commands, "total_commands": sum(commands.values()),
                "bytes": total_bytes, "sha256": digest.hexdigest(),
                "by_command": dict(sorted(by_command.items())),
                "per_phase": {p: dict(sorted(c.items())) for p, c in per_phase.items()}}


# --- the driver -------------------------------------------------------------------

class ReplyCounter:
    """Counts complete top-level RESP replies in a byte stream (errors apart)."""

    def __init__(self):
        self.buf = b""
        self.replies = 0
        self.errors = 0
        self.first_error = ""

    def feed(self, data: bytes) -> None:
        buf = self.buf + data if self.buf else data
        pos = 0
        while True:
            end = self._one(buf, pos)
            if end < 0:
                break
            if buf[pos:pos + 1] == b"-":
                self.errors += 1
                if not self.first_error:
                    self.first_error = buf[pos:end].decode(errors="replace").strip()
            self.replies += 1
            pos = end
        self.buf = buf[pos:]

    def _one(self, buf: bytes, pos: int) -> int:
        if pos >= len(buf):
            return -1
        le = buf.find(b"\r\n", pos)
        if le < 0:
            return -1
        kind = buf[pos:pos + 1]
        if kind in (b"+", b"-", b":"):
            return le + 2
        n = int(buf[pos + 1:le])
        if kind == b"$":
            if n < 0:
                return le + 2
            end = le + 2 + n + 2
            return end if end <= len(buf) else -1
        if kind == b"*":
            p = le + 2
            for _ in range(max(n, 0)):
                p = self._one(buf, p)
                if p < 0:
                    return -1
            return p
        raise ValueError(f"unexpected RESP byte {kind!r}")


def _drain(sock: socket.socket, counter: ReplyCounter) -> None:
    while select.select([sock], [], [], 0)[0]:
        data = sock.recv(1 << 20)
        if not data:
            raise ConnectionError("redis closed the connection")
        counter.feed(data)


def drive(port: int, plan: Plan, on_phase=None) -> dict:
    """Sends PLAN to 127.0.0.1:PORT paced by the wall clock; waits for every reply.
    Returns the sent / replied / error counts and the pacing record."""
    conns = [socket.create_connection(("127.0.0.1", port), timeout=60)
             for _ in range(CONNECTIONS)]
    for c in conns:
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    counters = [ReplyCounter() for _ in conns]
    sent = [0] * CONNECTIONS
    counts: collections.Counter = collections.Counter()
    churn_sent = churn_replies = 0
    lags: list[float] = []
    phase_marks: dict[str, float] = {}
    phase = None
    t0 = time.monotonic()
    try:
        for t in plan.ticks():
            if t.phase != phase:
                phase = t.phase
                phase_marks[phase] = round(time.monotonic() - t0, 3)
                if on_phase:
                    on_phase(phase)
            target = t0 + t.index * TICK_S
            now = time.monotonic()
            if now < target:
                time.sleep(target - now)
            lags.append(max(0.0, now - target))
            for conn, cmds in t.batches.items():
                conns[conn].sendall(b"".join(cmds))
                sent[conn] += len(cmds)
            counts.update(t.counts)
            if t.churn:
                with socket.create_connection(("127.0.0.1", port), timeout=30) as c:
                    c.sendall(b"".join(t.churn))
                    rc = ReplyCounter()
                    while rc.replies < len(t.churn):
                        data = c.recv(65536)
                        if not data:
                            break
                        rc.feed(data)
                churn_sent += len(t.churn)
                churn_replies += rc.replies
            for c, counter in zip(conns, counters):
                _drain(c, counter)
        phase_marks["end_of_sending"] = round(time.monotonic() - t0, 3)
        deadline = time.monotonic() + 300
        for c, counter, n in zip(conns, counters, sent):
            c.setblocking(True)
            while counter.replies < n and time.monotonic() < deadline:
                r, _, _ = select.select([c], [], [], 1.0)
                if r:
                    data = c.recv(1 << 20)
                    if not data:
                        break
                    counter.feed(data)
        phase_marks["all_replies"] = round(time.monotonic() - t0, 3)
    finally:
        for c in conns:
            c.close()
    late = [x for x in lags if x > 0.05]
    return {"sent": sum(sent) + churn_sent, "replies": sum(c.replies for c in counters) + churn_replies,
            "errors": sum(c.errors for c in counters),
            "first_error": next((c.first_error for c in counters if c.first_error), ""),
            "per_connection_sent": sent, "churn_connections": counts["churn_connections"],
            "counts": dict(sorted(counts.items())), "phase_marks_s": phase_marks,
            "pacing": {"ticks": len(lags), "planned_s": plan.seconds,
                       "late_ticks_over_50ms": len(late),
                       "late_share": round(len(late) / max(1, len(lags)), 4),
                       "max_lag_s": round(max(lags, default=0.0), 3),
                       "mean_lag_s": round(sum(lags) / max(1, len(lags)), 4),
                       "sending_s": phase_marks["end_of_sending"]}}


def run(version: str, out_dir: str, seed: int = 1, full_trace: bool = False,
        interval: int | None = None, scale: float = 1.0, label: str | None = None,
        phases=PHASES, **_ignored) -> dict:
    """Profiles VERSION's redis-server through the mixed load into OUT_DIR (sampled at
    INTERVAL bytes, or every allocation with FULL_TRACE); returns a run record."""
    build = redis.ensure(version)
    out_dir = os.path.abspath(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix=f"lt-redis-mixed-{version}-")
    plan = Plan(seed, scale, phases)
    port = common.free_port()
    cmd = [LIFETIME, "profile", "--out", out_dir, "--version-label", label or f"redis-{version}"]
    cmd += ["--full-trace"] if full_trace else (["--interval", str(interval)] if interval else [])
    cmd += ["--", *redis.server_command(build.server, port, workdir)]
    env = dict(os.environ, LIFETIME_SEED=str(seed))
    before = machine.snapshot()
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, cwd=workdir)
    memory: dict[str, int] = {}
    try:
        common.wait_until(lambda: redis._ping(port), 60, f"redis-server {version}", proc,
                          os.path.join(workdir, "redis.log"))
        server_pid = _server_pid(port)

        def on_phase(name: str) -> None:
            memory[name] = int(redis.info(port).get("used_memory", "0"))

        with machine.Monitor(pid=server_pid) as mon:
            driven = drive(port, plan, on_phase)
            info = redis.info(port)
            calls = commandstats(port)
        memory["end"] = int(info.get("used_memory", "0"))
    finally:
        code = redis.stop_server(proc, port)
        err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    wall = time.monotonic() - t0
    log_tail = pathlib.Path(workdir, "redis.log").read_text(errors="replace")[-1500:]
    shutil.rmtree(workdir, ignore_errors=True)
    if code != 0:
        raise common.ServerSetupError(f"redis {version}: exit {code}\n{err[-1500:]}\n{log_tail}")
    summary = plan.summary()
    return {"workload": "mixed", "version": version, "seed": seed, "scale": scale,
            "full_trace": full_trace, "interval": interval, "wall_s": round(wall, 2),
            "plan": {k: summary[k] for k in ("seconds", "ticks", "tick_s", "phase_starts",
                                             "commands", "total_commands", "bytes", "sha256",
                                             "by_command")},
            "commandstats": calls,
            "driver": driven, "used_memory_at_phase_start": memory,
            "stats": {"keys_at_end": info.get("db0", "").strip(),
                      "expired_keys": int(info.get("expired_keys", "0")),
                      "total_commands_processed": int(info.get("total_commands_processed", "0"))},
            "machine": {"before": before, "during": mon.summary(), "after": machine.snapshot()},
            "server": build.to_json()}


def _server_pid(port: int) -> int | None:
    """The pid of the redis-server listening on PORT (the launcher runs it as a child)."""
    want = b"%d" % port
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            line = pathlib.Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        # Redis rewrites its title: "redis-server 127.0.0.1:PORT" (one string)
        argv = line.split(b"\0")
        if b"redis-server" in argv[0] and (want in argv or argv[0].endswith(b":" + want)):
            return int(entry)
    return None


def main() -> int:
    import argparse
    import json

    ap = argparse.ArgumentParser(description="the mixed-fates Redis load")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("plan", help="commands per phase and kind of a seed (no server)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--scale", type=float, default=1.0)
    r = sub.add_parser("run", help="profile one version through the load")
    r.add_argument("version")
    r.add_argument("out")
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--scale", type=float, default=1.0)
    r.add_argument("--full-trace", action="store_true")
    r.add_argument("--interval", type=int, default=65536)
    args = ap.parse_args()
    if args.cmd == "plan":
        print(json.dumps(Plan(args.seed, args.scale).summary(), indent=1))
        return 0
    redis.check_version(args.version)
    print(json.dumps(run(args.version, args.out, seed=args.seed, scale=args.scale,
                         full_trace=args.full_trace,
                         interval=None if args.full_trace else args.interval), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
