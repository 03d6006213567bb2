"""Which policy is LLAMA's default (issue 32, item 6), chosen on workloads no reported
figure uses: the selection set.  Every LLAMA policy worth a default, with no model
(constant:0), on programs nobody here wrote that none of the reporting benchmarks
(allocator_rss.py's Redis workloads, allocator_postgres.py, the CPython suite,
peer_suite.py's programs) runs:

  clang    clang-15 -O2 -c of a generated C++ file (templates, std containers; a
           compiler's many short-lived and some long-lived objects)
  sqlite   CPython's sqlite3 (PYTHONMALLOC=malloc: every object through the allocator):
           an in-memory database grown to ~400 k rows with an index, half deleted,
           VACUUM, queries on what is left
  churn    CPython waves of dicts built and dropped, a few survivors kept from each
           (allocator_rss.py --workload python's script)

Runs and measures as peer_suite.py does (elapsed and peak RSS from `lifetime run`'s
wait4, steady RSS: mean VmRSS over the last third of the run), --runs per cell, medians.
The choice: the policy whose worst ratio to the best LLAMA policy, over every workload
and the three figures (steady RSS, peak RSS, elapsed), is the smallest.  The glibc,
jemalloc and mimalloc rows are there to read the figures against, not to choose.

    nice .venv/bin/python benchmarks/policy_selection.py [--runs 3] [--out out/policy_selection]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shutil
import statistics
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import peer_suite  # noqa: E402
from benchmarks.allocator_rss import WORKLOAD as CHURN  # noqa: E402

# (baseline, the size-class heap alone, ignores the class: not a candidate)
POLICIES = ("llama-paper", "llama-tolerant", "llama-segregated")
REFERENCES = ("glibc", "jemalloc", "mimalloc")
WORKLOADS = ("clang", "sqlite", "churn")
FIGURES = ("steady_rss_median", "peak_rss_median", "elapsed_median")

SQLITE = r"""
import random, sqlite3
r = random.Random(1)
db = sqlite3.connect(":memory:", isolation_level=None)
db.execute("create table t (id integer primary key, k text, v blob)")
for chunk in range(40):
    db.executemany("insert into t (k, v) values (?, ?)",
                   [(str(r.random()), bytes(r.randrange(20, 400))) for _ in range(10000)])
db.execute("create index tk on t (k)")
db.execute("delete from t where id % 2 = 0")
db.execute("vacuum")
n = 0
for _ in range(3000):
    n += db.execute("select count(*) from t where k > ?", (str(r.random()),)).fetchone()[0] % 7
print("result", n, db.execute("select count(*) from t").fetchone()[0])
"""


def clang_source(path: pathlib.Path) -> None:
    """A C++ file with many template instantiations (deterministic)."""
    L = ["#include <map>", "#include <string>", "#include <vector>", "#include <unordered_map>",
         "#include <algorithm>", "#include <memory>", ""]
    for i in range(120):
        L += [f"template <class T> struct S{i} {{ std::vector<T> v; std::map<int, T> m;",
              f"  T f(const std::string& s) {{ T t{{}}; for (auto& x : v) t += x; m[(int)s.size()] = t;",
              f"    std::sort(v.begin(), v.end()); return t + (T){i}; }} }};",
              f"double g{i}(int n) {{ S{i}<double> a; S{i}<long> b; std::unordered_map<std::string, int> h;",
              f"  for (int k = 0; k < n; ++k) {{ a.v.push_back(k); b.v.push_back(k * {i}); h[std::to_string(k)] = k; }}",
              f"  return a.f(\"x{i}\") + b.f(\"y\") + h.size(); }}", ""]
    path.write_text("\n".join(L))


def commands(inputs: pathlib.Path, tmp: pathlib.Path) -> dict[str, list[str]]:
    inputs.mkdir(parents=True, exist_ok=True)
    src = inputs / "templates.cc"
    clang_source(src)
    py = shutil.which("python3") or sys.executable
    return {
        "clang": ["clang++-15", "-O2", "-c", str(src), "-o", str(tmp / "templates.o")],
        "sqlite": ["env", "PYTHONMALLOC=malloc", py, "-c", SQLITE],
        "churn": ["env", "PYTHONMALLOC=malloc", py, "-c", CHURN],
    }


def choose(agg: dict, workloads: list[str], policies: list[str]) -> tuple[str | None, dict]:
    """Each policy's worst ratio to the best policy over workloads x figures."""
    worst = {}
    for p in policies:
        ratios = []
        for w in workloads:
            for f in FIGURES:
                vals = [agg[(w, q)][f] for q in policies
                        if agg.get((w, q), {}).get("ok") and agg[(w, q)].get(f)]
                c = agg.get((w, p), {})
                if not vals or not c.get("ok") or not c.get(f):
                    ratios.append(float("inf"))
                    continue
                ratios.append(c[f] / min(vals))
        worst[p] = max(ratios) if ratios else float("inf")
    best = min(worst, key=worst.get) if worst else None
    return best, worst


def render(agg, workloads, allocators, policies, best, worst, runs) -> str:
    L = ["# LLAMA's default policy, chosen on the selection workloads (issue 32 item 6)", "",
         f"{runs} run(s) per cell, medians; constant:0 (no model).  Score: a policy's worst "
         "ratio to the best LLAMA policy over every workload and figure (steady RSS, peak RSS, "
         "elapsed); the smallest wins.  glibc / jemalloc / mimalloc for reference only.", "",
         "| workload | allocator | elapsed s | peak RSS MiB | steady RSS MiB |", "|---|---|---|---|---|"]
    for w in workloads:
        for a in allocators:
            c = agg.get((w, a))
            if not c:
                continue
            if not c.get("ok"):
                L.append(f"| {w} | {a} | failed: {'; '.join(c['errors'])[:100]} | | |")
                continue
            st = c.get("steady_rss_median")
            L.append(f"| {w} | {a} | {c['elapsed_median']:.2f} | {c['peak_rss_median']:.1f} | "
                     f"{'–' if st is None else f'{st:.1f}'} |")
    L += ["", "| policy | worst ratio to the best policy |", "|---|---|"]
    L += [f"| {p} | {worst[p]:.2f} |" for p in policies]
    L += ["", f"**Chosen: {best}**", ""]
    return "\n".join(L)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "out" / "policy_selection"))
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=WORKLOADS)
    ap.add_argument("--timeout", type=float, default=300)
    args = ap.parse_args(argv)
    out = pathlib.Path(args.out).resolve()
    tmp = out / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    cmds = commands(out / "inputs", tmp)
    allocators = [*POLICIES, *REFERENCES]
    records = peer_suite.run_matrix(args.workloads, allocators, cmds, args.runs, args.timeout, tmp)
    agg = peer_suite.aggregate(records)
    best, worst = choose(agg, args.workloads, list(POLICIES))
    (out / "results.json").write_text(json.dumps(
        {"records": records, "chosen": best, "worst_ratio": worst,
         "cells": {f"{w}/{a}": c for (w, a), c in agg.items()}}, indent=1))
    md = render(agg, args.workloads, allocators, list(POLICIES), best, worst, args.runs)
    (out / "results.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
