"""Reading and writing profile files.

A profile file is a TFRecord file whose records are serialized
`ProfileChunk` messages (see README.md beside this file).  TFRecord framing,
per record:

    uint64  length            (little endian)
    uint32  masked_crc32c(length bytes)
    bytes   data[length]
    uint32  masked_crc32c(data)

Beam's `ReadFromTFRecord` and `tf.data.TFRecordDataset` read the same files.

Reading is streaming and validating (`ProfileReader`): one record is in memory at a
time, besides the per-file tables (header, mappings, stacks); a declared record length
is checked against what the file still holds (and `MAX_RECORD_BYTES`) before anything
is allocated; only regular files are opened; and every impossible record is reported
as a `ProfileFormatError` (category + detail naming the file, the record and its byte
offset) and left out, never used.  `read_profile` merges a whole (small) file on top
of it.  Whatever the bytes, the reader raises nothing but `ProfileFormatError`.

Why one module past 500 lines: the framing, the dead-letter categories and the
validating reader are one contract (what a record may hold is what the reader checks,
and a category names what it refused); split, each part would import the others'
internals.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import itertools
import math
import errno
import os
import struct
from typing import BinaryIO, Iterator

import google_crc32c
import numpy as np

from core import files
from core.errors import LifetimeError
from profile_format import profile_pb2

SUFFIX = ".ltprof"
# 2: a full trace that may hold compact rows (ProfileChunk.compact_samples).
KNOWN_SCHEMA_VERSIONS = (profile_pb2.SCHEMA_VERSION, profile_pb2.SCHEMA_VERSION_COMPACT_SAMPLES)
_MASK_DELTA = 0xA282EAD8
_HEADER = struct.Struct("<QI")
_FOOTER = struct.Struct("<I")
_FRAMING = _HEADER.size + _FOOTER.size
# The sampler writes a chunk per flush (about a second of samples): a few MB at most.
MAX_RECORD_BYTES = 256 << 20
MAX_STACK_DEPTH = 128  # the sampler's bound (Header.max_stack_depth)
# Strings a profile carries (program, paths, labels, argv, names) are cut to these many
# UTF-8 bytes as they are read, with one "long_string" problem per file: an 8 MB
# program name would otherwise ride along in every context key, example and manifest
# line.  4 KiB is PATH_MAX; a longer function name keeps its first 4 KiB (the model
# reads 16 tokens a frame); a build id is 20 bytes (SHA-1), 64 is generous.
MAX_STRING_BYTES = 4096
MAX_BUILD_ID_BYTES = 64
MAX_ARGV = 256  # arguments kept of Header.argv (each one cut like any string)

# Problem categories: the first word of every ProfileFormatError.reason.  Stable, so
# dead letters can be counted by them.
FILE_CATEGORIES = {
    "missing": "no such file",
    "not_regular": "not a regular file (fifo, device, directory, ...)",
    "unreadable": "the file cannot be opened or read",
    "empty": "no records, or no samples",
    "truncated": "the file ends inside a record",
    "too_large": "a record declares more bytes than the reader accepts",
    "corrupt": "a checksum fails or a record is not a ProfileChunk",
    "unsupported": "a schema version this reader does not know, or a file no profile "
                   "source (pipeline/sources.py) recognises",
    "bad_header": "no header first, a repeated header, or an impossible header field",
    "duplicate_chunk": "the same record bytes twice in one file (skipped)",
    "after_trailer": "a record after the trailer (skipped)",
    "bad_mapping": "a mapping with start >= limit (skipped)",
    "stack_too_deep": "a stack deeper than 128 frames or Header.max_stack_depth",
    "stack_redefined": "a stack id defined twice with different addresses",
    "long_string": f"a string longer than {MAX_STRING_BYTES} bytes (a build id over "
                   f"{MAX_BUILD_ID_BYTES}, argv over {MAX_ARGV} arguments): cut, the file is "
                   "used",
}
SAMPLE_CATEGORIES = {  # why a sample is dropped (counted in ProfileReader.dropped)
    "undefined_stack": "its stack id is never defined before it",
    "bad_stack": "its stack was rejected (too deep, ...)",
    "negative_lifetime": "freed before it was allocated, on either clock",
    "bad_weight": "weight is NaN, infinite or negative",
    "censored_and_freed": "censored (live at the end) and freed at once",
    "after_trailer": "in a record after the trailer",
    "duplicate_chunk": "in a duplicated record",
}
DATASET_CATEGORIES = {  # why the dataset job (pipeline/) sets a file aside, beyond the reader
    "import_failed": "an importer (interop/) failed to convert it",
    "import_problem": "an importer kept the file but found part of it unusable (a cut "
                      "tail, malformed lines); its usable part is read",
    "clock_not_recorded": "the profile does not record the clock the labels use",
    "symbolize_failed": "symbolizing its stacks raised an error",
}
CATEGORIES = {**FILE_CATEGORIES, **SAMPLE_CATEGORIES, **DATASET_CATEGORIES}


class ProfileFormatError(LifetimeError):
    """A problem with a profile file; the message names the file.

    `reason` is "<category>: <detail>" (category: a key of CATEGORIES), `category`
    the category alone."""

    def __init__(self, path: str, reason: str):
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason
        self.category = dead_letter(path, reason)["category"]


def dead_letter(path: str, reason: str) -> dict:
    """A problem as a record ({"file", "category", "reason"}) for dead-letter files and
    reports; `reason` is "<category>: <detail>" (category: a key of CATEGORIES)."""
    return {"file": path, "category": reason.split(":", 1)[0], "reason": reason}


def masked_crc32c(data: bytes) -> int:
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def open_regular(path: str) -> tuple[BinaryIO, int]:
    """Opens a regular file for reading: (file, size).  A fifo, device or directory is
    refused without ever blocking on it (core.files.open_regular)."""
    try:
        return files.open_regular(path)
    except FileNotFoundError:
        raise ProfileFormatError(path, "missing: no such file") from None
    except IsADirectoryError:
        raise ProfileFormatError(path, "not_regular: is a directory, not a profile file") \
            from None
    except OSError as e:
        if e.errno == errno.ENODEV:
            raise ProfileFormatError(path, f"not_regular: {e.strerror}") from None
        raise ProfileFormatError(path, f"unreadable: cannot open ({_oserror(e)})") from None
    except ValueError as e:  # a NUL in the path
        raise ProfileFormatError(path, f"unreadable: cannot open ({_oserror(e)})") from None


def _oserror(e: Exception) -> str:
    return getattr(e, "strerror", None) or type(e).__name__


def _records(f: BinaryIO, path: str, size: int,
             max_record_bytes: int = MAX_RECORD_BYTES
             ) -> Iterator[tuple[int, int, bytes, ProfileFormatError | None]]:
    """Yields (index, offset, data, None), or (index, offset, b"", error) for a record
    whose data checksum fails: its framing is intact, so reading goes on.  A broken
    framing raises.  A declared length is checked against the bytes left in the file
    (`size`, from fstat) and `max_record_bytes` before anything is read."""
    index = offset = 0
    while True:
        try:
            head = f.read(_HEADER.size)
        except OSError as e:
            raise ProfileFormatError(path, f"unreadable: record {index} at byte {offset}: "
                                     f"{_oserror(e)}") from None
        if not head:
            return
        if len(head) < _HEADER.size:
            raise ProfileFormatError(
                path, f"truncated: record {index} at byte {offset} has a partial header")
        length, length_crc = _HEADER.unpack(head)
        if masked_crc32c(head[:8]) != length_crc:
            raise ProfileFormatError(
                path, f"corrupt: record {index} at byte {offset} has a bad length checksum "
                "(not a profile file, or damaged)")
        left = max(size - offset - _FRAMING, 0)
        if length > left:
            raise ProfileFormatError(
                path, f"truncated: record {index} at byte {offset} needs {length} bytes, "
                f"file ends first ({left} left)")
        if length > max_record_bytes:
            raise ProfileFormatError(
                path, f"too_large: record {index} at byte {offset} declares {length} bytes, "
                f"more than the {max_record_bytes} a record may hold")
        try:
            data = f.read(length)
            foot = f.read(_FOOTER.size)
        except OSError as e:
            raise ProfileFormatError(path, f"unreadable: record {index} at byte {offset}: "
                                     f"{_oserror(e)}") from None
        if len(data) < length or len(foot) < _FOOTER.size:  # shrank while we read
            raise ProfileFormatError(
                path, f"truncated: record {index} at byte {offset} needs {length} bytes, "
                "file ends first")
        if masked_crc32c(data) != _FOOTER.unpack(foot)[0]:
            yield index, offset, b"", ProfileFormatError(
                path, f"corrupt: record {index} at byte {offset} fails its data checksum")
        else:
            yield index, offset, data, None
        index += 1
        offset += _FRAMING + length


def iter_records(path: str) -> Iterator[bytes]:
    """Yields each record's data; raises ProfileFormatError at the first bad one."""
    f, size = open_regular(path)
    with f:
        for _, _, data, bad in _records(f, path, size):
            if bad:
                raise bad
            yield data


def last_chunk(path: str) -> profile_pb2.ProfileChunk | None:
    """The file's last complete record, parsed (e.g. its trailer), found by seeking
    from record header to record header without reading the records between: cheap
    for a large file.  None if the file cannot be read or has no intact record."""
    try:
        f, size = open_regular(path)
    except ProfileFormatError:
        return None
    with f:
        offset, last = 0, None
        try:
            while offset + _FRAMING <= size:
                f.seek(offset)
                head = f.read(_HEADER.size)
                length, length_crc = _HEADER.unpack(head)
                if masked_crc32c(head[:8]) != length_crc or length > size - offset - _FRAMING:
                    break
                last = (offset + _HEADER.size, length)
                offset += _FRAMING + length
            if last is None:
                return None
            f.seek(last[0])
            data, foot = f.read(last[1]), f.read(_FOOTER.size)
        except OSError:
            return None
    if masked_crc32c(data) != _FOOTER.unpack(foot)[0]:
        return None
    try:
        return parse_chunk(path, 0, data)
    except ProfileFormatError:
        return None


def write_record(f: BinaryIO, data: bytes) -> None:
    length = struct.pack("<Q", len(data))
    f.write(length + struct.pack("<I", masked_crc32c(length)))
    f.write(data + _FOOTER.pack(masked_crc32c(data)))


def write_profile(path: str, chunks: list[profile_pb2.ProfileChunk]) -> None:
    """Writes chunks as a profile file (tests and tools; the sampler writes its own)."""
    with open(path, "wb") as f:
        for chunk in chunks:
            write_record(f, chunk.SerializeToString(deterministic=True))


def parse_chunk(path: str, index: int, data: bytes, offset: int | None = None
                ) -> profile_pb2.ProfileChunk:
    chunk = profile_pb2.ProfileChunk()
    try:
        chunk.ParseFromString(data)
    except Exception as e:  # protobuf raises DecodeError, sometimes others
        where = f"record {index}" + (f" at byte {offset}" if offset is not None else "")
        raise ProfileFormatError(
            path, f"corrupt: {where} is not a ProfileChunk ({type(e).__name__})") from None
    return chunk


# ---- ProfileChunk.compact_samples (profile.proto, CompactSamples) ----------------------
# A full trace's completed samples as rows of 11 varints (deltas from the row before);
# the reader turns them back into the `Sample` messages they stand for (equal, field for
# field, to the Sample the sampler would write otherwise: weight 1), so every consumer
# sees the same samples either way.  Vectorized (numpy): decoding and re-encoding a chunk
# cost about as much as parsing its Sample messages.
COMPACT_COLUMNS = 11
_U64 = np.uint64
_WEIGHT_ONE = bytes([(16 << 3) | 1, 1]) + struct.pack("<d", 1.0)  # Sample.weight = 1.0
_THRESHOLDS = [_U64(1 << (7 * k)) for k in range(1, 10)]  # a varint's 2nd..10th byte


def _unzigzag(z: np.ndarray) -> np.ndarray:
    return (z >> _U64(1)) ^ (_U64(0) - (z & _U64(1)))


def _zigzag(v: int) -> int:
    v &= (1 << 64) - 1
    return ((v << 1) ^ (-(v >> 63))) & ((1 << 64) - 1)


def _varint(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def compact_rows(samples) -> profile_pb2.CompactSamples:
    """Samples (freed, weight 1, no prediction: what a full trace records) as the
    CompactSamples the sampler writes for them (tests, tools)."""
    m = (1 << 64) - 1
    rows = bytearray()
    prev_addr = prev_ns = prev_bytes = prev_tid = 0
    n = 0
    for s in samples:
        if s.censored or s.predicted or s.weight != 1.0 or s.alloc_function > 15:
            raise ValueError("only freed samples of weight 1 without a prediction are compact")
        for v in (s.stack_id, s.size, s.alignment, s.alloc_function | s.free_function << 4,
                  _zigzag(s.address - prev_addr), _zigzag(s.free_monotonic_ns - prev_ns),
                  (s.free_monotonic_ns - s.alloc_monotonic_ns) & m,
                  _zigzag(s.free_allocated_bytes - prev_bytes),
                  (s.free_allocated_bytes - s.alloc_allocated_bytes) & m,
                  _zigzag(s.alloc_thread - prev_tid), _zigzag(s.free_thread - s.alloc_thread)):
            rows += _varint(v)
        prev_addr, prev_ns = s.address, s.free_monotonic_ns
        prev_bytes, prev_tid = s.free_allocated_bytes, s.alloc_thread
        n += 1
    return profile_pb2.CompactSamples(count=n, rows=bytes(rows))


def _decode_varints(data: bytes) -> np.ndarray:
    """The varints of `data`, as uint64 (ValueError: a cut or over-long varint)."""
    b = np.frombuffer(data, np.uint8)
    if len(b) == 0:
        return np.zeros(0, _U64)
    if b[-1] & 0x80:
        raise ValueError("the rows end inside a varint")
    ends = np.flatnonzero(b < 0x80)  # each varint's last (most significant) byte
    lengths = np.diff(ends, prepend=-1)
    if lengths.max() > 10:
        raise ValueError("a varint longer than 10 bytes")
    v = b[ends].astype(_U64)
    more = np.flatnonzero(lengths > 1)
    k = 1
    while len(more):  # the k-th byte from the end, for the varints that long
        v[more] = (v[more] << _U64(7)) | (b[ends[more] - k] & 0x7F)
        k += 1
        more = more[lengths[more] > k]
    return v


def expand_compact(compact: profile_pb2.CompactSamples) -> bytes:
    """A serialized ProfileChunk whose `samples` are the Sample messages that the rows
    stand for (ValueError when the rows are not `count` rows of 11 varints).  Encoded
    column by column: each field at the width of its widest value in the chunk (the
    shorter ones overlong, which the wire format allows: they parse to the same
    values), a field that is 0 in every row left out."""
    v = _decode_varints(compact.rows)
    n = compact.count
    if len(v) != n * COMPACT_COLUMNS:
        raise ValueError(f"{len(v)} varints for {n} rows of {COMPACT_COLUMNS}")
    if n == 0:
        return b""
    c = v.reshape(n, COMPACT_COLUMNS).T
    with np.errstate(over="ignore"):  # differences are taken modulo 2^64
        free_ns = np.cumsum(_unzigzag(c[5]), dtype=_U64)
        free_bytes = np.cumsum(_unzigzag(c[7]), dtype=_U64)
        tid = np.cumsum(_unzigzag(c[9]), dtype=_U64) & _U64(0xFFFFFFFF)
        fields = np.stack([  # Sample fields 1..12
            c[0], c[1], c[2], c[3] & _U64(15), np.cumsum(_unzigzag(c[4]), dtype=_U64),
            free_ns - c[6], free_bytes - c[8], tid, free_ns, free_bytes,
            (tid + _unzigzag(c[10])) & _U64(0xFFFFFFFF),
            (c[3] >> _U64(4)) & _U64(0xFFFFFFFF)])
    widths = [0 if m == 0 else 1 + sum(int(m >= t) for t in _THRESHOLDS)
              for m in fields.max(axis=1)]
    body = sum(1 + w for w in widths if w) + len(_WEIGHT_ONE)
    head = bytes([(4 << 3) | 2]) + _varint(body)  # ProfileChunk.samples
    out = np.empty((n, len(head) + body), np.uint8)
    out[:, :len(head)] = np.frombuffer(head, np.uint8)
    col, placed = len(head), []
    for j, w in enumerate(widths):
        if w:
            out[:, col] = (j + 1) << 3
            placed.append((j, w, col + 1))
            col += 1 + w
    out[:, col:] = np.frombuffer(_WEIGHT_ONE, np.uint8)
    for k in range(max(widths)):
        group = ((fields >> _U64(7 * k)) & _U64(0x7F)).astype(np.uint8)
        for j, w, at in placed:
            if k < w:
                out[:, at + k] = group[j] | 0x80 if k < w - 1 else group[j]
    return out.tobytes()


def enum_name(enum, value: int) -> str:
    """The value's name, or UNKNOWN(value) for one this schema does not know (proto3
    keeps them; a newer sampler may write them)."""
    try:
        return enum.Name(value)
    except ValueError:
        return f"UNKNOWN({value})"


_ENUM_FIELDS = (("alloc_function", profile_pb2.AllocFunction),
                ("free_function", profile_pb2.FreeFunction))
_KNOWN = {name: frozenset(enum.values()) for name, enum in _ENUM_FIELDS}
_KNOWN["clocks"] = frozenset(profile_pb2.Clock.values())
_KNOWN["end_reason"] = frozenset(profile_pb2.EndReason.values())


class ProfileReader:
    """Streams and checks one profile file.

        reader = ProfileReader(path)            # lenient: problems are collected
        for sample in reader.samples():         # only valid samples, in file order
            stack = reader.stacks[sample.stack_id]   # always defined
        reader.header, reader.mappings, reader.trailer, reader.chunks
        reader.problems   # [ProfileFormatError], every one names file and record
        reader.kept, reader.dropped   # samples yielded; Counter of dropped by category
        reader.unknown_enums          # Counter of (field, value) kept as they are

    `header` is set before the first sample is yielded; `mappings` and `stacks` grow as
    records are read (a sample's stack is always there when it is yielded); `trailer`
    is set at the end.  Memory: one record (and its parsed chunk) at a time, plus those
    tables and a 16-byte hash per record.  With strict=True the first problem raises.

    A problem with the file or its framing ends the reading (nothing after it can be
    trusted); a bad record is skipped; a bad sample is dropped and counted -- in
    lenient mode, one problem per sample category and file, reported at the end with
    the count and the first occurrence.  If the header is missing or impossible, no
    sample at all is yielded.
    """

    def __init__(self, path: str, strict: bool = False,
                 max_record_bytes: int = MAX_RECORD_BYTES):
        self.path = path
        self.strict = strict
        self.max_record_bytes = max_record_bytes
        self.header: profile_pb2.Header | None = None
        self.mappings: list[profile_pb2.Mapping] = []
        self.stacks: dict[int, profile_pb2.Stack] = {}
        self.trailer: profile_pb2.Trailer | None = None
        self.chunks = 0        # records used
        self.records = 0       # records seen
        self.kept = 0
        self.censored = 0      # of the kept samples
        self.dropped: collections.Counter = collections.Counter()
        self.unknown_enums: collections.Counter = collections.Counter()
        self.problems: list[ProfileFormatError] = []
        self._first_sample_problem: dict[str, str] = {}
        self._bad_stacks: set[int] = set()
        self._max_depth = MAX_STACK_DEPTH
        self._started = False
        self.long_strings = 0   # strings cut to MAX_STRING_BYTES (and argv, build ids)
        self._first_long: str | None = None

    # -- problems ---------------------------------------------------------------
    def _problem(self, reason: str) -> None:
        error = ProfileFormatError(self.path, reason)
        if self.strict:
            raise error
        self.problems.append(error)

    def _drop(self, category: str, detail: str) -> None:
        self.dropped[category] += 1
        if self.strict:
            raise ProfileFormatError(self.path, f"{category}: {detail}")
        self._first_sample_problem.setdefault(category, detail)

    def _long(self, what: str, size: int, limit: int) -> None:
        self.long_strings += 1
        if self.strict:
            raise ProfileFormatError(self.path, f"long_string: {what} is {size} bytes, more "
                                     f"than {limit}")
        if self._first_long is None:
            self._first_long = f"{what} ({size} bytes, more than {limit})"

    def _bound(self, message, fields: tuple[str, ...], where: str) -> None:
        """Cuts the message's string fields (and repeated ones) to MAX_STRING_BYTES."""
        for name in fields:
            value = getattr(message, name)
            if isinstance(value, (str, bytes)):
                limit = MAX_BUILD_ID_BYTES if isinstance(value, bytes) else MAX_STRING_BYTES
                cut = _cut(value, limit)
                if cut is not None:
                    self._long(f"{where}{name}", _size(value), limit)
                    setattr(message, name, cut)
                continue
            if name == "argv" and len(value) > MAX_ARGV:  # a repeated string field
                self._long(f"{where}argv", len(value), MAX_ARGV)
                del value[MAX_ARGV:]
            for i, item in enumerate(value):
                cut = _cut(item, MAX_STRING_BYTES)
                if cut is not None:
                    self._long(f"{where}{name}[{i}]", _size(item), MAX_STRING_BYTES)
                    value[i] = cut

    def _report_dropped(self) -> None:
        if self._first_long is not None:
            n = self.long_strings
            self.problems.append(ProfileFormatError(
                self.path, f"long_string: {n} string{'s' if n != 1 else ''} cut; first: "
                f"{self._first_long}"))
            self._first_long = None
        for category, detail in self._first_sample_problem.items():
            n = self.dropped[category]
            self.problems.append(ProfileFormatError(
                self.path, f"{category}: {n} sample{'s' if n != 1 else ''} dropped; "
                f"first: {detail}"))
        self._first_sample_problem.clear()

    # -- reading ------------------------------------------------------------------
    def samples(self) -> Iterator[profile_pb2.Sample]:
        """Yields every valid sample once (the file is read once; a second call
        yields nothing)."""
        if self._started:
            return
        self._started = True
        try:
            f, size = open_regular(self.path)
        except ProfileFormatError as e:
            self._problem(e.reason)
            return
        seen: set[bytes] = set()
        try:
            with f:
                records = _records(f, self.path, size, self.max_record_bytes)
                while True:
                    try:
                        index, offset, data, bad = next(records)
                    except StopIteration:
                        break
                    except ProfileFormatError as e:  # framing lost: nothing after is readable
                        self._problem(e.reason)
                        break
                    self.records += 1
                    if bad:
                        self._problem(bad.reason)
                        continue
                    where = f"record {index} at byte {offset}"
                    if data:
                        digest = hashlib.blake2b(data, digest_size=16).digest()
                        if digest in seen:
                            self._problem(f"duplicate_chunk: {where} repeats an earlier "
                                          f"record byte for byte ({len(data)} bytes); skipped")
                            continue
                        seen.add(digest)
                    try:
                        chunk = parse_chunk(self.path, index, data, offset)
                    except ProfileFormatError as e:
                        self._problem(e.reason)
                        continue
                    if self.header is None:
                        if not self._start(chunk, where):
                            return
                    elif chunk.HasField("header"):
                        self._problem(f"bad_header: {where} repeats the header; skipped")
                        continue
                    elif self.trailer is not None:
                        self._problem(f"after_trailer: {where} follows the trailer; skipped")
                        continue
                    yield from self._add_chunk(chunk, where)
                    del chunk
            if self.records == 0 and not self.problems:
                self._problem("empty: the file holds no records")
        finally:
            if not self.strict:
                self._report_dropped()

    def _start(self, chunk: profile_pb2.ProfileChunk, where: str) -> bool:
        if not chunk.HasField("header"):
            self._problem(f"bad_header: {where}, the first readable record, has no header")
            return False
        h = chunk.header
        if h.schema_version not in KNOWN_SCHEMA_VERSIONS:
            self._problem(f"unsupported: unsupported schema version {h.schema_version} (this reader "
                          f"knows {', '.join(map(str, KNOWN_SCHEMA_VERSIONS))})")
            return False
        if h.sampling_interval_bytes == 0:
            self._problem(f"bad_header: {where}: sampling interval 0 bytes (sample "
                          "weights would be meaningless); the file is not used")
            return False
        for c in h.clocks:
            if c not in _KNOWN["clocks"]:
                self.unknown_enums[("clocks", c)] += 1
        if h.max_stack_depth:
            self._max_depth = min(MAX_STACK_DEPTH, h.max_stack_depth)
        self.header = _own(h)
        self._bound(self.header, _HEADER_STRINGS, "header.")
        return True

    def _add_chunk(self, chunk: profile_pb2.ProfileChunk, where: str
                   ) -> Iterator[profile_pb2.Sample]:
        self.chunks += 1
        for m in chunk.mappings:
            if m.start >= m.limit:
                self._problem(f"bad_mapping: {where}: mapping {m.id} has start {m.start:#x} "
                              f">= limit {m.limit:#x}; skipped")
            else:
                m = _own(m)
                self._bound(m, ("path", "build_id"), f"mapping {m.id} ")
                self.mappings.append(m)
        for s in chunk.stacks:
            depth = len(s.addresses)
            if depth > self._max_depth:
                self._bad_stacks.add(s.id)
                self._problem(f"stack_too_deep: {where}: stack {s.id} has {depth} frames, "
                              f"more than the maximum {self._max_depth}; its samples are "
                              "dropped")
                continue
            old = self.stacks.get(s.id)
            if old is None:
                if s.id not in self._bad_stacks:
                    s = self.stacks[s.id] = _own(s)
                    for f in s.frames:
                        self._bound(f, ("function", "file"), f"stack {s.id} frame ")
            elif list(old.addresses) != list(s.addresses):
                self._problem(f"stack_redefined: {where}: stack {s.id} is defined again "
                              "with other addresses; the first definition is kept")
        samples = chunk.samples
        if chunk.HasField("compact_samples"):
            try:
                expanded = profile_pb2.ProfileChunk.FromString(
                    expand_compact(chunk.compact_samples))
            except Exception as e:  # ValueError, or protobuf's DecodeError
                self._problem(f"corrupt: {where}: its compact samples do not decode ({e}); "
                              "skipped")
            else:
                samples = itertools.chain(expanded.samples, chunk.samples)
        for i, s in enumerate(samples):
            problem = self._check(s)
            if problem:
                self._drop(problem[0], f"{where}, sample {i}: {problem[1]}")
                continue
            for name, _ in _ENUM_FIELDS:
                v = getattr(s, name)
                if v not in _KNOWN[name]:
                    self.unknown_enums[(name, v)] += 1
            self.kept += 1
            self.censored += s.censored
            yield s
        if chunk.HasField("trailer"):
            self.trailer = _own(chunk.trailer)
            self._bound(self.trailer.unprofiled_exec, ("path", "reason"),
                        "trailer.unprofiled_exec.")
            if self.trailer.end_reason not in _KNOWN["end_reason"]:
                self.unknown_enums[("end_reason", self.trailer.end_reason)] += 1

    def _check(self, s: profile_pb2.Sample) -> tuple[str, str] | None:
        if s.stack_id not in self.stacks:
            if s.stack_id in self._bad_stacks:
                return "bad_stack", f"stack {s.stack_id} was rejected"
            return "undefined_stack", f"names stack {s.stack_id}, never defined before it"
        w = s.weight
        if not math.isfinite(w) or w < 0:
            return "bad_weight", f"weight {w!r}"
        if s.censored:
            if s.free_function or s.free_monotonic_ns or s.free_allocated_bytes:
                return "censored_and_freed", "censored, yet it has a free time or function"
            return None
        if s.free_monotonic_ns < s.alloc_monotonic_ns:
            return "negative_lifetime", (f"freed at {s.free_monotonic_ns} ns, before its "
                                         f"allocation at {s.alloc_monotonic_ns} ns")
        if s.free_allocated_bytes < s.alloc_allocated_bytes:
            return "negative_lifetime", (
                f"freed at allocated-bytes clock {s.free_allocated_bytes}, before its "
                f"allocation at {s.alloc_allocated_bytes}")
        return None


_HEADER_STRINGS = tuple(f.name for f in profile_pb2.Header.DESCRIPTOR.fields
                        if f.type == f.TYPE_STRING)  # every one, argv included


def _size(value: str | bytes) -> int:
    return len(value) if isinstance(value, bytes) else len(value.encode("utf-8", "surrogatepass"))


def _cut(value: str | bytes, limit: int) -> str | bytes | None:
    """value cut to `limit` bytes (UTF-8, at a character boundary), or None if it fits."""
    if len(value) * (1 if isinstance(value, bytes) else 4) <= limit:
        return None  # fits whatever its characters (cheap: no encoding)
    if isinstance(value, bytes):
        return value[:limit] if len(value) > limit else None
    data = value.encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return None
    return data[:limit].decode("utf-8", "ignore")


def _own(message):
    """A copy of a message parsed as part of a chunk: a part keeps its whole chunk in
    memory (protobuf's arenas), the copy only itself."""
    copy = type(message)()
    copy.CopyFrom(message)
    return copy


def stream_profile(path: str, strict: bool = False) -> ProfileReader:
    """A streaming reader of one profile file (see ProfileReader)."""
    return ProfileReader(path, strict=strict)


@dataclasses.dataclass
class Profile:
    """One process's profile, with its chunks merged."""

    path: str
    header: profile_pb2.Header
    mappings: list[profile_pb2.Mapping]
    stacks: dict[int, profile_pb2.Stack]
    samples: list[profile_pb2.Sample]
    trailer: profile_pb2.Trailer | None
    chunks: int
    unknown_enums: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    dropped: collections.Counter = dataclasses.field(default_factory=collections.Counter)

    @property
    def censored_share(self) -> float:
        if not self.samples:
            return 0.0
        return sum(s.censored for s in self.samples) / len(self.samples)


def read_profile(path: str,
                 errors: list[ProfileFormatError] | None = None) -> Profile | None:
    """Reads and checks a whole profile file into memory (small files: tests, tools;
    large ones are streamed with ProfileReader).

    Strict by default: the first problem raises ProfileFormatError.  With an
    `errors` list, problems are appended there instead and the good part is kept:
    every valid chunk and sample (see ProfileReader).  Returns None only if nothing
    usable (no valid header) was found.
    """
    reader = ProfileReader(path, strict=errors is None)
    samples = list(reader.samples())
    if errors is not None:
        errors.extend(reader.problems)
    if reader.header is None:
        return None
    return Profile(path=path, header=reader.header, mappings=reader.mappings,
                   stacks=reader.stacks, samples=samples, trailer=reader.trailer,
                   chunks=reader.chunks, unknown_enums=reader.unknown_enums,
                   dropped=reader.dropped)
