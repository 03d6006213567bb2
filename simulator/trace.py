"""Object traces (.lttrace) for the heap simulator: writer and reader.

Format version 1 (little-endian; see simulator/README.md):

    header   magic b"LTTRACE\\0", u32 version=1, u32 header_bytes=48+8*B, u32 record_bytes=40,
             u32 B, u64 num_records, u64 end_ns, u64 reserved=0, u64 boundary_ns[B]
    records  u64 alloc_ns, u64 free_ns (NEVER = 2**64-1), u64 size, u64 stack_id,
             u32 thread_id, u32 align          -- sorted by alloc_ns

Class i is "lifetime < boundary_ns[i]"; class B is ">= boundary_ns[B-1]"; class B+1 is inf
(never freed).  The project's default boundaries are 10 ms, 100 ms, 1 s, 10 s, 100 s, 1000 s.
"""

from __future__ import annotations

import dataclasses
import os
import struct
from typing import BinaryIO, Iterable, Iterator, Sequence

from lifetime.errors import LifetimeError

MAGIC = b"LTTRACE\0"
VERSION = 1
RECORD = struct.Struct("<QQQQII")
FIXED = struct.Struct("<8sIIIIQQQ")
NEVER = 2**64 - 1
MS = 1_000_000
DEFAULT_BOUNDARIES_NS = (10 * MS, 100 * MS, 1000 * MS, 10_000 * MS, 100_000 * MS, 1_000_000 * MS)


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
        b = [int(x) for x in boundaries_ns]
        if not b or any(x <= 0 for x in b) or any(x >= y for x, y in zip(b, b[1:])):
            raise ValueError(f"class boundaries must be positive and increasing: {b}")
        self.path = os.fspath(path)
        self.boundaries_ns = tuple(b)
        self._end = end_ns
        self._max_t = 0
        self._last_alloc = 0
        self._count = 0
        self._buf: list[bytes] = []
        self._f: BinaryIO = open(self.path, "wb")
        self._f.write(self._header(0, 0))

    def _header(self, count: int, end_ns: int) -> bytes:
        nb = len(self.boundaries_ns)
        return (FIXED.pack(MAGIC, VERSION, FIXED.size + 8 * nb, RECORD.size, nb, count, end_ns, 0)
                + struct.pack(f"<{nb}Q", *self.boundaries_ns))

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


def read_header(f: BinaryIO, path: str) -> TraceHeader:
    raw = f.read(FIXED.size)
    if len(raw) >= 8 and raw[:8] != MAGIC:
        raise TraceError(f"{path}: not a trace file (bad magic)")
    if len(raw) < FIXED.size:
        raise TraceError(f"{path}: truncated header")
    magic, version, header_bytes, record_bytes, nb, count, end_ns, _ = FIXED.unpack(raw)
    if version != VERSION:
        raise TraceError(f"{path}: unsupported trace version {version}")
    if record_bytes != RECORD.size or header_bytes != FIXED.size + 8 * nb or nb < 1:
        raise TraceError(f"{path}: inconsistent header")
    b = f.read(8 * nb)
    if len(b) != 8 * nb:
        raise TraceError(f"{path}: truncated header")
    return TraceHeader(version, count, end_ns, struct.unpack(f"<{nb}Q", b))


def read_trace(path: str | os.PathLike) -> tuple[TraceHeader, Iterator[ObjectRecord]]:
    """The header and a lazy iterator over the records (free_ns None = never freed)."""
    p = os.fspath(path)
    f = open(p, "rb")
    header = read_header(f, p)

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
