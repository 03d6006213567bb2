#!/usr/bin/env python3
"""Samples per second of `lifetime build-dataset` on DirectRunner (issue 23 target:
>= 150k/s on one core).

Profiles the bundled proxy workload (v1) under the real sampler with a small interval
until at least --samples samples are on disk (cached in --work between runs), then
times the dataset job over them --runs times (median and spread; wall and the process's
CPU seconds, which another job on the machine inflates less), and, outside the timed
runs, once more under cProfile to break the time down by stage (--no-profile skips it).

    .venv/bin/python benchmarks/build_dataset_throughput.py [--samples 1000000] [--runs 3]
    .venv/bin/python benchmarks/build_dataset_throughput.py \
        --beam-arg=--direct_num_workers=2 --beam-arg=--direct_running_mode=multi_processing
"""

from __future__ import annotations

import argparse
import cProfile
import glob
import json
import os
import pstats
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from pipeline.dataset import DatasetConfig, build_dataset  # noqa: E402
from profiler import launch  # noqa: E402
from profile_format import read_profile  # noqa: E402


def count_samples(paths):
    return sum(len(read_profile(p).samples) for p in paths)


def ensure_profiles(work: str, want: int, interval: int, seconds: int) -> list[str]:
    pattern = os.path.join(work, "profiles", "*.ltprof")
    have = count_samples(glob.glob(pattern))
    run = 0
    while have < want:
        run += 1
        print(f"profiling proxy_server_v1 run {run}: {have} of {want} samples so far",
              flush=True)
        code = launch.run_profiled(
            [os.path.join(ROOT, "build/workloads/proxy_server/proxy_server_v1"),
             "--seconds", str(seconds)],
            out_dir=os.path.join(work, "profiles"), interval=interval, version_label="v1")
        if code != 0:
            raise SystemExit(f"proxy_server_v1 exited with {code}")
        have = count_samples(glob.glob(pattern))
    return sorted(glob.glob(pattern))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=1_000_000)
    ap.add_argument("--interval", type=int, default=2048, help="sampling interval for the "
                    "profiles (small, to get many samples quickly)")
    ap.add_argument("--seconds", type=int, default=15)
    ap.add_argument("--work", default=os.path.join(ROOT, "out", "bench", "build_dataset"))
    ap.add_argument("--beam-arg", action="append", default=[],
                    help="extra Beam option, e.g. --beam-arg=--direct_num_workers=2")
    ap.add_argument("--runs", type=int, default=3, help="timed runs (the median is reported)")
    ap.add_argument("--no-profile", dest="profile", action="store_false",
                    help="skip the cProfile run after the timed ones")
    args = ap.parse_args()

    files = ensure_profiles(args.work, args.samples, args.interval, args.seconds)
    samples = count_samples(files)
    out = os.path.join(args.work, "dataset")

    def run():
        return build_dataset([(os.path.join(args.work, "profiles", "*.ltprof"), "v1")], out,
                             DatasetConfig(), beam_args=args.beam_arg)

    walls, cpus = [], []
    for i in range(args.runs):
        start, cpu = time.perf_counter(), time.process_time()
        manifest = run()
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu)
        print(f"run {i + 1}: {walls[-1]:.2f} s wall, {cpus[-1]:.2f} s CPU (this process), "
              f"{samples / walls[-1]:,.0f} samples/s; load {os.getloadavg()[0]:.2f}",
              flush=True)
    elapsed = statistics.median(walls)
    rate = samples / elapsed
    contexts = manifest["splits"]["train"]["contexts"] + manifest["splits"]["eval"]["contexts"]
    print(f"\n{len(files)} profiles, {samples} samples, {contexts} contexts: median "
          f"{elapsed:.2f} s wall ({min(walls):.2f}-{max(walls):.2f} over {len(walls)} runs), "
          f"{rate:,.0f} samples/s ({samples / max(walls):,.0f}-{samples / min(walls):,.0f}; "
          f"target >= 150,000)")
    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        run()
        profiler.disable()
        stats = pstats.Stats(profiler)
        print("\nwhere the time goes (a separate run under cProfile, driver process; "
              "in-process runner only): by own time")
        stats.sort_stats("tottime").print_stats(20)
        print("cumulative, the job's own code:")
        stats.sort_stats("cumulative").print_stats(
            r"pipeline/|profile_format/|elftools|beam/runners/portability", 25)
    result = {"profiles": len(files), "samples": samples, "contexts": contexts,
              "seconds": elapsed, "seconds_runs": walls, "cpu_seconds_runs": cpus,
              "samples_per_second": rate, "beam_args": args.beam_arg}
    with open(os.path.join(args.work, "result.json"), "w") as f:
        json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
