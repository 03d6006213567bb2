"""Baselines every report compares the model against, fit on the same training split:

  * majority:   the class with the most training samples, for every context;
  * exact:      lookup table keyed by the whole context (all its frames); a context
                not in the table gets the majority class;
  * site:       lookup table keyed by the allocation site: the first frame of the
                context (the dataset job already stripped the allocator, its
                wrappers and the C++ standard library from the top), fallback majority;
                in contexts keyed on size (core/context.py `size_feature`) the size
                frame and the site: the table is given what the model is.

A table entry's class is the sample-weighted majority label of the training
contexts with that key (ties: the smaller class index, so results are deterministic).
"""

from __future__ import annotations

import collections

import numpy as np

from core import context

BASELINES = ("majority", "exact", "site")


def _majority(labels, weights) -> int:
    totals = collections.Counter()
    for y, w in zip(labels, weights):
        totals[int(y)] += float(w)
    if not totals:
        raise ValueError("baseline: no training contexts")
    return min(totals, key=lambda c: (-totals[c], c))


def majority_class(labels, weights) -> int:
    """The training set's sample-weighted majority class (the tables' fallback)."""
    return _majority(labels, weights)


def exact_key(frames) -> tuple:
    return tuple(frames)


def site_key(frames) -> tuple | None:
    if not len(frames):
        return None
    return tuple(frames[:2]) if context.is_size_frame(frames[0]) else (frames[0],)


def votes_by(key, frames, labels, weights) -> dict:
    """{key(frames): Counter {class: sample weight}} over the training contexts."""
    votes = collections.defaultdict(collections.Counter)
    for f, y, w in zip(frames, labels, weights):
        votes[key(f)][int(y)] += float(w)
    return votes


class LookupTable:
    """key(frames) -> weighted-majority class, with a fallback class."""

    def __init__(self, key, frames, labels, weights, fallback: int):
        self._key = key
        votes = votes_by(key, frames, labels, weights)
        self.table = {k: min(c, key=lambda cls: (-c[cls], cls)) for k, c in votes.items()}
        self.fallback = fallback

    def predict(self, frames) -> tuple[np.ndarray, np.ndarray]:
        """-> (classes, hit mask)."""
        keys = [self._key(f) for f in frames]
        hit = np.array([k in self.table for k in keys], bool)
        pred = np.array([self.table.get(k, self.fallback) for k in keys], np.int32)
        return pred, hit


def fit_baselines(frames, labels, weights) -> dict:
    """name -> predict(frames) -> classes."""
    majority = _majority(labels, weights)
    exact = LookupTable(exact_key, frames, labels, weights, majority)
    site = LookupTable(site_key, frames, labels, weights, majority)
    return {"majority": lambda fs: np.full(len(fs), majority, np.int32),
            "exact": lambda fs: exact.predict(fs)[0],
            "site": lambda fs: site.predict(fs)[0]}


def seen_mask(train_frames, frames) -> np.ndarray:
    """Which contexts' exact stacks occur in the training contexts."""
    seen = {exact_key(f) for f in train_frames}
    return np.array([exact_key(f) in seen for f in frames], bool)
