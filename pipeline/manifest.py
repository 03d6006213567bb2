"""A dataset's manifest.json: what it holds (counts and class histograms per split,
per program and module), what was dropped and why, and everything it was made with
(configuration, the context definition, the inputs, the vocabulary).

Keys only some datasets have: "lifetimes_derived" ({"files": N}, when a profile's
header says its lifetimes come from per-stack aggregates, not objects) and
files."imported_from" ({file: importer}, for files another profiler recorded).

"roles" (core/version_roles.py): {"train": the version labels the dataset's vocabulary
and detected wrappers were fit on (none for a test version cut `--like` a training
dataset, or on a given vocabulary without detection), "selection": the labels given as
`--selection-version`}. A manifest without it predates roles.
"""

from __future__ import annotations

import collections
import json
import os

from core import context as context_def
from core import tokenizer, version_roles

FORMAT = "lifetime-dataset-v1"
MANIFEST = "manifest.json"
VOCAB = "vocab.txt"
DEAD_LETTERS = "dead_letters.jsonl"


def dataset_context(dataset_dir: str) -> context_def.ContextDefinition:
    """The context definition recorded in a dataset's manifest."""
    return context_def.ContextDefinition.load(os.path.join(dataset_dir, MANIFEST))


def summarize_contexts(labeled: list[dict], num_classes: int) -> dict:
    summary = {}
    for split in ("train", "eval"):
        rows = [c for c in labeled if c["split"] == split]
        by_contexts, by_samples = [0] * num_classes, [0] * num_classes
        pure = 0
        for c in rows:
            by_contexts[c["label"]] += 1
            by_samples[c["label"]] += c["stats"]["samples"]
            pure += c["stats"]["pure_samples"]
        summary[split] = {"contexts": len(rows), "samples": sum(by_samples),
                          # share of sampled objects whose own lifetime is in their
                          # context's class: the ceiling of any stack-keyed predictor
                          "label_purity": pure / sum(by_samples) if sum(by_samples) else None,
                          "class_histogram_contexts": by_contexts,
                          "class_histogram_samples": by_samples}
    return summary


def summarize_files(file_stats: list[dict]) -> dict:
    by_program = collections.defaultdict(lambda: {"files": 0, "samples": 0, "frames": 0,
                                                  "named_frames": 0, "incomplete_files": 0})
    modules, imported = {}, {}
    for f in sorted(file_stats, key=lambda f: f["file"]):  # a module's last status wins
        p = by_program[f"{f['program']} ({f['version_label']})"]
        p["files"] += 1
        p["samples"] += f["samples"]
        p["frames"] += f["frames"]
        p["named_frames"] += f["named_frames"]
        p["incomplete_files"] += not f["complete"]
        modules.update(f["modules"])
        if f.get("imported_from"):
            imported[f["file"]] = f["imported_from"]
    for p in by_program.values():
        p["symbolized_frame_share"] = p["named_frames"] / p["frames"] if p["frames"] else 0.0
    summary = {"programs": dict(sorted(by_program.items())),
               "modules": dict(sorted(modules.items()))}
    if imported:  # the importer that made each file (Header.imported_from); ours: none
        summary["imported_from"] = imported
    return summary


def dataset_roles(config, vocab_path, file_stats) -> dict:
    """The manifest's roles: this dataset's labels are train when it fit anything to them
    (its vocabulary, detected wrappers); --selection-version labels are selection."""
    fits = not vocab_path or config.detect_wrappers
    labels = {f["version_label"] for f in file_stats} if fits else ()
    return version_roles.record(labels, config.selection_versions)


def make_manifest(files, config, vocab_path, context_summary, file_stats, dead_lines, vocab,
                  definition, stripped) -> dict:
    """The manifest from the job's summaries (dataset.BuildDataset gathers them)."""
    dead = [json.loads(line) for line in dead_lines]
    manifest = {
        "format": FORMAT,
        "tokenizer_version": tokenizer.TOKENIZER_VERSION,
        "config": config.to_json(),
        "context": definition.to_json(),
        "context_cuts": stripped,  # samples whose context starts below each wrapper
        "inputs": [{"file": f, "version_label": label} for f, label in files],
        "roles": dataset_roles(config, vocab_path, file_stats),
        "vocabulary": {"file": VOCAB, "size": len(vocab), "given": vocab_path},
        "splits": context_summary,
        "files": summarize_files(file_stats),
        "dropped": {"bad_records_or_files": len(dead),
                    "by_category": dict(sorted(collections.Counter(
                        d.get("category", "other") for d in dead).items())),
                    "files_with_problems": sorted({d["file"] for d in dead}),
                    "details": DEAD_LETTERS},
    }
    derived = sum(1 for f in file_stats if f.get("lifetimes_derived"))
    if derived:  # lifetimes from per-stack aggregates (an importer), not per object
        manifest["lifetimes_derived"] = {"files": derived}
    return manifest
