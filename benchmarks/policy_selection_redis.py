#!/usr/bin/env python3
"""LLAMA's policy chosen on a Redis *selection* version (core/version_roles.json), never
on the test version (issue 32 items 1 and 6, issue 33 item 2): which lifetime classes get
huge pages of their own, the segregate-above bound, and the presets.

`segregated`'s heaps are size-class heaps, one per group of predicted classes
(`size-classes:GROUPS`): `inf` (the never-freed class apart from the rest, the default),
`each` (a heap per class), or bounds such as `3/7` (< 1 s, 1 s .. the open tail, inf).
For each workload and policy (POLICIES; also segregate-above 0 and 32, `paper` and
`tolerant`): `benchmarks/simulate_redis.py --test VERSION --policy P` with the model trained on the training versions
(5.0.6 + 6.0.16), and the steady-state fragmentation against the TCMalloc-like baseline
on huge pages and on resident memory, for the model, the per-object oracle and the site
table.

    nice .venv/bin/python benchmarks/policy_selection_redis.py --out out/policy_selection_redis \\
        [--train-from phases=out/redis21/phases-wrap/load1 mixed=out/redis21/mixed/load1 ...]

--train-from copies a finished run's training profiles, dataset and model (seed 0) into
OUT/WORKLOAD/load<S> first, so only the selection version's trace is made (otherwise
simulate_redis.py trains them). Phases is run with `--wrapper sdsnewlen --wrapper
_sdsnewlen` (--phases-wrapper, the README's phases models); the others with none.
Outputs: OUT/results.md and OUT/results.json.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.table3 import policy_tag  # noqa: E402

# The segregated preset (size-classes:inf,segregate-above:8) against the other groupings,
# its segregate-above bound, and the other presets.
POLICIES = ("size-classes:inf,segregate-above:8", "size-classes:each,segregate-above:8",
            "size-classes:3/7,segregate-above:8", "size-classes:2/5/7,segregate-above:8",
            "size-classes:inf", "size-classes:inf,segregate-above:32", "paper", "tolerant")
WORKLOADS = ("phases", "mixed", "fates")
REUSED = ("train", "dataset-train", "model-seed0", "export-seed0")
ROWS = ("model", "oracle", "site")


def run(args: argparse.Namespace, workload: str, policy: str) -> dict:
    out = pathlib.Path(args.out) / workload / f"load{args.load_seed}"
    src = args.train_from.get(workload)
    if src and not (out / "model-seed0").exists():
        out.mkdir(parents=True, exist_ok=True)
        for name in REUSED:
            shutil.copytree(pathlib.Path(src) / name, out / name, dirs_exist_ok=True)
    cmd = [sys.executable, str(ROOT / "benchmarks" / "simulate_redis.py"), "--workload", workload,
           "--test", args.version, "--load-seed", str(args.load_seed), "--seeds", "0",
           "--policy", policy, "--out", str(out), "--resume", "--keep-trace",
           "--selection"]  # none: wrappers detected on the training profiles (the test here is one)
    if workload == "phases":
        for w in args.phases_wrapper:
            cmd += ["--wrapper", w]
    res = out / f"results{policy_tag(policy)}.json"
    if not res.exists():
        print(f"policy_selection_redis: {workload} {policy}", file=sys.stderr, flush=True)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    d = json.loads(res.read_text())
    row = {"workload": workload, "policy": policy, "test_roles": d.get("test_roles")}
    # Steady-state fragmentation reduction against the baseline (simulator/report.py's):
    # on huge pages and on resident memory; positive is less.
    for r in ROWS:
        s = d["summary"].get(r)
        if s:
            row[r] = {"huge": s["fragmentation_reduction"]["mean"],
                      "resident": s["resident_fragmentation_reduction"]["mean"]}
    return row


def pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:+.1f}%"


def report(rows: list[dict], args: argparse.Namespace) -> str:
    lines = [f"# LLAMA's policy on Redis {args.version} (selection): class groups, segregate-above, presets", "",
             f"Load seed {args.load_seed}, model seed 0; the model trained on Redis 5.0.6 + 6.0.16. "
             "Steady-state fragmentation reduction against the TCMalloc-like baseline "
             "(positive: less), on huge pages / on resident memory.", "",
             "| workload | policy | model | per-object oracle | site table |", "|---|---|---|---|---|"]
    for r in rows:
        cells = [f"{pct(r[k]['huge'])} / {pct(r[k]['resident'])}" if k in r else "-" for k in ROWS]
        lines.append(f"| {r['workload']} | {r['policy']} | " + " | ".join(cells) + " |")
    # The choice: per workload, each policy's model figure (huge pages) behind the best
    # policy's; the policy whose worst shortfall is least wins.
    short = {}
    for g in args.policies:
        worst = 0.0
        for w in args.workloads:
            mine = [r for r in rows if r["workload"] == w and r["policy"] == g]
            best = max(r["model"]["huge"] for r in rows if r["workload"] == w)
            worst = max(worst, best - mine[0]["model"]["huge"])
        short[g] = worst
    chosen = min(args.policies, key=lambda g: (short[g], args.policies.index(g)))
    lines += ["", "| policy | worst shortfall of the model's figure behind the best policy (points, huge pages) |",
              "|---|---|"]
    lines += [f"| {g} | {100 * short[g]:.1f} |" for g in args.policies]
    lines += ["", f"**Chosen: {chosen}** (ties: the first listed)."]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--version", default="6.2.9", help="a Redis selection version")
    ap.add_argument("--load-seed", type=int, default=1)
    ap.add_argument("--workloads", nargs="+", choices=WORKLOADS, default=list(WORKLOADS))
    ap.add_argument("--policies", nargs="+", default=list(POLICIES))
    ap.add_argument("--train-from", nargs="*", default=[], metavar="WORKLOAD=DIR")
    ap.add_argument("--phases-wrapper", nargs="*", default=["sdsnewlen", "_sdsnewlen"])
    args = ap.parse_args()
    from core import version_roles
    role = version_roles.family_role(version_roles.label("redis", args.version))
    if role != "selection":
        raise SystemExit(f"policy_selection_redis: Redis {args.version} is a {role} version, not a selection one "
                         "(core/version_roles.json): choose on selection data")
    args.train_from = dict(kv.split("=", 1) for kv in args.train_from)
    rows = [run(args, w, g) for w in args.workloads for g in args.policies]
    out = pathlib.Path(args.out)
    (out / "results.json").write_text(json.dumps({"version": args.version, "load_seed": args.load_seed,
                                                  "rows": rows}, indent=1))
    (out / "results.md").write_text(report(rows, args))
    print((out / "results.md").read_text())


if __name__ == "__main__":
    main()
