"""The cost rule's constant A (core.lifetimes.UNDER_WEIGHT: how much more an under-predicted
byte-second costs than an over-predicted one) chosen on selection data (issue 33 item 2).

A was set to 1 by reasoning, and measured on the 6.2.14 phases and mixed traces (test
data).  Here the context oracle by the cost rule is computed with each A in --weights
on the Redis 6.2.9 selection traces (benchmarks/simulate_redis.py --version 6.2.9
--keep-trace: out/sel629/<workload>/load<S>/sim-*/trace.lttrace, contexts cut by the
dataset-train beside them), and replayed under the paper's policy and `segregated`:
Table 3's fragmentation reduction against the size-class baseline (huge pages, and
resident), with the T95 context oracle and the per-object oracle beside.  The A that
does best on the worst (workload, policy) of the selection traces is the one to keep;
nothing here reads 6.2.14.

    nice .venv/bin/python benchmarks/cost_rule_selection.py [--workloads mixed phases fates] \\
        [--weights 0.25 0.5 1 2 4 19] [--out out/cost_rule_selection]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import simulator  # noqa: E402
from core.lifetimes import DEADLINE_K, UNDER_WEIGHT, cost_horizon, cost_rule  # noqa: E402
from simulator import convert  # noqa: E402
from simulator.report import _reduction  # noqa: E402
from simulator.tables import (context_bytes, context_oracle_tables,  # noqa: E402
                              symbolize_stacks, training_examples, write_class_table)

POLICIES = ("paper", "segregated")


def log(msg: str) -> None:
    print(f"[cost_rule_selection {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def trace_of(workload: str, seed: int, on: str = "selection") -> tuple[str, str]:
    if on == "test":  # the report, after the choice: 6.2.14's kept traces
        base = ROOT / "out" / "redis21" / ("phases-wrap" if workload == "phases" else workload) / f"load{seed}"
    else:
        base = ROOT / "out" / "sel629" / workload / f"load{seed}"
    traces = sorted(glob.glob(str(base / "sim-*" / "trace.lttrace")))
    if not traces:
        raise SystemExit(f"{base}: no kept trace (benchmarks/simulate_redis.py --workload {workload} "
                         f"--version 6.2.9 --load-seeds {seed} --keep-trace --out out/sel629/{workload})")
    return traces[0], str(base / "dataset-train")


def one_trace(workload: str, seed: int, weights: list[float], out: pathlib.Path,
              on: str = "selection") -> dict:
    trace, train = trace_of(workload, seed, on)
    side = convert.load_stacks(convert.stacks_path(trace))
    _, _, definition, scheme = training_examples(train)
    log(f"{workload} load {seed}: symbolizing {len(side['stacks']):,} stacks")
    context_of = symbolize_stacks(side, definition)
    tdir = out / workload / f"load{seed}"
    _, files, _, _ = context_oracle_tables(trace, side, context_of, scheme, str(tdir))
    by_bytes = context_bytes(side, context_of)
    horizon = cost_horizon(scheme.boundaries, DEADLINE_K)
    specs = ["oracle", f"context_t95=table:{files['context_t95']}"]
    for a in weights:
        cls = {c: cost_rule(b, scheme.boundaries, deadline_k=DEADLINE_K, horizon=horizon, under_weight=a)
               for c, b in by_bytes.items() if b.sum() > 0}
        table = {sid: cls[c] for sid, c in context_of.items() if c in cls}
        f = write_class_table(str(tdir / f"cost_A{a:g}.tbl"), table)
        specs.append(f"cost_A{a:g}=table:{f}")
    res = {}
    for policy in POLICIES:
        log(f"{workload} load {seed}: {len(specs)} predictors under {policy}")
        sim = simulator.simulate(trace, specs, policy=[policy])
        allocs = {a["name"]: a for a in sim["allocators"]}
        base, live = allocs["baseline"], sim["live"]["steady_state_bytes"]
        res[policy] = {}
        for name, a in allocs.items():
            if a["kind"] != "llama":
                continue
            label = name.split(":", 1)[1]
            res[policy][label] = {
                "huge": _reduction(a["steady_state_bytes"], base["steady_state_bytes"], live),
                "resident": _reduction(a.get("steady_state_resident_bytes", a["steady_state_bytes"]),
                                       base.get("steady_state_resident_bytes", base["steady_state_bytes"]),
                                       live)}
    return {"trace": trace, "train": train, "results": res}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", nargs="+", default=["mixed", "phases", "fates"])
    ap.add_argument("--load-seed", type=int, default=1)
    ap.add_argument("--weights", nargs="+", type=float, default=[0.25, 0.5, 1.0, 2.0, 4.0, 19.0])
    ap.add_argument("--on", choices=("selection", "test"), default="selection",
                    help="selection (default): the 6.2.9 traces the choice is made on; test: "
                         "6.2.14's (out/redis21), to report the chosen A against the old one")
    ap.add_argument("--out", default=None, help="default out/cost_rule_<on>")
    args = ap.parse_args()
    out = pathlib.Path(args.out or ROOT / "out" / f"cost_rule_{args.on}")
    out.mkdir(parents=True, exist_ok=True)
    runs = {w: one_trace(w, args.load_seed, args.weights, out, args.on) for w in args.workloads}
    labels = [f"cost_A{a:g}" for a in args.weights]
    what = "selection traces (Redis 6.2.9" if args.on == "selection" else "test traces (Redis 6.2.14"
    lines = [f"# The cost rule's constant on {what}, load seed {args.load_seed})", "",
             "Fragmentation reduction against the size-class baseline, steady state, huge pages / "
             "resident; the context oracle by the cost rule with each A (the project's A = "
             f"{UNDER_WEIGHT:g}), the T95 context oracle and the per-object oracle.", "",
             "| workload | policy | " + " | ".join(f"A = {a:g}" for a in args.weights)
             + " | T95 | per-object |", "|---|---|" + "---|" * (len(labels) + 2)]

    def cell(r):
        return ("n/a" if r["huge"] is None else f"{100 * r['huge']:+.1f}") + " / " + (
            "n/a" if r["resident"] is None else f"{100 * r['resident']:+.1f}")

    worst = {lab: float("inf") for lab in labels}
    for w, run in runs.items():
        for policy, res in run["results"].items():
            lines.append(f"| {w} | {policy} | " + " | ".join(cell(res[lab]) for lab in labels)
                         + f" | {cell(res['context_t95'])} | {cell(res['oracle'])} |")
            for lab in labels:
                v = res[lab]["resident"] if res[lab]["resident"] is not None else res[lab]["huge"]
                worst[lab] = min(worst[lab], v if v is not None else float("-inf"))
    best = max(labels, key=lambda lab: (worst[lab], -abs(float(lab[6:]) - UNDER_WEIGHT)))
    lines += ["", "Worst (workload, policy), resident: " + ", ".join(
        f"A = {lab[6:]}: {100 * worst[lab]:+.1f}%" for lab in labels),
        "", (f"**Best on the worst case: A = {best[6:]}** (ties to the value nearest the current one)."
             if args.on == "selection" else "(Test traces: a report, not a choice.)")]
    text = "\n".join(lines) + "\n"
    (out / "results.md").write_text(text)
    (out / "results.json").write_text(json.dumps({"runs": runs, "worst": worst, "best": best}, indent=1) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
