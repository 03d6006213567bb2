"""A model that learns (issue 33, item 4): trained on real Redis versions, it beats every
lookup table on a version it was not trained on, by a margin stated here.  (Not a held-out
figure by core/version_roles.json: 6.2.14 is Redis's test version, but the default
hyperparameters were chosen on it by benchmarks/defaults_sweep.py, so `lifetime report`
calls it "seen (selection)"; the test checks learning, not generalization.)

Data: tests/data/redis_cross_version (its README: how it was made). Real sampled profiles
of Redis 5.0.6 + 6.0.16 (training: two runs each) and 6.2.14 (held out: one run, cut
`--like` the training dataset; 86% of its 128 contexts and 89% of its samples unseen in
training), split by version as benchmarks/cross_version.py splits. The model is trained
exactly as `lifetime train --refit` trains one (model/train.py, the default
hyperparameters: early stopping on the training dataset's own eval split, then a refit on
train + eval), seed SEED, and scored on all of 6.2.14 by model/evaluate.py against every
table model/baselines.py fits (majority, exact stack, allocation site: BASELINES, whatever
it holds), fit on the same training contexts. Error = 1 - exact-class accuracy; the test
asserts

    model error <= MARGIN[weighting] x the best table's error

for both weightings (weighted: each context counts by its samples, one per 64 KiB
allocated, as every report of the project weights; unweighted: each context once), on
all of 6.2.14 and on its contexts unseen in training.

Measured on this 2-core machine (2026-11-27), seeds 0-9; error ratio model / best table
(the site table, 82.1% weighted and 57.0% unweighted on all contexts, 80.6% / 57.3% on
unseen ones; exact 65.5% / 18.8%, majority 64.2% / 10.9%):

    seed  all: weighted model, ratio  unweighted model, ratio  unseen: weighted, unweighted
    0      96.4%  0.203                 85.9%  0.327              0.211  0.383
    1      96.4%  0.202                 87.5%  0.291              0.210  0.340
    2      96.2%  0.215                 85.2%  0.345              0.223  0.404
    3-9    95.9-96.4%  0.202-0.232      82.8-88.3%  0.273-0.400   0.210-0.241  0.319-0.447

Seed 0 gives the same four ratios (three digits) with oneDNN off
(TF_ENABLE_ONEDNN_OPTS=0), on one core (taskset) and with both: training is
deterministic here, and the margins cover what another machine could change.

MARGIN: weighted 0.4 (worst seed 0.241), unweighted 0.6 (worst seed 0.447): 0.15 of
headroom over the worst of ten seeds, for another machine's floating point. Every seed
also meets issue 33's acceptance bar (<= 0.5) on both weightings. Most of the weighted lead
is one context: 6.2.14's `_sdsnewlen < createStringObject` (11% of its samples, 100 s;
`_sdsnewlen` is new under `sdsnewlen` in 6.2, so the site table answers its caller's 1 s),
which every seed gets right; a model that missed it would score about 0.8.

A model trained on the same data with its labels shuffled across contexts (the tables fit
on the real labels) fails every assertion: seed 0 weighted 11.8% (ratio 4.93), unweighted
47.7% (ratio 1.22); unseen 4.52 / 1.19.

History: with one run per training version (the first version of this dataset) the
weighted figure was bimodal: the query buffer (`sdsMakeRoomFor < readQueryFromClient`,
17% of 6.2.14's samples, 1 s) was 100 ms in 6.0.16's one run and 1 s in 5.0.6's, and seeds
went either way (weighted ratio 0.42 for six of ten seeds, 0.90-0.92 for three). Two runs
per training version, as the README's Redis cross-version benchmark trains, settle it; that
choice was made after seeing those figures on 6.2.14 (issue 33: a choice made on test
data), though it is the benchmark's existing configuration, not a tuned one.

The model is scored alone (backoff_below and backoff_pure 0): this tests that the network
learns.  Served with the default back-off (model/backoff.py, chosen on selection data),
seeds 0-2 score 96.1-96.2% weighted and 83.6-85.2% unweighted here (the network alone
95.6-96.1% and 81.2-84.4%, measured 2026-11-29).  While the back-off keyed a site by the
ids the model reads, they scored 84.8% / 71.9-72.7%: `_sdsnewlen` tokenizes as `sdsnewlen`
does, that site is of one class (10 ms) in training, and the pure-site rule served 10 ms
on `_sdsnewlen < createStringObject`, where the model is sure (0.95) and right (100 s).

About 12 s on 2 cores (TensorFlow's import, then 11 + 6 epochs over 265 contexts), so it
runs in `make test-fast` too.
"""

from __future__ import annotations

import json
import os

import pytest

from model.baselines import BASELINES
from model.data import load_dataset
from model.hparams import HParams
from model.metrics import headline

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "redis_cross_version")
TRAIN = os.path.join(DATA, "train")
TEST = os.path.join(DATA, "test-6.2.14")
TRAIN_VERSIONS = {"redis-5.0.6", "redis-6.0.16"}
TEST_VERSIONS = {"redis-6.2.14"}
SEED = 0
# model error <= MARGIN × the best table's error (docstring: the figures behind them)
MARGIN = {"weighted": 0.4, "unweighted": 0.6}
TABLES = tuple(f"baseline_{name}" for name in BASELINES)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> str:
    """A model trained on 5.0.6 + 6.0.16 (the network alone)."""
    from model.train import train

    model_dir = str(tmp_path_factory.mktemp("learns") / "model")
    train([TRAIN], model_dir, HParams(refit=True, seed=SEED, backoff_below=0.0, backoff_pure=0.0),
          verbose=0)
    return model_dir


@pytest.fixture(scope="module")
def scored(trained):
    """model/evaluate.py's comparison on all of 6.2.14 of a model trained on the rest."""
    from model.evaluate import evaluate

    return evaluate(trained, [TEST], split="all", train_dirs=[TRAIN])


def _versions(dataset_dir: str) -> set[str]:
    with open(os.path.join(dataset_dir, "manifest.json")) as f:
        return {i["version_label"] for i in json.load(f)["inputs"]}


def test_the_held_out_version_is_held_out():
    """Split by version, cut like the training data, mostly unseen stacks."""
    assert _versions(TRAIN) == TRAIN_VERSIONS and _versions(TEST) == TEST_VERSIONS
    train, test = load_dataset(TRAIN), load_dataset(TEST)
    assert test.context == train.context  # `--like`: same wrappers and depth
    assert test.vocab.tokens == train.vocab.tokens
    seen = {tuple(f) for s in train.splits.values() for f in s.frames}
    frames = test.all().frames
    unseen = sum(tuple(f) not in seen for f in frames)
    assert len(frames) == 128 and unseen / len(frames) > 0.8


@pytest.mark.parametrize("scope", ["overall", "unseen"])
@pytest.mark.parametrize("weighting", ["weighted", "unweighted"])
def test_model_beats_every_table(scored, scope, weighting):
    figures = {name: headline(m)[f"{weighting}_exact"] for name, m in scored[scope].items()}
    assert set(figures) == {"model", *TABLES}  # every table the baselines fit
    error = {name: 1.0 - acc for name, acc in figures.items()}
    best = min(TABLES, key=lambda t: error[t])
    ratio = error["model"] / error[best]
    table = ", ".join(f"{name} {100 * figures[name]:.1f}%" for name in ("model", *TABLES))
    assert ratio <= MARGIN[weighting], (
        f"{scope}, {weighting} exact: model error {ratio:.3f} x the best table's "
        f"({best}), must be <= {MARGIN[weighting]} ({table})")


def test_the_default_back_off_does_not_cost_the_network_here(trained):
    """The same network served with the default back-off (model/backoff.py; its table
    fitted on what the model was fitted on, as `lifetime train` fits it): no weighting
    loses more than a point.  Keyed by the ids the model reads, the pure-site rule served
    `_sdsnewlen` the class of `sdsnewlen` (one class in training) and cost 11 points
    weighted (the docstring)."""
    import numpy as np

    from model import io
    from model.evaluate import training_data
    from model.train import fit_backoff, predict_classes

    md = io.read_model_dir(trained)
    model = md.load_keras()
    _, train_ex = training_data(md.config, [TRAIN])
    test = load_dataset(TEST).all()
    default = HParams()
    hp = md.hparams.replace(backoff_below=default.backoff_below, backoff_pure=default.backoff_pure)
    backoff = fit_backoff(train_ex, hp, md.context)
    alone = predict_classes(model, test, md.hparams)
    served = predict_classes(model, test, md.hparams, backoff)
    assert (served != alone).any()  # the rule does act here
    for name, w in (("weighted", test.weight), ("unweighted", np.ones(len(test)))):
        a, b = (float(((c == test.label) * w).sum() / w.sum()) for c in (alone, served))
        assert b >= a - 0.01, f"{name}: served {100 * b:.1f}% against the network's {100 * a:.1f}%"
