"""`lifetime import --format heaptrack|tcmalloc|auto FILE... -o OUT_DIR`.

Generic over `interop.IMPORTERS`: each input becomes one `<input name>.ltprof` in
OUT_DIR through its importer's `convert`; `auto` asks each registered importer's
`sniff` in name order and takes the first that recognizes the file.  Like the other
commands over many files, a bad input is named, counted and skipped, and the others
are still imported (an importer's unexpected exception too: it is a bug, logged with
its traceback, and costs only its file); the command fails (exit 1) only when no input could be imported.
What each import kept and dropped is printed (one JSON object per input) and written
to OUT_DIR/import_summary.json.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys

import interop
from core.errors import InputError, LifetimeError, UsageError, printable
from core.files import writable_dir, write_json
from profile_format.container import SUFFIX

LOG = logging.getLogger(__name__)
_COMPRESSION = re.compile(r"(\.raw)?(\.zst|\.gz|\.txt)?$")


def add_parser(sub) -> None:
    p = sub.add_parser(
        "import", help="convert other profilers' recordings (heaptrack, TCMalloc) to .ltprof",
        description="Converts each FILE into one .ltprof in OUT_DIR (Header.imported_from "
                    "names the profiler), ready for build-dataset, characterize and simulate. "
                    "See each importer's docstring (interop/heaptrack.py, interop/tcmalloc.py) "
                    "for what is carried over.")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("--format", default="auto",
                   choices=["auto", *sorted(interop.IMPORTERS)],
                   help="the recording's profiler (default: auto, by sniffing each file)")
    p.add_argument("-o", "--out", required=True, metavar="OUT_DIR")
    p.add_argument("--version-label", default="", metavar="L",
                   help="Header.version_label of the imported profiles")
    p.add_argument("--sysroot", default=None, metavar="DIR",
                   help="read the recorded modules' files under DIR first (recordings "
                        "from another machine)")
    p.set_defaults(func=run)


def detect(path: str) -> str:
    """The --format of a file, by each importer's sniff (name order)."""
    for name in sorted(interop.IMPORTERS):
        try:
            module = interop.importer(name)
        except ModuleNotFoundError as e:  # registered but not installed: say so, go on
            if e.name != interop.IMPORTERS[name]:
                raise
            LOG.warning("importer %s (%s) is not installed; not tried", name, e.name)
            continue
        if module.sniff(path):
            return name
    raise InputError(f"{path}: not a recording any importer recognizes "
                     f"(known: {', '.join(sorted(interop.IMPORTERS))}); give --format")


def output_name(path: str) -> str:
    """heaptrack.redis.123.raw.zst -> heaptrack.redis.123.ltprof"""
    base = os.path.basename(path.rstrip("/")) or "profile"
    return _COMPRESSION.sub("", base) + SUFFIX


def import_files(files: list[str], fmt: str, out_dir: str, **options) -> tuple[list, list]:
    """(summaries of the imported files, [(file, error message)] of the others)."""
    if fmt != "auto":
        interop.importer(fmt)  # UsageError for an unknown name
    out_dir = writable_dir(out_dir)
    done, failed = [], []
    names: dict[str, str] = {}
    for path in files:
        out = os.path.join(out_dir, output_name(path))
        if out in names:  # two inputs of one name: never overwrite the first one's output
            failed.append((path, f"{path}: its output {out} is already written for {names[out]}"))
            continue
        names[out] = path
        try:
            name = detect(path) if fmt == "auto" else fmt
            done.append(interop.importer(name).convert(path, out, **options).to_json())
        except UsageError:
            raise
        except LifetimeError as e:
            failed.append((path, str(e)))
        except OSError as e:  # writing the output (a full disk): the environment, not a bug
            failed.append((path, f"{e.filename or out}: {e.strerror or e}"))
        except Exception as e:  # noqa: BLE001 - an importer's bug costs its file, not the others
            LOG.exception("%s: import failed", path)  # a bug: its traceback is kept
            failed.append((path, f"{path}: import failed: {type(e).__name__}: {e} "
                                 "(an importer bug; traceback above)"))
    return done, failed


def run(args) -> int:
    done, failed = import_files(args.files, args.format, args.out,
                                version_label=args.version_label, sysroot=args.sysroot)
    for summary in done:
        print(json.dumps(summary, sort_keys=True))
    for path, message in failed:
        print(f"lifetime import: skipped {printable(message)}", file=sys.stderr)
    write_json(os.path.join(args.out, "import_summary.json"),
               {"imported": done, "failed": [{"file": p, "error": m} for p, m in failed]})
    if not done:
        raise InputError(f"none of {len(args.files)} file(s) could be imported"
                         + (f"; first: {failed[0][1]}" if failed else ""))
    return 0
