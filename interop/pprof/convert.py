"""Our profiles (`.ltprof`) as one pprof `profile.proto`, laid out like TCMalloc's.

Two views (`--view`):

* ``lifetimes`` (default) follows TCMalloc's lifetime profile (`ProfileType::kLifetimes`:
  ``MakeLifetimeProfileProto`` in tcmalloc/internal/profile_builder.cc, samples from
  ``DeallocationStackTraceTable::Iterate`` in tcmalloc/deallocation_profiler.cc):
  sample types ``allocated_objects``/count, ``allocated_space``/bytes,
  ``deallocated_objects``/count, ``deallocated_space``/bytes,
  ``censored_allocated_objects``/count, ``censored_allocated_space``/bytes;
  ``default_sample_type`` ``deallocated_space``; ``period_type`` space/bytes; TCMalloc's
  ``drop_frames`` (its POSIX, libstdc++ and misc. allocator entries).  Objects are grouped
  by (stack, requested size, alignment, freed or censored, freed on the allocating
  thread or not), as TCMalloc groups by (allocation, deallocation record, matching
  case).  Labels per sample as TCMalloc's: ``bytes``, ``request``, ``alignment`` (unit
  bytes; ``bytes`` is TCMalloc's allocated size, which glibc does not tell us, so it is
  the requested size too), ``callstack-pair-id`` (unit count), ``avg_lifetime``,
  ``stddev_lifetime``, ``min_lifetime``, ``max_lifetime`` (unit nanoseconds, wall clock,
  weighted by objects; for censored objects the observed age, a lower bound, as
  TCMalloc's), ``active thread`` (``same``/``different``; ``none`` when censored).
  Differences: our sampler records no free stack, so the deallocation half of TCMalloc's
  pair is counted on the allocation stack, in the same pprof sample as its allocation;
  no ``active CPU`` label (the CPU is not recorded); lifetimes are exact, not rounded to
  TCMalloc's buckets, and written even when 0 (so numeric ``-tagfocus`` ranges see
  every sample).  As in TCMalloc, a censored group counts only in the censored columns:
  all objects = allocated + censored_allocated.
* ``allocations`` follows TCMalloc's allocation profile (``kAllocations``): sample types
  ``objects``/count and ``space``/bytes, every sampled object (freed or not) on its
  allocation stack, labels ``bytes``, ``request``, ``alignment``; the default sample
  type is ``space`` (weighted by sampled bytes; TCMalloc's default there is objects:
  ``-sample_index=objects``).

Scaling.  A sample stands for ``weight`` allocations (profile_format/README.md), as a
TCMalloc sample does (its ``weight`` / size).  Per group, with W the sum of its samples'
weights and S the requested size: objects = round(W), space = round(W x S).  TCMalloc
(``Iterate``) rounds the space up to whole objects (objects = ceil(lround(W x S) / S),
space = objects x S); with our groups -- a stack and an exact size, often one sample --
that overcounts by up to one object per group (measured on a 20,006-allocation program
sampled every 4 KiB: 21,826 objects and 57.7 MB against 20,006 and 52.4 MB allocated;
rounded to nearest: 19,820 and 52.0 MB), so we round to nearest.  In a full trace
every weight is 1 and the counts are exact: the objects and bytes of a view add up to
the trailer's allocations and allocated bytes (`lifetime inspect`).

``group_by_class`` adds a string label ``lifetime_class`` and splits the groups by it:
each object's class under `core.lifetimes`' scheme (default: wall clock, T95 <
10 ms ... 1000 s), named ``<10ms`` ... ``<1000s``, ``>=1000s``, and ``never freed`` for a
censored object (the scheme's rule on one object: its censored lifetime never reaches
the 95th percentile, class inf).

Frames.  Each stack address is a return address (the sampler's leaf too), looked up at
address - 1 (`core.symbolize`), which is also the Location's address, as TCMalloc
writes it.  One Location per (profile, address), its Lines the functions inlined there,
innermost first, then the physical function (pprof's order); functions are deduplicated
by (name, mangled name).  Frames that cannot be named keep our module token
(``<libfoo+?>``), so pprof shows what the dataset job sees.  Mappings carry the build id
in hex; the executable's mappings come first, as pprof expects.

Saturation.  Every pprof number is an int64 (values, numeric labels, period,
duration), while ours are uint64 and float weights: a size of 2^63 or more, a weight of
1e30, a lifetime of 292 years do not fit.  Such a number is written as the int64
maximum, 2^63 - 1 (NaN, from sums past any float, as 0), and counted by what it is in
`Summary.saturated` (e.g. "allocated_space": 2), which `lifetime pprof` prints and the
profile's comments state: every sample is kept, and a saturated value stands out as
the largest pprof can show rather than wrapping to a negative or failing the whole
conversion.  (Skipping the sample instead would silently shrink every total.)
"""

from __future__ import annotations

import collections
import dataclasses
import math
import os
import stat
from typing import Callable, Iterable

from interop.pprof.builder import ProfileBuilder, profile_pb2
from core.errors import InputError
from core import lifetimes
from core import symbolize
from core.files import writable_parent
from profile_format import ProfileFormatError, stream_profile

LIFETIMES = "lifetimes"
ALLOCATIONS = "allocations"
VIEWS = (LIFETIMES, ALLOCATIONS)
SAMPLE_TYPES = {
    LIFETIMES: (("allocated_objects", "count"), ("allocated_space", "bytes"),
                ("deallocated_objects", "count"), ("deallocated_space", "bytes"),
                ("censored_allocated_objects", "count"), ("censored_allocated_space", "bytes")),
    ALLOCATIONS: (("objects", "count"), ("space", "bytes")),
}
DEFAULT_SAMPLE_TYPE = {LIFETIMES: "deallocated_space", ALLOCATIONS: "space"}
CLASS_LABEL = "lifetime_class"
I64_MAX = (1 << 63) - 1  # pprof's numbers are int64

# TCMalloc's kProfileDropFrames less its own internals: allocator entry points, which
# pprof drops with the frames above them.
DROP_FRAMES = "|".join((
    "calloc", "cfree", "malloc", "free", "memalign", "do_memalign", "(__)?posix_memalign",
    "pvalloc", "valloc", "realloc", "__gnu_cxx::new_allocator::allocate",
    "__malloc_alloc_template::allocate", "_M_allocate", "std::__u::__libcpp_allocate",
    "std::__u::allocator::allocate", "std::__u::allocator_traits::allocate",
    "(::)?do_malloc_pages", "(::)?do_realloc", "__builtin_(vec_)?delete",
    "__builtin_(vec_)?new", "__libc_calloc", "__libc_malloc", "__libc_memalign",
    "__libc_realloc", "(::)?slow_alloc", "fast_alloc", "(::)?AllocSmall",
    r"operator new(\[\])?"))


def class_names(scheme: lifetimes.LabelScheme) -> list[str]:
    """The lifetime_class label of each class index: <10ms ... >=1000s, never freed."""
    names = scheme.class_names
    bounded = len(scheme.boundaries)
    return ["<" + n for n in names[:bounded]] + [names[bounded], "never freed"]


def scaled(weight: float, size: int) -> tuple[int, int]:
    """(objects, bytes) a group of sampled objects stands for: W and W x S rounded.
    Past any float (an overflowed sum) they are I64_MAX + 1, for the caller to clamp;
    no objects or no size is no bytes (never inf x 0)."""
    return _rounded(weight), _rounded(weight * size) if weight and size else 0


def _rounded(x: float) -> int:
    if math.isinf(x):
        return I64_MAX + 1
    return math.floor(x + 0.5)


@dataclasses.dataclass
class _Group:
    """Objects with one key: their summed weight and weighted lifetime statistics."""

    weight: float = 0.0
    samples: int = 0
    mean_ns: float = 0.0
    m2: float = 0.0
    min_ns: int | None = None
    max_ns: int = 0

    def add(self, lifetime_ns: int, weight: float) -> None:
        self.samples += 1
        if weight <= 0:  # a zero weight counts no object (the reader refuses negatives)
            return
        self.min_ns = lifetime_ns if self.min_ns is None else min(self.min_ns, lifetime_ns)
        self.max_ns = max(self.max_ns, lifetime_ns)
        total = self.weight + weight
        if math.isinf(total):  # weights past any float: the count saturates, the mean stays
            self.weight = total
            return
        self.weight = total  # weighted Welford (West 1979): stable mean and variance
        delta = lifetime_ns - self.mean_ns
        self.mean_ns += delta * (weight / total)  # a share <= 1: no overflow on huge weights
        self.m2 += weight * delta * (lifetime_ns - self.mean_ns)

    @property
    def stddev_ns(self) -> float:
        return math.sqrt(max(0.0, self.m2 / self.weight)) if self.weight else 0.0


@dataclasses.dataclass
class Summary:
    """What a conversion read, kept and left out."""

    files: int = 0
    used_files: int = 0
    skipped: list = dataclasses.field(default_factory=list)    # [(path, reason)]
    problems: list = dataclasses.field(default_factory=list)   # [ProfileFormatError]
    samples: int = 0
    censored: int = 0
    dropped: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    pprof_samples: int = 0
    totals: dict = dataclasses.field(default_factory=dict)     # sample type -> sum
    unsymbolized_modules: dict = dataclasses.field(default_factory=dict)  # path -> status
    # what -> values written as I64_MAX (or NaN as 0): beyond pprof's int64 (module doc)
    saturated: collections.Counter = dataclasses.field(default_factory=collections.Counter)


class _Converter:
    def __init__(self, view: str, group_by_class: bool, scheme: lifetimes.LabelScheme,
                 cache: symbolize.ModuleCache, inline_frames: bool):
        if view not in VIEWS:
            raise ValueError(f"unknown view {view!r}")
        self.view, self.group_by_class, self.scheme = view, group_by_class, scheme
        self.cache, self.inline_frames = cache, inline_frames
        self.classes = class_names(scheme)
        self.b = ProfileBuilder()
        self.pair_id = 0
        self.intervals: set[int] = set()
        self.start_unix_ns: int | None = None
        self.duration_ns = 0
        self.saturated: collections.Counter = collections.Counter()
        p = self.b.profile
        for type_, unit in SAMPLE_TYPES[view]:
            self.b.value_type(p.sample_type.add(), type_, unit)
        self.b.value_type(p.period_type, "space", "bytes")
        p.default_sample_type = self.b.string(DEFAULT_SAMPLE_TYPE[view])
        p.drop_frames = self.b.string(DROP_FRAMES)

    # -- one file -------------------------------------------------------------
    def add_file(self, index: int, path: str, summary: Summary,
                 report: Callable[[ProfileFormatError], None]) -> None:
        reader = stream_profile(path)
        groups: dict[tuple, _Group] = {}
        for s in reader.samples():
            key, lifetime_ns = self._key(s)
            group = groups.get(key)
            if group is None:
                group = groups[key] = _Group()
            group.add(lifetime_ns, s.weight)
        for problem in reader.problems:
            summary.problems.append(problem)
            report(problem)
        summary.files += 1
        if reader.header is None:
            reason = reader.problems[0].reason if reader.problems else "no header"
            summary.skipped.append((path, reason))
            return
        summary.used_files += 1
        summary.samples += reader.kept
        summary.censored += reader.censored
        summary.dropped.update(reader.dropped)
        h, t = reader.header, reader.trailer
        self.intervals.add(h.sampling_interval_bytes)
        if self.start_unix_ns is None or h.start_time_unix_ns < self.start_unix_ns:
            self.start_unix_ns = h.start_time_unix_ns
        if t is not None and t.end_monotonic_ns > h.start_monotonic_ns:
            self.duration_ns = max(self.duration_ns, t.end_monotonic_ns - h.start_monotonic_ns)
        symbolizer = symbolize.Symbolizer(reader.mappings, cache=self.cache,
                                          inline_frames=self.inline_frames)
        self._add_mappings(index, h.executable_path, reader.mappings)
        stacks: dict[int, list[int]] = {}
        for key, group in groups.items():
            stack_id = key[0]
            if stack_id not in stacks:
                stacks[stack_id] = self._locations(index, symbolizer,
                                                   reader.stacks[stack_id].addresses)
            self._sample(stacks[stack_id], key, group)
        for module, status in symbolizer.module_status().items():
            if not status.usable and status.status != symbolize.NO_FILE:
                summary.unsymbolized_modules.setdefault(module, status.status)

    def _key(self, s) -> tuple[tuple, int]:
        lifetime_ns = (s.observed_age_ns if s.censored
                       else s.free_monotonic_ns - s.alloc_monotonic_ns)
        key: tuple = (s.stack_id, s.size, s.alignment)
        if self.view == LIFETIMES:
            thread = ("none" if s.censored else
                      "same" if s.alloc_thread == s.free_thread else "different")
            key += (s.censored, thread)
        if self.group_by_class:
            key += (self._class(s),)
        return key, lifetime_ns

    def _class(self, s) -> str:
        # An object still live at the end is "never freed" (the scheme's rule for one object).
        value = lifetimes.INF if s.censored else lifetimes.lifetime_on_clock(s, self.scheme.clock)
        return self.classes[self.scheme.label(value)]

    # -- tables -----------------------------------------------------------------
    def _add_mappings(self, index: int, executable: str, mappings: Iterable) -> None:
        """Registers a file's mappings, the executable's first (pprof: mapping[0] is
        the main binary), then by address."""
        for m in sorted(mappings, key=lambda m: (m.path != executable, m.start, m.id)):
            self.b.mapping((index, m.id), m.start, m.limit, m.file_offset, m.path,
                           bytes(m.build_id).hex(), self.inline_frames)

    def _locations(self, index: int, symbolizer, addresses) -> list[int]:
        ids = []
        for address in addresses:
            key = (index, address)
            lid = self.b.location_id(key)
            if lid is None:
                lookup = address - 1 if address else 0  # a return address: its call
                mapping = symbolizer.mapping_for(lookup)
                mapping_id = self.b.mapping_id((index, mapping.id)) if mapping else 0
                frames = symbolizer.symbolize_address(address, True)
                lid = self.b.add_location(key, lookup, mapping_id,
                                          [(f.function, f.symbol or "") for f in frames])
            ids.append(lid)
        return ids

    def _sample(self, location_ids: list[int], key: tuple, group: _Group) -> None:
        size, alignment = key[1], key[2]
        objects, space = scaled(group.weight, size)
        sample = self.b.profile.sample.add(location_id=location_ids)
        # Saturations are counted under the objects' and space's first column (a freed
        # group's allocated and deallocated columns are one value).
        names = SAMPLE_TYPES[self.view]
        i = 4 if self.view == LIFETIMES and key[3] else 0
        n, space = self._int64(names[i][0], objects), self._int64(names[i + 1][0], space)
        if self.view == ALLOCATIONS:
            sample.value.extend((n, space))
        elif key[3]:  # censored
            sample.value.extend((0, 0, 0, 0, n, space))
        else:
            sample.value.extend((n, space, n, space, 0, 0))
        for name, value in (("bytes", size), ("request", size), ("alignment", alignment)):
            if value > 0:  # TCMalloc's add_positive_label
                self._num(sample, name, value, "bytes")
        if self.view == LIFETIMES:
            self.pair_id += 1
            self._num(sample, "callstack-pair-id", self.pair_id, "count")
            for name, value in (("avg_lifetime", group.mean_ns),
                                ("stddev_lifetime", group.stddev_ns),
                                ("min_lifetime", group.min_ns or 0),
                                ("max_lifetime", group.max_ns)):
                self._num(sample, name, value, "nanoseconds")
            sample.label.add(key=self.b.string("active thread"), str=self.b.string(key[4]))
        if self.group_by_class:
            sample.label.add(key=self.b.string(CLASS_LABEL), str=self.b.string(key[-1]))

    def _num(self, sample, key: str, value, unit: str) -> None:
        sample.label.add(key=self.b.string(key), num=self._int64(key, value),
                         num_unit=self.b.string(unit))

    def _int64(self, what: str, value) -> int:
        """value (an int or float >= 0) as a pprof int64: at most I64_MAX, NaN as 0;
        every value changed is counted under `what`."""
        if isinstance(value, float):
            if math.isnan(value):
                self.saturated[what] += 1
                return 0
            if math.isinf(value):
                self.saturated[what] += 1
                return I64_MAX
            value = round(value)
        if value > I64_MAX:
            self.saturated[what] += 1
            return I64_MAX
        return int(value)

    # -- the end ------------------------------------------------------------------
    def finish(self, summary: Summary) -> profile_pb2.Profile:
        p = self.b.profile
        p.time_nanos = self.start_unix_ns or 0
        p.duration_nanos = self._int64("duration_nanos", self.duration_ns)
        if len(self.intervals) == 1:
            p.period = self._int64("period", next(iter(self.intervals)))
        p.comment.append(self.b.string(
            f"lifetime pprof --view {self.view}: {summary.samples} samples "
            f"({summary.censored} censored) from {summary.used_files} profile(s)"))
        summary.saturated.update(self.saturated)
        if self.saturated:
            p.comment.append(self.b.string(saturated_text(summary)))
        summary.pprof_samples = len(p.sample)
        for i, (type_, _) in enumerate(SAMPLE_TYPES[self.view]):
            summary.totals[type_] = sum(s.value[i] for s in p.sample)
        return p


def saturated_text(summary: Summary) -> str:
    """One line saying which values did not fit pprof's int64 (empty if none)."""
    if not summary.saturated:
        return ""
    shown = ", ".join(f"{what} {n}" for what, n in sorted(summary.saturated.items()))
    return (f"{sum(summary.saturated.values())} value(s) beyond int64 written as "
            f"{I64_MAX} (2^63 - 1): {shown}")


def build(paths: list[str], view: str = LIFETIMES, group_by_class: bool = False,
          scheme: lifetimes.LabelScheme | None = None,
          cache: symbolize.ModuleCache | None = None, inline_frames: bool = True,
          report: Callable[[ProfileFormatError], None] = lambda problem: None,
          ) -> tuple[ProfileBuilder, Summary]:
    """Reads every profile (streaming; a bad file is reported through `report`,
    counted in the summary and skipped, the rest kept) into one pprof profile.
    Raises InputError when no file is usable at all."""
    if not paths:
        raise InputError("no profile given")
    converter = _Converter(view, group_by_class, scheme or lifetimes.LabelScheme(),
                           cache if cache is not None else symbolize.ModuleCache(),
                           inline_frames)
    summary = Summary()
    for index, path in enumerate(paths):
        converter.add_file(index, path, summary, report)
    if not summary.used_files:
        path, reason = summary.skipped[0]
        raise InputError(f"no usable profile among {len(paths)} file(s); first: {path}: {reason}")
    if not summary.samples:
        raise InputError(f"no usable sample in {len(paths)} file(s): {', '.join(paths[:3])}"
                         + (" ..." if len(paths) > 3 else ""))
    converter.finish(summary)
    return converter.b, summary


def write(paths: list[str], out: str, **options) -> Summary:
    """Converts `paths` (see build) and writes the gzipped profile.proto to `out`.
    An `out` that exists and is not a regular file (a directory, a fifo) is refused
    before any work; no temporary file is left behind, whatever fails."""
    _check_output(out)
    writable_parent(out)
    builder, summary = build(paths, **options)
    data = builder.serialize()
    tmp = f"{out}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, out)  # no half-written profile under the final name
    except OSError as e:
        raise InputError(f"{out}: cannot write: {e.strerror or e}") from None
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
    return summary


def _check_output(out: str) -> None:
    try:
        st = os.stat(out)
    except OSError:
        return  # absent (the usual case), or the parent check says why not
    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"{out}: is a directory; -o names the output file "
                         f"(e.g. {os.path.join(out, 'profile.pb.gz')})")
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{out}: exists and is not a regular file (a fifo or device); "
                         "-o names the output file")
