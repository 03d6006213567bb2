"""The label scheme's options, one definition for every command that labels lifetimes
(build-dataset, characterize, evaluate-online): `--boundaries` here, `--clock` added by
each command (its help differs), and the LabelScheme they give."""

from __future__ import annotations

import argparse

from core import lifetimes, options
from core.lifetimes import LabelScheme


def _span(values) -> str:
    """'10,...,1e6' for a default's first and last boundary."""
    short = [f"{v:g}".replace("e+0", "e").replace("e+", "e") for v in (values[0], values[-1])]
    return f"{short[0]},...,{short[1]}"


def add_boundaries(p: argparse.ArgumentParser) -> None:
    d = lifetimes.DEFAULT_BOUNDARIES
    p.add_argument("--boundaries", type=options.boundaries, metavar="B1,B2,...",
                   help="class upper bounds on the label clock, strictly increasing, "
                        f"{lifetimes.MIN_BOUNDARY:g} to {lifetimes.MAX_BOUNDARY:g}, at most "
                        f"{lifetimes.MAX_BOUNDARIES} (default: {_span(d['wall'])} ms on the "
                        f"wall clock, {_span(d['bytes'])} bytes on the bytes clock)")


def label_scheme(args: argparse.Namespace) -> LabelScheme:
    """The scheme --clock and --boundaries ask for (the boundaries were checked as parsed,
    core/options.py); without --boundaries, the clock's default classes."""
    if args.boundaries:
        return LabelScheme(clock=args.clock, boundaries=args.boundaries)
    return LabelScheme.default(args.clock)
