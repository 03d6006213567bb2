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
and dropped; bad input raises `lifetime.errors.InputError` naming the file.
"""

from __future__ import annotations

import importlib

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
