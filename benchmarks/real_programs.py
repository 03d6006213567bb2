#!/usr/bin/env python3
"""Profiles real programs across versions and builds one dataset per version.

Families:
  cpython  pyenv CPython builds (full .symtab/DWARF) running workloads/bench/bench_python.py
           with PYTHONMALLOC=malloc, repeated until --seconds have passed; versions are
           pyenv names (`pyenv versions`).
  clang    Debian clang-N compiling the bundled C++ corpus (workloads/bench/*.cpp);
           versions are N (installed with apt-get when missing). Only exported
           symbols are named, so the manifests' symbolized-frame share is lower.

  redis    Redis servers (benchmarks/servers/redis.py: 5.0.6, 6.0.16 Debian source build,
           6.2.7, 6.2.9, 6.2.14; >= 7.0 refused) under the sampler, driven by redis-benchmark.
  postgres PostgreSQL (benchmarks/servers/postgres.py: 15.5, 16.2; >= 17 refused), driven
           by pgbench; one profile per backend. For several runs per version (run-to-run
           evaluation) use benchmarks/servers/run_profiles.py.

The first version listed builds the vocabulary; the others reuse it (--vocab), so
datasets of one family share token ids.

    .venv/bin/python benchmarks/real_programs.py cpython 3.10.13 3.11.7 3.12.1
    .venv/bin/python benchmarks/real_programs.py clang 14 15
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from pipeline.dataset import DatasetConfig, build_dataset  # noqa: E402
from profiler import launch  # noqa: E402

BENCH = os.path.join(ROOT, "workloads", "bench")


def cpython_commands(version: str, seconds: int) -> tuple[list[list[str]], dict]:
    if not shutil.which("pyenv"):
        raise SystemExit("cpython: pyenv is not installed on this machine; no CPython with "
                         "full symbols to profile")
    try:
        prefix = subprocess.run(["pyenv", "prefix", version], capture_output=True, text=True,
                                check=True).stdout.strip()
    except subprocess.CalledProcessError:
        raise SystemExit(f"cpython: pyenv has no version {version} (see `pyenv versions`)")
    python = os.path.join(prefix, "bin", "python3")
    script = os.path.join(BENCH, "bench_python.py")
    return [[python, script, "1"]], {"PYTHONMALLOC": "malloc"}


def clang_commands(version: str, seconds: int) -> tuple[list[list[str]], dict]:
    clang = f"clang++-{version}"
    if not shutil.which(clang):
        print(f"installing clang-{version} with apt-get", flush=True)
        subprocess.run(["apt-get", "update", "-qq"], check=True)
        subprocess.run(["apt-get", "install", "-y", "-qq", f"clang-{version}"], check=True)
    sources = sorted(glob.glob(os.path.join(BENCH, "*.cpp")))
    if not sources:
        raise SystemExit(f"clang: no C++ corpus in {BENCH}")
    # Compile the corpus repeatedly until `seconds` pass: one process (file) per compile.
    commands = [[clang, "-std=c++17", "-O2", "-c", src, "-o", os.devnull] for src in sources]
    return commands, {}


def server_family(name: str):
    """A family that profiles a long-running server itself (benchmarks/servers/NAME.py:
    start it under the sampler, drive it with its own load generator, stop it)."""
    def profile_into(version: str, profiles: str, seconds: int, interval: int | None,
                     seed: int) -> dict:
        from benchmarks.servers import run_profiles
        return run_profiles.profile_run(name, version, os.path.dirname(profiles), seconds,
                                        interval, seed)
    profile_into.profiles_itself = True
    return profile_into


FAMILIES = {"cpython": cpython_commands, "clang": clang_commands,
            "redis": server_family("redis"), "postgres": server_family("postgres")}


def profile_version(family: str, version: str, out: str, seconds: int, interval: int | None,
                    seed: int = 1):
    """Profiles VERSION into OUT/profiles (reused when present). Command families run
    their commands until SECONDS pass; server families profile themselves (SEED picks
    their load plan; OUT/run.json records the run)."""
    profiles = os.path.join(out, "profiles")
    if getattr(FAMILIES[family], "profiles_itself", False):
        FAMILIES[family](version, profiles, seconds, interval, seed)
        return profiles
    commands, env = FAMILIES[family](version, seconds)
    if glob.glob(os.path.join(profiles, "*.ltprof")):
        print(f"{family} {version}: reusing profiles in {profiles}", flush=True)
        return profiles
    os.makedirs(profiles, exist_ok=True)
    deadline = time.monotonic() + seconds
    runs = 0
    while True:
        for cmd in commands:
            print(f"{family} {version}: profiling {' '.join(os.path.basename(c) for c in cmd[:2])}",
                  flush=True)
            code = launch.run_profiled(cmd, out_dir=profiles, interval=interval,
                                       version_label=f"{family}-{version}", extra_env=env)
            if code != 0:
                raise SystemExit(f"{family} {version}: {cmd} exited with {code}")
            runs += 1
        if time.monotonic() >= deadline:
            return profiles


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("family", choices=sorted(FAMILIES))
    ap.add_argument("versions", nargs="+")
    ap.add_argument("--seconds", type=int, default=60, help="profiled time per version")
    ap.add_argument("--interval", type=int, default=None, help="sampling interval (bytes)")
    ap.add_argument("--out", default=os.path.join(ROOT, "out", "real"))
    args = ap.parse_args()

    vocab = None
    summary = {}
    for version in args.versions:
        out = os.path.join(args.out, args.family, version)
        profiles = profile_version(args.family, version, out, args.seconds, args.interval)
        manifest = build_dataset([(os.path.join(profiles, "*.ltprof"), f"{args.family}-{version}")],
                                 os.path.join(out, "dataset"), DatasetConfig(), vocab_path=vocab)
        vocab = vocab or os.path.join(out, "dataset", "vocab.txt")
        programs = manifest["files"]["programs"]
        summary[version] = {
            "contexts": {k: v["contexts"] for k, v in manifest["splits"].items()},
            "samples": sum(p["samples"] for p in programs.values()),
            "symbolized_frame_share": {k: round(p["symbolized_frame_share"], 4)
                                       for k, p in programs.items()},
            "dropped": manifest["dropped"]["bad_records_or_files"],
            "class_histogram_contexts": [a + b for a, b in zip(
                manifest["splits"]["train"]["class_histogram_contexts"],
                manifest["splits"]["eval"]["class_histogram_contexts"])]}
        print(json.dumps({version: summary[version]}, indent=1), flush=True)
    with open(os.path.join(args.out, args.family, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
