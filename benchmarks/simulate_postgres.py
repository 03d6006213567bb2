#!/usr/bin/env python3
"""Table 3 on PostgreSQL: LLAMA (model trained on an older PostgreSQL) vs the TCMalloc-like
baseline on a full trace of a newer one, every process its own heap.

    nice .venv/bin/python benchmarks/simulate_postgres.py --train 15.5 --train-runs 2 \\
        --test 16.2 --seeds 0 --load-seed 1

1. Sampled profiles (--interval, default 64 KiB) of the TRAIN version through the mixed
   load of benchmarks/servers/postgres_mixed.py (run k uses load seed LOAD_SEED + k - 1);
   one profile per process (postmaster, backends, auxiliary processes).
2. `lifetime build-dataset` over them, `lifetime train --refit --seed S` and
   `lifetime export` per model seed (simulate_redis.py's recipe).
3. A full trace of the TEST version (load seed LOAD_SEED): again one profile per process.
4. Prediction quality on unseen contexts: a sampled run of the TEST version (load seed
   LOAD_SEED), `build-dataset --like` the training dataset, `model.evaluate` per seed
   (as benchmarks/cross_version.py): the model and the exact / site / majority tables,
   weighted and unweighted exact, on all contexts and on those unseen in training.
5. The simulation (`simulate_server`): a PostgreSQL server is many processes, each with
   its own malloc heap (a backend per connection, forked from the postmaster; a heap
   dies with its process).  So every process's full trace is simulated on its own
   (baseline and every LLAMA, one engine run per process, the same series interval for
   all), and the server's memory at time t is the sum over the processes alive at t of
   their heap's huge-page-backed memory (0 before a process's first allocation and
   after its end); live bytes likewise.  Steady state = the time-weighted mean of that
   sum over the second half of the server's run (first allocation of any process to the
   last end), peak = its maximum on the series grid (--series-ms, default 10 ms).  Not
   done: merging the processes into one trace (one heap for all processes: memory one
   process frees would be reused by another, which cannot happen), or simulating only
   the largest process (hides the short sessions and the per-process cost of LLAMA's
   open pages).
   Predictors: the tables are fit once on the training dataset; the context oracles are
   computed over the whole server (a context's objects in every process pooled: a
   per-context predictor does not know which backend it runs in); per-context accuracy
   against those pooled T95 labels; accuracy by objects and bytes summed over processes.
6. results.json / results.md: the Table 3 rows (mean ± sd over the model seeds), peak
   and steady-state memory and the peak's ratio to the baseline's, the processes, the
   unseen-context accuracy, the machine's load while profiling, and the commands.

Outputs under --out (default out/simulate_postgres/load<LOAD_SEED>); OUT/stamp.json as in
simulate_redis.py (--fresh, --resume).  PostgreSQL 17+ is refused.
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import shlex
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from benchmarks import roles_note, table3  # noqa: E402
from core import export_dir  # noqa: E402
from benchmarks.servers import postgres, postgres_mixed  # noqa: E402

LIFETIME = table3.LIFETIME
MB = table3.MB
ROWS = ("oracle", "context_t95", "context_cost", "model", "exact", "site", "one_class",
        "tcmalloc_rule", "tcmalloc_rule_all")
NAMES = {"oracle": "LLAMA + oracle (per object)", "context_t95": "LLAMA + context oracle (T95)",
         "context_cost": "LLAMA + context oracle (cost rule)", "model": "LLAMA + model",
         "exact": "LLAMA + exact table", "site": "LLAMA + site table",
         "one_class": "LLAMA + one class",
         "tcmalloc_rule": "LLAMA + TCMalloc rule (> 1 MiB)",
         "tcmalloc_rule_all": "LLAMA + TCMalloc rule (all sizes)"}
LOG = table3.Log()


def profile(version: str, seed: int, out: str, args, full_trace: bool) -> str:
    d = os.path.join(out, "profiles")
    if not glob.glob(os.path.join(d, "*.ltprof")):
        import shutil
        shutil.rmtree(d, ignore_errors=True)
        LOG.note(f"# postgres_mixed.run({version!r}, {d!r}, seed={seed}, full_trace={full_trace}, "
                 f"interval={None if full_trace else args.interval}, scale={args.scale})")
        rec = postgres_mixed.run(version, d, seed=seed, full_trace=full_trace,
                                 interval=None if full_trace else args.interval, scale=args.scale)
        rec.pop("log_tail", None)
        with open(os.path.join(out, "run.json"), "w") as f:
            json.dump(rec, f, indent=1)
    return d


# --- the server's simulation: one heap per process, summed on one timeline ----------

class Symbolizer:
    """Stacks -> the dataset's context frames, one module cache for every process and a
    memo per (mappings, addresses): forked backends share the postmaster's mappings."""

    def __init__(self, definition):
        from core import context as context_def
        from core import symbolize
        self.cd, self.definition = context_def, definition
        self.cache = symbolize.ModuleCache(debug_dirs=tuple(symbolize.DEFAULT_DEBUG_DIRS))
        self.memo: dict = {}
        self.syms: dict = {}

    def stacks(self, side: dict) -> dict:
        from simulator.convert import MappingRecord
        sig = tuple((m["start"], m["limit"], m["file_offset"], m["path"]) for m in side["mappings"])
        if sig not in self.syms:
            self.syms[sig] = self.cd.make_symbolizer([MappingRecord(m) for m in side["mappings"]],
                                                     cache=self.cache)
        sym = self.syms[sig]
        out = {}
        for st in side["stacks"]:
            key = (sig, tuple(st["addresses"]))
            if key not in self.memo:
                self.memo[key] = self.definition.frames(self.cd.machinery_free(sym, st["addresses"]))
            out[int(st["id"])] = self.memo[key]
        return out


def pooled_context_oracles(procs: list[dict], scheme, deadline_k=None) -> tuple[dict, dict, dict]:
    """Server-wide context oracles: ({context: T95 class}, {context: cost-rule class},
    {context: objects per true class}) with every process's objects of a context pooled
    (the rule of simulator.tables.context_t95_classes / context_oracle_tables)."""
    from pipeline.context_stats import ContextStats
    from core.lifetimes import DEADLINE_K, NS_PER_MS, cost_horizon, cost_rule
    from simulator.tables import _trace_records

    life_parts, cens_parts, size_parts, key_parts = [], [], [], []
    index: dict = {}
    by_bytes: dict = {}
    by_objects: dict = {}
    for p in procs:
        header, rec = _trace_records(p["trace"])
        if not len(rec):
            continue
        keys = {sid: index.setdefault(c, len(index)) for sid, c in p["contexts"].items()}
        sids, inv = np.unique(rec["stack"], return_inverse=True)
        of_sid = np.fromiter((keys[int(x)] for x in sids), np.int64, len(sids))
        key_parts.append(of_sid[inv.reshape(-1)])
        free, alloc = rec["free"], rec["alloc"]
        censored = free == np.iinfo(np.uint64).max
        life_ns = np.where(censored, np.uint64(header.end_ns) - alloc, free - alloc)
        life_parts.append(life_ns.astype(np.float64) / NS_PER_MS)
        cens_parts.append(censored)
        size_parts.append(np.asarray(rec["size"], np.uint64))
        for st in p["side"]["stacks"]:
            c = p["contexts"][int(st["id"])]
            by_bytes[c] = by_bytes.get(c, 0) + np.asarray(st["bytes"], np.float64)
            by_objects[c] = by_objects.get(c, 0) + np.asarray(st["objects"], np.float64)
    key_of = np.concatenate(key_parts)
    life, cens, size = (np.concatenate(life_parts), np.concatenate(cens_parts),
                        np.concatenate(size_parts))
    order = np.argsort(key_of, kind="stable")
    bounds = np.searchsorted(key_of[order], np.arange(len(index) + 1))
    t95 = {}
    for c, k in index.items():
        idx = order[bounds[k]:bounds[k + 1]]
        if not len(idx):
            continue
        st = ContextStats()
        st.obs_lifetime.frombytes(np.ascontiguousarray(life[idx]).tobytes())
        st.obs_censored.frombytes(cens[idx].astype(np.uint8).tobytes())
        st.obs_weight.frombytes(np.ones(len(idx), np.float64).tobytes())
        st.obs_size.frombytes(np.ascontiguousarray(size[idx]).tobytes())
        st.samples = len(idx)
        st.objects = float(len(idx))
        t95[c] = scheme.label(st.t95())
    k = DEADLINE_K if deadline_k is None else deadline_k
    horizon = cost_horizon(scheme.boundaries, k)
    cost = {c: (cost_rule(b, scheme.boundaries, deadline_k=k, horizon=horizon) if b.sum() > 0
                else t95.get(c)) for c, b in by_bytes.items()}
    return t95, {c: v for c, v in cost.items() if v is not None}, by_objects


def _sum_series(sims: list[dict], names: list[str], step: int) -> dict:
    """The server's series: per allocator name (and "live"), the sum over processes of
    each process's series on one grid, 0 outside a process's [start, end]."""
    start = min(s["trace"]["start_ns"] for s in sims)
    end = max(s["trace"]["end_ns"] for s in sims)
    grid = np.arange(start, end + step, step, dtype=np.int64)
    grid[-1] = min(grid[-1], end)
    steady = grid >= start + (end - start) / 2
    total = {n: np.zeros(len(grid)) for n in [*names, "live"]}
    contrib = []  # per process: its share of the server's steady-state mean, per name
    for s in sims:
        contrib.append({})
        t = np.asarray(s["series"]["t_ns"], np.int64)
        idx = np.searchsorted(t, grid, "right") - 1
        ok = (idx >= 0) & (grid <= s["trace"]["end_ns"])
        idx = idx.clip(0)
        for n in names:
            v = s["series"]["huge_page_bytes"].get(n)
            if v is not None:
                vals = np.where(ok, np.asarray(v, np.float64)[idx], 0.0)
                total[n] += vals
                contrib[-1][n] = float(vals[steady].mean())
        vals = np.where(ok, np.asarray(s["series"]["live_bytes"], np.float64)[idx], 0.0)
        total["live"] += vals
        contrib[-1]["live"] = float(vals[steady].mean())
    return {"t_ns": grid, "start_ns": start, "end_ns": end, "bytes": total, "contrib": contrib}


def _server_figures(series: dict) -> dict:
    half = series["start_ns"] + (series["end_ns"] - series["start_ns"]) / 2
    steady = series["t_ns"] >= half
    return {n: {"steady_state_bytes": float(v[steady].mean()), "peak_bytes": float(v.max()),
                "final_bytes": float(v[-1])} for n, v in series["bytes"].items()}


def prepare_processes(profiles_dir: str, ds: str, out: str, step_ns: int, deadline_k=None,
                      policy: str = "paper") -> dict:
    """Converts every process's profile, fits the tables, computes the server-wide context
    oracles, writes each process's class tables and runs the engine once per process with
    the model-independent predictors.  Returns the processes and what the rows need."""
    import simulator
    from model import baselines
    from simulator import convert, tables
    from simulator.trace import write_class_table

    _ds, ex, definition, scheme = tables.training_examples(ds)
    majority = baselines._majority(ex.label, ex.weight)
    fitted = {"exact": baselines.LookupTable(baselines.exact_key, ex.frames, ex.label, ex.weight, majority),
              "site": baselines.LookupTable(baselines.site_key, ex.frames, ex.label, ex.weight, majority)}
    sym = Symbolizer(definition)
    procs, skipped = [], []
    t0 = time.monotonic()
    for path in sorted(glob.glob(os.path.join(profiles_dir, "*.ltprof"))):
        stem = os.path.basename(path).removesuffix(".ltprof")
        d = os.path.join(out, "procs", stem)
        trace = os.path.join(d, "trace.lttrace")
        if not os.path.exists(convert.stacks_path(trace)):
            try:
                convert.convert_profile(path, trace, scheme)
            except convert.ConvertError as e:
                skipped.append({"profile": stem, "why": str(e)})
                continue
        side = convert.load_stacks(convert.stacks_path(trace))
        if not side["counts"]["records"]:
            skipped.append({"profile": stem, "why": "no records"})
            continue
        procs.append({"stem": stem, "dir": d, "trace": trace, "side": side,
                      "contexts": sym.stacks(side)})
    print(f"simulate_postgres: {len(procs)} processes converted and symbolized "
          f"({len(skipped)} skipped) in {time.monotonic() - t0:.0f} s", flush=True)
    t95, cost, ctx_objects = pooled_context_oracles(procs, scheme, deadline_k)
    table_class = {}
    for name, table in fitted.items():
        ctxs = sorted({c for p in procs for c in p["contexts"].values()})
        pred, hit = table.predict(ctxs)
        table_class[name] = {c: (int(y), bool(h)) for c, y, h in zip(ctxs, pred.tolist(), hit.tolist())}
    specs = None
    for p in procs:
        tdir = os.path.join(p["dir"], "tables")
        os.makedirs(tdir, exist_ok=True)
        files = {}
        for name in ("exact", "site"):
            files[name] = write_class_table(os.path.join(tdir, f"{name}.tbl"), {
                sid: table_class[name][c][0] for sid, c in p["contexts"].items()})
        files["context_t95"] = write_class_table(os.path.join(tdir, "context_t95.tbl"), {
            sid: t95[c] for sid, c in p["contexts"].items() if c in t95})
        files["context_cost"] = write_class_table(os.path.join(tdir, "context_cost.tbl"), {
            sid: cost[c] for sid, c in p["contexts"].items() if c in cost})
        specs = ["oracle", f"context_t95=table:{files['context_t95']}",
                 f"context_cost=table:{files['context_cost']}", f"exact=table:{files['exact']}",
                 f"site=table:{files['site']}", f"one_class=constant:{majority}",
                 # TCMalloc's removed online rule, one database per process as in TCMalloc;
                 # objects it does not cover get the majority (table_default), as the tables
                 "tcmalloc_rule=tcmalloc-rule:large", "tcmalloc_rule_all=tcmalloc-rule:all"]
        sim_json = os.path.join(p["dir"], f"simulation{table3.policy_tag(policy)}.json")
        if not os.path.exists(sim_json):
            simulator.simulate(p["trace"], specs, table_default=majority,
                               series_interval_ns=step_ns, deadline_k=deadline_k,
                               json_out=sim_json, policy=[policy])
        p["sim_json"] = sim_json
    print(f"simulate_postgres: engine runs done in {time.monotonic() - t0:.0f} s", flush=True)
    coverage = {}
    for name in fitted:
        hit_obj = sum(float(ctx_objects[c].sum()) for c in ctx_objects if table_class[name][c][1])
        coverage[name] = {"contexts": sum(1 for c in ctx_objects if table_class[name][c][1]),
                          "contexts_total": len(ctx_objects),
                          "objects_share": hit_obj / sum(float(v.sum()) for v in ctx_objects.values())}
    return {"procs": procs, "skipped": skipped, "t95": t95, "cost": cost,
            "ctx_objects": ctx_objects, "table_class": table_class, "majority": majority,
            "definition": definition, "scheme": scheme, "coverage": coverage,
            "class_names": scheme.class_names}


def run_model(common: dict, export: str, out: str, step_ns: int, deadline_k=None,
              policy: str = "paper") -> list[str]:
    """The model predictor on every process (its own engine run, no baseline): contexts
    file, served classes, simulation JSON per process under OUT."""
    import simulator
    from simulator import model_input

    jsons = []
    for p in common["procs"]:
        d = os.path.join(out, "procs", p["stem"])
        sim_json = os.path.join(d, "simulation.json")
        served = os.path.join(d, "served.txt")
        if not os.path.exists(sim_json):
            mi = model_input.prepare(export, p["side"], d, class_names=common["class_names"],
                                     reuse=(common["definition"], p["contexts"]))
            if mi.stack_context is not p["contexts"]:
                raise SystemExit("simulate_postgres: the model's context definition is not the "
                                 "dataset's; per-context figures assume they are equal")
            simulator.simulate(p["trace"], [f"model=model:{mi.contexts_file}"], baseline=False,
                               table_default=common["majority"], series_interval_ns=step_ns,
                               deadline_k=deadline_k, json_out=sim_json, model_served=served,
                               policy=[policy])
        jsons.append(sim_json)
    return jsons


def server_rows(common: dict, model_jsons: list[str] | None, step_ns: int) -> dict:
    """Table 3 rows of the server (every process summed): per LLAMA label its accuracy
    (objects, bytes, per context), steady-state and peak memory, reductions."""
    from simulator import model_input
    from simulator.tables import context_accuracy

    sims = []
    for i, p in enumerate(common["procs"]):
        with open(p["sim_json"]) as f:
            s = json.load(f)
        if model_jsons:
            with open(model_jsons[i]) as f:
                m = json.load(f)
            s["allocators"] += m["allocators"]
            s["series"]["huge_page_bytes"].update(m["series"]["huge_page_bytes"])
            if m["series"]["t_ns"] != s["series"]["t_ns"]:
                raise SystemExit(f"{p['stem']}: model and table runs have different series grids")
        sims.append(s)
    names = [a["name"] for a in sims[0]["allocators"]]
    series = _sum_series(sims, names, step_ns)
    fig = _server_figures(series)
    base, live = fig["baseline"], fig["live"]
    # accuracy summed over processes
    acc = collections.defaultdict(lambda: collections.Counter())
    for p, s in zip(common["procs"], sims):
        nbytes = sum(sum(st["bytes"]) for st in p["side"]["stacks"])
        for a in s["allocators"]:
            pr = a.get("predictor")
            if not pr:
                continue
            c = acc[a["name"]]
            c["objects"] += pr["objects"]
            c["correct"] += pr["correct"]
            c["under"] += pr["under_predicted"]
            c["bytes"] += nbytes
            c["correct_bytes"] += pr["accuracy_by_bytes"] * nbytes
    # per-context accuracy against the server-wide T95 labels
    t95, objects = common["t95"], common["ctx_objects"]
    per_context = {}
    first = {}
    for p in common["procs"]:
        for sid, c in p["contexts"].items():
            first.setdefault(c, (p, sid))
    for name in ("exact", "site"):
        right = {c: common["table_class"][name][c][0] == t95[c] for c in objects if c in t95}
        per_context[name] = context_accuracy(right, {c: objects[c] for c in right})
    per_context["one_class"] = context_accuracy(
        {c: common["majority"] == t95[c] for c in objects if c in t95},
        {c: objects[c] for c in objects if c in t95})
    per_context["context_t95"] = context_accuracy({c: True for c in objects if c in t95},
                                                  {c: objects[c] for c in objects if c in t95})
    per_context["context_cost"] = context_accuracy(
        {c: common["cost"].get(c) == t95[c] for c in objects if c in t95},
        {c: objects[c] for c in objects if c in t95})
    if model_jsons:
        given: dict = {}
        for p, j in zip(common["procs"], model_jsons):
            served = model_input.read_served(os.path.join(os.path.dirname(j), "served.txt"))
            for sid, classes in served.get("model", {}).items():
                g = given.setdefault(p["contexts"][sid], collections.Counter())
                g.update(classes)
        right = {c: max(given[c], key=lambda k: (given[c][k], -k)) == t95[c]
                 for c in given if c in t95}
        per_context["model"] = context_accuracy(right, {c: objects[c] for c in right})
    rows = {}
    for n in names:
        if not n.startswith("llama:"):
            continue
        label = n.split(":", 1)[1]
        f, c = fig[n], acc[n]
        red = ((base["steady_state_bytes"] - f["steady_state_bytes"])
               / (base["steady_state_bytes"] - live["steady_state_bytes"]))
        pred = ((base["peak_bytes"] - f["peak_bytes"]) / (base["peak_bytes"] - live["peak_bytes"])
                if base["peak_bytes"] > live["peak_bytes"] else None)
        pc = per_context.get(label) or {}
        rows[label] = {
            "accuracy_by_allocations": c["correct"] / c["objects"] if c["objects"] else None,
            "accuracy_by_bytes": c["correct_bytes"] / c["bytes"] if c["bytes"] else None,
            "accuracy_per_context": pc.get("accuracy"),
            "accuracy_per_context_weighted": pc.get("accuracy_weighted"),
            "under_predicted_share": c["under"] / c["objects"] if c["objects"] else None,
            "baseline_steady_state_bytes": base["steady_state_bytes"],
            "llama_steady_state_bytes": f["steady_state_bytes"],
            "live_steady_state_bytes": live["steady_state_bytes"],
            "fragmentation_reduction": red,
            "baseline_peak_bytes": base["peak_bytes"], "llama_peak_bytes": f["peak_bytes"],
            "live_peak_bytes": live["peak_bytes"], "peak_fragmentation_reduction": pred,
            "peak_ratio_to_baseline": f["peak_bytes"] / base["peak_bytes"]}
    # per process: what each heap holds in the server's steady state
    half = series["start_ns"] + (series["end_ns"] - series["start_ns"]) / 2
    procs = []
    groups: dict = {}
    run_s = (series["end_ns"] - series["start_ns"]) / 1e9
    for p, s, contrib in zip(common["procs"], sims, series["contrib"]):
        tr = s["trace"]
        hp = s["series"]["huge_page_bytes"]
        t = np.asarray(s["series"]["t_ns"])
        in_half = t >= half
        group = ("whole run" if (tr["end_ns"] - tr["start_ns"]) / 1e9 >= run_s / 2
                 else "short-lived")
        g = groups.setdefault(group, collections.Counter())
        g["processes"] += 1
        g["objects"] += tr["records"]
        g.update({k: v for k, v in contrib.items()})
        procs.append({"process": p["stem"], "objects": tr["records"], "group": group,
                      "steady_contribution_bytes": contrib,
                      "seconds": (tr["end_ns"] - tr["start_ns"]) / 1e9,
                      "starts_s": (tr["start_ns"] - series["start_ns"]) / 1e9,
                      "baseline_peak_bytes": max(hp["baseline"]),
                      "llama_oracle_peak_bytes": max(hp["llama:oracle"]),
                      **({"llama_model_peak_bytes": max(hp["llama:model"])} if "llama:model" in hp else {}),
                      "live_peak_bytes": max(s["series"]["live_bytes"]),
                      "in_steady_half": bool(in_half.any())})
    return {"rows": rows, "baseline": base, "live": live, "processes": procs,
            "groups": {k: dict(v) for k, v in groups.items()},
            "server": {"start_ns": int(series["start_ns"]), "end_ns": int(series["end_ns"]),
                       "seconds": (series["end_ns"] - series["start_ns"]) / 1e9,
                       "objects": sum(s["trace"]["records"] for s in sims),
                       "processes": len(sims), "series_step_ns": step_ns},
            "series": {"t_s": ((series["t_ns"] - series["start_ns"]) / 1e9).round(3).tolist(),
                       **{k: (v / MB).round(3).tolist() for k, v in series["bytes"].items()}}}


# --- prediction quality on unseen contexts (cross_version.py's recipe) --------------

def unseen_accuracy(model_dir: str, train_ds: str, test_ds: str) -> dict:
    from model.evaluate import evaluate
    from model.metrics import headline

    r = evaluate(model_dir, [test_ds], split="all", train_dirs=[train_ds])
    preds = ("model", "baseline_exact", "baseline_site", "baseline_majority")
    return {"unseen": {p: headline(r["unseen"][p]) for p in preds},
            "overall": {p: headline(r["overall"][p]) for p in preds},
            "unseen_share": r["unseen_share"]}


# --- main -----------------------------------------------------------------------

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", nargs="+", default=["15.5"])
    ap.add_argument("--train-runs", type=int, default=2, help="sampled runs per train version")
    ap.add_argument("--test", default="16.2")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0], help="model seeds")
    ap.add_argument("--load-seed", type=int, default=1)
    ap.add_argument("--scale", type=float, default=1.0, help="factor on every rate of the load")
    ap.add_argument("--interval", type=int, default=65536)
    ap.add_argument("--series-ms", type=int, default=10,
                    help="grid of the server's summed memory series (peak resolution)")
    ap.add_argument("--deadline-k", type=int, default=None)
    ap.add_argument("--out")
    ap.add_argument("--keep-trace", action="store_true",
                    help="keep the full-trace profiles and per-process traces when done")
    ap.add_argument("--fresh", action="store_true")
    ap.add_argument("--resume", action="store_true",
                    help="reuse outputs even if other code made them (said in results.md)")
    ap.add_argument("--policy", default="paper", metavar="NAME[,NAME...]",
                    help="LLAMA's policy (`lifetime simulate --policy`), e.g. tolerant. Not part "
                         "of the stamp: traces, datasets and models are shared; a policy other "
                         "than the paper's has its own simulation-<policy>.json per process, "
                         "sim-<policy>-seedS and results-<policy>.json/md (--combine reads those)")
    ap.add_argument("--combine", nargs="+", metavar="OUT",
                    help="only combine earlier runs (one OUT per load seed) into "
                         "combined.md/.json next to the first")
    args = ap.parse_args()
    if args.combine:
        return combine([os.path.abspath(o) for o in args.combine], args.policy)
    for v in [*args.train, args.test]:
        postgres.check_version(v)
    out = os.path.abspath(args.out or os.path.join(ROOT, "out", "simulate_postgres",
                                                   f"load{args.load_seed}"))
    LOG.lines.append(f"cd {ROOT} && nice .venv/bin/python benchmarks/simulate_postgres.py "
                     + " ".join(shlex.quote(a) for a in sys.argv[1:]))
    config = {"workload": "postgres-mixed", "train": args.train, "train_runs": args.train_runs,
              "test": args.test, "load_seed": args.load_seed, "interval": args.interval,
              "scale": args.scale, "series_ms": args.series_ms, "deadline_k": args.deadline_k}
    reuse = table3.check_stamp(out, config, args.fresh, args.resume, "simulate_postgres")
    t0 = time.monotonic()
    step = args.series_ms * 1_000_000

    # 1-2. training profiles, dataset, models, exports
    ds = os.path.join(out, "dataset-train")
    if not os.path.exists(os.path.join(ds, "manifest.json")):
        cmd = [LIFETIME, "build-dataset", "--out", ds]
        for v in args.train:
            for k in range(1, args.train_runs + 1):
                d = profile(v, args.load_seed + k - 1, os.path.join(out, "train", v, f"run{k}"),
                            args, False)
                cmd += ["--profiles", d, "--version-label", f"postgres-{v}"]
        LOG.sh(cmd)
    exports = {}
    for s in args.seeds:
        m, e = os.path.join(out, f"model-seed{s}"), os.path.join(out, f"export-seed{s}")
        if not os.path.exists(os.path.join(m, "config.json")):
            LOG.sh([LIFETIME, "train", "--dataset", ds, "--out", m, "--seed", str(s), "--refit"])
        if not export_dir.is_export(e):
            LOG.sh([LIFETIME, "export", m, "--out", e])
        exports[s] = e
    test_roles = roles_note.statuses("postgres", [args.test],
                                     os.path.join(out, f"model-seed{args.seeds[0]}"),
                                     "simulate_postgres", roles_note.simulation_uses(args.policy),
                                     args.train)

    # 3. full trace of the test version; 4. a sampled run of it for the unseen contexts
    tdir = profile(args.test, args.load_seed, os.path.join(out, "test", args.test), args, True)
    eds = os.path.join(out, "dataset-eval")
    if not os.path.exists(os.path.join(eds, "manifest.json")):
        d = profile(args.test, args.load_seed, os.path.join(out, "eval", args.test, "run1"),
                    args, False)
        LOG.sh([LIFETIME, "build-dataset", "--out", eds, "--profiles", d, "--version-label",
                f"postgres-{args.test}", "--like", ds])
    unseen = {}
    for s in args.seeds:
        path = os.path.join(out, f"model-seed{s}", "unseen_eval.json")
        if not os.path.exists(path):
            res = unseen_accuracy(os.path.join(out, f"model-seed{s}"), ds, eds)
            with open(path, "w") as f:
                json.dump(res, f, indent=1)
        with open(path) as f:
            unseen[s] = json.load(f)

    # 5. simulate every process, then the model per seed
    LOG.note(f"# simulate_postgres.prepare_processes({tdir!r}, {ds!r}, series {args.series_ms} ms)")
    tag = table3.policy_tag(args.policy)
    common = prepare_processes(tdir, ds, os.path.join(out, "sim"), step, args.deadline_k,
                               args.policy)
    per_seed = {}
    for s in args.seeds:
        LOG.note(f"# simulate_postgres.run_model(export-seed{s})")
        jsons = run_model(common, exports[s], os.path.join(out, f"sim{tag}-seed{s}"), step,
                          args.deadline_k, args.policy)
        per_seed[s] = server_rows(common, jsons, step)
        with open(os.path.join(out, f"sim{tag}-seed{s}", "server.json"), "w") as f:
            json.dump(per_seed[s], f)

    # 6. results
    first = per_seed[args.seeds[0]]
    labels = [r for r in ROWS if r in first["rows"]]
    summary = {label: {k: table3.spread([per_seed[s]["rows"][label][k] for s in per_seed])
                       for k in first["rows"][label]} for label in labels}
    runs = {}
    for p in glob.glob(os.path.join(out, "**", "run.json"), recursive=True):
        with open(p) as f:
            runs[os.path.relpath(p, out)] = json.load(f)
    gaps = {"oracle_minus_model": table3.spread([
                per_seed[s]["rows"]["oracle"]["fragmentation_reduction"]
                - per_seed[s]["rows"]["model"]["fragmentation_reduction"] for s in per_seed]),
            "oracle_minus_context_t95": table3.spread([
                per_seed[s]["rows"]["oracle"]["fragmentation_reduction"]
                - per_seed[s]["rows"]["context_t95"]["fragmentation_reduction"] for s in per_seed]),
            "context_t95_minus_model": table3.spread([
                per_seed[s]["rows"]["context_t95"]["fragmentation_reduction"]
                - per_seed[s]["rows"]["model"]["fragmentation_reduction"] for s in per_seed])}
    result = {"workload": "postgres-mixed", "config": config, "policy": args.policy, **reuse,
              "train": args.train,
              "test": args.test, "test_roles": test_roles, "seeds": args.seeds,
              "load_seed": args.load_seed,
              "server": first["server"], "baseline": first["baseline"], "live": first["live"],
              "summary": summary, "gaps": gaps, "coverage": common["coverage"],
              "contexts": {"server_wide": len(common["t95"]),
                           "cost_rule_equals_t95": sum(1 for c in common["t95"]
                                                       if common["cost"].get(c) == common["t95"][c])},
              "skipped_profiles": common["skipped"], "processes": first["processes"],
              "groups": {s: per_seed[s]["groups"] for s in per_seed},
              "unseen": unseen, "runs": runs, "seconds": round(time.monotonic() - t0, 1)}
    with open(os.path.join(out, f"results{tag}.json"), "w") as f:
        json.dump(result, f, indent=1)
    text = markdown(result)
    with open(os.path.join(out, f"results{tag}.md"), "w") as f:
        f.write(text)
    with open(os.path.join(out, "commands.txt"), "a") as f:
        f.write("\n".join(LOG.lines) + "\n")
    print(text)
    if not args.keep_trace:
        for p in [*glob.glob(os.path.join(tdir, "*.ltprof")),
                  *glob.glob(os.path.join(out, "sim", "procs", "*", "trace.lttrace"))]:
            os.remove(p)
    return 0


COMBINED = ("accuracy_by_allocations", "accuracy_per_context_weighted", "accuracy_per_context",
            "llama_steady_state_bytes", "llama_peak_bytes", "fragmentation_reduction",
            "peak_ratio_to_baseline")


def combine(outs: list[str], policy: str = "paper") -> int:
    """Every row over all (load seed, model seed) runs: mean ± sd (min..max), the worst
    run, and the unseen-context accuracy; OUTS[0]/../combined.{md,json}."""
    runs, unseen = [], []
    tag = table3.policy_tag(policy)
    for o in outs:
        with open(os.path.join(o, f"results{tag}.json")) as f:
            res = json.load(f)
        for j in sorted(glob.glob(os.path.join(o, f"sim{tag}-seed*", "server.json"))):
            seed = int(os.path.basename(os.path.dirname(j)).removeprefix(f"sim{tag}-seed"))
            with open(j) as f:
                srv = json.load(f)
            runs.append((res["load_seed"], seed, srv))
        for seed, u in res["unseen"].items():
            unseen.append((res["load_seed"], seed, u))
    labels = [r for r in ROWS if r in runs[0][2]["rows"]]
    rows = {label: {k: table3.spread([srv["rows"][label][k] for _, _, srv in runs])
                    for k in COMBINED} for label in labels}
    base = {k: table3.spread([srv["baseline"][k] for _, _, srv in runs])
            for k in ("steady_state_bytes", "peak_bytes")}
    live = {k: table3.spread([srv["live"][k] for _, _, srv in runs])
            for k in ("steady_state_bytes", "peak_bytes")}
    worst = min(runs, key=lambda r: r[2]["rows"]["model"]["fragmentation_reduction"])
    preds = ("model", "baseline_exact", "baseline_site", "baseline_majority")
    acc = {scope: {p: {f: table3.spread([u[scope][p][f] for _, _, u in unseen])
                       for f in ("weighted_exact", "unweighted_exact")} for p in preds}
           for scope in ("unseen", "overall")}
    out = {"policy": policy, "runs": [(a, b) for a, b, _ in runs], "baseline": base, "live": live, "rows": rows,
           "worst_model_run": {"load_seed": worst[0], "model_seed": worst[1],
                               "model_reduction": worst[2]["rows"]["model"]["fragmentation_reduction"]},
           "prediction": acc}

    def pm(s, scale=100.0, digits=1):
        if not s or s.get("mean") is None:
            return "n/a"
        text = f"{s['mean'] * scale:.{digits}f}"
        if s["sd"] * scale >= 0.05:
            n = f"n={s['n']}, " if "n" in s else ""
            text += (f" ± {s['sd'] * scale:.{digits}f} ({n}{s['min'] * scale:.{digits}f}.."
                     f"{s['max'] * scale:.{digits}f})")
        return text
    lines = [f"# PostgreSQL mixed workload, {len(runs)} runs (load seed, model seed): "
             f"{out['runs']}; LLAMA policy: {policy}", "",
             f"baseline steady {pm(base['steady_state_bytes'], 1 / MB)} MiB, peak "
             f"{pm(base['peak_bytes'], 1 / MB)} MiB; live steady "
             f"{pm(live['steady_state_bytes'], 1 / MB)} MiB, peak {pm(live['peak_bytes'], 1 / MB)} MiB",
             "", "| allocator | acc. (objects) | acc. per context (weighted) | acc. per context | "
             "steady MiB | peak MiB | peak / baseline peak | frag. reduction (steady) |",
             "|---|---|---|---|---|---|---|---|"]
    for label, r in rows.items():
        lines.append(f"| {NAMES.get(label, label)} | {pm(r['accuracy_by_allocations'])}% | "
                     f"{pm(r['accuracy_per_context_weighted'])}% | {pm(r['accuracy_per_context'])}% | "
                     f"{pm(r['llama_steady_state_bytes'], 1 / MB)} | {pm(r['llama_peak_bytes'], 1 / MB)} | "
                     f"{pm(r['peak_ratio_to_baseline'], 1, 2)} | {pm(r['fragmentation_reduction'])}% |")
    # where the steady-state memory is: short-lived processes, busy whole-run ones (the
    # client sessions held for the run), quiet whole-run ones (postmaster, auxiliary
    # processes, lightly used backends)
    keys = ("live", "baseline", "llama:oracle", "llama:context_t95", "llama:model", "llama:site")
    where: dict = {}
    for _, _, srv in runs:
        busiest = max(p["objects"] for p in srv["processes"])
        for p in srv["processes"]:
            g = p["group"] if p["group"] != "whole run" else (
                "whole run, busy" if p["objects"] >= busiest / 10 else "whole run, quiet")
            w = where.setdefault(g, collections.Counter())
            w["processes"] += p["objects"] and 1
            for k in keys:
                w[k] += p["steady_contribution_bytes"].get(k, 0.0)
    out["where_steady"] = {g: {k: v / len(runs) for k, v in w.items()} for g, w in where.items()}
    lines += ["", "Where the steady-state memory is (MiB, mean over runs; busy: at least a "
              "tenth of the busiest process's objects):", "",
              "| processes | count | " + " | ".join(keys) + " |",
              "|---|---|" + "---|" * len(keys)]
    for g, w in sorted(out["where_steady"].items()):
        lines.append(f"| {g} | {w['processes']:.1f} | "
                     + " | ".join(f"{w[k] / MB:.1f}" for k in keys) + " |")
    lines += ["", f"worst model run: load seed {worst[0]}, model seed {worst[1]}: "
              f"{out['worst_model_run']['model_reduction'] * 100:.1f}%", "",
              "Prediction on the test version's sampled run (weighted / unweighted exact, %):", "",
              "| scope | model | exact table | site table | majority |", "|---|---|---|---|---|"]
    for scope in ("unseen", "overall"):
        lines.append(f"| {scope} | " + " | ".join(
            f"{pm(acc[scope][p]['weighted_exact'])} / {pm(acc[scope][p]['unweighted_exact'])}"
            for p in preds) + " |")
    table3.write_combined(os.path.dirname(outs[0]), out, lines, tag)
    return 0


def markdown(r: dict) -> str:
    def pm(s, scale=1.0, digits=1):
        if s["mean"] is None:
            return "n/a"
        if s["sd"] < 5e-7 * max(1, abs(s["mean"])):
            return f"{s['mean'] * scale:.{digits}f}"
        n = f"n={s['n']}, " if "n" in s else ""
        return (f"{s['mean'] * scale:.{digits}f} ± {s['sd'] * scale:.{digits}f} "
                f"({n}worst {min(s['min'] * scale, s['max'] * scale):.{digits}f})")

    s, srv = r["summary"], r["server"]
    b, live = r["baseline"], r["live"]
    lines = [f"# PostgreSQL {r['test']} (full trace, mixed workload, load seed {r['load_seed']}), "
             f"model trained on {', '.join(r['train'])} (sampled); LLAMA policy: "
             f"{r.get('policy', 'paper')}", "",
             *roles_note.markdown_line(r.get("test_roles")),
             f"server: {srv['processes']} processes (one heap each), {srv['objects']:,} objects, "
             f"{srv['seconds']:.1f} s; memory = the sum of the processes' heaps on a "
             f"{srv['series_step_ns'] / 1e6:.0f} ms grid; model seeds {r['seeds']}", "",
             f"baseline steady {b['steady_state_bytes'] / MB:.1f} MiB, peak {b['peak_bytes'] / MB:.1f} "
             f"MiB; live steady {live['steady_state_bytes'] / MB:.1f} MiB, peak "
             f"{live['peak_bytes'] / MB:.1f} MiB", "",
             "| allocator | acc. (objects) | acc. (bytes) | acc. per context (weighted / "
             "unweighted) | steady MiB | peak MiB | peak / baseline peak | frag. reduction "
             "(steady) | frag. reduction (peak) |", "|---|---|---|---|---|---|---|---|---|",
             f"| baseline (TCMalloc-like) | | | | {b['steady_state_bytes'] / MB:.1f} | "
             f"{b['peak_bytes'] / MB:.1f} | 1 | 0 | 0 |"]
    for label, row in s.items():
        lines.append(f"| {NAMES.get(label, label)} | {pm(row['accuracy_by_allocations'], 100)}% | "
                     f"{pm(row['accuracy_by_bytes'], 100)}% | "
                     f"{pm(row['accuracy_per_context_weighted'], 100)}% / "
                     f"{pm(row['accuracy_per_context'], 100)}% | "
                     f"{pm(row['llama_steady_state_bytes'], 1 / MB)} | "
                     f"{pm(row['llama_peak_bytes'], 1 / MB)} | "
                     f"{pm(row['peak_ratio_to_baseline'], 1, 2)} | "
                     f"{pm(row['fragmentation_reduction'], 100)}% | "
                     f"{pm(row['peak_fragmentation_reduction'], 100)}% |")
    g = r["gaps"]
    def rng(x):  # a gap: mean (min..max), larger is worse
        if x["mean"] is None:
            return "n/a"
        return (f"{x['mean'] * 100:.1f}" if x["n"] < 2 else
                f"{x['mean'] * 100:.1f} ({x['min'] * 100:.1f}..{x['max'] * 100:.1f})")
    lines += ["", f"points of steady-state reduction: oracle − model {rng(g['oracle_minus_model'])}, "
              f"oracle − context oracle (T95) {rng(g['oracle_minus_context_t95'])}, "
              f"context oracle (T95) − model {rng(g['context_t95_minus_model'])}", "",
              f"server-wide contexts: {r['contexts']['server_wide']:,} (cost rule = T95 on "
              f"{r['contexts']['cost_rule_equals_t95']:,}); table coverage of the trace's "
              "contexts: " + ", ".join(f"{k} {v['contexts']:,}/{v['contexts_total']:,} "
                                       f"({v['objects_share']:.1%} of objects)"
                                       for k, v in r["coverage"].items()), ""]
    lines += [f"## Prediction on {r['test']} (sampled run, load seed {r['load_seed']}), "
              "`model.evaluate` as cross_version.py", "",
              "| model seed | scope | model w / u exact | exact table | site table | majority |",
              "|---|---|---|---|---|---|"]
    for seed, u in r["unseen"].items():
        for scope in ("unseen", "overall"):
            x = u[scope]
            cell = lambda p: (f"{x[p]['weighted_exact'] * 100:.1f} / "  # noqa: E731
                              f"{x[p]['unweighted_exact'] * 100:.1f}")
            lines.append(f"| {seed} | {scope} | {cell('model')} | {cell('baseline_exact')} | "
                         f"{cell('baseline_site')} | {cell('baseline_majority')} |")
        sh = u["unseen_share"]
        lines.append(f"| {seed} | unseen share | contexts {sh['contexts']:.1%}, samples "
                     f"{sh['samples']:.1%} | | | |")
    seed0 = next(iter(r["groups"]))
    lines += ["", "## Where the steady-state memory is (MiB of the server's steady-state mean, "
              f"model seed {seed0}; whole run: processes alive at least half the run)", "",
              "| processes | count | objects | live | baseline | LLAMA + oracle | "
              "LLAMA + context oracle (T95) | LLAMA + model | LLAMA + site table |",
              "|---|---|---|---|---|---|---|---|---|"]
    for name, g in sorted(r["groups"][seed0].items()):
        cell = lambda k: f"{g.get(k, 0) / MB:.1f}"  # noqa: E731
        lines.append(f"| {name} | {g['processes']} | {g['objects']:,} | {cell('live')} | "
                     f"{cell('baseline')} | {cell('llama:oracle')} | {cell('llama:context_t95')} | "
                     f"{cell('llama:model')} | {cell('llama:site')} |")
    procs = sorted(r["processes"], key=lambda p: -p["objects"])
    lines += ["", f"## Processes ({len(procs)}; the 8 with the most objects)", "",
              "| process | objects | s | starts at s | peak MiB: live / baseline / oracle / model "
              "| steady-state share MiB: live / baseline / oracle / model |",
              "|---|---|---|---|---|---|"]
    for p in procs[:8]:
        c = {k: v / MB for k, v in p["steady_contribution_bytes"].items()}
        lines.append(f"| {p['process']} | {p['objects']:,} | {p['seconds']:.1f} | "
                     f"{p['starts_s']:.1f} | {p['live_peak_bytes'] / MB:.1f} / "
                     f"{p['baseline_peak_bytes'] / MB:.0f} / "
                     f"{p['llama_oracle_peak_bytes'] / MB:.0f} / "
                     f"{p.get('llama_model_peak_bytes', 0) / MB:.0f} | "
                     f"{c.get('live', 0):.1f} / {c.get('baseline', 0):.1f} / "
                     f"{c.get('llama:oracle', 0):.1f} / {c.get('llama:model', 0):.1f} |")
    lines += ["", table3.machine_markdown(table3.machine_rows(r.get("runs", {}))), ""]
    if r.get("reused_outputs_of_other_code"):
        lines += [f"**Reused outputs made by other code** (--resume): "
                  f"{r['reused_outputs_of_other_code']}", ""]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
