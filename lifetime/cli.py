"""`lifetime SUBCOMMAND ...`: one command line for every stage of the pipeline."""

from __future__ import annotations

import argparse
import logging
import os
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


def _label_scheme(args: argparse.Namespace):
    from pipeline.lifetimes import LabelScheme

    try:
        if args.boundaries:
            return LabelScheme(clock=args.clock,
                               boundaries=tuple(float(x) for x in args.boundaries.split(",")))
        return LabelScheme(clock=args.clock) if args.clock == "wall" else LabelScheme(
            clock="bytes", boundaries=(1e4, 1e5, 1e6, 1e7, 1e8, 1e9))
    except ValueError as e:
        raise SystemExit(f"lifetime: bad --boundaries/--clock: {e}")


def _profile_inputs(globs: list[str], labels: list[str] | None) -> list[tuple[str, str]]:
    labels = labels or []
    if len(labels) > len(globs):
        raise SystemExit("lifetime: more --version-label than --profiles")
    return [(g, labels[i] if i < len(labels) else "") for i, g in enumerate(globs)]


def _cmd_build_dataset(args: argparse.Namespace, beam_args: list[str]) -> int:
    from pipeline.dataset import DatasetConfig, build_dataset

    config = DatasetConfig(max_frames=args.max_frames, vocab_size=args.vocab_size,
                           eval_percent=args.eval_percent, num_shards=args.shards,
                           labels=_label_scheme(args))
    try:
        manifest = build_dataset(_profile_inputs(args.profiles, args.version_label), args.out,
                                 config, vocab_path=args.vocab, beam_args=beam_args)
    except ValueError as e:
        raise SystemExit(f"lifetime build-dataset: error: {e}")
    splits = manifest["splits"]
    print(f"dataset: {args.out}: {splits['train']['contexts']} train and "
          f"{splits['eval']['contexts']} eval contexts, vocabulary "
          f"{manifest['vocabulary']['size']}, {manifest['dropped']['bad_records_or_files']} "
          "bad records or files (see dead_letters.jsonl)")
    for program, stats in manifest["files"]["programs"].items():
        print(f"  {program}: {stats['files']} files, {stats['samples']} samples, "
              f"{stats['symbolized_frame_share']:.1%} of frames symbolized")
    return 0


def _cmd_characterize(args: argparse.Namespace, beam_args: list[str]) -> int:
    from pipeline.characterize import summarize_workloads, write_report
    from pipeline.dataset import DatasetConfig

    config = DatasetConfig(max_frames=args.max_frames, labels=_label_scheme(args))
    try:
        workloads = summarize_workloads(_profile_inputs(args.profiles, args.version_label),
                                        config, args.out, beam_args)
    except ValueError as e:
        raise SystemExit(f"lifetime characterize: error: {e}")
    print(f"report: {write_report(workloads, config, args.out)}")
    return 0


def _add_profile_inputs(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profiles", action="append", required=True, metavar="GLOB",
                   help="profile files; repeat for several inputs")
    p.add_argument("--version-label", action="append", metavar="LABEL",
                   help="label for the matching --profiles (default: each header's own)")
    p.add_argument("--out", required=True, metavar="DIR")
    p.add_argument("--max-frames", type=_positive_int, default=32,
                   help="frames kept per context, from the allocation site (default: 32)")
    p.add_argument("--clock", choices=("wall", "bytes"), default="wall",
                   help="label clock: wall time (ms) or allocated bytes")
    p.add_argument("--boundaries", metavar="B1,B2,...",
                   help="class upper bounds on the label clock (default: 10,...,1e6 ms)")


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

    p = sub.add_parser(
        "build-dataset", help="Beam job: profiles -> labeled, tokenized TFRecord examples",
        description="Unknown options are passed to Beam unchanged (e.g. --runner=FlinkRunner "
                    "--flink_master=[local] --direct_num_workers=2).")
    _add_profile_inputs(p)
    p.add_argument("--vocab", metavar="FILE",
                   help="use this vocabulary instead of building one (e.g. a test set)")
    p.add_argument("--vocab-size", type=_positive_int, default=5000)
    p.add_argument("--eval-percent", type=int, choices=range(0, 101), default=20,
                   metavar="0-100")
    p.add_argument("--shards", type=_positive_int, default=1)
    p.set_defaults(func=_cmd_build_dataset, beam=True)

    p = sub.add_parser("characterize", help="Markdown report with plots per workload",
                       description="Unknown options are passed to Beam unchanged.")
    _add_profile_inputs(p)
    p.set_defaults(func=_cmd_characterize, beam=True)
    return parser


class _DropNoise(logging.Filter):
    """Beam warns at import about optional Google Cloud clients we never use."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "apitools not found" not in record.getMessage()


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's start-up chatter
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:
        handler.addFilter(_DropNoise())
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if getattr(args, "beam", False):
        return args.func(args, rest)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
