#!/usr/bin/env python3
"""Size as a model input (issue 34 item 3): the same training profiles cut two ways, by
stack (the context definition's default) and by stack and size (`build-dataset
--size-feature`: a size frame above the stack), a model trained on each, and both scored
on the same test profile.

Per-context figures (`lifetime evaluate` on a test dataset cut `--like` each training
set) are against each dataset's own labels, and a context keyed on size has its own
label: they do not compare across the two cuts.  What does compare is **per object**:
every sampled object of the test profile, its own lifetime class (its lifetime on the
labels' clock; one still live at the end: never freed) against the class its context
gets (the model's, or a table's fit on the same training split: site, exact, majority).
Objects are counted as sampled (a full trace: every object once).

Defaults: the Redis mixed workload's runs (--runs: another workload's, e.g.
out/redis21/phases-wrap) of benchmarks/simulate_redis.py (training
profiles of 5.0.6 + 6.0.16 sampled, the test version 6.2.14 fully traced) under
out/redis21/mixed/load<S>; outputs OUT/<cut>/load<S>/{dataset-train, dataset-test, model-seed<N>,
export-seed<first N>} and OUT/results.{json,md}.  The allocator's RSS with
these models: benchmarks/allocator_rss.py --export 'mixed=OUT/size/load{seed}/export-seed0'
(exported here with --export).

    nice .venv/bin/python benchmarks/size_feature.py --load-seeds 1 2 --seeds 0 [--export]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from core import version_roles  # noqa: E402

LIFETIME = os.path.join(ROOT, ".venv", "bin", "lifetime")
CUTS = ("stack", "size")
PREDICTORS = ("model", "site", "exact", "majority")


def log(msg: str) -> None:
    print(f"[size_feature {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run(cmd: list[str], commands: list[str]) -> None:
    commands.append(" ".join(cmd))
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def profiles(runs: str, seed: int, test_version: str) -> tuple[list[tuple[str, str]], str]:
    """(training profile dirs with their version labels, the scored version's profile)."""
    base = os.path.join(runs, f"load{seed}")
    train = [(os.path.join(base, "train", v, "run1", "profiles"), f"redis-{v}")
             for v in ("5.0.6", "6.0.16")]
    test_dir = os.path.join(base, "test", test_version, "profiles")
    [test] = [os.path.join(test_dir, f) for f in sorted(os.listdir(test_dir))
              if f.endswith(".ltprof")]
    return train, test


def build(cut: str, out: str, train, test: str, test_version: str, seeds: list[int],
          export: bool, commands: list[str]) -> None:
    ds = os.path.join(out, "dataset-train")
    if not os.path.exists(os.path.join(ds, "manifest.json")):
        cmd = [LIFETIME, "build-dataset", "--out", ds]
        for path, label in train:
            cmd += ["--profiles", path, "--version-label", label]
        run(cmd + (["--size-feature"] if cut == "size" else []), commands)
    test_ds = os.path.join(out, "dataset-test")
    if not os.path.exists(os.path.join(test_ds, "manifest.json")):
        run([LIFETIME, "build-dataset", "--like", ds, "--out", test_ds, "--profiles", test,
             "--version-label", f"redis-{test_version}"], commands)
    for seed in seeds:
        model = os.path.join(out, f"model-seed{seed}")
        if not os.path.exists(os.path.join(model, "config.json")):
            run([LIFETIME, "train", "--dataset", ds, "--out", model, "--seed", str(seed),
                 "--refit"], commands)
        if export and seed == seeds[0] and not os.path.isdir(os.path.join(out, f"export-seed{seed}")):
            run([LIFETIME, "export", model, "--out", os.path.join(out, f"export-seed{seed}")],
                commands)


def per_context(out: str, seed: int) -> dict:
    from model.evaluate import evaluate
    from model.metrics import headline

    r = evaluate(os.path.join(out, f"model-seed{seed}"), [os.path.join(out, "dataset-test")],
                 split="all")
    names = {"model": "model", "site": "baseline_site", "exact": "baseline_exact",
             "majority": "baseline_majority"}
    return {scope: {p: headline(r[scope][names[p]]) for p in PREDICTORS}
            for scope in ("overall", "unseen")}


def per_object(out: str, seed: int, test: str) -> dict:
    """Every sampled object of the test profile: its own class against its context's
    predicted class, per predictor; counts and shares."""
    from core import context as context_def, lifetimes, symbolize
    from model import baselines, io
    from model.data import load_dataset
    from model.evaluate import training_data
    from model.train import predict_classes
    from pipeline import context_stats, sources

    md = io.read_model_dir(os.path.join(out, f"model-seed{seed}"))
    definition = md.context
    scheme = lifetimes.LabelScheme.from_json(md.config["label_scheme"])
    test_ds = load_dataset(os.path.join(out, "dataset-test")).all()
    _, train_ex = training_data(md.config, None)
    fitted = baselines.fit_baselines(train_ex.frames, train_ex.label, train_ex.weight)
    contexts = [tuple(f) for f in test_ds.frames]
    predicted = {"model": predict_classes(md.load_keras(), test_ds, md.hparams, md.backoff)}
    for name in ("site", "exact", "majority"):
        predicted[name] = fitted[name](test_ds.frames)
    index = {c: i for i, c in enumerate(contexts)}

    right = {p: 0 for p in PREDICTORS}
    under = {p: 0 for p in PREDICTORS}  # the object outlived its predicted class
    objects = missing = 0
    bounds = np.asarray(scheme.boundaries, dtype=np.float64)
    with sources.resolve(test, sources.AUTO).open(test) as reader:
        per_stack = context_stats.stack_stats(reader.samples(), scheme.clock)
        sym = context_def.make_symbolizer(reader.mappings, cache=symbolize.ModuleCache())
        for sid, st in sorted(per_stack.items()):
            stack = context_def.machinery_free(sym, reader.stacks[sid].addresses)
            lifetime = np.frombuffer(st.obs_lifetime, dtype=np.float64)
            own = np.searchsorted(bounds, lifetime, side="right")
            own[lifetime == np.inf] = scheme.inf_class
            own[np.frombuffer(st.obs_censored, dtype=np.uint8) != 0] = scheme.inf_class
            if definition.size_feature:
                sizes = np.frombuffer(st.obs_size, dtype=np.uint64)
                floors = context_def.size_bucket_floors(sizes)
                groups = [(context_def.size_frame(int(f)), floors == f) for f in np.unique(floors)]
                site = definition.site_frames(stack)
                keys = [((frame,) + site, mask) for frame, mask in groups]
            else:
                keys = [(definition.frames(stack), np.ones(len(own), bool))]
            for frames, mask in keys:
                n = int(mask.sum())
                objects += n
                i = index.get(frames)
                if i is None:  # (a context the test dataset dropped: counted, never right)
                    missing += n
                    continue
                for p in PREDICTORS:
                    right[p] += int(np.count_nonzero(own[mask] == predicted[p][i]))
                    under[p] += int(np.count_nonzero(own[mask] > predicted[p][i]))
    return {"objects": objects, "objects_without_context": missing,
            **{p: right[p] / objects for p in PREDICTORS},
            "under": {p: under[p] / objects for p in PREDICTORS}}


def markdown(results: dict, seeds: list[int], load_seeds: list[int], runs: str,
             test_version: str = "6.2.14") -> str:
    lines = ["# Size as a model input (issue 34 item 3)", "",
             f"Redis, the runs of {os.path.relpath(runs, ROOT)}: trained on 5.0.6 + 6.0.16 "
             f"(sampled), scored on {test_version} "
             f"({version_roles.family_role('redis-' + test_version) or 'no role'}; full trace); "
             f"load seeds {load_seeds}, model seeds {seeds}. Per object: the share of the test "
             "profile's objects whose own lifetime class is the class their context gets. "
             "Per context: against each cut's own labels (not comparable across cuts).", "",
             "Under: the share of objects that outlive their predicted class (what pins pages).", "",
             "| cut | load seed | model seed | per object exact (under): model | site | exact "
             "| majority | per context w / unw: model | site |",
             "|---|---|---|---|---|---|---|---|---|"]
    for cut in CUTS:
        for ls in load_seeds:
            for s in seeds:
                r = results[cut][f"load{ls}"][f"seed{s}"]
                o, c = r["per_object"], r["per_context"]["overall"]
                lines.append(
                    f"| {cut} | {ls} | {s} | " + " | ".join(
                        f"{o[p]:.1%} ({o['under'][p]:.1%})" for p in PREDICTORS) + " | "
                    f"{c['model']['weighted_exact']:.1%} / {c['model']['unweighted_exact']:.1%} | "
                    f"{c['site']['weighted_exact']:.1%} / {c['site']['unweighted_exact']:.1%} |")
    for cut in CUTS:
        vals = [results[cut][f"load{ls}"][f"seed{s}"]["per_object"]["model"]
                for ls in load_seeds for s in seeds]
        sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
        lines.append("")
        lines.append(f"{cut}: per-object model accuracy mean {statistics.mean(vals):.1%}, "
                     f"worst {min(vals):.1%}, sample sd {sd:.1%} (n = {len(vals)})")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", default=os.path.join(ROOT, "out", "redis21", "mixed"),
                    help="simulate_redis.py's output for the workload (load<S>/train, test)")
    ap.add_argument("--test-version", default="6.2.14",
                    help="the fully traced version scored (6.2.9: the selection version's "
                         "runs, e.g. --runs out/sel629/mixed)")
    ap.add_argument("--load-seeds", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "out", "size_feature"))
    ap.add_argument("--export", action="store_true",
                    help="also export each cut's first model seed (for allocator_rss.py --export)")
    args = ap.parse_args(argv)
    try:
        version_roles.refuse_reserved([f"redis-{args.test_version}"], "test", "--test-version")
    except version_roles.ReservedVersionError as e:
        ap.error(str(e))
    commands: list[str] = []
    results: dict = {cut: {} for cut in CUTS}
    for ls in args.load_seeds:
        train, test = profiles(args.runs, ls, args.test_version)
        for cut in CUTS:
            out = os.path.join(args.out, cut, f"load{ls}")
            log(f"{cut} load seed {ls}: datasets and models under {out}")
            build(cut, out, train, test, args.test_version, args.seeds, args.export, commands)
            results[cut][f"load{ls}"] = {}
            for s in args.seeds:
                r = {"per_context": per_context(out, s), "per_object": per_object(out, s, test)}
                results[cut][f"load{ls}"][f"seed{s}"] = r
                o = r["per_object"]
                log(f"{cut} load {ls} seed {s}: per object model {o['model']:.1%} (under "
                    f"{o['under']['model']:.1%}), site {o['site']:.1%} (under "
                    f"{o['under']['site']:.1%}); {o['objects']:,} objects")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"load_seeds": args.load_seeds, "seeds": args.seeds, "results": results,
                   "commands": commands}, f, indent=1)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(markdown(results, args.seeds, args.load_seeds, args.runs, args.test_version))
    log(f"wrote {os.path.join(args.out, 'results.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
