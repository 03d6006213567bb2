"""Speed of the heap simulator's engine: events/s (alloc + free events per second) on one
core, for the baseline alone and for LLAMA with the oracle predictor alone.

    .venv/bin/python benchmarks/simulator_speed.py [--objects 4000000] [--runs 3] [--json OUT]

Generates a synthetic trace (deterministic seed) with a realistic mix of sizes and
lifetimes, then runs build/simulator/lifetime_simulate pinned to one CPU (taskset) with
--timing; the engine times its own run (trace reading + simulation, not the JSON report).
Target: >= 5 M events/s.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simulator import engine_path  # noqa: E402
from simulator import trace as tr  # noqa: E402

MS = 1_000_000


def synthetic_trace(path: str, n: int, seed: int = 42) -> dict:
    """n objects: 16 threads, ~2 allocations per microsecond; sizes mostly small
    (lognormal around 64 B), some medium and large; lifetimes spread over the classes
    (70 % < 10 ms, 15 % < 100 ms, 8 % < 1 s, 4 % < 10 s, 1.5 % < 100 s, 1.5 % never freed)."""
    rng = np.random.default_rng(seed)
    alloc = np.cumsum(rng.integers(0, 1000, n, dtype=np.uint64))
    kind = rng.random(n)
    size = np.where(kind < 0.85, np.minimum(rng.lognormal(4.2, 1.0, n), 8191) + 1,
                    np.where(kind < 0.98, rng.integers(8192, 262144, n),
                             np.where(kind < 0.9999, rng.integers(262144, 2 << 20, n),
                                      rng.integers(2 << 20, 8 << 20, n)))).astype(np.uint64)
    u = rng.random(n)
    edges = np.array([0.70, 0.85, 0.93, 0.97, 0.985])
    cls = np.searchsorted(edges, u)
    lo = np.array([0, 10, 100, 1000, 10000, 0]) * MS
    hi = np.array([10, 100, 1000, 10000, 100000, 1]) * MS
    life = (lo[cls] + rng.random(n) * (hi[cls] - lo[cls])).astype(np.uint64)
    free = np.where(cls == 5, np.uint64(tr.NEVER), alloc + life).astype(np.uint64)
    recs = np.zeros(n, dtype=np.dtype([("alloc", "<u8"), ("free", "<u8"), ("size", "<u8"),
                                       ("stack", "<u8"), ("thread", "<u4"), ("align", "<u4")]))
    recs["alloc"], recs["free"], recs["size"] = alloc, free, size
    recs["stack"] = rng.integers(0, 5000, n)
    recs["thread"] = rng.integers(0, 16, n)
    recs["align"] = 16
    finite = free[free != np.uint64(tr.NEVER)]
    end = int(max(int(alloc[-1]), int(finite.max()) if len(finite) else 0))
    w = tr.TraceWriter(path, tr.DEFAULT_BOUNDARIES_NS, end_ns=end)
    w._f.write(recs.tobytes())  # bulk body; the writer patches the header on close
    w._count = n
    w._max_t = end
    w.close()
    return {"objects": n, "never_freed": int((cls == 5).sum()), "end_ns": end}


def run_once(trace: str, args: list[str]) -> float:
    cmd = [str(engine_path()), trace, "--timing", "--json", os.devnull, *args]
    if shutil.which("taskset"):
        cmd = ["taskset", "-c", "0", *cmd]
    p = subprocess.run(cmd, capture_output=True, text=True, check=True)
    m = re.search(r"(\d+) events, \d+ allocators, ([\d.]+) s", p.stderr)
    if not m:
        raise RuntimeError(f"no timing in: {p.stderr}")
    return int(m.group(1)) / float(m.group(2))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--objects", type=int, default=4_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", help="also write the results here")
    a = ap.parse_args()
    configs = {"baseline": [],
               "llama-oracle": ["--no-baseline", "--predictor", "oracle"],
               "baseline+llama-oracle": ["--predictor", "oracle"]}
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "speed.lttrace")
        info = synthetic_trace(trace, a.objects)
        events = 2 * a.objects - info["never_freed"]
        print(f"trace: {a.objects} objects, {events} events, {info['end_ns'] / 1e9:.1f} s of trace time")
        results = {"trace": info, "events": events, "runs": a.runs, "target_events_per_s": 5e6, "configs": {}}
        for name, args in configs.items():
            rates = [run_once(trace, args) for _ in range(a.runs)]
            mean = statistics.mean(rates)
            sd = statistics.stdev(rates) if len(rates) > 1 else 0.0
            results["configs"][name] = {"events_per_s": rates, "mean": mean, "sd": sd}
            print(f"{name:24s} {mean / 1e6:6.2f} M events/s ± {sd / 1e6:.2f} "
                  f"(runs: {', '.join(f'{r / 1e6:.2f}' for r in rates)})")
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
