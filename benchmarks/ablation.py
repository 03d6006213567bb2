#!/usr/bin/env python3
"""Hyperparameter ablation on datasets benchmarks/cross_version.py already built: each
named variant is trained on the training dataset with several seeds and scored on the
test datasets (mean ± sd over seeds; overall and on contexts unseen in training).

    nice .venv/bin/python benchmarks/ablation.py \\
        --train out/cross_version/redis/datasets/train \\
        --test out/cross_version/redis/datasets/test-6.2.14-run1 \\
        --variant default='{}' --variant no-dropout='{"unk_dropout": 0}' --seeds 0 1 2

Writes --out/ablation.json and ablation.md (default: out/ablation/<name>).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

FIGURES = ("weighted_exact", "unweighted_exact", "weighted_off_by_one")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", required=True, metavar="DATASET")
    ap.add_argument("--test", nargs="+", required=True, metavar="DATASET")
    ap.add_argument("--variant", action="append", required=True, metavar="NAME=JSON",
                    help="hyperparameter overrides; repeat")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--name", default="ablation")
    ap.add_argument("--out", default=os.path.join(ROOT, "out", "ablation"))
    args = ap.parse_args()

    from model.cli import parse_hparams
    from model.evaluate import evaluate
    from model.metrics import headline
    from model.train import train

    variants = {}
    for v in args.variant:
        name, _, text = v.partition("=")
        variants[name] = json.loads(text or "{}")
    rows = {}
    with tempfile.TemporaryDirectory(prefix="lt-ablation-") as tmp:
        for name, overrides in variants.items():
            hp = parse_hparams(overrides, refit=True)
            runs = []
            for seed in args.seeds:
                model_dir = os.path.join(tmp, f"{name}-{seed}")
                start = time.monotonic()
                metrics = train([args.train], model_dir, hp.replace(seed=seed), verbose=0)
                r = evaluate(model_dir, args.test, split="all", train_dirs=[args.train])
                runs.append({
                    "seconds": time.monotonic() - start,
                    "train": headline(metrics["train"]["model"]),
                    **{scope: {p: headline(r[scope][p]) for p in r[scope]}
                       for scope in ("overall", "unseen")}})
                print(f"{name} seed {seed}: overall weighted "
                      f"{runs[-1]['overall']['model']['weighted_exact']:.1%}, unweighted "
                      f"{runs[-1]['overall']['model']['unweighted_exact']:.1%}; train fit "
                      f"{runs[-1]['train']['unweighted_exact']:.1%}", flush=True)
            rows[name] = {"hparams": overrides, "runs": runs}
    out = os.path.join(args.out, args.name)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "ablation.json"), "w") as f:
        json.dump({"train": args.train, "test": args.test, "seeds": args.seeds, "rows": rows},
                  f, indent=1)

    def cell(runs, scope, fig, who="model"):
        vals = [r[scope][who][fig] for r in runs]
        sd = statistics.stdev(vals) if len(vals) > 1 else 0.0  # sample sd (n - 1)
        return f"{100 * statistics.fmean(vals):.1f} ± {100 * sd:.1f} (n={len(vals)})"

    lines = [f"# {args.name}", "", f"train {args.train}; test {', '.join(args.test)}; "
             f"seeds {args.seeds}", "",
             "| variant | overall w. exact | overall unw. exact | overall w. off-by-one | "
             "unseen w. exact | unseen unw. exact | train fit unw. | s/seed |",
             "|---|---|---|---|---|---|---|---|"]
    for name, row in rows.items():
        runs = row["runs"]
        fit = [r["train"]["unweighted_exact"] for r in runs]
        lines.append(f"| {name} | " + " | ".join(cell(runs, "overall", f) for f in FIGURES)
                     + f" | {cell(runs, 'unseen', 'weighted_exact')} | "
                     f"{cell(runs, 'unseen', 'unweighted_exact')} | "
                     f"{100 * statistics.fmean(fit):.1f} | "
                     f"{statistics.fmean(r['seconds'] for r in runs):.0f} |")
    best = rows[next(iter(rows))]["runs"][0]
    lines += ["", "tables (first variant's first seed): " + ", ".join(
        f"{p} overall {100 * best['overall'][p]['weighted_exact']:.1f} / "
        f"{100 * best['overall'][p]['unweighted_exact']:.1f}, unseen "
        f"{100 * best['unseen'][p]['weighted_exact']:.1f} / "
        f"{100 * best['unseen'][p]['unweighted_exact']:.1f}"
        for p in best["overall"] if p != "model")]
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out, "ablation.md"), "w") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
