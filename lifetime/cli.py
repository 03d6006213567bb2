"""`lifetime SUBCOMMAND ...`: one command line for every stage of the pipeline."""

from __future__ import annotations

import argparse
import sys


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {value}")
    return value


def _cmd_profile(args: argparse.Namespace) -> int:
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        raise SystemExit("lifetime profile: no command given (usage: lifetime profile "
                         "[--interval BYTES] [--out DIR] -- CMD ARGS...)")
    from profiler import launch

    return launch.run_profiled(cmd, out_dir=args.out, interval=args.interval,
                               version_label=args.version_label)


def _cmd_inspect(args: argparse.Namespace) -> int:
    from profiler_proto import ProfileFormatError, read_profile
    from profiler_proto.summary import summarize

    status = 0
    for path in args.files:
        try:
            print(summarize(read_profile(path), max_samples=args.samples))
        except ProfileFormatError as e:
            print(f"lifetime inspect: error: {e}", file=sys.stderr)
            status = 1
        print()
    return status


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lifetime",
        description="Learned allocation-lifetime models: profile, build datasets, train, "
                    "evaluate, export.")
    sub = parser.add_subparsers(dest="subcommand", required=True, metavar="SUBCOMMAND")

    p = sub.add_parser("profile", help="run a program under the sampling profiler")
    p.add_argument("--interval", type=_positive_int, default=None, metavar="BYTES",
                   help="mean bytes between samples (default: the sampler's own)")
    p.add_argument("--out", default="out/profiles", metavar="DIR",
                   help="directory for the profile files, one per process (default: %(default)s)")
    p.add_argument("--version-label", default=None, metavar="LABEL",
                   help="free-form version label stored in each profile's header")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD ARGS...")
    p.set_defaults(func=_cmd_profile)

    p = sub.add_parser("inspect", help="print a profile file's header, counts and samples")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("--samples", type=int, default=5, help="samples to show (default: 5)")
    p.set_defaults(func=_cmd_inspect)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
