#!/usr/bin/env python3
"""Wrapper detection thresholds chosen on selection data (issue 33 item 3).

    nice .venv/bin/python benchmarks/wrapper_selection.py \\
        --train 'out/sel/train/5.0.6/load1/profiles/*.ltprof=redis-5.0.6' ... \\
        --select 'out/sel/6.2.7/load1/profiles/*.ltprof=redis-6.2.7' ... \\
        --out out/wrapper_selection

Every profile is read as `lifetime build-dataset` reads it (pipeline/dataset.py's
ProfileToContextsFn: symbolized, allocator stripped, merged per version and stack,
labelled by T95).  For every point of a grid of `core.context.detect_wrappers`
thresholds:

1. per selection version V (a fold): the wrappers detected on the TRAIN stacks and
   the other selection versions' (as `build-dataset --detect-profiles` detects them),
   added to the built-in ones;
2. the longest-prefix lookup table of the TRAIN contexts so cut (`table_scores`: a
   context is answered by the training contexts sharing its longest seen prefix from
   the site, else the majority class);
3. scored on V's contexts, cut the same way: weighted (by samples) and unweighted (by
   context) exact accuracy, and the share of V's samples in contexts the training
   data never saw; the mean over the folds.

The chosen point has the best mean of the two accuracies; among the points within
TIE (0.1 points) of it, the one that finds the fewest wrappers, then the one nearest
the old rule (caller weight power 1, no chains, then the old thresholds).  No test
version is read: the tool refuses one (core/version_roles.py).

--holdout NAME...: also, for the chosen point, the built-in wrappers NAME are taken
out of the known list and detection is asked to find them again (recall), on TRAIN.

OUT/selection.json and OUT/selection.md: every grid point's figures, the chosen point,
the wrappers it finds per input set.
"""

from __future__ import annotations

import argparse
import collections
import glob
import itertools
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from core import context as C  # noqa: E402
from core import version_roles  # noqa: E402

TIE = 0.001
GRID = {
    "caller_weight_power": (1.0, 0.75, 0.5, 0.25, 0.0),
    "min_disagreement": (0.05, 0.1, 0.2, 0.3),
    "min_callers": (2, 3, 4, 5),
    "min_top_share": (0.8, 0.9, 0.95),
}
OLD = {"caller_weight_power": 1.0, "min_disagreement": 0.1,
       "min_callers": 4, "min_top_share": 0.9}


def read_stacks(specs: list[str]) -> list[dict]:
    """PATTERN=LABEL specs -> rows {version, stack, samples, label}, merged per
    (version, stack) as build-dataset merges them."""
    from apache_beam.pvalue import TaggedOutput
    from pipeline.dataset import DatasetConfig, ProfileToContextsFn

    config = DatasetConfig()
    fn = ProfileToContextsFn(config)
    fn.setup()
    merged = {}
    for spec in specs:
        pattern, _, label = spec.rpartition("=")
        paths = sorted(glob.glob(pattern))
        if not paths:
            raise SystemExit(f"no profiles match {pattern}")
        for path in paths:
            for item in fn.process((path, label)):
                if isinstance(item, TaggedOutput):
                    continue
                key, stats = item
                merged[key] = merged[key].merge(stats) if key in merged else stats
    return [{"version": k[1], "stack": list(k[2]), "samples": s.samples,
             "label": config.labels.label(s.t95())} for k, s in sorted(merged.items())]


def triples(rows):
    return [(r["stack"], r["samples"], r["label"]) for r in rows]


def table_scores(train, select, definition) -> dict:
    """The longest-prefix table of TRAIN scored on SELECT: a context is predicted by
    the training contexts that share its longest seen prefix (from the site down:
    the context itself, ..., its site alone), else the training majority class.  Like
    the model, it reads a context from its site; unlike an exact table, it still
    answers for a context whose deep frames changed between versions."""
    tables = collections.defaultdict(collections.Counter)
    for r in train:
        frames = definition.frames(r["stack"])
        for k in range(len(frames) + 1):
            tables[frames[:k]][r["label"]] += r["samples"]
    contexts = collections.defaultdict(collections.Counter)
    for r in select:
        contexts[(r["version"], definition.frames(r["stack"]))][r["label"]] += r["samples"]
    right = total = right_u = unseen = matched = 0
    for (_, frames), votes in contexts.items():
        n = sum(votes.values())
        y = C.top_class(votes)  # a context's class: its stacks' classes, by samples
        k = next(k for k in range(len(frames), -1, -1) if frames[:k] in tables)
        pred = C.top_class(tables[frames[:k]])
        unseen += n if k < len(frames) else 0
        matched += n * (k > 0)
        right += votes[pred]
        total += n
        right_u += pred == y
    return {"weighted": right / total, "unweighted": right_u / len(contexts),
            "unseen_weight": unseen / total, "site_seen_weight": matched / total,
            "contexts": len(contexts)}


def fold_scores(train, select, base, params) -> tuple[dict, dict]:
    """Per selection version V: wrappers detected on TRAIN and the other selection
    versions (as `build-dataset --detect-profiles` detects them), the table of TRAIN
    scored on V; the mean over the versions, and what each fold found."""
    versions = sorted({r["version"] for r in select})
    scores, found = [], {}
    for v in versions:
        others = [r for r in select if r["version"] != v]
        got = C.detect_wrappers(triples(train) + triples(others), base, **params)
        found[v] = got
        scores.append(table_scores(train, [r for r in select if r["version"] == v],
                                   base.with_detected(got)))
    mean = {k: sum(s[k] for s in scores) / len(scores) for k in scores[0]}
    return mean, found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--train", nargs="+", required=True, metavar="PATTERN=LABEL")
    ap.add_argument("--select", nargs="+", required=True, metavar="PATTERN=LABEL")
    ap.add_argument("--check", nargs="*", default=[], metavar="NAME:PATTERN=LABEL",
                    help="other training data to report the chosen point's wrappers on")
    ap.add_argument("--holdout", nargs="*", default=[], metavar="NAME")
    ap.add_argument("--out", default=os.path.join(ROOT, "out", "wrapper_selection"))
    args = ap.parse_args()
    labels = [s.rpartition("=")[2] for s in args.train + args.select]
    version_roles.refuse_reserved(labels, "selection")
    for lbl in labels:
        if version_roles.family_role(lbl) == "test":
            raise SystemExit(f"{lbl} is a test version (core/version_roles.json): thresholds "
                             "are chosen on train and selection versions only")
    train, select = read_stacks(args.train), read_stacks(args.select)
    base = C.ContextDefinition.make()
    points = []
    keys = list(GRID)
    for values in itertools.product(*(GRID[k] for k in keys)):
        params = dict(zip(keys, values))
        scores, folds = fold_scores(train, select, base, params)
        found = C.detect_wrappers(triples(train) + triples(select), base, **params)
        points.append({"params": params, "found": found, "folds": folds, **scores,
                       "score": (scores["weighted"] + scores["unweighted"]) / 2})
    best = max(p["score"] for p in points)

    def nearness(p):
        return (len(p["found"]),
                sum(p["params"][k] != OLD[k] for k in keys),
                [abs(p["params"][k] - OLD[k]) for k in keys])
    chosen = min((p for p in points if p["score"] >= best - TIE), key=nearness)
    baseline = next(p for p in points if p["params"] == OLD)
    report = {"train": args.train, "select": args.select, "grid": GRID, "tie": TIE,
              "chosen": chosen, "old_rule": baseline, "points": points}
    report["checks"] = {}
    for spec in args.check:
        name, _, rest = spec.partition(":")
        rows = read_stacks([rest])
        report["checks"][name] = {
            "chosen": C.detect_wrappers(triples(rows), base, **chosen["params"]),
            "old_rule": C.detect_wrappers(triples(rows), base, **OLD)}
    if args.holdout:
        held = C.ContextDefinition.make(configured=sorted(C.BUILTIN_WRAPPERS - set(args.holdout)),
                                        builtin=False)
        present = sorted({C._qualified(f) for r in train for f in r["stack"]} & set(args.holdout))
        report["holdout"] = {"held_out": sorted(args.holdout), "present": present}
        for name, params in (("chosen", chosen["params"]), ("old_rule", OLD)):
            got = C.detect_wrappers(triples(train), held, **params)
            report["holdout"][name] = {"found": got,
                                       "recovered": sorted(set(got) & set(present))}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "selection.json"), "w") as f:
        json.dump(report, f, indent=1)
    lines = ["# Wrapper detection thresholds, chosen on selection data", "",
             f"train: {', '.join(args.train)}", "", f"selection: {', '.join(args.select)}", "",
             "| point | weighted | unweighted | unseen weight | wrappers found on train + selection |",
             "|---|---|---|---|---|"]
    shown = sorted(points, key=lambda p: -p["score"])
    for p in [chosen, baseline] + shown[:10]:
        tag = "chosen" if p is chosen else "old rule" if p is baseline else ""
        lines.append(f"| {tag} {p['params']} | {100 * p['weighted']:.1f}% | "
                     f"{100 * p['unweighted']:.1f}% | {100 * p['unseen_weight']:.1f}% | "
                     f"{', '.join(p['found']) or '-'} |")
    for name, c in report["checks"].items():
        lines.append(f"\n{name}: chosen finds {c['chosen'] or '-'}; old rule {c['old_rule'] or '-'}")
    if "holdout" in report:
        h = report["holdout"]
        lines.append(f"\nheld out {h['held_out']} (present in train: {h['present']}): chosen "
                     f"recovers {h['chosen']['recovered']} (finds {h['chosen']['found']}); old "
                     f"rule recovers {h['old_rule']['recovered']} (finds {h['old_rule']['found']})")
    with open(os.path.join(args.out, "selection.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
