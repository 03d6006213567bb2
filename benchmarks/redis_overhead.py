#!/usr/bin/env python3
"""Sampler overhead on Redis: redis-benchmark requests/s with and without the sampler.

Configurations, interleaved (each round runs each once, in an order rotated and
reversed round to round), a fresh redis-server for every run (same start state):

  baseline    redis-server as is
  sampler     the sampler preloaded at its default interval (LIFETIME_INTERVAL_BYTES
              unset: 512 KiB), profiles to a temp dir: the headline
  hooks-only  (--configs sampler hooks-only) the sampler preloaded at a 2^40-byte
              interval: its malloc/free hooks without samples, to split the cost

Workloads (redis-benchmark from the 6.0.16 source build, loopback, --csv):

  plain      -c 50 -P 1  -r 100000 -n N  -t set,get,incr,lpush,lpop,sadd,hset,zadd,lrange_100,mset
  pipelined  the same tests with -P 16 (more allocations per second per core, so the
             sampler's share is larger than without pipelining)

Per run the aggregate requests/s is sum(n) / sum(n / rps_test). Per round, workload
and configuration, ratio = config / baseline; the headline is the median over rounds
of the sampler's ratio (target in issue 11: >= 0.98). Also reported, as a figure less
sensitive to throughput noise from other jobs on a shared machine: "cpu ratio" = the
server's CPU time (user + system, /proc) per request, baseline / config (1.0 = no
cost), median over rounds; and with --perf, one `perf record -e cpu-clock` run per
configuration: the share of the server's CPU samples inside the sampler library.
The server and the client are pinned to different CPUs when there are at least two
(sched_setaffinity), to cut scheduling noise on a small machine.

    .venv/bin/python benchmarks/redis_overhead.py [--version 6.0.16] [--rounds 7] \
        [--requests 100000] [--configs sampler hooks-only] [--perf]

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
import signal
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
# interval per configuration: None = no sampler, 0 = the sampler's default interval
CONFIGS = {"baseline": None, "sampler": 0, "hooks-only": 1 << 40}


def run_once(server: pathlib.Path, bench: pathlib.Path, workload: list[str], requests: int,
             config: str, pin: bool, perf: bool = False) -> dict:
    """One fresh server, one redis-benchmark run. CONFIG is a key of CONFIGS. With PERF,
    the server is recorded with `perf record -e cpu-clock` during the load and the share
    of its CPU samples in the sampler library is returned."""
    sampled = CONFIGS[config] is not None
    workdir = tempfile.mkdtemp(prefix="lt-redis-overhead-")
    profiles = os.path.join(workdir, "profiles")
    env = dict(os.environ)
    for key in [k for k in env if k.startswith("LIFETIME_")] + ["LD_PRELOAD"]:
        env.pop(key, None)
    if sampled:
        interval = CONFIGS[config] or None  # 0: the sampler's default
        env = launch.profiled_env(profiles, interval, "redis-overhead", base=env)
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
        recorder = None
        if perf:
            recorder = subprocess.Popen(["perf", "record", "-q", "-e", "cpu-clock", "-F", "4999",
                                         "-p", str(proc.pid), "-o",
                                         os.path.join(workdir, "perf.data")],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.5)
        cpu0 = _cpu_seconds(proc.pid)
        t0 = time.monotonic()
        out = subprocess.run(bench_cmd, capture_output=True, text=True, timeout=600,
                             preexec_fn=client_cpu)
        wall = time.monotonic() - t0
        server_cpu = _cpu_seconds(proc.pid) - cpu0
        if recorder is not None:
            recorder.send_signal(signal.SIGINT)
            recorder.wait(60)
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
    perf_share = _perf_dso_shares(os.path.join(workdir, "perf.data")) if perf else None
    shutil.rmtree(workdir, ignore_errors=True)
    total = requests * len(rps) / sum(requests / r for r in rps.values())
    return {"rps": total, "per_test": rps, "wall_s": round(wall, 2), "samples": samples,
            "server_cpu_us_per_request": round(1e6 * server_cpu / (requests * len(rps)), 4),
            **({"perf_dso_percent": perf_share} if perf else {})}


def _perf_dso_shares(data: str) -> dict:
    """Percent of the server's CPU samples per shared object (`perf report --sort dso`)."""
    if not os.path.exists(data):
        return {}
    out = subprocess.run(["perf", "report", "-i", data, "--stdio", "--sort", "dso",
                          "--percent-limit", "0.1"], capture_output=True, text=True).stdout
    shares = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].endswith("%"):
            shares[parts[1]] = float(parts[0].rstrip("%"))
    return shares


def _cpu_seconds(pid: int) -> float:
    """user + system CPU seconds of PID so far (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _count_samples(profiles: str) -> int:
    try:
        from profile_format.container import read_profile
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
    ap.add_argument("--configs", nargs="+", default=["sampler"],
                    choices=[c for c in CONFIGS if c != "baseline"],
                    help="configurations compared with the baseline (hooks-only: the "
                         "sampler preloaded at a 2^40-byte interval, i.e. its hooks alone)")
    ap.add_argument("--perf", action="store_true",
                    help="then one `perf record` run per configuration and workload: the "
                         "share of the server's CPU in the sampler library")
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
    pin = not args.no_pin and {0, 1} <= os.sched_getaffinity(0)
    configs = ["baseline", *args.configs]
    runs: dict = {w: {c: [] for c in configs} for w in args.workloads}
    ratios: dict = {w: {c: [] for c in args.configs} for w in args.workloads}
    cpu_ratios: dict = {w: {c: [] for c in args.configs} for w in args.workloads}
    for r in range(args.rounds):
        for w in args.workloads:
            order = configs[r % len(configs):] + configs[:r % len(configs)]  # rotate
            if r % 2:
                order.reverse()
            got = {}
            for c in order:
                got[c] = run_once(build.server, bench, WORKLOADS[w], args.requests, c, pin)
                runs[w][c].append(got[c])
            line = f"round {r + 1}/{args.rounds} {w:<9} baseline {got['baseline']['rps']:>9.0f} rps"
            for c in args.configs:
                ratios[w][c].append(got[c]["rps"] / got["baseline"]["rps"])
                cpu_ratios[w][c].append(got["baseline"]["server_cpu_us_per_request"]
                                        / got[c]["server_cpu_us_per_request"])
                line += (f" | {c} {got[c]['rps']:>9.0f} rps ratio {ratios[w][c][-1]:.4f} "
                         f"cpu {cpu_ratios[w][c][-1]:.4f} ({got[c]['samples']} samples)")
            print(line, flush=True)
    result = {"redis_version": args.version, "server": str(build.server), "benchmark": str(bench),
              "tests": TESTS, "requests_per_test": args.requests, "rounds": args.rounds,
              "pinned": pin, "configs": {c: CONFIGS[c] for c in configs},
              "headline_config": "sampler (the sampler's default interval)",
              "target_median_ratio": TARGET,
              "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                          "loadavg_at_end": os.getloadavg()},
              "workloads": {}}
    print(f"\n{'workload':<10} {'config':<11} {'baseline rps':>13} {'config rps':>11} "
          f"{'median ratio':>13} {'min':>7} {'max':>7} {'cpu ratio':>10}  target >= {TARGET}")
    for w in args.workloads:
        base = statistics.median(x["rps"] for x in runs[w]["baseline"])
        entry = {"args": WORKLOADS[w], "median_baseline_rps": round(base, 1),
                 "baseline_runs": runs[w]["baseline"], "configs": {}}
        for c in args.configs:
            med = statistics.median(ratios[w][c])
            rps = statistics.median(x["rps"] for x in runs[w][c])
            cpu = statistics.median(cpu_ratios[w][c])
            entry["configs"][c] = {
                "median_ratio": round(med, 4), "ratios": [round(x, 4) for x in ratios[w][c]],
                "median_rps": round(rps, 1), "ratio_of_medians": round(rps / base, 4),
                "median_cpu_ratio": round(cpu, 4),
                "cpu_ratios": [round(x, 4) for x in cpu_ratios[w][c]],
                "meets_target": med >= TARGET,
                "samples_per_run": [x["samples"] for x in runs[w][c]], "runs": runs[w][c]}
            print(f"{w:<10} {c:<11} {base:>13.0f} {rps:>11.0f} {med:>13.4f} "
                  f"{min(ratios[w][c]):>7.4f} {max(ratios[w][c]):>7.4f} {cpu:>10.4f}  "
                  f"{'met' if med >= TARGET else 'MISSED'}")
        result["workloads"][w] = entry
    if args.perf:
        print("\nperf: share of the server's CPU samples per object (one run each)")
        result["perf"] = {}
        for w in args.workloads:
            for c in configs:
                res = run_once(build.server, bench, WORKLOADS[w], args.requests, c, pin, perf=True)
                shares = res.get("perf_dso_percent", {})
                sampler = sum(v for k, v in shares.items() if "lifetime_sampler" in k)
                result["perf"].setdefault(w, {})[c] = {"dso_percent": shares,
                                                       "sampler_percent": round(sampler, 2)}
                print(f"{w:<10} {c:<11} sampler library {sampler:5.2f}%  "
                      + ", ".join(f"{k} {v:.1f}%" for k, v in list(shares.items())[:5]))
    all_ratios = [x for w in args.workloads for x in ratios[w]["sampler"]] \
        if "sampler" in args.configs else []
    if all_ratios:
        result["median_ratio_all"] = round(statistics.median(all_ratios), 4)
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(result, f, indent=2)
    if all_ratios:
        print(f"sampler (default interval): median ratio over all rounds and workloads "
              f"{result['median_ratio_all']:.4f}")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
