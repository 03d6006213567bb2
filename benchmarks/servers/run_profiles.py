#!/usr/bin/env python3
"""Profiles real servers (Redis, PostgreSQL) per version, several runs each.

    .venv/bin/python -m benchmarks.servers.run_profiles redis 5.0.6 6.0.16 6.2.7 6.2.9 6.2.14 --runs 2
    .venv/bin/python -m benchmarks.servers.run_profiles postgres 15.5 16.2 --runs 2
    .venv/bin/python -m benchmarks.servers.run_profiles --summary-only

Run k of a version uses load seed SEED + k (default SEED 0: run1 = seed 1, run2 =
seed 2), so run 1 can train and run 2 test a within-version (run-to-run) evaluation.
Output, per run:

    OUT/<family>/<version>/run<k>/profiles/*.ltprof   one file per server process
    OUT/<family>/<version>/run<k>/run.json            the run record (plan, phases,
                                                      wall time, server binaries, counts)

and OUT/summary.json over every run found under OUT (files, samples, freed, censored,
wall time). A run whose profiles exist is kept unless --force.
Versions are fetched/built into the cache first (see redis.py / postgres.py);
Redis >= 7.0 and PostgreSQL >= 17 are refused.
"""

from __future__ import annotations

import argparse
import glob
import importlib
import json
import os
import shutil
import sys
import time


from benchmarks.servers import common  # noqa: E402

FAMILIES = ("redis", "postgres")
DEFAULT_OUT = common.REPO / "out" / "servers"


def family_module(family: str):
    if family not in FAMILIES:
        raise ValueError(f"unknown server family {family!r} (known: {', '.join(FAMILIES)})")
    return importlib.import_module(f"benchmarks.servers.{family}")


def profile_run(family: str, version: str, run_dir: str, seconds: float, interval: int | None,
                seed: int, force: bool = False) -> dict:
    """One profiled run into RUN_DIR/profiles (+ run.json); reused when complete."""
    module = family_module(family)
    module.check_version(version)
    profiles = os.path.join(run_dir, "profiles")
    record_path = os.path.join(run_dir, "run.json")
    if not force and glob.glob(os.path.join(profiles, "*.ltprof")):
        print(f"{family} {version}: reusing {run_dir}", flush=True)
        if not os.path.isfile(record_path):
            return {"family": family, "version": version, "reused": True}
        with open(record_path) as f:
            return json.load(f)
    shutil.rmtree(profiles, ignore_errors=True)
    os.makedirs(profiles)
    print(f"{family} {version}: profiling {seconds:g} s, seed {seed} -> {profiles}", flush=True)
    t0 = time.monotonic()
    record = module.profile(version, profiles, seconds=seconds, interval=interval, seed=seed)
    record["total_wall_s"] = round(time.monotonic() - t0, 2)
    try:
        record["counts"] = common.summarize_profiles(profiles)
    except ImportError as e:  # outside the project's venv: counts come later
        record["counts"] = {"error": f"not counted ({e})"}
    with open(record_path, "w") as f:
        json.dump(record, f, indent=2)
    c = record["counts"]
    print(f"{family} {version}: {c.get('files')} files, {c.get('samples')} samples "
          f"({c.get('freed')} freed, {c.get('censored')} censored) in "
          f"{record['total_wall_s']} s", flush=True)
    return record


def write_summary(out: str) -> dict:
    """OUT/summary.json: every run under OUT, counted from its profiles."""
    summary: dict = {}
    for record_path in sorted(glob.glob(os.path.join(out, "*", "*", "run*", "run.json"))):
        run_dir = os.path.dirname(record_path)
        family, version, run = run_dir.split(os.sep)[-3:]
        with open(record_path) as f:
            record = json.load(f)
        profiles = os.path.join(run_dir, "profiles")
        counts = common.summarize_profiles(profiles)
        summary.setdefault(family, {}).setdefault(version, {})[run] = {
            "profiles": os.path.relpath(profiles, common.REPO) if profiles.startswith(
                str(common.REPO)) else profiles,
            "seed": record.get("seed"),
            "files": counts["files"], "samples": counts["samples"],
            "freed": counts["freed"], "censored": counts["censored"],
            "stacks_summed_over_files": counts["stacks"],
            "bad_files": counts["bad_files"],
            "files_without_trailer": counts["files_without_trailer"],
            "dropped_samples": counts["dropped_samples"],
            "load_seconds": record.get("seconds"),
            "wall_s": record.get("total_wall_s", record.get("wall_s")),
            "failed_phases": record.get("failed_phases", []),
        }
    path = os.path.join(out, "summary.json")
    with open(path, "w") as f:
        json.dump(summary, f, indent=2)
    print(f"wrote {path}", flush=True)
    return summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("family", nargs="?", choices=FAMILIES)
    ap.add_argument("versions", nargs="*")
    ap.add_argument("--runs", type=int, default=2, help="runs per version (default 2)")
    ap.add_argument("--seconds", type=float, default=60, help="load time per run")
    ap.add_argument("--seed", type=int, default=0, help="run k uses load seed SEED + k")
    ap.add_argument("--interval", type=int, default=None, help="sampling interval (bytes)")
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    ap.add_argument("--force", action="store_true", help="re-profile existing runs")
    ap.add_argument("--summary-only", action="store_true")
    args = ap.parse_args()
    if not args.summary_only:
        if not args.family or not args.versions:
            ap.error("give a family and at least one version (or --summary-only)")
        module = family_module(args.family)
        try:
            for v in args.versions:  # refuse reserved/unknown versions before any work
                module.check_version(v)
        except ValueError as e:
            print(f"run_profiles: error: {e}", file=sys.stderr)
            return 2
        for v in args.versions:
            for k in range(1, args.runs + 1):
                run_dir = os.path.join(args.out, args.family, v, f"run{k}")
                profile_run(args.family, v, run_dir, args.seconds, args.interval,
                            args.seed + k, args.force)
    write_summary(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
