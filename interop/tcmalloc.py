"""TCMalloc lifetime profiles -> `.ltprof` (`lifetime import --format tcmalloc`).

Which file.  TCMalloc's lifetime (deallocation) profiler -- `MallocExtension::
StartLifetimeProfiling()`, then `Stop()` on its token, `ProfileType::kLifetimes` --
written by TCMalloc's own profile builder (`tcmalloc::Marshal`, i.e.
`MakeProfileProto` and gzip): a pprof `profile.proto` (`interop/pprof/profile.proto`),
gzipped or plain.  Layout relied on, from the sources vendored in the crates.io crate
`libtcmalloc-sys` 0.1.14 (`c_src/tcmalloc/tcmalloc/internal/profile_builder.cc`,
`MakeLifetimeProfileProto`; `c_src/tcmalloc/tcmalloc/deallocation_profiler.cc`,
`DeallocationStackTraceTable::Iterate`; upstream google/tcmalloc, same paths):

* `sample_type`, in this order: allocated_objects/count, allocated_space/bytes,
  deallocated_objects/count, deallocated_space/bytes, censored_allocated_objects/count,
  censored_allocated_space/bytes (found here by name).  No `period` is written.
* The profiler aggregates sampled objects per (allocation stack, deallocation stack)
  pair and per CPU/thread "matching case", and emits each aggregate as
  - an *allocation* sample: the allocation stack, values (n, n*size, 0, 0, 0, 0), and
  - a *deallocation* sample: the deallocation stack, values (0, 0, n, n*size, 0, 0),
  both with the label `callstack-pair-id` (one id per aggregate) and the same numeric
  labels `avg_lifetime`, `stddev_lifetime`, `min_lifetime`, `max_lifetime` (unit
  `nanoseconds`), `bytes` (allocated size), `request` and `alignment` (omitted when 0),
  and string labels `active CPU`/`active vCPU`/`active L3`/`active NUMA`/`active
  thread` (same/different/none);
  - objects still live at `Stop()` are *censored*: one sample with the allocation
  stack, values (0, 0, 0, 0, n, n*size), whose lifetime labels are the objects' ages
  at the stop.
* n is the number of objects the sampled ones stand for (sampling weight x samples,
  rounded up to whole objects); the lifetime statistics are over the samples:
  Welford mean, population standard deviation, min, max, each "bucketed" (below 1 ms
  rounded down to a power of 10 ns, at least 1 ns; above, down to whole ms).
* Stack addresses are return addresses minus 1 (`ProfileBuilder::InternCallstack`),
  leaf first, at most 64 deep; mappings are every PT_LOAD of every loaded object
  (`dl_iterate_phdr`; the main executable first), build ids as hex strings.

kEventTrace.  The TCMalloc in `libtcmalloc-sys` 0.1.14 has no event-trace profile:
its `ProfileType` is kHeap, kFragmentation, kPeakHeap, kAllocations, kLifetimes
(`malloc_extension.h`), and `kAllocations` samples carry no free times.  So only
kLifetimes is imported; per-object times do not exist in these profiles.

Deriving per-object lifetimes (the rule; `Header.lifetimes_derived` is set).  Our
labels need a lifetime distribution per context (T95, `core/lifetimes.py`); an
aggregate gives n, mean m, standard deviation s, min a and max b.  Each aggregate
becomes at most three samples of its allocation stack whose weights sum to n:

    if a == b:  one sample at a, weight n
    else:       V = (m - a)(b - m)     the largest variance any distribution on [a, b]
                                       with mean m can have (Bhatia-Davis)
                q = min(1, s^2 / V)    (q = 0 when V = 0: m sits at an end)
                at a: n q (b - m)/(b - a),   at b: n q (m - a)/(b - a),   at m: n (1 - q)

a mixture of the two-point distribution on {a, b} with mean m and a point at m: its
mean is m, its variance q V = s^2, its min a and max b whenever q > 0 -- the
aggregate exactly, when it is consistent.  Bucketing can make s^2 exceed V: q is then
clamped to 1 (counted as `stddev_clamped`).  The T95 of a context is then one of its
aggregates' a, m or b.  Censored aggregates become censored samples the same way, with
the ages as observed ages.  Derived samples are "allocated" at the session start
(monotonic 0) and freed `lifetime` ns later; only lifetimes mean anything, and there
is no allocated-bytes clock (`Header.clocks` is CLOCK_MONOTONIC_NS only).

Also mapped: mappings (hex build ids to bytes), stacks (each address + 1: return
addresses like the sampler's), size (`request`, else `bytes`), alignment, the start
time and duration; `Trailer.total_allocations`/`total_allocated_bytes` are the sums of
the aggregates' counts and spaces (TCMalloc's estimates, not observed totals).  Not carried over (counted or noted in the summary): deallocation
stacks (our schema has one stack per sample; an allocation sample without its
deallocation partner is kept and counted), the CPU/thread matching labels, function
names of symbolized locations (the dataset job symbolizes from the binaries).  Each
recorded binary is looked up (under `sysroot` first) and its build id compared: a
missing one or another build is named in the summary; the dataset job then turns its
frames into `<module+?>` tokens.  Samples that cannot be used (a deallocation sample
without its allocation sample, no or inconsistent lifetime labels, an undefined
location) are dropped, counted by reason, the first of each named.

Bounds.  protobuf holds every number in its field's type when it parses the file; what
could still overflow ours is bounded before use: a location at address 2^64 - 1 (its
return address, + 1, is past 2^64) drops its sample (`address_out_of_range`), a label
naming a string that does not exist drops its sample (`bad_label`), and the trailer's
sums (objects, bytes: many int64 counts) and end time (start + duration) saturate at
their fields' limits, noted in the summary.
"""

from __future__ import annotations

import dataclasses
import gzip
import os
import zlib

from google.protobuf.message import DecodeError

from interop import ImportSummary, module_file
from core.errors import InputError
from core.files import under_sysroot
from profile_format import profile_pb2
from profile_format.container import MAX_STACK_DEPTH, open_regular, write_record

try:
    from interop.pprof import profile_pb2 as pprof_pb2
except ImportError as e:  # pragma: no cover - only before the build step
    raise ImportError(
        "interop/pprof/profile_pb2.py is generated at build time; run `make setup`") from e

NAME = "tcmalloc"
_GZIP_MAGIC = b"\x1f\x8b"
MAX_PROFILE_BYTES = 256 << 20  # decompressed; a pprof profile of a process is far smaller
SAMPLES_PER_CHUNK = 10_000
# TCMalloc's default sampling interval (common.h kDefaultProfileSamplingInterval):
# the lifetime profile records none, and Header.sampling_interval_bytes must be set.
DEFAULT_INTERVAL = 2 << 20
LIFETIME_TYPES = ("allocated_objects", "deallocated_objects", "censored_allocated_objects")
LIFETIME_LABELS = ("min_lifetime", "avg_lifetime", "max_lifetime", "stddev_lifetime")
U64_MAX = (1 << 64) - 1
I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1


class _BadSample(Exception):
    """One sample cannot be used: (reason, detail); it is dropped and counted."""


@dataclasses.dataclass
class Summary(ImportSummary):
    """What one import kept and dropped, with the aggregates' own counters (`samples`
    are the derived samples written, `dropped` counts pprof samples)."""

    format: str = NAME
    aggregates: int = 0          # allocation-side and censored pprof samples used
    objects: int = 0             # their counts (n), = the output's total weight
    bytes: int = 0               # their allocated_space + censored_allocated_space
    censored_objects: int = 0
    stddev_clamped: int = 0
    unpaired_allocations: int = 0
    deallocation_stacks_not_kept: int = 0


# ---------------------------------------------------------------- reading the file

def _read_bytes(path: str) -> bytes:
    """The file's (decompressed) bytes; InputError naming the file otherwise."""
    try:
        f, _ = open_regular(path)
    except Exception as e:  # ProfileFormatError names the file and the problem
        raise InputError(str(e)) from None
    with f:
        head = f.read(2)
        f.seek(0)
        try:
            if head == _GZIP_MAGIC:
                data = gzip.GzipFile(fileobj=f, mode="rb").read(MAX_PROFILE_BYTES + 1)
            else:
                data = f.read(MAX_PROFILE_BYTES + 1)
        except EOFError:
            raise InputError(f"{path}: truncated: the gzip stream ends early "
                             "(a cut profile cannot be parsed; nothing imported)") from None
        except (gzip.BadGzipFile, zlib.error) as e:
            raise InputError(f"{path}: corrupt gzip stream: {e}") from None
        except OSError as e:
            raise InputError(f"{path}: cannot read: {e.strerror or e}") from None
    if len(data) > MAX_PROFILE_BYTES:
        raise InputError(f"{path}: more than {MAX_PROFILE_BYTES >> 20} MiB of profile data; "
                         "not a TCMalloc profile of one process")
    return data


def _parse(path: str, data: bytes):
    if not data:
        raise InputError(f"{path}: empty file")
    try:
        profile = pprof_pb2.Profile.FromString(data)
    except DecodeError as e:
        raise InputError(f"{path}: not a pprof profile.proto ({e})") from None
    strings = profile.string_table
    if not strings or strings[0] != "":
        raise InputError(f"{path}: not a pprof profile.proto (no string table starting "
                         "with \"\")")
    return profile


def _string(path: str, strings, index: int) -> str:
    if not 0 <= index < len(strings):
        raise InputError(f"{path}: string index {index} out of range "
                         f"({len(strings)} strings)")
    return strings[index]


def _value_indices(path: str, profile) -> dict[str, int]:
    """Index of each lifetime sample type; InputError for any other kind of profile."""
    strings = profile.string_table
    types = [_string(path, strings, t.type) for t in profile.sample_type]
    found = {name: i for i, name in enumerate(types) if name in LIFETIME_TYPES}
    if len(found) != len(LIFETIME_TYPES):
        shown = ", ".join(f"{_string(path, strings, t.type)}/{_string(path, strings, t.unit)}"
                          for t in profile.sample_type) or "none"
        raise InputError(
            f"{path}: a pprof profile, but not a TCMalloc lifetime profile (sample types: "
            f"{shown}; expected {', '.join(LIFETIME_TYPES)}: record one with "
            "MallocExtension::StartLifetimeProfiling)")
    return found


def sniff(path: str) -> bool:
    """A pprof profile (gzipped or plain) with TCMalloc's lifetime sample types."""
    try:
        _value_indices(path, _parse(path, _read_bytes(path)))
    except Exception:  # not readable, not pprof, not lifetimes: not ours to say
        return False
    return True


# ---------------------------------------------------------------- the derivation rule

def derive(n: float, mean: float, stddev: float, lo: float, hi: float
           ) -> tuple[list[tuple[float, float]], bool]:
    """[(lifetime, weight)] reproducing an aggregate (module docstring), and whether the
    standard deviation had to be clamped.  Weights sum to n; zero weights are left out."""
    if hi <= lo:
        return [(lo, n)], False
    v = (mean - lo) * (hi - mean)
    q = min(1.0, stddev * stddev / v) if v > 0 else 0.0
    clamped = v > 0 and stddev * stddev > v
    at_lo = n * q * (hi - mean) / (hi - lo)
    at_hi = n * q * (mean - lo) / (hi - lo)
    points = [(lo, at_lo), (mean, n - at_lo - at_hi), (hi, at_hi)]
    return [(t, w) for t, w in points if w > 0], clamped


# ---------------------------------------------------------------- modules

def _module_status(path: str, build_id: bytes, sysroot: str | None) -> str:
    """ok, missing (no such file), build_id_differs (another build) or not_a_file."""
    if not path.startswith("/"):
        return "not_a_file"  # [vdso], linux-vdso.so.1: nothing to symbolize from
    status, _, found = module_file(under_sysroot(path, sysroot))
    if status != "ok":  # missing, unreadable, not ELF: counted, never raised
        return "missing"
    return "ok" if not build_id or found == build_id else "build_id_differs"


# ---------------------------------------------------------------- the converter

def convert(path: str, out_path: str, version_label: str = "", sysroot: str | None = None,
            **_options) -> Summary:
    """Writes out_path (.ltprof) from the TCMalloc lifetime profile at path."""
    profile = _parse(path, _read_bytes(path))
    values = _value_indices(path, profile)
    summary = Summary(source=path, output=out_path)
    return _Converter(path, profile, values, summary, version_label, sysroot).write(out_path)


class _Converter:
    def __init__(self, path, profile, values, summary, version_label, sysroot):
        self.path, self.profile, self.values = path, profile, values
        self.summary, self.version_label, self.sysroot = summary, version_label, sysroot
        self.strings = profile.string_table
        self.locations = {loc.id: loc for loc in profile.location}
        self.stack_ids: dict[tuple[int, ...], int] = {}

    def _drop(self, reason: str, index: int, detail: str) -> None:
        if reason not in self.summary.dropped:
            self.summary.dropped[reason] = 0
            self.summary.problems.append(f"{reason}: sample {index}: {detail}")
        self.summary.dropped[reason] += 1

    def _labels(self, sample) -> dict[str, tuple[int, str]]:
        """key -> (num, unit) of the numeric labels, and key -> (0, str) of the others;
        _BadSample if a label names a string the table does not hold."""
        out = {}
        n = len(self.strings)
        for label in sample.label:
            if not (0 <= label.key < n and 0 <= label.str < n and 0 <= label.num_unit < n):
                raise _BadSample("bad_label", f"a label names string "
                                 f"{max(label.key, label.str, label.num_unit)} of {n}")
            key = self.strings[label.key]
            if label.str:
                out[key] = (0, self.strings[label.str])
            else:
                out[key] = (label.num, self.strings[label.num_unit])
        return out

    def _kind(self, sample) -> tuple[str, int] | None:
        """("alloc"|"dealloc"|"censored", n), or None when no lifetime value is set."""
        v = list(sample.value)
        got = [(kind, v[i]) for kind, i in zip(("alloc", "dealloc", "censored"),
                                                (self.values[t] for t in LIFETIME_TYPES))
               if i < len(v) and v[i] != 0]
        return got[0] if len(got) == 1 else None

    def _space(self, sample, kind: str) -> int:
        """The sample's allocated_space or censored_allocated_space (0 if absent)."""
        name = "censored_allocated_space" if kind == "censored" else "allocated_space"
        types = [_string(self.path, self.strings, t.type) for t in self.profile.sample_type]
        i = types.index(name) if name in types else len(sample.value)
        return max(0, sample.value[i]) if i < len(sample.value) else 0

    def _mappings(self) -> list:
        out, statuses = [], {}
        for m in self.profile.mapping:
            name = _string(self.path, self.strings, m.filename)
            hex_id = _string(self.path, self.strings, m.build_id)
            try:
                build_id = bytes.fromhex(hex_id)
            except ValueError:
                build_id = b""
                self.summary.notes.append(f"mapping {m.id} ({name}): build id {hex_id!r} "
                                          "is not hex; kept without it")
            if m.memory_start >= m.memory_limit:
                self._drop("bad_mapping", m.id, f"mapping {m.id}: start >= limit (skipped)")
                continue
            if name not in statuses:
                statuses[name] = _module_status(name, build_id, self.sysroot)
                if statuses[name] != "ok":
                    self.summary.modules.setdefault(statuses[name], []).append(name)
            out.append(profile_pb2.Mapping(id=m.id, start=m.memory_start,
                                           limit=m.memory_limit, file_offset=m.file_offset,
                                           path=name, build_id=build_id))
        self.summary.mappings = len(out)
        return out

    def _stack(self, chunk, index: int, sample) -> int | None:
        addresses = []
        for lid in sample.location_id:
            loc = self.locations.get(lid)
            if loc is None:
                self._drop("undefined_location", index, f"names location {lid}, not defined")
                return None
            if loc.address >= U64_MAX:  # its return address would not fit 64 bits
                self._drop("address_out_of_range", index,
                           f"location {lid} at {loc.address:#x}: address + 1 passes 2^64")
                return None
            addresses.append(loc.address + 1)  # TCMalloc wrote return address - 1
        truncated = len(addresses) > MAX_STACK_DEPTH
        key = tuple(addresses[:MAX_STACK_DEPTH])
        if key not in self.stack_ids:
            self.stack_ids[key] = len(self.stack_ids) + 1
            chunk.stacks.add(id=self.stack_ids[key], addresses=key, truncated=truncated)
        return self.stack_ids[key]

    def _saturated(self, field: str, value: int, lo: int, hi: int) -> int:
        """value within [lo, hi] (the Trailer field's type), noted when it is not."""
        if lo <= value <= hi:
            return value
        self.summary.notes.append(f"Trailer.{field} {value} is outside its field's range; "
                                  f"saturated at {hi if value > hi else lo}")
        return hi if value > hi else lo

    def _header(self) -> profile_pb2.Header:
        p = self.profile
        main = _string(self.path, self.strings, p.mapping[0].filename) if p.mapping else ""
        h = profile_pb2.Header(
            schema_version=profile_pb2.SCHEMA_VERSION, program=os.path.basename(main),
            executable_path=main, version_label=self.version_label,
            start_time_unix_ns=p.time_nanos, start_monotonic_ns=0,
            sampling_interval_bytes=p.period if p.period > 0 else DEFAULT_INTERVAL,
            clocks=[profile_pb2.CLOCK_MONOTONIC_NS], max_stack_depth=MAX_STACK_DEPTH,
            imported_from=NAME, lifetimes_derived=True)
        if p.period <= 0:
            self.summary.notes.append(
                "the profile records no sampling interval; Header.sampling_interval_bytes is "
                f"TCMalloc's default {DEFAULT_INTERVAL}; weights are the profile's counts")
        return h

    def _aggregates(self) -> list[tuple[int, object, str, int, dict]]:
        """(index, sample, kind, n, labels) of every usable allocation-side or censored
        sample, in file order; pairing with deallocation samples is checked and counted."""
        by_pair: dict[int, dict[str, list]] = {}
        usable = []
        for index, sample in enumerate(self.profile.sample):
            kind_n = self._kind(sample)
            if kind_n is None:
                self._drop("no_lifetime_value", index, "not exactly one of allocated, "
                           "deallocated, censored objects is set")
                continue
            kind, n = kind_n
            try:
                labels = self._labels(sample)
            except _BadSample as e:
                reason, detail = e.args
                self._drop(reason, index, detail)
                continue
            if n < 0:
                self._drop("negative_count", index, f"{kind} objects {n}")
                continue
            pair = labels.get("callstack-pair-id", (0, ""))[0]
            if kind != "censored":
                by_pair.setdefault(pair, {"alloc": [], "dealloc": []})[kind].append(index)
            if kind == "dealloc":
                continue
            missing = [k for k in LIFETIME_LABELS
                       if k not in labels or labels[k][1] != "nanoseconds"]
            if missing:
                self._drop("missing_lifetime_labels", index,
                           f"no {', '.join(missing)} label in nanoseconds")
                continue
            lo, mean, hi, sd = (labels[k][0] for k in LIFETIME_LABELS)
            if not (0 <= lo <= mean <= hi and sd >= 0):
                self._drop("inconsistent_lifetimes", index,
                           f"min {lo} avg {mean} max {hi} stddev {sd} (ns)")
                continue
            usable.append((index, sample, kind, n, labels))
        alloc_without = 0
        for pair, sides in sorted(by_pair.items()):
            if not sides["alloc"]:
                for index in sides["dealloc"]:
                    self._drop("deallocation_without_allocation", index,
                               f"callstack-pair-id {pair} has no allocation sample")
            elif not sides["dealloc"]:
                alloc_without += len(sides["alloc"])
            self.summary.deallocation_stacks_not_kept += len(sides["dealloc"])
        self.summary.unpaired_allocations = alloc_without
        return usable

    def write(self, out_path: str) -> Summary:
        chunk = profile_pb2.ProfileChunk(header=self._header())
        chunk.mappings.extend(self._mappings())
        usable = self._aggregates()
        if not usable:
            raise InputError(f"{self.path}: no usable lifetime samples in this TCMalloc "
                             f"profile ({sum(self.summary.dropped.values())} dropped: "
                             f"{self.summary.problems[:1] or 'it has none'})")
        s = self.summary
        if any(loc.line for loc in self.profile.location):
            s.notes.append("the profile's locations carry function names; they are not "
                           "kept (the dataset job symbolizes from the binaries)")
        tmp = out_path + ".partial"  # never a half-written profile under the final name
        try:
            with open(tmp, "wb") as out:
                for index, sample, kind, n, labels in usable:
                    stack_id = self._stack(chunk, index, sample)
                    if stack_id is None:
                        continue
                    lo, mean, hi, sd = (labels[k][0] for k in LIFETIME_LABELS)
                    points, clamped = derive(float(n), mean, sd, lo, hi)
                    s.stddev_clamped += clamped
                    s.aggregates += 1
                    s.objects += n
                    s.bytes += self._space(sample, kind)
                    size = max(0, labels.get("request", (0, ""))[0]
                               or labels.get("bytes", (0, ""))[0])
                    alignment = max(0, labels.get("alignment", (0, ""))[0])
                    for t, w in points:
                        d = chunk.samples.add(stack_id=stack_id, size=size, weight=w,
                                              alignment=alignment,
                                              alloc_monotonic_ns=0)
                        if kind == "censored":
                            d.censored, d.observed_age_ns = True, round(t)
                            s.censored += 1
                        else:
                            d.free_monotonic_ns, d.free_function = round(t), profile_pb2.FREE
                    if kind == "censored":
                        s.censored_objects += n
                    s.samples += len(points)
                    if len(chunk.samples) >= SAMPLES_PER_CHUNK:
                        write_record(out, chunk.SerializeToString())
                        chunk = profile_pb2.ProfileChunk()
                chunk.trailer.CopyFrom(profile_pb2.Trailer(
                    total_allocations=self._saturated("total_allocations", s.objects, 0, U64_MAX),
                    total_allocated_bytes=self._saturated("total_allocated_bytes", s.bytes,
                                                          0, U64_MAX),
                    end_monotonic_ns=max(self.profile.duration_nanos, 0),
                    end_time_unix_ns=self._saturated(
                        "end_time_unix_ns",
                        self.profile.time_nanos + self.profile.duration_nanos, I64_MIN, I64_MAX),
                    samples=s.samples, censored_samples=s.censored))
                write_record(out, chunk.SerializeToString())
            if not s.aggregates:  # every usable-looking sample named an undefined location
                raise InputError(f"{self.path}: no usable lifetime samples in this TCMalloc "
                                 f"profile ({self.summary.problems[0]})")
            os.replace(tmp, out_path)
        except OSError as e:
            raise InputError(f"{out_path}: cannot write: {e.strerror or e}") from None
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        s.stacks = len(self.stack_ids)
        return s


