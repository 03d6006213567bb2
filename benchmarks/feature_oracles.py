"""Feature oracles on full traces (issue 34 item 2): how much of the gap between the
context oracle and the per-object oracle a (context, feature) oracle closes.

For each workload's full trace and each policy, runs

    lifetime simulate TRACE --train DATASET --out OUT/WORKLOAD-POLICY --policy POLICY
                      --feature-oracles

(no model: the rows compared are all computed from the trace; simulator/features.py
defines the features) and writes OUT/results.{md,json}: Table 3's oracle rows and, per
feature and rule (T95, cost rule), the share of the gap closed,

    (feature oracle - context oracle) / (per-object oracle - context oracle),

on the fragmentation reduction of the huge-page steady state and of the resident
steady state (huge pages less the free pages given back inside them).

    .venv/bin/python benchmarks/feature_oracles.py --out out/feature_oracles \
        --workload redis-phases=out/redis21/phases-wrap/load1 \
        --workload redis-mixed=out/redis21/mixed/load1 \
        --workload redis-fates=out/redis21/fates/load1

A workload is NAME=DIR, NAME=TRACE or NAME=TRACE,DATASET.  DIR is a run directory of
benchmarks/simulate_redis.py --keep-trace: its dataset-train and the trace of its one
sim-*/ directory that keeps one (sim-seed0/ first; a --policy run keeps it in
sim-<policy>-seed0/; two or more others: name the trace).  TRACE is a .lttrace (its
.stacks.json beside it), its dataset by default DIR/dataset-train of the run directory two
levels up.

A server of many processes (PostgreSQL): --server NAME=RUN_DIR, a
benchmarks/simulate_postgres.py --keep-trace run directory; the (context, feature) classes
pooled over its processes (features.pooled_feature_classes), each process simulated on its
own, the server's memory summed (run_server; huge pages only).

    .venv/bin/python benchmarks/feature_oracles.py --out out/feature_oracles/pg-load1 \
        --server postgres-mixed=out/pg/load1

Load seeds: one --out per load seed (the same workload names), then

    .venv/bin/python benchmarks/feature_oracles.py --out out/feature_oracles \
        --combine out/feature_oracles/load1 out/feature_oracles/load2 out/feature_oracles/load3

writes OUT/combined.{md,json}: per workload, feature, rule, policy and measure the gap
closed, mean and worst (min) over the load seeds and n (the seeds with a gap to close),
the gap's own size, every row's reduction, and the feature's lead over the control
(size_shuffled, same rule, same seed), the least over the seeds.  `candidates` lists the (workload, feature, rule, policy, measure)
that close >= 20 points on every seed.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from simulator.features import FEATURES, gap_closed  # noqa: E402

CONTROL = "size_shuffled"
#: what a feature must close on every load seed to be a candidate input (issue 34 item 3)
CANDIDATE = 0.20

POLICIES = ("segregated", "paper")
MEASURES = (("resident", "resident_fragmentation_reduction"),
            ("huge pages", "fragmentation_reduction"))


def locate(spec: str) -> tuple[str, str, str]:
    """NAME=DIR | NAME=TRACE | NAME=TRACE,DATASET -> (name, trace, dataset)."""
    name, sep, rest = spec.partition("=")
    if not sep or not name or not rest:
        raise SystemExit(f"--workload {spec!r}: want NAME=DIR, NAME=TRACE or NAME=TRACE,DATASET")
    path, _, dataset = rest.partition(",")
    if os.path.isdir(path):
        first = os.path.join(path, "sim-seed0", "trace.lttrace")
        if os.path.exists(first):
            trace = first
        else:
            found = sorted(glob.glob(os.path.join(path, "sim-*", "trace.lttrace")))
            if len(found) != 1:
                raise SystemExit(f"--workload {spec!r}: {len(found)} traces in {path}/sim-*/"
                                 + (f" ({', '.join(found)}): name one" if found else ""))
            trace = found[0]
        run_dir = path
    else:
        trace = path
        run_dir = os.path.dirname(os.path.dirname(os.path.abspath(path)))
    dataset = dataset or os.path.join(run_dir, "dataset-train")
    for p in (trace, dataset):
        if not os.path.exists(p):
            raise SystemExit(f"--workload {spec!r}: {p} does not exist")
    return name, trace, dataset


def run_one(trace: str, dataset: str, out: str, policy: str, resume: bool,
            names=()) -> dict:
    rep = os.path.join(out, "report.json")
    if not (resume and os.path.exists(rep)):
        cmd = [sys.executable, "-c", "import sys; from lifetime.cli import main; sys.exit(main())",
               "simulate", trace, "--train", dataset, "--out", out, "--policy", policy,
               "--feature-oracles", *names]
        print(" ".join(cmd[3:]), flush=True)
        subprocess.run(cmd, check=True, cwd=ROOT)
    with open(rep) as f:
        return json.load(f)


def run_server(name: str, run_dir: str, out: str, policies, names=(), series_ms: int = 10,
               resume: bool = False) -> tuple[dict, dict]:
    """The feature oracles of a server of many processes: a benchmarks/simulate_postgres.py
    --keep-trace run directory RUN_DIR (its dataset-train, test/<version>/profiles and
    sim/procs/*/trace.lttrace).  The (context, feature) classes pooled over the processes
    (features.pooled_feature_classes, as the context oracles there), every process's trace
    simulated on its own with them, the server's memory the sum over the processes alive
    (simulate_postgres's recipe; the per-object and context oracle rows are its own).
    Huge pages only: the engine's series has no resident figure, so the server's
    resident steady state is not summed.  Returns ({policy: summary}, keys)."""
    import simulator
    from benchmarks import simulate_postgres as sp
    from simulator import features
    from simulator.trace import write_object_classes

    names = list(names) or list(FEATURES)
    ds = os.path.join(run_dir, "dataset-train")
    tdirs = sorted(glob.glob(os.path.join(run_dir, "test", "*", "profiles")))
    if len(tdirs) != 1:
        raise SystemExit(f"--server {name}={run_dir}: want one test/<version>/profiles, "
                         f"found {len(tdirs)}")
    step = series_ms * 1_000_000
    results, keys = {}, {}
    cls_dir = os.path.join(out, f"{name}-classes")
    files = None
    for policy in policies:
        common = sp.prepare_processes(tdirs[0], ds, os.path.join(run_dir, "sim"), step, None,
                                      policy)
        procs = common["procs"]
        if files is None:
            files = [{} for _ in procs]
            desc = []
            for p in procs:
                sig = tuple((m["start"], m["limit"], m["file_offset"], m["path"])
                            for m in p["side"]["mappings"])
                desc.append({"trace": p["trace"], "contexts": p["contexts"],
                             "stacks": {int(st["id"]): (sig, tuple(st["addresses"]))
                                        for st in p["side"]["stacks"]}})
            keys["none"] = len(common["t95"])
            for f in names:
                print(f"feature_oracles: {name}: context + {f} over {len(procs)} processes",
                      flush=True)
                r = features.pooled_feature_classes(desc, common["scheme"], f)
                keys[f] = r["keys"]
                for i, p in enumerate(procs):
                    os.makedirs(os.path.join(cls_dir, p["stem"]), exist_ok=True)
                    for rule in ("t95", "cost"):
                        lab = f"context_{f}_{rule}"
                        files[i][lab] = write_object_classes(
                            os.path.join(cls_dir, p["stem"], f"{lab}.cls"), r[rule][i])
        sims = []
        for i, p in enumerate(procs):
            with open(p["sim_json"]) as fh:
                s = json.load(fh)
            fj = os.path.join(out, f"{name}-{policy}", "procs", p["stem"], "simulation.json")
            if not (resume and os.path.exists(fj)):
                os.makedirs(os.path.dirname(fj), exist_ok=True)
                simulator.simulate(p["trace"], [f"{lab}=objects:{path}"
                                                for lab, path in files[i].items()],
                                   baseline=False, table_default=common["majority"],
                                   series_interval_ns=step, json_out=fj, policy=[policy])
            with open(fj) as fh:
                m = json.load(fh)
            if m["series"]["t_ns"] != s["series"]["t_ns"]:
                raise SystemExit(f"{p['stem']}: feature and table runs have different series grids")
            s["allocators"] += m["allocators"]
            s["series"]["huge_page_bytes"].update(m["series"]["huge_page_bytes"])
            sims.append(s)
        anames = [a["name"] for a in sims[0]["allocators"]]
        fig = sp._server_figures(sp._sum_series(sims, anames, step))
        base, live = fig["baseline"]["steady_state_bytes"], fig["live"]["steady_state_bytes"]
        table3 = []
        for n in anames:
            if not n.startswith("llama:"):
                continue
            objects = correct = 0
            for s in sims:
                for a in s["allocators"]:
                    if a["name"] == n and a.get("predictor"):
                        objects += a["predictor"]["objects"]
                        correct += a["predictor"]["correct"]
            table3.append({"allocator": n, "resident_fragmentation_reduction": None,
                           "fragmentation_reduction": (base - fig[n]["steady_state_bytes"])
                           / (base - live),
                           "accuracy_by_allocations": correct / objects if objects else None,
                           "steady_state_bytes": fig[n]["steady_state_bytes"]})
        rep = {"table3": table3, "server": {"processes": len(procs),
                                            "baseline_steady_state_bytes": base,
                                            "live_steady_state_bytes": live}}
        os.makedirs(os.path.join(out, f"{name}-{policy}"), exist_ok=True)
        with open(os.path.join(out, f"{name}-{policy}", "report.json"), "w") as fh:
            json.dump(rep | {"keys": keys}, fh, indent=1)
        results[policy] = summarize(rep)
    return results, keys


def summarize(rep: dict) -> dict:
    rows = {r["allocator"].split(":", 1)[1]: r for r in rep["table3"]}
    out = {"rows": {k: {m: rows[k].get(key) for m, key in MEASURES}
                    | {"accuracy_by_allocations": rows[k].get("accuracy_by_allocations")}
                    for k in rows},
           "gap_closed": {}}
    for f in FEATURES:
        for rule in ("t95", "cost"):
            lab = f"context_{f}_{rule}"
            if lab not in rows:
                continue
            if "oracle" not in rows:
                continue
            out["gap_closed"][lab] = {
                m: gap_closed(rows[lab].get(key), rows[f"context_{rule}"].get(key),
                              rows["oracle"].get(key))
                for m, key in MEASURES}
    return out


def pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:+.1f}%"


def pts(x) -> str:
    return "n/a" if x is None else f"{100 * x:+.0f}"


def markdown(results: dict, keys: dict) -> str:
    L = ["Feature oracles (issue 34 item 2): fragmentation reduction against the baseline "
         "(resident / huge pages; negative: more than the baseline) and, per feature, the "
         "points of the context-oracle -> per-object-oracle gap it closes "
         "(100 = all of it; negative: it widens it).", ""]
    for wl, by_policy in results.items():
        L += [f"### {wl}", "", "| predictor | keys | " +
              " | ".join(f"{p}: resident | {p}: huge pages | {p}: gap closed (res. / hp)"
                         for p in by_policy) + " |",
              "|---|---|" + "---|---|---|" * len(by_policy)]
        first = next(iter(by_policy.values()))
        labels = ["oracle", "context_t95", "context_cost"] + [
            f"context_{f}_{r}" for f in FEATURES for r in ("t95", "cost")
            if f"context_{f}_{r}" in first["rows"]]
        for lab in labels:
            name = {"oracle": "per-object oracle", "context_t95": "context oracle, T95",
                    "context_cost": "context oracle, cost rule"}.get(lab)
            if name is None:
                f, rule = lab[len("context_"):].rsplit("_", 1)
                name = f"context+{f} oracle, {'T95' if rule == 't95' else 'cost rule'}"
                k = keys[wl].get(f)
            else:
                k = keys[wl].get("none") if lab != "oracle" else None
            cells = []
            for p, s in by_policy.items():
                r = s["rows"][lab]
                g = s["gap_closed"].get(lab)
                cells.append(f"{pct(r['resident'])} | {pct(r['huge pages'])} | "
                             + (f"{pts(g['resident'])} / {pts(g['huge pages'])}" if g else ""))
            L.append(f"| {name} | {'' if k is None else f'{k:,}'} | " + " | ".join(cells) + " |")
        L.append("")
    return "\n".join(L)


def _stats(values: list) -> dict:
    got = [v for v in values if v is not None]
    return {"values": values, "n": len(got), "mean": sum(got) / len(got) if got else None,
            "worst": min(got) if got else None, "best": max(got) if got else None}


def combine(dirs: list[str]) -> dict:
    """Several --out directories (one per load seed, the same workload names) -> per
    workload, policy, rule, feature and measure the gap closed over the seeds (mean,
    worst = min, n = seeds with a gap to close), the gap itself (per-object oracle minus
    the context oracle, fraction of the baseline's fragmentation), the lead over the
    control (feature minus size_shuffled, same rule, per seed where both are defined),
    and the candidates: closing >= CANDIDATE on every seed."""
    runs = []
    for d in dirs:
        with open(os.path.join(d, "results.json")) as f:
            runs.append((d, json.load(f)))
    out = {"runs": dirs, "candidate_threshold": CANDIDATE, "control": CONTROL,
           "workloads": {}, "candidates": []}
    for wl in dict.fromkeys(w for _, r in runs for w in r["results"]):
        per = [(d, r["results"][wl], r.get("keys", {}).get(wl, {})) for d, r in runs
               if wl in r["results"]]
        W = {"runs": [d for d, _, _ in per], "keys": [k for _, _, k in per], "policies": {}}
        pols = list(dict.fromkeys(p for _, res, _ in per for p in res))
        pols.sort(key=lambda p: (POLICIES.index(p) if p in POLICIES else len(POLICIES), p))
        for pol in pols:
            seeds = [res[pol] for _, res, _ in per if pol in res]
            P = {"seeds": len(seeds), "gap": {}, "features": {},
                 "rows": {lab: {m: _stats([s["rows"].get(lab, {}).get(m) for s in seeds])
                                for m, _ in MEASURES}
                          for lab in dict.fromkeys(k for s in seeds for k in s["rows"])}}
            for rule in ("t95", "cost"):
                P["gap"][rule] = {}
                for m, _ in MEASURES:
                    g = []
                    for s in seeds:
                        o, c = s["rows"]["oracle"].get(m), s["rows"][f"context_{rule}"].get(m)
                        g.append(None if o is None or c is None else o - c)
                    P["gap"][rule][m] = _stats(g)
                for f in FEATURES:
                    lab = f"context_{f}_{rule}"
                    if not any(lab in s["gap_closed"] for s in seeds):
                        continue
                    F = {}
                    for m, _ in MEASURES:
                        v = [(s["gap_closed"].get(lab) or {}).get(m) for s in seeds]
                        ctl = [(s["gap_closed"].get(f"context_{CONTROL}_{rule}") or {}).get(m)
                               for s in seeds]
                        F[m] = _stats(v)
                        lead = [None if a is None or b is None else a - b for a, b in zip(v, ctl)]
                        F[m]["control_lead"] = _stats(lead) if f != CONTROL else None
                        st = F[m]
                        if (f != CONTROL and st["n"] == len(seeds) and st["n"]
                                and st["worst"] >= CANDIDATE):
                            out["candidates"].append({
                                "workload": wl, "feature": f, "rule": rule, "policy": pol,
                                "measure": m, "mean": st["mean"], "worst": st["worst"],
                                "n": st["n"],
                                "control_lead_worst": (st["control_lead"] or {}).get("worst")})
                    P["features"].setdefault(f, {})[rule] = F
            W["policies"][pol] = P
        out["workloads"][wl] = W
    return out


def combined_markdown(c: dict) -> str:
    def ms(st):
        if not st or st["n"] == 0:
            return "n/a"
        return f"{pts(st['mean'])} ({pts(st['worst'])}) {st['n']}"

    L = [f"Feature oracles over {len(c['runs'])} runs ({', '.join(c['runs'])}): points of "
         "the context-oracle -> per-object-oracle gap each feature closes, mean (worst) n "
         "over the runs, on the resident / huge-page steady state; n counts the runs "
         "with a gap of 1 point or more; the gap row: per-object oracle minus context oracle, "
         "points of fragmentation reduction, mean (min..max).  'lead' = the feature's share "
         f"minus the control's ({c['control']}, same rule) in the same run, the least over "
         "the runs.", ""]
    for wl, W in c["workloads"].items():
        pols = list(W["policies"])
        L += [f"### {wl} ({len(W['runs'])} runs)", "",
              "| feature | rule | " + " | ".join(
                  f"{p}: resident | {p}: huge pages | {p}: lead (res. / hp)" for p in pols) + " |",
              "|---|---|" + "---|---|---|" * len(pols)]
        for rule in ("t95", "cost"):
            cells = []
            for p in pols:
                g = W["policies"][p]["gap"][rule]
                cells.append(" | ".join(
                    "n/a" if g[m]["n"] == 0 else
                    f"{100 * g[m]['mean']:.1f} ({100 * g[m]['worst']:.1f}..{100 * g[m]['best']:.1f})"
                    for m, _ in MEASURES) + " | ")
            L.append(f"| *gap, points of reduction* | {'T95' if rule == 't95' else 'cost'} | "
                     + " | ".join(cells) + " |")
        feats = [f for f in FEATURES if any(f in W["policies"][p]["features"] for p in pols)]
        for f in feats:
            for rule in ("t95", "cost"):
                cells = []
                for p in pols:
                    F = W["policies"][p]["features"].get(f, {}).get(rule)
                    if F is None:
                        cells.append(" |  | ")
                        continue
                    lead = " / ".join(pts((F[m]["control_lead"] or {}).get("worst"))
                                      if F[m]["control_lead"] else "" for m, _ in MEASURES)
                    cells.append(f"{ms(F['resident'])} | {ms(F['huge pages'])} | "
                                 + ("" if f == CONTROL else lead))
                L.append(f"| {f} | {'T95' if rule == 't95' else 'cost'} | " + " | ".join(cells) + " |")
        L.append("")
    L += [f"Candidates (>= {pts(c['candidate_threshold'])} points on every run):", ""]
    if not c["candidates"]:
        L.append("none.")
    for k in c["candidates"]:
        L.append(f"* {k['workload']}, {k['feature']} ({k['rule']}), {k['policy']}, {k['measure']}: "
                 f"mean {pts(k['mean'])}, worst {pts(k['worst'])} (n {k['n']}); least lead over "
                 f"{c['control']} {pts(k['control_lead_worst'])}")
    L.append("")
    return "\n".join(L)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--workload", action="append", metavar="NAME=DIR|TRACE[,DATASET]")
    ap.add_argument("--server", action="append", default=[], metavar="NAME=RUN_DIR",
                    help="a server of many processes: a benchmarks/simulate_postgres.py "
                         "--keep-trace run directory (huge pages only)")
    ap.add_argument("--series-ms", type=int, default=10,
                    help="--server: the series grid simulate_postgres.py ran with")
    ap.add_argument("--combine", nargs="+", metavar="RESULTS_DIR",
                    help="only combine earlier --out directories (one per load seed) into "
                         "OUT/combined.{md,json}")
    ap.add_argument("--policies", nargs="+", default=list(POLICIES))
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--features", nargs="*", default=[],
                    help="features to run (default: all, the control included)")
    args = ap.parse_args(argv)
    if args.combine:
        c = combine(args.combine)
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "combined.json"), "w") as f:
            json.dump(c, f, indent=1, sort_keys=True)
        md = combined_markdown(c)
        with open(os.path.join(args.out, "combined.md"), "w") as f:
            f.write(md)
        print(md)
        return 0
    if not args.workload and not args.server:
        ap.error("--workload, --server or --combine is required")
    results, keys, sources = {}, {}, {}
    for spec in args.workload or []:
        name, trace, dataset = locate(spec)
        sources[name] = {"trace": trace, "dataset": dataset}
        results[name] = {}
        for policy in args.policies:
            rep = run_one(trace, dataset,
                          os.path.join(args.out, f"{name}-{policy}"), policy, args.resume,
                          args.features)
            results[name][policy] = summarize(rep)
            keys[name] = rep["settings"].get("feature_oracles", {}).get("keys", {})
    for spec in args.server:
        name, _, run_dir = spec.partition("=")
        results[name], keys[name] = run_server(name, run_dir, args.out, args.policies,
                                               args.features, args.series_ms, args.resume)
        sources[name] = {"server": run_dir}
    os.makedirs(args.out, exist_ok=True)
    old = os.path.join(args.out, "results.json")
    if os.path.exists(old):     # workloads run earlier into OUT stay (a name run again is replaced)
        with open(old) as f:
            prev = json.load(f)
        fresh = set(results)
        for part, new in (("results", results), ("keys", keys), ("sources", sources)):
            new.update({k: v for k, v in prev.get(part, {}).items() if k not in fresh})
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"results": results, "keys": keys, "sources": sources}, f, indent=1,
                  sort_keys=True)
    md = markdown(results, keys)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
