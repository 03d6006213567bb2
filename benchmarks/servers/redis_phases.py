"""Redis through a grow / peak / shrink cycle (the situation of LLAMA's Figures 1-2).

One run, driven by real clients against a server started under `lifetime profile`
(sampled or --full-trace); the clients (redis-benchmark, redis-cli of the 6.0.16
source build) are not profiled:

  steady-a  light request load: `SET tmp:N v PX 300` (a short-TTL cache) and `GET sess:N`
            from redis-benchmark, 4 clients, no pipeline
  grow      one `redis-cli --pipe` stream of GROW_KEYS writes, interleaved in a
            seeded random order:
              80% sessions   SET sess:N <40-700 B>  EX 11..15   (freed by Redis's expiry)
              10% cache      SET cache:N <40-700 B>             (UNLINKed in `shrink`)
              10% long-lived persistent entities, never deleted:
                   HSET user:N name .. email .. bio <80-300 B> prefs <70-200 B>
                   (values > 64 B: hashtable encoding, each field/value its own sds)
                   SADD tags:N <4-6 string members of 16-48 B>
  peak      read load on the sessions (GET sess:N) for PEAK_S seconds
  shrink    `redis-cli --pipe` of UNLINK cache:N for every cache key, then the steady
            load while Redis's expiry frees the sessions, until the last session
            written is SHRINK_GRACE_S past its longest TTL
  steady-b  the steady-a load again, for as long as everything before it took (at least
            STEADY_B_MIN_S), so the simulator's steady state (second half of the trace)
            lies after the shrink, with the 10% long-lived keys scattered over the heap

Why this resembles production: a Redis cache/session store fills up with
TTL'd sessions and cache entries during a traffic peak (a sale, a batch import, a
morning login wave) while it also holds a minority of persistent entities (user
profiles, tag sets) written at the same time, so they are interleaved in memory with
the short-lived data; after the peak the TTLs expire and the application invalidates
its cache entries, leaving the persistent keys scattered over pages that are otherwise
empty.  This is the classic Redis fragmentation story (`mem_fragmentation_ratio` high
after a peak; `activedefrag` exists for it).

Everything the clients send is a function of the seed (the pipe files; redis-benchmark's
own key choice is clock-seeded, as in redis.py). Commands exist in Redis 5.0.6.
"""

from __future__ import annotations

import os
import pathlib
import random
import shutil
import subprocess
import sys
import tempfile
import time

from benchmarks.servers import common, redis
from benchmarks.servers.redis import resp

GROW_KEYS = 400_000
PEAK_S = 3.0
STEADY_A_S = 5.0
SHRINK_GRACE_S = 4.0
STEADY_B_MIN_S = 15.0
TTL_S = (11, 15)
SHARES = {"sess": 0.80, "cache": 0.10, "user": 0.05, "tags": 0.05}
LIFETIME = str(pathlib.Path(__file__).resolve().parents[2] / ".venv" / "bin" / "lifetime")


def grow_plan(seed: int, keys: int = GROW_KEYS) -> tuple[bytes, bytes, dict]:
    """(grow pipe, shrink pipe, counts): RESP streams, a pure function of SEED."""
    rng = random.Random(f"redis-phases-{seed}")
    alphabet = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    pool = bytes(rng.choice(alphabet) for _ in range(1 << 16))

    def val(lo: int, hi: int) -> bytes:
        n = rng.randint(lo, hi)
        off = rng.randrange(len(pool) - n)
        return pool[off:off + n]

    kinds = list(SHARES)
    weights = [SHARES[k] for k in kinds]
    grow, shrink = [], []
    counts = {k: 0 for k in kinds}
    for i in range(keys):
        kind = rng.choices(kinds, weights)[0]
        counts[kind] += 1
        key = b"%s:%012d" % (kind.encode(), i)
        if kind == "sess":
            grow.append(resp(b"SET", key, val(40, 700), b"EX", b"%d" % rng.randint(*TTL_S)))
        elif kind == "cache":
            grow.append(resp(b"SET", key, val(40, 700)))
            shrink.append(resp(b"UNLINK", key))
        elif kind == "user":
            grow.append(resp(b"HSET", key, b"name", val(6, 20), b"email", val(12, 40),
                              b"bio", val(80, 300), b"prefs", val(70, 200)))
        else:
            members = [val(16, 48) for _ in range(rng.randint(4, 6))]
            grow.append(resp(b"SADD", key, *members))
    rng.shuffle(shrink)
    return b"".join(grow), b"".join(shrink), counts


def _bench(bench: pathlib.Path, port: int, seconds: float, args: list[str]) -> int:
    """Runs redis-benchmark ARGS repeatedly for SECONDS; returns completed invocations."""
    deadline = time.monotonic() + seconds
    done = 0
    while time.monotonic() < deadline - 0.05:
        proc = subprocess.Popen([str(bench), "-h", "127.0.0.1", "-p", str(port), "-q",
                                 *args], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        try:
            done += proc.wait(max(0.05, deadline - time.monotonic())) == 0
        except subprocess.TimeoutExpired:
            proc.send_signal(2)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    return done


def steady(bench: pathlib.Path, port: int, seconds: float, seed: int) -> None:
    """Alternating 1-s slices: a short-TTL cache write load and session reads."""
    rng = random.Random(f"redis-steady-{seed}")
    value = "".join(rng.choice("abcdefghij") for _ in range(rng.choice([40, 120, 300])))
    end = time.monotonic() + seconds
    k = 0
    while time.monotonic() < end - 0.05:
        s = min(1.0, end - time.monotonic())
        if k % 2 == 0:
            _bench(bench, port, s, ["-c", "4", "-n", "20000", "-r", "50000",
                                    "SET", "tmp:__rand_int__", value, "PX", "300"])
        else:
            _bench(bench, port, s, ["-c", "4", "-n", "20000", "-r", str(GROW_KEYS),
                                    "GET", "sess:__rand_int__"])
        k += 1


def pipe(cli: pathlib.Path, port: int, data_file: str) -> str:
    with open(data_file, "rb") as f:
        proc = subprocess.run([str(cli), "-h", "127.0.0.1", "-p", str(port), "--pipe"],
                              stdin=f, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise common.ServerSetupError(f"redis-cli --pipe failed: {proc.stdout[-500:]}"
                                      f"{proc.stderr[-500:]}")
    return proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""


def _expires(port: int) -> int:
    line = redis.info(port).get("db0", "")
    for part in line.split(","):
        if part.strip().startswith("expires="):
            return int(part.split("=")[1])
    return 0


def _keys(port: int) -> int:
    line = redis.info(port).get("db0", "")
    return int(line.split(",")[0].split("=")[1]) if "keys=" in line else 0


def run(version: str, out_dir: str, seed: int = 1, full_trace: bool = False,
        interval: int | None = None, keys: int = GROW_KEYS, label: str | None = None) -> dict:
    """Profiles VERSION's redis-server through the phases into OUT_DIR; a run record."""
    build = redis.ensure(version)
    bench = redis.benchmark_tool()
    cli = redis.ensure(redis.BENCHMARK_FROM).cli
    out_dir = os.path.abspath(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix=f"lt-redis-phases-{version}-")
    grow, shrink, counts = grow_plan(seed, keys)
    grow_file, shrink_file = os.path.join(workdir, "grow.resp"), os.path.join(workdir, "shrink.resp")
    pathlib.Path(grow_file).write_bytes(grow)
    pathlib.Path(shrink_file).write_bytes(shrink)
    port = common.free_port()
    cmd = [LIFETIME, "profile", "--out", out_dir,
           "--version-label", label or f"redis-{version}"]
    cmd += ["--full-trace"] if full_trace else (["--interval", str(interval)] if interval else [])
    cmd += ["--", *redis.server_command(build.server, port, workdir)]
    env = dict(os.environ, LIFETIME_SEED=str(seed))
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, cwd=workdir)
    common.wait_until(lambda: redis._ping(port), 60, f"redis-server {version}", proc,
                      os.path.join(workdir, "redis.log"))
    marks = {"start": 0.0}
    mark = lambda name: marks.__setitem__(name, round(time.monotonic() - t0, 2))  # noqa: E731
    stats = {}
    try:
        steady(bench, port, STEADY_A_S, seed)
        mark("grow")
        grow_reply = pipe(cli, port, grow_file)
        mark("peak")
        stats["peak_keys"] = _keys(port)
        stats["peak_used_memory"] = int(redis.info(port).get("used_memory", "0"))
        steady_reads = ["-c", "4", "-n", "20000", "-r", str(keys), "GET", "sess:__rand_int__"]
        _bench(bench, port, PEAK_S, steady_reads)
        mark("shrink")
        shrink_reply = pipe(cli, port, shrink_file)
        # the sessions' TTLs run out: steady load until the last one written is
        # SHRINK_GRACE_S past its TTL (same wall time on every version; Redis's lazy
        # and active expiry free them)
        steady(bench, port, max(1.0, marks["peak"] + TTL_S[1] + SHRINK_GRACE_S
                                - (time.monotonic() - t0)), seed + 500)
        stats["expires_left_after_shrink"] = _expires(port)
        mark("steady_b")
        steady(bench, port, max(STEADY_B_MIN_S, marks["steady_b"] + 2.0), seed + 1000)
        mark("end")
        info = redis.info(port)
        stats.update(end_keys=_keys(port), end_used_memory=int(info.get("used_memory", "0")),
                     expired_keys=int(info.get("expired_keys", "0")))
    finally:
        code = redis.stop_server(proc, port)
        err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    log_tail = pathlib.Path(workdir, "redis.log").read_text(errors="replace")[-1500:]
    shutil.rmtree(workdir, ignore_errors=True)
    if code != 0:
        raise common.ServerSetupError(f"redis {version}: exit {code}\n{err[-1500:]}\n{log_tail}")
    return {"version": version, "seed": seed, "full_trace": full_trace, "interval": interval,
            "grow_keys": keys, "counts": counts, "marks_s": marks, "stats": stats,
            "grow_pipe": grow_reply, "shrink_pipe": shrink_reply,
            "server": build.to_json(), "benchmark": str(bench), "cli": str(cli)}


if __name__ == "__main__":
    import json

    version, out = sys.argv[1], sys.argv[2]
    print(json.dumps(run(version, out, full_trace="--full-trace" in sys.argv), indent=1))
