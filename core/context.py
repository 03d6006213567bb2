"""The allocation context: one definition, used offline and online.

A profile stack (return addresses, leaf first) becomes a context in two steps:

1. **Per profile** (`machinery_free`): symbolize without DWARF inline frames (the
   in-process symbolizer has none, and a model must be served the strings it was
   trained on), strip the allocator from the top (`symbolize.strip_allocator_frames`:
   malloc and its glibc aliases, operator new, the C++ standard library, the sampler,
   unnamed runtime frames), and drop compiler clone suffixes from the names
   (`normalize_frame`: ``f.part.6``, ``g.isra.0``, ``h(int) [clone .cold]``: their
   numbers change from build to build, the function does not).
2. **Per dataset** (`ContextDefinition.frames`): strip the program's own allocation
   wrappers, then keep the top `max_frames` frames.  A wrapper (``zmalloc``,
   ``palloc``, ``g_malloc``...) says nothing about what its memory is for, so the
   site is the frame *below the deepest wrapper* of the stack: everything a wrapper
   calls on the way to malloc is machinery too, which also covers a newer version
   that put a new function above a known wrapper (Redis 6.2's
   ``ztrymalloc_usable_internal`` above ``zmalloc``).  Allocator frames right below
   the wrapper are stripped as in step 1.

Wrappers are matched by qualified name (`symbolize.qualified_name`: no return type,
parameters or clone suffix) and come from three places, all recorded: a built-in
list of well-known allocation APIs (`BUILTIN_WRAPPERS`), names given for a dataset
(``--wrapper``), and names detected in the training data (`detect_wrappers`).

The C mirror (inprocess/src/symtab.c, inprocess/src/online.c) applies the same
definition to frames made in-process; the exported model carries the wrapper list
and depth.  Both sides are pinned by tests/data/context_vectors.json.

**Size** (`size_feature`, issue 34 item 3: the object's size closed 22-29 points of the
context-oracle -> per-object-oracle gap on Redis mixed).  The context is then the stack
*and* the size: frame 0 is a size frame, ``<size$4096>`` (the lower bound of the size's
bucket, 4 buckets per power of two: `size_bucket_floor`), above the site's `max_frames - 1`
frames.  It is one token (``size$4096``), so the tokenizer and the model are unchanged;
the exported library makes the same frame from the size it is given
(`lifetime_size_frame`), pinned by tests/data/size_frame_vectors.json.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import re
from typing import Iterable, Sequence

import numpy as np

from core import symbolize
from core.errors import LifetimeError
from core.files import read_json

CONTEXT_VERSION = "lifetime-context-v2"

#: Allocation APIs of widely used programs and libraries, by qualified name.  Their
#: callers, not they, say what memory is for.
BUILTIN_WRAPPERS = frozenset({
    # GNU libiberty / gnulib / many GNU programs
    "xmalloc", "xcalloc", "xrealloc", "xstrdup", "xstrndup", "xmemdup", "xzalloc",
    # GLib
    "g_malloc", "g_malloc0", "g_realloc", "g_try_malloc", "g_try_malloc0", "g_malloc_n",
    "g_malloc0_n", "g_realloc_n", "g_strdup", "g_strndup", "g_memdup", "g_memdup2",
    "g_slice_alloc", "g_slice_alloc0",
    # Redis (zmalloc.c, sds.c)
    "zmalloc", "zcalloc", "zrealloc", "zstrdup", "ztrymalloc", "ztrycalloc", "ztryrealloc",
    "zmalloc_usable", "zcalloc_usable", "zrealloc_usable", "ztrymalloc_usable",
    "ztrycalloc_usable", "ztryrealloc_usable", "s_malloc", "s_realloc",
    "s_malloc_usable", "s_realloc_usable", "s_trymalloc_usable", "s_tryrealloc_usable",
    # PostgreSQL (mcxt.c, aset.c, generation.c, slab.c)
    "palloc", "palloc0", "palloc_extended", "repalloc", "repalloc_huge", "pstrdup",
    "pnstrdup", "MemoryContextAlloc", "MemoryContextAllocZero",
    "MemoryContextAllocZeroAligned", "MemoryContextAllocExtended", "MemoryContextAllocHuge",
    "MemoryContextStrdup", "AllocSetAlloc", "AllocSetRealloc", "GenerationAlloc",
    "SlabAlloc", "malloc_and_report",
    # OpenSSL, APR, nginx, SQLite, zlib, libxml2
    "CRYPTO_malloc", "CRYPTO_zalloc", "CRYPTO_realloc", "CRYPTO_strdup", "CRYPTO_strndup",
    "apr_palloc", "apr_pcalloc", "apr_pstrdup", "ngx_alloc", "ngx_calloc", "ngx_palloc",
    "ngx_pnalloc", "ngx_pcalloc", "sqlite3Malloc", "sqlite3MallocZero", "sqlite3DbMallocRaw",
    "sqlite3DbMallocZero", "sqlite3_malloc", "sqlite3_malloc64", "zcalloc_default",
    "xmlMalloc", "xmlMallocAtomic", "xmlStrdup", "xmlStrndup",
})

#: `detect_wrappers` defaults.  MIN_CALLERS and CALLER_WEIGHT_POWER were chosen on
#: selection data (issue 33 item 3; core/version_roles.json `chosen_on`):
#: benchmarks/wrapper_selection.py over a grid (power 1/0.75/0.5/0.25/0, disagreement
#: 0.05-0.3, callers 2-5, top share 0.8-0.95), detecting on the Redis training versions
#: (5.0.6, 6.0.16: phases, load seeds 1 and 2) and one selection version, and scoring the
#: training data's longest-prefix table on the other selection version (6.2.7 / 6.2.9,
#: load seeds 1 and 2): mean of weighted and unweighted accuracy 80.2% against the old
#: rule's 73.0% (weighted 86.2 / 85.5%, unweighted 74.3 / 60.6%); the fewest wrappers
#: among the best points.  The old rule (power 1, 4 callers) misses sdsnewlen and
#: _sdsnewlen: createStringObject is 88% of their samples and agrees with their majority,
#: hiding hashTypeSet's and setTypeAdd's disagreement (3.9% of the samples).  The
#: others stay as they were chosen on the proxy workload and Redis/PostgreSQL training
#: versions.
MIN_CALLERS = 3           # distinct callers below a wrapper
MIN_TOP_SHARE = 0.9       # of the samples whose stack holds it, share where it is the site
MIN_DISAGREEMENT = 0.1    # share of its samples whose caller's majority class differs
MIN_SAMPLES = 20
MAX_ROUNDS = 8
CALLER_WEIGHT_POWER = 0.5  # a caller weighs samples ** this in the disagreement

#: Frames a context keeps below its site: the one frame limit of the dataset, the model
#: (which reads it from the dataset's definition) and the exported library.
MAX_FRAMES = 16
#: The most frames a definition may keep: no recorded stack is deeper (the sampler's
#: LT_MAX_FRAMES, the reader's MAX_STACK_DEPTH), and the exported model reads them all.
MAX_FRAMES_LIMIT = 128


def size_bucket_floor(size: int) -> int:
    """The least size in SIZE's bucket: sizes below 8 are their own buckets; above,
    a power of two and its 3 quarter steps (8, 10, 12, 14, 16, 20, ... 4096, 5120, ...)."""
    if size < 8:
        return max(size, 0)
    shift = size.bit_length() - 3  # keep the leading 1 and the next 2 bits
    return (size >> shift) << shift


def size_bucket_floors(sizes) -> np.ndarray:
    """`size_bucket_floor` of every size of an array (uint64), computed once per
    distinct size: a profile's samples have few."""
    distinct, inverse = np.unique(np.asarray(sizes, np.uint64), return_inverse=True)
    floors = np.array([size_bucket_floor(int(n)) for n in distinct], np.uint64)
    return floors[inverse.reshape(-1)]


def size_frame(size: int) -> str:
    """The context's frame 0 under `size_feature`: ``<size$FLOOR>`` (one token)."""
    return f"<size${size_bucket_floor(size)}>"


def is_size_frame(frame: str) -> bool:
    return frame.startswith("<size$") and frame.endswith(">")


class ContextDefinitionError(LifetimeError):
    """A context definition that cannot be used (unknown version, unsupported option,
    or two datasets defined differently)."""


@dataclasses.dataclass(frozen=True)
class ContextDefinition:
    max_frames: int = MAX_FRAMES       # frames kept below the site; the model reads them all
    inline_frames: bool = False        # never True: the in-process symbolizer has none
    wrappers: tuple[str, ...] = ()     # every wrapper stripped (sorted union)
    configured_wrappers: tuple[str, ...] = ()
    detected_wrappers: tuple[str, ...] = ()
    builtin_wrappers: bool = True
    size_feature: bool = False         # frame 0 is the object's size frame (`size_frame`)

    def __post_init__(self):
        if not 1 <= self.max_frames <= MAX_FRAMES_LIMIT:
            raise ContextDefinitionError(f"max_frames {self.max_frames}: must be in "
                                         f"1..{MAX_FRAMES_LIMIT}")
        if self.size_feature and self.max_frames < 2:
            raise ContextDefinitionError("max_frames 1 leaves no frame beside the size frame")
        if self.inline_frames:
            raise ContextDefinitionError(
                "inline_frames=True cannot be served: the in-process symbolizer has no DWARF "
                "inline frames, so online frames would differ from the training frames")

    @classmethod
    def make(cls, max_frames: int = MAX_FRAMES, configured: Iterable[str] = (),
             detected: Iterable[str] = (), builtin: bool = True,
             size_feature: bool = False) -> "ContextDefinition":
        configured, detected = tuple(sorted(set(configured))), tuple(sorted(set(detected)))
        union = set(configured) | set(detected) | (BUILTIN_WRAPPERS if builtin else set())
        return cls(max_frames=max_frames, wrappers=tuple(sorted(union)),
                   configured_wrappers=configured, detected_wrappers=detected,
                   builtin_wrappers=builtin, size_feature=size_feature)

    def with_detected(self, detected: Iterable[str]) -> "ContextDefinition":
        return ContextDefinition.make(self.max_frames, self.configured_wrappers, detected,
                                      self.builtin_wrappers, self.size_feature)

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        d["version"] = CONTEXT_VERSION
        d["wrappers"] = list(self.wrappers)
        d["configured_wrappers"] = list(self.configured_wrappers)
        d["detected_wrappers"] = list(self.detected_wrappers)
        return d

    @classmethod
    def from_json(cls, d: dict | None, where: str = "") -> "ContextDefinition":
        prefix = f"{where}: " if where else ""
        if not d:
            raise ContextDefinitionError(
                f"{prefix}no context definition (made before {CONTEXT_VERSION}; rebuild it)")
        if d.get("version") != CONTEXT_VERSION:
            raise ContextDefinitionError(
                f"{prefix}context definition {d.get('version')!r}, this build reads "
                f"{CONTEXT_VERSION!r}; rebuild it")
        if d.get("inline_frames"):
            raise ContextDefinitionError(
                f"{prefix}contexts with DWARF inline frames cannot be reproduced by the "
                "in-process symbolizer")
        try:
            return cls(max_frames=int(d["max_frames"]), inline_frames=False,
                       wrappers=tuple(d["wrappers"]),
                       configured_wrappers=tuple(d.get("configured_wrappers", ())),
                       detected_wrappers=tuple(d.get("detected_wrappers", ())),
                       builtin_wrappers=bool(d.get("builtin_wrappers", True)),
                       size_feature=bool(d.get("size_feature", False)))
        except (KeyError, TypeError, ValueError) as e:
            raise ContextDefinitionError(f"{prefix}malformed context definition ({e})") from e

    @classmethod
    def load(cls, path: str) -> "ContextDefinition":
        """The definition recorded under "context" in a JSON file: a dataset's
        manifest.json, a model's config.json, an export_manifest.json."""

        try:  # a fifo or device is refused, not waited on
            recorded = read_json(path).get("context")
        except OSError as e:
            raise ContextDefinitionError(
                f"{path}: cannot read a context definition ({e.strerror})") from e
        except (ValueError, AttributeError) as e:
            raise ContextDefinitionError(f"{path}: cannot read a context definition ({e})") from e
        return cls.from_json(recorded, where=path)

    @functools.cached_property
    def _wrapper_set(self) -> frozenset:
        return frozenset(self.wrappers)

    def cut_at(self, stack: Sequence[str]) -> str | None:
        """The wrapper (qualified name) a stack's context is cut below, if any."""
        i = deepest_wrapper(stack, self._wrapper_set)
        return _qualified(stack[i]) if i >= 0 else None

    @property
    def stack_frames(self) -> int:
        """Frames of the stack a context keeps (max_frames, less the size frame's slot)."""
        return self.max_frames - 1 if self.size_feature else self.max_frames

    def site_frames(self, stack: Sequence[str]) -> tuple[str, ...]:
        """A machinery-free stack (`machinery_free`) -> the context's frames from the
        stack: all of them, or all but the size frame (`size_feature`)."""
        return tuple(strip_wrappers(stack, self._wrapper_set)[: self.stack_frames])

    def frames(self, stack: Sequence[str], size: int | None = None) -> tuple[str, ...]:
        """A machinery-free stack (and, under `size_feature`, the object's size) -> the
        context's frames."""
        if not self.size_feature:
            return self.site_frames(stack)
        if size is None:
            raise ContextDefinitionError(
                "this context definition keys on the object's size (size_feature): "
                "its contexts cannot be made from a stack alone")
        return (size_frame(size),) + self.site_frames(stack)


_CLONE_SUFFIXES = re.compile(
    r"(?:\.(?:part|isra|constprop|cold|lto_priv|localalias|llvm)(?:\.\d+)*)+$"
    r"|(?: \[clone [^\]]*\])+$")


def normalize_frame(frame: str) -> str:
    """A frame string without GCC/Clang clone suffixes (C: ``.part.N`` ... at the end;
    C++: `` [clone .isra.0]`` ...); the C mirror is lt_normalize_frame."""
    return _CLONE_SUFFIXES.sub("", frame)


def is_named(frame: str) -> bool:
    """False for the stand-ins of unnamed frames (``<module+?>``)."""
    return not (frame.startswith("<") and frame.endswith("+?>"))


@functools.lru_cache(maxsize=1 << 16)
def _qualified(frame: str) -> str:
    return symbolize.qualified_name(frame)


def _is_wrapper(frame: str, wrappers: frozenset) -> bool:
    return is_named(frame) and _qualified(frame) in wrappers


def deepest_wrapper(stack: Sequence[str], wrappers: frozenset) -> int:
    """Index of the deepest wrapper frame of a machinery-free stack, or -1."""
    deepest = -1
    for i, frame in enumerate(stack):
        if _is_wrapper(frame, wrappers):
            deepest = i
    return deepest


def strip_wrappers(stack: Sequence[str], wrappers: frozenset) -> list[str]:
    """Everything down to and including the deepest wrapper frame, then any allocator
    frames (`symbolize.allocator_rule` on names alone) right below it."""
    deepest = deepest_wrapper(stack, wrappers)
    if deepest < 0:
        return list(stack)
    start = deepest + 1
    while start < len(stack) and is_named(stack[start]) and symbolize.allocator_rule(
            symbolize.SymbolizedFrame(0, stack[start], symbol=stack[start])) is not None:
        start += 1
    return list(stack[start:])


def machinery_free(symbolizer: symbolize.Symbolizer, addresses: Sequence[int]) -> tuple[str, ...]:
    """Step 1: a profile stack -> its frame names with the allocator stripped."""
    raw = symbolizer.symbolize_stack(addresses, leaf_is_return_address=True)
    return tuple(normalize_frame(f.function) for f in symbolize.strip_allocator_frames(raw))


def make_symbolizer(mappings, cache: symbolize.ModuleCache | None = None,
                    **kwargs) -> symbolize.Symbolizer:
    """The symbolizer contexts are made with (no inline frames; see the module doc)."""
    return symbolize.Symbolizer(mappings, cache=cache, inline_frames=False, **kwargs)


def detect_wrappers(stacks: Iterable[tuple[Sequence[str], float, int]],
                    definition: ContextDefinition, min_callers: int = MIN_CALLERS,
                    min_top_share: float = MIN_TOP_SHARE,
                    min_disagreement: float = MIN_DISAGREEMENT,
                    min_samples: int = MIN_SAMPLES, max_rounds: int = MAX_ROUNDS,
                    caller_weight_power: float = CALLER_WEIGHT_POWER) -> list[str]:
    """Wrappers found in the data: (machinery-free stack, samples, label) triples.

    After stripping the wrappers known so far, a stack's site is machinery, not a site,
    when

    - it is the top of at least `min_samples` samples through at least `min_callers`
      distinct callers (the frame below it);
    - it is on top in at least `min_top_share` of the samples whose stack holds it at
      all (a wrapper is always near the top; ``main`` is not);
    - its callers disagree on the lifetime: the callers whose own majority class is
      not the site's make up at least `min_disagreement` of its callers, each caller
      weighing its samples ** `caller_weight_power` (1: by samples, so one dominant
      caller hides the others, as ``createStringObject`` hides ``hashTypeSet`` under
      ``sdsnewlen``; 0: by callers, each alike).

    Found wrappers are stripped and the search repeats (a wrapper under a wrapper: Redis
    6.2's ``_sdsnewlen`` under ``sdsnewlen``), at most `max_rounds` times.
    Deterministic: ties and orders are by name.
    """
    stacks = [(tuple(s), float(n), int(y)) for s, n, y in stacks]
    known = set(definition.wrappers)
    found: set[str] = set()
    for _ in range(max_rounds):
        wrappers = frozenset(known | found)
        # site (qualified) -> caller (qualified when named; "<bottom>": none) -> class -> samples
        sites: dict[str, dict[str, collections.Counter]] = collections.defaultdict(
            lambda: collections.defaultdict(collections.Counter))
        holding = collections.Counter()
        for stack, n, y in stacks:
            rest = strip_wrappers(stack, wrappers)
            if not rest:
                continue
            for name in {_qualified(f) for f in rest if is_named(f)}:
                holding[name] += n
            if is_named(rest[0]):
                caller = ("<bottom>" if len(rest) < 2
                          else _qualified(rest[1]) if is_named(rest[1]) else rest[1])
                sites[_qualified(rest[0])][caller][y] += n
        new = set()
        for site, callers in sorted(sites.items()):
            if site in wrappers or len(callers) < min_callers:
                continue
            overall = collections.Counter()
            for votes in callers.values():
                overall.update(votes)
            total = sum(overall.values())
            if total < min_samples or total < min_top_share * holding[site]:
                continue
            majority = top_class(overall)
            weight = {c: sum(v.values()) ** caller_weight_power for c, v in callers.items()}
            differing = sum(weight[c] for c, v in callers.items() if top_class(v) != majority)
            if differing >= min_disagreement * sum(weight.values()):
                new.add(site)
        if not new:
            break
        found |= new
    return sorted(found)


def top_class(votes: collections.Counter) -> int:
    """The class with the most samples in VOTES (ties: the lowest)."""
    return min(votes, key=lambda c: (-votes[c], c))
