#!/usr/bin/env python3
"""Which contexts' predicted classes move a Table 3 figure.

Takes one `lifetime simulate --model` output (its trace.lttrace + trace.stacks.json and
the model's served classes, model/served.txt), writes the classes the model served as a
table (`served`: reproduces the model's row), then one table per (stack, class) with
that stack's class changed, and simulates them all in one engine run. The result says
how much of the steady-state figure hangs on each context.

    .venv/bin/python benchmarks/prediction_sensitivity.py out/simulate_redis/sim-seed0 \\
        --persistent 8 --to 4 2          # the 8 largest never-freed contexts -> <100s, <1s
    .venv/bin/python benchmarks/prediction_sensitivity.py SIM --stacks 871 895 --to 0 4 7

Writes SIM/sensitivity/{*.tbl, simulation.json, sensitivity.md}.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENGINE = os.path.join(ROOT, "build", "simulator", "lifetime_simulate")
MB = 1 << 20


def served_classes(path: str, label: str = "model") -> dict[int, int]:
    """stack id -> the class the model gave most of its objects (served.txt)."""
    best: dict[int, tuple[int, int]] = {}
    with open(path) as f:
        for line in f:
            p = line.split()
            if len(p) < 4 or line.startswith("#") or p[0] != label:
                continue
            stack, cls, n = int(p[1]), int(p[2]), int(p[3])
            if stack not in best or n > best[stack][1]:
                best[stack] = (cls, n)
    return {s: c for s, (c, _) in best.items()}


def context_frames(path: str, depth: int = 4) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    cur = None
    with open(path) as f:
        for line in f:
            if line.startswith("stack "):
                cur = int(line.split()[1])
                out[cur] = []
            elif cur is not None and len(out[cur]) < depth:
                out[cur].append(line.strip())
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sim", help="a `lifetime simulate --model` output directory")
    ap.add_argument("--stacks", nargs="*", type=int, default=[], help="stack ids to vary")
    ap.add_argument("--persistent", type=int, default=0,
                    help="also the N never-freed contexts with the most objects")
    ap.add_argument("--largest", type=int, default=0,
                    help="also the N contexts with the most allocated bytes")
    ap.add_argument("--to", nargs="+", type=int, required=True, help="classes to try")
    ap.add_argument("--trace", help="the .lttrace simulated (default SIM/trace.lttrace; its "
                                    ".stacks.json next to it)")
    args = ap.parse_args()
    sim = os.path.abspath(args.sim)
    trace = os.path.abspath(args.trace or os.path.join(sim, "trace.lttrace"))
    with open(trace[:-len(".lttrace")] + ".stacks.json") as f:
        side = json.load(f)
    names = side["class_names"]
    served = served_classes(os.path.join(sim, "model", "served.txt"))
    frames = context_frames(os.path.join(sim, "model", "contexts.txt"))
    stacks = {s["id"]: s for s in side["stacks"]}
    inf = len(names) - 1
    chosen = list(args.stacks)
    chosen += [s["id"] for s in sorted(side["stacks"], key=lambda s: -s["objects"][inf])
               if s["objects"][inf] and s["objects"][inf] == sum(s["objects"])][:args.persistent]
    chosen += [s["id"] for s in sorted(side["stacks"], key=lambda s: -sum(s["bytes"]))][:args.largest]
    chosen = list(dict.fromkeys(chosen))
    out = os.path.join(sim, "sensitivity")
    os.makedirs(out, exist_ok=True)

    def table(name: str, override: dict[int, int]) -> str:
        path = os.path.join(out, f"{name}.tbl")
        with open(path, "w") as f:
            f.write(f"# classes the model served ({sim}), overrides {override}\n")
            for s in sorted(stacks):
                f.write(f"{s} {override.get(s, served.get(s, inf))}\n")
        return path

    cmd = [ENGINE, trace, "--predictor", "oracle", "--predictor",
           f"served=table:{table('served', {})}"]
    variants = {}
    for s in chosen:
        for c in args.to:
            if served.get(s) == c:
                continue
            label = f"s{s}_to_{c}"
            variants[label] = (s, c)
            cmd += ["--predictor", f"{label}=table:{table(label, {s: c})}"]
    cmd += ["--json", os.path.join(out, "simulation.json")]
    print("+", " ".join(cmd[:4]), "...", f"({len(variants)} variants)", flush=True)
    subprocess.run(cmd, check=True)
    with open(os.path.join(out, "simulation.json")) as f:
        rep = json.load(f)
    by = {a["name"].split(":", 1)[-1]: a for a in rep["allocators"]}
    base, live = by["baseline"], rep["live"]["steady_state_bytes"]

    def red(a):
        return (base["steady_state_bytes"] - a["steady_state_bytes"]) / (base["steady_state_bytes"] - live)

    lines = [f"# Sensitivity of {sim}", "",
             f"baseline steady {base['steady_state_bytes'] / MB:.1f} MiB, live {live / MB:.1f} MiB; "
             f"oracle {by['oracle']['steady_state_bytes'] / MB:.1f} MiB ({red(by['oracle']):.1%}); "
             f"the model's served classes as a table: {by['served']['steady_state_bytes'] / MB:.1f} MiB "
             f"({red(by['served']):.1%})", "",
             "| stack | context (leaf first) | objects | objects per true class | served | "
             "changed to | steady MiB | reduction | peak MiB |", "|---|---|---|---|---|---|---|---|---|"]
    for label, (s, c) in variants.items():
        a = by[label]
        st = stacks[s]
        lines.append(f"| {s} | {' < '.join(frames.get(s, []))} | {sum(st['objects']):,} | "
                     f"{st['objects']} | {names[served.get(s, inf)]} | {names[c]} | "
                     f"{a['steady_state_bytes'] / MB:.1f} | {red(a):.1%} | {a['peak_bytes'] / MB:.1f} |")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out, "sensitivity.md"), "w") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
