"""Fuzz targets: each takes one input (the bytes of a would-be file) and must either
succeed or raise its expected errors (`expected(name)`: ProfileFormatError for our
readers; any LifetimeError -- InputError naming the file -- for the importers and the
pprof converter, which refuse bad input with one).  Any other exception, a hang or
unbounded memory is a finding."""

from __future__ import annotations

import os
import tempfile

from profile_format import container
from profile_format.container import ProfileFormatError

# Expected outcomes of bad input; everything else propagates to libFuzzer.
EXPECTED = (ProfileFormatError,)

_SCRATCH = os.path.join("/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir(),
                        f"lifetime-fuzz-{os.getpid()}.ltprof")


def _as_file(data: bytes) -> str:
    with open(_SCRATCH, "wb") as f:
        f.write(data)
    return _SCRATCH


def records(data: bytes) -> None:
    """The TFRecord container: framing, lengths, checksums."""
    for _ in container.iter_records(_as_file(data)):
        pass


def chunk(data: bytes) -> None:
    """One record's payload as a ProfileChunk."""
    container.parse_chunk("<fuzz>", 0, data)


def profile(data: bytes) -> None:
    """The whole-file reader in lenient mode (problems listed, good part kept)."""
    errors: list = []
    container.read_profile(_as_file(data), errors)


def stream(data: bytes) -> None:
    """The streaming reader the dataset job and evaluate-online use, lenient."""
    reader = container.ProfileReader(_as_file(data))
    for _ in reader.samples():
        pass


def inspect(data: bytes) -> None:
    """`lifetime inspect`'s summary (streamed)."""
    from profile_format.summary import summarize_file

    summarize_file(_as_file(data), max_samples=5)


_READ_FN = None


def read_step(data: bytes) -> None:
    """The dataset job's read step (ProfileToContextsFn), outputs drained."""
    global _READ_FN
    if _READ_FN is None:
        from pipeline.dataset import DatasetConfig, ProfileToContextsFn

        _READ_FN = ProfileToContextsFn(DatasetConfig())
        _READ_FN.setup()
    for _ in _READ_FN.process((_as_file(data), "")):
        pass


# -- importers and the pprof converter -----------------------------------------------

# A recording's name as heaptrack writes it (the importer reads a pid from it).
_RECORDING = os.path.join(os.path.dirname(_SCRATCH), f"heaptrack.fuzz.{os.getpid()}.raw")
_OUT = _SCRATCH + ".out.ltprof"


def _write(path: str, data: bytes) -> str:
    with open(path, "wb") as f:
        f.write(data)
    return path


def heaptrack(data: bytes) -> None:
    """`lifetime import --format heaptrack` on the bytes as a file: raw or interpreted,
    plain, zstd or gzip (the importer tells them apart by content), and its sniff."""
    from interop import heaptrack as importer

    path = _write(_RECORDING, data)
    importer.sniff(path)
    importer.convert(path, _OUT)


_ZSTD = None


def heaptrack_zst(data: bytes) -> None:
    """The heaptrack importer on the bytes zstd-compressed, as `heaptrack --raw` writes
    them, so mutations reach the parser behind the decompressor (the first byte picks
    the frame layout: one frame, or two frames cut at a fuzzed place)."""
    import zstandard

    from interop import heaptrack as importer

    global _ZSTD
    if not data:
        return
    if _ZSTD is None:  # one compressor: making one allocates its whole window
        _ZSTD = zstandard.ZstdCompressor(level=1)
    body = data[1:]
    cut = data[0] * len(body) // 255
    c = _ZSTD
    packed = c.compress(body) if data[0] % 2 else c.compress(body[:cut]) + c.compress(body[cut:])
    importer.convert(_write(_RECORDING + ".zst", packed), _OUT)


def tcmalloc(data: bytes) -> None:
    """`lifetime import --format tcmalloc` on the bytes as a file (gzipped or plain
    pprof), and its sniff."""
    from interop import tcmalloc as importer

    path = _write(_SCRATCH + ".pb", data)
    importer.sniff(path)
    importer.convert(path, _OUT)


_PPROF_CACHE = None


def pprof(data: bytes) -> None:
    """`lifetime pprof` on a profile built from the bytes: one chunk whose payload they
    are, framed here with valid checksums, so that mutations reach the converter rather
    than stop at the framing (`records` and `chunk` fuzz that); both views, classes,
    serialized."""
    global _PPROF_CACHE
    import io

    from interop.pprof import convert
    from core import symbolize

    if _PPROF_CACHE is None:  # one ELF cache for the campaign: each module read once
        _PPROF_CACHE = symbolize.ModuleCache()
    framed = io.BytesIO()
    container.write_record(framed, data)
    view = convert.VIEWS[len(data) % 2]
    builder, _ = convert.build([_as_file(framed.getvalue())], view=view,
                               group_by_class=len(data) % 3 == 0, cache=_PPROF_CACHE)
    builder.serialize()


def trace(data: bytes) -> None:
    """The simulator's trace reader: header and every record bounded as the engine
    bounds them (simulator.trace.check_trace_bytes, pinned to the engine's --check by
    tests/test_simulator_hostile.py)."""
    from simulator.trace import check_trace_bytes

    check_trace_bytes(data)


_PARSER = None


def options(data: bytes) -> None:
    """The `lifetime` command line: NUL-separated arguments parsed by the real parser
    and its option types, to a namespace, a UsageError (a bad value: core/options.py)
    or argparse's own error for a bad structure (SystemExit); no command runs."""
    import contextlib
    import io

    global _PARSER
    if _PARSER is None:
        from lifetime.cli import build_parser

        _PARSER = build_parser()
    argv = data.decode("utf-8", "surrogateescape").split("\0")
    with contextlib.redirect_stderr(io.StringIO()):
        try:
            _PARSER.parse_known_args(argv)
        except SystemExit:
            pass


TARGETS = {"records": records, "chunk": chunk, "profile": profile, "stream": stream,
           "inspect": inspect, "read_step": read_step, "heaptrack": heaptrack,
           "heaptrack_zst": heaptrack_zst, "tcmalloc": tcmalloc, "pprof": pprof,
           "trace": trace, "options": options}
# Targets that refuse bad input with any LifetimeError (InputError naming the file).
_LIFETIME_ERRORS = {"heaptrack", "heaptrack_zst", "tcmalloc", "pprof", "trace"}
_USAGE_ERRORS = {"options"}


def load() -> None:
    """Imports every module the targets import lazily (fuzz/run.py calls it inside
    atheris.instrument_imports, so that their code is coverage-instrumented too)."""
    import interop.heaptrack  # noqa: F401
    import interop.pprof.convert  # noqa: F401
    import interop.tcmalloc  # noqa: F401
    import pipeline.dataset  # noqa: F401
    import profile_format.summary  # noqa: F401
    import simulator.trace  # noqa: F401
    import lifetime.cli  # noqa: F401


def expected(name: str) -> tuple:
    """The exceptions that are a clean refusal for this target."""
    from core.errors import LifetimeError, UsageError

    return ((LifetimeError,) if name in _LIFETIME_ERRORS else
            (UsageError,) if name in _USAGE_ERRORS else EXPECTED)
