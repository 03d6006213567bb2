"""Table predictors for the simulator, fit on a training dataset (`lifetime build-dataset`).

  * exact:     the exact-context table of model/baselines.py (key: all frames of the
               context), fit on every context of the training dataset (both splits);
  * site:      the allocation-site table of model/baselines.py (key: the first frame);
  * one class: the training set's majority class for every object (`constant:C`);
  * oracle:    each object's own class from its recorded lifetime (the engine's);
  * context oracles, computed from the simulated trace itself: each context (the
               dataset's context definition, as for the tables) gets
      - context_t95:  the T95 class of its objects in the trace, by the dataset's own
                      label rule (pipeline.context_stats.ContextStats.t95, Kaplan-Meier with
                      objects live at the trace's end censored at their age then, and
                      LabelScheme.label): what a perfect per-context T95 predictor gives;
      - context_cost: the class core.lifetimes.cost_rule picks from the context's
                      bytes per true class in the trace (never freed = inf, as the engine
                      sees it), the run's deadline factor, the rule's default horizon:
                      what a perfect per-context distribution gives under the cost rule.
    They separate "the model is wrong" from "no per-context prediction can be right".

The trace's stacks (its side file, simulator/convert.py) are symbolized ONCE each with
the dataset's context definition -- `core.context.machinery_free`, then
`ContextDefinition.frames` -- exactly as the dataset job cut the training stacks; each
stack id then gets its table's class, or the fallback for a context the table has not
seen: the training set's majority class (as in model/baselines.py).  The tables are
written as the engine's class-table files (`STACK_ID CLASS` per line,
simulator.trace.write_class_table), one line for every stack of the trace (misses
included, with the fallback), and `--table-default` is the fallback too.

Per-context accuracy (Table 3's "unweighted", and weighted by allocations) compares a
predictor's class for a context with the context's T95 class in the trace, the one label
rule above (`context_t95_classes`).
"""

from __future__ import annotations

import collections
import dataclasses
import os
from typing import Callable

import numpy as np

from core import context as context_def
from core import symbolize
from core.errors import LifetimeError
from core.files import open_regular
from core.lifetimes import (DEADLINE_K, NS_PER_MS, UNDER_WEIGHT, LabelScheme, cost_horizon,
                            cost_rule)
from model import baselines
from model.data import load_dataset
from pipeline.manifest import dataset_context
from simulator.convert import MappingRecord, boundaries_ns
from simulator.trace import NEVER, RECORD, read_header, write_class_table

# Apache Beam (pipeline.context_stats) is imported inside context_t95_classes:
# `lifetime --help` must not pay for it.


class TableError(LifetimeError):
    """A training dataset or trace side file the tables cannot be built from."""


@dataclasses.dataclass
class Tables:
    majority: int                      # the training majority class (fallback, one class)
    class_names: list
    boundaries_ns: tuple
    context: object                    # core.context.ContextDefinition
    files: dict                        # predictor name -> class-table path
    stack_class: dict                  # predictor name -> {stack id: class}
    stack_hit: dict                    # predictor name -> {stack id: bool (in the table)}
    stack_context: dict                # stack id -> context frames (tuple)
    training: dict                     # what the tables were fit on
    coverage: dict                     # predictor name -> hits by stacks / objects / bytes
    per_context: dict                  # predictor name -> per-context (unweighted) accuracy
    context_t95: dict                  # context frames -> T95 class of its objects in the trace
    context_oracle: dict               # the context oracles' rules, parameters and counts


def training_examples(dataset_dir: str):
    """(Dataset, Examples of both splits, ContextDefinition, LabelScheme) of a training
    dataset directory; clear errors for one that lacks a context definition."""
    if not os.path.isdir(dataset_dir):
        raise TableError(f"--train {dataset_dir}: no such dataset directory")
    try:
        definition = dataset_context(dataset_dir)
    except LifetimeError as e:
        raise TableError(f"--train {dataset_dir}: {e}") from e
    if definition.size_feature:
        raise TableError(f"--train {dataset_dir}: its contexts are keyed on size "
                         "(--size-feature); the simulator's tables and contexts are per stack "
                         "(benchmarks/size_feature.py scores such a model per object, "
                         "benchmarks/allocator_rss.py --export runs it in the allocator)")
    ds = load_dataset(dataset_dir)
    try:
        scheme = LabelScheme.from_json(ds.label_scheme)
    except (KeyError, TypeError, LifetimeError) as e:
        raise TableError(f"--train {dataset_dir}: manifest.json has no usable label scheme "
                         f"({e})") from e
    examples = ds.all()
    if not len(examples):
        raise TableError(f"--train {dataset_dir}: the dataset holds no contexts")
    return ds, examples, definition, scheme


def context_accuracy(right: dict, objects: dict) -> dict:
    """Per-context accuracy from {context: predicted class is its label} and its objects
    per class: unweighted (share of contexts, Table 3's "unweighted") and weighted by the
    contexts' allocations (Table 3's "weighted")."""
    total = sum(float(np.sum(v)) for v in objects.values())
    correct_objects = sum(float(np.sum(objects[c])) for c, ok in right.items() if ok)
    correct = sum(1 for ok in right.values() if ok)
    return {"contexts": len(right), "correct": correct,
            "accuracy": correct / len(right) if right else None,
            "accuracy_weighted": correct_objects / total if total else None}


#: The .lttrace record as numpy reads it (simulator/trace.py's RECORD).
TRACE_RECORD = np.dtype([("alloc", "<u8"), ("free", "<u8"), ("size", "<u8"), ("stack", "<u8"),
                         ("thread", "<u4"), ("align", "<u4")])


def _trace_records(trace_path: str):
    """(header, records as a read-only numpy memmap) of a trace, its header checked."""
    assert TRACE_RECORD.itemsize == RECORD.size and NEVER == np.iinfo(np.uint64).max
    f, _ = open_regular(trace_path)
    with f:
        header = read_header(f, trace_path)
    if not header.num_records:
        return header, np.zeros(0, TRACE_RECORD)
    return header, np.memmap(trace_path, TRACE_RECORD, mode="r", offset=header.header_bytes,
                             shape=(header.num_records,))


def context_t95_classes(trace_path: str, stack_key: dict, scheme) -> dict:
    """{key: class} for the keys of stack_key (stack id -> context frames, or any key),
    each the T95 class of its objects in the trace by the dataset's label rule:
    `pipeline.context_stats.ContextStats.t95` (Kaplan-Meier; a censored object "survived this
    long") then `scheme.label` (pipeline/dataset.py does the same per training context).
    A freed object's lifetime is free - alloc; an object live at the trace's end is
    censored at its age then (end_ns - alloc: the trace keeps no other observed age; its
    end is the profile's).  Weights are 1 (the trace is objects, not weighted samples).
    Keys without objects in the trace get no class."""
    if scheme.clock != "wall":
        raise TableError(f"the trace replays wall-clock time; labels on the {scheme.clock!r} "
                         "clock cannot be computed from it")
    header, rec = _trace_records(trace_path)
    if not len(rec):
        return {}
    keys = {}
    key_index = {}
    for sid, key in stack_key.items():
        keys[int(sid)] = key_index.setdefault(key, len(key_index))
    sids, inverse = np.unique(rec["stack"], return_inverse=True)
    try:
        of_sid = np.fromiter((keys[int(x)] for x in sids), np.int64, len(sids))
    except KeyError as e:
        raise TableError(f"{trace_path}: stack {e.args[0]} is not in the trace's side file") from None
    key_of = of_sid[inverse.reshape(-1)]
    cls = context_t95_groups(header.end_ns, rec, key_of, len(key_index), scheme)
    return {key: int(cls[k]) for k, key in enumerate(key_index) if cls[k] >= 0}


def context_t95_groups(end_ns: int, rec, group: np.ndarray, ngroups: int, scheme) -> np.ndarray:
    """The T95 class of each group of records (group: each record's group, 0..ngroups-1),
    by the rule of context_t95_classes; -1 for a group without records.  The one place
    the context oracles and the feature oracles (simulator/features.py) label a group."""
    from pipeline.context_stats import ContextStats

    if scheme.clock != "wall":
        raise TableError(f"the trace replays wall-clock time; labels on the {scheme.clock!r} "
                         "clock cannot be computed from it")
    out = np.full(ngroups, -1, np.int64)
    if not len(rec):
        return out
    alloc, free = rec["alloc"], rec["free"]
    censored = free == np.iinfo(np.uint64).max
    # Integer differences first, then ms: (free - alloc) / NS_PER_MS, as lifetime_on_clock.
    life_ns = np.where(censored, np.uint64(end_ns) - alloc, free - alloc)
    life = life_ns.astype(np.float64) / NS_PER_MS
    sizes = np.asarray(rec["size"], np.uint64)
    order = np.argsort(group, kind="stable")
    bounds = np.searchsorted(group[order], np.arange(ngroups + 1))
    for k in range(ngroups):
        idx = order[bounds[k]:bounds[k + 1]]
        if not len(idx):
            continue
        st = ContextStats()
        lv, cv = life[idx], censored[idx]
        st.obs_lifetime.frombytes(np.ascontiguousarray(lv).tobytes())
        st.obs_censored.frombytes(cv.astype(np.uint8).tobytes())
        st.obs_weight.frombytes(np.ones(len(idx), np.float64).tobytes())
        st.obs_size.frombytes(np.ascontiguousarray(sizes[idx]).tobytes())
        st.samples = len(idx)
        st.objects = float(len(idx))
        out[k] = scheme.label(st.t95())
    return out


def context_bytes(side: dict, stack_context: dict) -> dict:
    """context -> its objects' bytes per true class in the trace (the side file's per-stack
    counts, summed over the context's stacks): what the cost rule weighs."""
    per_stack = {int(st["id"]): st for st in side["stacks"]}
    by_bytes: dict = {}
    for sid, c in stack_context.items():
        if sid in per_stack:
            by_bytes[c] = by_bytes.get(c, 0) + np.asarray(per_stack[sid]["bytes"], np.float64)
    return by_bytes


def context_oracle_tables(trace_path: str, side: dict, stack_context: dict, scheme, out_dir: str,
                          *, deadline_k: float | None = None) -> tuple[dict, dict, dict, dict]:
    """The two context oracles for the trace: ({name: {stack id: class}}, {name: table
    file}, {context: T95 class}, and what they were computed with).  context_t95: each
    context's T95 class in the trace (context_t95_classes); context_cost: the cost rule
    (core.lifetimes.cost_rule) on the context's bytes per true class in the trace,
    with the run's deadline factor and the rule's default horizon (the one the model's
    predictions get; not the trace's length, see lifetimes.cost_horizon)."""
    k = DEADLINE_K if deadline_k is None else deadline_k
    labels = context_t95_classes(trace_path, stack_context, scheme)
    horizon = cost_horizon(scheme.boundaries, k)
    by_bytes = context_bytes(side, stack_context)
    cost = {}
    for c, b in by_bytes.items():
        if b.sum() > 0:
            cost[c] = cost_rule(b, scheme.boundaries, deadline_k=k, horizon=horizon)
        elif c in labels:  # zero-byte objects only: nothing to weigh by bytes
            cost[c] = labels[c]
    stack_class = {"context_t95": {}, "context_cost": {}}
    for sid, c in stack_context.items():
        if c in labels:
            stack_class["context_t95"][sid] = labels[c]
        if c in cost:
            stack_class["context_cost"][sid] = cost[c]
    os.makedirs(out_dir, exist_ok=True)
    files = {name: write_class_table(os.path.join(out_dir, f"{name}.tbl"), table)
             for name, table in stack_class.items()}
    agree = sum(1 for c in labels if cost.get(c) == labels[c])
    info = {"contexts": len(labels), "cost_rule_equals_t95": agree,
            "t95": {"rule": "T95 class of the context's objects in this trace: "
                            "pipeline.context_stats.ContextStats.t95 (Kaplan-Meier; objects live at "
                            "the end censored at their age then) and LabelScheme.label"},
            "cost": {"rule": "core.lifetimes.cost_rule on the context's bytes per true "
                             "class in this trace (never freed = inf)",
                     "deadline_k": k, "horizon_ms": horizon, "under_weight": UNDER_WEIGHT,
                     "weights": "bytes"},
            "files": files}
    return stack_class, files, labels, info


def symbolize_stacks(side: dict, definition, *, debug_dirs=None, sysroot: str | None = None,
                     progress: Callable[[str], None] | None = None) -> dict:
    """stack id -> context frames, every stack of the trace symbolized once."""
    cache = symbolize.ModuleCache(debug_dirs=tuple(debug_dirs or symbolize.DEFAULT_DEBUG_DIRS),
                                  sysroot=sysroot)
    sym = context_def.make_symbolizer([MappingRecord(m) for m in side["mappings"]], cache=cache)
    out = {}
    stacks = side["stacks"]
    for i, st in enumerate(stacks):
        out[int(st["id"])] = definition.frames(context_def.machinery_free(sym, st["addresses"]))
        if progress and (i + 1) % 5000 == 0:
            progress(f"symbolized {i + 1:,} of {len(stacks):,} stacks")
    return out


def build_tables(dataset_dir: str, side: dict, out_dir: str, trace_path: str, *,
                 deadline_k: float | None = None, debug_dirs=None, sysroot: str | None = None,
                 progress: Callable[[str], None] | None = None) -> Tables:
    """Fits the exact and site tables on `dataset_dir`, computes the context oracles from
    the trace (`trace_path`, described by `side`, its stacks side file; deadline_k: the
    run's LLAMA deadline factor, for the cost rule) and writes the engine's class tables
    for the trace into out_dir."""
    say = progress or (lambda _m: None)
    ds, ex, definition, scheme = training_examples(dataset_dir)
    bounds = boundaries_ns(scheme)
    if tuple(side["boundaries_ns"]) != bounds:
        raise TableError(
            f"--train {dataset_dir}: its class boundaries {list(bounds)} ns differ from the "
            f"trace's {list(side['boundaries_ns'])} ns; convert the profile with the "
            "dataset's label scheme (give the profile, not the trace)")
    say(f"fitting tables on {dataset_dir}: {len(ex):,} contexts, {float(ex.weight.sum()):,.0f} samples")
    majority = baselines._majority(ex.label, ex.weight)
    fitted = {"exact": baselines.LookupTable(baselines.exact_key, ex.frames, ex.label, ex.weight, majority),
              "site": baselines.LookupTable(baselines.site_key, ex.frames, ex.label, ex.weight, majority)}
    say(f"symbolizing {len(side['stacks']):,} stacks of the trace with the dataset's context definition")
    contexts = symbolize_stacks(side, definition, debug_dirs=debug_dirs, sysroot=sysroot, progress=say)
    ids = sorted(contexts)
    os.makedirs(out_dir, exist_ok=True)
    files, stack_class, stack_hit = {}, {}, {}
    for name, table in fitted.items():
        frames = [contexts[i] for i in ids]
        pred, hit = table.predict(frames)
        stack_class[name] = dict(zip(ids, pred.tolist()))
        stack_hit[name] = dict(zip(ids, hit.tolist()))
        files[name] = write_class_table(os.path.join(out_dir, f"{name}.tbl"), stack_class[name])
    stack_class["one_class"] = {i: majority for i in ids}
    stack_hit["one_class"] = {i: True for i in ids}

    # Coverage of each table on the trace: by stacks, objects, bytes.
    per_stack = {int(s["id"]): s for s in side["stacks"]}
    coverage = {}
    for name in fitted:
        hits = [i for i in ids if stack_hit[name][i]]
        coverage[name] = {
            "stacks": len(hits), "stacks_total": len(ids),
            "objects": sum(sum(per_stack[i]["objects"]) for i in hits),
            "objects_total": sum(sum(per_stack[i]["objects"]) for i in ids),
            "bytes": sum(sum(per_stack[i]["bytes"]) for i in hits),
            "bytes_total": sum(sum(per_stack[i]["bytes"]) for i in ids)}

    say("context oracles: each context's T95 class and cost-rule class in the trace")
    oracle_class, oracle_files, labels, oracle_info = context_oracle_tables(
        trace_path, side, contexts, scheme, out_dir, deadline_k=deadline_k)
    stack_class.update(oracle_class)
    files.update(oracle_files)

    # Per-context ("unweighted", Table 3) accuracy: a context of the trace is the
    # dataset's context frames; its label is the T95 class of its objects in the trace.
    by_context: dict[tuple, np.ndarray] = {}
    for i in ids:
        c = contexts[i]
        by_context[c] = by_context.get(c, 0) + np.asarray(per_stack[i]["objects"], np.float64)
    first_stack = {}
    for i in ids:
        first_stack.setdefault(contexts[i], i)
    per_context = {}
    for name in ("exact", "site", "one_class", "context_t95", "context_cost"):
        right = {c: stack_class[name].get(first_stack[c]) == labels[c]
                 for c in by_context if c in labels}
        per_context[name] = context_accuracy(right, {c: by_context[c] for c in right})
    totals = collections.Counter()
    for y, w in zip(ex.label, ex.weight):
        totals[int(y)] += float(w)
    training = {"dataset": os.path.abspath(dataset_dir), "contexts": len(ex),
                "samples": float(ex.weight.sum()), "splits": "train + eval",
                "exact_keys": len(fitted["exact"].table), "site_keys": len(fitted["site"].table),
                "majority_class": majority, "majority_class_name": scheme.class_names[majority],
                "class_samples": {scheme.class_names[k]: v for k, v in sorted(totals.items())},
                "context": definition.to_json(), "label_scheme": scheme.to_json(),
                "programs": sorted(set(ex.program.tolist()))}
    return Tables(majority, scheme.class_names, bounds, definition, files, stack_class, stack_hit,
                  contexts, training, coverage, per_context, labels, oracle_info)
