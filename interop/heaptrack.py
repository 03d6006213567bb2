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

Mapping to our profile (profiler_proto/README.md):

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
  module file is read here (pyelftools; the build id with `pipeline.symbolize`'s
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
and the events of one ~10 ms window.  (About 590 lines, a sixth of them this
description of the format: one reader, one job.)
"""

from __future__ import annotations

import dataclasses
import gzip
import os
import re
import zlib
from typing import BinaryIO, Iterator

from interop import ImportSummary, module_file
from lifetime.errors import InputError
from profiler_proto import profile_pb2
from profiler_proto.container import MAX_STACK_DEPTH, open_regular, write_record

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
        import zstandard  # a dependency of apache-beam
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


def _lines(f: BinaryIO, summary: Summary) -> Iterator[bytes]:
    """The file's complete lines, without their newline; a cut last line or an early
    end of the compressed stream is reported, and everything before it kept.  A line
    over MAX_LINE_BYTES is skipped without being held (`line_too_long`); `#` (a
    comment, ignored) stands in for it, so later line numbers stay right."""
    parts: list[bytes] = []  # the open line's pieces, joined once when it ends
    held, n, skipping = 0, 0, False
    try:
        for data in _chunks(f):
            if skipping:  # inside an over-long line: drop bytes up to its end unread
                end = data.find(b"\n")
                if end < 0:
                    continue
                data, skipping, n = data[end + 1:], False, n + 1  # its `#` is out
            lines = data.split(b"\n")
            if len(lines) > 1:
                if parts:
                    lines[0] = b"".join(parts) + lines[0]
                tail = lines.pop()
                parts, held = [tail], len(tail)
                if len(lines[0]) > MAX_LINE_BYTES:
                    _malformed(summary, "line_too_long", n + 1,
                               f"more than {MAX_LINE_BYTES} bytes; skipped")
                    lines[0] = b"#"
                n += len(lines)
                yield from lines
            else:
                parts.append(data)
                held += len(data)
            if held > MAX_LINE_BYTES:
                _malformed(summary, "line_too_long", n + 1,
                           f"more than {MAX_LINE_BYTES} bytes; skipped")
                parts, held, skipping = [], 0, True
                yield b"#"
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
        local = path
        if self.sysroot and path.startswith("/"):
            candidate = os.path.join(self.sysroot, path.lstrip("/"))
            if os.path.exists(candidate):
                local = candidate
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
    """Streams ProfileChunks: header first, each stack before its first sample."""

    def __init__(self, out: BinaryIO, header: profile_pb2.Header):
        self.out = out
        self.chunk = profile_pb2.ProfileChunk(header=header)

    def flush(self) -> None:
        write_record(self.out, self.chunk.SerializeToString(deterministic=True))
        self.chunk = profile_pb2.ProfileChunk()


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
    with _open(path) as stream:
        lines = _lines(stream, summary)
        first = next(lines, b"")
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
        try:
            with open(tmp, "wb") as out:
                _Converter(path, out, summary, version, file_format, sized,
                           version_label, sysroot).run(lines)
            os.replace(tmp, out_path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return summary


class _Converter:
    def __init__(self, path, out, summary, version, file_format, sized, version_label,
                 sysroot):
        self.path, self.out, self.summary = path, out, summary
        self.version, self.file_format, self.sized = version, file_format, sized
        self.version_label = version_label
        self.modules = _Modules(summary, sysroot)
        self.exe = ""
        self.argv: list[str] = []
        self.nodes: list[tuple[int, int]] = [(0, 0)]  # trace tree; node 0 is the root
        self.written: set[int] = set()                 # stack ids already in the file
        self.live: dict[int, list] = {}    # ptr -> [size, node, alloc_ns, alloc_bytes]
        self.window: list = []             # events since the last stamp, in order
        self.t_ms = 0                      # the last stamp
        self.total_bytes = 0
        self.writer: _Writer | None = None

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

    def _emit(self, obj: list, free_ns: int | None, free_bytes: int) -> None:
        size, node, alloc_ns, alloc_bytes, ptr = obj
        chunk = self._chunk()
        self._stack(chunk, node)
        s = chunk.samples.add(stack_id=node, size=size, address=ptr,
                              alloc_monotonic_ns=alloc_ns, alloc_allocated_bytes=alloc_bytes,
                              weight=1.0)
        if free_ns is None:
            s.censored = True
            s.observed_age_ns = self.t_ms * NS_PER_MS - alloc_ns
            s.observed_age_bytes = self.total_bytes - alloc_bytes
            self.summary.censored += 1
        else:
            s.free_monotonic_ns = free_ns
            s.free_allocated_bytes = free_bytes
            s.free_function = profile_pb2.FREE
        self.summary.samples += 1
        if len(chunk.samples) >= CHUNK_SAMPLES:
            self.writer.flush()

    # -- time -----------------------------------------------------------------
    def _stamp(self, t_ms: int) -> None:
        """Closes the window: spreads its events evenly between the two stamps."""
        t0 = self.t_ms * NS_PER_MS
        span = max(t_ms - self.t_ms, 0) * NS_PER_MS
        n = len(self.window)
        for k, (obj, free_bytes) in enumerate(self.window):
            t = t0 + (span * (2 * k + 1)) // (2 * n)
            if free_bytes is None:
                obj[2] = t
            else:
                self._emit(obj, t, free_bytes)
        self.window.clear()
        self.t_ms = max(t_ms, self.t_ms)

    # -- the stream -----------------------------------------------------------
    def run(self, lines: Iterator[bytes]) -> None:
        summary = self.summary
        lineno = 1
        nodes, live, window = self.nodes, self.live, self.window
        for line in lines:
            lineno += 1
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
                        continue
                    if self.total_bytes + size > U64_MAX:  # the bytes clock is uint64
                        raise OutOfRange(f"allocated bytes pass 2^64 with size {size:#x}")
                    self.total_bytes += size
                    old = live.get(ptr)
                    if old is not None:   # its free was never seen: ended unobserved
                        summary.dropped["address_reused"] = \
                            summary.dropped.get("address_reused", 0) + 1
                    obj = [size, node, None, self.total_bytes, ptr]
                    live[ptr] = obj
                    window.append((obj, None))
                elif kind == b"-":
                    ptr = _hex(line[2:], "pointer")
                    obj = live.pop(ptr, None)
                    if obj is None:
                        summary.unmatched_frees += 1
                    else:
                        window.append((obj, self.total_bytes))
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
        self._finish()

    def _interpreted(self, lineno: int):
        raise InputError(
            f"{self.path}: line {lineno}: an interpreted heaptrack file (its frees name "
            "allocation-info indices, not pointers, so single objects' lifetimes are "
            "lost); record with `heaptrack --raw` (-r) and import the .raw.zst file")

    def _finish(self) -> None:
        summary = self.summary
        # Events after the last stamp (a recording cut short) get that stamp.
        self._stamp(self.t_ms)
        if summary.samples == 0 and not self.live:
            raise InputError(f"{self.path}: no allocations in this heaptrack recording"
                             + (f" ({summary.problems[0]})" if summary.problems else ""))
        for ptr, obj in self.live.items():
            self._emit(obj, None, 0)
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
