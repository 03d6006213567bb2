"""Model vs baselines: the one comparison `lifetime train` (metrics.json "eval"),
`lifetime evaluate` and `lifetime report` compute and write.

    {"overall":      {predictor: classification_metrics},   every test context
     "unseen":       {predictor: classification_metrics},   test contexts whose exact
                                                             stack is not in the training data
     "unseen_share": {"contexts": share, "samples": share}}

Predictors are "model" and "baseline_<name>" for each baseline (model/baselines.py),
fit on the same training contexts the model was trained on, so the model is always
compared on equal terms.  `lifetime report` adds the online TCMalloc rule's replay over
the test profiles (model/tcmalloc_rule.py) as `split` predictors: per context the
classes its samples were given, scored by `split_classification_metrics`.
"""

from __future__ import annotations

import numpy as np

from model import baselines
from model.metrics import classification_metrics, split_classification_metrics

PREDICTORS = ("model", *(f"baseline_{name}" for name in baselines.BASELINES))
SCOPES = ("overall", "unseen")


def compare(model_classes: np.ndarray, train, test, class_names, split: dict | None = None) -> dict:
    """The model's predicted classes for `test` and the baselines fit on `train`
    (both model.data.Examples), scored on `test` overall and on its unseen stacks;
    `split`: {name: one {class: samples} per test context} (predictors whose samples of
    one context may get different classes), scored beside them."""
    if not len(test):
        raise ValueError("compare: no test contexts")
    fitted = baselines.fit_baselines(train.frames, train.label, train.weight)
    predicted = {"model": np.asarray(model_classes),
                 **{f"baseline_{name}": fit(test.frames) for name, fit in fitted.items()}}
    unseen = ~baselines.seen_mask(train.frames, test.frames)
    out = {scope: {name: classification_metrics(test.label[mask], pred[mask],
                                                test.weight[mask], class_names)
                   for name, pred in predicted.items()}
           for scope, mask in (("overall", slice(None)), ("unseen", unseen))}
    for name, given in (split or {}).items():
        for scope, mask in (("overall", np.ones(len(test), bool)), ("unseen", unseen)):
            out[scope][name] = split_classification_metrics(
                test.label[mask], [g for g, m in zip(given, mask) if m], class_names)
    out["unseen_share"] = {"contexts": float(unseen.mean()),
                           "samples": float(test.weight[unseen].sum() / test.weight.sum())}
    return out


def display_rows(scored: dict) -> dict:
    """{predictor: metrics} with the names tables show ("baseline: exact")."""
    return {name.replace("baseline_", "baseline: ", 1): m for name, m in scored.items()}
