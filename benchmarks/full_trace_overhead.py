#!/usr/bin/env python3
"""Cost of the sampler's full-trace mode (LIFETIME_FULL_TRACE=1: every allocation and
free recorded with its stack), issue 13 item 1.

(a) micro: tests/native/full_trace.c `churn M [T]`: M malloc/free pairs (8..512 bytes,
    1024 objects live per thread) on T threads, timed inside the program (the loop
    only: start-up and the final flush are outside it) and as the process's wall
    time.  Configurations, interleaved round by round: baseline (no sampler), sampled
    (default interval), full (full trace).  Reported per configuration, mean +- sd
    over --runs rounds: loop seconds, allocations/s, slowdown vs baseline (loop and
    wall), profile bytes and bytes per allocation.

(b) redis (--redis-seconds S > 0): Redis 6.0.16 (the Debian source build with
    MALLOC=libc, benchmarks/servers/redis.py; Redis 7.0+ is never used) under the
    seeded load plan of benchmarks.servers.redis for S seconds, baseline and full
    trace in alternation, --redis-runs times each.  Per run: requests completed by
    redis-benchmark, server CPU seconds (/proc, before SHUTDOWN), the server's peak
    RSS (VmHWM) and its RSS beyond INFO used_memory at the end (the runs hold different
    amounts of data, so that difference is the fairer "memory added"), and for the
    full trace: allocations recorded (Trailer), samples,
    dropped, file size, bytes/allocation, and the time and peak RSS of `lifetime
    inspect` (streaming reader) on the file.

    .venv/bin/python benchmarks/full_trace_overhead.py [--runs 5] [--allocs 2000000] \\
        [--threads 1 2] [--redis-seconds 60] [--redis-runs 2] [--json FILE] \\
        [--compare-lib OLD.so]

--compare-lib: another build of liblifetime_sampler.so (e.g. the commit before a
change, copied aside) run as one more configuration, "full_ref" (full trace with that
library), interleaved with the others in every round (micro and redis), so a before /
after comparison sees the same machine load.

Output: tables on stdout and JSON (default out/bench/full_trace_overhead.json).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from profiler import launch  # noqa: E402
from profile_format.container import last_chunk  # noqa: E402


def _mean_sd(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return None, None
    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


def _fmt(xs, scale=1.0, digits=3):
    m, s = _mean_sd(xs)
    if m is None:
        return "-"
    return f"{m * scale:.{digits}f} +- {s * scale:.{digits}f}"


TIME = "/usr/bin/time"  # GNU time: the peak RSS of the command itself (%M)


def _timed(cmd):
    """cmd, prefixed by GNU time when there is one, and a parser of its stderr's last
    line -> peak RSS MiB (a fork's ru_maxrss would count the forking Python)."""
    if not os.path.exists(TIME):
        return cmd, lambda err: None
    def parse(err):
        try:
            return int(err.strip().splitlines()[-1].split()[-1]) / 1024
        except (ValueError, IndexError):
            return None
    return [TIME, "-f", "peak-rss-kb %M", *cmd], parse


def _trailer_totals(out_dir):
    totals = {"files": 0, "bytes": 0, "total_allocations": 0, "samples": 0,
              "dropped_samples": 0, "dropped_stacks": 0}
    for path in glob.glob(os.path.join(out_dir, "*.ltprof")):
        totals["files"] += 1
        totals["bytes"] += os.path.getsize(path)
        chunk = last_chunk(path)
        if chunk is not None and chunk.HasField("trailer"):
            t = chunk.trailer
            totals["total_allocations"] += t.total_allocations
            totals["samples"] += t.samples
            totals["dropped_samples"] += t.dropped_samples
            totals["dropped_stacks"] += t.dropped_stacks
    return totals


def _inspect(path):
    """`lifetime inspect` (streaming) on one file: wall seconds, peak RSS MiB."""
    cmd, rss = _timed([sys.executable, "-m", "lifetime.cli", "inspect", "--samples", "0", path])
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    return {"seconds": round(time.monotonic() - t0, 2), "peak_rss_mib": rss(proc.stderr),
            "exit_code": proc.returncode, "summary": proc.stdout.splitlines()}


# ---------------------------------------------------------------- (a) micro

def build_churn(work):
    exe = os.path.join(work, "full_trace")
    subprocess.run(["gcc", "-O2", "-g", "-fomit-frame-pointer", "-fno-builtin", "-pthread",
                    str(REPO / "tests" / "native" / "full_trace.c"), "-o", exe], check=True)
    return exe


COMPARE_LIB = None  # --compare-lib: the library of the "full_ref" configuration


def _profiled_env(config, out, **kwargs):
    """launch.profiled_env for config "sampled", "full" or "full_ref" (full trace with
    COMPARE_LIB)."""
    if config != "full_ref":
        return launch.profiled_env(out, full_trace=config == "full", **kwargs)
    saved = os.environ.get(launch.LIBRARY_ENV)
    os.environ[launch.LIBRARY_ENV] = COMPARE_LIB
    try:
        return launch.profiled_env(out, full_trace=True, **kwargs)
    finally:
        if saved is None:
            del os.environ[launch.LIBRARY_ENV]
        else:
            os.environ[launch.LIBRARY_ENV] = saved


def run_churn(exe, allocs, threads, config, work):
    out = tempfile.mkdtemp(prefix="ft-", dir=work)
    if config == "baseline":
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("LIFETIME_") and k != "LD_PRELOAD"}
    else:
        env = _profiled_env(config, out)
    cmd, rss = _timed([exe, "churn", str(allocs), str(threads)])
    t0 = time.monotonic()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{config}: exit {proc.returncode}: {proc.stderr[-2000:]}")
    _, n, loop_s = proc.stdout.split()
    rec = {"config": config, "threads": threads, "allocs": int(n), "loop_s": float(loop_s),
           "wall_s": wall, "peak_rss_mib": rss(proc.stderr)}
    if config != "baseline":
        rec.update(_trailer_totals(out))
    shutil.rmtree(out, ignore_errors=True)
    return rec


def micro(args, work):
    exe = build_churn(work)
    configs = ["baseline", "sampled", "full"] + (["full_ref"] if COMPARE_LIB else [])
    results = []
    for threads in args.threads:
        runs = {c: [] for c in configs}
        for r in range(args.runs):
            order = configs[r % len(configs):] + configs[:r % len(configs)]
            for c in order:
                runs[c].append(run_churn(exe, args.allocs, threads, c, work))
        base_loop = statistics.fmean(x["loop_s"] for x in runs["baseline"])
        base_wall = statistics.fmean(x["wall_s"] for x in runs["baseline"])
        for c in configs:
            rs = runs[c]
            row = {"threads": threads, "config": c, "runs": rs,
                   "loop_s": _mean_sd([x["loop_s"] for x in rs]),
                   "allocs_per_s": _mean_sd([x["allocs"] / x["loop_s"] for x in rs]),
                   "slowdown_loop": _mean_sd([x["loop_s"] / base_loop for x in rs]),
                   "slowdown_wall": _mean_sd([x["wall_s"] / base_wall for x in rs]),
                   "slowdown_loop_median_range": _median_range(
                       [x["loop_s"] / base_loop for x in rs]),
                   "peak_rss_mib": _mean_sd([x["peak_rss_mib"] for x in rs])}
            if c != "baseline":
                row["file_bytes"] = _mean_sd([x["bytes"] for x in rs])
                row["bytes_per_alloc"] = _mean_sd(
                    [x["bytes"] / max(1, x["total_allocations"]) for x in rs])
                row["bytes_per_alloc_median_range"] = _median_range(
                    [x["bytes"] / max(1, x["total_allocations"]) for x in rs])
                row["samples"] = _mean_sd([x["samples"] for x in rs])
                row["dropped"] = sum(x["dropped_samples"] for x in rs)
            results.append(row)
    print(f"\n(a) churn: {args.allocs:,} malloc/free pairs, {args.runs} runs each, mean +- sd")
    print(f"{'thr':>3} {'config':<9} {'loop s':>17} {'Mallocs/s':>15} {'slowdown(loop)':>16} "
          f"{'slowdown(wall)':>16} {'peak RSS MiB':>14} {'B/alloc':>13} {'dropped':>7}")
    for row in results:
        print(f"{row['threads']:>3} {row['config']:<9} {_fmt([x['loop_s'] for x in row['runs']]):>17} "
              f"{_fmt([x['allocs'] / x['loop_s'] for x in row['runs']], 1e-6, 2):>15} "
              f"{_fmt_ratio(row['slowdown_loop']):>16} "
              f"{_fmt_ratio(row['slowdown_wall']):>16} {_fmt_pair(row['peak_rss_mib'], 1):>14} "
              f"{_fmt_pair(row.get('bytes_per_alloc'), 1):>13} {row.get('dropped', '-'):>7}")
    print("slowdown (loop) median [min, max]: " + "; ".join(
        f"{row['threads']} thr {row['config']} {row['slowdown_loop_median_range']}"
        for row in results if row["config"] != "baseline"))
    return results


def _fmt_ratio(pair):
    m, s = pair
    return "-" if m is None else f"{m:.2f}x +- {s:.2f}"


def _fmt_pair(pair, digits):
    if pair is None or pair[0] is None:
        return "-"
    return f"{pair[0]:.{digits}f} +- {pair[1]:.{digits}f}"


# ---------------------------------------------------------------- (b) redis

def _proc_status(pid):
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                out[k] = v.strip()
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        tick = os.sysconf("SC_CLK_TCK")
        out["cpu_s"] = (int(fields[11]) + int(fields[12])) / tick
    except OSError:
        pass
    return out


def redis_run(config, seconds, seed, work, keep_dir):
    from benchmarks.servers import redis as R

    build = R.ensure("6.0.16")
    bench = R.benchmark_tool()
    out = os.path.join(keep_dir, f"{config}-{time.time_ns()}")
    os.makedirs(out)
    if config == "baseline":
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("LIFETIME_") and k != "LD_PRELOAD"}
    else:
        env = _profiled_env(config, out, version_label="redis-6.0.16",
                            extra_env={"LIFETIME_SEED": str(seed)})
    workdir = tempfile.mkdtemp(prefix="ft-redis-", dir=work)
    t0 = time.monotonic()
    proc, port = R.start_server(build.server, workdir, env)
    phases = []
    try:
        for phase, slice_s in R.load_plan(seed, seconds):
            phases.append(R.run_phase(bench, port, phase, slice_s))
        status = _proc_status(proc.pid)
        used = int(R.info(port).get("used_memory", "0").strip() or 0)
    finally:
        code = R.stop_server(proc, port, timeout=600)
    wall = time.monotonic() - t0
    shutil.rmtree(workdir, ignore_errors=True)
    rec = {"config": config, "exit_code": code, "wall_s": round(wall, 2),
           "requests_completed": sum(p["requests_completed"] for p in phases),
           "server_cpu_s": status.get("cpu_s"),
           "peak_rss_mib": int(status.get("VmHWM", "0 kB").split()[0]) / 1024,
           "rss_mib": int(status.get("VmRSS", "0 kB").split()[0]) / 1024,
           "used_memory_mib": used / 2**20,
           "phases_failed": [p["phase"] for p in phases if p["completed"] == 0]}
    if config != "baseline":
        rec.update(_trailer_totals(out))
        rec["bytes_per_alloc"] = rec["bytes"] / max(1, rec["total_allocations"])
        rec["allocs_per_s"] = rec["total_allocations"] / wall
        files = glob.glob(os.path.join(out, "*.ltprof"))
        biggest = max(files, key=os.path.getsize)
        rec["inspect"] = _inspect(biggest)
        rec["inspect_file_bytes"] = os.path.getsize(biggest)
    shutil.rmtree(out, ignore_errors=True)
    print(f"  {config}: {json.dumps({k: v for k, v in rec.items() if k != 'inspect'})}", flush=True)
    if "inspect" in rec:
        print(f"    inspect: {rec['inspect']['seconds']} s, peak RSS "
              f"{rec['inspect']['peak_rss_mib']} MiB", flush=True)
    return rec


def redis(args, work):
    print(f"\n(b) redis 6.0.16, load plan seed {args.seed}, {args.redis_seconds} s per run",
          flush=True)
    configs = ["baseline", "full"] + (["full_ref"] if COMPARE_LIB else [])
    runs = {c: [] for c in configs}
    for r in range(args.redis_runs):
        for c in (configs if r % 2 == 0 else configs[::-1]):
            runs[c].append(redis_run(c, args.redis_seconds, args.seed, work, work))
    summaries = {c: _redis_summary(runs["baseline"], runs[c]) for c in configs[1:]}
    for c, summary in summaries.items():
        print(f"  summary, {c} (mean +- sd over runs; median and range of the ratios):")
        for k, v in summary.items():
            if isinstance(v, tuple):
                print(f"    {k:<30} {v[0]:,.3f} +- {v[1]:,.3f}")
            else:
                print(f"    {k:<30} {v}")
    return {"runs": runs, "summary": summaries["full"], "summaries": summaries}


def _redis_summary(b, f):
    base_req = statistics.fmean(x["requests_completed"] for x in b)
    base_rss = statistics.fmean(x["peak_rss_mib"] for x in b)
    base_cpu_per_req = statistics.fmean(x["server_cpu_s"] / x["requests_completed"] for x in b)
    summary = {
        "requests_baseline": _mean_sd([x["requests_completed"] for x in b]),
        "requests_full": _mean_sd([x["requests_completed"] for x in f]),
        "throughput_ratio": _mean_sd([x["requests_completed"] / base_req for x in f]),
        "server_cpu_per_request_ratio": _mean_sd(
            [x["server_cpu_s"] / x["requests_completed"] / base_cpu_per_req for x in f]),
        "allocations_recorded": _mean_sd([x["total_allocations"] for x in f]),
        "allocs_per_s": _mean_sd([x["allocs_per_s"] for x in f]),
        "dropped_samples": sum(x["dropped_samples"] for x in f),
        "file_bytes": _mean_sd([x["bytes"] for x in f]),
        "bytes_per_alloc": _mean_sd([x["bytes_per_alloc"] for x in f]),
        "peak_rss_baseline_mib": _mean_sd([x["peak_rss_mib"] for x in b]),
        "peak_rss_full_mib": _mean_sd([x["peak_rss_mib"] for x in f]),
        "peak_rss_added_mib": _mean_sd([x["peak_rss_mib"] - base_rss for x in f]),
        # the runs store different amounts of data (throughput differs): RSS beyond
        # what Redis itself has allocated (INFO used_memory) is compared instead
        "rss_beyond_used_memory_baseline_mib": _mean_sd(
            [x["rss_mib"] - x["used_memory_mib"] for x in b]),
        "rss_beyond_used_memory_full_mib": _mean_sd(
            [x["rss_mib"] - x["used_memory_mib"] for x in f]),
        "inspect_s": _mean_sd([x["inspect"]["seconds"] for x in f]),
        "inspect_peak_rss_mib": _mean_sd([x["inspect"]["peak_rss_mib"] for x in f]),
        "throughput_ratio_median_min_max": _median_range(
            [x["requests_completed"] / base_req for x in f]),
        "bytes_per_alloc_median_min_max": _median_range([x["bytes_per_alloc"] for x in f]),
    }
    return summary


def _median_range(xs):
    return (f"{statistics.median(xs):.3f} [{min(xs):.3f}, {max(xs):.3f}]" if xs else "-")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--allocs", type=int, default=2_000_000)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--redis-seconds", type=float, default=0)
    ap.add_argument("--redis-runs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--work", default=None, help="scratch directory (profiles; default: a temp dir)")
    ap.add_argument("--json", default=str(REPO / "out" / "bench" / "full_trace_overhead.json"))
    ap.add_argument("--compare-lib", default=None,
                    help="another liblifetime_sampler.so, run as configuration full_ref")
    args = ap.parse_args()
    global COMPARE_LIB
    if args.compare_lib:
        COMPARE_LIB = os.path.abspath(args.compare_lib)
        if not os.path.isfile(COMPARE_LIB):
            ap.error(f"--compare-lib {args.compare_lib}: no such file")
    launch.sampler_library_path()
    work = args.work or tempfile.mkdtemp(prefix="full-trace-bench-")
    os.makedirs(work, exist_ok=True)
    result = {"args": vars(args), "machine": {"cpus": os.cpu_count(), "uname": list(os.uname())}}
    result["micro"] = micro(args, work) if args.runs > 0 else []
    if args.redis_seconds > 0:
        result["redis"] = redis(args, work)
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(result, f, indent=1, default=str)
    print(f"\nwrote {args.json}")
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
