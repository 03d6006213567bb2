"""The model's back-off (issue 33 item 6): where the model is unsure, the site table.

Where the model's top probability is below `below` (a hyperparameter, HParams.backoff_below,
chosen on selection data), the served class is the class of the allocation site in the
training data (its sample-weighted majority, ties to the smaller class), or the training
data's majority class for a site training never saw.  Where the table is confident, a site
whose training weight is at least `pure` (HParams.backoff_pure; 0: never) in its class,
its class is served whatever the model says.  Otherwise the model is served as is.

The site is its frames' text: the context's first frame (with a size frame, the size frame
and the next), as the site table of model/baselines.py keys it, hashed as the exported
library hashes bytes (core/byte_hash.py; two frames: the hash of their two hashes).  So
one table serves the same way offline (model/train.py `predict_classes`), in the export
(export/codegen.py writes it; export/cc/lifetime_model.cc applies it after the model runs
on a context's frames) and so in every host of the export: the allocator, the sampler's
online predictions and the simulator.  (Keyed before on the ids the model reads of the
site, it merged frames that tokenize alike: `_sdsnewlen` served `sdsnewlen`'s class.)

Fitted at training on the split the model was fitted on; stored in config.json `backoff`.
"""

from __future__ import annotations

import collections
import dataclasses

import numpy as np

from core import byte_hash

# config.json's `backoff.key`: what a site's key is (a table keyed otherwise is refused).
KEY = ("core/byte_hash.py of the site frame's UTF-8 text; with two site slots, of its two "
       "frames' hashes, 8 bytes each, little-endian")


@dataclasses.dataclass(frozen=True)
class Backoff:
    below: float            # back off where the top probability is < this (0: never)
    fallback: int           # the class of a site not in the table
    site_slots: int         # leading frame slots that make the key (1, or 2 with a size frame)
    keys: np.ndarray        # uint64, sorted
    classes: np.ndarray     # int32, one per key
    purity: np.ndarray      # float32, one per key: the share of the site's weight in its class
    pure: float = 0.0       # a site at least this pure is served its class (0: never)

    def site_keys(self, frames) -> np.ndarray:
        return site_keys(frames, self.site_slots)

    def lookup(self, frames) -> tuple[np.ndarray, np.ndarray]:
        """(class, purity) of each context's site (FRAMES: one sequence of frame strings
        per context); (fallback, 0) for a site not in the table."""
        keys = self.site_keys(frames)
        at = np.searchsorted(self.keys, keys)
        found = at < len(self.keys)
        found[found] = self.keys[at[found]] == keys[found]
        cls = np.full(len(keys), self.fallback, np.int32)
        purity = np.zeros(len(keys), np.float32)
        cls[found] = self.classes[at[found]]
        purity[found] = self.purity[at[found]]
        return cls, purity

    def site_classes(self, frames) -> np.ndarray:
        """The table's class for each context (the fallback for a site it lacks)."""
        return self.lookup(frames)[0]

    def apply(self, probs: np.ndarray, frames) -> np.ndarray:
        """The served classes: argmax, or the site's class where max < below or the site
        is at least `pure` pure (float32 compares, as the C++ does)."""
        probs = np.asarray(probs, np.float32)
        cls = np.argmax(probs, axis=-1).astype(np.int32)
        if not len(cls) or (self.below <= 0 and self.pure <= 0):
            return cls
        site, purity = self.lookup(frames)
        use = probs.max(axis=-1) < np.float32(self.below)
        if self.pure > 0:
            use |= purity >= np.float32(self.pure)
        cls[use] = site[use]
        return cls

    def to_json(self) -> dict:
        return {"below": self.below, "pure": self.pure, "fallback": self.fallback,
                "site_slots": self.site_slots, "key": KEY, "sites": len(self.keys),
                "keys": [f"{int(k):016x}" for k in self.keys],
                "classes": [int(c) for c in self.classes],
                "purity": [round(float(p), 6) for p in self.purity]}

    @classmethod
    def from_json(cls, d: dict) -> "Backoff":
        if d.get("key") != KEY:
            raise ValueError("its sites are keyed by the token ids the model reads (a model "
                             "trained before they were keyed by frame text): train it again")
        keys = np.array([int(k, 16) for k in d["keys"]], np.uint64)
        classes = np.array(d["classes"], np.int32)
        purity = np.array(d["purity"], np.float32)
        if len(keys) != len(classes) or len(keys) != len(purity) or (
                len(keys) > 1 and not np.all(keys[1:] > keys[:-1])):
            raise ValueError("keys, classes and purity differ in length, or keys unsorted")
        # (a table written before the key was frame text also recorded the model's
        # tokens_per_frame; it is refused above, by its key)
        return cls(float(d["below"]), int(d["fallback"]), int(d["site_slots"]),
                   keys, classes, purity, float(d["pure"]))


def site_key(frames, site_slots: int) -> int:
    """One context's key: the hash of its first frame's UTF-8 text, or with two site slots
    (a size frame first) the hash of its first two frames' hashes, 8 bytes each, little-
    endian; 0 for a context with no frame."""
    hashes = [byte_hash.hash_bytes(f.encode("utf-8", "surrogateescape")) for f in frames[:site_slots]]
    if len(hashes) < 2:
        return hashes[0] if hashes else 0
    return byte_hash.hash_bytes(b"".join(h.to_bytes(8, "little") for h in hashes))


def site_keys(frames, site_slots: int) -> np.ndarray:
    """uint64 key of each context (FRAMES: one sequence of frame strings per context)."""
    return np.array([site_key(f, site_slots) for f in frames], np.uint64)


def fit(frames, labels, weights, below: float, fallback: int, site_slots: int,
        pure: float = 0.0) -> Backoff:
    """The table over these training contexts (FRAMES: one sequence of frame strings per
    context): each site's sample-weighted majority class and the share of its weight in
    that class."""
    votes: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
    for k, y, w in zip(site_keys(frames, site_slots).tolist(), labels, weights):
        votes[k][int(y)] += float(w)
    keys = sorted(votes)
    classes = [min(votes[k], key=lambda c: (-votes[k][c], c)) for k in keys]
    purity = [votes[k][c] / sum(votes[k].values()) if sum(votes[k].values()) > 0 else 0.0
              for k, c in zip(keys, classes)]
    return Backoff(float(below), int(fallback), site_slots,
                   np.array(keys, np.uint64), np.array(classes, np.int32),
                   np.array(purity, np.float32), float(pure))
