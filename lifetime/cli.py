"""`lifetime SUBCOMMAND ...`: one command line for every stage of the pipeline.

This module defines no subcommand: it lists the modules that register them
(SUBCOMMAND_MODULES, each with `add_parser(sub)`), parses, filters third-party log
noise, and turns a LifetimeError into one line on stderr and exit status 1."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from allocator import run as run_cli
from core.errors import LifetimeError, UsageError, printable
from export import cli as export_cli
from interop import importing
from interop.pprof import cli as pprof_cli
from model import cli as model_cli
from pipeline import cli as pipeline_cli
from profiler import cli as profiler_cli
from simulator import cli as simulator_cli
from simulator import fragmentation as fragmentation_cli

# Every subcommand is registered by `add_parser(sub)` of the module that owns its work
# (each parser's func= runs it); here they are only listed, in `lifetime --help` order.
SUBCOMMAND_MODULES = (
    profiler_cli,       # profile, inspect
    pipeline_cli,       # build-dataset, characterize
    model_cli,          # evaluate-online, train, evaluate, report
    export_cli,         # export
    simulator_cli,      # simulate
    fragmentation_cli,  # fragmentation
    pprof_cli,          # pprof
    importing,          # import
    run_cli,            # run
)


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
                             "cloud clients) and their INFO log lines, which are hidden "
                             "otherwise")
    sub = parser.add_subparsers(dest="subcommand", required=True, metavar="SUBCOMMAND",
                                parser_class=_SubcommandParser)

    for module in SUBCOMMAND_MODULES:
        module.add_parser(sub)
    return parser


class _EscapeArguments(logging.Filter):
    """Values put into a log line (file names, program names, symbols) are escaped like
    every other line the command prints; the message's own text is left as it is."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(printable(a) if isinstance(a, (str, bytes)) else a
                                for a in record.args)
        return True


# The project's top-level packages: their loggers speak at INFO.  Every other logger is a
# library's, and below WARNING it is start-up or progress chatter the command's own lines
# already cover (Beam's type-hint conversions, state cache, file moves and optional
# BigQuery client; matplotlib's categorical-units and font-cache notices; TensorFlow's
# "Assets written"): hidden unless --verbose.  tests/test_cli_noise.py checks that every
# package in the tree is listed.
OWN_LOGGERS = ("allocator", "core", "export", "interop", "lifetime", "model", "pipeline",
               "profiler", "profile_format", "simulator")


class _DropNoise(logging.Filter):
    """Drops third-party records below WARNING (OWN_LOGGERS), and the warning Beam
    gives at import about optional Google Cloud clients we never use."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING and record.name.split(".", 1)[0] not in OWN_LOGGERS:
            return False
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
        if getattr(args, "beam", False):  # the job checks them: Beam pipeline options
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
