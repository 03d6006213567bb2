"""Attribution dumps of a running LLAMA allocator (`lifetime run --allocator llama
--attribute DIR`, allocator/src/attribution.h): the one reader of their format, and
`lifetime fragmentation DUMP`, which turns one into pinned bytes per context with the
simulator's definition (simulator/fragmentation.py: `attribute`, `by_context`, the text,
JSON, pprof and PNG outputs).

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
* the lifetime of a live object is not known in a running process: one class, `unknown`.
"""

from __future__ import annotations

import json
import os
import time

from core.errors import LifetimeError
from core.files import open_regular, write_json

FORMAT = "lifetime-alloc-attribution-v1"
CLASS_NAMES = ["unknown"]
_KEYS = ("pid", "uptime_ns", "policy", "predictor", "source", "mappings", "stacks",
         "attribution", "heap", "recording")


class DumpError(LifetimeError):
    pass


def is_dump(path: str) -> bool:
    """True when path starts like a JSON object (a trace starts with its magic)."""
    try:
        f, _ = open_regular(path)
    except OSError:
        return False
    with f:
        head = f.read(64).lstrip()
    return head[:1] == b"{"


def load(path: str) -> dict:
    """A dump, checked; one-line errors naming the file."""
    try:
        f, _ = open_regular(path)
        with f:
            doc = json.loads(f.read())
    except FileNotFoundError:
        raise DumpError(f"{path}: no such file") from None
    except OSError as e:
        raise DumpError(f"{path}: cannot read ({e.strerror})") from None
    except ValueError as e:
        raise DumpError(f"{path}: not JSON ({e}); a dump is written whole, by rename: is this one?") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise DumpError(f"{path}: not an allocator attribution dump ({FORMAT})")
    for k in _KEYS:
        if k not in doc:
            raise DumpError(f"{path}: malformed dump (no {k!r})")
    att = doc["attribution"]
    if not all(k in att for k in ("huge_pages", "live_bytes", "objects", "rows")):
        raise DumpError(f"{path}: malformed dump (its attribution lacks a field)")
    if any(not isinstance(r, list) or len(r) != 6 for r in att["rows"]):
        raise DumpError(f"{path}: malformed dump (a row is not 6 numbers)")
    ids = {int(s["id"]) for s in doc["stacks"]}
    missing = {int(r[2]) for r in att["rows"]} - ids
    if missing:
        raise DumpError(f"{path}: stack {min(missing)} has rows but is not among the dump's stacks")
    return doc


def context_of_stacks(doc: dict, definition, *, debug_dirs=None, sysroot=None) -> dict:
    """stack id -> context frames (the dump's stacks symbolized and cut as a trace's are);
    the reserved ids (no stack recorded) -> their label as one frame."""
    from simulator.tables import symbolize_stacks  # (imports the simulator's tables)
    plain = {**doc, "stacks": [s for s in doc["stacks"] if s["addresses"]]}
    out = symbolize_stacks(plain, definition, debug_dirs=debug_dirs, sysroot=sysroot)
    for s in doc["stacks"]:
        if not s["addresses"]:
            out[int(s["id"])] = (s.get("label") or f"<stack {s['id']}>",)
    return out


def analyze(doc: dict, context_of: dict, top: int) -> tuple[dict, dict, dict, list]:
    """(per-stack attribution, per-context figures, totals, the top rows) of one dump,
    by the simulator's definition (simulator/fragmentation.py)."""
    from simulator import fragmentation as fr

    snap = fr.attribute(doc["attribution"])
    ctxs = fr.by_context(snap, context_of, 1)
    tot = {k: snap[k] for k in ("heap", "live", "unattributed", "empty_pages")}
    tot["pinned"] = sum(d["pinned"] for d in ctxs.values())
    gap = tot["heap"] - tot["live"]
    tot["check"] = {"pinned_plus_unattributed": tot["pinned"] + tot["unattributed"],
                    "heap_minus_live": gap,
                    "pinned_share_of_heap_minus_live": tot["pinned"] / gap if gap else None}
    rows = fr._rows(ctxs, top)
    tot["top_saved_static"] = fr.group_saved_static(snap, context_of, {r["context"] for r in rows})
    heap = doc["heap"]
    policy_live = heap["policy_usable_bytes"] - heap["thread_cache_bytes"]
    tot["allocator"] = {"policy_usable_bytes": heap["policy_usable_bytes"],
                        "thread_cache_bytes": heap["thread_cache_bytes"],
                        "recorded_vs_policy_live": tot["live"] / policy_live if policy_live else None,
                        "subreleased_bytes": heap["subreleased_bytes"],
                        "committed_bytes": heap["committed_bytes"]}
    return snap, ctxs, tot, rows


def run(args, say) -> int:
    """`lifetime fragmentation DUMP --out DIR`: one view, at the dump's time."""
    from core import symbolize
    from core.symbol_options import symbol_options
    from simulator import convert
    from simulator import fragmentation as fr

    started = time.monotonic()
    for opt, flag in (("predictor", "--predictor"), ("model", "--model"), ("policy", "--policy"),
                      ("at", "--at"), ("rerun", "--rerun")):
        if getattr(args, opt, None):
            raise DumpError(f"{flag}: {args.trace} is an allocator's dump, taken at one time "
                            "under the policy the process ran; the option is for a trace")
    doc = load(args.trace)
    symbols = symbol_options(args)
    definition = fr._context_definition(args)
    fr._check_outputs(args.out)
    say(f"symbolizing {len(doc['stacks']):,} stacks (context definition: "
        f"{'--train ' + args.train if args.train else 'built-in'})")
    context_of = context_of_stacks(doc, definition, debug_dirs=symbols["debug_dirs"],
                                   sysroot=symbols["sysroot"] or None)
    snap, ctxs, tot, rows = analyze(doc, context_of, args.top)
    heap = doc["heap"]
    policy_live = heap["policy_usable_bytes"] - heap["thread_cache_bytes"]

    exe = doc["source"].get("executable_path") or "?"
    when = f"{doc['uptime_ns'] / 1e9:.3g} s after start-up ({doc.get('trigger', '?')})"
    title = (f"{os.path.basename(exe)} (pid {doc['pid']}): what holds the heap under "
             f"{doc['policy']}, {doc['predictor']}, {when}")
    text = fr.text_table(title, rows, tot, CLASS_NAMES, rerun=False)
    mib = fr.MIB
    text += (f"\ncheck: recorded live {tot['live'] / mib:.2f} MiB vs the allocator's live "
             f"{policy_live / mib:.2f} MiB (its objects' usable bytes "
             f"{heap['policy_usable_bytes'] / mib:.2f} less the thread caches' "
             f"{heap['thread_cache_bytes'] / mib:.2f}); "
             f"{heap['subreleased_bytes'] / mib:.1f} MiB of the heap's free pages given back "
             "to the kernel (subreleased)")
    rec = doc["recording"]
    lost = sum(rec.get(k, 0) for k in ("early_allocs", "nested_allocs", "table_full_allocs"))
    if lost or rec.get("stale_entries"):
        text += (f"\nnot recorded with a stack: {rec.get('early_allocs', 0)} allocations before "
                 f"start-up, {rec.get('nested_allocs', 0)} inside the unwinder, "
                 f"{rec.get('table_full_allocs', 0)} past the stacks' table "
                 f"({rec['stacks']} of {rec['stacks_capacity']} stacks); "
                 f"{rec.get('stale_entries', 0)} stale table entries skipped")

    out = args.out
    ordered = sorted(ctxs, key=lambda c: -ctxs[c]["pinned"])
    result = {"format": "lifetime-fragmentation-v1", "dump": os.path.abspath(args.trace),
              "source": "allocator", "pid": doc["pid"], "uptime_ns": doc["uptime_ns"],
              "policy": doc["policy"], "predictor": doc["predictor"],
              "context_definition": definition.to_json(), "class_names": CLASS_NAMES,
              "definition": __doc__.split("Differences from the simulated attribution, all "
                                          "said in the outputs:")[1].strip(),
              "recording": rec,
              "views": [{"label": when, "totals": tot,
                         "contexts": [fr._json_context(c, ctxs[c], CLASS_NAMES) for c in ordered]}]}
    write_json(os.path.join(out, "fragmentation.json"), result)
    with open(os.path.join(out, "fragmentation.txt"), "w") as f:
        f.write(text + "\n")
    sym = symbolize.Symbolizer([convert.MappingRecord(m) for m in doc["mappings"]],
                               cache=symbolize.ModuleCache(debug_dirs=symbols["debug_dirs"],
                                                           sysroot=symbols["sysroot"] or None),
                               inline_frames=False)
    per_stack = {sid: {"pinned": s["pinned"], "live": s["live"], "objects": s["objects"],
                       "class_bytes": [sum(s["class_bytes"].values())]}
                 for sid, s in snap["stacks"].items()}
    fr.write_pprof(os.path.join(out, "pinned.pb.gz"), doc, per_stack, tot["unattributed"], sym,
                   context_of, CLASS_NAMES, wrappers=definition.wrappers)
    fr.write_png(os.path.join(out, "pinned.png"), rows,
                 title.replace(": what holds", "\nwhat holds"), tot, CLASS_NAMES,
                 footnote="Under each: its live objects (a running process: their lifetimes "
                          "are not known yet).")
    print(text)
    print(f"wrote {out}/fragmentation.json, .txt, pinned.pb.gz, pinned.png "
          f"({time.monotonic() - started:.1f} s)")
    return 0
