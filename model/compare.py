"""Model vs baselines: the one comparison `lifetime train` (metrics.json "eval"),
`lifetime evaluate` and `lifetime report` compute and write.

    {"overall":      {predictor: classification_metrics},   every test context
     "unseen":       {predictor: classification_metrics},   test contexts whose exact
                                                             stack is not in the training data
     "unseen_share": {"contexts": share, "samples": share},
     "against_majority": {scope: against_majority(...)}}      where the weight went

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
    site_votes = baselines.votes_by(baselines.site_key, train.frames, train.label, train.weight)
    out["against_majority"] = {
        scope: against_majority(predicted["model"][mask], predicted["baseline_majority"][mask],
                                site_votes, test.select(mask), class_names)
        for scope, mask in (("overall", np.ones(len(test), bool)), ("unseen", unseen))}
    return out


def against_majority(served, majority, site_votes, test, class_names, top: int = 5) -> dict:
    """Where the served classes lose the weight the majority class (every table's fallback)
    wins, and where they win what it loses (issue 33: never below the fallback on unseen
    weight): shares of TEST's weight (and of its contexts, unweighted), and the TOP
    contexts that lose the most weight, each with its site's classes in the training data
    (SITE_VOTES: baselines.votes_by(site_key, ...) over it, what the model and the site
    table learned there; None: a site training never saw)."""
    w = np.asarray(test.weight, np.float64)
    total = float(w.sum())
    if not len(test) or total <= 0:
        return {"lost": 0.0, "won": 0.0, "lost_contexts": 0.0, "won_contexts": 0.0,
                "costliest": []}
    served, majority = np.asarray(served), np.asarray(majority)
    lost = (majority == test.label) & (served != test.label)
    won = (served == test.label) & (majority != test.label)
    costliest = []
    for i in sorted(np.flatnonzero(lost), key=lambda i: (-w[i], i))[:top]:
        votes = site_votes.get(baselines.site_key(test.frames[i]))
        site_total = sum(votes.values()) if votes else 0.0
        costliest.append({
            "frames": list(test.frames[i][:4]), "share": float(w[i] / total),
            "label": class_names[int(test.label[i])], "served": class_names[int(served[i])],
            "site_in_training": None if votes is None else {
                class_names[c]: float(v / max(site_total, 1e-30))
                for c, v in sorted(votes.items()) if v}})
    return {"lost": float(w[lost].sum() / total), "won": float(w[won].sum() / total),
            "lost_contexts": float(lost.mean()), "won_contexts": float(won.mean()),
            "costliest": costliest}


def display_rows(scored: dict) -> dict:
    """{predictor: metrics} with the names tables show ("baseline: exact")."""
    return {name.replace("baseline_", "baseline: ", 1): m for name, m in scored.items()}


def costliest_table(rows: list) -> list[str]:
    """Markdown lines: `against_majority`'s costliest contexts."""
    lines = ["| share of the weight | class | served | its site in training | context |",
             "|---|---|---|---|---|"]
    for r in rows:
        site = ("not in training" if r["site_in_training"] is None else ", ".join(
            f"{c} {100 * v:.0f}%" for c, v in sorted(r["site_in_training"].items(),
                                                     key=lambda kv: -kv[1])))
        lines.append(f"| {100 * r['share']:.1f}% | {r['label']} | {r['served']} | {site} | "
                     f"`{' <- '.join(r['frames'])}` |")
    return lines
