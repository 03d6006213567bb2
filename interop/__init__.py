"""Other profilers' formats, in and out.

* out: `interop.pprof` writes our profiles as pprof `profile.proto` (`lifetime pprof`);
* in: each importer turns another profiler's recording into our `.ltprof` format
  (`lifetime import --format NAME`), so imported data goes through the same dataset
  job, dead letters and reports as our sampler's.

An importer is a module listed in `IMPORTERS` that defines

    NAME: str                                   # the --format value
    def sniff(path: str) -> bool                # does this file look like ours?
    def convert(path: str, out_path: str, **options) -> ImportSummary

`convert` writes one `.ltprof` (Header.imported_from = NAME) and returns what it kept
and dropped (an `ImportSummary`, or a subclass with the format's own counters); bad
input raises `core.errors.InputError` naming the file.  Problems in a usable file
(malformed lines, a cut tail) are kept in `problems`, first of each kind: `lifetime
import` prints them and the dataset job dead-letters them.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import os

from elftools.elf.elffile import ELFFile

from core import symbolize
from core.errors import UsageError
from profile_format.container import open_regular

@dataclasses.dataclass
class ImportSummary:
    """What one import kept and dropped."""

    source: str
    output: str
    format: str = ""
    samples: int = 0             # samples written
    censored: int = 0
    stacks: int = 0
    mappings: int = 0
    dropped: dict = dataclasses.field(default_factory=dict)   # reason -> count
    modules: dict = dataclasses.field(default_factory=dict)   # status -> [paths]
    problems: list = dataclasses.field(default_factory=list)  # first of each kind
    notes: list = dataclasses.field(default_factory=list)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def module_file(path: str, st: os.stat_result | None = None) -> tuple:
    """("ok", [(p_vaddr, p_memsz, p_offset, p_flags) of each PT_LOAD], build id) of a
    module file a recording names, or ("missing", [], b"") when it cannot be read as
    ELF (never raises).  Cached by path and identity (device, inode, size, mtime):
    recordings of one program read each of its libraries once."""
    try:
        st = st or os.stat(path)
    except (OSError, ValueError):  # ValueError: a NUL in a recorded path
        return ("missing", [], b"")
    return _module_file(path, (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))


@functools.lru_cache(maxsize=256)
def _module_file(path: str, identity: tuple) -> tuple:
    try:
        with open_regular(path)[0] as f:
            elf = ELFFile(f)
            loads = [(s["p_vaddr"], s["p_memsz"], s["p_offset"], s["p_flags"])
                     for s in elf.iter_segments() if s["p_type"] == "PT_LOAD"]
            return ("ok", loads, symbolize.read_build_id(elf))
    except Exception:  # missing, unreadable, not ELF: the caller counts it
        return ("missing", [], b"")


IMPORTERS = {
    "heaptrack": "interop.heaptrack",
    "tcmalloc": "interop.tcmalloc",
}


def importer(name: str):
    """The importer module for a --format value."""
    if name not in IMPORTERS:
        raise UsageError(f"unknown profile format {name!r} (known: {', '.join(sorted(IMPORTERS))})")
    return importlib.import_module(IMPORTERS[name])
