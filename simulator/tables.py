"""Table predictors for the simulator, fit on a training dataset (`lifetime build-dataset`).

  * exact:     the exact-context table of model/baselines.py (key: all frames of the
               context), fit on every context of the training dataset (both splits);
  * site:      the allocation-site table of model/baselines.py (key: the first frame);
  * one class: the training set's majority class for every object (`constant:C`);
  * oracle:    each object's own class from its recorded lifetime (the engine's).

The trace's stacks (its side file, simulator/convert.py) are symbolized ONCE each with
the dataset's context definition -- `pipeline.context.machinery_free`, then
`ContextDefinition.frames` -- exactly as the dataset job cut the training stacks; each
stack id then gets its table's class, or the fallback for a context the table has not
seen: the training set's majority class (as in model/baselines.py).  The tables are
written as the engine's class-table files (`STACK_ID CLASS` per line,
simulator.trace.write_class_table), one line for every stack of the trace (misses
included, with the fallback), and `--table-default` is the fallback too.
"""

from __future__ import annotations

import collections
import dataclasses
import os
from typing import Callable

import numpy as np

from lifetime.errors import LifetimeError
from simulator.convert import MappingRecord
from simulator.trace import write_class_table


class TableError(LifetimeError):
    """A training dataset or trace side file the tables cannot be built from."""


@dataclasses.dataclass
class Tables:
    majority: int                      # the training majority class (fallback, one class)
    class_names: list
    boundaries_ns: tuple
    context: object                    # pipeline.context.ContextDefinition
    files: dict                        # predictor name -> class-table path
    stack_class: dict                  # predictor name -> {stack id: class}
    stack_hit: dict                    # predictor name -> {stack id: bool (in the table)}
    stack_context: dict                # stack id -> context frames (tuple)
    training: dict                     # what the tables were fit on
    coverage: dict                     # predictor name -> hits by stacks / objects / bytes
    per_context: dict                  # predictor name -> per-context (unweighted) accuracy


def training_examples(dataset_dir: str):
    """(Dataset, Examples of both splits, ContextDefinition, LabelScheme) of a training
    dataset directory; clear errors for one that lacks a context definition."""
    from model.data import load_dataset
    from pipeline.dataset import dataset_context
    from pipeline.lifetimes import LabelScheme

    if not os.path.isdir(dataset_dir):
        raise TableError(f"--train {dataset_dir}: no such dataset directory")
    try:
        definition = dataset_context(dataset_dir)
    except LifetimeError as e:
        raise TableError(f"--train {dataset_dir}: {e}") from e
    ds = load_dataset(dataset_dir)
    labels = ds.label_scheme
    try:
        scheme = LabelScheme(clock=labels["clock"], boundaries=tuple(labels["boundaries"]))
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


def context_label(objects_per_class) -> int:
    """A context's label from its objects' classes in the trace: the class holding the
    95th percentile (T95 < bound), never-freed objects counting as inf -- the labelling
    rule of pipeline/lifetimes.py on class counts (censoring read as inf)."""
    counts = np.asarray(objects_per_class, np.float64)
    total = counts.sum()
    cum = np.cumsum(counts)
    return int(np.searchsorted(cum, 0.95 * total - 1e-9 * total, side="left"))


def symbolize_stacks(side: dict, definition, *, debug_dirs=None, sysroot: str | None = None,
                     progress: Callable[[str], None] | None = None) -> dict:
    """stack id -> context frames, every stack of the trace symbolized once."""
    from pipeline import context as context_def
    from pipeline import symbolize

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


def build_tables(dataset_dir: str, side: dict, out_dir: str, *, debug_dirs=None,
                 sysroot: str | None = None,
                 progress: Callable[[str], None] | None = None) -> Tables:
    """Fits the exact and site tables on `dataset_dir` and writes the engine's class
    tables for the trace described by `side` (its stacks side file) into out_dir."""
    from model import baselines

    say = progress or (lambda _m: None)
    ds, ex, definition, scheme = training_examples(dataset_dir)
    from simulator.convert import boundaries_ns

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
    for name in ("exact", "site", "one_class"):
        right = {c: stack_class[name][first_stack[c]] == context_label(counts)
                 for c, counts in by_context.items()}
        per_context[name] = context_accuracy(right, by_context)
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
                  contexts, training, coverage, per_context)
