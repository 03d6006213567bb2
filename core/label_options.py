"""The label scheme's options, one definition for every command that labels lifetimes
(build-dataset, characterize, evaluate-online): `--boundaries` here, `--clock` added by
each command (its help differs), and the LabelScheme they give."""

from __future__ import annotations

import argparse

from core import lifetimes, options
from core.lifetimes import LabelScheme


def add_boundaries(p: argparse.ArgumentParser) -> None:
    p.add_argument("--boundaries", type=options.boundaries, metavar="B1,B2,...",
                   help="class upper bounds on the label clock, strictly increasing, "
                        f"{lifetimes.MIN_BOUNDARY:g} to {lifetimes.MAX_BOUNDARY:g}, at most "
                        f"{lifetimes.MAX_BOUNDARIES} (default: 10,...,1e6 ms)")


def label_scheme(args: argparse.Namespace) -> LabelScheme:
    """The scheme --clock and --boundaries ask for (the boundaries were checked as parsed,
    core/options.py); without --boundaries, the clock's default classes."""
    if args.boundaries:
        return LabelScheme(clock=args.clock, boundaries=args.boundaries)
    return LabelScheme(clock=args.clock) if args.clock == "wall" else LabelScheme(
        clock="bytes", boundaries=(1e4, 1e5, 1e6, 1e7, 1e8, 1e9))
