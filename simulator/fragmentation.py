"""`lifetime fragmentation TRACE --out DIR`: which allocation contexts' live objects pin
the memory a heap policy holds (issue 34, item 1; wired into lifetime/cli.py).

The engine replays the trace under one policy (`--policy`, default `segregated`; with
`--predictor SPEC` or `--model EXPORT_DIR`, default `constant:0`) and, at each time asked,
writes per huge page the live bytes of each (stack, true class) on it
(`lifetime_simulate --attribute-at-ns`, simulator/src/attribution.h).  Here those rows
are turned into per-context figures.

**Pinned bytes (the one definition).**  The heap is what the simulator reports: live
huge pages x 2 MiB.  A huge page's *held-but-not-live* bytes are 2 MiB less the live
bytes on it (objects' requested sizes; an object across huge pages counts on each
for the bytes that fall there).  They are shared among the stacks with live bytes on
that huge page in proportion to those bytes: a stack with live bytes b of the page's L
gets (2 MiB - L) x b / L.  A huge page held with no live object on it at all (LLAMA's
open pages, a span a thread still holds whose objects all died, alignment padding) is
pinned whole by the stack that last allocated on it (the page or span was kept for more
of its objects; the engine records the last allocation per huge page).  A context's
pinned bytes are the sum over its stacks and the huge pages.  What is left --
`unattributed` -- is only a page held with no live object on which no allocation was
ever recorded (none in any trace measured).  So, at every time, exactly

    sum over contexts of pinned + unattributed = heap - live.

**In memory** (`pinned_resident`): the same sharing of what each huge page holds in
memory, 2 MiB less the free bytes on it given back to the kernel (the size-class heaps'
subrelease; the engine and the allocator list them per page, `subreleased`) less its
live bytes.  The heap in memory is the heap less all bytes given back.

**Contexts**: each trace stack is symbolized from the side file and cut by a context
definition (`core.context`): the training dataset's with `--train DATASET` (as
`lifetime simulate` does for its tables), else the default one (built-in wrappers, 16
frames).  Several stacks can share a context; the pprof profile keeps the stacks.

**Steady state**: the simulator's (the second half of the trace, [start + (end -
start) / 2, end]); its time-weighted mean is estimated by `--steady-samples` N
attributions at the midpoints of N equal slices of it, each context's figures averaged
over them.  The report compares the samples' mean heap - live with the engine's own
time-weighted figure.

**Lifetime distribution**: each live object's class from its recorded free time in the
trace (never freed = inf; the project's label scheme, the trace's boundaries).

**Counterfactual (what placing a context's objects apart would have saved)**:

* `saved_static` (always, per time): the context's live objects taken off the heap at
  that moment and packed end to end on huge pages of their own, every other object left
  where it is: the huge pages on which only that context has live bytes go back, and
  its objects take ceil(its live bytes / 2 MiB) huge pages: saved = 2 MiB x (huge
  pages it alone holds) - 2 MiB x ceil(live / 2 MiB).  It ignores that the history
  would have been different; negative where the context shares every page it sits on.
* `saved_rerun` (`--rerun N`, the top N contexts by steady pinned bytes): the trace is
  replayed once more with, per context, the policy's heap and a second heap of the same
  policy taking that context's stacks' objects (`lifetime_simulate --isolate`); saved =
  the policy's steady-state heap - the pair's, the engine's own time-weighted figures.

Outputs in --out: fragmentation.json (everything), fragmentation.txt (the text
printed), pinned.pb.gz (pprof: pinned and live bytes and objects by stack, steady
state; pinned_at_<S>s.pb.gz per --at), pinned.png (a bar chart of the top contexts).
"""

from __future__ import annotations

import argparse
import collections
import math
import os
import re
import sys
import time

import numpy as np

import simulator
from core import options
from core import symbolize
from core.context import ContextDefinition
from core.errors import LifetimeError
from core.files import (open_regular, read_json_object, refuse_irregular_output, writable_dir,
                        write_json)
from core.plots import pyplot
from core.symbol_options import add_symbol_options, symbol_options
from interop.pprof import ProfileBuilder
from interop.pprof.convert import DROP_FRAMES
from pipeline.manifest import dataset_context
from simulator import convert, model_input
from simulator.tables import symbolize_stacks
from simulator.trace import MAGIC, RECORD, read_header

HUGE_PAGE = 2 << 20
MIB = float(1 << 20)
NO_OBJECT = "(held huge pages with no live object, no allocation recorded)"  # unattributed
OUTPUTS = ("fragmentation.json", "fragmentation.txt", "pinned.pb.gz", "pinned.png")


class FragmentationError(LifetimeError):
    """A problem `lifetime fragmentation` can name: its input, the engine, an option."""


def add_parser(sub) -> None:
    p = sub.add_parser(
        "fragmentation", help="which allocation contexts pin a heap's memory (simulated)",
        description="Replays a full trace (.lttrace with its .stacks.json) under one heap "
                    "policy and reports, at the steady state and at each --at, the "
                    "allocation contexts whose live objects pin the most otherwise-empty "
                    "memory: pinned and live MiB, objects, their lifetime classes and what "
                    "placing them apart would have saved.  Writes fragmentation.json/.txt, "
                    "pinned.pb.gz (pprof: `go tool pprof -top`) and pinned.png into --out.")
    p.add_argument("trace", metavar="TRACE",
                   help="a full trace (.lttrace); or a running allocator's dump "
                        "(`lifetime run --allocator llama --attribute DIR` writes them: "
                        "attribution.PID.N.json), attributed as it was taken; or that DIR: "
                        "one process's dumps, the steady state their mean over the second "
                        "half of its life")
    p.add_argument("--out", required=True, metavar="DIR")
    p.add_argument("--policy", default=None, metavar="NAME[,NAME...]",
                   help="the heap: a LLAMA policy as `lifetime_simulate --policy` takes it "
                        "(default segregated; paper = LLAMA's own), or baseline (the "
                        "TCMalloc-like allocator, no predictor)")
    pred = p.add_mutually_exclusive_group()
    pred.add_argument("--predictor", default=None, metavar="SPEC",
                      help="oracle | constant:C | table:FILE (default constant:0)")
    pred.add_argument("--model", metavar="EXPORT_DIR",
                      help="a `lifetime export` directory, served as `lifetime simulate "
                           "--model` serves it")
    p.add_argument("--train", metavar="DATASET",
                   help="use this dataset's context definition (default: the built-in one)")
    p.add_argument("--at", type=options.finite_float(0, 1e9), action="append", default=[],
                   metavar="SECONDS",
                   help="also attribute at this time, seconds since the first allocation "
                        "(repeatable; for a directory of dumps: the dump nearest this many "
                        "seconds after start-up)")
    p.add_argument("--pid", type=options.positive_int(2**31), metavar="PID",
                   help="a directory of dumps: the process whose dumps to read (when it "
                        "holds several processes')")
    p.add_argument("--steady-samples", type=options.positive_int(1000), default=16, metavar="N",
                   help="attributions averaged over the steady state (default 16)")
    p.add_argument("--top", type=options.positive_int(10**6), default=10, metavar="N",
                   help="contexts shown in the text and the PNG (default 10)")
    p.add_argument("--rerun", type=options.int_range(0, 64), default=0, metavar="N",
                   help="replay the trace once more with each of the top N contexts in a heap "
                        "of its own (the counterfactual saved_rerun; default 0: only the "
                        "static counterfactual)")
    add_symbol_options(p)
    p.set_defaults(func=run)


def _say(msg: str) -> None:
    print(f"lifetime fragmentation: {msg}", file=sys.stderr, flush=True)


# -- input -------------------------------------------------------------------------------

def read_trace_frame(path: str) -> tuple[object, int]:
    """(header, first allocation time) of a trace; one-line errors naming the file."""
    try:
        f, _ = open_regular(path)
    except FileNotFoundError:
        raise FragmentationError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise FragmentationError(f"{path}: is a directory, not a trace") from None
    except OSError as e:
        raise FragmentationError(f"{path}: cannot read ({e.strerror})") from None
    with f:
        if f.read(len(MAGIC)) != MAGIC:
            raise FragmentationError(f"{path}: not an object trace (.lttrace); convert a "
                                     "profile with `lifetime simulate` first")
        f.seek(0)
        try:
            header = read_header(f, path)
        except LifetimeError as e:
            raise FragmentationError(str(e)) from None
        f.seek(header.header_bytes)
        first = f.read(RECORD.size)
    t0 = RECORD.unpack(first)[0] if len(first) == RECORD.size else header.end_ns
    return header, t0


def _load_side(path: str) -> dict:
    try:
        return convert.load_stacks(convert.stacks_path(path))
    except LifetimeError as e:
        raise FragmentationError(str(e)) from None


def steady_times(t0: int, end: int, n: int) -> list[int]:
    """The midpoints of n equal slices of the simulator's steady state [t0 + (end-t0)/2, end]."""
    lo = t0 + (end - t0) // 2
    return [lo + ((2 * i + 1) * (end - lo)) // (2 * n) for i in range(n)]


# -- aggregation -------------------------------------------------------------------------

EMPTY = 255          # the engine's class field of a live huge page with no live object
NO_STACK = 2**64 - 1  # ... on which no allocation was recorded


def attribute(att: dict) -> dict:
    """One allocator's attribution at one time (the engine's rows) -> per stack id:
    {stack: {"pinned", "live", "objects", "class_objects": {cls: n}, "class_bytes":
    {cls: b}}}, plus the totals: heap, live, unattributed (huge pages with no live object
    and no recorded allocation), and per huge page the stacks with live bytes on it (for
    the static counterfactual)."""
    rows = np.asarray(att["rows"], dtype=np.uint64).reshape(-1, 6)
    heap = att["huge_pages"] * HUGE_PAGE
    # Resident: a page's free bytes given back (subrelease) are not memory it holds.
    given_back = {int(h): int(b) for h, b in att.get("subreleased", [])}
    stacks: dict = {}
    page_stacks = collections.defaultdict(set)
    empty = rows[:, 3] == EMPTY
    whole = (rows[:, 1] > 1) & ~empty
    single = ~whole & ~empty
    hp = rows[single, 0]
    live_bytes = rows[single, 5].astype(np.float64)
    pages, inv = np.unique(hp, return_inverse=True)
    inv = inv.reshape(-1)
    page_live = np.bincount(inv, weights=live_bytes, minlength=len(pages))
    # Every object counts at least one byte (the engine reads size 0 as 1): page_live > 0.
    pinned = (HUGE_PAGE - page_live[inv]) * live_bytes / page_live[inv]
    back = np.array([given_back.get(int(h), 0) for h in hp], np.float64)
    pinned_resident = np.maximum(HUGE_PAGE - back - page_live[inv], 0.0) * live_bytes / page_live[inv]
    for row, pin, res in zip(rows[single], pinned, pinned_resident):
        _add(stacks, row, pin, res)
        page_stacks[int(row[0])].add(int(row[2]))
    for row in rows[whole]:
        _add(stacks, row, 0.0, 0.0)
        page_stacks[("whole", int(row[0]))].add(int(row[2]))  # pages of one object alone
    unattributed = 0
    for row in rows[empty]:  # held, nothing live: the whole page to the last allocating stack
        if int(row[2]) == NO_STACK:
            unattributed += HUGE_PAGE
        else:
            _add(stacks, row, float(HUGE_PAGE), float(HUGE_PAGE - given_back.get(int(row[0]), 0)))
    accounted = len(pages) + int(rows[whole, 1].sum()) + int(empty.sum())
    unattributed += (att["huge_pages"] - accounted) * HUGE_PAGE  # 0: the engine lists every page
    return {"stacks": stacks, "heap": heap, "live": int(att["live_bytes"]),
            "heap_resident": heap - sum(given_back.values()),
            "objects": int(att["objects"]), "unattributed": unattributed,
            "empty_pages": int(empty.sum()), "page_stacks": page_stacks,
            "whole_pages": {int(r[0]): int(r[1]) for r in rows[whole]}}


def _add(stacks: dict, row, pin: float, resident: float) -> None:
    sid, cls = int(row[2]), int(row[3])
    s = stacks.get(sid)
    if s is None:
        s = stacks[sid] = {"pinned": 0.0, "pinned_resident": 0.0, "live": 0, "objects": 0,
                           "class_objects": collections.Counter(),
                           "class_bytes": collections.Counter()}
    s["pinned"] += float(pin)
    s["pinned_resident"] += float(resident)
    if cls == EMPTY:
        return
    s["live"] += int(row[5])
    s["objects"] += int(row[4])
    s["class_objects"][cls] += int(row[4])
    s["class_bytes"][cls] += int(row[5])


def by_context(snap: dict, context_of: dict, nclasses: int) -> dict:
    """Per context (key: frames tuple) at one time: pinned, live, objects, objects and bytes
    per class, huge pages it alone holds (static counterfactual), saved_static."""
    out = {}
    for sid, s in snap["stacks"].items():
        c = context_of[sid]
        d = out.get(c)
        if d is None:
            d = out[c] = {"pinned": 0.0, "pinned_resident": 0.0, "live": 0, "objects": 0,
                          "class_objects": [0] * nclasses, "class_bytes": [0] * nclasses,
                          "stacks": set(), "sole_huge_pages": 0}
        d["pinned"] += s["pinned"]
        d["pinned_resident"] += s["pinned_resident"]
        d["live"] += s["live"]
        d["objects"] += s["objects"]
        for k, v in s["class_objects"].items():
            d["class_objects"][k] += v
        for k, v in s["class_bytes"].items():
            d["class_bytes"][k] += v
        d["stacks"].add(sid)
    for page, sids in snap["page_stacks"].items():
        ctxs = {context_of[s] for s in sids}
        if len(ctxs) == 1:
            n = snap["whole_pages"][page[1]] if isinstance(page, tuple) else 1
            out[next(iter(ctxs))]["sole_huge_pages"] += n
    for d in out.values():
        d["saved_static"] = HUGE_PAGE * (d["sole_huge_pages"] - math.ceil(d["live"] / HUGE_PAGE))
    return out


def _totals(snaps: list[dict], ctxs: dict) -> dict:
    """The mean heap, live and unattributed bytes of some attributions (`attribute`'s),
    the contexts' pinned bytes (ctxs: their mean) and the check sum pinned + unattributed
    = heap - live."""
    tot = {k: sum(s[k] for s in snaps) / len(snaps)
           for k in ("heap", "heap_resident", "live", "unattributed", "empty_pages")}
    tot["pinned"] = sum(c["pinned"] for c in ctxs.values())
    tot["pinned_resident"] = sum(c["pinned_resident"] for c in ctxs.values())
    gap = tot["heap"] - tot["live"]
    tot["check"] = {"pinned_plus_unattributed": tot["pinned"] + tot["unattributed"],
                    "heap_minus_live": gap,
                    "pinned_share_of_heap_minus_live": tot["pinned"] / gap if gap else None}
    return tot


def mean_view(snaps: list[dict], context_of: dict, nclasses: int, top: int) -> tuple[dict, dict]:
    """(per-context figures, totals) of some attributions together (`attribute`'s, a trace's
    times or a process's dumps): the contexts' means, the totals, and the static
    counterfactual of the top contexts all apart."""
    ctxs = mean_contexts([by_context(s, context_of, nclasses) for s in snaps], nclasses)
    tot = _totals(snaps, ctxs)
    group = {r["context"] for r in _rows(ctxs, top)}
    tot["top_saved_static"] = sum(group_saved_static(s, context_of, group) for s in snaps) / len(snaps)
    return ctxs, tot


def group_saved_static(snap: dict, context_of: dict, group: set) -> float:
    """saved_static for a set of contexts placed apart together: the huge pages on which
    only they have live bytes go back; their live objects take ceil(their live bytes /
    2 MiB) huge pages of their own."""
    sole = live = 0
    for page, sids in snap["page_stacks"].items():
        if all(context_of[s] in group for s in sids):
            sole += snap["whole_pages"][page[1]] if isinstance(page, tuple) else 1
    for sid, st in snap["stacks"].items():
        if context_of[sid] in group:
            live += st["live"]
    return HUGE_PAGE * (sole - math.ceil(live / HUGE_PAGE))


def mean_contexts(per_time: list[dict], nclasses: int) -> dict:
    """Each context's figures averaged over the times (absent = 0)."""
    n = len(per_time)
    out: dict = {}
    for ctxs in per_time:
        for c, d in ctxs.items():
            m = out.get(c)
            if m is None:
                m = out[c] = {"pinned": 0.0, "pinned_resident": 0.0, "live": 0.0, "objects": 0.0,
                              "saved_static": 0.0, "sole_huge_pages": 0.0,
                              "class_objects": np.zeros(nclasses),
                              "class_bytes": np.zeros(nclasses), "stacks": set()}
            for k in ("pinned", "pinned_resident", "live", "objects", "saved_static",
                      "sole_huge_pages"):
                m[k] += d[k] / n
            m["class_objects"] += np.asarray(d["class_objects"], np.float64) / n
            m["class_bytes"] += np.asarray(d["class_bytes"], np.float64) / n
            m["stacks"] |= d["stacks"]
    return out


# -- names -------------------------------------------------------------------------------

def short_name(frames: tuple, n: int = 3, width: int = 70) -> str:
    """The first n frames of a context, qualified names only, joined by ' < ' (callee first)."""
    if frames == NO_OBJECT:
        return NO_OBJECT
    parts = []
    for f in frames[:n]:
        try:
            q = symbolize.qualified_name(f) or f
        except Exception:  # noqa: BLE001 - a name we cannot parse is shown as it is
            q = f
        parts.append(q)
    s = " < ".join(parts) if parts else "(no frames)"
    return s if len(s) <= width else s[:width - 1] + "…"


# -- outputs -----------------------------------------------------------------------------

def write_pprof(path: str, side: dict, stack_figures: dict, unattributed: float,
                symbolizer, context_of: dict, class_names: list, wrappers=()) -> str:
    """A pprof profile: per trace stack, pinned bytes, live bytes and live objects (the
    stack's figures, rounded); one more sample for the huge pages with no live object.
    Locations are the side file's return addresses, named by the symbolizer; pprof drops
    the allocator's frames (`lifetime pprof`'s list) and the context definition's
    wrappers, so a stack's flat figure lands on its allocation site."""
    b = ProfileBuilder()
    p = b.profile
    p.drop_frames = b.string("|".join([DROP_FRAMES] + [re.escape(w) for w in wrappers]))
    for type_, unit in (("pinned_space", "bytes"), ("live_space", "bytes"), ("live_objects", "count")):
        b.value_type(p.sample_type.add(), type_, unit)
    b.value_type(p.period_type, "space", "bytes")
    p.default_sample_type = b.string("pinned_space")
    p.comment.append(b.string("pinned_space: free bytes of the huge pages held, shared among "
                              "the stacks with live bytes on each page in proportion to them "
                              "(lifetime fragmentation)"))
    stacks = {int(s["id"]): s for s in side["stacks"]}
    executable = side["source"].get("executable_path", "")
    for m in sorted(side["mappings"], key=lambda m: (m["path"] != executable, m["start"], m["id"])):
        b.mapping(m["id"], m["start"], m["limit"], m["file_offset"], m["path"],
                  m.get("build_id") or "", False)
    for sid in sorted(stack_figures):
        f = stack_figures[sid]
        loc_ids = []
        if not stacks[sid]["addresses"]:  # an allocator dump's reserved id: its label
            label = str(stacks[sid].get("label") or f"<stack {sid}>")
            loc_ids.append(b.add_location((label,), 0, 0, [(label, "")]))
        for address in stacks[sid]["addresses"]:
            lid = b.location_id(address)
            if lid is None:
                lookup = address - 1 if address else 0
                mapping = symbolizer.mapping_for(lookup)
                frames = symbolizer.symbolize_address(address, True)
                lid = b.add_location(address, lookup, b.mapping_id(mapping.id) if mapping else 0,
                                     [(fr.function, fr.symbol or "") for fr in frames])
            loc_ids.append(lid)
        sample = p.sample.add(location_id=loc_ids)
        sample.value.extend((round(f["pinned"]), round(f["live"]), round(f["objects"])))
        sample.label.add(key=b.string("context"),
                         str=b.string(short_name(context_of[sid], n=2, width=120)))
        cls = int(np.argmax(f["class_bytes"])) if np.sum(f["class_bytes"]) else -1
        if cls >= 0:
            sample.label.add(key=b.string("lifetime_class"), str=b.string(class_names[cls]))
    if unattributed > 0:
        lid = b.add_location(("no-object",), 0, 0, [(NO_OBJECT, "")])
        p.sample.add(location_id=[lid]).value.extend((round(unattributed), 0, 0))
    with open(path, "wb") as f:
        f.write(b.serialize())
    return path


def write_png(path: str, rows: list[dict], title: str, totals: dict, class_names: list,
              footnote: str = "Under each: its live objects and their lifetime classes by live "
                              "bytes, from the trace's free times (inf: never freed).") -> str:
    """Horizontal bars per top context: pinned MiB (in memory darker) and live MiB side by
    side, values on the pinned bars; under each name its objects and their lifetime
    classes; the totals and how to read a name underneath."""
    plt = pyplot()
    names = [f"{r['name']}\n{r['objects']:,.0f} objects"
             + (f": {_mix(r, class_names)}" if len(class_names) > 1 else "") for r in rows][::-1]
    pinned = [r["pinned"] / MIB for r in rows][::-1]
    resident = [r["pinned_resident"] / MIB for r in rows][::-1]
    live = [r["live"] / MIB for r in rows][::-1]
    y = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(11, 2.2 + 0.55 * max(1, len(rows))))
    ax.barh(y + 0.2, pinned, 0.4, color="mistyrose", edgecolor="tab:red", linewidth=0.6,
            label="pinned: free memory of the huge pages its live objects keep "
                  "(shared by live bytes)")
    ax.barh(y + 0.2, resident, 0.4, color="tab:red",
            label="... of which in memory (less free pages given back to the kernel)")
    ax.barh(y - 0.2, live, 0.4, color="tab:blue", label="live: its objects' bytes")
    for yi, v in zip(y, pinned):
        ax.text(v, yi + 0.2, f" {v:.1f}", va="center", fontsize=7, color="tab:red")
    ax.set_yticks(y, names, fontsize=7.5)
    ax.set_xlabel("MiB")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(axis="x", alpha=0.3)
    fig.text(0.01, 0.01,
             f"heap {totals['heap'] / MIB:.1f} MiB, live {totals['live'] / MIB:.1f} MiB: "
             f"{(totals['heap'] - totals['live']) / MIB:.1f} MiB held but not live, of which "
             f"these {len(rows)} contexts pin {sum(pinned):.1f} "
             f"({sum(r['pinned_resident'] for r in rows) / MIB:.1f} in memory: the heap less "
             f"free pages given back is {totals['heap_resident'] / MIB:.1f} MiB).\nA context: its allocation "
             "site first, then its callers (a < b: a called by b).  " + footnote,
             fontsize=7.5, color="dimgrey", ha="left", va="bottom")
    fig.tight_layout(rect=(0.01, 0.07, 1, 1))  # the footnote below the axes (save_png would re-lay out)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# -- the command -------------------------------------------------------------------------

def _context_definition(args) -> ContextDefinition:
    if not args.train:
        return ContextDefinition.make()
    if not os.path.isdir(args.train):
        raise FragmentationError(f"--train {args.train}: no such dataset directory")
    try:
        return dataset_context(args.train)
    except LifetimeError as e:
        raise FragmentationError(f"--train {args.train}: {e}") from None


def _engine_args(args, side, out_dir, symbols, stack_context) -> tuple[list, dict, str]:
    """(predictor specs, simulate() keyword arguments, allocator name) for the policy."""
    if args.policy == "baseline":
        if args.predictor or args.model:
            raise FragmentationError("--policy baseline takes no predictor")
        return [], {"baseline": True}, "baseline"
    if args.model:
        try:
            mi = model_input.prepare(args.model, side, os.path.join(out_dir, "model"),
                                     class_names=side["class_names"],
                                     debug_dirs=symbols["debug_dirs"],
                                     sysroot=symbols["sysroot"] or None, progress=_say)
        except LifetimeError as e:
            raise FragmentationError(str(e)) from None
        spec = f"model=model:{mi.contexts_file}"
    else:
        spec = args.predictor or "constant:0"
    label = spec.split("=", 1)[0] if "=" in spec.split(":", 1)[0] else spec
    if spec.startswith("table:"):
        label = "table:" + os.path.basename(spec[len("table:"):])
    return [spec], {"baseline": False, "policy": [args.policy]}, f"llama:{label}"


def _run_engine(trace: str, specs, kwargs, **more) -> dict:
    try:
        return simulator.simulate(trace, specs, **kwargs, **more)
    except simulator.SimulationError as e:
        if e.returncode in (2, 4):
            raise FragmentationError(str(e).removeprefix("lifetime_simulate: error: ")) from None
        raise
    except FileNotFoundError as e:
        raise FragmentationError(str(e)) from None


def _rows(ctxs: dict, top: int) -> list[dict]:
    order = sorted(ctxs, key=lambda c: (-ctxs[c]["pinned"], short_name(c)))[:top]
    names = unique_names(order)
    return [dict(ctxs[c], context=c, name=names[c]) for c in order]


def unique_names(contexts: list) -> dict:
    """short_name of each context, with the first frame where it differs from another
    shown context of the same short name appended (' … @k: frame')."""
    names = {c: short_name(c) for c in contexts}
    groups = collections.defaultdict(list)
    for c in contexts:
        groups[names[c]].append(c)
    for same in groups.values():
        if len(same) < 2:
            continue
        for c in same:
            others = [o for o in same if o is not c]
            k = next((i for i in range(len(c)) if any(i >= len(o) or o[i] != c[i] for o in others)),
                     len(c))
            tail = short_name(c[k:k + 1], n=1, width=40) if k < len(c) else "(end)"
            names[c] = f"{short_name(c, width=60)} … @{k}: {tail}"
    return names


def _json_context(c, d: dict, class_names: list) -> dict:
    return {"context": list(c) if isinstance(c, tuple) else c, "name": short_name(c),
            "pinned_bytes": d["pinned"], "pinned_resident_bytes": d["pinned_resident"],
            "live_bytes": d["live"], "objects": d["objects"],
            "sole_huge_pages": d["sole_huge_pages"], "saved_static_bytes": d["saved_static"],
            **({"saved_rerun_bytes": d["saved_rerun"]} if "saved_rerun" in d else {}),
            "objects_per_class": dict(zip(class_names, map(float, d["class_objects"]))),
            "bytes_per_class": dict(zip(class_names, map(float, d["class_bytes"]))),
            "stacks": sorted(d["stacks"])}


def _mix(d: dict, class_names: list) -> str:
    """The context's live bytes by lifetime class, the two largest shares."""
    b = np.asarray(d["class_bytes"], np.float64)
    if not b.sum() or len(class_names) < 2:  # (one class: an allocator's dump, none known)
        return "-"
    order = np.argsort(-b, kind="stable")[:2]
    return " ".join(f"{_class_label(class_names[k])} {100 * b[k] / b.sum():.0f}%"
                    for k in order if b[k] > 0)


def _class_label(name: str) -> str:
    """A bounded class as "<1s" (the scheme names it "1s"); ">=1000s" and "inf" as they are."""
    return name if name[:1] in "<>" or not name[:1].isdigit() else "<" + name


def text_table(title: str, rows: list[dict], totals: dict, class_names: list, rerun: bool) -> str:
    lines = [title,
             f"heap {totals['heap'] / MIB:.1f} MiB, live {totals['live'] / MIB:.1f} MiB, "
             f"heap - live {(totals['heap'] - totals['live']) / MIB:.1f} MiB = pinned by contexts "
             f"{totals['pinned'] / MIB:.1f}"
             + (f" (of which {totals['empty_pages'] * HUGE_PAGE / MIB:.1f} on huge pages with no "
                "live object, to the last stack that allocated there)" if totals['empty_pages'] else "")
             + f" + unattributed {totals['unattributed'] / MIB:.1f} MiB",
             f"of which in memory (less free pages given back to the kernel): heap "
             f"{totals['heap_resident'] / MIB:.1f} MiB, pinned {totals['pinned_resident'] / MIB:.1f} MiB",
             f"{'#':>2} {'pinned MiB':>10} {'%':>5} {'in RSS':>6} {'live MiB':>8} {'objects':>9} "
             f"{'saved MiB':>9}" + (f" {'rerun MiB':>9}" if rerun else "") +
             f"  {'lifetimes (live bytes)':<24} context"]
    gap = totals["heap"] - totals["live"]
    for i, r in enumerate(rows, 1):
        lines.append(f"{i:>2} {r['pinned'] / MIB:>10.2f} {100 * r['pinned'] / gap if gap else 0:>5.1f} "
                     f"{r['pinned_resident'] / MIB:>6.2f} {r['live'] / MIB:>8.2f} {r['objects']:>9.0f} {r['saved_static'] / MIB:>9.1f}"
                     + (f" {r['saved_rerun'] / MIB:>9.1f}" if rerun and 'saved_rerun' in r
                        else (f" {'':>9}" if rerun else ""))
                     + f"  {_mix(r, class_names):<24} {r['name']}")
    lines.append(f"all {len(rows)} above apart together: saved {totals['top_saved_static'] / MIB:.1f} MiB "
                 "(static)" + (f"; the top {totals['rerun_contexts']} replayed apart together: saved "
                               f"{totals['top_saved_rerun'] / MIB:.1f} MiB" if "top_saved_rerun" in totals
                               else ""))
    return "\n".join(lines)


def _check_outputs(out: str) -> None:
    writable_dir(out)
    for name in OUTPUTS:
        path = os.path.join(out, name)
        try:
            refuse_irregular_output(path)
        except OSError as e:
            raise FragmentationError(f"{path}: cannot write there ({e.strerror})") from None


def run(args: argparse.Namespace) -> int:
    if os.path.isdir(args.trace) or is_dump(args.trace):
        return run_dump(args)
    args.policy = args.policy or "segregated"
    started = time.monotonic()
    symbols = symbol_options(args)
    header, t0 = read_trace_frame(args.trace)
    side = _load_side(args.trace)
    definition = _context_definition(args)
    _check_outputs(args.out)
    end = header.end_ns
    for s in args.at:
        if not (s >= 0 and t0 + s * 1e9 <= end):
            raise FragmentationError(f"--at {s}: the trace spans 0..{(end - t0) / 1e9:.3f} s")
    class_names = list(side.get("class_names") or [])
    nclasses = len(header.boundaries_ns) + 2
    if len(class_names) != nclasses:
        class_names = [f"class {k}" for k in range(nclasses)]
    _say(f"symbolizing {len(side['stacks']):,} stacks (context definition: "
         f"{'--train ' + args.train if args.train else 'built-in'})")
    context_of = symbolize_stacks(side, definition, debug_dirs=symbols["debug_dirs"],
                                  sysroot=symbols["sysroot"] or None)
    specs, kwargs, name = _engine_args(args, side, args.out, symbols, context_of)

    steady = steady_times(t0, end, args.steady_samples)
    at_ns = [t0 + round(s * 1e9) for s in args.at]
    times = sorted(set(steady) | set(at_ns))
    _say(f"simulating {header.num_records:,} objects under {args.policy}"
         + (f" with {specs[0]}" if specs else "") + f", attributing at {len(times)} times")
    sim = _run_engine(args.trace, specs, kwargs, attribute_at_ns=times)
    alloc = next(a for a in sim["allocators"] if a["name"] == name)
    snaps = {a["t_ns"]: attribute(a["allocators"][name]) for a in sim["attributions"]}
    missing = {sid for s in snaps.values() for sid in s["stacks"]} - set(context_of)
    if missing:
        raise FragmentationError(f"{args.trace}: stack {min(missing)} is not in the side file "
                                 f"{convert.stacks_path(args.trace)}")

    def at(ts: list[int], label: str) -> dict:
        ctxs, tot = mean_view([snaps[t] for t in ts], context_of, nclasses, args.top)
        return {"label": label, "times_ns": ts, "contexts": ctxs, "totals": tot}

    views = [at(steady, "steady state")] + [at([t], f"{(t - t0) / 1e9:g} s") for t in at_ns]
    sv = views[0]
    sv["totals"]["engine_steady_heap"] = alloc["steady_state_bytes"]
    sv["totals"]["engine_steady_live"] = sim["live"]["steady_state_bytes"]
    eg = alloc["steady_state_bytes"] - sim["live"]["steady_state_bytes"]
    sv["totals"]["engine_steady_heap_minus_live"] = eg
    sv["totals"]["pinned_vs_engine"] = sv["totals"]["pinned"] / eg if eg else None

    if args.rerun:
        top = _rows(sv["contexts"], args.rerun)
        groups = [(f"c{i}", sorted(r["stacks"])) for i, r in enumerate(top)]
        groups.append(("top", sorted(set().union(*(r["stacks"] for r in top)))))
        _say(f"counterfactual: replaying with each of the top {len(top)} contexts apart, "
             "and with all of them apart together")
        sim2 = _run_engine(args.trace, specs, kwargs, isolate=groups)
        heaps = {a["name"]: a["steady_state_bytes"] for a in sim2["allocators"]}
        for (label, _), r in zip(groups, top):
            sv["contexts"][r["context"]]["saved_rerun"] = heaps[name] - heaps[f"{name}/apart:{label}"]
        sv["totals"]["top_saved_rerun"] = heaps[name] - heaps[f"{name}/apart:top"]
        sv["totals"]["rerun_contexts"] = len(top)

    policy_desc = args.policy + (f", {specs[0].split('=', 1)[0] if args.model else specs[0]}"
                                 if specs else "")
    src = side.get("source", {})
    workload = " ".join(str(x) for x in (src.get("program"), src.get("version_label")) if x) \
        or os.path.basename(args.trace)
    result = {"format": "lifetime-fragmentation-v1", "trace": os.path.abspath(args.trace),
              "allocator": name, "policy": args.policy, "predictor": specs[0] if specs else None,
              "context_definition": definition.to_json(), "class_names": class_names,
              "start_ns": t0, "end_ns": end, "steady_state_from_ns": sim["settings"]["steady_state_from_ns"],
              "steady_samples": args.steady_samples,
              "definition": __doc__.split("**Pinned bytes (the one definition).**")[1].split("**Contexts**")[0].strip(),
              "views": []}
    texts, png_rows = [], None
    for v in views:
        rows = _rows(v["contexts"], args.top)
        title = (f"{workload}: what holds the heap under {policy_desc}, {v['label']}"
                 + (f" (mean of {len(v['times_ns'])} times in the second half)"
                    if len(v["times_ns"]) > 1 else " after the first allocation"))
        texts.append(text_table(title, rows, v["totals"], class_names,
                                rerun=bool(args.rerun) and v is sv))
        if png_rows is None:
            png_rows, png_totals = rows, v["totals"]
            png_title = title.replace(": what holds", "\nwhat holds")
        ordered = sorted(v["contexts"], key=lambda c: -v["contexts"][c]["pinned"])
        result["views"].append({"label": v["label"], "times_ns": v["times_ns"], "totals": v["totals"],
                                "contexts": [_json_context(c, v["contexts"][c], class_names)
                                             for c in ordered]})
    t = sv["totals"]
    texts[0] += (f"\ncheck: the {args.steady_samples} samples' heap - live "
                 f"{(t['heap'] - t['live']) / MIB:.2f} MiB vs the simulator's steady state "
                 f"{t['engine_steady_heap_minus_live'] / MIB:.2f} MiB "
                 f"(pinned by contexts = {100 * (t['pinned_vs_engine'] or 0):.1f}% of it)")
    text = "\n\n".join(texts)

    out = args.out
    sym = _write_text_and_json(out, result, text, side["mappings"], symbols)
    for v, fname in [(views[0], "pinned.pb.gz")] + [
            (v, f"pinned_at_{(v['times_ns'][0] - t0) / 1e9:g}s.pb.gz") for v in views[1:]]:
        per_stack = _stack_means(snaps, v["times_ns"], nclasses)
        write_pprof(os.path.join(out, fname), side, per_stack, v["totals"]["unattributed"], sym,
                    context_of, class_names, wrappers=definition.wrappers)
    write_png(os.path.join(out, "pinned.png"), png_rows, png_title, png_totals, class_names)
    print(text)
    print(f"wrote {out}/fragmentation.json, .txt, pinned.pb.gz, pinned.png "
          f"({time.monotonic() - started:.1f} s)")
    return 0


def _write_text_and_json(out: str, result: dict, text: str, mappings: list, symbols: dict):
    """fragmentation.json and .txt into out; the symbolizer the pprof writer names frames
    with (its mappings: the side file's or the dump's)."""
    write_json(os.path.join(out, "fragmentation.json"), result)
    with open(os.path.join(out, "fragmentation.txt"), "w") as f:
        f.write(text + "\n")
    return symbolize.Symbolizer([convert.MappingRecord(m) for m in mappings],
                                cache=symbolize.ModuleCache(debug_dirs=symbols["debug_dirs"],
                                                            sysroot=symbols["sysroot"] or None),
                                inline_frames=False)


def _stack_means(snaps: dict, ts: list[int], nclasses: int) -> dict:
    out: dict = {}
    for t in ts:
        for sid, s in snaps[t]["stacks"].items():
            m = out.setdefault(sid, {"pinned": 0.0, "live": 0.0, "objects": 0.0,
                                     "class_bytes": np.zeros(nclasses)})
            m["pinned"] += s["pinned"] / len(ts)
            m["live"] += s["live"] / len(ts)
            m["objects"] += s["objects"] / len(ts)
            for k, v in s["class_bytes"].items():
                m["class_bytes"][k] += v / len(ts)
    return out


# -- a running allocator's dump ----------------------------------------------------------

# Attribution dumps of a running LLAMA allocator (`lifetime run --allocator llama
# --attribute DIR`; written by allocator/src/attribution.cc, read only here), turned into
# pinned bytes per context by the functions above (`attribute`, `by_context`, the text,
# JSON, pprof and PNG outputs): `lifetime fragmentation DUMP`.
_DUMP_DOC = """
A dump holds, per (huge page the policy holds, allocation stack), the live objects the
allocator recorded there and their usable bytes; the stacks' return addresses; the
process's executable mappings (from /proc/self/maps, for the symbolizer); and the heap's
totals.  Differences from the simulated attribution, all said in the outputs:

* live bytes are the policy's usable sizes (the size asked is not kept in address mode),
  so the rounding up to a size class is live here, pinned in the simulator's;
* objects in the threads' caches are free to the program and to this attribution, but
  held by the policy: their bytes are part of heap - live, and pinned by whoever shares
  their huge pages;
* a huge page held with no recorded live object is `unattributed` (the simulator gives it
  to the stack that last allocated there, which the allocator does not keep);
* the lifetime of a live object is not known in a running process: one class, `unknown`."""

DUMP_FORMAT = "lifetime-alloc-attribution-v1"
DUMP_CLASS_NAMES = ["unknown"]
_DUMP_KEYS = ("pid", "uptime_ns", "policy", "predictor", "source", "mappings", "stacks",
              "attribution", "heap", "recording")


def is_dump(path: str) -> bool:
    """True when path starts like a JSON object (a trace starts with its magic)."""
    try:
        f, _ = open_regular(path)
    except OSError:
        return False
    with f:
        head = f.read(64).lstrip()
    return head[:1] == b"{"


def load_dump(path: str) -> dict:
    """A dump, checked; one-line errors naming the file."""
    doc = read_json_object(path, FragmentationError, "no such file")
    if doc.get("format") != DUMP_FORMAT:
        raise FragmentationError(f"{path}: not an allocator attribution dump ({DUMP_FORMAT})")
    for k in _DUMP_KEYS:
        if k not in doc:
            raise FragmentationError(f"{path}: malformed dump (no {k!r})")
    att = doc["attribution"]
    if not all(k in att for k in ("huge_pages", "live_bytes", "objects", "rows")):
        raise FragmentationError(f"{path}: malformed dump (its attribution lacks a field)")
    if any(not isinstance(r, list) or len(r) != 6 for r in att["rows"]):
        raise FragmentationError(f"{path}: malformed dump (a row is not 6 numbers)")
    ids = {int(s["id"]) for s in doc["stacks"]}
    missing = {int(r[2]) for r in att["rows"]} - ids
    if missing:
        raise FragmentationError(f"{path}: stack {min(missing)} has rows but is not among the dump's stacks")
    return doc


def dump_contexts(doc: dict, definition, *, debug_dirs=None, sysroot=None) -> dict:
    """stack id -> context frames (the dump's stacks symbolized and cut as a trace's are);
    the reserved ids (no stack recorded) -> their label as one frame."""
    plain = {**doc, "stacks": [s for s in doc["stacks"] if s["addresses"]]}
    out = symbolize_stacks(plain, definition, debug_dirs=debug_dirs, sysroot=sysroot)
    for s in doc["stacks"]:
        if not s["addresses"]:
            out[int(s["id"])] = (s.get("label") or f"<stack {s['id']}>",)
    return out


def analyze_dump(doc: dict, context_of: dict, top: int) -> tuple[dict, dict, dict]:
    """(per-stack attribution, per-context figures, totals) of one dump, by the
    simulator's definition; the totals' "allocator": the allocator's own live count
    (its objects' usable bytes less the thread caches') beside the recorded one."""
    snap = attribute(doc["attribution"])
    ctxs, tot = mean_view([snap], context_of, 1, top)
    tot["allocator"] = _allocator_figures(doc, tot["live"])
    return snap, ctxs, tot


def _allocator_figures(doc: dict, recorded_live: float) -> dict:
    heap = doc["heap"]
    policy_live = heap["policy_usable_bytes"] - heap["thread_cache_bytes"]
    return {"policy_usable_bytes": heap["policy_usable_bytes"],
            "thread_cache_bytes": heap["thread_cache_bytes"], "policy_live_bytes": policy_live,
            "recorded_vs_policy_live": recorded_live / policy_live if policy_live else None,
            "subreleased_bytes": heap["subreleased_bytes"],
            "committed_bytes": heap["committed_bytes"]}


def _dumps(path: str, pid: int | None) -> list[dict]:
    """The dumps a path names: one file, or a directory's dumps of one process (--pid
    when it holds several processes'), oldest first."""
    if not os.path.isdir(path):
        doc = load_dump(path)
        if pid is not None and doc["pid"] != pid:
            raise FragmentationError(f"--pid {pid}: {path} is process {doc['pid']}'s dump")
        return [doc]
    by_pid: dict = collections.defaultdict(list)
    for name in sorted(os.listdir(path)):
        m = re.fullmatch(r"attribution\.(\d+)\.(\d+)\.json", name)
        if m:
            by_pid[int(m.group(1))].append(os.path.join(path, name))
    if not by_pid:
        raise FragmentationError(f"{path}: no attribution.PID.N.json dumps in this directory")
    if pid is None and len(by_pid) > 1:
        raise FragmentationError(f"{path}: dumps of {len(by_pid)} processes; give --pid "
                                 f"({', '.join(map(str, sorted(by_pid)))})")
    pid = next(iter(by_pid)) if pid is None else pid
    if pid not in by_pid:
        raise FragmentationError(f"--pid {pid}: no dump of that process in {path}")
    return sorted((load_dump(f) for f in by_pid[pid]), key=lambda d: d["uptime_ns"])


def run_dump(args: argparse.Namespace) -> int:
    """`lifetime fragmentation DUMP|DIR --out OUT`: a dump at its time; a directory's dumps
    of one process: the steady state (the mean over the dumps in the second half of its
    life, as the simulator's steady state is the trace's second half) and the dump
    nearest each --at."""
    started = time.monotonic()
    for opt, flag in (("predictor", "--predictor"), ("model", "--model"), ("policy", "--policy"),
                      ("rerun", "--rerun")):
        if getattr(args, opt, None):
            raise FragmentationError(f"{flag}: {args.trace} is an allocator's dump, taken under "
                                     "the policy the process ran; the option is for a trace")
    docs = _dumps(args.trace, args.pid)
    if args.at and len(docs) == 1:
        raise FragmentationError(f"--at: {args.trace} is one dump, taken at one time; give the "
                                 "directory of the process's dumps")
    symbols = symbol_options(args)
    definition = _context_definition(args)
    _check_outputs(args.out)
    last = docs[-1]
    # A process's stack ids are its own table's: the same in every dump.
    stacks = {int(st["id"]): st for d in docs for st in d["stacks"]}
    merged = {**last, "stacks": [stacks[k] for k in sorted(stacks)]}
    _say(f"symbolizing {len(stacks):,} stacks of {len(docs)} dump(s) (context definition: "
         f"{'--train ' + args.train if args.train else 'built-in'})")
    context_of = dump_contexts(merged, definition, debug_dirs=symbols["debug_dirs"],
                               sysroot=symbols["sysroot"] or None)
    snaps = [attribute(d["attribution"]) for d in docs]

    def view(idx: list[int], label: str) -> dict:
        ctxs, tot = mean_view([snaps[i] for i in idx], context_of, 1, args.top)
        tot["allocator"] = [_allocator_figures(docs[i], snaps[i]["live"]) for i in idx]
        return {"label": label, "dumps": idx, "times_ns": [docs[i]["uptime_ns"] for i in idx],
                "contexts": ctxs, "totals": tot}

    def at_label(d: dict) -> str:
        return f"{d['uptime_ns'] / 1e9:.3g} s after start-up ({d.get('trigger', '?')})"

    if len(docs) == 1:
        views = [view([0], at_label(last))]
    else:
        half = last["uptime_ns"] / 2
        steady = [i for i, d in enumerate(docs) if d["uptime_ns"] >= half]
        views = [view(steady, f"steady state (mean of {len(steady)} dumps at "
                              f"{docs[steady[0]]['uptime_ns'] / 1e9:.3g}-{last['uptime_ns'] / 1e9:.3g} s, "
                              "the second half of the process's life so far)")]
        for t in args.at:
            i = min(range(len(docs)), key=lambda k: abs(docs[k]["uptime_ns"] - t * 1e9))
            views.append(view([i], f"the dump nearest {t:g} s: " + at_label(docs[i])))

    exe = last["source"].get("executable_path") or "?"
    head = (f"{os.path.basename(exe)} (pid {last['pid']}): what holds the heap under "
            f"{last['policy']}, {last['predictor']}")
    texts = []
    for v in views:
        v["rows"] = _rows(v["contexts"], args.top)
        t = text_table(f"{head}, {v['label']}", v["rows"], v["totals"], DUMP_CLASS_NAMES, rerun=False)
        figs = v["totals"]["allocator"]
        t += (f"\ncheck: recorded live {v['totals']['live'] / MIB:.2f} MiB vs the allocator's live "
              f"{np.mean([f['policy_live_bytes'] for f in figs]) / MIB:.2f} MiB (its objects' usable "
              f"bytes less the thread caches'); "
              f"{np.mean([f['subreleased_bytes'] for f in figs]) / MIB:.1f} MiB of the heap's free "
              "pages given back to the kernel (subreleased)")
        texts.append(t)
    rec = last["recording"]
    lost = sum(rec.get(k, 0) for k in ("early_allocs", "nested_allocs", "table_full_allocs"))
    if lost or any(d["recording"].get("stale_entries") for d in docs):
        texts[-1] += (f"\nnot recorded with a stack: {rec.get('early_allocs', 0)} allocations "
                      f"before start-up, {rec.get('nested_allocs', 0)} inside the unwinder, "
                      f"{rec.get('table_full_allocs', 0)} past the stacks' table ({rec['stacks']} "
                      f"of {rec['stacks_capacity']} stacks); "
                      f"{sum(d['recording'].get('stale_entries', 0) for d in docs)} stale table "
                      "entries skipped")
    text = "\n\n".join(texts)

    out = args.out
    result = {"format": "lifetime-fragmentation-v1", "dump": os.path.abspath(args.trace),
              "source": "allocator", "pid": last["pid"],
              "uptimes_ns": [d["uptime_ns"] for d in docs],
              "policy": last["policy"], "predictor": last["predictor"],
              "context_definition": definition.to_json(), "class_names": DUMP_CLASS_NAMES,
              "definition": _DUMP_DOC.split("Differences from the simulated attribution, all "
                                            "said in the outputs:")[1].strip(),
              "recording": rec,
              "views": [{"label": v["label"], "times_ns": v["times_ns"], "totals": v["totals"],
                         "contexts": [_json_context(c, v["contexts"][c], DUMP_CLASS_NAMES)
                                      for c in sorted(v["contexts"], key=lambda c: -v["contexts"][c]["pinned"])]}
                        for v in views]}
    sym = _write_text_and_json(out, result, text, last["mappings"], symbols)
    for k, v in enumerate(views):
        fname = "pinned.pb.gz" if k == 0 else f"pinned_at_{args.at[k - 1]:g}s.pb.gz"
        per_stack = _stack_means(snaps, v["dumps"], 1)
        write_pprof(os.path.join(out, fname), merged, per_stack, v["totals"]["unattributed"], sym,
                    context_of, DUMP_CLASS_NAMES, wrappers=definition.wrappers)
    write_png(os.path.join(out, "pinned.png"), views[0]["rows"], f"{head}\n{views[0]['label']}",
              views[0]["totals"], DUMP_CLASS_NAMES,
              footnote="Under each: its live objects (a running process: their lifetimes "
                       "are not known yet).")
    print(text)
    print(f"wrote {out}/fragmentation.json, .txt, pinned.pb.gz, pinned.png "
          f"({time.monotonic() - started:.1f} s)")
    return 0
