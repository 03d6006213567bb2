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
input raises `lifetime.errors.InputError` naming the file.  Problems in a usable file
(malformed lines, a cut tail) are kept in `problems`, first of each kind: `lifetime
import` prints them and the dataset job dead-letters them.
"""

from __future__ import annotations

import dataclasses
import importlib


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

IMPORTERS = {
    "heaptrack": "interop.heaptrack",
    "tcmalloc": "interop.tcmalloc",
}


def importer(name: str):
    """The importer module for a --format value."""
    from lifetime.errors import UsageError
    if name not in IMPORTERS:
        raise UsageError(f"unknown profile format {name!r} (known: {', '.join(sorted(IMPORTERS))})")
    return importlib.import_module(IMPORTERS[name])
