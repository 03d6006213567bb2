"""Fuzz targets: each takes one input (the bytes of a would-be profile file) and
must either succeed or raise ProfileFormatError.  Any other exception, a hang or
unbounded memory is a finding."""

from __future__ import annotations

import os
import tempfile

from profiler_proto import container
from profiler_proto.container import ProfileFormatError

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
    from profiler_proto.summary import summarize_file

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


TARGETS = {"records": records, "chunk": chunk, "profile": profile, "stream": stream,
           "inspect": inspect, "read_step": read_step}
