"""heaptrack recordings -> `.ltprof` (`lifetime import --format heaptrack`).

Which file.  heaptrack (KDE, 1.4.0 here) has two formats.  `libheaptrack_preload`
writes a *raw* line stream; by default the `heaptrack` script pipes it through
`heaptrack_interpret`, which symbolizes it and writes `heaptrack.PROG.PID.zst`.  The
interpreted file cannot give per-object lifetimes: its `+ N` / `- N` lines name an
*allocation-info index* (a (size, trace) pair), not a pointer, so when several objects
of one (size, trace) are live, which of them a free ended is lost.  The raw recording
keeps the pointers: record with `heaptrack --raw` (`-r`), which writes
`heaptrack.PROG.PID.raw.zst` (zstd, or `.raw.gz` without zstd; plain text is read too).
An interpreted file is refused with an `InputError` that says so.

Raw format (file format version 3; 2 is read too), one record per line, numbers hex:

    v HEAPTRACK_VERSION FILE_FORMAT_VERSION
    x LEN PATH            the executable (/proc/self/exe); LEN = bytes of PATH (v3 only)
    X ARG ARG...          the command line (arguments joined by spaces)
    I PAGESIZE PAGES      system info (ignored)
    m 1 -                 module cache reset: every module is written again after it
    m LEN NAME BASE [VADDR MEMSZ]...   a module (dl_iterate_phdr): NAME "x" is the
                          executable; one (p_vaddr, p_memsz) pair per PT_LOAD
    t IP PARENT           a trace-tree node, numbered 1, 2, ... in file order; PARENT 0
                          is the root.  IP is the return address minus 1 (heaptrack
                          subtracts 1 so the IP points into the call instruction)
    + SIZE NODE PTR       an allocation; NODE is the leaf of its trace
    - PTR                 a free (realloc writes `- OLD` then `+ SIZE NODE NEW`)
    c MS                  elapsed ms since start (steady clock), from a timer thread
                          every ~10 ms and once at shutdown
    R PAGES               RSS (ignored);  A  attached at runtime;  S  LSan suppressions

Mapping to our profile (profile_format/README.md):

* Every allocation is a sample of weight 1: `Header.full_trace`, interval 1, as in the
  sampler's full-trace mode.  A free pairs with the live allocation at its pointer; a
  free of an unknown pointer (allocated before heaptrack started, or outside malloc)
  is counted (`unmatched_frees`), an allocation at a pointer that is still live (its
  free was not seen) ends the old object unobserved: dropped and counted
  (`address_reused`).  Objects live at the end are censored with their observed age.
* Stacks: the trace tree walked from the leaf to the root, each IP plus 1, so that they
  are return addresses like the sampler's and the symbolizer's `address - 1` lands on
  the call again (`leaf_is_return_address` holds for both).  heaptrack's traces start
  at malloc's caller, like ours; allocator frames are stripped by the same rules.
* Mappings: one per PT_LOAD pair of a module line: `start = BASE + p_vaddr`, `limit =
  start + p_memsz`.  heaptrack records neither file offsets nor build ids, so the
  module file is read here (pyelftools; the build id with `core.symbolize`'s
  reader; paths under `sysroot` first): if its PT_LOAD headers hold the recorded
  (p_vaddr, p_memsz) pairs it is taken to be the same build, and its executable
  segments become mappings with their `p_offset` and the file's build id.  A missing
  module (or one whose layout differs: another build) keeps every recorded segment
  with `file_offset = p_vaddr` (exact where they are equal, as GNU ld lays out text)
  and no build id; it is counted and named in the summary, and the dataset job turns
  its frames into `<module+?>` tokens as it does for our profiles.
* Clocks.  Allocated bytes are exact (summed from the `+` lines, folded at each
  allocation like the sampler's full trace).  Wall time is coarse: heaptrack stamps
  the stream with `c` lines about every 10 ms (integer ms), the width of our smallest
  lifetime class (T95 < 10 ms).  Events between two stamps are spread evenly by their
  order in the stream (the k-th of n between stamps t0 and t1 gets t0 + (t1 - t0)(k +
  1/2)/n): with a steady event rate this places an event within a fraction of a tick,
  where taking the stamp before it would put every object that crosses a stamp at
  >= 10 ms.  Lifetimes are estimates below ~10 ms; from 100 ms up (classes 100 ms ...)
  the stamps' 1 % error cannot move a label except at a boundary.
* Not carried over: the allocating entry point (malloc/calloc/realloc/...; heaptrack
  writes a realloc as a free and an allocation: `alloc_function` is unspecified and
  every free is `FREE`), threads (heaptrack records none: 0), alignment, the pid and
  start time (the pid is taken from a `heaptrack.PROG.PID.raw.*` file name when it
  has one), and how the process ended (`Trailer.end_reason` unspecified).

Malformed lines (unparsable numbers, a `+` naming an undefined node, a cut last line)
are counted by kind and the first of each named with its line number; the rest is
kept.  Every number is bounded before use (`_hex`): plain hex digits only (no sign,
no `0x`), at most 64 bits, and each against what its field holds -- a size at most
PTRDIFF_MAX (glibc's malloc refuses more), a stamp whose nanoseconds fit our uint64
clock, an IP whose return address (IP + 1) fits 64 bits, a module segment that ends
below 2^64, the running total of allocated bytes below 2^64; a line over a bound is
malformed (`KIND_out_of_range`, e.g. `allocation_out_of_range`) and skipped.  A line
longer than MAX_LINE_BYTES (the longest real one is the command line, ARG_MAX) is
skipped unread (`line_too_long`).  A compressed stream that ends early keeps
everything before the cut.  Memory: the live objects, the trace tree, the mappings,
the events of one ~10 ms window and the samples of one chunk.

Speed (issue 23; benchmarks/heaptrack_import_speed.py).  The `+`/`-` lines (all but a
few thousand of a recording) are read by a native reader (interop/native/
heaptrack_reader.c, `make native` builds build/interop/native/liblifetime_heaptrack.so;
loaded with ctypes): it reads each decompressed piece of the stream in place while its
lines are `+`/`-` lines of heaptrack's exact form (one space, lower-case hex of at most
16 digits) and, for an allocation, within the bounds above; it stops at any other line,
which `_line` reads with every check and message (an irregular `+`/`-` line is then
applied through the reader).  The reader holds the live objects (by pointer, in the
order a dict of them would keep), the events of the open window, the bytes clock and
the unmatched / reused counts; at a stamp it spreads the window's clocks and returns the
freed objects as rows of a uint64 array, and it encodes a chunk's samples (`_samples`:
the bytes protobuf's deterministic serialization writes).  Outputs are byte-identical to
the line-by-line reader's.
"""

from __future__ import annotations

import ctypes
import dataclasses
import gzip
import itertools
import os
import re
import zlib
from typing import BinaryIO, Iterator

import numpy as np
import zstandard  # a dependency of apache-beam

from interop import ImportSummary, module_file
from core.errors import InputError, LifetimeError
from core.files import under_sysroot
from profile_format import profile_pb2
from profile_format.container import MAX_STACK_DEPTH, open_regular, write_record

NAME = "heaptrack"

_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_GZIP_MAGIC = b"\x1f\x8b"
_VERSION_LINE = re.compile(rb"^v [0-9a-f]{1,16}( [0-9a-f]{1,16})?\r?$")
_PID_IN_NAME = re.compile(r"^heaptrack\..*\.(\d+)(\.raw)?(\.zst|\.gz)?$")
NS_PER_MS = 1_000_000
CHUNK_SAMPLES = 1 << 16  # samples per ProfileChunk
PF_X = 1
U64_MAX = (1 << 64) - 1
U32_MAX = (1 << 32) - 1
MAX_SIZE = (1 << 63) - 1         # PTRDIFF_MAX: glibc's malloc fails anything larger
MAX_MS = U64_MAX // NS_PER_MS    # a stamp's nanoseconds must fit the uint64 clocks
MAX_LINE_BYTES = 4 << 20         # the longest real line is the command line (ARG_MAX 2 MiB)
_ZSTD_INPUT = 1 << 10            # compressed bytes per call: zstd expands at most ~32768x
_KINDS = {b"+": "allocation", b"-": "free", b"t": "trace", b"c": "timestamp",
          b"m": "module", b"x": "executable", b"X": "command_line"}


# ---------------------------------------------------------------- the native reader

_LIBRARY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "build", "interop", "native", "liblifetime_heaptrack.so")
_lib = None


def _native():
    """interop/native/heaptrack_reader.c ($LIFETIME_HEAPTRACK_LIB, else build/...),
    loaded once; LifetimeError when it is not built."""
    global _lib
    if _lib is None:
        path = os.environ.get("LIFETIME_HEAPTRACK_LIB") or _LIBRARY
        if not os.path.exists(path):
            raise LifetimeError(f"{path} is not built: run `make native`")
        lib = ctypes.CDLL(path)
        u64, i64, p = ctypes.c_uint64, ctypes.c_int64, ctypes.c_void_p
        for name, res, args in [
                ("ht_new", p, []), ("ht_delete", None, [p]),
                ("ht_total", u64, [p]), ("ht_unmatched", u64, [p]), ("ht_reused", u64, [p]),
                ("ht_live", u64, [p]), ("ht_window", u64, [p]),
                ("ht_alloc", ctypes.c_int, [p, u64, u64, u64]),
                ("ht_free", ctypes.c_int, [p, u64]),
                ("ht_feed", i64, [p, ctypes.c_char_p, i64, i64, u64, ctypes.POINTER(i64)]),
                ("ht_stamp", i64, [p, u64, u64, p]), ("ht_censored", i64, [p, u64, p]),
                ("ht_sample_max", i64, []), ("ht_encode", i64, [p, i64, i64, p])]:
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = res, args
        _lib = lib
    return _lib


def _check(result: int) -> int:
    if result < 0:
        raise MemoryError("heaptrack reader: out of memory")
    return result


@dataclasses.dataclass
class Summary(ImportSummary):
    """What one import kept and dropped, with heaptrack's own counters."""

    format: str = NAME
    lines: int = 0
    allocated_bytes: int = 0
    unmatched_frees: int = 0
    malformed: dict = dataclasses.field(default_factory=dict)   # kind -> lines


class OutOfRange(ValueError):
    """A number beyond what the format or the field it goes into can hold."""


def _hex(field: bytes, what: str, limit: int = U64_MAX) -> int:
    """A hex number of the recording, bounded: ValueError if it is not plain hex
    digits (int() would take a sign, `0x`, `_` or spaces), OutOfRange above `limit`."""
    if not field.isalnum() or field[1:2] in (b"x", b"X"):
        raise ValueError(f"{what} {field[:40]!r} is not a hex number")
    if len(field) > 16 and len(digits := field.lstrip(b"0")) > 16:
        shown = digits[:24].decode() + ("..." if len(digits) > 24 else "")
        raise OutOfRange(f"{what} 0x{shown} has more than 64 bits")  # never parsed
    value = int(field, 16)  # ValueError for a letter past f
    if value > limit:
        raise OutOfRange(f"{what} {value:#x} is above {limit:#x}")
    return value


def _proto_str(s: str) -> str:
    """A string read with surrogateescape as a protobuf string (valid UTF-8 only):
    undecodable bytes escaped, as `lifetime inspect` shows them."""
    return s.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


# ---------------------------------------------------------------- reading the file

class TruncatedStream(Exception):
    """The compressed stream ends inside a frame (the file was cut)."""


def _open(path: str) -> BinaryIO:
    try:
        return open_regular(path)[0]
    except Exception as e:  # ProfileFormatError names the file and the problem
        raise InputError(str(e)) from None


def _chunks(f: BinaryIO, size: int = 1 << 20) -> Iterator[bytes]:
    """The file's decompressed bytes (zstd, gzip or plain), in pieces.  Raises
    TruncatedStream when a compressed stream ends early; what came before is yielded."""
    magic = f.read(4)
    f.seek(0)
    if magic.startswith(_ZSTD_MAGIC):
        dctx = zstandard.ZstdDecompressor()
        obj, started = dctx.decompressobj(), False
        # Small inputs bound each call's output (a bomb of RLE blocks: ~32 MiB per KiB).
        while data := f.read(min(size, _ZSTD_INPUT)):
            while data:  # frames one after another (zstd -c of a pipe writes one)
                if obj.eof:
                    obj = dctx.decompressobj()
                try:
                    out = obj.decompress(data)
                except zstandard.ZstdError as e:
                    raise TruncatedStream(f"zstd: {e}") from None
                started = True
                if out:
                    yield out
                data = obj.unused_data if obj.eof else b""
        if started and not obj.eof:
            raise TruncatedStream("the zstd stream ends inside a frame")
    elif magic.startswith(_GZIP_MAGIC):
        with gzip.GzipFile(fileobj=f, mode="rb") as g:
            try:
                while data := g.read(size):
                    yield data
            except (EOFError, OSError, zlib.error) as e:
                raise TruncatedStream(f"gzip: {e}") from None
    else:
        while data := f.read(size):
            yield data


def sniff(path: str) -> bool:
    """A heaptrack file (raw or interpreted) starts with `v VERSION FORMAT`."""
    try:
        with _open(path) as f:
            head = b""
            for data in _chunks(f, 4096):
                head += data
                if b"\n" in head or len(head) > 256:
                    break
    except Exception:  # unreadable, cut, not compressed as it claims: not ours to say
        return False
    return bool(_VERSION_LINE.match(head.split(b"\n", 1)[0]))


def _batches(f: BinaryIO, summary: Summary) -> Iterator[tuple]:
    """The file's complete lines, a (first, data, lo, hi) per decompressed piece: the
    line `first` (None: no line), then the lines of data[lo:hi], each ending in its
    newline (the piece's lines after its first, whose end it holds).  A cut last line
    or an early end of the compressed stream is reported, and everything before it
    kept.  A line over MAX_LINE_BYTES is skipped without being held (`line_too_long`);
    `#` (a comment, ignored) stands in for it, so later line numbers stay right."""
    parts: list[bytes] = []  # the open line's pieces, joined once when it ends
    held, n, skipping = 0, 0, False
    try:
        for data in _chunks(f):
            lo = 0
            if skipping:  # inside an over-long line: drop bytes up to its end unread
                end = data.find(b"\n")
                if end < 0:
                    continue
                lo, skipping, n = end + 1, False, n + 1  # its `#` is out
            first_end = data.find(b"\n", lo)
            if first_end >= 0:
                hi = data.rfind(b"\n") + 1
                if held + first_end - lo > MAX_LINE_BYTES:
                    _malformed(summary, "line_too_long", n + 1,
                               f"more than {MAX_LINE_BYTES} bytes; skipped")
                    first = b"#"
                else:
                    first = b"".join(parts) + data[lo:first_end] if parts \
                        else data[lo:first_end]
                tail = data[hi:]
                parts, held = [tail], len(tail)
                n += data.count(b"\n", lo)
                yield first, data, first_end + 1, hi
            else:
                tail = data[lo:] if lo else data
                parts.append(tail)
                held += len(tail)
            if held > MAX_LINE_BYTES:
                _malformed(summary, "line_too_long", n + 1,
                           f"more than {MAX_LINE_BYTES} bytes; skipped")
                parts, held, skipping = [], 0, True
                yield b"#", b"", 0, 0
    except TruncatedStream as e:
        summary.problems.append(f"truncated: {e}, after line {n}; everything before is kept")
        summary.malformed["truncated_stream"] = 1
    if held and not skipping:
        _malformed(summary, "cut_last_line", n + 1,
                   "the file ends inside this line (truncated); it is dropped")
    summary.lines = n


def _malformed(summary: Summary, kind: str, lineno: int, detail: str) -> None:
    if kind not in summary.malformed:
        summary.problems.append(f"{kind}: line {lineno}: {detail}")
        summary.malformed[kind] = 0
    summary.malformed[kind] += 1


# ---------------------------------------------------------------- modules -> mappings

class _Modules:
    """Module lines -> Mapping messages (new ones only; ids grow, the latest wins)."""

    def __init__(self, summary: Summary, sysroot: str | None):
        self.summary = summary
        self.sysroot = sysroot
        self.next_id = 1
        self.seen: set = set()
        self.files: dict[str, tuple] = {}   # path -> (status, loads, build id)
        self.pending: list[profile_pb2.Mapping] = []

    def _read(self, path: str) -> tuple:
        if path in self.files:
            return self.files[path]
        local = under_sysroot(path, self.sysroot)
        result = self.files[path] = module_file(local)  # never raises
        return result

    def add(self, name: str, base: int, segments: list[tuple[int, int]]) -> None:
        key = (name, base, tuple(segments))
        if key in self.seen:
            return
        self.seen.add(key)
        status = "no_file"
        mappings: list[tuple[int, int, int, bytes]] = []
        if name.startswith("/"):
            found = self._read(name)
            if found[0] == "ok":
                by_vaddr = {(v, m): (off, flags) for v, m, off, flags in found[1]}
                if all(seg in by_vaddr for seg in segments):
                    status = "ok"
                    mappings = [(base + v, base + v + m, by_vaddr[(v, m)][0], found[2])
                                for v, m in segments if by_vaddr[(v, m)][1] & PF_X]
                else:
                    status = "layout_differs"
            else:
                status = "missing"
        if status != "ok":
            mappings = [(base + v, base + v + m, v, b"") for v, m in segments]
            paths = self.summary.modules.setdefault(status, [])
            if name not in paths:
                paths.append(name)
        for start, limit, offset, build_id in mappings:
            if start >= limit:
                continue
            self.pending.append(profile_pb2.Mapping(
                id=self.next_id, start=start, limit=limit, file_offset=offset,
                path=_proto_str(name), build_id=build_id))
            self.next_id += 1
            self.summary.mappings += 1


# ---------------------------------------------------------------- the converter

class _Writer:
    """Streams ProfileChunks: header first, each stack before its first sample.

    The samples of a chunk are kept as rows (uint64 arrays, see `_samples`) and
    encoded together when the chunk is written: the bytes
    `SerializeToString(deterministic=True)` writes for them, field by field in number
    order, so a chunk is its header, mappings and stacks (serialized by protobuf), its
    samples, then its trailer (protobuf)."""

    def __init__(self, out: BinaryIO, header: profile_pb2.Header):
        self.out = out
        self.chunk = profile_pb2.ProfileChunk(header=header)
        self.freed: list[np.ndarray] = []      # rows with free_ns/free_bytes set
        self.censored: list[np.ndarray] = []   # rows with observed ages set (at the end)
        self.n = 0

    def count(self) -> int:
        return self.n

    def add(self, rows: np.ndarray, censored: bool) -> None:
        (self.censored if censored else self.freed).append(rows)
        self.n += len(rows)

    def flush(self) -> None:
        chunk = self.chunk
        tail = b""
        if chunk.HasField("trailer"):  # field 5, after the samples (4)
            tail = profile_pb2.ProfileChunk(trailer=chunk.trailer).SerializeToString(
                deterministic=True)
            chunk.ClearField("trailer")
        write_record(self.out, chunk.SerializeToString(deterministic=True)
                     + _samples(_rows(self.freed), _rows(self.censored)) + tail)
        self.chunk = profile_pb2.ProfileChunk()
        self.freed, self.censored, self.n = [], [], 0


def _rows(parts: list[np.ndarray]) -> np.ndarray:
    return parts[0] if len(parts) == 1 else np.concatenate(parts) if parts \
        else np.empty((0, 7), np.uint64)


# A sample is a row [size, node, alloc_ns, alloc_bytes, ptr, bytes_b, ns_b] where
# (ns_b, bytes_b) are the free's clocks of a freed sample, the observed ages of a
# censored one.


def _samples(freed, censored) -> bytes:
    """The encoding of ProfileChunk.samples for these rows (n x 7, anything numpy
    takes as uint64), freed ones first: what protobuf's deterministic serialization of
    the same Sample messages writes (each field in number order, zeros left out as
    proto3 does, weight 1.0).  Native (ht_encode)."""
    freed = np.asarray(freed, np.uint64).reshape(-1, 7)
    censored = np.asarray(censored, np.uint64).reshape(-1, 7)
    rows = np.ascontiguousarray(np.concatenate([freed, censored]) if len(censored)
                                else freed)
    n = len(rows)
    if not n:
        return b""
    lib = _native()
    out = np.empty(n * lib.ht_sample_max(), np.uint8)
    size = lib.ht_encode(rows.ctypes.data, n, len(freed), out.ctypes.data)
    return out[:size].tobytes()


def _parse_string(rest: bytes, sized: bool) -> tuple[str, bytes]:
    """A (length-prefixed, file format 3) string and what follows it."""
    if sized:
        length, _, tail = rest.partition(b" ")
        n = _hex(length, "string length")
        if len(tail) < n:
            raise ValueError(f"string of {n} bytes, {len(tail)} left")
        return tail[:n].decode("utf-8", "surrogateescape"), tail[n:]
    name, _, tail = rest.partition(b" ")
    return name.decode("utf-8", "surrogateescape"), b" " + tail


def convert(path: str, out_path: str, version_label: str = "", sysroot: str | None = None,
            **_ignored) -> Summary:
    """Converts one raw heaptrack recording into one `.ltprof` at out_path."""
    summary = Summary(source=path, output=out_path)
    lib = _native()
    with _open(path) as stream:
        batches = _batches(stream, summary)
        first, data, lo, hi = next(batches, (b"", b"", 0, 0))
        if not _VERSION_LINE.match(first):
            if summary.problems:  # not even the first line could be read
                raise InputError(f"{path}: {summary.problems[0]}")
            shown = first[:60].decode("utf-8", "backslashreplace").rstrip()
            raise InputError(f"{path}: not a heaptrack recording (line 1 is {shown!r}, "
                             "expected 'v VERSION FORMAT')")
        fields = first.split()  # at most 16 hex digits each (_VERSION_LINE)
        version = int(fields[1], 16)
        file_format = int(fields[2], 16) if len(fields) > 2 else 1
        sized = file_format >= 3
        tmp = out_path + ".partial"
        state = lib.ht_new()
        if not state:
            raise MemoryError("heaptrack reader: out of memory")
        try:
            with open(tmp, "wb") as out:
                _Converter(path, out, summary, version, file_format, sized,
                           version_label, sysroot, lib, state).run(
                    itertools.chain([(None, data, lo, hi)], batches))
            os.replace(tmp, out_path)
        finally:
            lib.ht_delete(state)
            if os.path.exists(tmp):
                os.unlink(tmp)
    return summary


class _Converter:
    def __init__(self, path, out, summary, version, file_format, sized, version_label,
                 sysroot, lib, state):
        self.path, self.out, self.summary = path, out, summary
        self.version, self.file_format, self.sized = version, file_format, sized
        self.version_label = version_label
        self.modules = _Modules(summary, sysroot)
        self.exe = ""
        self.argv: list[str] = []
        self.nodes: list[tuple[int, int]] = [(0, 0)]  # trace tree; node 0 is the root
        self.written: set[int] = set()                 # stack ids already in the file
        # The live objects (by pointer), the events since the last stamp, the bytes
        # clock and the unmatched / reused counts are the native reader's (`state`).
        self.lib, self.state = lib, state
        self.t_ms = 0                      # the last stamp
        self.writer: _Writer | None = None

    @property
    def total_bytes(self) -> int:
        return self.lib.ht_total(self.state)

    # -- output ---------------------------------------------------------------
    def _header(self) -> profile_pb2.Header:
        m = _PID_IN_NAME.match(os.path.basename(self.path))
        pid = int(m.group(1)) if m and len(m.group(1)) <= 10 else 0
        exe = _proto_str(self.exe)
        return profile_pb2.Header(
            schema_version=profile_pb2.SCHEMA_VERSION,
            program=os.path.basename(exe), executable_path=exe,
            version_label=self.version_label, argv=[_proto_str(a) for a in self.argv],
            pid=pid if pid <= U32_MAX else 0,  # a number in a file name, not always a pid
            sampling_interval_bytes=1, full_trace=True,
            clocks=[profile_pb2.CLOCK_MONOTONIC_NS, profile_pb2.CLOCK_ALLOCATED_BYTES],
            max_stack_depth=MAX_STACK_DEPTH,
            sampler_version=f"heaptrack {self.version:x} (file format {self.file_format})",
            imported_from=NAME)

    def _chunk(self) -> profile_pb2.ProfileChunk:
        if self.writer is None:
            self.writer = _Writer(self.out, self._header())
        chunk = self.writer.chunk
        if self.modules.pending:
            chunk.mappings.extend(self.modules.pending)
            self.modules.pending.clear()
        return chunk

    def _stack(self, chunk, leaf: int) -> None:
        """Writes the stack of a trace leaf once: IPs + 1 (return addresses), leaf first."""
        if leaf in self.written:
            return
        self.written.add(leaf)
        addresses = []
        node = leaf
        # Parents always precede their children: the walk ends at the root.  One frame
        # past the limit says "truncated"; deeper chains are never walked.
        while node and len(addresses) <= MAX_STACK_DEPTH:
            ip, node = self.nodes[node]
            addresses.append(ip + 1)
        chunk.stacks.add(id=leaf, addresses=addresses[:MAX_STACK_DEPTH],
                         truncated=len(addresses) > MAX_STACK_DEPTH)
        self.summary.stacks += 1

    def _emit(self, rows: np.ndarray, censored: bool) -> None:
        """Samples of these rows, in order, CHUNK_SAMPLES a chunk; each new stack goes
        into the chunk of its first sample."""
        done = 0
        while done < len(rows):
            chunk = self._chunk()
            writer = self.writer
            part = rows[done:done + CHUNK_SAMPLES - writer.count()]
            nodes, first = np.unique(part[:, 1], return_index=True)
            if len(nodes) > len(self.written) or not self.written.issuperset(nodes.tolist()):
                for node in nodes[np.argsort(first)].tolist():  # in order of first use
                    if node not in self.written:
                        self._stack(chunk, node)
            writer.add(part, censored)
            done += len(part)
            if writer.count() >= CHUNK_SAMPLES:
                writer.flush()
        self.summary.samples += len(rows)
        if censored:
            self.summary.censored += len(rows)

    # -- time -----------------------------------------------------------------
    def _stamp(self, t_ms: int) -> None:
        """Closes the window: spreads its events evenly between the two stamps (the
        k-th of n between t0 and t0 + span gets t0 + span (2k + 1) // 2n, exactly)."""
        n = self.lib.ht_window(self.state)
        if n:
            t0 = self.t_ms * NS_PER_MS
            span = max(t_ms - self.t_ms, 0) * NS_PER_MS
            rows = np.empty((n, 7), np.uint64)
            freed = _check(self.lib.ht_stamp(self.state, t0, span, rows.ctypes.data))
            self._emit(rows[:freed], False)
        self.t_ms = max(t_ms, self.t_ms)

    # -- the stream -----------------------------------------------------------
    def run(self, batches: Iterator[tuple]) -> None:
        lineno = 1
        lines = ctypes.c_int64()
        feed, state, nodes = self.lib.ht_feed, self.state, self.nodes
        for first, data, pos, end in batches:
            if first is not None:
                lineno += 1
                self._line(first, lineno)
            while pos < end:  # `+`/`-` lines in heaptrack's form natively, the rest here
                pos = _check(feed(state, data, pos, end, len(nodes), lines))
                lineno += lines.value
                if pos < end:
                    eol = data.index(b"\n", pos)
                    lineno += 1
                    self._line(data[pos:eol], lineno)
                    pos = eol + 1
        self._finish()

    def _line(self, line: bytes, lineno: int) -> None:
        """One line of any kind, with every check."""
        summary = self.summary
        nodes = self.nodes
        kind = line[:1]
        try:
            if kind == b"+":
                fields = line[2:].split()
                if len(fields) == 1:
                    self._interpreted(lineno)
                size_s, node_s, ptr_s = fields
                size = _hex(size_s, "size", MAX_SIZE)
                node, ptr = _hex(node_s, "trace node"), _hex(ptr_s, "pointer")
                if not 0 < node < len(nodes):
                    _malformed(summary, "undefined_trace", lineno,
                               f"allocation names trace node {node}, never defined")
                    return
                if self.total_bytes + size > U64_MAX:  # the bytes clock is uint64
                    raise OutOfRange(f"allocated bytes pass 2^64 with size {size:#x}")
                # A live pointer's free was never seen: that object ended unobserved.
                _check(self.lib.ht_alloc(self.state, size, node, ptr))
            elif kind == b"-":
                _check(self.lib.ht_free(self.state, _hex(line[2:], "pointer")))
            elif kind == b"t":
                ip_s, parent_s = line[2:].split()
                ip = _hex(ip_s, "IP", U64_MAX - 1)  # IP + 1 is written
                parent = _hex(parent_s, "parent")
                if parent >= len(nodes):
                    _malformed(summary, "undefined_parent", lineno,
                               f"trace node's parent {parent} is not defined yet")
                    parent = 0
                nodes.append((ip, parent))
            elif kind == b"c":
                self._stamp(_hex(line[2:], "stamp (ms)", MAX_MS))
            elif kind == b"m":
                name, rest = _parse_string(line[2:], self.sized)
                if name != "-":
                    numbers = [_hex(x, "module address") for x in rest.split()]
                    if not numbers or len(numbers) % 2 != 1:
                        raise ValueError("expected a base and (vaddr, memsz) pairs")
                    base, pairs = numbers[0], list(zip(numbers[1::2], numbers[2::2]))
                    end = max((base + v + m for v, m in pairs), default=0)
                    if end > U64_MAX:  # Mapping.limit is uint64
                        raise OutOfRange(f"a segment ends at {end:#x}, past 2^64")
                    self.modules.add(self.exe if name == "x" else name, base, pairs)
            elif kind == b"x":
                self.exe, rest = _parse_string(line[2:], self.sized)
                if rest.strip():
                    raise ValueError(f"{len(rest.strip())} bytes after the path")
            elif kind == b"X":
                self.argv = line[2:].decode("utf-8", "surrogateescape").split()
            elif kind in (b"a", b"i", b"s"):
                self._interpreted(lineno)
            elif kind in (b"v", b"I", b"R", b"A", b"S", b"#"):
                pass
            else:
                _malformed(summary, "unknown_record", lineno,
                           f"unknown record type {kind!r}; skipped")
        except InputError:
            raise
        except OutOfRange as e:
            what = _KINDS.get(kind, "line")
            _malformed(summary, f"{what}_out_of_range", lineno,
                       f"{e} in {line[:80]!r}; skipped")
        except (ValueError, IndexError) as e:
            what = _KINDS.get(kind, "line")
            _malformed(summary, f"bad_{what}", lineno,
                       f"cannot parse {line[:80]!r} ({e}); skipped")

    def _interpreted(self, lineno: int):
        raise InputError(
            f"{self.path}: line {lineno}: an interpreted heaptrack file (its frees name "
            "allocation-info indices, not pointers, so single objects' lifetimes are "
            "lost); record with `heaptrack --raw` (-r) and import the .raw.zst file")

    def _finish(self) -> None:
        summary, lib, state = self.summary, self.lib, self.state
        summary.unmatched_frees = lib.ht_unmatched(state)
        reused = lib.ht_reused(state)
        if reused:
            summary.dropped["address_reused"] = reused
        # Events after the last stamp (a recording cut short) get that stamp.
        self._stamp(self.t_ms)
        live = lib.ht_live(state)
        if summary.samples == 0 and not live:
            raise InputError(f"{self.path}: no allocations in this heaptrack recording"
                             + (f" ({summary.problems[0]})" if summary.problems else ""))
        rows = np.empty((live, 7), np.uint64)
        _check(lib.ht_censored(state, self.t_ms * NS_PER_MS, rows.ctypes.data))
        self._emit(rows, True)
        chunk = self._chunk()
        chunk.trailer.CopyFrom(profile_pb2.Trailer(
            end_monotonic_ns=self.t_ms * NS_PER_MS, end_allocated_bytes=self.total_bytes,
            total_allocations=summary.samples + summary.dropped.get("address_reused", 0),
            total_allocated_bytes=self.total_bytes, samples=summary.samples,
            censored_samples=summary.censored,
            dropped_samples=summary.dropped.get("address_reused", 0)))
        self.writer.flush()
        summary.allocated_bytes = self.total_bytes
        if summary.unmatched_frees:
            summary.notes.append(
                f"{summary.unmatched_frees} frees of pointers heaptrack never saw allocated "
                "(allocated before it started or outside malloc) were ignored")
