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

--combine writes combined.md/.json into --out (default: next to the first): every row as
mean ± sd and min..max over all (load seed, model seed) runs, the worst run, every run's
figures and the machine's load during every profile.

Workloads (--workload): `phases` (benchmarks/servers/redis_phases.py, the issue 13
figure: redis-benchmark and `redis-cli --pipe` as fast as they go) or `mixed`
(benchmarks/servers/redis_mixed.py: one command path, many fates; paced by the wall
clock, so what the server gets is the same on every machine).

The spread in one command (every load seed x every model seed, mean ± sd and the worst
run; each load seed in OUT/load<S>, the combined table in OUT/combined.md):

    nice .venv/bin/python benchmarks/simulate_redis.py --workload mixed \
        --load-seeds 1 2 3 --seeds 0 1 2 --out out/simulate_redis_mixed

Every profiling run records the machine's load while it ran (run.json `machine`:
load average, CPU busy and steal shares; lifetimes are on the wall clock, so a loaded
machine shifts the labels), and results.md reports it beside the figures.

Outputs under --out (default out/simulate_redis, out/simulate_redis_mixed for mixed).
OUT/stamp.json records the configuration and the code (git commit, modified files)
that made them. Steps whose outputs exist are reused only when the stamp matches;
an OUT made by another configuration or other code is refused (--fresh deletes it
first; --resume reuses it anyway and results.md says so). Redis 7.0+ is refused
(benchmarks/servers/redis.py).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shlex
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from benchmarks import roles_note  # noqa: E402
from benchmarks.servers import machine, redis, redis_fates, redis_mixed, redis_phases  # noqa: E402
from core import export_dir  # noqa: E402
from benchmarks.table3 import (check_stamp, loaded, machine_rows, policy_tag, spread,  # noqa: E402
                               write_combined)

LIFETIME = os.path.join(ROOT, ".venv", "bin", "lifetime")
ROWS = ("oracle", "model", "exact", "site", "one_class")
NAMES = {"oracle": "LLAMA + oracle", "model": "LLAMA + model", "exact": "LLAMA + exact table",
         "site": "LLAMA + site table", "one_class": "LLAMA + one class",
         "tcmalloc_rule": "LLAMA + TCMalloc rule (> 1 MiB)",
         "tcmalloc_rule_all": "LLAMA + TCMalloc rule (all sizes)"}
MB = 1 << 20
LOG: list[str] = []


def sh(cmd: list[str]) -> None:
    LOG.append(" ".join(shlex.quote(c) for c in cmd))
    print("+", LOG[-1], flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT)


WORKLOADS = {"phases": redis_phases, "mixed": redis_mixed, "fates": redis_fates}


def profile(version: str, run: int, out: str, args, full_trace: bool) -> str:
    d = os.path.join(out, "profiles")
    if not glob.glob(os.path.join(d, "*.ltprof")):
        shutil.rmtree(d, ignore_errors=True)
        seed = args.load_seed + run - 1
        module = WORKLOADS[args.workload]
        extra = {"keys": args.keys} if args.workload == "phases" else {"scale": args.scale}
        LOG.append(f"# {module.__name__.rsplit('.', 1)[1]}.run({version!r}, {d!r}, seed={seed}, "
                   f"full_trace={full_trace}, interval={None if full_trace else args.interval}, "
                   + ", ".join(f"{k}={v}" for k, v in extra.items()) + ")")
        print(LOG[-1], flush=True)
        before = machine.snapshot()
        with machine.Monitor() as mon:
            rec = module.run(version, d, seed=seed, full_trace=full_trace,
                             interval=None if full_trace else args.interval, **extra)
        rec.setdefault("machine", {"before": before, "during": mon.summary(),
                                   "after": machine.snapshot()})
        with open(os.path.join(out, "run.json"), "w") as f:
            json.dump(rec, f, indent=1)
    return d


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", choices=sorted(WORKLOADS), default="phases")
    ap.add_argument("--train", nargs="+", default=["5.0.6", "6.0.16"])
    ap.add_argument("--train-runs", type=int, default=1, help="sampled runs per train version")
    ap.add_argument("--test", default="6.2.14")
    ap.add_argument("--selection", nargs="*", default=["6.2.7", "6.2.9"],
                    help="selection versions (core/version_roles.json): profiled like the "
                         "training versions and read by build-dataset only to detect wrappers "
                         "(--detect-profiles; recorded as selection); none: detection on the "
                         "training profiles alone")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], help="model seeds")
    ap.add_argument("--load-seed", type=int, default=1)
    ap.add_argument("--load-seeds", nargs="+", type=int,
                    help="several load seeds: each in OUT/load<S>, then OUT/combined.md")
    ap.add_argument("--keys", type=int, default=redis_phases.GROW_KEYS,
                    help="phases: keys written in grow")
    ap.add_argument("--scale", type=float, default=1.0, help="mixed: factor on every rate")
    ap.add_argument("--interval", type=int, default=65536)
    ap.add_argument("--wrapper", action="append", default=[], metavar="NAME",
                    help="build-dataset --wrapper NAME (repeatable), e.g. sdsnewlen and "
                         "_sdsnewlen: Redis 6.2's sds constructor, a name older versions lack")
    ap.add_argument("--policy", default="paper", metavar="NAME[,NAME...]",
                    help="LLAMA's policy (`lifetime simulate --policy`), e.g. tolerant. Not part "
                         "of the stamp: profiles, datasets and models are shared; a policy other "
                         "than the paper's has its own sim-<policy>-seedS and "
                         "results-<policy>.json/md (and --combine reads those)")
    ap.add_argument("--out")
    ap.add_argument("--keep-trace", action="store_true",
                    help="keep the full-trace profile and .lttrace (large) when done")
    ap.add_argument("--fresh", action="store_true",
                    help="delete OUT (each load seed's) first: nothing is reused")
    ap.add_argument("--resume", action="store_true",
                    help="reuse outputs even if other code made them (said in results.md)")
    ap.add_argument("--combine", nargs="+", metavar="OUT",
                    help="only combine the results.json of earlier runs (one per load seed)")
    args = ap.parse_args()
    if args.combine:  # into --out when given, else next to the first
        return combine(args.combine, args.out, args.policy)
    for v in [*args.train, *args.selection, args.test]:
        redis.check_version(v)
    if args.out is None:
        args.out = os.path.join(ROOT, "out", "simulate_redis" if args.workload == "phases"
                                else f"simulate_redis_{args.workload}")
    LOG.append(f"cd {ROOT} && nice .venv/bin/python benchmarks/simulate_redis.py "
               + " ".join(shlex.quote(a) for a in sys.argv[1:]))
    if not args.load_seeds:
        return run_load_seed(args, os.path.abspath(args.out))
    outs = []
    for ls in args.load_seeds:
        args.load_seed = ls
        outs.append(os.path.join(os.path.abspath(args.out), f"load{ls}"))
        run_load_seed(args, outs[-1])
    return combine(outs, os.path.abspath(args.out), args.policy)


def run_load_seed(args, out: str) -> int:
    """Steps 1-5 for one load seed (args.load_seed) into OUT."""
    config = {"workload": args.workload, "train": args.train, "train_runs": args.train_runs,
              "test": args.test, "load_seed": args.load_seed, "interval": args.interval,
              **({"wrappers": args.wrapper} if args.wrapper else {}),
              **({"selection": args.selection} if args.selection else {}),
              **({"keys": args.keys} if args.workload == "phases" else {"scale": args.scale})}
    reuse = check_stamp(out, config, args.fresh, args.resume, "simulate_redis")
    t0 = time.monotonic()

    # 1-2. training profiles, dataset, models, exports
    ds = os.path.join(out, "dataset-train")
    if not os.path.exists(os.path.join(ds, "manifest.json")):
        cmd = [LIFETIME, "build-dataset", "--out", ds]
        for w in args.wrapper:
            cmd += ["--wrapper", w]
        for v in args.train:
            for k in range(1, args.train_runs + 1):
                d = profile(v, k, os.path.join(out, "train", v, f"run{k}"), args, False)
                cmd += ["--profiles", d, "--version-label", f"redis-{v}"]
        for v in args.selection:
            for k in range(1, args.train_runs + 1):
                d = profile(v, k, os.path.join(out, "selection", v, f"run{k}"), args, False)
                cmd += ["--detect-profiles", d, "--detect-version-label", f"redis-{v}"]
        sh(cmd)
    exports = {}
    for s in args.seeds:
        m, e = os.path.join(out, f"model-seed{s}"), os.path.join(out, f"export-seed{s}")
        if not os.path.exists(os.path.join(m, "config.json")):
            sh([LIFETIME, "train", "--dataset", ds, "--out", m, "--seed", str(s), "--refit"])
        if not export_dir.is_export(e):
            sh([LIFETIME, "export", m, "--out", e])
        exports[s] = e
    test_roles = roles_note.statuses("redis", [args.test], os.path.join(out, f"model-seed{args.seeds[0]}"),
                                     "simulate_redis", roles_note.simulation_uses(args.policy),
                                     args.train)

    # 3. full trace of the test version
    tdir = os.path.join(out, "test", args.test, "profiles")
    prof = None
    tag = policy_tag(args.policy)
    if not all(os.path.exists(os.path.join(out, f"sim{tag}-seed{s}", "report.json"))
               for s in args.seeds):
        tdir = profile(args.test, 1, os.path.join(out, "test", args.test), args, True)
        prof = sorted(glob.glob(os.path.join(tdir, "*.ltprof")), key=os.path.getsize)[-1]

    # 4. simulate per model seed (the first run converts; the others reuse the trace)
    reports = {}
    kept = sorted(glob.glob(os.path.join(out, "sim*-seed*", "trace.lttrace")))  # any policy's
    trace = kept[0] if kept else None
    for s in args.seeds:
        sim = os.path.join(out, f"sim{tag}-seed{s}")
        rep = os.path.join(sim, "report.json")
        if not os.path.exists(rep):
            src = trace if trace and os.path.exists(trace) else prof
            sh([LIFETIME, "simulate", src, "--train", ds, "--model", exports[s], "--out", sim]
               + (["--policy", args.policy] if tag else []))
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
                "baseline_steady_resident_bytes", "llama_steady_resident_bytes",
                "live_steady_state_bytes", "fragmentation_reduction",
                "resident_fragmentation_reduction", "baseline_peak_bytes",
                "llama_peak_bytes", "live_peak_bytes", "peak_fragmentation_reduction",
                "under_predicted_share")}
            base_peak, peak = rows[label]["baseline_peak_bytes"], rows[label]["llama_peak_bytes"]
            rows[label]["peak_ratio_to_baseline"] = (peak / base_peak if base_peak and peak
                                                     else None)
        cache = (r.get("model") or {}).get("cache") or {}
        per_seed[s] = {"rows": rows, "cache_hit_rate": cache.get("hit_rate"),
                       "cache": cache}
    first = reports[args.seeds[0]]
    labels = row_labels(per_seed[args.seeds[0]]["rows"])
    summary = {label: {k: spread([per_seed[s]["rows"][label][k] for s in per_seed
                                  if label in per_seed[s]["rows"]])
                       for k in per_seed[args.seeds[0]]["rows"][label]}
               for label in labels}
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
    result = {"workload": args.workload, "config": config, "policy": args.policy, **reuse,
              "train": args.train, "test": args.test, "test_roles": test_roles,
              "seeds": args.seeds,
              "interval": args.interval, "keys": args.keys, "load_seed": args.load_seed,
              "trace": first["trace"], "source": {k: first["source"].get(k) for k in (
                  "total_allocations", "complete", "full_trace", "coverage")},
              "live": first["live"], "summary": summary, "cache_hit_rate": hit,
              "targets": targets, "per_seed": per_seed, "runs": runs,
              "seconds": round(time.monotonic() - t0, 1)}
    with open(os.path.join(out, f"results{tag}.json"), "w") as f:
        json.dump(result, f, indent=1)
    text = markdown(result)
    with open(os.path.join(out, f"results{tag}.md"), "w") as f:
        f.write(text)
    with open(os.path.join(out, "commands.txt"), "a") as f:
        f.write("\n".join(LOG) + "\n")
    print(text)
    if not args.keep_trace:
        for p in [*glob.glob(os.path.join(tdir, "*.ltprof")),
                  *glob.glob(os.path.join(out, "sim*-seed*", "trace.lttrace"))]:
            os.remove(p)
    return 0


def row_labels(rows: dict) -> list[str]:
    """ROWS first (those present), then any other LLAMA row of the report (e.g. a
    context oracle), in the report's order."""
    return [r for r in ROWS if r in rows] + [r for r in rows if r not in ROWS]


COMBINED = ("accuracy_by_allocations", "accuracy_per_context_weighted", "accuracy_per_context",
            "llama_steady_state_bytes", "llama_peak_bytes", "fragmentation_reduction",
            "peak_fragmentation_reduction", "peak_ratio_to_baseline")


def combine(outs: list[str], dest: str | None = None, policy: str = "paper") -> int:
    """Every row over all (load seed, model seed) runs of several results.json: mean ±
    sd (min..max), the worst run, per-run figures and the machine's load per run.
    Written to DEST (default: the first OUT) as combined.md / combined.json."""
    results = []
    tag = policy_tag(policy)
    for o in outs:
        with open(os.path.join(o, f"results{tag}.json")) as f:
            results.append(json.load(f))
    runs = [(r["load_seed"], s, seed["rows"]) for r in results for s, seed in r["per_seed"].items()]
    base = {k: spread([r["summary"]["oracle"][k]["mean"] for r in results])
            for k in ("baseline_steady_state_bytes", "baseline_peak_bytes",
                      "live_steady_state_bytes", "live_peak_bytes")}
    labels = row_labels(runs[0][2])
    rows = {label: {k: spread([rows[label].get(k) for _, _, rows in runs if label in rows])
                    for k in COMBINED}
            for label in labels}
    per_run = []
    for ls, ms, r in runs:
        res = next(x for x in results if x["load_seed"] == ls)
        per_run.append({"load_seed": ls, "model_seed": ms,
                        "trace_objects": res["trace"]["records"],
                        "trace_seconds": res["trace"].get("seconds"),
                        "model_reduction": r["model"]["fragmentation_reduction"],
                        "oracle_reduction": r["oracle"]["fragmentation_reduction"],
                        "gap_points": r["oracle"]["fragmentation_reduction"]
                        - r["model"]["fragmentation_reduction"],
                        "model_accuracy": r["model"]["accuracy_by_allocations"],
                        "model_peak_ratio": r["model"].get("peak_ratio_to_baseline"),
                        "model_above_baseline_steady": r["model"]["llama_steady_state_bytes"]
                        > r["model"]["baseline_steady_state_bytes"]})
    gap = spread([x["gap_points"] for x in per_run])
    worst = min(per_run, key=lambda x: x["model_reduction"])
    machines = {r["load_seed"]: machine_rows(r.get("runs", {})) for r in results}
    out = {"workload": results[0].get("workload", "phases"), "policy": policy,
           "load_seeds": [r["load_seed"] for r in results], "runs": len(runs),
           "test": results[0]["test"], "train": results[0]["train"], "baseline": base,
           "rows": rows, "oracle_minus_model_points": gap, "worst_run": worst,
           "per_run": per_run, "machine": machines,
           "reused_outputs_of_other_code": {r["load_seed"]: r.get("reused_outputs_of_other_code")
                                            for r in results}}

    def pm(s, scale=100.0, digits=1):
        if not s or s.get("mean") is None:
            return "n/a"
        text = f"{s['mean'] * scale:.{digits}f}"
        if s["sd"] * scale >= 0.05:
            n = f"n={s['n']}, " if "n" in s else ""
            text += (f" ± {s['sd'] * scale:.{digits}f} ({n}{s['min'] * scale:.{digits}f}.."
                     f"{s['max'] * scale:.{digits}f})")
        return text

    def pc(s):
        text = pm(s)
        return text if text == "n/a" else text + "%"

    lines = [f"# Redis {out['test']} (full trace), `{out['workload']}` workload, trained on "
             f"{', '.join(out['train'])}: load seeds {out['load_seeds']}, {out['runs']} runs "
             f"(load seed x model seed); LLAMA policy: {policy}", "",
             f"baseline steady {pm(base['baseline_steady_state_bytes'], 1 / MB)} MiB, peak "
             f"{pm(base['baseline_peak_bytes'], 1 / MB)} MiB; live steady "
             f"{pm(base['live_steady_state_bytes'], 1 / MB)} MiB, peak {pm(base['live_peak_bytes'], 1 / MB)} MiB", "",
             "| allocator | acc. (objects) | acc. per context (weighted) | acc. per context | "
             "steady MiB | peak MiB | peak / baseline peak | frag. reduction (steady) | "
             "frag. reduction (peak) |",
             "|---|---|---|---|---|---|---|---|---|",
             f"| baseline (TCMalloc-like) | | | | {pm(base['baseline_steady_state_bytes'], 1 / MB)} | "
             f"{pm(base['baseline_peak_bytes'], 1 / MB)} | 1 | 0 | 0 |"]
    for label, r in rows.items():
        lines.append(f"| {NAMES.get(label, label)} | {pc(r['accuracy_by_allocations'])} | "
                     f"{pc(r['accuracy_per_context_weighted'])} | {pc(r['accuracy_per_context'])} | "
                     f"{pm(r['llama_steady_state_bytes'], 1 / MB)} | {pm(r['llama_peak_bytes'], 1 / MB)} | "
                     f"{pm(r['peak_ratio_to_baseline'], 1, 2)} | "
                     f"{pc(r['fragmentation_reduction'])} | {pc(r['peak_fragmentation_reduction'])} |")
    lines += ["", f"oracle minus model, steady-state reduction: {pm(gap)} points", "",
              f"worst run: load seed {worst['load_seed']}, model seed {worst['model_seed']}: "
              f"model {worst['model_reduction'] * 100:.1f}% (oracle "
              f"{worst['oracle_reduction'] * 100:.1f}%), accuracy by objects "
              f"{worst['model_accuracy'] * 100:.1f}%", "",
              "| load seed | model seed | trace objects | trace s | model reduction | oracle "
              "reduction | gap (points) | model acc. | model peak / baseline peak | "
              "model above baseline (steady) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for x in per_run:
        lines.append(f"| {x['load_seed']} | {x['model_seed']} | {x['trace_objects']:,} | "
                     f"{x['trace_seconds'] or 0:.1f} | {x['model_reduction'] * 100:.1f}% | "
                     f"{x['oracle_reduction'] * 100:.1f}% | {x['gap_points'] * 100:.1f} | "
                     f"{x['model_accuracy'] * 100:.1f}% | "
                     f"{x['model_peak_ratio'] or 0:.2f} | {'YES' if x['model_above_baseline_steady'] else 'no'} |")
    lines += ["", machine_markdown(machines), ""]
    stale = {k: v for k, v in out["reused_outputs_of_other_code"].items() if v}
    if stale:
        lines += [f"**Reused outputs made by other code** (--resume) for load seeds "
                  f"{sorted(stale)}: {stale}", ""]
    write_combined(dest or outs[0], out, lines, tag)
    return 0


def machine_markdown(machines: dict) -> str:
    lines = ["Machine while each profile was recorded (lifetimes are wall-clock: load shifts "
             "labels; LOADED: mean load average above the core count):", "",
             "| load seed | run | version | full trace | wall s | load avg (mean / max) | "
             "CPU busy (all cores) | late ticks (mixed) | max lag s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for ls, rows in machines.items():
        for m in rows:
            def f(x, fmt):
                return format(x, fmt) if isinstance(x, (int, float)) else "n/a"
            lines.append(f"| {ls} | {m['run']} | {m['version']} | {m['full_trace']} | "
                         f"{f(m['wall_s'], '.1f')} | {f(m['loadavg1_mean'], '.2f')} / "
                         f"{f(m['loadavg1_max'], '.2f')} ({m['cpus']} cores)"
                         f"{' LOADED' if loaded(m) else ''} | "
                         f"{f(m['busy_mean'], '.0%')} | {f(m['late_share'], '.1%')} | "
                         f"{f(m['max_lag_s'], '.2f')} |")
    return "\n".join(lines)


def markdown(r: dict) -> str:
    def pm(s, scale=1.0, digits=1):
        if s["mean"] is None:
            return "n/a"
        if s["sd"] < 5e-7 * max(1, abs(s["mean"])):
            return f"{s['mean'] * scale:.{digits}f}"
        n = f"n={s['n']}, " if "n" in s else ""
        return (f"{s['mean'] * scale:.{digits}f} ± {s['sd'] * scale:.{digits}f} "
                f"({n}{s['min'] * scale:.{digits}f}..{s['max'] * scale:.{digits}f})")

    s = r["summary"]
    b = s["oracle"]
    lines = [f"# Redis {r['test']} (full trace, `{r.get('workload', 'phases')}` workload, load "
             f"seed {r['load_seed']}), model trained on {', '.join(r['train'])} "
             f"(sampled, {r['interval']} B)", "",
             *roles_note.markdown_line(r.get("test_roles")),
             f"trace: {r['trace']['records']:,} objects, {r['trace']['seconds']:.1f} s; "
             f"model seeds {r['seeds']} (mean ± sample sd (n, min..max) where the row depends on the seed)", "",
             "| allocator | acc. (allocs) | acc. (bytes) | steady MiB | peak MiB | peak / "
             "baseline peak | live steady MiB | live peak MiB | frag. reduction (steady) | "
             "frag. reduction (peak) |",
             "|---|---|---|---|---|---|---|---|---|---|",
             f"| baseline (TCMalloc-like) | | | {pm(b['baseline_steady_state_bytes'], 1 / MB)} | "
             f"{pm(b['baseline_peak_bytes'], 1 / MB)} | 1 | {pm(b['live_steady_state_bytes'], 1 / MB)} "
             f"| {pm(b['live_peak_bytes'], 1 / MB)} | 0 | 0 |"]
    for label, row in s.items():
        lines.append(f"| {NAMES.get(label, label)} | {pm(row['accuracy_by_allocations'], 100)}% | "
                     f"{pm(row['accuracy_by_bytes'], 100)}% | "
                     f"{pm(row['llama_steady_state_bytes'], 1 / MB)} | "
                     f"{pm(row['llama_peak_bytes'], 1 / MB)} | "
                     f"{pm(row['peak_ratio_to_baseline'], 1, 2)} | "
                     f"{pm(row['live_steady_state_bytes'], 1 / MB)} | "
                     f"{pm(row['live_peak_bytes'], 1 / MB)} | "
                     f"{pm(row['fragmentation_reduction'], 100)}% | "
                     f"{pm(row['peak_fragmentation_reduction'], 100)}% |")
    t = r["targets"]
    lines += ["", f"model cache hit rate: {pm(r['cache_hit_rate'], 100, 2)}%", "",
              f"targets: model reduction ≥ 50%: {'met' if t['model_reduction_ge_50pct'] else 'NOT met'}; "
              f"within 10 points of the oracle: "
              f"{'met' if t['model_within_10_points_of_oracle'] else 'NOT met'}", "",
              machine_markdown({r["load_seed"]: machine_rows(r.get("runs", {}))}), ""]
    if r.get("reused_outputs_of_other_code"):
        lines += [f"**Reused outputs made by other code** (--resume): "
                  f"{r['reused_outputs_of_other_code']}", ""]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
