"""`lifetime profile -- CMD ARGS...` and `lifetime inspect FILE...` (registered by
lifetime/cli.py through `add_parser`)."""

from __future__ import annotations

import argparse
import sys

from core import options
from core.errors import UsageError, printable
from profiler import launch
from profile_format.summary import summarize_file


def add_parser(sub) -> None:
    """Adds profile and inspect to the `lifetime` subparsers."""
    p = sub.add_parser("profile", help="run a program under the sampling profiler")
    p.add_argument("--interval", type=options.positive_int(), default=None, metavar="BYTES",
                   help="mean bytes between samples (default: the sampler's own)")
    p.add_argument("--out", default="out/profiles", metavar="DIR",
                   help="directory for the profile files, one per process (default: %(default)s)")
    p.add_argument("--version-label", default=None, metavar="LABEL",
                   help="free-form version label stored in each profile's header")
    p.add_argument("--model", default=None, metavar="EXPORT_DIR",
                   help="a `lifetime export` directory: predict each sampled allocation's "
                        "lifetime class online (recorded, not acted on)")
    p.add_argument("--full-trace", action="store_true",
                   help="record every allocation and free with its stack, not samples "
                        "(the header says full_trace; much slower, ~65 bytes/allocation)")
    p.add_argument("--full-trace-capacity", type=options.positive_int(), default=None,
                   metavar="OBJECTS",
                   help="with --full-trace: the most objects live at once it follows; more "
                        "are dropped and counted (default: 4194304)")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD ARGS...")
    p.set_defaults(func=run_profile)

    p = sub.add_parser("inspect", help="print a profile file's header, counts and samples")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("--samples", type=options.int_range(0, options.MAX_INSPECT_SAMPLES),
                   default=5, metavar=f"0-{options.MAX_INSPECT_SAMPLES}",
                   help="samples to show (default: 5)")
    p.set_defaults(func=run_inspect)


def run_profile(args: argparse.Namespace) -> int:
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        raise UsageError("no command given (usage: lifetime profile [--interval BYTES | "
                         "--full-trace] [--out DIR] -- CMD ARGS...)")
    if args.full_trace and args.interval is not None:
        raise UsageError("--full-trace records every allocation: it takes no --interval")
    if args.full_trace_capacity is not None and not args.full_trace:
        raise UsageError("--full-trace-capacity is an option of --full-trace")
    return launch.run_profiled(cmd, out_dir=args.out, interval=args.interval,
                               version_label=args.version_label, model=args.model,
                               full_trace=args.full_trace,
                               full_trace_capacity=args.full_trace_capacity)


def run_inspect(args: argparse.Namespace) -> int:
    status = 0
    for path in args.files:
        text, problems = summarize_file(path, max_samples=args.samples)
        if text is not None:
            print(text)
        for problem in problems:
            print(f"lifetime inspect: error: {printable(str(problem))}", file=sys.stderr)
        status = status or int(bool(problems))
        print()
    return status
