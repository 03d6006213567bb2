"""The symbolizer's search options, one definition for every command that symbolizes
(build-dataset, characterize, evaluate-online, simulate, pprof)."""

from __future__ import annotations

import argparse

from core import symbolize


def add_symbol_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--debug-dir", action="append", metavar="DIR",
                   help="directory of separate debug files (.build-id/xx/yyyy.debug, "
                        ".gnu_debuglink targets); repeatable (default: /usr/lib/debug)")
    p.add_argument("--sysroot", metavar="DIR",
                   help="read the profiled binaries from under DIR first (another machine's "
                        "files, or packages unpacked under a private root); debug "
                        "directories are searched under it too")


def symbol_options(args: argparse.Namespace) -> dict:
    """debug_dirs and sysroot, checked (DatasetConfig fields, ModuleCache arguments)."""
    symbolize.check_search_paths(args.debug_dir, args.sysroot)
    return {"debug_dirs": tuple(args.debug_dir or symbolize.DEFAULT_DEBUG_DIRS),
            "sysroot": args.sysroot or ""}
