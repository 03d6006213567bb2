"""Classification metrics, each reported two ways (llama-paper §4.2, Fig. 9):

  * weighted: every context counts by its sample count (what the allocator sees:
    the share of sampled allocations predicted right);
  * unweighted: every context counts once (how well the model covers contexts).

Classes are ordered by lifetime (inf last), so "off by one" means the predicted
class index is within 1 of the true one and "under-prediction" means predicted <
true: an object placed with shorter-lived ones, which pins their huge page; worse
for an allocator than over-prediction (llama-paper §2.3, §3.4).
"""

from __future__ import annotations

import numpy as np


def confusion_matrix(y_true, y_pred, num_classes: int, weights=None) -> np.ndarray:
    """[true class, predicted class] -> total weight (or count)."""
    y_true, y_pred = np.asarray(y_true, int), np.asarray(y_pred, int)
    w = np.ones(len(y_true)) if weights is None else np.asarray(weights, float)
    m = np.zeros((num_classes, num_classes))
    np.add.at(m, (y_true, y_pred), w)
    return m


def _ratio(num: float, den: float):
    return float(num / den) if den > 0 else None


def _one_way(y_true, y_pred, w, num_classes: int, class_names) -> dict:
    total = float(w.sum())
    diff = y_pred - y_true
    m = confusion_matrix(y_true, y_pred, num_classes, w)
    per_class = {}
    for c in range(num_classes):
        per_class[class_names[c]] = {"precision": _ratio(m[c, c], m[:, c].sum()),
                                     "recall": _ratio(m[c, c], m[c, :].sum()),
                                     "support": float(m[c, :].sum())}
    return {"exact": _ratio(w[diff == 0].sum(), total),
            "off_by_one": _ratio(w[np.abs(diff) <= 1].sum(), total),
            "under_prediction": _ratio(w[diff < 0].sum(), total),
            "over_prediction": _ratio(w[diff > 0].sum(), total),
            "per_class": per_class,
            "confusion": m.tolist()}


def classification_metrics(y_true, y_pred, weights, class_names) -> dict:
    """All metrics, weighted by `weights` (sample counts) and unweighted.

    Ratios are None when undefined (no contexts, or a class never predicted)."""
    y_true, y_pred = np.asarray(y_true, int), np.asarray(y_pred, int)
    w = np.asarray(weights, float)
    if not (len(y_true) == len(y_pred) == len(w)):
        raise ValueError("y_true, y_pred and weights differ in length")
    n = len(class_names)
    return {"contexts": int(len(y_true)), "samples": float(w.sum()),
            "weighted": _one_way(y_true, y_pred, w, n, class_names),
            "unweighted": _one_way(y_true, y_pred, np.ones(len(y_true)), n, class_names)}


def headline(m: dict) -> dict:
    """The figures a summary table shows, from `classification_metrics`."""
    return {f"{way}_{k}": m[way][k] for way in ("weighted", "unweighted")
            for k in ("exact", "off_by_one", "under_prediction")}


def split_classification_metrics(y_true, given, class_names) -> dict:
    """`classification_metrics` of a predictor that may give one context's samples
    different classes (an online rule, model/tcmalloc_rule.py): given[i] is context i's
    {predicted class: samples}.  Weighted: every sample counts where its prediction put
    it; unweighted: every context counts once, split between the classes its samples
    got in their proportions.  Contexts given no samples are left out."""
    rows_true, rows_pred, w_samples, w_context = [], [], [], []
    contexts = 0
    for y, g in zip(np.asarray(y_true, int).tolist(), given):
        total = float(sum(g.values()))
        if total <= 0:
            continue
        contexts += 1
        for c, n in sorted(g.items()):
            rows_true.append(y)
            rows_pred.append(int(c))
            w_samples.append(float(n))
            w_context.append(float(n) / total)
    t, p = np.asarray(rows_true, int), np.asarray(rows_pred, int)
    ws, wc = np.asarray(w_samples, float), np.asarray(w_context, float)
    n = len(class_names)
    return {"contexts": contexts, "samples": float(ws.sum()),
            "weighted": _one_way(t, p, ws, n, class_names),
            "unweighted": _one_way(t, p, wc, n, class_names)}
