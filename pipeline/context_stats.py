"""Per-context lifetime statistics, combinable in Beam, and the one aggregation of a
profile's samples into them.

A context is (program, version label, symbolized frames).  A profile's samples are
aggregated per stack as they stream in (`stack_stats`, lifetimes on the label clock:
`lifetimes.lifetime_on_clock`), then per context once the stacks are symbolized
(`merge_by`); the dataset job's read step and `lifetime evaluate-online` both do
exactly this.  Each profile file contributes one partial `ContextStats` per context;
`MergeContextStats` merges partials across files, so raw samples never travel
through a shuffle.
"""

from __future__ import annotations

import array
import dataclasses
import hashlib
import math
from typing import Callable, Hashable, Iterable

import apache_beam as beam
import numpy as np

from core import lifetimes


def _lifetimes():
    return array.array("d")


def _flags():
    return array.array("B")


def _sizes():
    return array.array("Q")


@dataclasses.dataclass
class ContextStats:
    """Aggregates of one context's samples, and their observations in compact columns
    (25 bytes a sample: what T95 and characterization need), so a file's samples
    are never held as messages."""

    samples: int = 0
    objects: float = 0.0        # objects represented (sum of the samples' weights)
    sampled_bytes: int = 0
    freed: int = 0
    censored: int = 0
    # Over freed samples, on the label clock.
    min_lifetime: float = math.inf
    max_lifetime: float = 0.0
    sum_lifetime: float = 0.0
    sum_sq_lifetime: float = 0.0
    # Observations, one entry per sample: lifetime or observed age, censored, weight,
    # size (see `observations`).
    obs_lifetime: array.array = dataclasses.field(default_factory=_lifetimes)
    obs_censored: array.array = dataclasses.field(default_factory=_flags)
    obs_weight: array.array = dataclasses.field(default_factory=_lifetimes)
    obs_size: array.array = dataclasses.field(default_factory=_sizes)

    def add(self, lifetime: float, censored: bool, weight: float, size: int) -> None:
        self.samples += 1
        self.objects += weight
        self.sampled_bytes += size
        if censored:
            self.censored += 1
        else:
            self.freed += 1
            self.min_lifetime = min(self.min_lifetime, lifetime)
            self.max_lifetime = max(self.max_lifetime, lifetime)
            self.sum_lifetime += lifetime
            self.sum_sq_lifetime += lifetime * lifetime
        self.obs_lifetime.append(lifetime)
        self.obs_censored.append(1 if censored else 0)
        self.obs_weight.append(weight)
        self.obs_size.append(size)

    @property
    def observations(self) -> list[tuple[float, bool, float, int]]:
        """(lifetime or observed age, censored, weight, size) per sample."""
        return list(zip(self.obs_lifetime, map(bool, self.obs_censored), self.obs_weight,
                        self.obs_size))

    def merge(self, other: "ContextStats") -> "ContextStats":
        self.samples += other.samples
        self.objects += other.objects
        self.sampled_bytes += other.sampled_bytes
        self.freed += other.freed
        self.censored += other.censored
        self.min_lifetime = min(self.min_lifetime, other.min_lifetime)
        self.max_lifetime = max(self.max_lifetime, other.max_lifetime)
        self.sum_lifetime += other.sum_lifetime
        self.sum_sq_lifetime += other.sum_sq_lifetime
        self.obs_lifetime.extend(other.obs_lifetime)
        self.obs_censored.extend(other.obs_censored)
        self.obs_weight.extend(other.obs_weight)
        self.obs_size.extend(other.obs_size)
        return self

    def split_by(self, key_of_size: Callable[[int], Hashable]) -> dict[Hashable, "ContextStats"]:
        """The observations grouped by a key of their size (the size frame), each group's
        aggregates computed afresh.  Observations are sorted first (as `t95` sorts them),
        so the groups do not depend on the order the stats were merged in."""
        lifetime = np.frombuffer(self.obs_lifetime, dtype=np.float64)
        censored = np.frombuffer(self.obs_censored, dtype=np.uint8)
        weight = np.frombuffer(self.obs_weight, dtype=np.float64)
        size = np.frombuffer(self.obs_size, dtype=np.uint64)
        order = np.lexsort((size, weight, censored, lifetime))
        sizes, inverse = np.unique(size, return_inverse=True)
        keys = [key_of_size(int(n)) for n in sizes]
        ids = {k: i for i, k in enumerate(dict.fromkeys(keys))}
        group_of = np.array([ids[k] for k in keys], np.int64)[inverse.reshape(-1)][order]
        groups: dict[Hashable, ContextStats] = {}
        for key, i in ids.items():
            sel = order[group_of == i]
            g = groups[key] = ContextStats()
            g.obs_lifetime.frombytes(lifetime[sel].tobytes())
            g.obs_censored.frombytes(censored[sel].tobytes())
            g.obs_weight.frombytes(weight[sel].tobytes())
            g.obs_size.frombytes(size[sel].tobytes())
        for g in groups.values():
            _aggregate(g)
        return groups

    def t95(self) -> float:
        # Sorted first (as (lifetime, censored, weight, size) tuples would sort) so the
        # result never depends on merge order.
        lifetime = np.frombuffer(self.obs_lifetime, dtype=np.float64)
        censored = np.frombuffer(self.obs_censored, dtype=np.uint8)
        weight = np.frombuffer(self.obs_weight, dtype=np.float64)
        order = np.lexsort((np.frombuffer(self.obs_size, dtype=np.uint64), weight,
                            censored, lifetime))
        return lifetimes.t95_sorted(lifetime[order], censored[order].astype(bool),
                                    weight[order])

    def pure_samples(self, label: int, scheme: lifetimes.LabelScheme) -> int:
        """Samples whose own lifetime is in the context's class (one still live at the
        end counts as never freed): no predictor keyed on the stack can do better."""
        lifetime = np.frombuffer(self.obs_lifetime, dtype=np.float64)
        # scheme.label of each: the first boundary above it, the tail class past them
        # all, inf for an infinite one; the inf class for a censored sample.
        own = np.searchsorted(np.asarray(scheme.boundaries, dtype=np.float64), lifetime,
                              side="right")
        own[lifetime == math.inf] = scheme.inf_class
        own[np.frombuffer(self.obs_censored, dtype=np.uint8) != 0] = scheme.inf_class
        return int(np.count_nonzero(own == label))

    def summary(self) -> dict:
        """Everything but the raw observations (JSON-friendly)."""
        mean = self.sum_lifetime / self.freed if self.freed else None
        var = (self.sum_sq_lifetime / self.freed - mean * mean) if self.freed else None
        return {"samples": self.samples, "objects": self.objects,
                "sampled_bytes": self.sampled_bytes, "freed": self.freed,
                "censored": self.censored,
                "min_lifetime": self.min_lifetime if self.freed else None,
                "max_lifetime": self.max_lifetime if self.freed else None,
                "mean_lifetime": mean,
                "stddev_lifetime": math.sqrt(max(var, 0.0)) if self.freed else None}


class MergeContextStats(beam.CombineFn):
    def create_accumulator(self):
        return ContextStats()

    def add_input(self, acc, stats):
        return acc.merge(stats)

    def merge_accumulators(self, accs):
        accs = iter(accs)
        first = next(accs)
        for acc in accs:
            first.merge(acc)
        return first

    def extract_output(self, acc):
        return acc


def context_id(program: str, version_label: str, frames: tuple[str, ...]) -> str:
    """A stable 16-hex-digit id for a context (also drives the train/eval split)."""
    text = "\x1f".join((program, version_label) + tuple(frames))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def stack_stats(samples: Iterable, clock: str) -> dict[int, ContextStats]:
    """A profile reader's samples (`ProfileReader.samples()`) -> stats per stack id,
    aggregated as they stream in, so a file's samples are never held as messages.

    Per sample only its observation is appended; the aggregates are then computed per
    stack (`_aggregate`) with the float operations of `ContextStats.add`, in the same
    order, so the stats are the same bit for bit."""
    lifetime_on_clock = lifetimes.lifetime_on_clock
    per_stack: dict[int, ContextStats] = {}
    get = per_stack.get
    for s in samples:
        stats = get(s.stack_id)
        if stats is None:
            stats = per_stack[s.stack_id] = ContextStats()
        stats.obs_lifetime.append(lifetime_on_clock(s, clock))
        stats.obs_censored.append(1 if s.censored else 0)
        stats.obs_weight.append(s.weight)
        stats.obs_size.append(s.size)
    for stats in per_stack.values():
        _aggregate(stats)
    return per_stack


_VECTOR_MIN = 64  # observations from which numpy is cheaper than a loop


def _aggregate(stats: ContextStats) -> None:
    """The aggregates of `stats`' observations, as `add` would have summed them one by
    one from a new ContextStats (np.cumsum sums sequentially, so the same floats)."""
    n = len(stats.obs_lifetime)
    stats.samples = n
    stats.sampled_bytes = sum(stats.obs_size)
    if n < _VECTOR_MIN:
        objects = sum_lifetime = sum_sq = max_lifetime = 0.0
        min_lifetime = math.inf
        freed = 0
        for lifetime, censored, weight in zip(stats.obs_lifetime, stats.obs_censored,
                                              stats.obs_weight):
            objects += weight
            if not censored:
                freed += 1
                min_lifetime = min(min_lifetime, lifetime)
                max_lifetime = max(max_lifetime, lifetime)
                sum_lifetime += lifetime
                sum_sq += lifetime * lifetime
    else:
        lifetime = np.frombuffer(stats.obs_lifetime, dtype=np.float64)
        kept = lifetime[np.frombuffer(stats.obs_censored, dtype=np.uint8) == 0]
        objects = _sequential_sum(np.frombuffer(stats.obs_weight, dtype=np.float64))
        freed = len(kept)
        min_lifetime = float(kept.min()) if freed else math.inf
        max_lifetime = max(0.0, float(kept.max())) if freed else 0.0
        sum_lifetime = _sequential_sum(kept)
        sum_sq = _sequential_sum(kept * kept)
    stats.objects = objects
    stats.freed = freed
    stats.censored = n - freed
    stats.min_lifetime = min_lifetime
    stats.max_lifetime = max_lifetime
    stats.sum_lifetime = sum_lifetime
    stats.sum_sq_lifetime = sum_sq


def _sequential_sum(values: np.ndarray) -> float:
    """0.0 + values[0] + values[1] + ..., left to right (what `+=` from 0.0 gives)."""
    return float(np.cumsum(np.concatenate(([0.0], values)))[-1]) if len(values) else 0.0


def merge_by(per_stack: dict[int, ContextStats],
             key_of: Callable[[int], Hashable]) -> dict[Hashable, ContextStats]:
    """Stats per stack id -> stats per key (a context: stacks that symbolize alike),
    merged in stack-id order so the result does not depend on dict order."""
    merged: dict[Hashable, ContextStats] = {}
    for stack_id, stats in sorted(per_stack.items()):
        key = key_of(stack_id)
        if key in merged:
            merged[key].merge(stats)
        else:
            merged[key] = stats
    return merged
