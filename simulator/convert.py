"""`.ltprof` profile -> `.lttrace` object trace (+ a side file of its stacks).

Each valid sample of the profile becomes one object of the trace: its allocation time
(`alloc_monotonic_ns`), its free time (or never freed: a censored sample, still live
when the profile ended), size, alignment, allocating thread and stack id.  The sampler
writes samples in *completion* order (a sample is written when its object is freed;
censored ones at the end), so the records are sorted by allocation time with bounded
memory: runs of `run_records` records are sorted in memory (numpy) and spilled to
temporary files next to the output, then merged block by block.  Ties in allocation
time keep the profile's order (the sort key is (alloc_ns, position in the file)), so
the same profile always gives the same trace.

The trace header carries the class boundaries of a `core.lifetimes.LabelScheme`
(wall clock, ms -> ns), so the engine's oracle labels objects as the datasets do.

The side file `<trace stem>.stacks.json` (format `lifetime-trace-stacks-v1`) holds
what a table predictor needs to symbolize the trace's stacks, and what the report
says about where the trace came from:

    {"format": "lifetime-trace-stacks-v1",
     "trace": "<file name of the trace>",
     "source": {profile, program, version_label, executable_path, pid,
                sampling_interval_bytes, full_trace, sampled, coverage, ...},
     "boundaries_ns": [...], "class_names": [...],
     "counts": {samples, records, censored, skipped: {reason: n}, problems: [...]},
     "mappings": [{id, start, limit, file_offset, path, build_id (hex)}],
     "stacks": [{"id", "addresses": [...], "truncated",
                 "objects": [per true class], "bytes": [per true class]}]}

A profile that was Poisson-sampled (header interval > 1 and not a full trace) gives a
trace of the *sampled objects only*: `source.sampled` is true and the report says so
(the heap it simulates is a thinned one; nothing is scaled up).
"""

from __future__ import annotations

import array
import dataclasses
import json
import os
import tempfile
import time
from typing import Callable

import numpy as np

from core.errors import LifetimeError
from core.files import read_json
from core import lifetimes
from core.lifetimes import LabelScheme
from profile_format.container import ProfileReader
from simulator import trace as tr

STACKS_FORMAT = "lifetime-trace-stacks-v1"
STACKS_SUFFIX = ".stacks.json"
TRACE_SUFFIX = ".lttrace"
MAX_SIZE = 1 << 44  # the engine refuses sizes >= 16 TiB

RECORD_DTYPE = np.dtype([("alloc", "<u8"), ("free", "<u8"), ("size", "<u8"), ("stack", "<u8"),
                         ("tid", "<u4"), ("align", "<u4")])
RUN_DTYPE = np.dtype(RECORD_DTYPE.descr + [("seq", "<u8")])
assert RECORD_DTYPE.itemsize == tr.RECORD.size

DEFAULT_RUN_RECORDS = 1 << 20   # 48 MiB of run buffer
MERGE_BLOCK_RECORDS = 1 << 16   # per run, while merging


class ConvertError(LifetimeError):
    """A profile that cannot be turned into a trace (names the file and the problem)."""


def stacks_path(trace_path: str | os.PathLike) -> str:
    """The side file of a trace: X.lttrace -> X.stacks.json."""
    p = os.fspath(trace_path)
    return (p[: -len(TRACE_SUFFIX)] if p.endswith(TRACE_SUFFIX) else p) + STACKS_SUFFIX


def boundaries_ns(scheme: LabelScheme) -> tuple[int, ...]:
    """A wall-clock label scheme's boundaries (ms) in ns, as the trace header holds them."""
    if scheme.clock != "wall":
        raise ConvertError(f"label clock {scheme.clock!r}: the simulator replays wall-clock "
                           "time; use a dataset labelled on the wall clock")
    return lifetimes.boundaries_ns(scheme.boundaries)


def is_full_trace(header) -> bool:
    """True when the profile records every allocation: the sampler's full-trace mode
    (Header.full_trace), or a 1-byte mean interval, where every allocation of 16 bytes
    or more is sampled with probability 1 - e^-16."""
    return header.full_trace or header.sampling_interval_bytes <= 1


def _true_classes(alloc, free, bounds: np.ndarray) -> np.ndarray:
    """The oracle's class of each object (simulator.trace.true_class, vectorized)."""
    never = free == np.uint64(tr.NEVER)
    life = np.where(never, np.uint64(0), free - alloc)
    cls = np.searchsorted(bounds, life, side="right").astype(np.int64)
    cls[never] = len(bounds) + 1
    return cls


@dataclasses.dataclass
class ConvertResult:
    trace: str
    stacks: str
    records: int
    meta: dict  # the side file's contents, less mappings and stacks


class _Run:
    """One sorted run on disk, read back a block at a time."""

    def __init__(self, path: str, count: int):
        self.path, self.count, self.pos = path, count, 0

    def next_block(self, n: int) -> np.ndarray:
        k = min(n, self.count - self.pos)
        if k <= 0:
            return np.empty(0, RUN_DTYPE)
        block = np.fromfile(self.path, RUN_DTYPE, count=k, offset=self.pos * RUN_DTYPE.itemsize)
        self.pos += k
        return block

    @property
    def exhausted(self) -> bool:
        return self.pos >= self.count


def _sort_run(run: np.ndarray) -> np.ndarray:
    return run[np.lexsort((run["seq"], run["alloc"]))]


def _merge(runs: list[_Run], out, block: int) -> None:
    """k-way merge of runs sorted by (alloc, seq) into `out` (trace records).

    Each round takes, from every run's buffer, the records up to the smallest "last
    buffered key" among runs that still have records on disk: nothing unread can sort
    before it.  The run that set the bound empties its buffer, so every round moves on."""
    bufs = [r.next_block(block) for r in runs]
    while any(len(b) for b in bufs):
        bound = None
        for r, b in zip(runs, bufs):
            if len(b) and not r.exhausted:
                key = (int(b["alloc"][-1]), int(b["seq"][-1]))
                bound = key if bound is None or key < bound else bound
        taken = []
        for i, b in enumerate(bufs):
            if not len(b):
                continue
            if bound is None:
                n = len(b)
            else:
                a, s = np.uint64(bound[0]), np.uint64(bound[1])
                n = int(np.count_nonzero((b["alloc"] < a) | ((b["alloc"] == a) & (b["seq"] <= s))))
            if n:
                taken.append(b[:n])
                bufs[i] = b[n:]
            if not len(bufs[i]):
                bufs[i] = runs[i].next_block(block)
        batch = np.concatenate(taken) if len(taken) > 1 else taken[0]
        _write_records(out, _sort_run(batch))


def _write_records(out, run: np.ndarray) -> None:
    recs = np.empty(len(run), RECORD_DTYPE)
    for name in RECORD_DTYPE.names:
        recs[name] = run[name]
    out.write(recs.tobytes())


def convert_profile(profile: str | os.PathLike, trace_path: str | os.PathLike,
                    scheme: LabelScheme | None = None, *, run_records: int = DEFAULT_RUN_RECORDS,
                    progress: Callable[[str], None] | None = None,
                    progress_every: int = 1_000_000) -> ConvertResult:
    """Writes `trace_path` and its side file (`stacks_path`) from one profile file.

    Raises ConvertError when the profile has no header or no usable sample; problems
    in a usable profile (a truncated tail, dropped samples) are kept in the side file's
    `counts.problems`."""
    path = os.fspath(profile)
    trace_path = os.fspath(trace_path)
    scheme = scheme or LabelScheme()
    bounds = boundaries_ns(scheme)
    bounds_np = np.array(bounds, np.uint64)
    say = progress or (lambda _msg: None)
    run_records = max(1, int(run_records))
    started = time.monotonic()

    reader = ProfileReader(path)
    # Columns of the current run: 48 bytes per record, not a Python object each.
    cols = {k: array.array("Q" if k in ("alloc", "free", "size", "stack") else "I")
            for k in ("alloc", "free", "size", "stack", "tid", "align")}
    runs: list[_Run] = []
    skipped: dict[str, int] = {}
    stack_stats: dict[int, np.ndarray] = {}  # stack -> [objects per class..., bytes per class...]
    nclass = len(bounds) + 2
    max_time = 0
    censored_end = 0
    seq = 0
    os.makedirs(os.path.dirname(os.path.abspath(trace_path)), exist_ok=True)
    tmp = tempfile.TemporaryDirectory(prefix=".lttrace-runs-",
                                      dir=os.path.dirname(os.path.abspath(trace_path)))

    def spill() -> None:
        nonlocal max_time
        n = len(cols["alloc"])
        if not n:
            return
        run = np.empty(n, RUN_DTYPE)
        for k, v in cols.items():
            run[k] = np.frombuffer(v, dtype=run.dtype[k].newbyteorder("="))
            del v[:]
        run["seq"] = np.arange(seq - n, seq, dtype=np.uint64)
        run = _sort_run(run)
        freed = run["free"][run["free"] != np.uint64(tr.NEVER)]
        max_time = max(max_time, int(run["alloc"][-1]), int(freed.max()) if len(freed) else 0)
        cls = _true_classes(run["alloc"], run["free"], bounds_np)
        keys, inverse = np.unique(run["stack"], return_inverse=True)
        flat = inverse * nclass + cls
        counts = np.bincount(flat, minlength=len(keys) * nclass).reshape(len(keys), nclass)
        sizes = np.bincount(flat, weights=run["size"].astype(np.float64),
                            minlength=len(keys) * nclass).reshape(len(keys), nclass)
        for j, k in enumerate(keys.tolist()):
            acc = stack_stats.get(k)
            if acc is None:
                acc = stack_stats[k] = np.zeros(2 * nclass, np.float64)
            acc[:nclass] += counts[j]
            acc[nclass:] += sizes[j]
        fname = os.path.join(tmp.name, f"run{len(runs):05d}")
        run.tofile(fname)
        runs.append(_Run(fname, n))

    try:
        a_alloc, a_free, a_size, a_stack, a_tid, a_align = (cols[k] for k in
                                                            ("alloc", "free", "size", "stack", "tid", "align"))
        for s in reader.samples():
            size = s.size
            if size >= MAX_SIZE:
                skipped["size_over_16TiB"] = skipped.get("size_over_16TiB", 0) + 1
                continue
            align = s.alignment
            if align & (align - 1):  # not a power of two: the next one up
                align = 1 << align.bit_length()
                skipped["alignment_rounded_up (kept)"] = skipped.get("alignment_rounded_up (kept)", 0) + 1
            if align >= 1 << 32:
                skipped["alignment_over_4GiB"] = skipped.get("alignment_over_4GiB", 0) + 1
                continue
            alloc = s.alloc_monotonic_ns
            if s.censored:
                a_free.append(tr.NEVER)
                end = alloc + s.observed_age_ns
                if end > censored_end:
                    censored_end = end
            else:
                a_free.append(s.free_monotonic_ns)
            a_alloc.append(alloc)
            a_size.append(size)
            a_stack.append(s.stack_id)
            a_tid.append(s.alloc_thread)
            a_align.append(align)
            seq += 1
            if len(a_alloc) >= run_records:
                spill()
            if seq % progress_every == 0:
                say(f"converting {path}: {seq:,} samples read, {len(runs)} sorted runs "
                    f"({time.monotonic() - started:.0f} s)")
        spill()
        if reader.header is None:
            reason = reader.problems[0].reason if reader.problems else "empty: no header"
            raise ConvertError(f"{path}: {reason}")
        if reader.header.lifetimes_derived:
            # Imported aggregates (e.g. TCMalloc's lifetime profiles, a few samples per
            # stack) have lifetimes but no timeline: there is no order of events to replay.
            raise ConvertError(f"{path}: its lifetimes were derived from per-stack "
                               f"aggregates (imported from "
                               f"{reader.header.imported_from or 'another profiler'}), "
                               "not recorded object by object: there is no trace to replay")
        if not runs:
            dropped = sum(reader.dropped.values())
            raise ConvertError(f"{path}: empty: the profile holds no usable samples"
                               + (f" ({dropped} dropped)" if dropped else ""))
        header, trailer = reader.header, reader.trailer
        end_ns = max(max_time, censored_end, trailer.end_monotonic_ns if trailer is not None else 0)
        if len(runs) > 1:
            say(f"converting {path}: merging {len(runs)} sorted runs of {seq:,} records")
        with open(trace_path, "wb") as out:
            out.write(tr.encode_header(bounds, seq, end_ns))
            if len(runs) == 1:
                _write_records(out, np.fromfile(runs[0].path, RUN_DTYPE))
            else:
                _merge(runs, out, MERGE_BLOCK_RECORDS)
    finally:
        tmp.cleanup()

    full = is_full_trace(header)
    total_allocs = trailer.total_allocations if trailer is not None else None
    source = {
        "profile": os.path.abspath(path), "program": header.program,
        "version_label": header.version_label, "executable_path": header.executable_path,
        "pid": header.pid, "argv": list(header.argv),
        "sampling_interval_bytes": header.sampling_interval_bytes,
        "full_trace": full, "sampled": not full,
        "complete": trailer is not None,
        "end_reason": int(trailer.end_reason) if trailer is not None else None,
        "total_allocations": total_allocs,
        "total_allocated_bytes": trailer.total_allocated_bytes if trailer is not None else None,
        "dropped_by_sampler": trailer.dropped_samples if trailer is not None else None,
        "coverage": (seq / total_allocs) if total_allocs else None,
        "start_monotonic_ns": header.start_monotonic_ns,
    }
    used = sorted(stack_stats)
    meta = {
        "format": STACKS_FORMAT, "trace": os.path.basename(trace_path), "source": source,
        "boundaries_ns": list(bounds), "class_names": scheme.class_names,
        "label_scheme": scheme.to_json(),
        "counts": {"samples": reader.kept, "records": seq, "censored": reader.censored,
                   "skipped": skipped, "dropped_by_reader": dict(sorted(reader.dropped.items())),
                   "problems": [p.reason for p in reader.problems], "stacks": len(used),
                   "end_ns": end_ns, "runs": len(runs),
                   "seconds": round(time.monotonic() - started, 3)},
    }
    doc = dict(meta)
    doc["mappings"] = [{"id": m.id, "start": m.start, "limit": m.limit,
                        "file_offset": m.file_offset, "path": m.path,
                        "build_id": m.build_id.hex()} for m in reader.mappings]
    doc["stacks"] = []
    for sid in used:
        st = reader.stacks[sid]
        acc = stack_stats[sid]
        doc["stacks"].append({"id": sid, "addresses": list(st.addresses), "truncated": st.truncated,
                              "objects": [int(x) for x in acc[:nclass]],
                              "bytes": [int(x) for x in acc[nclass:]]})
    side = stacks_path(trace_path)
    with open(side, "w", encoding="utf-8") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    say(f"converted {path}: {seq:,} objects, {len(used)} stacks -> {trace_path} "
        f"({time.monotonic() - started:.1f} s)")
    return ConvertResult(trace_path, side, seq, meta)


def load_stacks(path: str | os.PathLike) -> dict:
    """Reads a trace's side file (checked for its format)."""
    p = os.fspath(path)
    try:
        doc = read_json(p)  # a fifo is refused, never waited on
    except FileNotFoundError:
        raise ConvertError(f"{p}: no such file (the trace's stack side file, written by the "
                           "converter next to it; convert the profile again)") from None
    except OSError as e:
        raise ConvertError(f"{p}: cannot read the trace's stack side file ({e.strerror})") from None
    except ValueError as e:
        raise ConvertError(f"{p}: cannot read the trace's stack side file ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != STACKS_FORMAT:
        raise ConvertError(f"{p}: not a {STACKS_FORMAT} file")
    for key in ("mappings", "stacks", "boundaries_ns", "source"):
        if key not in doc:
            raise ConvertError(f"{p}: malformed side file (no {key!r})")
    return doc


class MappingRecord:
    """A side file's mapping, shaped like profile_pb2.Mapping for the symbolizer."""

    __slots__ = ("id", "start", "limit", "file_offset", "path", "build_id")

    def __init__(self, d: dict):
        self.id, self.start, self.limit = int(d["id"]), int(d["start"]), int(d["limit"])
        self.file_offset, self.path = int(d["file_offset"]), str(d["path"])
        self.build_id = bytes.fromhex(d.get("build_id") or "")
