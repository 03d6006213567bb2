"""`lifetime evaluate-online`: predictions made inside the sampler against the lifetimes
that actually happened (profiles taken with `lifetime profile --model DIR`).

Contexts and labels are made exactly as `lifetime build-dataset` makes them, with the
model's own context definition (pipeline/context.py), so the figures compare with the
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

import collections

import numpy as np

from model.metrics import classification_metrics, headline
from pipeline import context as context_def
from pipeline import lifetimes, symbolize
from pipeline.contexts import ContextStats
from pipeline.dataset import _lifetime
from profiler_proto import ProfileFormatError, read_profile
from lifetime.errors import LifetimeError


class OnlineEvaluationError(LifetimeError):
    """Profiles that cannot be evaluated, with the file and the reason."""


def _percentile(values, q):
    return float(np.percentile(values, q)) if len(values) else None


def model_context(path: str) -> context_def.ContextDefinition:
    """The context definition of a model directory or of a `lifetime export` directory."""
    import os

    for name in ("config.json", "export_manifest.json"):
        file = os.path.join(path, name)
        if os.path.isfile(file):
            try:
                return context_def.ContextDefinition.load(file)
            except context_def.ContextDefinitionError as e:
                raise OnlineEvaluationError(str(e)) from e
    raise OnlineEvaluationError(f"{path}: neither a model directory (config.json) nor an "
                                "export directory (export_manifest.json)")


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
    ns_hit, ns_miss = [], []
    totals = collections.Counter()
    models = set()
    for path in paths:
        try:
            profile = read_profile(path)
        except ProfileFormatError as e:
            raise OnlineEvaluationError(str(e)) from e
        if not profile.header.model_id:
            raise OnlineEvaluationError(
                f"{path}: no online predictions (profile it with `lifetime profile --model DIR`)")
        models.add(profile.header.model_id)
        if profile.trailer is not None and profile.trailer.HasField("prediction"):
            p = profile.trailer.prediction
            totals.update(predictions=p.predictions, cache_hits=p.cache_hits,
                          cache_misses=p.cache_misses, model_runs=p.model_runs,
                          revalidations=p.revalidations, disagreements=p.disagreements,
                          failures=p.failures, total_ns=p.total_ns)
        sym = context_def.make_symbolizer(profile.mappings, cache=cache)
        keys = {}
        for stack_id, stack in profile.stacks.items():
            keys[stack_id] = (profile.header.program, profile.header.version_label,
                              definition.frames(context_def.machinery_free(sym,
                                                                           stack.addresses)))
        for s in profile.samples:
            key = keys[s.stack_id]
            stats.setdefault(key, ContextStats()).add(_lifetime(s, scheme.clock), s.censored,
                                                      s.weight, s.size)
            if s.predicted:
                predicted[key][s.predicted_class] += 1
                per_sample.append((key, s.predicted_class))
                (ns_hit if s.prediction_cache_hit else ns_miss).append(s.prediction_ns)
            else:
                totals["samples_without_prediction"] += 1
    if len(models) > 1:
        raise OnlineEvaluationError(f"profiles were taken with {len(models)} different models")
    if not per_sample:
        raise OnlineEvaluationError("the profiles hold no predicted samples")
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
            "mean": float(np.mean(all_ns)), "p50": _percentile(all_ns, 50),
            "p99": _percentile(all_ns, 99),
            "hit_p50": _percentile(ns_hit, 50), "miss_p50": _percentile(ns_miss, 50)},
        "label_scheme": scheme.to_json(),
    }
