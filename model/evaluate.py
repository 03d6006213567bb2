"""`lifetime evaluate`: a model against the baselines on one or more datasets.

Which contexts are scored (`split`):
  * "auto" (default): a dataset the model was trained on is scored on its eval
    split only (held-out contexts); any other dataset (another version) in full;
  * "train", "eval", "all": that split of every dataset.

Baselines are fit on the model's training datasets (their train splits, as the
model was), so the model is always compared on equal terms. Every figure is also
given restricted to contexts whose exact stack does not occur in the training data
(the result is model/compare.py's comparison, plus what was scored).  `lifetime
evaluate` adds TCMalloc's removed online lifetime rule beside the tables, replayed over
the datasets' profiles (model/tcmalloc_rule.py; `tcmalloc_rule` says how, or why it
was skipped).
"""

from __future__ import annotations

import os

import numpy as np

from model import io, tcmalloc_rule
from model.compare import compare
from model.data import DatasetError, Examples, check_compatible, load_dataset
from model.train import predict_classes

SPLIT_CHOICES = ("auto", "train", "eval", "all")


def training_data(config: dict, train_dirs: list[str] | None):
    """The model's training datasets and examples, for baselines and seen/unseen: the
    train splits, plus the eval splits when the model was refit on them."""
    dirs = train_dirs or [d["path"] for d in config["training_datasets"]]
    missing = [d for d in dirs if not os.path.isdir(d)]
    if missing:
        raise DatasetError(f"the model's training dataset {missing[0]} is gone; the baselines "
                           "need it: pass the training datasets with --train DIR")
    datasets = [load_dataset(d) for d in dirs]
    splits = ("train", "eval") if config["hyperparameters"].get("refit") else ("train",)
    return datasets, Examples.concat([d.splits[s] for d in datasets for s in splits])


def select_split(dataset, split: str, training_paths: set[str]) -> tuple[str, Examples]:
    if split == "auto":
        split = "eval" if dataset.path in training_paths else "all"
    ex = dataset.all() if split == "all" else dataset.splits[split]
    return split, ex


def evaluate(model_dir: str, dataset_dirs: list[str], split: str = "auto",
             train_dirs: list[str] | None = None, tcmalloc_rule_rows: bool = False) -> dict:
    """model/compare.py's comparison on `dataset_dirs`; with `tcmalloc_rule_rows` (what
    `lifetime evaluate` and benchmarks/cross_version.py ask for) TCMalloc's rule too,
    replayed over the datasets' profiles (skipped, saying why, when they are gone)."""
    md = io.read_model_dir(model_dir)
    model, config = md.load_keras(), md.config
    datasets = [load_dataset(d) for d in dataset_dirs]
    check_compatible(datasets, vocab=md.vocab, label_scheme=config["label_scheme"],
                     what="model", context=md.context)
    train_sets, train_ex = training_data(config, train_dirs)
    training_paths = {d.path for d in train_sets}
    chosen = [select_split(d, split, training_paths) for d in datasets]
    test = Examples.concat([ex for _, ex in chosen])
    if not len(test):
        raise DatasetError(f"datasets {', '.join(dataset_dirs)}: no contexts in the "
                           f"{'/'.join(sorted({s for s, _ in chosen}))} split")
    rule, rule_split = ((tcmalloc_rule.for_comparison(datasets, test, train_ex,
                                                      config["label_scheme"]))
                        if tcmalloc_rule_rows else (None, None))
    result = compare(predict_classes(model, test, md.hparams, md.backoff), train_ex, test,
                     md.class_names, split=rule_split)
    if rule is not None:
        result["tcmalloc_rule"] = tcmalloc_rule.with_model_ahead(rule, result)
    result.update({"model_dir": os.path.abspath(model_dir), "class_names": config["class_names"],
                   "datasets": [{"path": d.path, "split": s, "contexts": len(ex),
                                 "samples": float(np.sum(ex.weight))}
                                for d, (s, ex) in zip(datasets, chosen)],
                   "baseline_training_datasets": sorted(training_paths)})
    return result
