"""Profile sources: the file formats the read step takes, by name.

A source is a name (the `--format` value), `sniff(path) -> bool` (does this file look
like one of mine?), `open(path)` (a context manager giving a reader with the
interface of `profile_format.ProfileReader`: header, stacks, mappings, samples(),
kept, dropped, problems, trailer) and the globs a directory given to `--profiles`
stands for.  Built in: `ltprof`, our sampler's files.  Every importer listed in
`interop.IMPORTERS` is a source too: its `open` converts the file into a temporary
`.ltprof` (removed afterwards) and reads that, so imported data goes through the same
checks, dead letters and contexts as ours.  A new source is a new module registered
with `register` (an importer: a new entry in `interop.IMPORTERS`).

`--format auto` (the default) takes, for each file, the first source that recognises
it, in registration order; a file none recognises is a dead letter naming it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import struct
import tempfile
from typing import Callable, ContextManager, Iterator

import interop
from core.errors import LifetimeError, UsageError
from profile_format import ProfileReader
from profile_format import container

LOG = logging.getLogger(__name__)
AUTO = "auto"


@dataclasses.dataclass(frozen=True)
class Source:
    name: str
    sniff: Callable[[str], bool]
    open: Callable[[str], ContextManager]
    globs: tuple[str, ...] = ()     # what a directory of such files holds ("*.ltprof")


class ImportFailed(container.ProfileFormatError):
    """An importer could not convert a file (category "import_failed")."""


_SOURCES: dict[str, Source] = {}


def register(source: Source) -> Source:
    """Adds a source (a later one with the same name replaces it)."""
    _SOURCES[source.name] = source
    return source


def unregister(name: str) -> None:
    _SOURCES.pop(name, None)


def get(name: str) -> Source:
    """The source a --format value names (UsageError for an unknown one)."""
    if name not in _SOURCES:
        raise UsageError(f"unknown profile format {name!r} (known: {AUTO}, "
                         f"{', '.join(_SOURCES)})")
    return _SOURCES[name]


def check_format(name: str) -> str:
    """A --format value checked before the job starts: known, and its importer loads."""
    if name != AUTO:
        source = get(name)
        if isinstance(source.sniff, _Importer):
            source.sniff.module()
    return name


def directory_globs(fmt: str) -> tuple[str, ...]:
    """The file globs a directory given to --profiles stands for under a format: the
    sources' own (auto), or every file in it for a source that names none."""
    if fmt == AUTO:
        return tuple(g for s in _SOURCES.values() for g in s.globs)
    return get(fmt).globs or ("*",)


def detect(path: str) -> Source | None:
    """The first source that recognises the file, or None.  A source whose sniff
    fails (an importer that does not load, a file it cannot read) does not."""
    for source in _SOURCES.values():
        try:
            if source.sniff(path):
                return source
        except (ImportError, OSError) as e:
            LOG.debug("%s: %s cannot sniff it (%s)", path, source.name, e)
    return None


def resolve(path: str, fmt: str) -> Source:
    """The source that reads `path`: the one named, or (auto) the one that recognises
    it.  A file nothing recognises raises ProfileFormatError: why it cannot be opened
    if it cannot, else "unsupported"."""
    if fmt != AUTO:
        return get(fmt)
    source = detect(path)
    if source is None:
        f, _ = container.open_regular(path)  # raises for a missing or non-regular file
        f.close()
        raise container.ProfileFormatError(
            path, f"unsupported: no profile source recognises it (tried {', '.join(_SOURCES)})")
    return source


# -- ltprof: our sampler's files --------------------------------------------------


def _looks_like_ltprof(path: str) -> bool:
    """By name, or by content: a first record whose length checksum holds (the
    TFRecord framing every .ltprof starts with)."""
    if path.endswith(container.SUFFIX):
        return True
    f, _ = container.open_regular(path)
    with f:
        head = f.read(12)
    if len(head) < 12:
        return False
    (length_crc,) = struct.unpack("<I", head[8:])
    return container.masked_crc32c(head[:8]) == length_crc


@contextlib.contextmanager
def _open_ltprof(path: str) -> Iterator[ProfileReader]:
    yield ProfileReader(path)


def _sniff_ltprof(path: str) -> bool:
    try:
        return _looks_like_ltprof(path)
    except container.ProfileFormatError:
        return False


LTPROF = register(Source("ltprof", _sniff_ltprof, _open_ltprof, ("*" + container.SUFFIX,)))


# -- importers (interop/) ----------------------------------------------------------


class _Importer:
    """An importer module (interop's contract: sniff, convert) as a source's sniff;
    loaded on first use, so a missing importer fails only the formats that need it."""

    def __init__(self, name: str, load: Callable | None = None):
        self.name = name
        self._load = load

    def module(self):
        try:
            return self._load() if self._load else interop.importer(self.name)
        except ImportError as e:
            raise UsageError(f"profile format {self.name!r}: its importer "
                             f"{interop.IMPORTERS.get(self.name, self.name)} is not "
                             f"available ({e})") from e

    def __call__(self, path: str) -> bool:
        try:
            module = self.module()
        except UsageError as e:
            raise ImportError(str(e)) from e
        return bool(module.sniff(path))


def importer_source(name: str, load: Callable | None = None) -> Source:
    """The source of an importer: interop.importer(name), or what `load()` returns."""
    sniff = _Importer(name, load)

    @contextlib.contextmanager
    def open_imported(path: str) -> Iterator[ProfileReader]:
        module = sniff.module()
        with tempfile.TemporaryDirectory(prefix=f"lifetime-{name}-") as tmp:
            out = os.path.join(tmp, os.path.basename(path) + container.SUFFIX)
            try:
                summary = module.convert(path, out)
            except (LifetimeError, OSError) as e:
                raise ImportFailed(path, f"import_failed: {name}: {e}") from e
            except Exception as e:  # noqa: BLE001 - an importer's bug fails its file, not the job
                LOG.exception("%s: the %s importer failed", path, name)
                raise ImportFailed(path, f"import_failed: {name}: {type(e).__name__}: {e} "
                                         "(an importer bug; the traceback is logged)") from e
            reader = ProfileReader(out)
            # What the importer kept but found wrong (a cut tail, malformed lines) is
            # dead-lettered against the original file, like a reader's own problems.
            reader.problems.extend(container.ProfileFormatError(path, f"import_problem: {name}: {p}")
                                   for p in getattr(summary, "problems", ()))
            yield reader

    return Source(name, sniff, open_imported)


def _register_importers() -> None:
    for name in interop.IMPORTERS:
        register(importer_source(name))


_register_importers()
