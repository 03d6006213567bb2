"""The back-off threshold, chosen on selection data (issue 33 item 6; HParams.backoff_below).

On the selection splits of `defaults_sweep.py --on selection` (its saved models and
datasets: OUT/<family>/<config>-seed<N>/model-seed<N>), each test context gets the model's
class, or, when the model's top probability is below a threshold, the class of a
fallback: the training data's majority class, or the site table's (its own fallback the
majority), or the served back-off's (`served`: model/backoff.py, the site keyed by its
frame text, as the export serves it).  Weighted and unweighted exact, overall and on
unseen contexts, per threshold, against the model alone and the best table.  The choice:
the largest threshold whose `served` rule is no lower than the model alone (0.05 points of
rounding) in either weighting of any family, overall and unseen.

    .venv/bin/python benchmarks/backoff_selection.py [--sweep out/defaults_sweep_selection] \\
        [--config wp0.75] [--seeds 0 1 2]
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import os
import pathlib
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from core.native_log import native_notices_dropped  # noqa: E402
from model import backoff, baselines, io  # noqa: E402
from model.data import load_dataset  # noqa: E402
from model.evaluate import training_data  # noqa: E402
from model.train import encode  # noqa: E402

THRESHOLDS = (0.0, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
PURE = (0.8, 0.9, 0.95, 0.99, 1.0)  # backoff_pure candidates (0: off, the rules above)


def exact(pred, label, weight, mask) -> tuple[float, float]:
    ok = (pred == label)[mask]
    w = weight[mask]
    return (float((ok * w).sum() / w.sum()) if w.sum() else float("nan"),
            float(ok.mean()) if mask.any() else float("nan"))


def rule_name(fallback: str, below: float, pure: float) -> str:
    return f"{fallback}<{below:g}" + (f",pure>={pure:g}" if pure else "")


def one(model_dir: str, test_dir: str) -> dict:
    md = io.read_model_dir(model_dir)
    model = md.load_keras()
    _, train = training_data(md.config, None)
    test = load_dataset(test_dir).all()
    x = encode(test, md.hparams)
    with native_notices_dropped():
        probs = model.predict(x, batch_size=2048, verbose=0)
    top, cls = probs.max(axis=-1).astype(np.float32), probs.argmax(axis=-1)
    fitted = baselines.fit_baselines(train.frames, train.label, train.weight)
    # The served back-off's table (model/train.py fit_backoff's); each rule below is it with
    # other thresholds, applied by the code that serves it.
    served = backoff.fit(train.frames, train.label, train.weight, 0.0,
                         baselines.majority_class(train.label, train.weight),
                         2 if md.context.size_feature else 1)
    found = served.lookup(test.frames)[1] > 0  # (a site in the table has purity > 0)
    unseen = ~baselines.seen_mask(train.frames, test.frames)
    scopes = (("overall", np.ones(len(test), bool)), ("unseen", unseen))

    def score(pred):
        return {s: exact(pred, test.label, test.weight, m) for s, m in scopes}

    out = {"tables": {name: score(fitted[name](test.frames)) for name in ("majority", "exact", "site")},
           "rules": {}}
    for fb in ("majority", "site"):  # analysis: the tables' classes where the model is unsure
        table = fitted[fb](test.frames)
        for t in THRESHOLDS:
            out["rules"][rule_name(fb, t, 0.0)] = score(np.where(top < np.float32(t), table, cls))
    for t in THRESHOLDS:
        for q in (0.0, *PURE):
            pred = dataclasses.replace(served, below=t, pure=q).apply(probs, test.frames)
            out["rules"][rule_name("served", t, q)] = score(pred)
            # `seen`: the same, but a site training never saw keeps the model's class
            out["rules"][rule_name("seen", t, q)] = score(np.where(found, pred, cls))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sweep", default=str(ROOT / "out" / "defaults_sweep_selection"))
    ap.add_argument("--config", default="wp0.75")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--out", default=None, help="default SWEEP/backoff.md")
    args = ap.parse_args()
    lines = [f"# Back-off on selection data (config {args.config}, seeds {args.seeds})", "",
             "Weighted / unweighted exact (%), mean over seeds; a rule `F<t`: the fallback F's "
             "class where the model's top probability is below t (`F<0`: the model alone).", ""]
    rules = [(fb, t, q) for fb in ("served", "seen") for t in THRESHOLDS for q in (0.0, *PURE)]
    gains: dict[tuple, list[float]] = {r: [] for r in rules}
    for fam in sorted(os.listdir(args.sweep)):
        tests = sorted(glob.glob(os.path.join(args.sweep, fam, "datasets", "test-*")))
        if not tests:
            continue
        runs = []
        for s in args.seeds:
            m = os.path.join(args.sweep, fam, f"{args.config}-seed{s}", f"model-seed{s}")
            if os.path.isdir(m):
                runs.append(one(m, tests[0]))
        if not runs:
            continue

        def mean(get):
            v = np.array([get(r) for r in runs])
            return v.mean(axis=0)

        lines += [f"## {fam} ({os.path.basename(tests[0])}, {len(runs)} seeds)", "",
                  "| predictor | overall | unseen |", "|---|---|---|"]
        for name in ("majority", "exact", "site"):
            o, u = mean(lambda r: r["tables"][name]["overall"]), mean(lambda r: r["tables"][name]["unseen"])
            lines.append(f"| table: {name} | {100 * o[0]:.1f} / {100 * o[1]:.1f} | {100 * u[0]:.1f} / {100 * u[1]:.1f} |")
        for rule in runs[0]["rules"]:
            o, u = mean(lambda r: r["rules"][rule]["overall"]), mean(lambda r: r["rules"][rule]["unseen"])
            lines.append(f"| {rule} | {100 * o[0]:.1f} / {100 * o[1]:.1f} | {100 * u[0]:.1f} / {100 * u[1]:.1f} |")
        lines.append("")
        alone = [mean(lambda r: r["rules"]["served<0"][sc]) for sc in ("overall", "unseen")]
        for rl in rules:
            got = [mean(lambda r: r["rules"][rule_name(*rl)][sc]) for sc in ("overall", "unseen")]
            gains[rl] += [float(100 * (a - b)) for ru, al in zip(got, alone) for a, b in zip(ru, al)]
    # Lowers nothing (0.05 points of rounding) in any family, weighting, overall or unseen;
    # of those the most gained in all, then the lowest threshold and the purest sites.
    ok = [rl for rl in rules if gains[rl] and min(gains[rl]) >= -0.05]
    best = max(ok, key=lambda rl: (round(sum(gains[rl]), 2), -rl[1], rl[2] or 2)) if ok else None
    lines += ["## Choice", "", "| served rule | worst change against the model alone, points "
              "(any family, weighting, overall or unseen) | sum of changes |", "|---|---|---|"]
    lines += [f"| {rule_name(*rl)} | {min(gains[rl]):+.2f} | {sum(gains[rl]):+.2f} |" for rl in rules
              if gains[rl]]
    lines += ["", f"Chosen: **{rule_name(*best)}** (lowers nothing, gains the most)." if best
              else "No rule lowers nothing.", ""]
    text = "\n".join(lines) + "\n"
    out = args.out or os.path.join(args.sweep, "backoff.md")
    pathlib.Path(out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
