"""Option value types: the one place a numeric option's range is checked.

Every numeric option of every subcommand is parsed by one of these argparse `type=`
functions, so an impossible or unbounded value (`--max-frames 1000000000`, NaN, a
fraction of 2, a negative count) is refused while the command line is parsed, before
any work, with one line (`lifetime SUBCOMMAND: error: argument --opt: problem`,
lifetime/cli.py).  The limits themselves live with what they bound (the frame limit
with the context definition, class boundaries with the label scheme, hyperparameters
with HParams); the ones here are for options that own nothing else.
"""

from __future__ import annotations

import argparse
import math

from core.errors import UsageError
from core.lifetimes import check_boundaries

# Class boundaries on either label clock: their rule, limits (MAX_BOUNDARIES,
# MIN_BOUNDARY, MAX_BOUNDARY) and defaults are core/lifetimes.py's, the label scheme's
# home (check_boundaries).

# Counts a user passes that only cost time or output: bounded so a typo (an extra
# few zeros) is an error rather than hours of work or gigabytes of text.
MAX_INSPECT_SAMPLES = 1_000_000   # inspect --samples
MAX_VOCAB_SIZE = 1_000_000        # build-dataset --vocab-size: the embedding table
                                  # (x embedding_dim floats) and the exported library
MAX_SHARDS = 1024                 # build-dataset --shards: files per split
MAX_FRACTIONS = 10                # report --fractions: each one trains a model


def _error(text: str, problem: str) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(f"{text!r}: {problem}")


def int_range(lo: int, hi: int):
    """An argparse type: an integer in [lo, hi]."""

    def parse(text: str) -> int:
        try:
            value = int(text, 10)
        except ValueError:
            raise _error(text, "not an integer") from None
        if not lo <= value <= hi:
            raise _error(text, f"must be an integer in {lo}..{hi}")
        return value

    parse.__name__ = f"integer in {lo}..{hi}"
    return parse


def positive_int(hi: int | None = None):
    """An argparse type: an integer >= 1 (and <= hi when one is given)."""
    if hi is not None:
        return int_range(1, hi)

    def parse(text: str) -> int:
        try:
            value = int(text, 10)
        except ValueError:
            raise _error(text, "not an integer") from None
        if value < 1:
            raise _error(text, "must be a positive integer")
        return value

    parse.__name__ = "positive integer"
    return parse


def _finite(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise _error(text, "not a number") from None
    if not math.isfinite(value):
        raise _error(text, "must be a finite number")
    return value


def finite_float(lo: float, hi: float, lo_open: bool = False, hi_open: bool = False):
    """An argparse type: a finite number in the interval lo..hi (each end closed unless
    said open)."""
    shown = f"{'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"

    def parse(text: str) -> float:
        value = _finite(text)
        if value < lo or value > hi or (lo_open and value == lo) or (hi_open and value == hi):
            raise _error(text, f"must be in {shown}")
        return value

    parse.__name__ = f"number in {shown}"
    return parse


def float_list(text: str) -> list[float]:
    """Comma-separated finite numbers (empty items ignored), at least one."""
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise _error(text, "an empty list")
    try:
        return [_finite(x) for x in items]
    except argparse.ArgumentTypeError as e:
        raise _error(text, f"not a comma-separated list of finite numbers ({e})") from None


def fractions(text: str) -> list[float]:
    """report --fractions: 1..MAX_FRACTIONS shares of the training samples, each in
    (0, 1]; sorted, without repeats."""
    values = float_list(text)
    bad = [v for v in values if not 0 < v <= 1]
    if bad:
        raise _error(text, f"every fraction must be in (0, 1] ({bad[0]:g} is not)")
    values = sorted(set(values))
    if len(values) > MAX_FRACTIONS:
        raise _error(text, f"at most {MAX_FRACTIONS} fractions (each trains a model)")
    return values


def boundaries(text: str) -> tuple[float, ...]:
    """--boundaries: class upper bounds, the label scheme's rule
    (core.lifetimes.check_boundaries)."""
    try:
        return check_boundaries(float_list(text))
    except UsageError as e:
        raise _error(text, str(e)) from None
