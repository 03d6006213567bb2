"""`lifetime evaluate-online`: predictions made inside the sampler against the lifetimes
that actually happened (profiles taken with `lifetime profile --model DIR`).

Contexts and labels are made exactly as `lifetime build-dataset` makes them, with the
model's own context definition (core/context.py), so the figures compare with the
offline report's.  Two views:

  * per context, like the offline metrics: a context's prediction is the most common
    class its samples were given (ties: the longer-lived), weighted by sample count
    and unweighted;
  * per sample: each sampled allocation's own prediction against its context's label,
    which also charges what the cache did (aliasing, stale entries) to the model.

The cost is what the sampler measured around each prediction (cache lookup included),
per sampled allocation, split by cache hits and misses.
"""

from __future__ import annotations

import array
import collections
import os

import numpy as np

from core import export_dir
from model import io
from model.metrics import classification_metrics, headline
from core import context as context_def
from core import lifetimes, symbolize
from pipeline import context_stats
from pipeline.context_stats import ContextStats
from profile_format import ProfileReader
from profile_format.container import dead_letter
from core.errors import LifetimeError




class OnlineEvaluationError(LifetimeError):
    """Profiles that cannot be evaluated, with the file and the reason."""


def _percentile(values, q):
    return float(np.percentile(values, q)) if len(values) else None


def model_context(path: str) -> context_def.ContextDefinition:
    """The context definition of a model directory (every `read_model_dir` check, a
    ModelDirError naming the file otherwise) or of a `lifetime export` directory."""
    # lexists, not isfile: a config.json that is a fifo is this kind of directory, and
    # its reader says what is wrong with it
    if os.path.lexists(os.path.join(path, io.CONFIG_FILE)):
        return io.read_model_dir(path).context
    if not export_dir.is_export(path):
        raise OnlineEvaluationError(f"{path}: neither a model directory ({io.CONFIG_FILE}) "
                                    f"nor an export directory ({export_dir.MANIFEST})")
    try:
        return export_dir.read(path, error=OnlineEvaluationError).context()
    except context_def.ContextDefinitionError as e:
        raise OnlineEvaluationError(str(e)) from e


class _Predictions:
    """Taps a reader's samples on their way to the aggregation (context_stats.stack_stats):
    the class predicted for each, per stack, and what each prediction cost."""

    def __init__(self, reader, size_frames: bool = False):
        self._reader = reader
        self._size_frames = size_frames  # classes per (stack, size frame): size_feature
        self.classes: dict[int, array.array] = collections.defaultdict(lambda: array.array("Q"))
        self.ns_hit, self.ns_miss = array.array("Q"), array.array("Q")
        self.without = 0

    def samples(self):
        for s in self._reader.samples():
            if not self._reader.header.model_id:
                return  # not used: no need to read on
            if s.predicted:
                key = ((s.stack_id, context_def.size_frame(s.size)) if self._size_frames
                       else s.stack_id)
                self.classes[key].append(s.predicted_class)
                (self.ns_hit if s.prediction_cache_hit else self.ns_miss).append(s.prediction_ns)
            else:
                self.without += 1
            yield s


def _read_file(path, definition, scheme, cache, stats, predicted, per_sample, ns_hit,
               ns_miss, totals, models, problems, dropped):
    """Streams one profile into the running totals; True, or why the file is skipped
    ("category: detail").  Samples are aggregated per stack as they arrive; contexts
    are made once the file's mappings are all known, as the dataset job makes them."""
    reader = ProfileReader(path)
    tap = _Predictions(reader, definition.size_feature)
    by_stack = context_stats.stack_stats(tap.samples(), scheme.clock)
    if reader.header is None:
        return (reader.problems[0].reason if reader.problems
                else "empty: the file holds no records")
    if not reader.header.model_id:
        return ("no_predictions: no online predictions (profile it with "
                "`lifetime profile --model DIR`)")
    problems += [dead_letter(path, e.reason) for e in reader.problems]
    dropped.update(reader.dropped)
    if not by_stack:
        return "empty: the profile holds no usable samples"
    sym = context_def.make_symbolizer(reader.mappings, cache=cache)
    header = reader.header
    models.add(header.model_id)
    if reader.trailer is not None and reader.trailer.HasField("prediction"):
        p = reader.trailer.prediction
        totals.update(predictions=p.predictions, cache_hits=p.cache_hits,
                      cache_misses=p.cache_misses, model_runs=p.model_runs,
                      revalidations=p.revalidations, disagreements=p.disagreements,
                      failures=p.failures, total_ns=p.total_ns)
    totals["samples_without_prediction"] += tap.without
    site_of = {stack_id: definition.site_frames(
        context_def.machinery_free(sym, reader.stacks[stack_id].addresses))
        for stack_id in sorted(by_stack)}
    if definition.size_feature:  # contexts per (stack, size frame), as the dataset job cuts
        per_key = {(sid, frame): part for sid, st in by_stack.items()
                   for frame, part in st.split_by(context_def.size_frame).items()}
        key_of = {k: (header.program, header.version_label, (k[1],) + site_of[k[0]])
                  for k in sorted(per_key)}
    else:
        per_key = by_stack
        key_of = {sid: (header.program, header.version_label, frames)
                  for sid, frames in site_of.items()}
    for key, st in context_stats.merge_by(per_key, key_of.__getitem__).items():
        if key in stats:
            stats[key].merge(st)
        else:
            stats[key] = st
    for k, key in key_of.items():
        for c in tap.classes.get(k, ()):
            predicted[key][c] += 1
            per_sample.append((key, c))
    ns_hit.extend(tap.ns_hit)
    ns_miss.extend(tap.ns_miss)
    return True


def evaluate_online(paths: list[str], definition: context_def.ContextDefinition,
                    scheme: lifetimes.LabelScheme | None = None, *,
                    debug_dirs=symbolize.DEFAULT_DEBUG_DIRS, sysroot: str | None = None) -> dict:
    scheme = scheme or lifetimes.LabelScheme()
    if not paths:
        raise OnlineEvaluationError("no profile files given")
    cache = symbolize.ModuleCache(debug_dirs=debug_dirs, sysroot=sysroot)
    stats: dict[tuple, ContextStats] = {}
    predicted: dict[tuple, collections.Counter] = collections.defaultdict(collections.Counter)
    per_sample = []  # (context key, predicted class)
    ns_hit, ns_miss = array.array("Q"), array.array("Q")
    totals = collections.Counter()
    models = set()
    skipped, problems = [], []  # {"file", "category", "reason"}
    dropped = collections.Counter()
    for path in paths:
        used = _read_file(path, definition, scheme, cache, stats, predicted, per_sample,
                          ns_hit, ns_miss, totals, models, problems, dropped)
        if used is not True:
            skipped.append(dead_letter(path, used))
    if len(models) > 1:
        raise OnlineEvaluationError(f"profiles were taken with {len(models)} different models")
    if not per_sample:
        raise OnlineEvaluationError(
            "the profiles hold no predicted samples"
            + "".join(f"; {d['file']}: {d['reason']}" for d in skipped[:5])
            + (f"; ... ({len(skipped)} files skipped)" if len(skipped) > 5 else ""))
    labels = {key: scheme.label(st.t95()) for key, st in stats.items()}
    names = scheme.class_names
    ctx_keys = sorted(predicted)
    ctx_pred = [max(predicted[k].items(), key=lambda kv: (kv[1], kv[0]))[0] for k in ctx_keys]
    ctx_true = [labels[k] for k in ctx_keys]
    ctx_weight = [stats[k].samples for k in ctx_keys]
    by_context = classification_metrics(ctx_true, ctx_pred, ctx_weight, names)
    by_sample = classification_metrics([labels[k] for k, _ in per_sample],
                                       [c for _, c in per_sample], [1.0] * len(per_sample), names)
    all_ns = ns_hit + ns_miss
    lookups = totals["cache_hits"] + totals["cache_misses"]
    return {
        "profiles": len(paths),
        "profiles_used": len(paths) - len(skipped),
        # Files not used at all (unreadable, no header, no samples, no predictions) and
        # problems of the files used in part (their valid samples are counted).
        "skipped_files": skipped,
        "problems": problems,
        "dropped_samples": dict(sorted(dropped.items())),
        "model_id": models.pop(),
        "contexts": len(ctx_keys),
        "predicted_samples": len(per_sample),
        "samples_without_prediction": totals["samples_without_prediction"],
        "headline": {**headline(by_context),
                     "per_sample_exact": by_sample["weighted"]["exact"],
                     "per_sample_off_by_one": by_sample["weighted"]["off_by_one"],
                     "per_sample_under_prediction": by_sample["weighted"]["under_prediction"]},
        "by_context": by_context,
        "by_sample": by_sample,
        "cache": {"hit_rate": totals["cache_hits"] / lookups if lookups else None,
                  **{k: totals[k] for k in ("cache_hits", "cache_misses", "model_runs",
                                            "revalidations", "disagreements", "failures")}},
        "cost_ns_per_sampled_allocation": {
            "mean": float(np.mean(all_ns)) if len(all_ns) else None,
            "p50": _percentile(all_ns, 50), "p99": _percentile(all_ns, 99),
            "hit_p50": _percentile(ns_hit, 50), "miss_p50": _percentile(ns_miss, 50)},
        "label_scheme": scheme.to_json(),
    }
