"""Object traces (.lttrace) for the heap simulator: writer and reader.

Format version 1 (little-endian; see simulator/README.md):

    header   magic b"LTTRACE\\0", u32 version=1, u32 header_bytes=48+8*B, u32 record_bytes=40,
             u32 B, u64 num_records, u64 end_ns, u64 reserved=0, u64 boundary_ns[B]
    records  u64 alloc_ns, u64 free_ns (NEVER = 2**64-1), u64 size, u64 stack_id,
             u32 thread_id, u32 align          -- sorted by alloc_ns

Class i is "lifetime < boundary_ns[i]"; class B is ">= boundary_ns[B-1]"; class B+1 is inf
(never freed).  The defaults and the limit on B are the label scheme's (core/lifetimes.py:
DEFAULT_BOUNDARIES["wall"] in ns, MAX_BOUNDARIES); the engine's (heap/src/classes.h) are
pinned to them by tests/test_label_scheme.py.  This module is the one Python reader and
writer of the header (`encode_header`, `read_header`, `check_trace`).
"""

from __future__ import annotations

import dataclasses
import errno
import io
import os
import struct
from typing import BinaryIO, Iterable, Iterator, Sequence

from core import lifetimes
from core.errors import LifetimeError
from core.files import open_regular

MAGIC = b"LTTRACE\0"
VERSION = 1
RECORD = struct.Struct("<QQQQII")
FIXED = struct.Struct("<8sIIIIQQQ")
NEVER = 2**64 - 1
MS = 1_000_000
DEFAULT_BOUNDARIES_NS = lifetimes.boundaries_ns(lifetimes.DEFAULT_BOUNDARIES["wall"])
# The engine's bounds (simulator/src/trace.cc), mirrored by check_trace.
MAX_BOUNDARIES = lifetimes.MAX_BOUNDARIES
MAX_SIZE = 1 << 44          # sizes are < 16 TiB
MAX_TIME = 1 << 63          # end_ns and class boundaries are < 2^63 ns
MAX_TOTAL_BYTES = 1 << 62   # sizes + alignments of all records


class TraceError(LifetimeError, ValueError):
    """A trace file that cannot be read (names the file and the problem)."""


@dataclasses.dataclass(frozen=True)
class ObjectRecord:
    alloc_ns: int
    free_ns: int | None  # None: never freed
    size: int
    stack_id: int = 0
    thread_id: int = 0
    align: int = 16


def true_class(boundaries_ns: Sequence[int], alloc_ns: int, free_ns: int | None) -> int:
    """The oracle's class of an object (the same rule as the engine)."""
    if free_ns is None or free_ns == NEVER:
        return len(boundaries_ns) + 1
    life = free_ns - alloc_ns
    for i, b in enumerate(boundaries_ns):
        if life < b:
            return i
    return len(boundaries_ns)


class TraceWriter:
    """Streams records to a trace; the record count and end time are patched on close.

    Records must come in alloc-time order (checked).  end_ns defaults to the latest alloc or
    free time seen."""

    def __init__(self, path: str | os.PathLike, boundaries_ns: Sequence[int] = DEFAULT_BOUNDARIES_NS,
                 end_ns: int | None = None):
        self.path = os.fspath(path)
        self.boundaries_ns = check_boundaries_ns(boundaries_ns)
        self._end = end_ns
        self._max_t = 0
        self._last_alloc = 0
        self._count = 0
        self._buf: list[bytes] = []
        self._f: BinaryIO = open(self.path, "wb")
        self._f.write(self._header(0, 0))

    def _header(self, count: int, end_ns: int) -> bytes:
        return encode_header(self.boundaries_ns, count, end_ns)

    def write(self, alloc_ns: int, free_ns: int | None, size: int, stack_id: int = 0,
              thread_id: int = 0, align: int = 16) -> None:
        if alloc_ns < self._last_alloc:
            raise ValueError(f"record {self._count}: alloc time {alloc_ns} < previous {self._last_alloc}")
        f = NEVER if free_ns is None else int(free_ns)
        if f != NEVER and f < alloc_ns:
            raise ValueError(f"record {self._count}: free time {f} < alloc time {alloc_ns}")
        self._last_alloc = alloc_ns
        self._max_t = max(self._max_t, alloc_ns, 0 if f == NEVER else f)
        self._buf.append(RECORD.pack(alloc_ns, f, size, stack_id, thread_id, align))
        self._count += 1
        if len(self._buf) >= 65536:
            self._flush()

    def write_record(self, r: ObjectRecord) -> None:
        self.write(r.alloc_ns, r.free_ns, r.size, r.stack_id, r.thread_id, r.align)

    def _flush(self) -> None:
        self._f.write(b"".join(self._buf))
        self._buf.clear()

    def close(self) -> None:
        if self._f.closed:
            return
        self._flush()
        end = self._max_t if self._end is None else self._end
        if end < self._max_t:
            raise ValueError(f"end_ns {end} precedes a record's time {self._max_t}")
        self._f.seek(0)
        self._f.write(self._header(self._count, end))
        self._f.close()

    def __enter__(self) -> "TraceWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def check_boundaries_ns(boundaries_ns: Sequence[int]) -> tuple[int, ...]:
    """Class boundaries a trace may carry (ValueError otherwise): 1..MAX_BOUNDARIES of
    them, positive, strictly increasing, below 2^63 ns: what the engine reads."""
    b = tuple(int(x) for x in boundaries_ns)
    if not 1 <= len(b) <= MAX_BOUNDARIES:
        raise ValueError(f"1 to {MAX_BOUNDARIES} class boundaries, not {len(b)}")
    if any(x <= 0 or x >= MAX_TIME for x in b) or any(x >= y for x, y in zip(b, b[1:])):
        raise ValueError(f"class boundaries must be positive, increasing and below 2^63 ns: "
                         f"{list(b)}")
    return b


def encode_header(boundaries_ns: Sequence[int], count: int, end_ns: int) -> bytes:
    """A version-1 header: the fixed part and the class boundaries (checked by
    check_boundaries_ns); `count` records of RECORD.size bytes follow it."""
    b = check_boundaries_ns(boundaries_ns)
    nb = len(b)
    return (FIXED.pack(MAGIC, VERSION, FIXED.size + 8 * nb, RECORD.size, nb, count, end_ns, 0)
            + struct.pack(f"<{nb}Q", *b))


def write_trace(path: str | os.PathLike, records: Iterable[ObjectRecord | tuple],
                boundaries_ns: Sequence[int] = DEFAULT_BOUNDARIES_NS, end_ns: int | None = None,
                sort: bool = True) -> str:
    """Writes records (ObjectRecord or (alloc_ns, free_ns, size[, stack, thread, align]))."""
    recs = [r if isinstance(r, ObjectRecord) else ObjectRecord(*r) for r in records]
    if sort:
        recs.sort(key=lambda r: r.alloc_ns)  # stable: ties keep their order
    with TraceWriter(path, boundaries_ns, end_ns) as w:
        for r in recs:
            w.write_record(r)
    return os.fspath(path)


@dataclasses.dataclass(frozen=True)
class TraceHeader:
    version: int
    num_records: int
    end_ns: int
    boundaries_ns: tuple[int, ...]

    @property
    def header_bytes(self) -> int:
        """The header's size: the byte offset of record 0."""
        return FIXED.size + 8 * len(self.boundaries_ns)


_CHUNK_RECORDS = 16384


def _check_header(f: BinaryIO, size: int, name: str) -> TraceHeader:
    """The engine's header checks, in its order and with its messages."""
    def fail(what: str):
        raise TraceError(f"{name}: {what}")

    raw = f.read(FIXED.size)
    if len(raw) >= 8 and raw[:8] != MAGIC:
        fail('not a trace file (bad magic; expected "LTTRACE\\0")')
    if len(raw) < FIXED.size:
        fail(f"truncated header ({len(raw)} of {FIXED.size} bytes)")
    _, version, header_bytes, record_bytes, nb, count, end_ns, reserved = FIXED.unpack(raw)
    if version != VERSION:
        fail(f"unsupported trace version {version} (this engine reads version {VERSION})")
    if record_bytes != RECORD.size:
        fail(f"record size {record_bytes} (version 1 has {RECORD.size})")
    if nb < 1 or nb > MAX_BOUNDARIES:
        fail(f"bad number of class boundaries {nb} (1..{MAX_BOUNDARIES})")
    if header_bytes != FIXED.size + 8 * nb:
        fail(f"header size {header_bytes} does not match {nb} boundaries")
    if reserved != 0:
        fail(f"header (byte offset 40): reserved field is {reserved} (must be 0)")
    if end_ns >= MAX_TIME:
        fail(f"header (byte offset 32): end time {end_ns} is not below 2^63 ns")
    b = f.read(8 * nb)
    if len(b) != 8 * nb:
        fail("truncated header (class boundaries)")
    bounds = struct.unpack(f"<{nb}Q", b)
    for i, v in enumerate(bounds):
        if v == 0 or (i > 0 and v <= bounds[i - 1]):
            fail("class boundaries must be positive and strictly increasing")
        if v >= MAX_TIME:
            fail(f"header (byte offset {FIXED.size + 8 * i}): class boundary {v} is not below 2^63 ns")
    body = size - header_bytes if size >= header_bytes else 0
    if count > body // RECORD.size:
        fail(f"truncated: header says {count} records but only {body} bytes follow the header "
             f"({body // RECORD.size} records)")
    if body != count * RECORD.size:
        fail(f"trailing data: {body - count * RECORD.size} bytes after the last of {count} records")
    return TraceHeader(version, count, end_ns, bounds)


def _check_records(f: BinaryIO, header: TraceHeader, name: str) -> None:
    """The engine's record checks, in its order and with its messages."""
    base = header.header_bytes
    end, last, total, i = header.end_ns, 0, 0, 0
    left = header.num_records
    while left:
        n = min(left, _CHUNK_RECORDS)
        raw = f.read(n * RECORD.size)
        if len(raw) != n * RECORD.size:
            raise TraceError(f"{name}: truncated at record {i + len(raw) // RECORD.size} (read error)")
        for a, fr, size, _, _, align in RECORD.iter_unpack(raw):
            what = None
            if i > 0 and a < last:
                what = (f"alloc time {a} precedes the previous record's {last} "
                        "(records must be sorted by alloc time)")
            elif a > end:
                what = f"alloc time {a} is after the trace end {end}"
            elif fr != NEVER and fr < a:
                what = f"free time {fr} precedes alloc time {a}"
            elif fr != NEVER and fr > end:
                what = f"free time {fr} is after the trace end {end}"
            elif size >= MAX_SIZE:
                what = f"implausible size {size} (the format allows < 16 TiB)"
            else:
                align = align or 16
                if align & (align - 1):
                    what = f"alignment {align} is not a power of two"
                else:
                    total += (size or 1) + align
                    if total > MAX_TOTAL_BYTES:
                        what = "the objects so far add up to more than 2^62 bytes (4 EiB)"
            if what:
                raise TraceError(f"{name}: record {i} (byte offset {base + i * RECORD.size}): {what}")
            last = a
            i += 1
        left -= n


def _open(p: str) -> tuple[BinaryIO, int]:
    """open_regular with the engine's messages: a fifo or device is refused, never waited on."""
    try:
        return open_regular(p)
    except IsADirectoryError:
        raise TraceError(f"{p}: is a directory, not a regular file") from None
    except OSError as e:
        if e.errno == errno.ENODEV:  # open_regular's "is a fifo, not a regular file"
            raise TraceError(f"{p}: {e.strerror}") from None
        raise TraceError(f"{p}: cannot open: {e.strerror}") from None


def check_trace(path: str | os.PathLike) -> TraceHeader:
    """Validates a trace as the engine's reader does (`lifetime_simulate TRACE --check`):
    the header and every record, with the engine's messages ("PATH: problem", as
    TraceError).  A fifo or device is refused without blocking.  Pinned to the engine by
    tests/test_simulator_hostile.py."""
    p = os.fspath(path)
    f, size = _open(p)
    with f:
        header = _check_header(f, size, p)
        _check_records(f, header, p)
    return header


def check_trace_bytes(data: bytes, name: str = "<bytes>") -> TraceHeader:
    """check_trace on a trace held in memory (for fuzzing): the same checks and messages."""
    f = io.BytesIO(data)
    header = _check_header(f, len(data), name)
    _check_records(f, header, name)
    return header


def read_header(f: BinaryIO, path: str) -> TraceHeader:
    """The header, checked as the engine checks it (the file's size from f)."""
    size = os.fstat(f.fileno()).st_size
    return _check_header(f, size, path)


def read_trace(path: str | os.PathLike) -> tuple[TraceHeader, Iterator[ObjectRecord]]:
    """The header and a lazy iterator over the records (free_ns None = never freed)."""
    p = os.fspath(path)
    f, size = _open(p)
    try:
        header = _check_header(f, size, p)
    except BaseException:
        f.close()
        raise

    def records() -> Iterator[ObjectRecord]:
        with f:
            for i in range(header.num_records):
                raw = f.read(RECORD.size)
                if len(raw) != RECORD.size:
                    raise TraceError(f"{p}: truncated at record {i}")
                a, fr, size, stack, thread, align = RECORD.unpack(raw)
                yield ObjectRecord(a, None if fr == NEVER else fr, size, stack, thread, align)

    return header, records()


def write_class_table(path: str | os.PathLike, table: dict[int, int] | Iterable[tuple[int, int]]) -> str:
    """A stack id -> class table for the engine's table:FILE predictor (sorted, text)."""
    items = sorted(table.items() if isinstance(table, dict) else table)
    with open(path, "w") as f:
        f.write("# lifetime-simulate class table v1: STACK_ID CLASS\n")
        for stack, cls in items:
            f.write(f"{int(stack)} {int(cls)}\n")
    return os.fspath(path)


OBJECT_CLASSES_MAGIC = b"LTOBJCLS"


def write_object_classes(path: str | os.PathLike, classes) -> str:
    """One class per record, in trace order, for the engine's objects:FILE predictor
    (binary: b"LTOBJCLS", u64 count, u8 classes; simulator/src/predictor.cc)."""
    data = bytes(bytearray(classes)) if not hasattr(classes, "tobytes") else classes.astype("u1").tobytes()
    with open(path, "wb") as f:
        f.write(OBJECT_CLASSES_MAGIC)
        f.write(struct.pack("<Q", len(data)))
        f.write(data)
    return os.fspath(path)
