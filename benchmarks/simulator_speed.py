"""Speed of the heap simulator's engine: events/s (alloc + free events per second) on one
core, for the baseline alone and for LLAMA with the oracle predictor alone; with
--model EXPORT_DIR also LLAMA with the exported model (the model predictor: plugin, C API,
§2.3 cache), with the cache's hits/misses and the cost of a hit and of a model call.

    .venv/bin/python benchmarks/simulator_speed.py [--objects 4000000] [--runs 3] [--json OUT]
                                                   [--model EXPORT_DIR [--model-dataset DIR]]

The model's contexts for the trace's 5000 stack ids are frames of the model's own
training dataset (the export manifest's model_dir -> config.json), stack id i -> context
i mod N.  Three model runs: "llama-model" on a trace of --objects objects whose stacks
are Zipf-skewed and have one size each (like a program's allocation sites);
"llama-model-uniform" on --model-objects objects of the main trace's kind (stacks uniform
and independent of sizes: ~5000 x 20 keys for 4096 entries, a cache under stress); and
"llama-model-every-call" (--model-revalidate-every 1 on the uniform trace): every
allocation runs the model, the cost of misses alone.

Generates a synthetic trace (deterministic seed) with a realistic mix of sizes and
lifetimes, then runs build/simulator/lifetime_simulate pinned to one CPU (taskset) with
--timing; the engine times its own run (trace reading + simulation, not the JSON report).
Target: >= 5 M events/s.  The model predictor times every model call but only a sample of
its cache hits (every 16th call after the first 4096: two clock reads cost about as much as
the hit itself); the hits' "timed" count says how many.  The report's timing_ns.clock_read is
what one clock read costs on the machine (~25 ns on a VM's vDSO clock): a timed hit's
interval holds about one, so a hit's own cost is about its mean less that.

The engine works out its events (frees, allocations, slots) a few dozen events ahead and
prefetches the records the frees and predictions will touch: on these traces it is bound
by cache misses on per-object records (perf record -e cpu-clock on the command below).
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

from core import export_dir as export_dirs  # noqa: E402
from simulator import engine_path  # noqa: E402
from simulator import trace as tr  # noqa: E402

MS = 1_000_000


def synthetic_trace(path: str, n: int, seed: int = 42, sites: bool = False) -> dict:
    """n objects: 16 threads, ~2 allocations per microsecond; sizes mostly small
    (lognormal around 64 B), some medium and large; lifetimes spread over the classes
    (70 % < 10 ms, 15 % < 100 ms, 8 % < 1 s, 4 % < 10 s, 1.5 % < 100 s, 1.5 % never freed).
    Stack ids uniform over 5000, independent of the size; sites=True: Zipf(1.3)-skewed
    stack ids, each stack with one size (drawn from the same mix)."""
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
    if sites:  # like a program: Zipf-skewed stacks, each with its own size
        recs["stack"] = (rng.zipf(1.3, n) - 1) % 5000
        recs["size"] = rng.permutation(size[:5000] if n >= 5000 else np.resize(size, 5000))[recs["stack"]]
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


def run_once(trace: str, args: list[str], report: str | None = None) -> float:
    cmd = [str(engine_path()), trace, "--timing", "--json", report or os.devnull, *args]
    if shutil.which("taskset"):
        cmd = ["taskset", "-c", "0", *cmd]
    p = subprocess.run(cmd, capture_output=True, text=True, check=True)
    m = re.search(r"(\d+) events, \d+ allocators, ([\d.]+) s", p.stderr)
    if not m:
        raise RuntimeError(f"no timing in: {p.stderr}")
    return int(m.group(1)) / float(m.group(2))


def model_contexts(export_dir: str, path: str, dataset: str | None = None, stacks: int = 5000) -> str:
    """The model predictor's contexts file for stack ids 0..stacks-1 (simulator/model_input.py)."""
    from export import serve
    from model.data import load_dataset
    from simulator.model_input import write_contexts

    export = export_dirs.read(export_dir)
    manifest = export.manifest
    if dataset is None:
        config = json.loads(pathlib.Path(manifest["model_dir"], "config.json").read_text())
        dataset = config["training_datasets"][0]["path"]
    frames = [tuple(f) for f in load_dataset(dataset).all().frames]
    return write_contexts(path, plugin=serve.model_plugin(export_dir),
                          model_id=manifest["model_id"],
                          definition=export.context(),
                          stack_context={i: frames[i % len(frames)] for i in range(stacks)})


def model_stats(report: str) -> dict:
    p = next(a for a in json.loads(pathlib.Path(report).read_text())["allocators"]
             if a["name"] == "llama:model")["predictor"]
    return {"cache": p["cache"], "model_runs": p["model_runs"], "timing_ns": p["timing_ns"]}


def print_model(name: str, st: dict) -> None:
    c, t = st["cache"], st["timing_ns"]
    print(f"{'':24s} cache: {c['hits']:,} hits, {c['misses']:,} misses ({100 * c['hit_rate']:.1f}% hits), "
          f"{c['evictions']:,} evictions, {st['model_runs']:,} model runs")
    for k in ("cache_hit", "model_call"):
        x = t[k]
        timed = x.get("timed_calls", x["calls"])
        sample = f" ({timed:,} timed)" if timed != x["calls"] else ""
        print(f"{'':24s} {k:10s}: {x['calls']:,} calls{sample}, mean {x['mean']:.0f} ns, p50 {x['p50']:.0f}, "
              f"p99 {x['p99']:.0f}, total {x['total_s']:.2f} s")
    if "clock_read" in t:  # a timed hit's interval holds about one clock read
        print(f"{'':24s} clock read: {t['clock_read']:.0f} ns (a hit's own cost: about its mean less this)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--objects", type=int, default=4_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--model", metavar="EXPORT_DIR", help="also time LLAMA with this exported model")
    ap.add_argument("--model-dataset", metavar="DIR",
                    help="dataset whose contexts the model is given (default: the model's "
                         "training dataset, from the export manifest)")
    ap.add_argument("--model-objects", type=int, default=200_000,
                    help="objects of the every-call-runs-the-model trace (default 200k)")
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
        if a.model:
            contexts = model_contexts(a.model, os.path.join(tmp, "contexts.txt"), a.model_dataset)
            small = os.path.join(tmp, "small.lttrace")
            synthetic_trace(small, a.model_objects)
            sites = os.path.join(tmp, "sites.lttrace")
            synthetic_trace(sites, a.objects, sites=True)
            report = os.path.join(tmp, "model.json")
            spec = ["--no-baseline", "--predictor", f"model=model:{contexts}"]
            for name, tr_path, extra in (("llama-model", sites, []),
                                         ("llama-oracle (same trace)", sites, None),
                                         ("llama-model-uniform", small, []),
                                         ("llama-model-every-call", small,
                                          ["--model-revalidate-every", "1"])):
                if extra is None:
                    rates = [run_once(tr_path, ["--no-baseline", "--predictor", "oracle"])
                             for _ in range(a.runs)]
                    mean = statistics.mean(rates)
                    results["configs"][name] = {"events_per_s": rates, "mean": mean}
                    print(f"{name:24s} {mean / 1e6:6.2f} M events/s")
                    continue
                rates, stats = [], None
                for _ in range(a.runs):
                    rates.append(run_once(tr_path, spec + extra, report))
                    stats = model_stats(report)
                mean = statistics.mean(rates)
                sd = statistics.stdev(rates) if len(rates) > 1 else 0.0
                results["configs"][name] = {"events_per_s": rates, "mean": mean, "sd": sd,
                                            "objects": a.objects if tr_path == sites else a.model_objects,
                                            "model": stats}
                print(f"{name:24s} {mean / 1e6:6.2f} M events/s ± {sd / 1e6:.2f} "
                      f"(runs: {', '.join(f'{r / 1e6:.2f}' for r in rates)})")
                print_model(name, stats)
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
