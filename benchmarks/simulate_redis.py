#!/usr/bin/env python3
"""Table 3 on Redis: LLAMA (model trained on older Redis versions) vs the TCMalloc-like
baseline on a full trace of a newer Redis going through grow / peak / shrink.

    nice .venv/bin/python benchmarks/simulate_redis.py --train 5.0.6 6.0.16 \\
        --test 6.2.14 --seeds 0 1 2

1. Sampled profiles (--interval, default 64 KiB) of every TRAIN version through the
   phases of benchmarks/servers/redis_phases.py (run k uses load seed LOAD_SEED + k - 1).
2. `lifetime build-dataset` over them (wrappers detected), `lifetime train --refit
   --seed S` per model seed (cross_version.py's recipe: default hyperparameters,
   refit), `lifetime export` per seed.
3. A full trace (`lifetime profile --full-trace`) of the TEST version, same phases.
4. `lifetime simulate TRACE --train DATASET --model EXPORT_S --out sim-seedS` per seed
   (the first run converts the profile; the others reuse its .lttrace).
5. results.json / results.md: the Table 3 rows (mean ± sd over the model seeds; rows
   that do not depend on the model are identical across seeds), peak and steady-state
   memory, the model's cache hit rate, and the commands.

Several load seeds (a different key/session mix and load for train and test alike):

    for s in 1 2 3; do nice .venv/bin/python benchmarks/simulate_redis.py --load-seed $s \
        --out out/simulate_redis_load$s; done
    .venv/bin/python benchmarks/simulate_redis.py --combine out/simulate_redis_load{1,2,3}

--combine writes combined.md/.json next to the first: every row as mean ± sd and min..max
over all (load seed, model seed) runs.

Outputs under --out (default out/simulate_redis). Steps whose outputs exist are
reused; delete them to redo. Redis 7.0+ is refused (benchmarks/servers/redis.py).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from benchmarks.servers import redis, redis_phases  # noqa: E402

LIFETIME = os.path.join(ROOT, ".venv", "bin", "lifetime")
ROWS = ("oracle", "model", "exact", "site", "one_class")
NAMES = {"oracle": "LLAMA + oracle", "model": "LLAMA + model", "exact": "LLAMA + exact table",
         "site": "LLAMA + site table", "one_class": "LLAMA + one class"}
MB = 1 << 20
LOG: list[str] = []


def sh(cmd: list[str]) -> None:
    LOG.append(" ".join(shlex.quote(c) for c in cmd))
    print("+", LOG[-1], flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT)


def profile(version: str, run: int, out: str, args, full_trace: bool) -> str:
    d = os.path.join(out, "profiles")
    if not glob.glob(os.path.join(d, "*.ltprof")):
        shutil.rmtree(d, ignore_errors=True)
        seed = args.load_seed + run - 1
        LOG.append(f"# redis_phases.run({version!r}, {d!r}, seed={seed}, "
                   f"full_trace={full_trace}, interval={None if full_trace else args.interval})")
        print(LOG[-1], flush=True)
        rec = redis_phases.run(version, d, seed=seed, full_trace=full_trace,
                               interval=None if full_trace else args.interval,
                               keys=args.keys)
        with open(os.path.join(out, "run.json"), "w") as f:
            json.dump(rec, f, indent=1)
    return d


def spread(values: list[float]) -> dict:
    values = [v for v in values if v is not None]
    if not values:
        return {"mean": None, "sd": None, "n": 0}
    return {"mean": statistics.fmean(values), "sd": statistics.pstdev(values),
            "min": min(values), "max": max(values), "n": len(values)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", nargs="+", default=["5.0.6", "6.0.16"])
    ap.add_argument("--train-runs", type=int, default=1, help="sampled runs per train version")
    ap.add_argument("--test", default="6.2.14")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], help="model seeds")
    ap.add_argument("--load-seed", type=int, default=1)
    ap.add_argument("--keys", type=int, default=redis_phases.GROW_KEYS)
    ap.add_argument("--interval", type=int, default=65536)
    ap.add_argument("--out", default=os.path.join(ROOT, "out", "simulate_redis"))
    ap.add_argument("--keep-trace", action="store_true",
                    help="keep the full-trace profile and .lttrace (large) when done")
    ap.add_argument("--combine", nargs="+", metavar="OUT",
                    help="only combine the results.json of earlier runs (one per load seed)")
    args = ap.parse_args()
    if args.combine:
        return combine(args.combine)
    for v in [*args.train, args.test]:
        redis.check_version(v)
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    LOG.append(f"cd {ROOT} && nice .venv/bin/python benchmarks/simulate_redis.py "
               + " ".join(shlex.quote(a) for a in sys.argv[1:]))
    t0 = time.monotonic()

    # 1-2. training profiles, dataset, models, exports
    ds = os.path.join(out, "dataset-train")
    if not os.path.exists(os.path.join(ds, "manifest.json")):
        cmd = [LIFETIME, "build-dataset", "--out", ds]
        for v in args.train:
            for k in range(1, args.train_runs + 1):
                d = profile(v, k, os.path.join(out, "train", v, f"run{k}"), args, False)
                cmd += ["--profiles", d, "--version-label", f"redis-{v}"]
        sh(cmd)
    exports = {}
    for s in args.seeds:
        m, e = os.path.join(out, f"model-seed{s}"), os.path.join(out, f"export-seed{s}")
        if not os.path.exists(os.path.join(m, "config.json")):
            sh([LIFETIME, "train", "--dataset", ds, "--out", m, "--seed", str(s), "--refit"])
        if not os.path.exists(os.path.join(e, "export_manifest.json")):
            sh([LIFETIME, "export", m, "--out", e])
        exports[s] = e

    # 3. full trace of the test version
    tdir = os.path.join(out, "test", args.test, "profiles")
    prof = None
    if not all(os.path.exists(os.path.join(out, f"sim-seed{s}", "report.json"))
               for s in args.seeds):
        tdir = profile(args.test, 1, os.path.join(out, "test", args.test), args, True)
        prof = sorted(glob.glob(os.path.join(tdir, "*.ltprof")), key=os.path.getsize)[-1]

    # 4. simulate per model seed (the first run converts; the others reuse the trace)
    reports, trace = {}, None
    for s in args.seeds:
        sim = os.path.join(out, f"sim-seed{s}")
        rep = os.path.join(sim, "report.json")
        if not os.path.exists(rep):
            src = trace if trace and os.path.exists(trace) else prof
            sh([LIFETIME, "simulate", src, "--train", ds, "--model", exports[s], "--out", sim])
        if trace is None and os.path.exists(os.path.join(sim, "trace.lttrace")):
            trace = os.path.join(sim, "trace.lttrace")
        with open(rep) as f:
            reports[s] = json.load(f)

    # 5. results
    per_seed = {}
    for s, r in reports.items():
        rows = {}
        for row in r["table3"]:
            label = row["allocator"].split(":", 1)[1]
            rows[label] = {k: row.get(k) for k in (
                "accuracy_by_allocations", "accuracy_by_bytes", "accuracy_per_context",
                "accuracy_per_context_weighted",
                "baseline_steady_state_bytes", "llama_steady_state_bytes",
                "live_steady_state_bytes", "fragmentation_reduction", "baseline_peak_bytes",
                "llama_peak_bytes", "live_peak_bytes", "peak_fragmentation_reduction",
                "under_predicted_share")}
        cache = (r.get("model") or {}).get("cache") or {}
        per_seed[s] = {"rows": rows, "cache_hit_rate": cache.get("hit_rate"),
                       "cache": cache}
    first = reports[args.seeds[0]]
    summary = {label: {k: spread([per_seed[s]["rows"][label][k] for s in per_seed
                                  if label in per_seed[s]["rows"]])
                       for k in per_seed[args.seeds[0]]["rows"][label]}
               for label in ROWS if label in per_seed[args.seeds[0]]["rows"]}
    hit = spread([per_seed[s]["cache_hit_rate"] for s in per_seed])
    model_red = summary["model"]["fragmentation_reduction"]["mean"]
    oracle_red = summary["oracle"]["fragmentation_reduction"]["mean"]
    targets = {"model_reduction_ge_50pct": model_red is not None and model_red >= 0.5,
               "model_within_10_points_of_oracle":
                   model_red is not None and oracle_red is not None
                   and oracle_red - model_red <= 0.10,
               "model_reduction_mean": model_red, "oracle_reduction": oracle_red}
    runs = {}
    for p in glob.glob(os.path.join(out, "**", "run.json"), recursive=True):
        with open(p) as f:
            runs[os.path.relpath(p, out)] = json.load(f)
    result = {"train": args.train, "test": args.test, "seeds": args.seeds,
              "interval": args.interval, "keys": args.keys, "load_seed": args.load_seed,
              "trace": first["trace"], "source": {k: first["source"].get(k) for k in (
                  "total_allocations", "complete", "full_trace", "coverage")},
              "live": first["live"], "summary": summary, "cache_hit_rate": hit,
              "targets": targets, "per_seed": per_seed, "runs": runs,
              "seconds": round(time.monotonic() - t0, 1)}
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(result, f, indent=1)
    text = markdown(result)
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write(text)
    with open(os.path.join(out, "commands.txt"), "a") as f:
        f.write("\n".join(LOG) + "\n")
    print(text)
    if not args.keep_trace:
        for p in [*glob.glob(os.path.join(tdir, "*.ltprof")),
                  *glob.glob(os.path.join(out, "sim-seed*", "trace.lttrace"))]:
            os.remove(p)
    return 0


COMBINED = ("accuracy_by_allocations", "accuracy_per_context_weighted", "accuracy_per_context",
            "llama_steady_state_bytes", "llama_peak_bytes", "fragmentation_reduction",
            "peak_fragmentation_reduction")


def combine(outs: list[str]) -> int:
    """Every row over all (load seed, model seed) runs of several results.json."""
    results = []
    for o in outs:
        with open(os.path.join(o, "results.json")) as f:
            results.append(json.load(f))
    runs = [(r["load_seed"], s, seed["rows"]) for r in results for s, seed in r["per_seed"].items()]
    base = {k: spread([r["summary"]["oracle"][k]["mean"] for r in results])
            for k in ("baseline_steady_state_bytes", "baseline_peak_bytes",
                      "live_steady_state_bytes", "live_peak_bytes")}
    rows = {label: {k: spread([rows[label].get(k) for _, _, rows in runs if label in rows])
                    for k in COMBINED}
            for label in ROWS}
    gap = spread([rows_["oracle"]["fragmentation_reduction"] - rows_["model"]["fragmentation_reduction"]
                  for _, _, rows_ in runs])
    out = {"load_seeds": [r["load_seed"] for r in results], "runs": len(runs),
           "test": results[0]["test"], "train": results[0]["train"], "baseline": base,
           "rows": rows, "oracle_minus_model_points": gap}

    def pm(s, scale=100.0, digits=1):
        if not s or s.get("mean") is None:
            return "n/a"
        text = f"{s['mean'] * scale:.{digits}f}"
        if s["sd"] * scale >= 0.05:
            text += f" ± {s['sd'] * scale:.{digits}f} ({s['min'] * scale:.{digits}f}..{s['max'] * scale:.{digits}f})"
        return text

    lines = [f"# Redis {out['test']} (full trace), trained on {', '.join(out['train'])}: "
             f"load seeds {out['load_seeds']}, {out['runs']} runs (load seed x model seed)", "",
             f"baseline steady {pm(base['baseline_steady_state_bytes'], 1 / MB)} MiB, peak "
             f"{pm(base['baseline_peak_bytes'], 1 / MB)} MiB; live steady "
             f"{pm(base['live_steady_state_bytes'], 1 / MB)} MiB, peak {pm(base['live_peak_bytes'], 1 / MB)} MiB", "",
             "| allocator | acc. (objects) | acc. per context (weighted) | acc. per context | "
             "steady MiB | peak MiB | frag. reduction (steady) | frag. reduction (peak) |",
             "|---|---|---|---|---|---|---|---|"]
    def pc(s):
        text = pm(s)
        return text if text == "n/a" else text + "%"

    for label, r in rows.items():
        lines.append(f"| {NAMES[label]} | {pc(r['accuracy_by_allocations'])} | "
                     f"{pc(r['accuracy_per_context_weighted'])} | {pc(r['accuracy_per_context'])} | "
                     f"{pm(r['llama_steady_state_bytes'], 1 / MB)} | {pm(r['llama_peak_bytes'], 1 / MB)} | "
                     f"{pc(r['fragmentation_reduction'])} | {pc(r['peak_fragmentation_reduction'])} |")
    lines += ["", f"oracle minus model, steady-state reduction: {pm(gap)} points", ""]
    with open(os.path.join(outs[0], "combined.json"), "w") as f:
        json.dump(out, f, indent=1)
    with open(os.path.join(outs[0], "combined.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


def markdown(r: dict) -> str:
    def pm(s, scale=1.0, digits=1):
        if s["mean"] is None:
            return "n/a"
        return (f"{s['mean'] * scale:.{digits}f}" if s["sd"] < 5e-7 * max(1, abs(s["mean"]))
                else f"{s['mean'] * scale:.{digits}f} ± {s['sd'] * scale:.{digits}f}")

    s = r["summary"]
    b = s["oracle"]
    lines = [f"# Redis {r['test']} (full trace), model trained on {', '.join(r['train'])} "
             f"(sampled, {r['interval']} B)", "",
             f"trace: {r['trace']['records']:,} objects, {r['trace']['seconds']:.1f} s; "
             f"model seeds {r['seeds']} (mean ± sd where the row depends on the seed)", "",
             "| allocator | acc. (allocs) | acc. (bytes) | steady MB | peak MB | live steady MB "
             "| live peak MB | frag. reduction (steady) | frag. reduction (peak) |",
             "|---|---|---|---|---|---|---|---|---|",
             f"| baseline (TCMalloc-like) | | | {pm(b['baseline_steady_state_bytes'], 1 / MB)} | "
             f"{pm(b['baseline_peak_bytes'], 1 / MB)} | {pm(b['live_steady_state_bytes'], 1 / MB)} "
             f"| {pm(b['live_peak_bytes'], 1 / MB)} | 0 | 0 |"]
    for label, row in s.items():
        lines.append(f"| {NAMES.get(label, label)} | {pm(row['accuracy_by_allocations'], 100)}% | "
                     f"{pm(row['accuracy_by_bytes'], 100)}% | "
                     f"{pm(row['llama_steady_state_bytes'], 1 / MB)} | "
                     f"{pm(row['llama_peak_bytes'], 1 / MB)} | "
                     f"{pm(row['live_steady_state_bytes'], 1 / MB)} | "
                     f"{pm(row['live_peak_bytes'], 1 / MB)} | "
                     f"{pm(row['fragmentation_reduction'], 100)}% | "
                     f"{pm(row['peak_fragmentation_reduction'], 100)}% |")
    t = r["targets"]
    lines += ["", f"model cache hit rate: {pm(r['cache_hit_rate'], 100, 2)}%", "",
              f"targets: model reduction ≥ 50%: {'met' if t['model_reduction_ge_50pct'] else 'NOT met'}; "
              f"within 10 points of the oracle: "
              f"{'met' if t['model_within_10_points_of_oracle'] else 'NOT met'}", ""]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
