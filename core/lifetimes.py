"""Lifetime statistics and labels (llama-paper §2.2).

A context's label is the class L whose upper bound satisfies T95 < bound(L), where
T95 is the 95th percentile of its objects' lifetimes.  With the default wall-clock
scheme the classes are 10 ms, 100 ms, 1 s, 10 s, 100 s, 1000 s, >=1000 s, and inf.

Censoring.  An object still live when its profile ended has a lifetime of *at
least* its observed age.  T95 comes from the Kaplan-Meier product-limit estimate
of the lifetime distribution, which uses a censored object as "survived this
long" and nothing more.  If the estimate never reaches 95% (more than 5% of the
weighted objects outlived every observed free) T95 is not determined by the data;
such a context is labeled inf, the paper's label for objects the program does not
free.  Weights are the samples' weights (objects represented), so T95 is per object.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import numpy as np

from core.errors import UsageError

INF = math.inf
PERCENTILE = 0.95
NS_PER_MS = 1e6
# Class boundaries, on either clock: at most MAX_BOUNDARIES (32 classes with the tail
# and inf), each in [MIN_BOUNDARY, MAX_BOUNDARY].  Wall clock: 1 us to 1e12 ms (31
# years; in ns still well inside the simulator's uint64 trace fields); bytes clock:
# up to 1 TB allocated meanwhile.  The one definition of the label scheme's limits and
# defaults: the native side's copies (heap/src/classes.h: kMaxBoundaries, which the
# simulator's trace reader enforces, and kDefaultBoundsNs) are pinned to these by
# tests/test_label_scheme.py; simulator/trace.py and the help text derive from them.
MAX_BOUNDARIES = 30
MIN_BOUNDARY, MAX_BOUNDARY = 1e-3, 1e12
# The default classes of each clock (LabelScheme(clock) without boundaries): 10 ms ..
# 1000 s on the wall clock, 10 kB .. 1 GB allocated meanwhile on the bytes clock.
DEFAULT_BOUNDARIES = {"wall": (1e1, 1e2, 1e3, 1e4, 1e5, 1e6),
                      "bytes": (1e4, 1e5, 1e6, 1e7, 1e8, 1e9)}


def check_boundaries(values) -> tuple[float, ...]:
    """Class boundaries as a tuple of floats, or a UsageError: finite, strictly
    increasing, within [MIN_BOUNDARY, MAX_BOUNDARY], 1..MAX_BOUNDARIES of them.  The one
    rule, for --boundaries (core/options.py) and every recorded scheme."""
    try:
        b = tuple(float(x) for x in values)
    except (TypeError, ValueError):
        raise UsageError(f"class boundaries must be numbers: {values!r}") from None
    if not 1 <= len(b) <= MAX_BOUNDARIES:
        raise UsageError(f"1 to {MAX_BOUNDARIES} class boundaries, not {len(b)}")
    for x in b:
        if not MIN_BOUNDARY <= x <= MAX_BOUNDARY:  # NaN fails this too
            raise UsageError(f"class boundary {x:g} outside [{MIN_BOUNDARY:g}, "
                             f"{MAX_BOUNDARY:g}]")
    if any(x >= y for x, y in zip(b, b[1:])):
        raise UsageError(f"class boundaries must be strictly increasing: {list(b)}")
    return b


def lifetime_on_clock(sample, clock: str) -> float:
    """A sample's lifetime (or, censored, its observed age) on the label clock: ms of
    wall time ("wall"), or bytes allocated meanwhile ("bytes")."""
    if clock == "wall":
        if sample.censored:
            return sample.observed_age_ns / NS_PER_MS
        return (sample.free_monotonic_ns - sample.alloc_monotonic_ns) / NS_PER_MS
    if sample.censored:
        return float(sample.observed_age_bytes)
    return float(sample.free_allocated_bytes - sample.alloc_allocated_bytes)


@dataclasses.dataclass(frozen=True)
class LabelScheme:
    """Class boundaries on one clock: class i means T95 < boundaries[i]; then a
    finite tail class (T95 >= the last boundary), then inf (never freed)."""

    clock: str = "wall"  # "wall": milliseconds on CLOCK_MONOTONIC; "bytes": allocated bytes
    boundaries: tuple[float, ...] = DEFAULT_BOUNDARIES["wall"]

    def __post_init__(self):
        if self.clock not in ("wall", "bytes"):
            raise UsageError(f"unknown clock {self.clock!r} (expected 'wall' or 'bytes')")
        object.__setattr__(self, "boundaries", check_boundaries(self.boundaries))

    @classmethod
    def default(cls, clock: str = "wall") -> "LabelScheme":
        """The clock's default classes (DEFAULT_BOUNDARIES)."""
        if clock not in DEFAULT_BOUNDARIES:
            raise UsageError(f"unknown clock {clock!r} (expected 'wall' or 'bytes')")
        return cls(clock=clock, boundaries=DEFAULT_BOUNDARIES[clock])

    @property
    def unit(self) -> str:
        return "ms" if self.clock == "wall" else "bytes"

    @property
    def class_names(self) -> list[str]:
        return ([_format(x, self.unit) for x in self.boundaries]
                + [">=" + _format(self.boundaries[-1], self.unit), "inf"])

    @property
    def num_classes(self) -> int:
        return len(self.boundaries) + 2

    @property
    def inf_class(self) -> int:
        return len(self.boundaries) + 1

    def label(self, t95: float) -> int:
        """The class of a T95 value (INF for undetermined/never freed)."""
        if t95 == INF:
            return self.inf_class
        for i, bound in enumerate(self.boundaries):
            if t95 < bound:
                return i
        return len(self.boundaries)

    def to_json(self) -> dict:
        return {"clock": self.clock, "unit": self.unit, "boundaries": list(self.boundaries),
                "class_names": self.class_names, "rule": "T95 < boundary"}

    @classmethod
    def from_json(cls, d: dict) -> "LabelScheme":
        """The scheme `to_json` wrote (a dataset manifest's config.labels): its clock and
        boundaries; the derived fields (unit, class names, rule) follow from them.
        KeyError or TypeError for a dict without them, UsageError for bad values."""
        return cls(clock=d["clock"], boundaries=tuple(d["boundaries"]))


def boundaries_ns(boundaries: Sequence[float]) -> tuple[int, ...]:
    """Wall-clock boundaries (ms) in integer ns, as a trace header, the exported library
    (lifetime_model_info.boundaries_ns) and the allocator's deadlines hold them."""
    return tuple(int(round(float(b) * NS_PER_MS)) for b in boundaries)


def _format(value: float, unit: str) -> str:
    if unit == "ms":
        if value >= 1000:
            return f"{value / 1000:g}s"
        return f"{value:g}ms"
    return f"{value:g}B"


def t95(values: Sequence[float], censored: Sequence[bool], weights: Sequence[float],
        q: float = PERCENTILE) -> float:
    """The q-quantile of lifetimes under right-censoring (Kaplan-Meier).

    Returns the smallest observed lifetime t with estimated P(lifetime <= t) >= q,
    or INF when the estimate never gets there (censored mass beyond every free).
    Without censoring this is the plain weighted inverse-CDF quantile.
    """
    if not values:
        raise ValueError("t95 of no samples")
    order = sorted(range(len(values)), key=lambda i: (values[i], censored[i]))
    at_risk = float(sum(weights))
    survival = 1.0
    i = 0
    while i < len(order):
        t = values[order[i]]
        freed = gone = 0.0
        while i < len(order) and values[order[i]] == t:  # all ties at t
            w = weights[order[i]]
            if not censored[order[i]]:
                freed += w
            gone += w
            i += 1
        if freed:
            survival *= 1.0 - freed / at_risk
            if 1.0 - survival >= q - 1e-12:
                return t
        at_risk -= gone
    return INF


_SHORT_TIES = 32


def t95_sorted(values, censored, weights, q: float = PERCENTILE) -> float:
    """`t95` of observations already in (value, censored) order (numpy arrays), with
    the same float operations in the same order, so the same result bit for bit: ties
    summed one after another in that order, the at-risk weight decreased and the
    survival multiplied group by group (np.cumsum and np.cumprod are sequential).  Where
    `t95` would divide by a zero at-risk weight, it is `t95` that answers."""
    n = len(values)
    if not n:
        raise ValueError("t95 of no samples")
    values = np.asarray(values, dtype=np.float64)
    censored = np.asarray(censored, dtype=bool)
    weights = np.asarray(weights, dtype=np.float64)
    starts = np.flatnonzero(np.concatenate(([True], values[1:] != values[:-1])))
    lengths = np.diff(np.append(starts, n))
    own = np.where(censored, 0.0, weights)
    freed = 0.0 + own[starts]  # 0.0 + w, as `freed += w` from 0.0
    gone = 0.0 + weights[starts]
    ties = np.flatnonzero(lengths > 1)
    for g in ties[lengths[ties] > _SHORT_TIES]:  # long tie groups: one sequential sum each
        at = slice(starts[g], starts[g] + lengths[g])
        freed[g] = np.cumsum(np.concatenate(([0.0], own[at])))[-1]
        gone[g] = np.cumsum(np.concatenate(([0.0], weights[at])))[-1]
    ties = ties[lengths[ties] <= _SHORT_TIES]
    j = 1
    while len(ties):  # the j-th of each short tie group, in order
        freed[ties] += own[starts[ties] + j]
        gone[ties] += weights[starts[ties] + j]
        j += 1
        ties = ties[lengths[ties] > j]
    at_risk = float(sum(weights.tolist()))  # as t95 sums them
    at_risk = np.cumsum(np.concatenate(([at_risk], -gone)))[:-1]  # before each group
    has = freed != 0
    with np.errstate(divide="ignore", invalid="ignore"):
        survival = np.cumprod(np.where(has, 1.0 - freed / np.where(has, at_risk, 1.0), 1.0))
    hits = np.flatnonzero(has & (1.0 - survival >= q - 1e-12))
    end = hits[0] + 1 if len(hits) else len(starts)
    if np.any(has[:end] & (at_risk[:end] == 0)):  # t95 raises ZeroDivisionError
        return t95(values.tolist(), censored.tolist(), weights.tolist(), q)
    return float(values[starts[hits[0]]]) if len(hits) else INF


# -- The decision rule: a class from a context's class distribution ---------------------
#
# T95 labels a context by its 95th percentile, which suits a context whose objects live
# alike.  Where one context's objects have different fates (the same `SET` path storing a
# value an overwrite frees in seconds, one a TTL frees, one that lives forever), LLAMA
# (heap/src/llama.cc) pays for a wrong class in two ways, and the cost rule picks
# the class that minimises the expected sum, per byte:
#
#   hold(k) = K x bound_k  for a bounded class k; H for the open-ended and inf classes.
#             How long the space of an object given class k stays unusable for others
#             once it is free: LLAMA reuses a closed span's free lines only when its
#             page's deadline expires (now + K x class bound, §3.4-3.5), and open-ended
#             and inf pages have no deadline, so their holes wait "for ever": the horizon
#             H, 10 x the last bound by default and never less than the longest deadline.
#   life(c) = bound_c      for a bounded class c; H for the open-ended and inf classes.
#             How long an object of true class c lives (its class's bound).
#
#   cost(k | c) = 0                               if k == c
#               = hold(k) - life(c)               if c < k   (over-predicted: its hole on
#                   a class-k page waits for that page's reuse; the page itself is kept
#                   by the context's objects that really live that long)
#               = A x max(0, life(c) - hold(k))   if c > k   (under-predicted: it keeps its
#                   space, and its page, past the point where LLAMA would have reused them)
#
#   C(k) = sum_c p[c] x cost(k | c) / sum_c p[c];   the rule picks argmin_k C(k), the
#   longest class among ties (over-prediction is what §2.3 and §3.4 prefer on a tie).
#
# A = 0.25 (UNDER_WEIGHT), chosen on selection data (issue 33 item 2;
# benchmarks/cost_rule_selection.py: the context oracle by this rule on the Redis 6.2.9
# selection traces, mixed / phases / fates, under the paper's policy and `segregated`;
# of A = 0, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 19 it does best on the worst case, mixed under
# `paper`, resident -384% against A = 1's -448%, and `segregated` is the same for all).
# It was 1 before, by the reasoning that follows: a byte-second of an under-predicted
# object's space costing what a byte-second of an over-predicted object's hole costs.
# Under-prediction costs less than that because the neighbourhood an
# under-predicted object pins is recycled by deadlines (its page's class rises, its
# partially free spans go to shorter classes: how §3.4 tolerates under-prediction), so
# each byte is charged its own space only, and the selection traces say it costs less.
# For comparison: with hold = life = the bound
# and A = 19, the continuous form of this loss (the pinball loss) is minimised by the 95th
# percentile, i.e. T95 is this rule with under-prediction 19 times as costly as
# over-prediction, which LLAMA's recycling does not bear out for mixed contexts (issue 21).
# With A = 1, between a short class and a much longer bounded one the rule picks the
# longer when it holds more than K / (1 + K) of the weight (2/3 with K = 2); between a
# short class and inf, when it holds more than half (with A = 0.25: more than 4/5).  p[c] may be objects or bytes per class; the cost is
# per byte, so bytes are the natural weight (the simulator's context oracle uses bytes).
# Measured on the 6.2.14 test traces after the choice (load seed 1, `paper`, huge pages):
# phases +88.6% (A = 1) -> +89.6%, mixed -296% -> -261%, fates -97% -> -87% (T95: +90.7,
# -815, -231%); `segregated` unchanged.

DEADLINE_K = 2      # the simulator's default (lifetime_simulate --deadline-k)
UNDER_WEIGHT = 0.25  # A above


def default_horizon(boundaries: Sequence[float]) -> float:
    """The cost rule's horizon when none is given: the decade after the last boundary
    (10^4 s with the default scheme), on the boundaries' clock."""
    return 10.0 * float(boundaries[-1])


def cost_horizon(boundaries: Sequence[float], deadline_k: float = 2,
                 horizon: float | None = None) -> float:
    """The horizon class_costs uses: `horizon` (default_horizon when None), raised to the
    longest deadline, K x the last bound, so that hold() grows with the class.  Not the
    length of one run: a short run would cap every long class at the same cost, and the
    rule would lose the order between them (a <100s context would tie with inf)."""
    h = default_horizon(boundaries) if horizon is None else float(horizon)
    if not h > 0:
        raise ValueError(f"horizon must be > 0, not {horizon}")
    return max(h, deadline_k * float(boundaries[-1]))


def class_costs(p: Sequence[float], boundaries: Sequence[float], *,
                deadline_k: float = DEADLINE_K, horizon: float | None = None,
                under_weight: float = UNDER_WEIGHT) -> list[float]:
    """C(k) for every class k (see the comment above): the expected held byte-seconds
    (on the boundaries' clock) per byte of a context with class distribution p (len =
    len(boundaries) + 2: the bounded classes, the open-ended class, inf) placed in k."""
    b = [float(x) for x in boundaries]
    n = len(b) + 2
    if len(p) != n:
        raise ValueError(f"a distribution over {n} classes, not {len(p)}")
    w = [float(x) for x in p]
    if any(not x >= 0 or math.isinf(x) for x in w) or not sum(w) > 0:
        raise ValueError(f"class weights must be finite, >= 0 and not all 0: {list(p)}")
    if not deadline_k > 0 or not under_weight >= 0:
        raise ValueError("deadline_k must be > 0 and under_weight >= 0")
    h = cost_horizon(b, deadline_k, horizon)
    life = b + [h, h]
    hold = [deadline_k * x for x in b] + [h, h]
    total = sum(w)
    costs = []
    for k in range(n):
        c_k = 0.0
        for c, weight in enumerate(w):
            if not weight or c == k:
                continue
            if c < k:
                c_k += weight * (hold[k] - life[c])
            else:
                c_k += weight * under_weight * max(0.0, life[c] - hold[k])
        costs.append(c_k / total)
    return costs


def cost_rule(p: Sequence[float], boundaries: Sequence[float], **kwargs) -> int:
    """The decision rule: the class of least expected memory cost (class_costs) for a
    context whose objects (or bytes) are distributed over the classes as p; the longest
    class among ties.  One definition: the simulator's context oracle uses it, and so
    will the model's predicted class distributions."""
    costs = class_costs(p, boundaries, **kwargs)
    best = min(costs)
    tol = 1e-12 * max(1.0, abs(best))
    return max(k for k, x in enumerate(costs) if x <= best + tol)
