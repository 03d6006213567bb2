#!/usr/bin/env python3
"""Sampler overhead on Redis: redis-benchmark requests/s with and without the sampler.

Configurations, interleaved (each round runs both, the order alternating round to
round), a fresh redis-server for every run (same start state):

  baseline   redis-server as is
  sampler    redis-server with the sampler preloaded at its default interval
             (LIFETIME_INTERVAL_BYTES unset: 512 KiB), profiles to a temp dir

Workloads (redis-benchmark from the 6.0.16 source build, loopback, --csv):

  plain      -c 50 -P 1  -r 100000 -n N  -t set,get,incr,lpush,lpop,sadd,hset,zadd,lrange_100,mset
  pipelined  the same tests with -P 16 (more allocations per second per core, so the
             sampler's share is larger than without pipelining)

Per run the aggregate requests/s is sum(n) / sum(n / rps_test). Per round and
workload, ratio = sampler / baseline; the headline is the median over rounds (target
in issue 11: >= 0.98). The server and the client are pinned to different CPUs when
there are at least two (sched_setaffinity), to cut scheduling noise on a small machine.

    .venv/bin/python benchmarks/redis_overhead.py [--version 6.0.16] [--rounds 7] [--requests 100000]

Output: a table on stdout and JSON (--json, default out/bench/redis_overhead.json).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import pathlib
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.servers import redis as redis_server  # noqa: E402
from profiler import launch  # noqa: E402

TESTS = "set,get,incr,lpush,lpop,sadd,hset,zadd,lrange_100,mset"
WORKLOADS = {"plain": ["-c", "50", "-P", "1"], "pipelined": ["-c", "50", "-P", "16"]}
TARGET = 0.98


def run_once(server: pathlib.Path, bench: pathlib.Path, workload: list[str], requests: int,
             sampled: bool, pin: bool) -> dict:
    workdir = tempfile.mkdtemp(prefix="lt-redis-overhead-")
    profiles = os.path.join(workdir, "profiles")
    env = dict(os.environ)
    for key in [k for k in env if k.startswith("LIFETIME_")] + ["LD_PRELOAD"]:
        env.pop(key, None)
    if sampled:
        env = launch.profiled_env(profiles, None, "redis-overhead", base=env)
        os.makedirs(profiles)
    # Pinning through sched_setaffinity in the child (no taskset image to profile).
    server_cpu = (lambda: os.sched_setaffinity(0, {0})) if pin else None
    client_cpu = (lambda: os.sched_setaffinity(0, {1})) if pin else None
    port = redis_server.common.free_port()
    cmd = redis_server.server_command(server, port, workdir)
    proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, cwd=workdir, preexec_fn=server_cpu)
    try:
        redis_server.common.wait_until(lambda: redis_server._ping(port), 30, "redis-server",
                                       proc, os.path.join(workdir, "redis.log"))
        bench_cmd = [str(bench), "-h", "127.0.0.1", "-p", str(port), "--csv",
                                     "-n", str(requests), "-r", "100000", *workload,
                                     "-t", TESTS]
        t0 = time.monotonic()
        out = subprocess.run(bench_cmd, capture_output=True, text=True, timeout=600,
                             preexec_fn=client_cpu)
        wall = time.monotonic() - t0
        if out.returncode != 0:
            raise RuntimeError(f"redis-benchmark failed: {out.stderr[-1000:]}")
    finally:
        redis_server.stop_server(proc, port)
    rps = {}
    for row in csv.reader(io.StringIO(out.stdout)):
        if len(row) >= 2 and row[0] != "test":
            try:
                rps[row[0]] = float(row[1])
            except ValueError:
                pass
    samples = 0
    if sampled:
        samples = _count_samples(profiles)
    shutil.rmtree(workdir, ignore_errors=True)
    total = requests * len(rps) / sum(requests / r for r in rps.values())
    return {"rps": total, "per_test": rps, "wall_s": round(wall, 2), "samples": samples}


def _count_samples(profiles: str) -> int:
    try:
        from profiler_proto.container import read_profile
    except ImportError:
        return -1
    n = 0
    for f in pathlib.Path(profiles).glob("*.ltprof"):
        p = read_profile(str(f), errors=[])
        n += len(p.samples) if p else 0
    return n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--version", default="6.0.16", help="Redis version (< 7.0)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--requests", type=int, default=100000, help="-n per test")
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    ap.add_argument("--no-pin", action="store_true", help="do not pin server/client to CPUs")
    ap.add_argument("--json", default=str(REPO / "out" / "bench" / "redis_overhead.json"))
    args = ap.parse_args()
    if args.rounds < 5:
        ap.error("--rounds must be at least 5")
    try:
        build = redis_server.ensure(args.version)
    except ValueError as e:
        print(f"redis_overhead: error: {e}", file=sys.stderr)
        return 2
    bench = redis_server.benchmark_tool()
    pin = not args.no_pin and len(os.sched_getaffinity(0)) >= 2 and {0, 1} <= os.sched_getaffinity(0)
    runs: dict = {w: {"baseline": [], "sampler": []} for w in args.workloads}
    ratios: dict = {w: [] for w in args.workloads}
    for r in range(args.rounds):
        for w in args.workloads:
            order = [False, True] if r % 2 == 0 else [True, False]
            got = {}
            for sampled in order:
                res = run_once(build.server, bench, WORKLOADS[w], args.requests, sampled, pin)
                got[sampled] = res
                runs[w]["sampler" if sampled else "baseline"].append(res)
            ratios[w].append(got[True]["rps"] / got[False]["rps"])
            print(f"round {r + 1}/{args.rounds} {w:<9} baseline {got[False]['rps']:>10.0f} rps  "
                  f"sampler {got[True]['rps']:>10.0f} rps  ratio {ratios[w][-1]:.4f}  "
                  f"({got[True]['samples']} samples)", flush=True)
    result = {"redis_version": args.version, "server": str(build.server), "benchmark": str(bench),
              "tests": TESTS, "requests_per_test": args.requests, "rounds": args.rounds,
              "pinned": pin, "interval": "sampler default (LIFETIME_INTERVAL_BYTES unset)",
              "target_median_ratio": TARGET, "machine": {"cpus": os.cpu_count(),
                                                         "platform": platform.platform()},
              "workloads": {}}
    print(f"\n{'workload':<10} {'baseline rps':>13} {'sampler rps':>12} {'median ratio':>13} "
          f"{'min':>7} {'max':>7}  target >= {TARGET}")
    for w in args.workloads:
        base = statistics.median(x["rps"] for x in runs[w]["baseline"])
        samp = statistics.median(x["rps"] for x in runs[w]["sampler"])
        med = statistics.median(ratios[w])
        result["workloads"][w] = {
            "args": WORKLOADS[w], "median_ratio": round(med, 4),
            "ratios": [round(x, 4) for x in ratios[w]],
            "median_baseline_rps": round(base, 1), "median_sampler_rps": round(samp, 1),
            "ratio_of_medians": round(samp / base, 4), "meets_target": med >= TARGET,
            "samples_per_sampled_run": [x["samples"] for x in runs[w]["sampler"]],
            "runs": runs[w]}
        print(f"{w:<10} {base:>13.0f} {samp:>12.0f} {med:>13.4f} {min(ratios[w]):>7.4f} "
              f"{max(ratios[w]):>7.4f}  {'met' if med >= TARGET else 'MISSED'}")
    all_ratios = [x for w in args.workloads for x in ratios[w]]
    result["median_ratio_all"] = round(statistics.median(all_ratios), 4)
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(result, f, indent=2)
    print(f"median ratio over all: {result['median_ratio_all']:.4f}; wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
