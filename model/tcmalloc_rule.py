"""TCMalloc's removed lifetime rule as a baseline: its offline replay over a test
version's profiles, in time order, scored against the dataset's context labels.

The rule (google/tcmalloc, 2020-2023: `lifetime_predictions.h`, `lifetime_tracker.h`,
`lifetime_based_allocator.h`; written anew from what they do, nothing copied) is online:

  * per allocation stack two counters, short-lived and long-lived, in a database of at
    most 1024 stacks (the least recently looked up is evicted; an evicted stack starts
    again from zero, and its objects still tracked count for the evicted entry only);
  * every covered object is tracked from its allocation: freed at an age <= 0.5 s it
    counts short (at its free); once its age passes 0.5 s (freed later or still live)
    it counts long, at the first tracker event (a covered allocation or free) after that;
  * the prediction, made before the allocation's own tracker event, is short iff
    short > long + 10, else long;
  * TCMalloc covered page-heap allocations over half a huge page and up to a HugeRegion:
    128 < ceil(size / 8 KiB) <= 131072 pages ("large"); "all" is the same rule over
    every object.  Objects it does not cover get the fallback class (the tables'
    majority class, model/baselines.py) and touch no counter.

TCMalloc consulted it only for large allocations its filler could not place, and
tracked only those that went to its lifetime region or donated a huge page's tail;
here every covered object is predicted and tracked.  The native twin, with the same
semantics on the simulator's traces, is simulator/src/tcmalloc_rule.h.

Classes (one mapping, here and in the simulator): short is the first class whose bound
exceeds 0.5 s, the class holding every lifetime <= 0.5 s (`<1s` under the default
classes); long is the inf class (TCMalloc's long meant "no special placement"; inf never
under-predicts and has no deadline).

In the report the key is the profile's stack (the whole recorded stack, as TCMalloc's
key was the raw stack), one database per profile (per process).  Each sample counts in
the counters as the objects it stands for (its weight: 1 in a full trace); each sample
gets its own prediction, so a context's samples may be split between classes: the
weighted metrics count every sample where its prediction put it, the unweighted ones
count a context once, split in the same proportions (model/metrics.py,
`split_classification_metrics`).
"""

from __future__ import annotations

import array
import collections
import heapq
import math
from typing import Iterable, Sequence

import numpy as np

from core import context as context_def
from core import symbolize
from core.errors import LifetimeError
from core.lifetimes import LabelScheme
from model import baselines
from model.metrics import headline
from pipeline import sources

THRESHOLD_NS = 500_000_000
MARGIN = 10
DATABASE_SIZE = 1024
PAGE_BYTES = 8192
MIN_PAGES_EXCLUSIVE = 128   # half a huge page: 1 MiB
MAX_PAGES = 131072          # a HugeRegion: 1 GiB
SIZES = ("large", "all")
#: compare.py's predictor names of the two variants
NAMES = {"large": "baseline_tcmalloc_rule", "all": "baseline_tcmalloc_rule_all"}


class RuleReplayError(LifetimeError):
    """The test profiles cannot be replayed (missing, unreadable, another clock)."""


def covered(size: int, sizes: str) -> bool:
    """Whether the rule predicts an object of `size` bytes (else: the fallback)."""
    if sizes == "all":
        return True
    pages = -(-max(int(size), 1) // PAGE_BYTES)
    return MIN_PAGES_EXCLUSIVE < pages <= MAX_PAGES


def short_class(boundaries_ms: Sequence[float], threshold_ns: int = THRESHOLD_NS) -> int:
    """The first class whose bound exceeds the threshold (the open-ended one if none)."""
    for i, b in enumerate(boundaries_ms):
        if b * 1e6 > threshold_ns:
            return i
    return len(boundaries_ms)


class LifetimeRule:
    """The counters and the tracker; `replay` runs them over objects in time order."""

    def __init__(self, sizes: str = "large", *, threshold_ns: int = THRESHOLD_NS,
                 margin: float = MARGIN, database_size: int = DATABASE_SIZE):
        if sizes not in SIZES:
            raise ValueError(f"sizes: {sizes!r} (expected one of {SIZES})")
        self.sizes, self.threshold_ns, self.margin = sizes, threshold_ns, margin
        self.database_size = database_size
        self.database: collections.OrderedDict = collections.OrderedDict()  # key -> [short, long]
        self.evictions = 0
        self._trackers: collections.deque = collections.deque()  # [deadline, counts, tracked]
        self._frees: list = []  # heap of (free_ns, seq, tracker)
        self._seq = 0

    def counts(self, key) -> tuple[float, float] | None:
        """(short, long) of the database's entry for `key`; None if it holds none."""
        c = self.database.get(key)
        return None if c is None else (c[0], c[1])

    def _lookup(self, key) -> list:
        c = self.database.get(key)
        if c is not None:
            self.database.move_to_end(key)
            return c
        if len(self.database) >= self.database_size:
            self.database.popitem(last=False)
            self.evictions += 1
        c = self.database[key] = [0.0, 0.0]
        return c

    def _expire(self, now: int) -> None:
        q = self._trackers
        while q:
            t = q[0]
            if t[2]:
                if not t[0] < now:
                    return
                t[1][1] += t[3]
                t[2] = False
            q.popleft()

    def step(self, alloc_ns: int, free_ns: int | None, size: int, key, weight: float = 1.0):
        """One allocation, in time order: True (short), False (long), None (not covered).
        `free_ns` None: never freed (or live at the end)."""
        frees = self._frees
        while frees and frees[0][0] <= alloc_ns:
            f, _, t = heapq.heappop(frees)
            self._expire(f)
            if t[2]:
                t[2] = False
                t[1][0] += t[3]
        if not covered(size, self.sizes):
            return None
        c = self._lookup(key)
        is_short = c[0] > c[1] + self.margin
        self._expire(alloc_ns)
        t = [alloc_ns + self.threshold_ns, c, True, weight]
        self._trackers.append(t)
        if free_ns is not None:
            heapq.heappush(frees, (free_ns, self._seq, t))
        self._seq += 1
        return is_short

    def replay(self, objects: Iterable[tuple]) -> list:
        """(alloc_ns, free_ns or None, size, key[, weight]) in allocation order ->
        [True / False / None] per object (see `step`)."""
        return [self.step(*o) for o in objects]


def predict_classes(shorts: list, short_cls: int, long_cls: int, fallback: int) -> np.ndarray:
    """`step`'s answers as classes."""
    return np.array([fallback if s is None else (short_cls if s else long_cls) for s in shorts],
                    np.int32)


def _columns(reader):
    """A reader's samples as columns (alloc, free or -1, size, stack, weight)."""
    alloc, free, size = (array.array("q") for _ in range(3))
    stack, weight = array.array("Q"), array.array("d")
    for s in reader.samples():
        alloc.append(s.alloc_monotonic_ns)
        free.append(-1 if s.censored else s.free_monotonic_ns)
        size.append(s.size)
        stack.append(s.stack_id)
        weight.append(s.weight)
    return (np.frombuffer(alloc, np.int64), np.frombuffer(free, np.int64),
            np.frombuffer(size, np.int64), np.frombuffer(stack, np.uint64),
            np.frombuffer(weight, np.float64))


def covered_mask(size: np.ndarray, sizes: str) -> np.ndarray:
    """`covered` over an array of sizes."""
    if sizes == "all":
        return np.ones(len(size), bool)
    pages = (np.maximum(size, 1) + PAGE_BYTES - 1) // PAGE_BYTES
    return (pages > MIN_PAGES_EXCLUSIVE) & (pages <= MAX_PAGES)


def replay_columns(alloc, free, size, stack, weight, sizes: str, chunk: int = 1 << 20) -> np.ndarray:
    """The rule over columns already in allocation order (free < 0: never freed) ->
    int8 per object: 1 short, 0 long, -1 not covered.  Objects the rule does not cover
    are no tracker events, so they are skipped; the rest go through `LifetimeRule.step`
    a chunk at a time (no list of every object at once)."""
    rule = LifetimeRule(sizes)
    out = np.full(len(alloc), -1, np.int8)
    idx = np.flatnonzero(covered_mask(size, sizes))
    for start in range(0, len(idx), chunk):
        sl = idx[start:start + chunk]
        got = [rule.step(a, None if f < 0 else f, n, k, w) for a, f, n, k, w in zip(
            alloc[sl].tolist(), free[sl].tolist(), size[sl].tolist(), stack[sl].tolist(),
            weight[sl].tolist())]
        out[sl] = np.array(got, np.int8)
    return out


def replay_file(path: str, version_label: str | None, definition: context_def.ContextDefinition,
                classes: tuple[int, int, int], cache: symbolize.ModuleCache) -> dict:
    """One profile (one process, one database) -> {variant: {context key: Counter of
    predicted class -> samples}}; context key = (program, version label, frames), as the
    dataset job makes it.  classes = (short, long, fallback)."""
    source = sources.resolve(path, sources.AUTO)
    with source.open(path) as reader:
        alloc, free, size, stack, weight = _columns(reader)
        if reader.header is None:
            raise RuleReplayError(f"{path}: no profile header")
        program, label = reader.header.program, version_label or reader.header.version_label
        sym = context_def.make_symbolizer(reader.mappings, cache=cache)
        site_of = {int(sid): definition.site_frames(
            context_def.machinery_free(sym, reader.stacks[int(sid)].addresses))
            for sid in np.unique(stack)}
    order = np.argsort(alloc, kind="stable")
    alloc, free, size, stack, weight = (c[order] for c in (alloc, free, size, stack, weight))
    short_cls, long_cls, fallback = classes
    lut = np.array([long_cls, short_cls, fallback], np.int64)  # by answer 0, 1, -1
    out = {}
    # The rule runs per stack; its answers are counted per context: the stack's, or under
    # size_feature the stack's and each sample's size frame.
    if definition.size_feature:
        floors = context_def.size_bucket_floors(size).astype(np.int64)
        groups, stack_index = np.unique(np.stack([stack.astype(np.int64), floors]), axis=1,
                                        return_inverse=True)
        keys = [(program, label, (context_def.size_frame(int(f)),) + site_of[int(sid)])
                for sid, f in zip(groups[0].tolist(), groups[1].tolist())]
    else:
        stacks, stack_index = np.unique(stack, return_inverse=True)
        keys = [(program, label, site_of[int(sid)]) for sid in stacks]
    stack_index = np.asarray(stack_index).reshape(-1)
    for sizes in SIZES:
        cls = lut[replay_columns(alloc, free, size, stack, weight, sizes)]
        pairs, n = np.unique(np.stack([stack_index.astype(np.int64), cls]), axis=1,
                             return_counts=True)
        per = collections.defaultdict(collections.Counter)
        for i, c, k in zip(pairs[0].tolist(), pairs[1].tolist(), n.tolist()):
            per[keys[i]][c] += k
        out[sizes] = per
    return out


def replay_datasets(test_sets, scheme, fallback: int) -> dict:
    """The rule over every input profile of the test datasets (their manifests'
    `inputs`, cut with each dataset's context definition) -> {variant: {context key:
    Counter}}.  RuleReplayError when a profile is gone or the labels are not wall time."""
    if scheme.clock != "wall":
        raise RuleReplayError(f"labels on the {scheme.clock!r} clock; the rule's 0.5 s is wall time")
    classes = (short_class(scheme.boundaries), scheme.inf_class, fallback)
    out = {s: collections.defaultdict(collections.Counter) for s in SIZES}
    for d in test_sets:
        cfg = d.manifest.get("config", {})
        cache = symbolize.ModuleCache(debug_dirs=cfg.get("debug_dirs") or symbolize.DEFAULT_DEBUG_DIRS,
                                      sysroot=cfg.get("sysroot") or None)
        for item in d.manifest.get("inputs") or []:
            try:
                got = replay_file(item["file"], item.get("version_label"), d.context, classes, cache)
            except (OSError, LifetimeError) as e:
                raise RuleReplayError(f"{item['file']}: cannot replay ({e})") from None
            for sizes, per in got.items():
                for key, counter in per.items():
                    out[sizes][key].update(counter)
    return out


def aligned(per_context: dict, test) -> list:
    """{context key: Counter} -> one Counter per test context (model.data.Examples), in
    its order; a context the replay never saw gets an empty Counter."""
    return [per_context.get((p, v, tuple(f)), collections.Counter())
            for p, v, f in zip(test.program, test.version_label, test.frames)]


def coverage(given: list, test) -> float:
    """Share of the test contexts' samples the replay predicted."""
    total = float(np.sum(test.weight, dtype=np.float64))
    return float(sum(sum(c.values()) for c in given)) / total if total else math.nan


def for_comparison(test_sets, test_ex, train_ex, label_scheme: dict):
    """The rule over the test datasets' profiles for `lifetime evaluate` and `lifetime
    report` -> (what they say about it, model.compare's `split` predictors aligned with
    `test_ex`); ({"skipped": why}, None) when it cannot run (a profile gone, another
    clock).  Objects it does not cover get the tables' fallback, the majority of
    `train_ex`."""
    try:
        scheme = LabelScheme.from_json(label_scheme)
        fallback = baselines.majority_class(train_ex.label, train_ex.weight)
        per = replay_datasets(test_sets, scheme, fallback)
    except RuleReplayError as e:
        return {"skipped": str(e)}, None
    split = {NAMES[s]: aligned(per[s], test_ex) for s in SIZES}
    return {"classes": {"short": short_class(scheme.boundaries), "long": scheme.inf_class,
                        "fallback": fallback},
            "threshold_s": THRESHOLD_NS / 1e9, "margin": MARGIN, "database_size": DATABASE_SIZE,
            "large_bytes": [MIN_PAGES_EXCLUSIVE * PAGE_BYTES, MAX_PAGES * PAGE_BYTES],
            "samples_replayed_share": coverage(split[NAMES["all"]], test_ex)}, split


def with_model_ahead(info: dict, comparison: dict) -> dict:
    """`info` plus, when the rule ran, `model_ahead`: {scope: {variant: {figure: model -
    rule}}} (points of accuracy as fractions) over model.compare's result."""
    if "skipped" in info:
        return info
    out = {}
    for part in ("overall", "unseen"):
        m = comparison[part]["model"]
        if not m["contexts"]:
            continue
        hm = headline(m)
        for sizes, name in NAMES.items():
            r = comparison[part].get(name)
            if not r or not r["contexts"]:
                continue
            hr = headline(r)
            out.setdefault(part, {})[sizes] = {
                k: (None if hm[k] is None or hr[k] is None else hm[k] - hr[k])
                for k in ("weighted_exact", "unweighted_exact", "weighted_off_by_one",
                          "unweighted_off_by_one")}
    return {**info, "model_ahead": out}
