"""The `lifetime simulate` report: report.md, report.html, report.json and PNG plots.

Per workload (one trace), a Table-3 row for every LLAMA variant (llama-paper Table 3):
prediction accuracy weighted by allocations and by bytes (and per context, the
paper's "unweighted"), steady-state memory of the baseline and of LLAMA, live bytes,
and the fragmentation reduction 1 - (LLAMA - live) / (baseline - live); then peak and
final memory, the page counters (pages reclassified down, deadlines hit, class
increases, recycled blocks), each table's coverage of the trace, and the Figure-8
plot: huge-page-backed memory over time for every allocator, with live bytes.

Beside the per-object oracle, two context oracles computed from the trace itself
(simulator/tables.py): each context's T95 class, and the cost rule's class from its
per-class bytes; the report states how far the context oracles are from the per-object
oracle, and the model from the context oracles and ahead of TCMalloc's removed online
lifetime rule (points of fragmentation reduction).
"""

from __future__ import annotations

import json
import os
import re

import numpy as np

from core.errors import printable
from core.plots import pyplot, save_png
from model.html_page import markdown_page
from simulator.features import FEATURES as _FEATURES

MB = 1 << 20
FORMAT = "lifetime-simulate-report-v1"

#: LLAMA variants in report order: engine label -> (short name, what it is).
VARIANTS = {
    "oracle": ("oracle", "each object's own class from its recorded lifetime (upper bound)"),
    "context_t95": ("context oracle (T95)",
                    "each context's T95 class of its objects in this trace, by the dataset's "
                    "label rule: the best any per-context T95 predictor can do"),
    "context_cost": ("context oracle (cost rule)",
                     "the class core.lifetimes.cost_rule picks from each context's bytes per "
                     "class in this trace: a perfect per-context distribution under the cost rule"),
    **{f"context_{f}_{rule}": (f"context+{f} oracle, {'T95' if rule == 't95' else 'cost rule'}",
                               f"the context oracle ({rule}) keyed by the context and one more "
                               f"feature, {what} (simulator/features.py)")
       for f, what in _FEATURES.items() for rule in ("t95", "cost")},
    "exact": ("exact-context table", "exact-context lookup table fit on the training dataset"),
    "site": ("site table", "allocation-site (first frame) lookup table fit on the training dataset"),
    "one_class": ("one class", "the training set's majority class for every object"),
    "tcmalloc_rule": ("TCMalloc rule (> 1 MiB)",
                      "TCMalloc's removed online lifetime rule (simulator/src/tcmalloc_rule.h): "
                      "per stack, short if more objects died within 0.5 s than lived longer, "
                      "by more than 10; objects over 1 MiB only, the rest get the training "
                      "majority class"),
    "tcmalloc_rule_all": ("TCMalloc rule (all sizes)",
                          "the same online rule applied to objects of every size"),
    "model": ("model", "the exported model through its C API and its §2.3 prediction cache"),
}


def _pct(x, digits: int = 1) -> str:
    return "n/a" if x is None else f"{100 * x:.{digits}f}%"


def _mb(x) -> str:
    return "n/a" if x is None else f"{x / MB:.1f}"


def _reduction(llama: float, base: float, live: float) -> float | None:
    """Table 3's fragmentation reduction: 1 - (LLAMA - live) / (baseline - live)."""
    if base - live <= 0:
        return None
    return 1.0 - (llama - live) / (base - live)


def build_report(sim: dict, side: dict, tables, *, workload: str, simulation_json: str,
                 settings: dict) -> dict:
    """The report's JSON (everything the Markdown says, and more)."""
    live = sim["live"]
    allocs = {a["name"]: a for a in sim["allocators"]}
    base = allocs.get("baseline")
    source = side["source"]
    counts = side["counts"]
    sampled = bool(source.get("sampled"))
    warning = None
    if sampled:
        cov = source.get("coverage")
        warning = (f"The profile was Poisson-sampled (one sample per "
                   f"{source['sampling_interval_bytes']:,} bytes on average"
                   + (f"; {_pct(cov)} of its {source['total_allocations']:,} allocations were "
                      "recorded" if cov is not None else "")
                   + "): the trace holds the sampled objects only, so the simulated heap is "
                   "a thinned one and underestimates the real heap. Nothing is scaled up. "
                   "Profile with a full trace for the real heap.")
    rows, pages, variants = [], {}, {}
    for name, a in allocs.items():
        if a["kind"] != "llama":
            continue
        label = name.split(":", 1)[1]
        short, what = VARIANTS.get(label, (label, ""))
        p = a["predictor"] or {}
        per_ctx = (tables.per_context.get(label) if tables is not None else None) or {}
        row = {
            "workload": workload, "allocator": name, "predictor": short,
            "accuracy_by_allocations": p.get("accuracy"),
            "accuracy_by_bytes": p.get("accuracy_by_bytes"),
            "accuracy_per_context": per_ctx.get("accuracy"),
            "accuracy_per_context_weighted": per_ctx.get("accuracy_weighted"),
            "under_predicted_share": (p["under_predicted"] / p["objects"]) if p.get("objects") else None,
            "baseline_steady_state_bytes": base["steady_state_bytes"] if base else None,
            "llama_steady_state_bytes": a["steady_state_bytes"],
            "live_steady_state_bytes": live["steady_state_bytes"],
            "fragmentation_reduction": (_reduction(a["steady_state_bytes"], base["steady_state_bytes"],
                                                   live["steady_state_bytes"]) if base else None),
            "engine_fragmentation_reduction": a.get("fragmentation_reduction_vs_baseline"),
            # Resident: huge pages less the free pages given back inside them (subrelease).
            "baseline_steady_resident_bytes": base.get("steady_state_resident_bytes") if base else None,
            "llama_steady_resident_bytes": a.get("steady_state_resident_bytes"),
            "resident_fragmentation_reduction": (
                _reduction(a["steady_state_resident_bytes"], base["steady_state_resident_bytes"],
                           live["steady_state_bytes"])
                if base and "steady_state_resident_bytes" in a and "steady_state_resident_bytes" in base
                else None),
            "baseline_peak_bytes": base["peak_bytes"] if base else None,
            "llama_peak_bytes": a["peak_bytes"], "live_peak_bytes": live["peak_bytes"],
            "peak_fragmentation_reduction": (_reduction(a["peak_bytes"], base["peak_bytes"],
                                                        live["peak_bytes"]) if base else None),
            "baseline_final_bytes": base["final_bytes"] if base else None,
            "llama_final_bytes": a["final_bytes"], "live_final_bytes": live["final_bytes"],
        }
        rows.append(row)
        c = a["counters"]
        pages[name] = {k: c.get(k) for k in (
            "huge_pages_acquired", "huge_pages_released", "open_to_active", "reclassifications_down",
            "deadline_expiries", "class_increases", "recycled_block_allocs", "recycled_blocks",
            "recycled_span_reuses", "small_allocs", "large_allocs", "multi_huge_page_allocs")}
        variants[name] = {"label": label, "name": short, "what": what,
                          "predictor": p, "per_context": per_ctx or None}
    rep = {
        "format": FORMAT, "workload": workload, "source": source,
        "trace": {"file": sim["trace"]["file"], "records": sim["trace"]["records"],
                  "start_ns": sim["trace"]["start_ns"], "end_ns": sim["trace"]["end_ns"],
                  "seconds": (sim["trace"]["end_ns"] - sim["trace"]["start_ns"]) / 1e9,
                  "classes": sim["trace"]["classes"], "stacks": counts.get("stacks"),
                  "censored": counts.get("censored"), "conversion": counts},
        "sampled": sampled, "sampled_warning": warning,
        "events": sim["events"], "live": live, "settings": {**sim["settings"], **settings},
        "table3": rows, "variants": variants, "pages": pages,
        "baseline": ({k: base.get(k) for k in ("steady_state_bytes", "steady_state_resident_bytes",
                                           "peak_bytes", "final_bytes",
                                           "steady_state_huge_pages", "peak_huge_pages",
                                           "counters")} if base else None),
        "simulation_json": os.path.basename(simulation_json),
    }
    for name, a in allocs.items():
        p = a.get("predictor") or {}
        if p.get("kind") == "model":
            rep["model"] = {"allocator": name, **{k: p.get(k) for k in (
                "model_id", "plugin", "contexts_file", "context_version", "max_frames", "stacks",
                "distinct_contexts", "cache_key", "cache", "model_runs", "timing_ns")},
                **(settings.get("model") or {})}
            break
    if tables is not None:
        rep["training"] = tables.training
        rep["table_default"] = {"class": tables.majority,
                                "name": tables.class_names[tables.majority],
                                "rule": "a context missing from a table gets the training "
                                        "set's majority class (model/baselines.py)"}
        rep["coverage"] = tables.coverage
        if getattr(tables, "context_oracle", None):
            rep["context_oracle"] = {k: v for k, v in tables.context_oracle.items() if k != "files"}
    rep["gaps"] = _gaps(rows)
    return rep


def _gaps(rows: list) -> dict:
    """Points of steady-state fragmentation reduction between the oracles and the model:
    how much per-object knowledge buys over per-context (oracle - context oracle), and how
    far the model is from what a per-context prediction could give (context oracle - model)."""
    red = {r["allocator"].split(":", 1)[1]: r["fragmentation_reduction"] for r in rows}
    out = {}
    for a, b in (("oracle", "context_t95"), ("oracle", "context_cost"),
                 ("context_t95", "model"), ("context_cost", "model"), ("oracle", "model"),
                 ("model", "tcmalloc_rule"), ("model", "tcmalloc_rule_all")):
        if red.get(a) is not None and red.get(b) is not None:
            out[f"{a}_minus_{b}"] = red[a] - red[b]
    return out


def figure8_png(sim: dict, path: str, title: str) -> str:
    """Huge-page-backed memory over time per allocator, and live bytes (Figure 8)."""
    plt = pyplot()
    s = sim["series"]
    t0 = sim["trace"]["start_ns"]
    t = [(x - t0) / 1e9 for x in s["t_ns"]]
    fig, ax = plt.subplots(figsize=(8, 4.2))
    for name, ys in s["huge_page_bytes"].items():
        label = name if name == "baseline" else name.replace("llama:", "LLAMA ")
        ax.step(t, [y / MB for y in ys], where="post", label=label,
                linewidth=2 if name == "baseline" else 1.3)
    ax.step(t, [y / MB for y in s["live_bytes"]], where="post", label="live", color="black",
            linestyle="--", linewidth=1.2)
    steady = (sim["settings"]["steady_state_from_ns"] - t0) / 1e9
    ax.axvline(steady, color="grey", linewidth=0.8, linestyle=":")
    ax.text(steady, ax.get_ylim()[1] * 0.98, " steady state", va="top", fontsize=8, color="grey")
    ax.set_xlabel("time since the first allocation (s)")
    ax.set_ylabel("huge-page-backed memory (MiB)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="best")
    ax.grid(alpha=0.3)
    return save_png(fig, path)


def memory_bars_png(rep: dict, path: str) -> str:
    """Steady-state and peak memory per allocator, with live, as bars."""
    plt = pyplot()
    names, steady, peak = [], [], []
    if rep["baseline"]:
        names.append("baseline")
        steady.append(rep["baseline"]["steady_state_bytes"] / MB)
        peak.append(rep["baseline"]["peak_bytes"] / MB)
    for r in rep["table3"]:
        names.append("LLAMA " + r["predictor"])
        steady.append(r["llama_steady_state_bytes"] / MB)
        peak.append(r["llama_peak_bytes"] / MB)
    names.append("live")
    steady.append(rep["live"]["steady_state_bytes"] / MB)
    peak.append(rep["live"]["peak_bytes"] / MB)
    x = np.arange(len(names))
    fig, ax = plt.subplots(figsize=(8, 3.8))
    ax.bar(x - 0.2, steady, 0.4, label="steady state")
    ax.bar(x + 0.2, peak, 0.4, label="peak")
    ax.set_xticks(x, names, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("MiB")
    ax.set_title(f"{rep['workload']}: memory per allocator", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return save_png(fig, path)


def markdown_report(rep: dict, figs: dict) -> str:
    src, tr = rep["source"], rep["trace"]
    L = [f"# Heap simulation: {_md(rep['workload'])}", ""]
    if rep["sampled_warning"]:
        L += [f"**Sampled trace.** {rep['sampled_warning']}", ""]
    L += [f"Trace {_md(os.path.basename(tr['file']))} from profile {_md(src['profile'])} "
          f"(program {_md(src['program'])}, version label {_md(src['version_label'] or '-')}): "
          f"{tr['records']:,} objects ({tr['censored']:,} never freed), {tr['stacks']:,} stacks, "
          f"{tr['seconds']:.2f} s; "
          + ("full trace" if src.get("full_trace") else
             f"sampling interval {src['sampling_interval_bytes']:,} bytes")
          + (f", {_pct(src['coverage'])} of the process's allocations recorded"
             if src.get("coverage") is not None else "") + ".", ""]
    if "training" in rep:
        t = rep["training"]
        L += [f"Tables fit on {_md(t['dataset'])} ({t['contexts']:,} contexts, {t['samples']:,.0f} "
              f"samples, {t['splits']}; programs: {_md(', '.join(t['programs']))}); "
              f"{t['exact_keys']:,} exact contexts, {t['site_keys']:,} sites. A context missing "
              f"from a table gets the training majority class, `{rep['table_default']['name']}` "
              f"(class {rep['table_default']['class']}), which is also the one-class predictor.", ""]
    L += ["## Table 3 (llama-paper): accuracy and steady-state memory", "",
          "Accuracy against each object's true class (its recorded lifetime; never freed = inf), "
          "weighted by allocations and by bytes; per context (the paper's accuracy): the trace's "
          "contexts whose predicted class is the T95 class of their objects in the trace, "
          "weighted by their allocations / unweighted. Memory: "
          "huge-page-backed memory (live huge pages x 2 MiB), time-weighted mean over the "
          "second half of the trace. Fragmentation reduction = 1 - (LLAMA - live) / "
          "(baseline - live); negative: LLAMA holds more memory than the baseline. "
          "Resident: the same less the free pages the size-class heaps gave back inside "
          "live huge pages (subrelease; LLAMA's own heap gives back whole huge pages only), "
          "and its fragmentation reduction.", "",
          "| workload | predictor | accuracy (allocations) | accuracy (bytes) "
          "| accuracy per context (weighted / unweighted) "
          "| baseline MiB | LLAMA MiB | live MiB | fragmentation reduction "
          "| resident MiB (baseline / LLAMA) | resident reduction |",
          "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rep["table3"]:
        L.append(f"| {_md(rep['workload'])} | {r['predictor']} | {_pct(r['accuracy_by_allocations'])} | "
                 f"{_pct(r['accuracy_by_bytes'])} | {_pct(r['accuracy_per_context_weighted'])} / "
                 f"{_pct(r['accuracy_per_context'])} | "
                 f"{_mb(r['baseline_steady_state_bytes'])} | {_mb(r['llama_steady_state_bytes'])} | "
                 f"{_mb(r['live_steady_state_bytes'])} | {_pct(r['fragmentation_reduction'])} | "
                 f"{_mb(r.get('baseline_steady_resident_bytes'))} / {_mb(r.get('llama_steady_resident_bytes'))} | "
                 f"{_pct(r.get('resident_fragmentation_reduction'))} |")
    co = rep.get("context_oracle")
    if co:
        cost = co["cost"]
        L += ["", f"Context oracles, computed from this trace over its {co['contexts']:,} contexts "
              "(the training dataset's context definition): **T95** gives each context the T95 "
              "class of its objects here (the dataset's label rule: Kaplan-Meier, objects live "
              "at the end censored at their age then); the **cost rule** "
              "(`core.lifetimes.cost_rule`, simulator/README.md) gives it the class of least "
              f"expected held byte-seconds from its bytes per class here (deadline factor "
              f"{cost['deadline_k']:g}, horizon {cost['horizon_ms'] / 1000:g} s, "
              f"under-prediction weight {cost['under_weight']:g}). The two agree on "
              f"{co['cost_rule_equals_t95']:,} contexts."]
    rules = [v for v in rep["variants"].values()
             if (v.get("predictor") or {}).get("kind") == "tcmalloc_rule"]
    if rules:
        names = rep["trace"]["classes"]
        p0 = rules[0]["predictor"]
        L += ["", "TCMalloc's removed lifetime rule (google/tcmalloc's lifetime-based allocator, "
              "simulator/src/tcmalloc_rule.h) is online and learns from this trace alone: per "
              "allocation stack it counts objects freed within "
              f"{p0['threshold_ns'] / 1e9:g} s (short) and those that lived longer (long, "
              f"counted once past that age), and predicts short (`{names[p0['short_class']]}`) "
              f"only when short > long + {p0['margin']}, else long (`{names[p0['long_class']]}`), "
              f"in a database of at most {p0['database_size']:,} stacks. "
              + " ".join(
                  f"{v['name']}: {v['predictor']['eligible_objects']:,} objects covered"
                  + (f" (the rest get `{names[v['predictor']['fallback_class']]}`)"
                     if v["predictor"]["sizes"] == "large" else "")
                  + f", {v['predictor']['predicted_short']:,} predicted short, "
                  f"{v['predictor']['database_evictions']:,} database evictions."
                  for v in rules)]
    gaps = rep.get("gaps") or {}
    if gaps:
        say = {"oracle_minus_context_t95": "oracle − context oracle (T95)",
               "oracle_minus_context_cost": "oracle − context oracle (cost rule)",
               "context_t95_minus_model": "context oracle (T95) − model",
               "context_cost_minus_model": "context oracle (cost rule) − model",
               "oracle_minus_model": "oracle − model",
               "model_minus_tcmalloc_rule": "model − TCMalloc rule (> 1 MiB)",
               "model_minus_tcmalloc_rule_all": "model − TCMalloc rule (all sizes)"}
        L += ["", "Gaps in steady-state fragmentation reduction (points): "
              + "; ".join(f"{say[k]} {100 * v:+.1f}" for k, v in gaps.items()) + "."]
    L += ["", "## Peak and final memory", "",
          "| allocator | peak MiB | final MiB | peak fragmentation reduction | under-predicted objects |",
          "|---|---|---|---|---|"]
    if rep["baseline"]:
        L.append(f"| baseline (TCMalloc-like, optimistic) | {_mb(rep['baseline']['peak_bytes'])} | "
                 f"{_mb(rep['table3'][0]['baseline_final_bytes'] if rep['table3'] else None)} | | |")
    for r in rep["table3"]:
        L.append(f"| LLAMA {r['predictor']} | {_mb(r['llama_peak_bytes'])} | {_mb(r['llama_final_bytes'])} | "
                 f"{_pct(r['peak_fragmentation_reduction'])} | {_pct(r['under_predicted_share'])} |")
    L.append(f"| live | {_mb(rep['live']['peak_bytes'])} | {_mb(rep['live']['final_bytes'])} | | |")
    L += ["", f"![memory over time (Figure 8)]({figs['figure8']})", "",
          f"![memory per allocator]({figs['bars']})", "",
          "## LLAMA pages", "",
          "Pages reclassified down (§3.3: last residual block freed), deadlines hit (§3.4) and "
          "the class increases they caused, blocks recycled from longer-class pages.", "",
          "| allocator | huge pages acquired | reclassified down | deadlines hit | class increases "
          "| recycled block allocations | recycled span reuses | small / large objects |",
          "|---|---|---|---|---|---|---|---|"]
    for name, c in rep["pages"].items():
        # a policy made only of size-class heaps (size-classes:inf) has no LLAMA page counters
        n = lambda k: "n/a" if c.get(k) is None else f"{c[k]:,}"  # noqa: E731
        L.append(f"| {name} | {n('huge_pages_acquired')} | {n('reclassifications_down')} | "
                 f"{n('deadline_expiries')} | {n('class_increases')} | {n('recycled_block_allocs')} | "
                 f"{n('recycled_span_reuses')} | {n('small_allocs')} / {n('large_allocs')} |")
    if rep.get("coverage"):
        L += ["", "## Table coverage of the trace", "",
              "Stacks, objects and bytes of the trace whose context is in the table "
              "(the rest get the fallback class).", "",
              "| table | stacks | objects | bytes |", "|---|---|---|---|"]
        for name, c in rep["coverage"].items():
            frac = lambda a, b: _pct(a / b if b else None)  # noqa: E731
            L.append(f"| {VARIANTS.get(name, (name,))[0]} | {c['stacks']:,} / {c['stacks_total']:,} | "
                     f"{frac(c['objects'], c['objects_total'])} | {frac(c['bytes'], c['bytes_total'])} |")
    if rep.get("model"):
        m, c = rep["model"], rep["model"]["cache"]
        t = m["timing_ns"]
        L += ["", "## Model predictor", "",
              f"Exported model {_md(m.get('export_dir', ''))} (id `{(m['model_id'] or '')[:16]}`, "
              f"graph {_md(m.get('graph') or '?')}), loaded by the engine from its plugin "
              f"{_md(m['plugin'])} and called through the C API (`lifetime_cache_predict`). "
              f"Each of the trace's {m['stacks']:,} stacks ({m['distinct_contexts']:,} distinct "
              f"contexts) was symbolized offline with the model's own context definition "
              f"({_md(m['context_version'])}, {m['max_frames']} frames): "
              f"{_md(os.path.basename(m['contexts_file']))}.", "",
              f"Cache key: {_md(m['cache_key'])}; {c['entries']:,} entries, direct-mapped; the "
              f"model reruns every {c['revalidate_every']:,} hits of an entry (0: never).", "",
              "| lookups | hits | misses | hit rate | revalidations | disagreements | evictions | model runs |",
              "|---|---|---|---|---|---|---|---|",
              f"| {c['lookups']:,} | {c['hits']:,} | {c['misses']:,} | {_pct(c['hit_rate'], 2)} | "
              f"{c['revalidations']:,} | {c['disagreements']:,} | {c['evictions']:,} | {m['model_runs']:,} |",
              "", "Time per prediction (wall clock of `lifetime_cache_predict` in the engine, ns; "
              "not part of the deterministic report):", "",
              "| call | calls | mean | p50 | p99 | total s |", "|---|---|---|---|---|---|"]
        for k, what in (("cache_hit", "cache hit (no model run)"),
                        ("model_call", "model call (miss or revalidation)")):
            x = t[k]
            L.append(f"| {what} | {x['calls']:,} | {x['mean']:.0f} | {x['p50']:.0f} | "
                     f"{x['p99']:.0f} | {x['total_s']:.3f} |")
    L += ["", "## Predicted classes", "", "| predictor | " + " | ".join(rep["trace"]["classes"]) + " |",
          "|---|" + "---|" * len(rep["trace"]["classes"])]
    for name, v in rep["variants"].items():
        per = v["predictor"].get("predicted_per_class") or []
        L.append(f"| {v['name']} | " + " | ".join(f"{x:,}" for x in per) + " |")
    s = rep["settings"]
    L += ["", "## Settings", "",
          f"- engine: `{s.get('engine', 'lifetime_simulate')}`; predictors: "
          + ", ".join(f"`{p}`" for p in s.get("predictor_specs", [])),
          f"- LLAMA deadline = now + {s['deadline_k']} x class bound; huge page "
          f"{s['huge_page_bytes'] // 1024} KiB, block {s['llama_block_bytes'] // 1024} KiB, "
          f"line {s['llama_line_bytes']} B; baseline page {s['baseline_page_bytes'] // 1024} KiB",
          f"- series interval {s['series_interval_ns'] / 1e6:.3f} ms; steady state: {s['steady_state']}",
          f"- invariant checks: {'on' if s.get('check_invariants') else 'off'}",
          f"- the engine's full report: {_md(rep['simulation_json'])}",
          "- simplifications: simulator/README.md (no metadata or model memory counted, "
          "the baseline is TCMalloc's optimistic form: free spans and huge pages go back at once)"]
    problems = rep["trace"]["conversion"].get("problems") or []
    skipped = rep["trace"]["conversion"].get("skipped") or {}
    if problems or skipped:
        L += ["", "## Problems in the profile", ""]
        L += [f"- {_md(p)}" for p in problems[:20]]
        L += [f"- {k}: {v:,} samples" for k, v in skipped.items()]
    return "\n".join(L) + "\n"


def write_report(sim: dict, side: dict, tables, out_dir: str, *, workload: str,
                 simulation_json: str, settings: dict) -> dict:
    """Writes report.json, report.md, report.html and the PNGs into out_dir."""
    rep = build_report(sim, side, tables, workload=workload, simulation_json=simulation_json,
                       settings=settings)
    figs = {"figure8": os.path.basename(figure8_png(
                sim, os.path.join(out_dir, "memory_over_time.png"),
                f"{workload}: huge-page memory over time"
                + (" (sampled objects only)" if rep["sampled"] else ""))),
            "bars": os.path.basename(memory_bars_png(rep, os.path.join(out_dir, "memory_bars.png")))}
    rep["figures"] = figs
    md = markdown_report(rep, figs)
    with open(os.path.join(out_dir, "report.md"), "w", encoding="utf-8") as f:
        f.write(md)
    with open(os.path.join(out_dir, "report.html"), "w", encoding="utf-8") as f:
        f.write(markdown_page(md, f"Heap simulation: {workload}"))
    with open(os.path.join(out_dir, "report.json"), "w", encoding="utf-8") as f:
        json.dump(rep, f, indent=2, sort_keys=True)
        f.write("\n")
    return rep


def _md(s) -> str:
    """Text from a profile or a path, safe in Markdown and in the HTML made from it:
    control characters escaped (core.errors.printable), HTML's <, >, & as entities,
    Markdown's punctuation backslash-escaped."""
    s = printable(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return re.sub(r"([\\`*_\[\]|#!])", r"\\\1", s)
