"""Feature oracles (issue 34 item 2): the context oracles of simulator/tables.py keyed by
the allocation context PLUS one more feature, computed from the full trace.

They measure, before anything is built, how much of the gap between the context oracle
and the per-object oracle a feature could close: if even a perfect (context, feature)
table -- each key's T95 class, or its cost-rule class, in this very trace -- does not
get near the per-object oracle, no predictor with that input can.

THE definitions (one place; per record of the trace, in trace order):

  size    the exact requested size in bytes (the record's size);
  thread  the allocating thread id (the record's thread_id);
  time    time since the trace's first allocation, in TIME_BUCKETS equal parts of the
          span from the first allocation to the trace's end (phase by position);
  rate    phase by allocation rate: floor(log2(allocations in the record's
          RATE_WINDOW_NS window since the first allocation)), the window's own count;
  prev1   the context of the previous allocation on the same thread (by trace order;
          none for a thread's first);
  prev2   the contexts of the previous two allocations on the same thread (a pair);
  stack   the whole stack: the trace's stack id (every frame the profiler kept, deeper
          than the context definition keeps).

and one control, not a feature:

  size_shuffled  each context's sizes dealt out again at random among that context's own
          objects (numpy default_rng(SHUFFLE_SEED)): the keys per context and objects per
          key of `size`, no tie to lifetime.  What `size` gains over it is information,
          the rest is what a partition that fine gains by chance on the trace it is
          computed from.

A key is (context, feature value); its class is computed exactly as the context oracles'
(tables.context_t95_groups: Kaplan-Meier T95 with objects live at the end censored at
their age then, and the label scheme; the cost rule on the key's bytes per true class,
the run's deadline factor, the rule's default horizon).  "none" (the context alone)
reproduces the context oracles and is what the tests compare against.

How the engine gets them: one class per record, written as an object class file
(simulator.trace.write_object_classes) that the engine's `objects:FILE` predictor reads
in trace order.  The trace itself is unchanged, so every policy still sees each record's
own stack id (the `segregated` heap and `contain-mixed` keep per-stack state): only the
class differs from the context oracles' rows.

These are oracles on the trace they are computed from: the finer a feature partitions a
context (exact size, whole stack), the closer it gets to the per-object oracle by
cardinality alone, so the report gives each feature's keys and objects per key.
"""

from __future__ import annotations

import os

import numpy as np

from core.lifetimes import DEADLINE_K, cost_horizon, cost_rule
from simulator import tables
from simulator.convert import _true_classes
from simulator.trace import write_object_classes

TIME_BUCKETS = 16
SHUFFLE_SEED = 0
RATE_WINDOW_NS = 1_000_000_000

#: feature name -> what it is (report order).
FEATURES = {
    "size": "exact requested size",
    "thread": "allocating thread",
    "time": f"time since start, {TIME_BUCKETS} equal parts of the trace",
    "rate": "allocation rate phase: log2 of allocations in the record's 1 s window",
    "prev1": "previous allocation's context on the same thread",
    "prev2": "previous two allocations' contexts on the same thread",
    "stack": "the whole stack (frames deeper than the context keeps)",
    "size_shuffled": "control: each context's sizes dealt out at random among its objects",
}


def _dense(values: np.ndarray) -> np.ndarray:
    """values -> 0..n-1 in sorted order of the distinct values."""
    return np.unique(values, return_inverse=True)[1].reshape(-1).astype(np.int64)


def _previous_on_thread(ctx: np.ndarray, thread: np.ndarray, back: int, none: int) -> np.ndarray:
    """For each record, the context of the allocation `back` places before it on the same
    thread (trace order), or `none` for a thread's first `back` allocations."""
    order = np.argsort(thread, kind="stable")          # by thread, trace order within one
    out = np.full(len(ctx), none, np.int64)
    if len(order) > back:
        same = thread[order[back:]] == thread[order[:-back]]
        out[order[back:][same]] = ctx[order[:-back][same]]
    return out


def feature_values(name: str, rec, ctx: np.ndarray, end_ns: int) -> np.ndarray:
    """The feature `name` of every record (int64, only equality matters); ctx: each
    record's context index (0..n-1)."""
    n = len(rec)
    if name == "none":
        return np.zeros(n, np.int64)
    if name == "size":
        return np.asarray(rec["size"], np.int64)
    if name == "thread":
        return np.asarray(rec["thread"], np.int64)
    if name == "size_shuffled":
        size = np.asarray(rec["size"], np.int64)
        rng = np.random.default_rng(SHUFFLE_SEED)
        out = np.empty(n, np.int64)
        out[np.argsort(ctx, kind="stable")] = size[np.lexsort((rng.random(n), ctx))]
        return out
    if name == "stack":
        return _dense(np.asarray(rec["stack"]))
    alloc = np.asarray(rec["alloc"], np.uint64)
    if name in ("time", "rate"):
        if not n:
            return np.zeros(0, np.int64)
        since = (alloc - alloc[0]).astype(np.float64)
        if name == "time":
            span = float(max(int(end_ns) - int(alloc[0]), 1))
            return np.minimum((since * TIME_BUCKETS / span).astype(np.int64), TIME_BUCKETS - 1)
        window = ((alloc - alloc[0]) // np.uint64(RATE_WINDOW_NS)).astype(np.int64)
        counts = np.bincount(window)
        return np.floor(np.log2(counts[window])).astype(np.int64)
    if name in ("prev1", "prev2"):
        none = int(ctx.max()) + 1 if n else 0
        thread = np.asarray(rec["thread"], np.int64)
        p1 = _previous_on_thread(ctx, thread, 1, none)
        if name == "prev1":
            return p1
        return p1 * (none + 1) + _previous_on_thread(ctx, thread, 2, none)
    raise ValueError(f"unknown feature {name!r} (known: none, {', '.join(FEATURES)})")


def record_contexts(rec, stack_context: dict) -> np.ndarray:
    """Each record's context index (contexts numbered in first-seen order of stack ids)."""
    index: dict = {}
    of_stack = {int(s): index.setdefault(c, len(index)) for s, c in sorted(stack_context.items())}
    sids, inverse = np.unique(np.asarray(rec["stack"]), return_inverse=True)
    try:
        m = np.fromiter((of_stack[int(s)] for s in sids), np.int64, len(sids))
    except KeyError as e:
        raise tables.TableError(f"stack {e.args[0]} is not in the trace's side file") from None
    return m[inverse.reshape(-1)]


def feature_classes(trace_path: str, stack_context: dict, scheme, name: str, *,
                    deadline_k: float | None = None, boundaries_ns=None) -> dict:
    """Per-record classes of the (context, feature `name`) oracles: {"t95": uint8 array,
    "cost": uint8 array, "keys": number of keys, "objects": records}."""
    header, rec = tables._trace_records(trace_path)
    if not len(rec):
        return {"t95": np.zeros(0, np.uint8), "cost": np.zeros(0, np.uint8), "keys": 0, "objects": 0}
    ctx = record_contexts(rec, stack_context)
    feat = feature_values(name, rec, ctx, header.end_ns)
    return key_classes(header.end_ns, rec, ctx, feat, scheme, deadline_k=deadline_k,
                       boundaries_ns=(boundaries_ns if boundaries_ns is not None
                                      else header.boundaries_ns))


def key_classes(end_ns: int, rec, ctx: np.ndarray, feat: np.ndarray, scheme, *,
                deadline_k: float | None = None, boundaries_ns) -> dict:
    """Each record's classes keyed by (ctx, feat): feature_classes on records in hand
    (objects live at the end censored at END_NS)."""
    k = DEADLINE_K if deadline_k is None else deadline_k
    n = len(rec)
    feat = _dense(feat)
    key = _dense(ctx * (int(feat.max()) + 1) + feat)
    nkeys = int(key.max()) + 1
    t95 = tables.context_t95_groups(end_ns, rec, key, nkeys, scheme)
    # The cost rule on each key's bytes per true class (never freed = inf), as
    # tables.context_oracle_tables does per context from the side file's bytes.
    bounds = np.array(boundaries_ns, np.uint64)
    nclass = len(bounds) + 2
    cls = _true_classes(np.asarray(rec["alloc"]), np.asarray(rec["free"]), bounds).astype(np.int64)
    by = np.bincount(key * nclass + cls, weights=np.asarray(rec["size"], np.float64),
                     minlength=nkeys * nclass).reshape(nkeys, nclass)
    horizon = cost_horizon(scheme.boundaries, k)
    cost = np.empty(nkeys, np.int64)
    for i in range(nkeys):
        b = by[i]
        cost[i] = (cost_rule(b, scheme.boundaries, deadline_k=k, horizon=horizon)
                   if b.sum() > 0 else t95[i])
    return {"t95": t95[key].astype(np.uint8), "cost": cost[key].astype(np.uint8),
            "keys": nkeys, "objects": n}


def pooled_feature_classes(procs: list[dict], scheme, name: str, *,
                           deadline_k: float | None = None) -> list[np.ndarray]:
    """The (context, feature) oracles of a server of many processes, each its own trace
    (benchmarks/simulate_postgres.py): a key's objects in every process pooled, as the
    server-wide context oracles (simulate_postgres.pooled_context_oracles) pool a
    context's.  PROCS: {"trace": path, "contexts": {stack id: context},
    "stacks": {stack id: a key of the whole stack equal across processes}}.

    The features on the pooled records, in allocation order on the common clock: `thread`
    is (process, thread); `prev1`/`prev2` per such thread in its own trace order; `time`
    in 16 parts of the server's span (first allocation of any process to the last end);
    `rate` counts every process's allocations in the 1 s window; `stack` is the whole
    stack's key.  An object live at its process's end is censored at that end.
    Returns {"t95": [per-process uint8 arrays], "cost": [...], "keys", "objects"}."""
    parts, ends, ctxs, stack_keys = [], [], [], []
    cindex: dict = {}
    sindex: dict = {}
    bounds_ns = None
    for p in procs:
        header, rec = tables._trace_records(p["trace"])
        bounds_ns = header.boundaries_ns if bounds_ns is None else bounds_ns
        if list(header.boundaries_ns) != list(bounds_ns):
            raise tables.TableError(f"{p['trace']}: class bounds differ from the other processes'")
        parts.append(rec)
        ends.append(int(header.end_ns))
        sids, inv = np.unique(np.asarray(rec["stack"]), return_inverse=True)
        inv = inv.reshape(-1)
        c = np.fromiter((cindex.setdefault(p["contexts"][int(x)], len(cindex)) for x in sids),
                        np.int64, len(sids))
        k = np.fromiter((sindex.setdefault(p["stacks"][int(x)], len(sindex)) for x in sids),
                        np.int64, len(sids))
        ctxs.append(c[inv])
        stack_keys.append(k[inv])
    sizes = [len(r) for r in parts]
    if not sum(sizes):
        z = [np.zeros(0, np.uint8) for _ in parts]
        return {"t95": z, "cost": z, "keys": 0, "objects": 0}
    server_end = max(ends)
    rec = np.concatenate(parts)
    ctx = np.concatenate(ctxs)
    proc = np.repeat(np.arange(len(parts)), sizes)
    # Features see the common clock; the classes see each process's lifetimes, an object
    # live at its process's end censored there: shift each process to end at server_end.
    alloc = np.asarray(rec["alloc"], np.uint64)
    order = np.argsort(alloc, kind="stable")   # a process's records keep their trace order
    view = {"alloc": alloc[order], "size": np.asarray(rec["size"])[order],
            "thread": _dense(proc * (int(np.asarray(rec["thread"]).max()) + 1)
                             + np.asarray(rec["thread"], np.int64))[order],
            "stack": np.concatenate(stack_keys)[order]}
    feat_sorted = feature_values(name, _Records(view), ctx[order], server_end)
    feat = np.empty_like(feat_sorted)
    feat[order] = feat_sorted
    shift = np.repeat(np.array([server_end - e for e in ends], np.uint64), sizes)
    shifted = np.empty(len(rec), dtype=[("alloc", np.uint64), ("free", np.uint64),
                                        ("size", np.uint64)])
    shifted["alloc"] = alloc + shift
    free = np.asarray(rec["free"], np.uint64)
    never = free == np.iinfo(np.uint64).max
    shifted["free"] = np.where(never, free, free + shift)
    shifted["size"] = np.asarray(rec["size"], np.uint64)
    r = key_classes(server_end, shifted, ctx, feat, scheme, deadline_k=deadline_k,
                    boundaries_ns=bounds_ns)
    cut = np.cumsum(sizes)[:-1]
    return {"t95": np.split(r["t95"], cut), "cost": np.split(r["cost"], cut),
            "keys": r["keys"], "objects": r["objects"]}


class _Records:
    """Named columns with len() = rows: what feature_values reads of a record array."""

    def __init__(self, cols: dict):
        self.cols = cols

    def __getitem__(self, k):
        return self.cols[k]

    def __len__(self):
        return len(self.cols["alloc"])


def write_feature_oracles(trace_path: str, stack_context: dict, scheme, out_dir: str,
                          names=tuple(FEATURES), *, deadline_k: float | None = None,
                          progress=None) -> dict:
    """Object class files for each feature's two oracles under out_dir:
    {"files": {label: path}, "keys": {feature: keys}, "objects": n}.  Labels:
    context_<feature>_t95 and context_<feature>_cost."""
    say = progress or (lambda _m: None)
    os.makedirs(out_dir, exist_ok=True)
    files, keys, objects = {}, {}, 0
    for name in names:
        say(f"feature oracle: context + {name}")
        r = feature_classes(trace_path, stack_context, scheme, name, deadline_k=deadline_k)
        for rule in ("t95", "cost"):
            label = f"context_{name}_{rule}"
            files[label] = write_object_classes(os.path.join(out_dir, f"{label}.cls"), r[rule])
        keys[name] = r["keys"]
        objects = r["objects"]
    return {"files": files, "keys": keys, "objects": objects}


#: The least gap (fragmentation-reduction points, as a fraction) a share is computed on.
MIN_GAP = 0.01


def gap_closed(feature: float | None, context: float | None, oracle: float | None) -> float | None:
    """Share of the context-oracle -> per-object-oracle gap a feature oracle closes:
    (feature - context) / (oracle - context), on fragmentation reductions; None where a
    figure is missing or there is no gap to close: the per-object oracle less than
    MIN_GAP (1 point) ahead of the context oracle (where it is behind, as on the huge
    pages of `segregated` on Redis mixed, the share's sign would mean nothing)."""
    if feature is None or context is None or oracle is None or oracle - context < MIN_GAP:
        return None
    return (feature - context) / (oracle - context)
