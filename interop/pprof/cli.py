"""`lifetime pprof PROFILE... -o OUT.pb.gz` (wired into lifetime/cli.py)."""

from __future__ import annotations

import argparse
import sys

from core import symbolize
from core.errors import printable
from core.symbol_options import add_symbol_options, symbol_options
from interop import pprof
from interop.pprof.convert import saturated_text


def add_parser(sub) -> None:
    p = sub.add_parser(
        "pprof", help="write profiles as one pprof profile.proto (gzipped)",
        description="Converts PROFILE files into one gzipped pprof profile.proto laid out "
                    "like TCMalloc's lifetime profiles (allocated, deallocated and censored "
                    "objects and space; lifetime labels in nanoseconds) or, with --view "
                    "allocations, like its allocation profiles.  Read it with `go tool "
                    "pprof -top OUT.pb.gz`, `-sample_index=censored_allocated_space`, "
                    "`-tagfocus=lifetime_class=...`.  A bad file is reported, counted and "
                    "skipped; the exit status is then 1.")
    p.add_argument("profiles", nargs="+", metavar="PROFILE")
    p.add_argument("-o", "--out", required=True, metavar="OUT.pb.gz")
    p.add_argument("--view", choices=("lifetimes", "allocations"), default="lifetimes",
                   help="lifetimes (default; TCMalloc's kLifetimes layout) or allocations "
                        "(objects and space per allocation stack, default space)")
    p.add_argument("--group-by-class", action="store_true",
                   help="split samples by each object's lifetime class and label them "
                        "lifetime_class (<10ms ... >=1000s, never freed)")
    p.add_argument("--no-inline-frames", action="store_true",
                   help="one frame per address (no DWARF inline frames)")
    add_symbol_options(p)
    p.set_defaults(func=run)


def _say(message: str) -> None:
    print(f"lifetime pprof: {printable(message)}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    opts = symbol_options(args)
    cache = symbolize.ModuleCache(debug_dirs=opts["debug_dirs"], sysroot=opts["sysroot"] or None)
    summary = pprof.write(
        args.profiles, args.out, view=args.view, group_by_class=args.group_by_class,
        cache=cache, inline_frames=not args.no_inline_frames,
        report=lambda problem: _say(f"error: {problem}"))
    if summary.unsymbolized_modules:
        shown = ", ".join(f"{path} ({status})" for path, status
                          in sorted(summary.unsymbolized_modules.items())[:3])
        more = len(summary.unsymbolized_modules) - 3
        _say(f"{len(summary.unsymbolized_modules)} module(s) not symbolized, their frames "
             f"named <module+?>: {shown}" + (f" and {more} more" if more > 0 else ""))
    if summary.saturated:  # kept, but not as recorded: say so (convert.py, "Saturation")
        _say(f"warning: {saturated_text(summary)}")
    totals = ", ".join(f"{name} {value}" for name, value in summary.totals.items())
    dropped = sum(summary.dropped.values())
    print(f"wrote {args.out}: {summary.pprof_samples} pprof samples from {summary.samples} "
          f"samples ({summary.censored} censored) of {summary.used_files} profile(s); "
          f"{len(summary.skipped)} file(s) skipped, {dropped} samples dropped, "
          f"{len(summary.problems)} problem(s)")
    print(f"totals: {totals}")
    return 1 if summary.problems else 0
