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

from lifetime.errors import UsageError

INF = math.inf
PERCENTILE = 0.95
NS_PER_MS = 1e6
# Class boundaries, on either clock: at most MAX_BOUNDARIES (32 classes with the tail
# and inf), each in [MIN_BOUNDARY, MAX_BOUNDARY].  Wall clock: 1 us to 1e12 ms (31
# years; in ns still well inside the simulator's uint64 trace fields); bytes clock:
# up to 1 TB allocated meanwhile.
MAX_BOUNDARIES = 30
MIN_BOUNDARY, MAX_BOUNDARY = 1e-3, 1e12


def check_boundaries(values) -> tuple[float, ...]:
    """Class boundaries as a tuple of floats, or a UsageError: finite, strictly
    increasing, within [MIN_BOUNDARY, MAX_BOUNDARY], 1..MAX_BOUNDARIES of them.  The one
    rule, for --boundaries (lifetime/options.py) and every recorded scheme."""
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
    boundaries: tuple[float, ...] = (1e1, 1e2, 1e3, 1e4, 1e5, 1e6)

    def __post_init__(self):
        if self.clock not in ("wall", "bytes"):
            raise UsageError(f"unknown clock {self.clock!r} (expected 'wall' or 'bytes')")
        object.__setattr__(self, "boundaries", check_boundaries(self.boundaries))

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
