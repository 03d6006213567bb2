"""Feature oracles on full traces (issue 34 item 2): how much of the gap between the
context oracle and the per-object oracle a (context, feature) oracle closes.

For each workload's full trace and each policy, runs

    lifetime simulate TRACE --train DATASET --out OUT/WORKLOAD-POLICY --policy POLICY
                      --feature-oracles

(no model: the rows compared are all computed from the trace; simulator/features.py
defines the features) and writes OUT/results.{md,json}: Table 3's oracle rows and, per
feature and rule (T95, cost rule), the share of the gap closed,

    (feature oracle - context oracle) / (per-object oracle - context oracle),

on the fragmentation reduction of the huge-page steady state and of the resident
steady state (huge pages less the free pages given back inside them).

    .venv/bin/python benchmarks/feature_oracles.py --out out/feature_oracles \
        --workload redis-phases=out/redis21/phases-wrap/load1 \
        --workload redis-mixed=out/redis21/mixed/load1 \
        --workload redis-fates=out/redis21/fates/load1

A workload directory holds sim-seed0/trace.lttrace (+ .stacks.json) and dataset-train
(benchmarks/simulate_redis.py --keep-trace writes both).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from simulator.features import FEATURES, gap_closed  # noqa: E402

POLICIES = ("segregated", "paper")
MEASURES = (("resident", "resident_fragmentation_reduction"),
            ("huge pages", "fragmentation_reduction"))


def run_one(trace: str, dataset: str, out: str, policy: str, resume: bool,
            names=()) -> dict:
    rep = os.path.join(out, "report.json")
    if not (resume and os.path.exists(rep)):
        cmd = [sys.executable, "-c", "import sys; from lifetime.cli import main; sys.exit(main())",
               "simulate", trace, "--train", dataset, "--out", out, "--policy", policy,
               "--feature-oracles", *names]
        print(" ".join(cmd[3:]), flush=True)
        subprocess.run(cmd, check=True, cwd=ROOT)
    with open(rep) as f:
        return json.load(f)


def summarize(rep: dict) -> dict:
    rows = {r["allocator"].split(":", 1)[1]: r for r in rep["table3"]}
    out = {"rows": {k: {m: rows[k].get(key) for m, key in MEASURES}
                    | {"accuracy_by_allocations": rows[k].get("accuracy_by_allocations")}
                    for k in rows},
           "gap_closed": {}}
    for f in FEATURES:
        for rule in ("t95", "cost"):
            lab = f"context_{f}_{rule}"
            if lab not in rows:
                continue
            if "oracle" not in rows:
                continue
            out["gap_closed"][lab] = {
                m: gap_closed(rows[lab].get(key), rows[f"context_{rule}"].get(key),
                              rows["oracle"].get(key))
                for m, key in MEASURES}
    return out


def pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:+.1f}%"


def pts(x) -> str:
    return "n/a" if x is None else f"{100 * x:+.0f}"


def markdown(results: dict, keys: dict) -> str:
    L = ["Feature oracles (issue 34 item 2): fragmentation reduction against the baseline "
         "(resident / huge pages; negative: more than the baseline) and, per feature, the "
         "points of the context-oracle -> per-object-oracle gap it closes "
         "(100 = all of it; negative: it widens it).", ""]
    for wl, by_policy in results.items():
        L += [f"### {wl}", "", "| predictor | keys | " +
              " | ".join(f"{p}: resident | {p}: huge pages | {p}: gap closed (res. / hp)"
                         for p in by_policy) + " |",
              "|---|---|" + "---|---|---|" * len(by_policy)]
        first = next(iter(by_policy.values()))
        labels = ["oracle", "context_t95", "context_cost"] + [
            f"context_{f}_{r}" for f in FEATURES for r in ("t95", "cost")
            if f"context_{f}_{r}" in first["rows"]]
        for lab in labels:
            name = {"oracle": "per-object oracle", "context_t95": "context oracle, T95",
                    "context_cost": "context oracle, cost rule"}.get(lab)
            if name is None:
                f, rule = lab[len("context_"):].rsplit("_", 1)
                name = f"context+{f} oracle, {'T95' if rule == 't95' else 'cost rule'}"
                k = keys[wl].get(f)
            else:
                k = keys[wl].get("none") if lab != "oracle" else None
            cells = []
            for p, s in by_policy.items():
                r = s["rows"][lab]
                g = s["gap_closed"].get(lab)
                cells.append(f"{pct(r['resident'])} | {pct(r['huge pages'])} | "
                             + (f"{pts(g['resident'])} / {pts(g['huge pages'])}" if g else ""))
            L.append(f"| {name} | {'' if k is None else f'{k:,}'} | " + " | ".join(cells) + " |")
        L.append("")
    return "\n".join(L)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--workload", action="append", required=True, metavar="NAME=DIR")
    ap.add_argument("--policies", nargs="+", default=list(POLICIES))
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--features", nargs="*", default=[],
                    help="features to run (default: all, the control included)")
    args = ap.parse_args(argv)
    results, keys = {}, {}
    for spec in args.workload:
        name, d = spec.split("=", 1)
        trace = os.path.join(d, "sim-seed0", "trace.lttrace")
        results[name] = {}
        for policy in args.policies:
            rep = run_one(trace, os.path.join(d, "dataset-train"),
                          os.path.join(args.out, f"{name}-{policy}"), policy, args.resume,
                          args.features)
            results[name][policy] = summarize(rep)
            keys[name] = rep["settings"].get("feature_oracles", {}).get("keys", {})
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"results": results, "keys": keys}, f, indent=1, sort_keys=True)
    md = markdown(results, keys)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
