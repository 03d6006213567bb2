"""Ablation of LLAMA's policy switches (issue 21, item 3) on one full trace.

One engine pass: the TCMalloc-like baseline and, per predictor, one LLAMA instance per
policy (the paper's, each switch alone, all combined).  Predictors: the per-object oracle
and a per-stack T95 class table computed from the trace itself (group records by stack
id; the class of the 95th percentile lifetime, never freed = inf): the "per-stack
oracle", the best any stack-based T95 predictor can do on this trace.

    nice .venv/bin/python benchmarks/llama_policy_ablation.py TRACE.lttrace --out DIR

Writes DIR/simulation.json (the engine's report), DIR/stack_t95.tbl and DIR/ablation.md
(steady-state MiB, peak MiB, fragmentation reduction vs the baseline per row).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import simulator  # noqa: E402
from simulator import trace as tr  # noqa: E402

POLICIES = {
    "paper": "paper",
    "occupancy": "occupancy",
    "occ+own-blocks": "occupancy,own-blocks",
    "occ+span-fit": "occupancy,span-fit",
    "contain-mixed": "contain-mixed",
    "medium-spans": "medium-spans",
    "fine-lines": "fine-lines",
    "occ+own-blocks+span-fit": "occupancy,own-blocks,span-fit",
    "all-but-contain-mixed": "occupancy,own-blocks,span-fit,medium-spans,fine-lines",
    "all": "occupancy,own-blocks,span-fit,contain-mixed,medium-spans,fine-lines",
    "size-classes": "size-classes",                # one size-class heap per class
    "size-classes-from-4": "size-classes-from:4",  # LLAMA below <10s, size classes above
    "divert-mixed": "divert-mixed",
    "tolerant": "tolerant",                        # occupancy,...,divert-mixed (preset)
    "tolerant-above-8": "tolerant,segregate-above:8",
    "size-classes-inf": "size-classes:inf",        # two size-class heaps: inf and the rest
    "segregated": "segregated",                    # size-classes:inf,segregate-above:8 (preset)
}
MIB = 1 << 20


def read_records(path: str) -> tuple[tr.TraceHeader, np.ndarray]:
    """The trace's records as a structured array (the engine's own checks first)."""
    header = tr.check_trace(path)
    dtype = np.dtype([("alloc", "<u8"), ("free", "<u8"), ("size", "<u8"), ("stack", "<u8"),
                      ("tid", "<u4"), ("align", "<u4")])
    recs = np.fromfile(path, dtype=dtype, offset=48 + 8 * len(header.boundaries_ns))
    return header, recs


def stack_t95_table(header: tr.TraceHeader, recs: np.ndarray) -> dict[int, int]:
    """Per stack id: the class of its objects' 95th percentile lifetime (inf = never freed)."""
    bounds = np.array(header.boundaries_ns, np.uint64)
    never = recs["free"] == np.uint64(tr.NEVER)
    life = np.where(never, np.uint64(0), recs["free"] - recs["alloc"])
    cls = np.searchsorted(bounds, life, side="right").astype(np.int64)
    cls[never] = len(bounds) + 1
    table = {}
    order = np.argsort(recs["stack"], kind="stable")
    stacks, starts = np.unique(recs["stack"][order], return_index=True)
    for i, sid in enumerate(stacks):
        end = starts[i + 1] if i + 1 < len(starts) else len(order)
        c = np.sort(cls[order[starts[i]:end]])
        table[int(sid)] = int(c[int(np.ceil(0.95 * len(c))) - 1])
    return table


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--out", required=True)
    ap.add_argument("--policies", nargs="*", default=list(POLICIES),
                    help="rows: any of %s, or NAME=POLICY" % ", ".join(POLICIES))
    ap.add_argument("--no-table", action="store_true", help="the oracle only")
    ap.add_argument("--check-invariants", action="store_true")
    ap.add_argument("--snapshot-at-ns", type=int, action="append", default=[])
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)

    header, recs = read_records(args.trace)
    predictors = {"oracle": "oracle"}
    if not args.no_table:
        tbl = simulator.write_class_table(os.path.join(args.out, "stack_t95.tbl"),
                                          stack_t95_table(header, recs))
        predictors["stack_t95"] = f"table:{tbl}"
    rows = [p.split("=", 1) if "=" in p else (p, POLICIES[p]) for p in args.policies]
    specs, policy = [], []
    for pname, pspec in predictors.items():
        for rname, pol in rows:
            label = f"{pname}.{rname.replace('+', '_')}"
            specs.append(f"{label}={pspec}")
            policy.append(f"{label}={pol}")
    rep = simulator.simulate(args.trace, specs, policy=policy, check_invariants=args.check_invariants,
                             snapshots_ns=args.snapshot_at_ns,
                             json_out=os.path.join(args.out, "simulation.json"), timeout=3600)
    base = next(a for a in rep["allocators"] if a["kind"] != "llama")
    live = rep["live"]["steady_state_bytes"]
    lines = [f"trace: {args.trace} ({rep['events']['allocs']:,} objects, "
             f"{(rep['trace']['end_ns'] - rep['trace']['start_ns']) / 1e9:.1f} s); "
             f"live {live / MIB:.1f} MiB steady, {rep['live']['peak_bytes'] / MIB:.1f} MiB peak",
             "",
             "| predictor | policy | steady MiB | peak MiB | frag. reduction vs baseline | accuracy (objects) |",
             "|---|---|---|---|---|---|",
             f"| baseline | | {base['steady_state_bytes'] / MIB:.1f} | {base['peak_bytes'] / MIB:.1f} | 0 | |"]
    for a in rep["allocators"]:
        if a["kind"] != "llama":
            continue
        pname, rname = a["name"][len("llama:"):].split(".", 1)
        rname = rname.replace("_", "+")
        red = a["fragmentation_reduction_vs_baseline"]
        lines.append(f"| {pname} | {rname} | {a['steady_state_bytes'] / MIB:.1f} | {a['peak_bytes'] / MIB:.1f} | "
                     f"{red * 100:+.1f}% | {a['predictor']['accuracy'] * 100:.1f}% |")
    md = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, "ablation.md"), "w") as f:
        f.write(md)
    with open(os.path.join(args.out, "counters.json"), "w") as f:
        json.dump({a["name"]: a["counters"] for a in rep["allocators"]}, f, indent=1)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
