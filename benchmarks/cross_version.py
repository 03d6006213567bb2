#!/usr/bin/env python3
"""Real cross-version benchmark: profile real programs, build datasets, train on the
older versions, report on a newer one (issue 4, part 5).

Families (profiling reuses benchmarks/real_programs.py):
  cpython  pyenv CPython builds (full symbols) running workloads/bench/bench_python_service.py
           (a ~70 s service loop: objects from microseconds to never freed) under
           PYTHONMALLOC=malloc, one process per version; versions are pyenv names.
  clang    Debian clang++-N compiling workloads/bench/*.cpp repeatedly for --seconds;
           only exported symbols are named (see the named-frame share in the report).

    nice .venv/bin/python benchmarks/cross_version.py cpython --train 3.10.13 3.11.7 --test 3.12.1
    nice .venv/bin/python benchmarks/cross_version.py clang --train 14 --test 15
    nice .venv/bin/python benchmarks/cross_version.py proxy --train v1 --test v2 \
        --seconds 36 --seeds 0 1 2 3 4

Outputs under --out/FAMILY: per-version profiles and datasets (the first training
version builds the vocabulary; the rest reuse it), model/, report/ (report.md, .html,
.json, PNGs) and commands.txt with the commands that produced them. Existing
profiles are reused; delete them to re-profile.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import real_programs  # noqa: E402

from pipeline.dataset import DatasetConfig, build_dataset  # noqa: E402

SERVICE = os.path.join(ROOT, "workloads", "bench", "bench_python_service.py")


def cpython_service_commands(version: str, seconds: int):
    commands, env = real_programs.cpython_commands(version, seconds)
    python = commands[0][0]
    return [[python, SERVICE, str(seconds)]], env


def proxy_commands(version: str, seconds: int):
    """The bundled proxy workload (v1, v2), 12 s per run, runs repeated for --seconds."""
    binary = os.path.join(ROOT, "build", "workloads", "proxy_server", f"proxy_server_{version}")
    if not os.path.exists(binary):
        raise SystemExit(f"{binary}: not built (run `make native`)")
    return [[binary, "--seconds", "12"]], {}


real_programs.FAMILIES["cpython"] = cpython_service_commands
real_programs.FAMILIES["proxy"] = proxy_commands


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("family", choices=sorted(real_programs.FAMILIES))
    ap.add_argument("--train", nargs="+", required=True, metavar="VERSION")
    ap.add_argument("--test", nargs="+", required=True, metavar="VERSION")
    ap.add_argument("--seconds", type=int, default=70, help="profiled time per version")
    ap.add_argument("--interval", type=int, default=None, help="sampling interval (bytes)")
    ap.add_argument("--out", default=os.path.join(ROOT, "out", "cross_version"))
    ap.add_argument("--fractions", default="0.1,0.3,1",
                    help="sampling fractions for the accuracy-vs-sampling plot")
    ap.add_argument("--hparams", default="{}", help="JSON hyperparameter overrides")
    ap.add_argument("--profile-only", action="store_true")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0],
                    help="training seeds: the first gets the full report; every seed's "
                         "model is scored on the test versions (seeds.json)")
    args = ap.parse_args()

    base = os.path.join(args.out, args.family)
    log = [f"cd {ROOT} && nice .venv/bin/python benchmarks/cross_version.py "
           + " ".join(shlex.quote(a) for a in sys.argv[1:])]
    vocab, dirs = None, {}
    for version in args.train + args.test:
        out = os.path.join(base, version)
        profiles = real_programs.profile_version(args.family, version, out, args.seconds,
                                                 args.interval)
        if args.profile_only:
            continue
        ds = os.path.join(out, "dataset")
        if not os.path.exists(os.path.join(ds, "manifest.json")):
            build_dataset([(os.path.join(profiles, "*.ltprof"), f"{args.family}-{version}")],
                          ds, DatasetConfig(), vocab_path=vocab)
        vocab = vocab or os.path.join(ds, "vocab.txt")
        dirs[version] = ds
    if args.profile_only:
        return 0

    from model.cli import parse_hparams
    from model.report import write_report
    from model.train import train

    from model.evaluate import evaluate
    from model.metrics import headline

    hp = parse_hparams(json.loads(args.hparams), refit=True)
    train_dirs = [dirs[v] for v in args.train]
    test_dirs = [dirs[v] for v in args.test]
    model_dir = os.path.join(base, "model")
    start = time.monotonic()
    train(train_dirs, model_dir, hp.replace(seed=args.seeds[0]))
    train_s = time.monotonic() - start
    seeds = {}
    for seed in args.seeds:
        seed_dir = model_dir if seed == args.seeds[0] else f"{model_dir}-seed{seed}"
        if seed != args.seeds[0]:
            train(train_dirs, seed_dir, hp.replace(seed=seed))
        r = evaluate(seed_dir, test_dirs, split="all", train_dirs=train_dirs)
        seeds[seed] = {scope: {name: {k: round(v, 4) for k, v in
                                      headline(r[scope][name]).items()}
                               for name in ("model", "baseline_exact")}
                       for scope in ("unseen", "overall")}
        print(f"seed {seed}: unseen weighted exact model "
              f"{seeds[seed]['unseen']['model']['weighted_exact']:.1%}, lookup table "
              f"{seeds[seed]['unseen']['baseline_exact']['weighted_exact']:.1%}", flush=True)
    with open(os.path.join(base, "seeds.json"), "w") as f:
        json.dump(seeds, f, indent=1)
    fractions = [float(x) for x in args.fractions.split(",")]
    report = write_report(model_dir, train_dirs, test_dirs, os.path.join(base, "report"),
                          fractions=fractions)
    log.append(f"# train: {train_s:.0f} s; report: {os.path.join(base, 'report', 'report.md')}")
    with open(os.path.join(base, "commands.txt"), "w") as f:
        f.write("\n".join(log) + "\n")
    print(json.dumps(report["summary"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
