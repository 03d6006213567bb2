"""`lifetime simulate PROFILE_OR_TRACE --train DATASET --out DIR` (wired into lifetime/cli.py).

1. A profile (`.ltprof`) is converted into OUT/trace.lttrace and its stack side file
   OUT/trace.stacks.json (simulator/convert.py), on the training dataset's label scheme;
   a trace (`.lttrace`, recognized by its magic) is used as it is, with the side file
   next to it.
2. The exact-context and site tables are fit on the training dataset and written as
   the engine's class tables (OUT/tables/, simulator/tables.py).
3. With --model EXPORT_DIR: the export's plugin is built (export.serve.model_plugin)
   and OUT/model/contexts.txt written: each stack's context frames under the model's own
   context definition (simulator/model_input.py).
   The context oracles are computed from the trace itself (each context's T95 class, and
   the class core.lifetimes.cost_rule picks from its bytes per class) and written as
   class tables too (OUT/tables/context_{t95,cost}.tbl).
4. The engine runs once: the baseline and LLAMA x {oracle, context oracle (T95), context
   oracle (cost rule), exact table, site table, one class, TCMalloc's removed lifetime
   rule (objects over 1 MiB; and all sizes; simulator/src/tcmalloc_rule.h)[, model]}; its
   JSON is OUT/simulation.json, and the classes the online predictors (the rule, the model)
   gave each stack OUT/served.txt (OUT/model/served.txt with --model).
5. OUT/report.{md,html,json} and PNGs (simulator/report.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
import time

import simulator
from core import options
from core.errors import LifetimeError
from core.files import (check_regular, open_regular, read_json, refuse_irregular_output,
                        writable_dir)
from core.lifetimes import LabelScheme
from core.symbol_options import add_symbol_options, symbol_options
from pipeline.manifest import MANIFEST, dataset_context
from simulator import convert, features, model_input, report, tables
from simulator.trace import MAGIC


class SimulateError(LifetimeError):
    """A problem `lifetime simulate` can name: its input, the engine, the dataset."""


def add_parser(sub) -> None:
    p = sub.add_parser(
        "simulate", help="replay a profile's objects through a TCMalloc-like allocator and LLAMA",
        description="Converts PROFILE (a .ltprof, ideally a full trace) into an object trace, "
                    "fits the exact-context and site tables on the training dataset, runs the "
                    "heap simulator (baseline + LLAMA with the oracle, the context oracles "
                    "computed from the trace (T95 and cost rule), each table, one class "
                    "for all and TCMalloc's removed online lifetime rule) and writes report.md/.html/.json with the Table-3 row and the "
                    "Figure-8 plot into --out.  A .lttrace written by an earlier run (with its "
                    ".stacks.json next to it) is taken as it is.")
    p.add_argument("input", metavar="PROFILE_OR_TRACE")
    p.add_argument("--train", required=True, metavar="DATASET",
                   help="training dataset (`lifetime build-dataset`): context definition, label "
                        "scheme and the contexts the tables are fit on")
    p.add_argument("--model", metavar="EXPORT_DIR",
                   help="a `lifetime export` directory: adds LLAMA + the exported model, called "
                        "through its C API and its prediction cache (§2.3)")
    # Numeric ranges: core/options.py types, checked as the line is parsed.
    p.add_argument("--model-revalidate-every", type=options.int_range(0, 2**32 - 1),
                   default=None, metavar="N",  # the engine's uint32
                   help="model cache: rerun the model every N hits of an entry (0: never; "
                        "default: the model library's, 1000)")
    p.add_argument("--out", required=True, metavar="DIR")
    p.add_argument("--series-interval-ms", type=options.positive_int(10**9), default=None,
                   metavar="N",  # 1 ms .. 11.6 days
                   help="time-series interval of the memory plot (default: 1/1000 of the trace)")
    p.add_argument("--deadline-k", type=options.positive_int(100), default=None, metavar="K",
                   help="LLAMA deadline = now + K x class bound (default: the engine's, 2)")
    p.add_argument("--policy", default=None, metavar="NAME[,NAME...]",
                   help="LLAMA's policy for every LLAMA row (default: the paper's); e.g. "
                        "occupancy:0.9,own-blocks,span-fit,medium-spans,fine-lines,divert-mixed "
                        "(simulator/README.md, 'Policy switches')")
    p.add_argument("--feature-oracles", nargs="*", default=None, metavar="FEATURE",
                   help="also run the feature oracles (issue 34: the context oracles keyed by the "
                        "context plus one feature, computed from the trace; simulator/features.py): "
                        "the features named, or all of them (size thread time rate prev1 prev2 "
                        "stack, and the control size_shuffled) when none is named")
    p.add_argument("--check-invariants", action="store_true",
                   help="check the heap invariants after every event (slow)")
    p.add_argument("--run-records", type=options.positive_int(1 << 26), default=None,
                   metavar="N",  # 64 Mi records: 3 GiB of sort buffer
                   help="records per sorted run when converting (memory: 48 bytes each; "
                        "default 1M)")
    add_symbol_options(p)
    p.set_defaults(func=run)


def _say(msg: str) -> None:
    print(f"lifetime simulate: {msg}", file=sys.stderr, flush=True)


def _is_trace(path: str) -> bool:
    try:
        f, _ = open_regular(path)  # a fifo or device is refused, never waited on
        with f:
            return f.read(len(MAGIC)) == MAGIC
    except FileNotFoundError:
        raise SimulateError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise SimulateError(f"{path}: is a directory, not a profile or trace file") from None
    except OSError as e:
        raise SimulateError(f"{path}: cannot read ({e.strerror})") from None


def _label_scheme(dataset: str):
    """The training dataset's label scheme, from its manifest (no TensorFlow needed)."""
    if not os.path.isdir(dataset):
        raise SimulateError(f"--train {dataset}: no such dataset directory")
    manifest = os.path.join(dataset, MANIFEST)
    try:
        check_regular(manifest)  # stat only: dataset_context's open would block on a fifo
    except OSError as e:
        raise SimulateError(f"{manifest}: cannot read ({e.strerror})") from None
    try:
        dataset_context(dataset)  # fails early: a dataset with no context definition
    except LifetimeError as e:
        raise SimulateError(f"--train {dataset}: {e}") from e
    try:
        scheme = LabelScheme.from_json(read_json(manifest)["config"]["labels"])
    except (OSError, ValueError, KeyError, TypeError, LifetimeError) as e:
        raise SimulateError(f"{manifest}: no usable label scheme ({e})") from e
    if scheme.clock != "wall":
        raise SimulateError(f"--train {dataset}: labels on the {scheme.clock!r} clock; the "
                            "simulator replays wall-clock time (build the dataset with --clock wall)")
    return scheme


# What `simulate` writes into --out (report.py, convert.py, tables.py, model.py).
_OUTPUTS = ("trace.lttrace", "trace.stacks.json", "simulation.json", "report.md", "report.html",
            "report.json", "memory_over_time.png", "memory_bars.png",
            os.path.join("tables", "exact.tbl"), os.path.join("tables", "site.tbl"),
            os.path.join("tables", "context_t95.tbl"), os.path.join("tables", "context_cost.tbl"),
            os.path.join("model", "contexts.txt"), os.path.join("model", "served.txt"),
            "served.txt")


def _refuse_irregular_outputs(out: str) -> None:
    """A fifo or device already at an output's path would block (or swallow) the write."""
    for name in _OUTPUTS:
        path = os.path.join(out, name)
        try:
            refuse_irregular_output(path)
        except OSError as e:
            raise SimulateError(f"{path}: cannot write there ({e.strerror})") from None


def _engine() -> str:
    try:
        return str(simulator.engine_path())
    except FileNotFoundError as e:
        raise SimulateError(f"{e}") from None


def _check_policy(engine: str, policy: str) -> None:
    """The engine parses --policy before it opens the trace: run it on no trace."""
    p = subprocess.run([engine, os.devnull, "--policy", policy, "--check"], capture_output=True,
                       text=True)
    err = p.stderr.strip().splitlines()
    if err and "--policy" in err[-1]:
        raise SimulateError(err[-1].removeprefix("lifetime_simulate: error: "))


@dataclasses.dataclass
class _Checked:
    """What `simulate` checks before any work."""
    engine: str
    is_trace: bool
    scheme: LabelScheme
    debug_dirs: tuple
    sysroot: str | None


def _check_before_work(args: argparse.Namespace) -> _Checked:
    """Every option and input, cheapest first: a bad one fails before any work."""
    if args.model:
        model_input.load_export(args.model)
    symbols = symbol_options(args)  # checked before any work, like the other commands
    engine = _engine()
    if args.policy is not None:
        _check_policy(engine, args.policy)
    is_trace = _is_trace(args.input)  # the input first: a fifo or a missing file fails at once
    scheme = _label_scheme(args.train)
    writable_dir(args.out)
    _refuse_irregular_outputs(args.out)
    return _Checked(engine=engine, is_trace=is_trace, scheme=scheme,
                    debug_dirs=symbols["debug_dirs"], sysroot=symbols["sysroot"] or None)


def _trace(args: argparse.Namespace, checked: _Checked) -> tuple[str, dict]:
    """Step 1: the trace and its stack side file (a profile is converted into OUT)."""
    if checked.is_trace:
        trace_path = args.input
        side = convert.load_stacks(convert.stacks_path(trace_path))
        _say(f"trace {trace_path}: {side['counts']['records']:,} objects (side file "
             f"{convert.stacks_path(trace_path)})")
    else:
        trace_path = os.path.join(args.out, "trace.lttrace")
        kwargs = {"run_records": args.run_records} if args.run_records else {}
        result = convert.convert_profile(args.input, trace_path, checked.scheme, progress=_say,
                                         **kwargs)
        side = convert.load_stacks(result.stacks)
    if side["source"].get("sampled"):
        _say(f"warning: {side['source']['profile']} was Poisson-sampled (interval "
             f"{side['source']['sampling_interval_bytes']:,} bytes): the simulation is of the "
             "sampled objects only and underestimates the heap (nothing is scaled up)")
    return trace_path, side


def _fit_tables(args: argparse.Namespace, checked: _Checked, side: dict, trace_path: str):
    """Step 2: the class tables (exact, site, context oracles) under OUT/tables."""
    return tables.build_tables(args.train, side, os.path.join(args.out, "tables"), trace_path,
                               deadline_k=args.deadline_k, debug_dirs=checked.debug_dirs,
                               sysroot=checked.sysroot, progress=_say)


def _prepare_model(args: argparse.Namespace, checked: _Checked, side: dict, tbl):
    """Step 3: with --model, the plugin and OUT/model/contexts.txt (None without)."""
    if not args.model:
        return None
    try:
        return model_input.prepare(args.model, side, os.path.join(args.out, "model"),
                                   class_names=tbl.class_names,
                                   reuse=(tbl.context, tbl.stack_context),
                                   debug_dirs=checked.debug_dirs, sysroot=checked.sysroot,
                                   progress=_say)
    except model_input.ModelInputError as e:
        raise SimulateError(str(e)) from None


def _feature_oracles(args: argparse.Namespace, checked: _Checked, trace_path: str, tbl):
    """With --feature-oracles: their object class files under OUT/tables (None without)."""
    if args.feature_oracles is None:
        return None
    names = args.feature_oracles or list(features.FEATURES)
    for n in names:
        if n not in features.FEATURES:
            raise SimulateError(f"--feature-oracles {n}: expected one of {', '.join(features.FEATURES)}")
    return features.write_feature_oracles(trace_path, tbl.stack_context, checked.scheme,
                                          os.path.join(args.out, "tables"), names,
                                          deadline_k=args.deadline_k, progress=_say)


def _predictor_specs(tbl, mi, fo=None) -> list[str]:
    """The engine's LLAMA rows, in report order."""
    specs = ["oracle", f"context_t95=table:{tbl.files['context_t95']}",
             f"context_cost=table:{tbl.files['context_cost']}",
             f"exact=table:{tbl.files['exact']}", f"site=table:{tbl.files['site']}",
             f"one_class=constant:{tbl.majority}",
             # objects outside the rule's sizes get --table-default: the majority, as the tables
             "tcmalloc_rule=tcmalloc-rule:large", "tcmalloc_rule_all=tcmalloc-rule:all"]
    if fo is not None:
        specs[3:3] = [f"{label}=objects:{path}" for label, path in fo["files"].items()]
    if mi is not None:
        specs.append(f"model=model:{mi.contexts_file}")
    return specs


def _simulate(args: argparse.Namespace, trace_path: str, side: dict, tbl, specs: list[str],
              served_path: str | None, sim_json: str) -> dict:
    """Step 4: one engine run, every row; its JSON into OUT/simulation.json."""
    n = side["counts"]["records"]
    _say(f"simulating {n:,} objects: baseline + LLAMA x {{oracle, context oracle (T95), "
         "context oracle (cost rule), exact, site, one class, TCMalloc rule (large, all)"
         + (", model" if "model=model:" in " ".join(specs) else "") + "}"
         + (" with invariant checks" if args.check_invariants else ""))
    t0 = time.monotonic()
    try:
        sim = simulator.simulate(trace_path, specs, table_default=tbl.majority,
                                 series_interval_ms=args.series_interval_ms,
                                 deadline_k=args.deadline_k,
                                 check_invariants=args.check_invariants, json_out=sim_json,
                                 policy=[args.policy] if args.policy else [],
                                 model_revalidate_every=getattr(args, "model_revalidate_every", None),
                                 model_served=served_path)
    except simulator.SimulationError as e:
        # 2: the engine refused its input; 4: out of memory: problems a user can fix
        if e.returncode in (2, 4):
            raise SimulateError(str(e).removeprefix("lifetime_simulate: error: ")) from None
        raise  # an invariant violation or a crash is a bug: keep the traceback
    _say(f"simulated in {time.monotonic() - t0:.1f} s")
    return sim


def _online_accuracy(mi, served_path: str, side: dict, tbl, trace_path: str, scheme) -> None:
    """The per-context accuracy of the rows whose classes the engine served (the model;
    TCMalloc's rule, on the dataset's contexts): a context's class is the one its objects
    were given most."""
    served = model_input.read_served(served_path)
    for label in ("tcmalloc_rule", "tcmalloc_rule_all"):
        tbl.per_context[label] = model_input.per_context_accuracy(
            served.get(label, {}), tbl.stack_context, side, tbl.context_t95)
    if mi is None:
        return
    labels = (tbl.context_t95 if mi.stack_context is tbl.stack_context else
              tables.context_t95_classes(trace_path, mi.stack_context, scheme))
    tbl.per_context["model"] = model_input.per_context_accuracy(served.get("model", {}),
                                                                mi.stack_context, side, labels)


def _write_report(args: argparse.Namespace, checked: _Checked, sim: dict, side: dict, tbl,
                  specs: list[str], mi, served_path: str | None, sim_json: str,
                  fo: dict | None = None) -> dict:
    """Step 5: OUT/report.{md,html,json} and the PNGs."""
    workload = side["source"]["program"] + (f" ({side['source']['version_label']})"
                                            if side["source"].get("version_label") else "")
    settings = {"engine": checked.engine, "predictor_specs": specs,
                "policy": args.policy or "paper", "check_invariants": args.check_invariants}
    if mi is not None:
        settings["model"] = {"export_dir": mi.export_dir, "plugin": mi.plugin,
                             "contexts_file": mi.contexts_file, "served_file": served_path,
                             "model_id": mi.model_id, "graph": mi.manifest.get("graph"),
                             "context": mi.context.to_json()}
    if fo is not None:
        settings["feature_oracles"] = {
            "definitions": {k: features.FEATURES[k] for k in fo["keys"]},
            "time_buckets": features.TIME_BUCKETS, "rate_window_ns": features.RATE_WINDOW_NS,
            "keys": {"none": tbl.context_oracle.get("contexts"), **fo["keys"]},
            "objects": fo["objects"], "files": fo["files"]}
    return report.write_report(sim, side, tbl, args.out, workload=workload,
                               simulation_json=sim_json, settings=settings)


def _print_results(out: str, rep: dict, seconds: float) -> None:
    """What `simulate` prints on stdout: where the report is, the Table-3 rows, the model's
    cache and timing."""
    print(f"report: {os.path.join(out, 'report.md')} (.html, .json, memory_over_time.png); "
          f"{seconds:.1f} s")
    if rep["sampled"]:
        print("note: sampled profile: the simulated heap holds the sampled objects only")
    print(f"{'predictor':<26} {'acc(alloc)':>10} {'acc(bytes)':>10} {'baseline MiB':>12} "
          f"{'LLAMA MiB':>10} {'live MiB':>9} {'frag. red.':>10} {'resident':>9} {'res. red.':>9}")
    pct = lambda x: "n/a" if x is None else f"{100 * x:.1f}%"  # noqa: E731
    mib = lambda x: "n/a" if x is None else f"{x / report.MB:.1f}"  # noqa: E731
    for r in rep["table3"]:
        print(f"{r['predictor']:<26} {pct(r['accuracy_by_allocations']):>10} "
              f"{pct(r['accuracy_by_bytes']):>10} {mib(r['baseline_steady_state_bytes']):>12} "
              f"{mib(r['llama_steady_state_bytes']):>10} {mib(r['live_steady_state_bytes']):>9} "
              f"{pct(r['fragmentation_reduction']):>10} {mib(r.get('llama_steady_resident_bytes')):>9} "
              f"{pct(r.get('resident_fragmentation_reduction')):>9}")
    if rep.get("model"):
        m = rep["model"]
        print(f"model: {m['cache']['hits']:,} cache hits, {m['cache']['misses']:,} misses, "
              f"{m['model_runs']:,} model runs; per call: hit {m['timing_ns']['cache_hit']['mean']:.0f} ns "
              f"mean, model call {m['timing_ns']['model_call']['mean']:.0f} ns mean "
              f"(p50 {m['timing_ns']['model_call']['p50']:.0f}, p99 {m['timing_ns']['model_call']['p99']:.0f})")


def run(args: argparse.Namespace) -> int:
    """The five steps of the module docstring, after every check."""
    checked = _check_before_work(args)
    started = time.monotonic()
    trace_path, side = _trace(args, checked)
    tbl = _fit_tables(args, checked, side, trace_path)
    mi = _prepare_model(args, checked, side, tbl)
    fo = _feature_oracles(args, checked, trace_path, tbl)
    specs = _predictor_specs(tbl, mi, fo)
    served_path = os.path.join(args.out, *(("model",) if mi is not None else ()), "served.txt")
    sim_json = os.path.join(args.out, "simulation.json")
    sim = _simulate(args, trace_path, side, tbl, specs, served_path, sim_json)
    _online_accuracy(mi, served_path, side, tbl, trace_path, checked.scheme)
    rep = _write_report(args, checked, sim, side, tbl, specs, mi, served_path, sim_json, fo)
    _print_results(args.out, rep, time.monotonic() - started)
    return 0
