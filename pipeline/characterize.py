"""`lifetime characterize`: a Markdown report with PNG plots per workload.

After TCMalloc's warehouse-scale characterization (Zhou et al.): the object-size
distribution, the lifetime CDF, bytes by lifetime class, and the top contexts by
sampled bytes and by count.  Reading, symbolizing and aggregating per context are
the dataset job's transforms; a per-workload CombineFn then reduces the contexts
to histograms, so only small summaries reach the driver (workloads.json).
"""

from __future__ import annotations

import collections
import json
import math
import os

import apache_beam as beam

from core.files import read_json, read_text, write_json
from core.plots import pyplot, save_png
from pipeline import sources
from pipeline.context_stats import MergeContextStats
from pipeline.dataset import (DEAD_LETTER, DEAD_LETTERS, DatasetConfig, ReadProfiles,
                              SortedDeadLetters, ToContexts, match_inputs,
                              no_usable_samples, refuse_irregular_outputs, write_lines)
from pipeline.runner import make_pipeline

TOP = 10
BINS_PER_DECADE = 10


class WorkloadSummary(beam.CombineFn):
    """Contexts of one workload -> size and lifetime histograms, class totals, top contexts."""

    def __init__(self, config: DatasetConfig):
        self._labels = config.labels

    def create_accumulator(self):
        return {"objects_by_size": collections.Counter(), "bytes_by_size": collections.Counter(),
                "freed_by_lifetime": collections.Counter(), "censored_by_age": collections.Counter(),
                "bytes_by_class": [0.0] * self._labels.num_classes,
                "objects_by_class": [0.0] * self._labels.num_classes, "contexts": []}

    def add_input(self, acc, context):
        frames, stats = context
        label = self._labels.label(stats.t95())
        for lifetime, censored, weight, size in stats.observations:
            size_bin = int(math.log2(size)) if size > 0 else -1
            acc["objects_by_size"][size_bin] += weight
            acc["bytes_by_size"][size_bin] += weight * size
            life_bin = math.floor(math.log10(max(lifetime, 1e-3)) * BINS_PER_DECADE)
            acc["censored_by_age" if censored else "freed_by_lifetime"][life_bin] += weight
            acc["bytes_by_class"][label] += weight * size
            acc["objects_by_class"][label] += weight
        acc["contexts"].append({"frames": list(frames[:3]), "label": label,
                                "samples": stats.samples, "sampled_bytes": stats.sampled_bytes})
        return acc

    def merge_accumulators(self, accs):
        accs = list(accs)
        out = accs[0]
        for acc in accs[1:]:
            for key in ("objects_by_size", "bytes_by_size", "freed_by_lifetime", "censored_by_age"):
                out[key].update(acc[key])
            for key in ("bytes_by_class", "objects_by_class"):
                out[key] = [a + b for a, b in zip(out[key], acc[key])]
            out["contexts"].extend(acc["contexts"])
        return out

    def extract_output(self, acc):
        ctx = acc.pop("contexts")
        key = lambda field: lambda c: (-c[field], c["frames"])  # noqa: E731
        out = {k: sorted(v.items()) if isinstance(v, collections.Counter) else v
               for k, v in acc.items()}
        out["contexts"] = len(ctx)
        out["samples"] = sum(c["samples"] for c in ctx)
        out["top_by_bytes"] = sorted(ctx, key=key("sampled_bytes"))[:TOP]
        out["top_by_count"] = sorted(ctx, key=key("samples"))[:TOP]
        return out


def summarize_workloads(inputs, config: DatasetConfig, out_dir: str, beam_args=None,
                        profile_format: str = sources.AUTO) -> dict:
    profile_format = sources.check_format(profile_format)
    files = match_inputs(inputs, profile_format)
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "workloads.json")
    refuse_irregular_outputs(out_dir, ("workloads.json", DEAD_LETTERS, "report.md"))
    with make_pipeline(beam_args) as p:
        read = (p | "Files" >> beam.Create(files)
                | "Read" >> ReadProfiles(config, profile_format))
        contexts, _, _ = read.contexts | "Contexts" >> ToContexts(config)
        _ = (contexts
             | "Merge" >> beam.CombinePerKey(MergeContextStats())
             | "ByWorkload" >> beam.Map(
                 lambda kv: (f"{kv[0][0]} {kv[0][1]}".strip(), (kv[0][2], kv[1])))
             | "Summarize" >> beam.CombinePerKey(WorkloadSummary(config))
             | "All" >> beam.combiners.ToList()
             | "Write" >> beam.Map(lambda rows: write_json(path, dict(sorted(rows)))))
        _ = (read[DEAD_LETTER]
             | "DeadLetters" >> SortedDeadLetters()
             | "WriteDead" >> beam.Map(
                 lambda lines: write_lines(os.path.join(out_dir, DEAD_LETTERS), lines)))
    workloads = read_json(path)
    if not workloads:  # like build-dataset: nothing usable is an error, not an empty report
        dead = dead_letters(out_dir)
        raise no_usable_samples(len(files), len(dead), len({d["file"] for d in dead}),
                                os.path.join(out_dir, DEAD_LETTERS))
    return workloads


def dead_letters(out_dir: str) -> list[dict]:
    """The problems the read step found (bad files, dropped records)."""
    text = read_text(os.path.join(out_dir, DEAD_LETTERS))
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def write_report(workloads: dict, config: DatasetConfig, out_dir: str) -> str:
    """Draws the plots and writes report.md; returns its path."""
    plt = pyplot()

    names = config.labels.class_names
    lines = ["# Allocation characterization", "",
             f"Lifetime classes ({config.labels.unit}, T95 < bound): {', '.join(names)}.", ""]
    for i, (workload, w) in enumerate(workloads.items()):
        slug = f"w{i}"
        fig, axes = plt.subplots(1, 3, figsize=(16, 4.2))
        sizes = [(2 ** b if b >= 0 else 0, n) for b, n in w["objects_by_size"]]
        size_bytes = dict(w["bytes_by_size"])
        axes[0].bar([str(s) for s, _ in sizes], [n for _, n in sizes], color="tab:blue",
                    label="objects")
        axes[0].set_title("Object sizes (log2 buckets, weighted)")
        axes[0].set_xlabel("size >= bytes")
        axes[0].tick_params(axis="x", rotation=90)
        ax2 = axes[0].twinx()
        ax2.plot([str(s) for s, _ in sizes],
                 [size_bytes.get(int(math.log2(s)) if s else -1, 0) for s, _ in sizes],
                 color="tab:orange", marker=".", label="bytes")
        ax2.set_ylabel("bytes")
        freed = w["freed_by_lifetime"]
        total = sum(n for _, n in freed) + sum(n for _, n in w["censored_by_age"])
        cum = 0.0
        xs = [10 ** (freed[0][0] / BINS_PER_DECADE)] if freed else []
        ys = [0.0] if freed else []
        for b, n in freed:
            cum += n
            xs.append(10 ** ((b + 1) / BINS_PER_DECADE))
            ys.append(cum / total if total else 0)
        axes[1].step(xs, ys, where="post")
        for bound in config.labels.boundaries:
            axes[1].axvline(bound, color="grey", lw=0.5, ls=":")
        axes[1].set_xscale("log")
        axes[1].set_ylim(0, 1)
        axes[1].set_title("Lifetime CDF (freed objects; the rest were live at exit)")
        axes[1].set_xlabel(f"lifetime ({config.labels.unit})")
        axes[2].bar(names, w["bytes_by_class"], color="tab:green")
        axes[2].set_title("Bytes allocated by lifetime class (weighted)")
        axes[2].tick_params(axis="x", rotation=45)
        png = f"{slug}.png"
        save_png(fig, os.path.join(out_dir, png), dpi=90)
        censored_share = (sum(n for _, n in w["censored_by_age"]) / total) if total else 0
        lines += [f"## {workload}", "",
                  f"{w['contexts']} contexts, {w['samples']} samples; "
                  f"{censored_share:.1%} of sampled objects still live at exit.", "",
                  f"![{workload}]({png})", ""]
        for title, field in (("sampled bytes", "top_by_bytes"), ("sample count", "top_by_count")):
            lines += [f"Top contexts by {title}:", "",
                      "| # | allocation site (top frames) | samples | sampled bytes | class |",
                      "|---|---|---|---|---|"]
            for rank, c in enumerate(w[field], 1):
                site = " ← ".join(f.replace("|", "\\|") for f in c["frames"]) or "(empty)"
                lines.append(f"| {rank} | `{site}` | {c['samples']} | {c['sampled_bytes']} | "
                             f"{names[c['label']]} |")
            lines.append("")
    path = os.path.join(out_dir, "report.md")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    return path
