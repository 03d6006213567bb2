#!/usr/bin/env python3
"""CPU overhead of the allocation-lifetime sampler on real, unmodified programs.

Workloads (bundled inputs in workloads/bench/):
  clang   Debian clang-14 compiling bench_compile.cpp with -O2 -c (installed with
          apt-get if missing); built without frame pointers.
  python  a pyenv CPython (`pyenv prefix 3.11.7`, else the newest `pyenv versions`
          3.x) running bench_python.py with PYTHONMALLOC=malloc, so every object goes
          through malloc; skipped, with a message, if no pyenv CPython is installed.

Configurations, run interleaved (a round runs each once, in a rotating order), the
median of --runs rounds reported:
  baseline      no sampler
  hooks-only    sampler preloaded, interval 2^40 (no samples): the cost of the hooks
  default       the sampler's default interval
  64KiB         LIFETIME_INTERVAL_BYTES=65536
  4KiB-builtin / 4KiB-glibc / 4KiB-libunwind
                the unwinder comparison: a 4 KiB interval gives ~16x more samples
                than 64 KiB, so the cost per sample stands out of the run-to-run
                noise (warm caches: cheaper per sample than at sparse intervals)

CPU time is the child's user+sys from os.wait4.  Overhead = (cpu - baseline) /
baseline of the medians; "paired" is the median over rounds of cpu/baseline - 1
within the same round (robust to slow drift of a shared machine); cost per sample =
(cpu - baseline) / samples (samples taken, from the profiles' trailers).

On a shared or virtualised machine run-to-run noise can exceed the 2% being
measured, so when `perf` is available one extra run of each configuration is
recorded with `perf record -e cpu-clock`, and the share of CPU samples spent in the
sampler's own code (liblifetime_sampler.so, plus libunwind / libgcc_s for the other
unwinders, minus their share in the baseline run) is reported as "perf %": a
low-noise measurement of the sampler's direct cost.  It leaves out time in libc and
the kernel on the sampler's behalf (clock_gettime, page faults on its tables, the
flush's write()), shown separately as the change of the kernel's share ("kernel +").
"perf us/sample" = (perf % - perf % of hooks-only) * cpu / samples.

Output: a table on stdout and JSON (--json, default out/bench/profiler_overhead.json).
"""

from __future__ import annotations

import argparse
import glob
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

from profiler import launch  # noqa: E402
from profile_format import read_profile  # noqa: E402

BENCH = REPO / "workloads" / "bench"
TARGETS = {"default": 2.0, "64KiB": 15.0}  # overhead targets, percent of CPU


def ensure_clang() -> str | None:
    clang = shutil.which("clang-14")
    if clang:
        return clang
    print("clang-14 not found: installing it with apt-get", flush=True)
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    try:
        subprocess.run(sudo + ["apt-get", "update", "-qq"], check=True, env=env)
        subprocess.run(sudo + ["apt-get", "install", "-y", "-qq", "clang-14"], check=True, env=env)
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"cannot install clang-14 ({e}); skipping the clang workload")
        return None
    return shutil.which("clang-14")


def find_pyenv_python() -> str | None:
    pyenv = shutil.which("pyenv") or os.path.expanduser("~/.pyenv/bin/pyenv")
    if not os.path.exists(pyenv):
        return None
    prefixes = []
    r = subprocess.run([pyenv, "prefix", "3.11.7"], capture_output=True, text=True)
    if r.returncode == 0 and r.stdout.strip():
        prefixes.append(r.stdout.strip())
    r = subprocess.run([pyenv, "versions", "--bare"], capture_output=True, text=True)

    def version_key(v):
        try:
            return tuple(int(x) for x in v.split("."))
        except ValueError:
            return (0,)

    for v in sorted(r.stdout.split(), key=version_key, reverse=True):
        if v.startswith("3."):
            p = subprocess.run([pyenv, "prefix", v], capture_output=True, text=True)
            if p.returncode == 0:
                prefixes.append(p.stdout.strip())
    for prefix in prefixes:
        for name in sorted(glob.glob(os.path.join(prefix, "bin", "python3.*")), key=len):
            if os.access(name, os.X_OK) and not name.endswith("-config"):
                return name
    return None


def run_once(cmd, env, cwd) -> tuple[float, float]:
    """(cpu seconds user+sys, wall seconds) of one run; raises on failure."""
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            err.seek(0)
            raise RuntimeError(f"{cmd[0]} failed ({proc.returncode}): {err.read().decode()[-2000:]}")
        err.seek(0)
        noise = err.read().decode()
        if "lifetime-sampler:" in noise:
            raise RuntimeError(f"sampler complained: {noise.strip()}")
    return usage.ru_utime + usage.ru_stime, wall


def profile_counts(out_dir) -> dict:
    samples = dropped = allocs = files = 0
    for path in glob.glob(os.path.join(out_dir, "*.ltprof")):
        prof = read_profile(path)
        files += 1
        if prof.trailer is not None:
            samples += prof.trailer.samples + prof.trailer.dropped_samples
            dropped += prof.trailer.dropped_samples
            allocs += prof.trailer.total_allocations
        else:
            samples += len(prof.samples)
    return {"samples": samples, "dropped": dropped, "allocations": allocs, "files": files}


SAMPLER_DSOS = ("liblifetime_sampler", "libunwind.so", "libgcc_s.so")


def perf_shares(cmd, env, cwd) -> dict | None:
    """{"sampler": %, "kernel": %} of cpu-clock samples (self time by DSO)."""
    perf = shutil.which("perf")
    if not perf:
        return None
    data = os.path.join(cwd, "perf.data")
    rec = subprocess.run([perf, "record", "-q", "-e", "cpu-clock", "-F", "2000", "-o", data,
                          "--", *cmd], env=env, cwd=cwd, capture_output=True)
    if rec.returncode != 0:
        return None
    rep = subprocess.run([perf, "report", "-i", data, "--stdio", "--no-children",
                          "--sort", "dso"], capture_output=True, text=True)
    os.remove(data)
    shares = {"sampler": 0.0, "kernel": 0.0}
    for line in rep.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].endswith("%"):
            dso = parts[-1]
            if any(d in dso for d in SAMPLER_DSOS):
                shares["sampler"] += float(parts[0].rstrip("%"))
            elif "kernel" in dso:
                shares["kernel"] += float(parts[0].rstrip("%"))
    return shares


def configs(compare_unwinders: bool) -> list[tuple[str, dict | None]]:
    out = [("baseline", None),
           ("hooks-only", {"LIFETIME_INTERVAL_BYTES": str(1 << 40)}),
           ("default", {}),
           ("64KiB", {"LIFETIME_INTERVAL_BYTES": "65536"})]
    if compare_unwinders:
        out += [(f"4KiB-{u}", {"LIFETIME_INTERVAL_BYTES": "4096", "LIFETIME_UNWINDER": u})
                for u in ("builtin", "glibc", "libunwind")]
    return out


def bench_workload(name, cmd, base_env, runs, compare_unwinders, scratch) -> dict:
    lib = launch.sampler_library_path()
    cfgs = configs(compare_unwinders)
    if compare_unwinders and not os.path.exists("/usr/lib/x86_64-linux-gnu/libunwind.so.8"):
        cfgs = [c for c in cfgs if c[0] != "4KiB-libunwind"]
    results = {c: {"cpu": [], "wall": [], "samples": [], "allocations": [], "dropped": []}
               for c, _ in cfgs}
    print(f"\n== {name}: {' '.join(cmd)}  ({runs} interleaved rounds)", flush=True)
    for r in range(runs):
        order = cfgs[r % len(cfgs):] + cfgs[:r % len(cfgs)]
        for cfg, extra in order:
            out_dir = tempfile.mkdtemp(prefix=f"{name}-{cfg}-", dir=scratch)
            env = dict(base_env)
            if extra is not None:
                env = launch.profiled_env(out_dir, extra_env=extra, base=base_env)
            cpu, wall = run_once(cmd, env, scratch)
            res = results[cfg]
            res["cpu"].append(cpu)
            res["wall"].append(wall)
            if extra is not None:
                counts = profile_counts(out_dir)
                for k in ("samples", "allocations", "dropped"):
                    res[k].append(counts[k])
            shutil.rmtree(out_dir, ignore_errors=True)
        print(f"  round {r + 1}/{runs}: " + ", ".join(
            f"{c} {results[c]['cpu'][-1]:.2f}s" for c, _ in cfgs), flush=True)
    base = statistics.median(results["baseline"]["cpu"])
    base_perf = perf_shares(cmd, base_env, scratch)
    summary = {}
    for cfg, extra in cfgs:
        res = results[cfg]
        cpu = statistics.median(res["cpu"])
        paired = [c / b - 1 for c, b in zip(res["cpu"], results["baseline"]["cpu"])]
        row = {"cpu_s_median": cpu, "cpu_s_all": res["cpu"],
               "wall_s_median": statistics.median(res["wall"]),
               "overhead_pct": 100.0 * (cpu - base) / base,
               "paired_overhead_pct": 100.0 * statistics.median(paired),
               # run-to-run noise: spread of the paired ratios (0 for the baseline)
               "paired_sd_pct": 100.0 * statistics.stdev(paired) if len(paired) > 1 else 0.0}
        if extra is not None and base_perf is not None:
            out_dir = tempfile.mkdtemp(prefix=f"{name}-{cfg}-perf-", dir=scratch)
            shares = perf_shares(cmd, launch.profiled_env(out_dir, extra_env=extra,
                                                          base=base_env), scratch)
            shutil.rmtree(out_dir, ignore_errors=True)
            if shares is not None:
                row["perf_pct"] = shares["sampler"] - base_perf["sampler"]
                row["perf_kernel_delta_pct"] = shares["kernel"] - base_perf["kernel"]
        if res["samples"]:
            samples = statistics.median(res["samples"])
            row["samples_median"] = samples
            row["allocations_median"] = statistics.median(res["allocations"])
            row["dropped_max"] = max(res["dropped"])
            row["us_per_sample"] = (1e6 * (cpu - base) / samples) if samples else None
            # per-sample cost net of the hooks' fixed cost (hooks-only run)
            if "hooks-only" in results and results["hooks-only"]["cpu"] and samples:
                hooks = statistics.median(results["hooks-only"]["cpu"])
                row["us_per_sample_net_of_hooks"] = 1e6 * (cpu - hooks) / samples
                hooks_perf = summary.get("hooks-only", {}).get("perf_pct")
                if "perf_pct" in row and hooks_perf is not None:
                    row["perf_us_per_sample"] = (1e6 * (row["perf_pct"] - hooks_perf) / 100
                                                 * base / samples)
        summary[cfg] = row
    return summary


def print_table(all_results: dict) -> None:
    print()
    print("overhead: of the median CPU times; paired: median of per-round ratios; perf %: "
          "sampler's share of CPU samples (perf), kernel +: change of the kernel's share")
    head = (f"{'workload':8} {'config':16} {'cpu s':>7} {'overhead':>9} {'paired':>8} "
            f"{'samples':>8} {'us/sample':>9} {'perf %':>7} {'kernel +':>8} "
            f"{'perf us/sample':>14}  target")
    print(head)
    print("-" * len(head))
    for workload, rows in all_results.items():
        if not isinstance(rows, dict) or "baseline" not in rows:
            print(f"{workload:8} {rows}")
            continue
        for cfg, row in rows.items():
            target = TARGETS.get(cfg)
            verdict = ""
            if target is not None:
                ok = row["overhead_pct"] <= target
                verdict = f"<= {target:.0f}%: median {'ok' if ok else 'over'}"
                if "perf_pct" in row:
                    ok = row["perf_pct"] + max(0.0, row["perf_kernel_delta_pct"]) <= target
                    verdict += f", perf {'ok' if ok else 'over'}"
            us = row.get("us_per_sample")
            perf = row.get("perf_pct")
            kern = row.get("perf_kernel_delta_pct")
            pus = row.get("perf_us_per_sample")
            print(f"{workload:8} {cfg:16} {row['cpu_s_median']:7.3f} "
                  f"{row['overhead_pct']:8.2f}% {row['paired_overhead_pct']:7.2f}% "
                  f"{row.get('samples_median', ''):>8} "
                  f"{'' if us is None else f'{us:9.2f}':>9} "
                  f"{'' if perf is None else f'{perf:6.2f}%':>7} "
                  f"{'' if kern is None else f'{kern:+7.2f}%':>8} "
                  f"{'' if pus is None else f'{pus:14.2f}':>14}  {verdict}")
        noise = [r["paired_sd_pct"] for c, r in rows.items() if c != "baseline"]
        if noise:
            print(f"{workload:8} run-to-run noise: sd of paired ratios {min(noise):.1f}-"
                  f"{max(noise):.1f}%")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=7, help="interleaved rounds (>= 5; default 7)")
    ap.add_argument("--workloads", default="clang,python")
    ap.add_argument("--no-unwinder-comparison", action="store_true",
                    help="skip the 4 KiB builtin/glibc/libunwind runs")
    ap.add_argument("--json", default=str(REPO / "out" / "bench" / "profiler_overhead.json"))
    args = ap.parse_args(argv)
    if args.runs < 5:
        ap.error("--runs must be at least 5")
    lib = launch.sampler_library_path()
    scratch = tempfile.mkdtemp(prefix="lifetime-bench-")
    base_env = {k: v for k, v in os.environ.items()
                if not k.startswith("LIFETIME_") and k != "LD_PRELOAD"}
    results: dict = {}
    try:
        wanted = args.workloads.split(",")
        if "clang" in wanted:
            clang = ensure_clang()
            if clang:
                cmd = [clang, "-O2", "-std=c++17", "-c", str(BENCH / "bench_compile.cpp"),
                       "-o", os.path.join(scratch, "bench.o")]
                results["clang"] = bench_workload("clang", cmd, base_env, args.runs,
                                                  not args.no_unwinder_comparison, scratch)
            else:
                results["clang"] = "skipped: clang-14 unavailable"
        if "python" in wanted:
            python = find_pyenv_python()
            if python:
                env = dict(base_env, PYTHONMALLOC="malloc", PYTHONHASHSEED="0")
                cmd = [python, str(BENCH / "bench_python.py")]
                results["python"] = bench_workload("python", cmd, env, args.runs,
                                                   not args.no_unwinder_comparison, scratch)
                results["python_interpreter"] = python
            else:
                msg = "skipped: no pyenv CPython found (`pyenv versions` lists none)"
                print(msg)
                results["python"] = msg
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print_table({k: v for k, v in results.items() if k in ("clang", "python")})
    meta = {"library": lib, "runs": args.runs, "host": platform.node(),
            "cpus": os.cpu_count(), "load_avg_at_end": os.getloadavg(),
            "targets_pct": TARGETS, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump({"meta": meta, "results": results}, f, indent=2)
    print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
