"""`lifetime build-dataset` and `lifetime characterize`, the Beam jobs (registered by
lifetime/cli.py through `add_parser`).

Apache Beam is imported inside functions: `lifetime --help` must not pay for it.
Arguments the parser does not know are the job's Beam pipeline options
(`set_defaults(beam=True)`: main passes them on as `beam_args`).
"""

from __future__ import annotations

import argparse
import os

from core import context, options, version_roles
from core.errors import LifetimeError, UsageError, printable
from core.files import writable_dir
from core.label_options import add_boundaries, label_scheme
from core.symbol_options import add_symbol_options, symbol_options
from pipeline.manifest import dataset_context


def add_parser(sub) -> None:
    """Adds build-dataset and characterize to the `lifetime` subparsers."""
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
    p.add_argument("--selection-version", action="append", default=[], metavar="LABEL",
                   help="a version the choices given here (--wrapper, ...) were made on: "
                        "recorded in the manifest's roles.selection, so no report calls it "
                        "test (core/version_roles.py); repeatable")
    p.add_argument("--detect-profiles", action="append", nargs="+", default=[],
                   metavar="FILE|DIR|GLOB",
                   help="profiles read only to detect wrappers (e.g. the selection "
                        "versions'): their stacks join the dataset's in detection, none of "
                        "them is in the dataset, and their --detect-version-label is recorded "
                        "as selection; repeatable")
    p.add_argument("--detect-version-label", action="append", metavar="LABEL",
                   help="label for the matching --detect-profiles")
    p.set_defaults(func=run_build_dataset, beam=True)

    p = sub.add_parser("characterize", help="Markdown report with plots per workload",
                       description="Unknown options are passed to Beam unchanged.")
    _add_profile_inputs(p)
    p.set_defaults(func=run_characterize, beam=True)


def _add_profile_inputs(p: argparse.ArgumentParser) -> None:
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
    p.add_argument("--size-feature", action="store_true",
                   help="key contexts on the object's size as well as its stack: frame 0 "
                        "is the size's bucket (<size$4096>, 4 per power of two), above "
                        "max-frames - 1 frames of the stack (core/context.py)")
    p.add_argument("--no-detect-wrappers", action="store_true",
                   help="do not add the wrappers found in the data")
    p.add_argument("--no-builtin-wrappers", action="store_true",
                   help="do not strip the built-in list of well-known allocation APIs")
    add_symbol_options(p)
    p.add_argument("--clock", choices=("wall", "bytes"), default="wall",
                   help="label clock: wall time (ms) or allocated bytes")
    add_boundaries(p)


def _check_beam_args(beam_args: list[str]) -> None:
    """Every argument the parser did not know must be a Beam option (before any work)."""
    from pipeline.runner import pipeline_options

    pipeline_options(beam_args)


def _profile_inputs(groups: list[list[str]], labels: list[str] | None,
                   flags: tuple[str, str] = ("--profiles", "--version-label")) -> list[tuple[str, str]]:
    """(pattern, version label) pairs: the i-th --version-label labels every file,
    directory or glob given to the i-th --profiles (FLAGS: the two options' names)."""
    labels = labels or []
    if len(labels) > len(groups):
        raise UsageError(f"more {flags[1]} than {flags[0]}")
    return [(pattern, labels[i] if i < len(labels) else "")
            for i, group in enumerate(groups) for pattern in group]


def _context_options(args: argparse.Namespace) -> dict:
    """DatasetConfig fields for the context definition (core/context.py)."""
    if getattr(args, "like", None):
        if (args.wrapper or args.no_builtin_wrappers or args.max_frames is not None
                or getattr(args, "size_feature", False)):
            raise UsageError("--like takes the context definition from the dataset; "
                             "drop --wrapper/--no-builtin-wrappers/--max-frames/--size-feature")
        try:
            return {"context": dataset_context(args.like), "detect_wrappers": False}
        except LifetimeError as e:
            raise UsageError(f"--like {args.like}: {e}") from e
    definition = context.ContextDefinition.make(
        max_frames=args.max_frames or context.MAX_FRAMES,
        configured=args.wrapper or (), builtin=not args.no_builtin_wrappers,
        size_feature=getattr(args, "size_feature", False))
    return {"context": definition, "detect_wrappers": not args.no_detect_wrappers}


def run_build_dataset(args: argparse.Namespace, beam_args: list[str]) -> int:
    _check_beam_args(beam_args)
    version_roles.refuse_reserved(args.version_label or (), "test" if args.like else "training",
                                  "--version-label")
    version_roles.refuse_reserved(args.selection_version, "selection", "--selection-version")
    detect_inputs = _profile_inputs(args.detect_profiles, args.detect_version_label,
                                    ("--detect-profiles", "--detect-version-label"))
    version_roles.refuse_reserved([lbl for _, lbl in detect_inputs if lbl], "selection",
                                  "--detect-version-label")
    if detect_inputs and (args.like or args.no_detect_wrappers):
        raise UsageError("--detect-profiles are read only to detect wrappers: not with "
                         "--like or --no-detect-wrappers")
    from pipeline.dataset import DatasetConfig, build_dataset

    config = DatasetConfig(vocab_size=args.vocab_size, eval_percent=args.eval_percent,
                           num_shards=args.shards, labels=label_scheme(args),
                           selection_versions=tuple(args.selection_version),
                           detect_inputs=tuple(detect_inputs),
                           **_context_options(args), **symbol_options(args))
    vocab = args.vocab or (os.path.join(args.like, "vocab.txt") if args.like else None)
    writable_dir(args.out)
    manifest = build_dataset(_profile_inputs(args.profiles, args.version_label), args.out,
                             config, vocab_path=vocab, beam_args=beam_args,
                             profile_format=args.format)
    # Names below come from the profiles (program names, symbols): printed escaped.
    wrappers = manifest["context"]["detected_wrappers"]
    print(f"context: {manifest['context']['max_frames']} frames"
          + (" (the size frame, then the stack's)" if manifest["context"].get("size_feature")
             else " below the site") + "; "
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


def run_characterize(args: argparse.Namespace, beam_args: list[str]) -> int:
    _check_beam_args(beam_args)
    from pipeline.characterize import DEAD_LETTERS, dead_letters, summarize_workloads, write_report
    from pipeline.dataset import DatasetConfig

    config = DatasetConfig(labels=label_scheme(args), **_context_options(args),
                           **symbol_options(args))
    writable_dir(args.out)
    workloads = summarize_workloads(_profile_inputs(args.profiles, args.version_label),
                                    config, args.out, beam_args, profile_format=args.format)
    dead = dead_letters(args.out)
    report = write_report(workloads, config, args.out)
    print(f"report: {printable(report)}; {len(dead)} bad records or "
          f"files in {len({d['file'] for d in dead})} files (see {DEAD_LETTERS})")
    return 0
