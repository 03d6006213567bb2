#!/usr/bin/env python3
"""Cross-version and run-to-run benchmark on real programs: train on some versions (or
runs), test on others, the model against lookup tables, over several seeds.

Families: redis, postgres (benchmarks/servers/: fetched, built and driven by the
project's scripts), cpython, clang (benchmarks/real_programs.py) and the bundled proxy.
A test or train item is VERSION (every run of it) or VERSION/RUN (one run, e.g.
6.0.16/run2): run-to-run within a version is `--train 6.0.16/run1 --test 6.0.16/run2`.

    nice .venv/bin/python benchmarks/cross_version.py redis --train 5.0.6 6.0.16 \\
        --test 6.2.14 --seeds 0 1 2
    nice .venv/bin/python benchmarks/cross_version.py redis --train 6.0.16/run1 \\
        --test 6.0.16/run2 --seeds 0 1 2 --name redis-within
    nice .venv/bin/python benchmarks/cross_version.py postgres --train 15.5 --test 16.2
    nice .venv/bin/python benchmarks/cross_version.py clang --train 14 --test 15

Datasets: one training dataset over every training item (so wrapper detection sees all
of them), and one per test item cut like it (`--like`: same wrappers, depth and
vocabulary). Every seed's model is scored on every test item: overall and on contexts
unseen in training, weighted by samples and unweighted, against the exact-stack, site
and majority tables. Outputs under --out/NAME: datasets/, model-seedN/, results.json
(per seed, mean, sd, min, max; label purity of each dataset), results.md, report/ (the
first seed's full report) and commands.txt. Existing profiles and datasets are reused;
delete them to rebuild. `--datasets-from DIR` keeps the datasets in DIR instead (built
there when missing), so runs of other hyperparameters share one set
(benchmarks/defaults_sweep.py).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shlex
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import real_programs  # noqa: E402

from benchmarks import roles_note  # noqa: E402
from core import export_dir as export_dirs  # noqa: E402
from core import version_roles  # noqa: E402
from core.context import ContextDefinition  # noqa: E402
from model.compare import costliest_table  # noqa: E402
from pipeline.dataset import DatasetConfig, build_dataset  # noqa: E402
from pipeline.manifest import dataset_context  # noqa: E402

SERVICE = os.path.join(ROOT, "workloads", "bench", "bench_python_service.py")
SERVERS = ("redis", "postgres")
SCOPES = ("unseen", "overall")
TABLES = ("baseline_exact", "baseline_site", "baseline_majority")
# TCMalloc's removed online lifetime rule (objects over 1 MiB; all sizes), replayed by
# `evaluate` over the test profiles (model/tcmalloc_rule.py); absent when it was skipped
RULES = ("baseline_tcmalloc_rule", "baseline_tcmalloc_rule_all")
PREDICTORS = ("model", *TABLES, *RULES)
FIGURES = ("weighted_exact", "unweighted_exact", "weighted_off_by_one",
           "unweighted_off_by_one")


def cpython_service_commands(version: str, seconds: int):
    commands, env = real_programs.cpython_commands(version, seconds)
    python = commands[0][0]
    return [[python, SERVICE, str(seconds)]], env


def proxy_commands(version: str, seconds: int):
    """The bundled proxy workload (v1, v2), 12 s per run, runs repeated for --seconds."""
    binary = os.path.join(ROOT, "build", "workloads", "proxy_server", f"proxy_server_{version}")
    if not os.path.exists(binary):
        raise SystemExit(f"{binary}: not built (run `make native`)")
    return [[binary, "--seconds", "12"]], {}


real_programs.FAMILIES["cpython"] = cpython_service_commands
real_programs.FAMILIES["proxy"] = proxy_commands


def profile_dirs(family: str, item: str, args) -> list[str]:
    """Profile directories of VERSION or VERSION/RUN, profiling what is missing."""
    version, _, run = item.partition("/")
    if family in SERVERS:
        base = os.path.join(args.servers_out, family, version)
        runs = [run] if run else sorted(os.path.basename(d) for d in
                                        glob.glob(os.path.join(base, "run*")))
        if not runs:
            runs = ["run1"]
        dirs = [os.path.join(base, r, "profiles") for r in runs]
        for d, r in zip(dirs, runs):
            if not glob.glob(os.path.join(d, "*.ltprof")):
                _profile_server(family, version, int(r.removeprefix("run")), d, args)
        return dirs
    if run:
        raise SystemExit(f"{family}: runs are only kept for {', '.join(SERVERS)}")
    out = os.path.join(args.out, family, version)
    return [real_programs.profile_version(family, version, out, args.seconds, args.interval)]


def _profile_server(family: str, version: str, run: int, out_dir: str, args) -> None:
    import importlib

    module = importlib.import_module(f"benchmarks.servers.{family}")
    print(f"{family} {version} run {run}: profiling into {out_dir}", flush=True)
    # Every run of every version replays the same load plan: runs differ only in what
    # a real run varies (timing, the load generator's random keys).
    module.profile(version, out_dir, seconds=args.seconds, seed=args.load_seed,
                   interval=args.interval)


def build(family: str, items: list[str], out: str, like: str | None, args) -> str:
    if os.path.exists(os.path.join(out, "manifest.json")):
        return out
    inputs = [(os.path.join(d, "*.ltprof"), f"{family}-{item.partition('/')[0]}")
              for item in items for d in profile_dirs(family, item, args)]
    config = (DatasetConfig(context=dataset_context(like), detect_wrappers=False) if like
              else DatasetConfig(context=ContextDefinition.make(
                  builtin=not args.no_builtin_wrappers,
                  size_feature=getattr(args, "size_feature", False)),
                  detect_wrappers=not args.no_detect_wrappers))
    print(f"build-dataset {out} <- {', '.join(items)}", flush=True)
    build_dataset(inputs, out, config, vocab_path=os.path.join(like, "vocab.txt") if like else None)
    return out


def online_check(family: str, item: str, model_dir: str, train_ds: str, base: str,
                 args) -> dict:
    """Exports the model, profiles a fresh run of ITEM with it predicting inside the
    sampler, and scores that run both ways: the sampler's own predictions
    (`lifetime evaluate-online`) and the offline model on a dataset of the same
    profiles.  Same contexts, same labels: the gap is what serving costs."""
    from export.exporter import export_model
    from model.evaluate import evaluate
    from model.metrics import headline
    from export import serve
    from model.online_eval import evaluate_online, model_context

    if family not in SERVERS:
        raise SystemExit("--online needs a server family (redis, postgres)")
    export_dir = os.path.join(base, "export")
    if not export_dirs.is_export(export_dir):
        export_model(model_dir, export_dir)
    plugin = serve.model_plugin(export_dir)
    version, _, run = item.partition("/")
    profiles = os.path.join(base, "online", version, "profiles")
    if not glob.glob(os.path.join(profiles, "*.ltprof")):
        import importlib

        module = importlib.import_module(f"benchmarks.servers.{family}")
        module.profile(version, profiles, seconds=args.seconds, interval=args.interval,
                       seed=args.load_seed, extra_env={serve.PLUGIN_ENV: plugin})
    ds = os.path.join(base, "online", version, "dataset")
    if not os.path.exists(os.path.join(ds, "manifest.json")):
        build_dataset([(os.path.join(profiles, "*.ltprof"), f"{family}-{version}")], ds,
                      DatasetConfig(context=dataset_context(train_ds), detect_wrappers=False),
                      vocab_path=os.path.join(train_ds, "vocab.txt"))
    offline = headline(evaluate(model_dir, [ds], split="all", train_dirs=[train_ds])
                       ["overall"]["model"])
    online = evaluate_online(sorted(glob.glob(os.path.join(profiles, "*.ltprof"))),
                             model_context(model_dir))
    keys = ("weighted_exact", "unweighted_exact", "weighted_off_by_one")
    return {"test": item, "profiles": profiles, "offline": {k: offline[k] for k in keys},
            "online": {k: online["headline"][k] for k in keys},
            "online_per_sample_exact": online["headline"]["per_sample_exact"],
            "gap_points": {k: 100 * (online["headline"][k] - offline[k]) for k in keys},
            "cache": online["cache"], "cost_ns": online["cost_ns_per_sampled_allocation"],
            "contexts": online["contexts"], "predicted_samples": online["predicted_samples"]}


def _spread(values: list[float]) -> dict:
    """mean, sample sd (n - 1; 0 for one value), min, max, n."""
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return {"mean": statistics.fmean(values), "sd": sd,
            "min": min(values), "max": max(values), "n": len(values)}


def summarize(per_seed: dict) -> dict:
    """{test item: {scope: {predictor: {figure: spread}}}} over the seeds."""
    seeds = list(per_seed.values())
    out = {}
    for item in seeds[0]:
        present = [p for p in PREDICTORS if all(p in s[item]["unseen"] for s in seeds)]
        out[item] = {scope: {p: {f: _spread([s[item][scope][p][f] for s in seeds])
                                 for f in FIGURES} for p in present}
                     for scope in SCOPES}
        best = {f: max(TABLES, key=lambda p: out[item]["unseen"][p][f]["mean"])
                for f in FIGURES}
        out[item]["unseen_lead_over_best_table"] = {
            f: _spread([s[item]["unseen"]["model"][f] - max(s[item]["unseen"][p][f]
                                                           for p in TABLES)
                        for s in seeds]) | {"best_table_by_mean": best[f]}
            for f in FIGURES}
        out[item]["lead_over_tcmalloc_rule"] = {
            scope: {p: {f: _spread([s[item][scope]["model"][f] - s[item][scope][p][f]
                                    for s in seeds]) for f in FIGURES}
                    for p in RULES if p in present}
            for scope in SCOPES}
    return out


def against_majority_lines(per_seed: dict | None) -> list[str]:
    """Where the weight went on unseen contexts (model/compare.py `against_majority`): per
    seed, the share the model loses to the majority class and the share it wins from it;
    the first seed's costliest contexts."""
    if not per_seed:
        return []
    seeds = sorted(per_seed)
    unseen = {s: per_seed[s]["unseen"] for s in seeds}
    lines = ["Against the majority class (every table's fallback) on unseen contexts, what "
             "it gets right and the model does not / the reverse, weighted (unweighted), per "
             "seed: " + ", ".join(
                 f"seed {s} {100 * u['lost']:.1f}% ({100 * u['lost_contexts']:.1f}%) / "
                 f"{100 * u['won']:.1f}% ({100 * u['won_contexts']:.1f}%)"
                 for s, u in unseen.items()), ""]
    rows = unseen[seeds[0]]["costliest"]
    if rows:
        lines += [f"Costliest of them (seed {seeds[0]}):", "", *costliest_table(rows), ""]
    return lines


def markdown(name: str, summary: dict, info: dict, per_seed: dict | None = None) -> str:
    pct = lambda s: f"{100 * s['mean']:.1f} ± {100 * s['sd']:.1f} (n={s['n']})"  # noqa: E731
    lines = [f"# {name}", "", f"train: {', '.join(info['train'])}; seeds: {info['seeds']}", "",
             *roles_note.markdown_line(info.get("test_roles"))]
    for item, res in summary.items():
        meta = info["test"][item]
        lines += [f"## {meta.get('role', 'test')} {item}", "",
                  f"{meta['contexts']} contexts, {meta['unseen_contexts_share']:.1%} unseen in "
                  f"training ({meta['unseen_samples_share']:.1%} of samples); label purity "
                  f"{meta['label_purity']:.1%}", "",
                  "| scope | predictor | weighted exact | unweighted exact | weighted off-by-one "
                  "| unweighted off-by-one |", "|---|---|---|---|---|---|"]
        for scope in SCOPES:
            for p in PREDICTORS:
                if p in res[scope]:
                    lines.append(f"| {scope} | {p} | "
                                 + " | ".join(pct(res[scope][p][f]) for f in FIGURES) + " |")
        lead = res["unseen_lead_over_best_table"]
        lines += ["", "model lead over the best table on unseen contexts (points): "
                  + ", ".join(f"{f} {100 * lead[f]['mean']:+.1f} (min {100 * lead[f]['min']:+.1f})"
                              for f in FIGURES), ""]
        lines += against_majority_lines({s: r[item]["against_majority"]
                                         for s, r in (per_seed or {}).items()
                                         if "against_majority" in r.get(item, {})})
        for scope in SCOPES:
            for p, rule in (res.get("lead_over_tcmalloc_rule") or {}).get(scope, {}).items():
                lines += [f"model lead over {p} on {scope} contexts (points): "
                          + ", ".join(f"{f} {100 * rule[f]['mean']:+.1f} "
                                      f"(min {100 * rule[f]['min']:+.1f})" for f in FIGURES), ""]
    if "online" in info:
        o = info["online"]
        lines += [f"## online: model inside the sampler on a fresh run of {o['test']}", "",
                  "| figure | offline | online | gap (points) |", "|---|---|---|---|"]
        lines += [f"| {k} | {100 * o['offline'][k]:.1f} | {100 * o['online'][k]:.1f} | "
                  f"{o['gap_points'][k]:+.1f} |" for k in o["offline"]]
        lines += ["", f"cache hit rate {100 * (o['cache']['hit_rate'] or 0):.1f}%, per-sample "
                  f"exact {100 * o['online_per_sample_exact']:.1f}%, added cost p50 "
                  f"{o['cost_ns']['p50'] / 1e3:.2f} us", ""]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("family", choices=sorted(set(real_programs.FAMILIES) | set(SERVERS)))
    ap.add_argument("--train", nargs="+", required=True, metavar="VERSION[/RUN]")
    ap.add_argument("--test", nargs="+", required=True, metavar="VERSION[/RUN]")
    ap.add_argument("--name", help="output folder name (default: the family)")
    ap.add_argument("--seconds", type=int, default=60, help="profiled time per version/run")
    ap.add_argument("--interval", type=int, default=None, help="sampling interval (bytes)")
    ap.add_argument("--out", default=os.path.join(ROOT, "out", "cross_version"))
    ap.add_argument("--servers-out", default=os.path.join(ROOT, "out", "servers"),
                    help="where server profiles live: FAMILY/VERSION/runK/profiles")
    ap.add_argument("--load-seed", type=int, default=1,
                    help="seed of the servers' load plan (the same for every version and run)")
    ap.add_argument("--hparams", default="{}", help="JSON hyperparameter overrides")
    ap.add_argument("--no-detect-wrappers", action="store_true",
                    help="ablation: do not detect wrappers in the training data")
    ap.add_argument("--no-builtin-wrappers", action="store_true",
                    help="ablation: do not strip the built-in list of allocation APIs")
    ap.add_argument("--size-feature", action="store_true",
                    help="contexts keyed on the object's size too (build-dataset "
                         "--size-feature; issue 34 item 3)")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--datasets-from", metavar="DIR",
                    help="the datasets folder (train, test-ITEM), built there when missing, "
                         "instead of OUT/NAME/datasets: runs with other hyperparameters "
                         "share one set")
    ap.add_argument("--no-report", action="store_true", help="skip the full HTML report")
    ap.add_argument("--online", action="store_true",
                    help="also export the first seed's model and compare its predictions "
                         "inside the sampler with the offline ones on a fresh run of the "
                         "first test item (servers only)")
    args = ap.parse_args(argv)

    roles_note.refuse_reserved(args.family, args.train, "training", "cross_version --train")
    roles_note.refuse_reserved(args.family, args.test, "test", "cross_version --test")
    base = os.path.join(args.out, args.name or args.family)
    datasets = args.datasets_from or os.path.join(base, "datasets")
    log = [f"cd {ROOT} && nice .venv/bin/python benchmarks/cross_version.py "
           + " ".join(shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))]
    train_ds = build(args.family, args.train, os.path.join(datasets, "train"), None, args)
    test_ds = {item: build(args.family, [item], os.path.join(
        datasets, "test-" + item.replace("/", "-")), train_ds, args)
        for item in args.test}

    from model.cli import parse_hparams
    from model.data import load_dataset
    from model.evaluate import evaluate
    from model.metrics import headline
    from model.train import train

    hp = parse_hparams(json.loads(args.hparams), refit=True)
    per_seed, train_seconds = {}, {}
    for seed in args.seeds:
        model_dir = os.path.join(base, f"model-seed{seed}")
        start = time.monotonic()
        train([train_ds], model_dir, hp.replace(seed=seed), verbose=0)
        train_seconds[seed] = round(time.monotonic() - start, 1)
        per_seed[seed] = {}
        for item, ds in test_ds.items():
            r = evaluate(model_dir, [ds], split="all", train_dirs=[train_ds],
                         tcmalloc_rule_rows=True)
            per_seed[seed][item] = {scope: {p: headline(r[scope][p]) for p in PREDICTORS
                                            if p in r[scope]}
                                    for scope in SCOPES}
            per_seed[seed][item]["unseen_share"] = r["unseen_share"]
            per_seed[seed][item]["against_majority"] = r["against_majority"]
            u = per_seed[seed][item]["unseen"]
            print(f"seed {seed} {item}: unseen weighted exact model "
                  f"{u['model']['weighted_exact']:.1%} (tables: exact "
                  f"{u['baseline_exact']['weighted_exact']:.1%}, site "
                  f"{u['baseline_site']['weighted_exact']:.1%}); unweighted model "
                  f"{u['model']['unweighted_exact']:.1%}", flush=True)
    # What the test items may be called: the model's recorded roles, the family's table.
    test_roles = roles_note.statuses(args.family, args.test,
                                     os.path.join(base, f"model-seed{args.seeds[0]}"),
                                     "cross_version", train_versions=args.train)
    summary = summarize({s: {i: {k: v for k, v in r.items() if k in SCOPES}
                             for i, r in res.items()} for s, res in per_seed.items()})
    manifests = {item: load_dataset(ds).manifest for item, ds in [("train", train_ds),
                                                                 *test_ds.items()]}

    def purity(m):
        splits = m["splits"]
        n = sum(splits[s]["samples"] for s in splits)
        return sum((splits[s]["label_purity"] or 0) * splits[s]["samples"] for s in splits) / n

    info = {"family": args.family, "train": args.train, "seeds": args.seeds,
            "test_roles": test_roles,
            "hyperparameters": json.loads(args.hparams), "train_seconds": train_seconds,
            "context": manifests["train"]["context"],
            "train_label_purity": purity(manifests["train"]),
            "test": {item: {"contexts": sum(manifests[item]["splits"][s]["contexts"]
                                            for s in manifests[item]["splits"]),
                            "label_purity": purity(manifests[item]),
                            "role": test_roles[version_roles.label(args.family, item)]["role"],
                            "unseen_contexts_share": per_seed[args.seeds[0]][item][
                                "unseen_share"]["contexts"],
                            "unseen_samples_share": per_seed[args.seeds[0]][item][
                                "unseen_share"]["samples"]} for item in test_ds}}
    if args.online:
        info["online"] = online_check(args.family, args.test[0],
                                      os.path.join(base, f"model-seed{args.seeds[0]}"),
                                      train_ds, base, args)
    os.makedirs(base, exist_ok=True)
    with open(os.path.join(base, "results.json"), "w") as f:
        json.dump({"info": info, "summary": summary, "per_seed": per_seed}, f, indent=1)
    text = markdown(args.name or args.family, summary, info, per_seed)
    with open(os.path.join(base, "results.md"), "w") as f:
        f.write(text)
    print(text)
    if not args.no_report:
        from model.report import write_report

        write_report(os.path.join(base, f"model-seed{args.seeds[0]}"), [train_ds],
                     list(test_ds.values()), os.path.join(base, "report"), fractions=(1.0,))
    log.append(f"# results: {os.path.join(base, 'results.md')}")
    with open(os.path.join(base, "commands.txt"), "w") as f:
        f.write("\n".join(log) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
