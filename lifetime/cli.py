"""`lifetime SUBCOMMAND ...`: one command line for every stage of the pipeline."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from core import options
from core.errors import LifetimeError, UsageError, printable
from core.files import writable_dir, writable_parent
from core.symbol_options import add_symbol_options, symbol_options


def _cmd_profile(args: argparse.Namespace) -> int:
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        raise UsageError("no command given (usage: lifetime profile [--interval BYTES | "
                         "--full-trace] [--out DIR] -- CMD ARGS...)")
    if args.full_trace and args.interval is not None:
        raise UsageError("--full-trace records every allocation: it takes no --interval")
    if args.full_trace_capacity is not None and not args.full_trace:
        raise UsageError("--full-trace-capacity is an option of --full-trace")
    from profiler import launch

    return launch.run_profiled(cmd, out_dir=args.out, interval=args.interval,
                               version_label=args.version_label, model=args.model,
                               full_trace=args.full_trace,
                               full_trace_capacity=args.full_trace_capacity)


def _cmd_evaluate_online(args: argparse.Namespace) -> int:
    import json

    from model.online_eval import evaluate_online, model_context

    if args.json:
        writable_parent(args.json, "--json")  # before the work
    result = evaluate_online(args.profiles, model_context(args.model), _label_scheme(args),
                             **symbol_options(args))
    h, cache, cost = result["headline"], result["cache"], result["cost_ns_per_sampled_allocation"]
    pct = lambda x: "n/a" if x is None else f"{100 * x:.1f}%"  # noqa: E731
    print(f"{result['profiles']} profiles, {result['contexts']} contexts, "
          f"{result['predicted_samples']} predicted samples")
    skipped, problems = result["skipped_files"], result["problems"]
    if skipped or problems:
        print(f"skipped      {len(skipped)} unusable files; {len(problems)} problems in the "
              "files used (--json lists them all)")
        for d in (skipped + problems)[:5]:
            print(f"  {printable(d['file'])}: {printable(d['reason'])}")
    print(f"per context  weighted exact {pct(h['weighted_exact'])}, off-by-one "
          f"{pct(h['weighted_off_by_one'])}, under-prediction {pct(h['weighted_under_prediction'])}"
          f"; unweighted exact {pct(h['unweighted_exact'])}, off-by-one "
          f"{pct(h['unweighted_off_by_one'])}")
    print(f"per sample   exact {pct(h['per_sample_exact'])}, off-by-one "
          f"{pct(h['per_sample_off_by_one'])}, under-prediction "
          f"{pct(h['per_sample_under_prediction'])}")
    print(f"cache        hit rate {pct(cache['hit_rate'])} ({cache['cache_hits']} hits, "
          f"{cache['cache_misses']} misses, {cache['revalidations']} revalidations, "
          f"{cache['disagreements']} disagreements)")
    print(f"added cost   per sampled allocation: mean {cost['mean'] / 1e3:.2f} us, p50 "
          f"{cost['p50'] / 1e3:.2f} us (hits {(cost['hit_p50'] or 0) / 1e3:.2f} us, misses "
          f"{(cost['miss_p50'] or 0) / 1e3:.2f} us), p99 {cost['p99'] / 1e3:.2f} us")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1, sort_keys=True)
        print(f"wrote {printable(args.json)}")
    return 0


def _cmd_inspect(args: argparse.Namespace) -> int:
    from profiler_proto.summary import summarize_file

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


def _label_scheme(args: argparse.Namespace):
    from core.lifetimes import LabelScheme

    if args.boundaries:  # checked as parsed (core/options.py)
        return LabelScheme(clock=args.clock, boundaries=args.boundaries)
    return LabelScheme(clock=args.clock) if args.clock == "wall" else LabelScheme(
        clock="bytes", boundaries=(1e4, 1e5, 1e6, 1e7, 1e8, 1e9))


def _profile_inputs(groups: list[list[str]], labels: list[str] | None) -> list[tuple[str, str]]:
    """(pattern, version label) pairs: the i-th --version-label labels every file,
    directory or glob given to the i-th --profiles."""
    labels = labels or []
    if len(labels) > len(groups):
        raise UsageError("more --version-label than --profiles")
    return [(pattern, labels[i] if i < len(labels) else "")
            for i, group in enumerate(groups) for pattern in group]


def _context_options(args: argparse.Namespace) -> dict:
    """DatasetConfig fields for the context definition (core/context.py)."""
    from core import context
    from pipeline.dataset import dataset_context

    if getattr(args, "like", None):
        if args.wrapper or args.no_builtin_wrappers or args.max_frames is not None:
            raise UsageError("--like takes the context definition from the dataset; "
                             "drop --wrapper/--no-builtin-wrappers/--max-frames")
        try:
            return {"context": dataset_context(args.like), "detect_wrappers": False}
        except LifetimeError as e:
            raise UsageError(f"--like {args.like}: {e}") from e
    definition = context.ContextDefinition.make(
        max_frames=args.max_frames or context.MAX_FRAMES,
        configured=args.wrapper or (), builtin=not args.no_builtin_wrappers)
    return {"context": definition, "detect_wrappers": not args.no_detect_wrappers}


def _cmd_build_dataset(args: argparse.Namespace, beam_args: list[str]) -> int:
    import os

    from pipeline.dataset import DatasetConfig, build_dataset

    config = DatasetConfig(vocab_size=args.vocab_size, eval_percent=args.eval_percent,
                           num_shards=args.shards, labels=_label_scheme(args),
                           **_context_options(args), **symbol_options(args))
    vocab = args.vocab or (os.path.join(args.like, "vocab.txt") if args.like else None)
    writable_dir(args.out)
    manifest = build_dataset(_profile_inputs(args.profiles, args.version_label), args.out,
                             config, vocab_path=vocab, beam_args=beam_args,
                             profile_format=args.format)
    # Names below come from the profiles (program names, symbols): printed escaped.
    wrappers = manifest["context"]["detected_wrappers"]
    print(f"context: {manifest['context']['max_frames']} frames below the site; "
          f"{len(manifest['context']['wrappers'])} wrappers stripped, {len(wrappers)} detected"
          + (f" ({printable(', '.join(wrappers[:6]))}{', ...' if len(wrappers) > 6 else ''})"
             if wrappers else ""))
    splits = manifest["splits"]
    print(f"dataset: {printable(args.out)}: {splits['train']['contexts']} train and "
          f"{splits['eval']['contexts']} eval contexts, vocabulary "
          f"{manifest['vocabulary']['size']}, {manifest['dropped']['bad_records_or_files']} "
          "bad records or files (see dead_letters.jsonl)")
    for program, stats in manifest["files"]["programs"].items():
        print(f"  {printable(program)}: {stats['files']} files, {stats['samples']} samples, "
              f"{stats['symbolized_frame_share']:.1%} of frames symbolized")
    return 0


def _cmd_characterize(args: argparse.Namespace, beam_args: list[str]) -> int:
    from pipeline.characterize import DEAD_LETTERS, dead_letters, summarize_workloads, write_report
    from pipeline.dataset import DatasetConfig

    config = DatasetConfig(labels=_label_scheme(args), **_context_options(args),
                           **symbol_options(args))
    writable_dir(args.out)
    workloads = summarize_workloads(_profile_inputs(args.profiles, args.version_label),
                                    config, args.out, beam_args, profile_format=args.format)
    dead = dead_letters(args.out)
    report = write_report(workloads, config, args.out)
    print(f"report: {printable(report)}; {len(dead)} bad records or "
          f"files in {len({d['file'] for d in dead})} files (see {DEAD_LETTERS})")
    return 0


def _add_boundaries(p: argparse.ArgumentParser) -> None:
    from core import lifetimes

    p.add_argument("--boundaries", type=options.boundaries, metavar="B1,B2,...",
                   help="class upper bounds on the label clock, strictly increasing, "
                        f"{lifetimes.MIN_BOUNDARY:g} to {lifetimes.MAX_BOUNDARY:g}, at most "
                        f"{lifetimes.MAX_BOUNDARIES} (default: 10,...,1e6 ms)")


def _add_profile_inputs(p: argparse.ArgumentParser) -> None:
    from core import context

    p.add_argument("--profiles", action="append", nargs="+", required=True,
                   metavar="FILE|DIR|GLOB",
                   help="profile files, directories of them, or quoted globs; repeat for "
                        "inputs with different --version-label")
    p.add_argument("--version-label", action="append", metavar="LABEL",
                   help="label for the matching --profiles (default: each header's own)")
    p.add_argument("--format", default="auto", metavar="auto|ltprof|IMPORTER",
                   help="the profiles' format: auto (recognise each file; one nothing "
                        "recognises is a dead letter), ltprof (our sampler's), or an "
                        "importer's (heaptrack, tcmalloc: converted on the fly)")
    p.add_argument("--out", required=True, metavar="DIR")
    p.add_argument("--max-frames", type=options.positive_int(context.MAX_FRAMES_LIMIT),
                   default=None, metavar=f"1-{context.MAX_FRAMES_LIMIT}",
                   help=f"frames kept per context, from the allocation site (default: "
                        f"{context.MAX_FRAMES}; no recorded stack is deeper than "
                        f"{context.MAX_FRAMES_LIMIT})")
    p.add_argument("--wrapper", action="append", metavar="NAME",
                   help="a function of the program that allocates on its callers' behalf "
                        "(qualified name, e.g. zmalloc or Pool::Take); repeatable")
    p.add_argument("--no-detect-wrappers", action="store_true",
                   help="do not add the wrappers found in the data")
    p.add_argument("--no-builtin-wrappers", action="store_true",
                   help="do not strip the built-in list of well-known allocation APIs")
    add_symbol_options(p)
    p.add_argument("--clock", choices=("wall", "bytes"), default="wall",
                   help="label clock: wall time (ms) or allocated bytes")
    _add_boundaries(p)


class _BadOptionValue(UsageError):
    def __init__(self, subcommand: str, message: str):
        super().__init__(message)
        self.subcommand = subcommand


class _SubcommandParser(argparse.ArgumentParser):
    """A subcommand's parser: a bad option value (a type= function of
    core/options.py refused it, or an unknown choice) is a UsageError that main
    prints as one line, like every other error a user can fix."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("exit_on_error", False)
        super().__init__(*args, **kwargs)

    def parse_known_args(self, args=None, namespace=None):
        try:
            return super().parse_known_args(args, namespace)
        except argparse.ArgumentError as e:
            raise _BadOptionValue(self.prog.split()[-1], str(e)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lifetime",
        description="Learned allocation-lifetime models: profile, build datasets, train, "
                    "evaluate, export.")
    parser.add_argument("--verbose", action="store_true",
                        help="also print third-party libraries' start-up messages "
                             "(TensorFlow's GPU probe and graph notices, Beam's optional "
                             "cloud clients), which are hidden otherwise")
    sub = parser.add_subparsers(dest="subcommand", required=True, metavar="SUBCOMMAND",
                                parser_class=_SubcommandParser)

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
    p.set_defaults(func=_cmd_profile)

    p = sub.add_parser("evaluate-online",
                       help="online predictions in profiles against the actual lifetimes")
    p.add_argument("profiles", nargs="+", metavar="PROFILE")
    p.add_argument("--model", required=True, metavar="DIR",
                   help="the model (or its export) the profiles were taken with: its context "
                        "definition cuts the stacks into contexts")
    p.add_argument("--clock", choices=("wall", "bytes"), default="wall")
    _add_boundaries(p)
    p.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    add_symbol_options(p)
    p.set_defaults(func=_cmd_evaluate_online)

    p = sub.add_parser("inspect", help="print a profile file's header, counts and samples")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("--samples", type=options.int_range(0, options.MAX_INSPECT_SAMPLES),
                   default=5, metavar=f"0-{options.MAX_INSPECT_SAMPLES}",
                   help="samples to show (default: 5)")
    p.set_defaults(func=_cmd_inspect)

    p = sub.add_parser(
        "build-dataset", help="Beam job: profiles -> labeled, tokenized TFRecord examples",
        description="Unknown options are passed to Beam unchanged (e.g. --runner=FlinkRunner "
                    "--flink_master=[local] --direct_num_workers=2).")
    _add_profile_inputs(p)
    p.add_argument("--vocab", metavar="FILE",
                   help="use this vocabulary instead of building one (e.g. a test set)")
    p.add_argument("--like", metavar="DATASET",
                   help="cut contexts exactly as this (training) dataset did and use its "
                        "vocabulary: for test versions")
    p.add_argument("--vocab-size", type=options.positive_int(options.MAX_VOCAB_SIZE),
                   default=5000, metavar=f"1-{options.MAX_VOCAB_SIZE}",
                   help="tokens kept, besides the reserved ones (default: %(default)s)")
    p.add_argument("--eval-percent", type=options.int_range(0, 100), default=20,
                   metavar="0-100", help="share of contexts in the eval split (default: "
                                         "%(default)s)")
    p.add_argument("--shards", type=options.positive_int(options.MAX_SHARDS), default=1,
                   metavar=f"1-{options.MAX_SHARDS}", help="files per split (default: 1)")
    p.set_defaults(func=_cmd_build_dataset, beam=True)

    p = sub.add_parser("characterize", help="Markdown report with plots per workload",
                       description="Unknown options are passed to Beam unchanged.")
    _add_profile_inputs(p)
    p.set_defaults(func=_cmd_characterize, beam=True)

    from model.cli import add_subcommands as add_model_subcommands  # train, evaluate, report

    add_model_subcommands(sub)

    from export.cli import add_parser as add_export_subcommand  # export

    add_export_subcommand(sub)

    from simulator.cli import add_parser as add_simulate_subcommand  # simulate

    add_simulate_subcommand(sub)
    from interop.pprof.cli import add_parser as add_pprof_subcommand  # pprof
    add_pprof_subcommand(sub)
    from interop.importing import add_parser as add_import_subcommand  # import
    add_import_subcommand(sub)
    from lifetime.run import add_parser as add_run_subcommand  # run
    add_run_subcommand(sub)
    return parser


class _EscapeArguments(logging.Filter):
    """Values put into a log line (file names, program names, symbols) are escaped like
    every other line the command prints; the message's own text is left as it is."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(printable(a) if isinstance(a, (str, bytes)) else a
                                for a in record.args)
        return True


class _DropNoise(logging.Filter):
    """Beam warns at import about optional Google Cloud clients we never use."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "apitools not found" not in record.getMessage()


def main(argv: list[str] | None = None) -> int:
    """Runs one subcommand.  A LifetimeError (bad input, option or environment) or an
    OSError naming a file ends it with one line on stderr and status 1; anything else
    is a bug and keeps its traceback."""
    parser = build_parser()
    try:
        args, rest = parser.parse_known_args(argv)
    except _BadOptionValue as e:  # before any work
        print(f"lifetime {e.subcommand}: error: {printable(str(e))}", file=sys.stderr)
        return 1
    # Before any subcommand imports TensorFlow (they defer it): on a machine without a GPU
    # its C++ side logs a CUDA probe failure and graph-rewrite notices at error level;
    # the failures that matter reach us as Python exceptions.
    if not args.verbose:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:
        if not args.verbose:
            handler.addFilter(_DropNoise())
        handler.addFilter(_EscapeArguments())
    if rest and not getattr(args, "beam", False):
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    try:
        if getattr(args, "beam", False):
            from pipeline.runner import pipeline_options

            pipeline_options(rest)  # every extra argument must be a Beam option
            return args.func(args, rest)
        return args.func(args)
    except LifetimeError as e:
        message = str(e)
    except OSError as e:
        if e.filename is None:
            raise
        message = f"{e.filename}: {e.strerror}"
    print(f"lifetime {args.subcommand}: error: {printable(message)}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
