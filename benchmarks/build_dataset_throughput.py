#!/usr/bin/env python3
"""Samples per second of `lifetime build-dataset` on DirectRunner (issue target: >= 50k/s).

Profiles the bundled proxy workload (v1) under the real sampler with a small interval
until at least --samples samples are on disk (cached in --work between runs), then
times the dataset job over them and breaks the time down by stage with cProfile.

    .venv/bin/python benchmarks/build_dataset_throughput.py [--samples 1000000]
"""

from __future__ import annotations

import argparse
import cProfile
import glob
import json
import os
import pstats
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from pipeline.dataset import DatasetConfig, build_dataset  # noqa: E402
from profiler import launch  # noqa: E402
from profiler_proto import read_profile  # noqa: E402


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
    args = ap.parse_args()

    files = ensure_profiles(args.work, args.samples, args.interval, args.seconds)
    samples = count_samples(files)
    out = os.path.join(args.work, "dataset")
    profiler = cProfile.Profile()
    start = time.perf_counter()
    profiler.enable()
    manifest = build_dataset([(os.path.join(args.work, "profiles", "*.ltprof"), "v1")], out,
                             DatasetConfig(), beam_args=args.beam_arg)
    profiler.disable()
    elapsed = time.perf_counter() - start
    rate = samples / elapsed
    contexts = manifest["splits"]["train"]["contexts"] + manifest["splits"]["eval"]["contexts"]
    print(f"\n{len(files)} profiles, {samples} samples, {contexts} contexts: "
          f"{elapsed:.1f} s wall, {rate:,.0f} samples/s (target >= 50,000)")
    stats = pstats.Stats(profiler).sort_stats("cumulative")
    print("\nwhere the time goes (driver process, cumulative):")
    stats.print_stats(r"pipeline/|profiler_proto/|elftools|beam/runners/portability", 15)
    result = {"profiles": len(files), "samples": samples, "contexts": contexts,
              "seconds": elapsed, "samples_per_second": rate, "beam_args": args.beam_arg}
    with open(os.path.join(args.work, "result.json"), "w") as f:
        json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
