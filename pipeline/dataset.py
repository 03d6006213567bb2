"""`lifetime build-dataset`: profiles -> labeled, tokenized, weighted TFRecord examples.

    ReadProfiles           files -> per-file partial stats per machinery-free stack
                           (symbolized, allocator stripped; + dead letters, file stats)
    CombinePerKey          merge partials across files and runs
    DefineContexts         the context definition (pipeline/context.py): given, or with
                           the wrappers detected in these stacks
    ToContexts             strip wrappers, keep the top frames, merge again
    LabelContexts          T95 -> class; tokenize; context id; train/eval split
    BuildVocabulary        top-N tokens of the training contexts (or --vocab FILE)
    WriteExamples          sorted shards of tf.train.Example, so reruns are byte-identical
    manifest.json          counts, class histogram, dropped counts, configuration,
                           the context definition (what was stripped, and why)
"""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
import os
from typing import Iterable

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from lifetime.errors import InputError
from pipeline import context as context_def
from pipeline import contexts, lifetimes, symbolize, tokenizer
from pipeline.contexts import ContextStats, MergeContextStats
from pipeline.runner import make_pipeline
from profiler_proto import ProfileReader
from profiler_proto.container import SUFFIX, dead_letter

LOG = logging.getLogger(__name__)
DEAD_LETTER = "dead_letter"
FILE_STATS = "file_stats"
NS_PER_MS = 1e6


@dataclasses.dataclass(frozen=True)
class DatasetConfig:
    # How a stack becomes a context. With detect_wrappers, the wrappers found in these
    # profiles are added to it; a definition taken from another dataset (--like) is
    # used as it is, so test versions are cut exactly as the training data were.
    context: context_def.ContextDefinition = context_def.ContextDefinition.make()
    detect_wrappers: bool = True
    vocab_size: int = 5000        # tokens besides PAD, UNK, SEP
    eval_percent: int = 20        # share of contexts (by id hash) in the eval split
    num_shards: int = 1
    labels: lifetimes.LabelScheme = lifetimes.LabelScheme()
    # Where symbols are looked for (symbolize.ModuleCache): separate debug files, and a
    # root holding the profiled machine's files ("" = none).
    debug_dirs: tuple[str, ...] = symbolize.DEFAULT_DEBUG_DIRS
    sysroot: str = ""

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        d["labels"] = self.labels.to_json()
        d["context"] = self.context.to_json()
        return d


class ProfileToContextsFn(beam.DoFn):
    """One profile file -> ((program, version label, machinery-free stack), partial
    ContextStats) per distinct stack, with every problem of the file as a dead letter
    ({"file", "category", "reason"}: see profiler_proto.container.CATEGORIES).

    The file is streamed (profiler_proto.ProfileReader): samples are aggregated per
    stack as they arrive, so memory is one chunk, the stack and mapping tables and the
    compact per-stack observations -- never the file's samples as messages.  Each
    stack is then symbolized once and each distinct address once per module (the
    symbolizer memoizes per module).  A bad file never raises: it is dead-lettered."""

    def __init__(self, config: DatasetConfig):
        self._config = config
        self._bad = Metrics.counter("read", "bad_records")
        self._empty = Metrics.counter("read", "empty_profiles")
        self._samples = Metrics.counter("read", "samples")
        self._dropped = Metrics.counter("read", "dropped_samples")

    def setup(self):
        # One ELF cache per worker: each module is read once, whatever the file count.
        self._modules = symbolize.ModuleCache(debug_dirs=self._config.debug_dirs,
                                              sysroot=self._config.sysroot or None)

    def process(self, element):
        path, version_label = element
        reader = ProfileReader(path)
        clock = self._config.labels.clock
        per_stack: dict[int, ContextStats] = {}
        for s in reader.samples():
            stats = per_stack.get(s.stack_id)
            if stats is None:
                stats = per_stack[s.stack_id] = ContextStats()
            stats.add(_lifetime(s, clock), s.censored, s.weight, s.size)
        for e in reader.problems:
            self._bad.inc()
            yield beam.pvalue.TaggedOutput(DEAD_LETTER, dead_letter(path, e.reason))
        self._dropped.inc(sum(reader.dropped.values()))
        if reader.header is None:
            return
        if not reader.kept:
            self._empty.inc()
            dropped = sum(reader.dropped.values())
            yield beam.pvalue.TaggedOutput(DEAD_LETTER, dead_letter(
                path, "empty: the profile holds no samples" if not dropped else
                f"empty: the profile holds no usable samples ({dropped} dropped)"))
            return
        self._samples.inc(reader.kept)
        header = reader.header
        label = version_label or header.version_label
        try:
            per_context, total_frames, named_frames, modules = self._contexts(
                reader, per_stack, label)
        except Exception as e:  # noqa: BLE001 - a bad file must not kill the job
            LOG.exception("%s: symbolization failed", path)
            yield beam.pvalue.TaggedOutput(DEAD_LETTER, dead_letter(
                path, f"symbolize_failed: {type(e).__name__}: {e}"))
            return
        for key, stats in per_context.items():
            yield key, stats
        yield beam.pvalue.TaggedOutput(FILE_STATS, {
            "file": path, "program": header.program, "version_label": label,
            "samples": reader.kept, "frames": total_frames,
            "named_frames": named_frames, "modules": modules,
            "complete": reader.trailer is not None,
            "dropped_samples": dict(sorted(reader.dropped.items()))})

    def _contexts(self, reader, per_stack, label):
        symbolizer = context_def.make_symbolizer(reader.mappings, cache=self._modules)
        per_context: dict[tuple, ContextStats] = {}
        total_frames = named_frames = 0
        for stack_id, stats in sorted(per_stack.items()):
            addresses = reader.stacks[stack_id].addresses
            total_frames += len(addresses)
            named_frames += sum(f.resolved for a in addresses
                                for f in symbolizer.symbolize_address(a, True))
            key = (reader.header.program, label,
                   context_def.machinery_free(symbolizer, addresses))
            if key in per_context:
                per_context[key].merge(stats)
            else:
                per_context[key] = stats
        modules = {m.path: m.status + (f" ({m.detail})" if m.detail else "")
                   for m in symbolizer.module_status().values()}
        return per_context, total_frames, named_frames, modules


def _lifetime(sample, clock: str) -> float:
    """Lifetime (or censored age) on the label clock: ms of wall time, or bytes."""
    if clock == "wall":
        if sample.censored:
            return sample.observed_age_ns / NS_PER_MS
        return (sample.free_monotonic_ns - sample.alloc_monotonic_ns) / NS_PER_MS
    if sample.censored:
        return float(sample.observed_age_bytes)
    return float(sample.free_allocated_bytes - sample.alloc_allocated_bytes)


class ReadProfiles(beam.PTransform):
    """(file, version label) pairs -> context partials, with dead letters and file stats."""

    def __init__(self, config: DatasetConfig):
        super().__init__()
        self._config = config

    def expand(self, files):
        return (files
                | "Spread" >> beam.Reshuffle()
                | "Contexts" >> beam.ParDo(ProfileToContextsFn(self._config)).with_outputs(
                    DEAD_LETTER, FILE_STATS, main="contexts"))


def _stack_label(element, scheme: lifetimes.LabelScheme) -> tuple:
    (_, _, stack), stats = element
    return stack, stats.samples, scheme.label(stats.t95())


def _define(stacks: list, config: DatasetConfig) -> context_def.ContextDefinition:
    return config.context.with_detected(context_def.detect_wrappers(stacks, config.context))


def _to_context(element, definition: context_def.ContextDefinition):
    (program, version_label, stack), stats = element
    return (program, version_label, definition.frames(stack)), stats


def _stripped(element, definition: context_def.ContextDefinition):
    (_, _, stack), stats = element
    return definition.cut_at(stack) or "", stats.samples


def _stripped_summary(rows: list) -> dict:
    by_wrapper = {name: n for name, n in sorted(rows) if name}
    total = sum(n for _, n in rows)
    return {"samples": total, "cut_below_a_wrapper": sum(by_wrapper.values()),
            "samples_by_wrapper": dict(sorted(by_wrapper.items(), key=lambda kv: -kv[1]))}


class ToContexts(beam.PTransform):
    """Merged (program, label, machinery-free stack) stats -> merged stats per context,
    with the context definition and what its wrappers cut (singleton PCollections)."""

    def __init__(self, config: DatasetConfig):
        super().__init__()
        self._config = config

    def expand(self, partials):
        stacks = partials | "MergeStacks" >> beam.CombinePerKey(MergeContextStats())
        if self._config.detect_wrappers:
            definition = (stacks
                          | "StackLabels" >> beam.Map(_stack_label, self._config.labels)
                          | "AllStacks" >> beam.combiners.ToList()
                          | "Define" >> beam.Map(_define, self._config))
        else:  # given (--like): no labels or detection needed
            definition = stacks.pipeline | "Given" >> beam.Create([self._config.context])
        contexts = stacks | "Cut" >> beam.Map(_to_context, beam.pvalue.AsSingleton(definition))
        stripped = (stacks
                    | "CutBelow" >> beam.Map(_stripped, beam.pvalue.AsSingleton(definition))
                    | "PerWrapper" >> beam.CombinePerKey(sum)
                    | "AllWrappers" >> beam.combiners.ToList()
                    | "SummarizeCuts" >> beam.Map(_stripped_summary))
        return contexts, definition, stripped


def _label_context(element, config: DatasetConfig):
    (program, version_label, frames), stats = element
    t95 = stats.t95()
    label = config.labels.label(t95)
    cid = contexts.context_id(program, version_label, frames)
    split = "eval" if int(cid, 16) % 100 < config.eval_percent else "train"
    return {"context_id": cid, "program": program, "version_label": version_label,
            "frames": list(frames), "tokens": tokenizer.tokenize(frames),
            "t95": t95, "label": label, "split": split,
            "stats": {**stats.summary(), "pure_samples": stats.pure_samples(label, config.labels)}}


class LabelContexts(beam.PTransform):
    def __init__(self, config: DatasetConfig):
        super().__init__()
        self._config = config

    def expand(self, partials):
        return (partials
                | "Merge" >> beam.CombinePerKey(MergeContextStats())
                | "Label" >> beam.Map(_label_context, self._config))


class BuildVocabulary(beam.PTransform):
    """Top-N tokens by the number of training contexts that contain them (ties by
    token text, so the order is deterministic) -> one ordered token list."""

    def __init__(self, size: int):
        super().__init__()
        self._size = size

    def expand(self, labeled):
        return (labeled
                | "Train" >> beam.Filter(lambda c: c["split"] == "train")
                | "Tokens" >> beam.FlatMap(
                    lambda c: sorted(set(c["tokens"]) - set(tokenizer.RESERVED)))
                | "Count" >> beam.combiners.Count.PerElement()
                | "Top" >> beam.combiners.Top.Of(self._size, key=lambda tc: (tc[1], _neg(tc[0])))
                | "Rank" >> beam.Map(lambda top: [t for t, _ in top]))


def _neg(token: str) -> tuple:
    """Sort key that orders tokens alphabetically inside a descending Top."""
    return tuple(-b for b in token.encode("utf-8")) + (1,)


def make_example(context: dict, vocab: tokenizer.Vocabulary) -> bytes:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's start-up chatter
    import tensorflow as tf

    def feature(values, kind):
        if kind == "bytes":
            return tf.train.Feature(bytes_list=tf.train.BytesList(
                value=[v.encode("utf-8") for v in values]))
        if kind == "int":
            return tf.train.Feature(int64_list=tf.train.Int64List(value=values))
        return tf.train.Feature(float_list=tf.train.FloatList(value=values))

    features = {
        "tokens": feature(context["tokens"], "bytes"),
        "token_ids": feature(vocab.ids(context["tokens"]), "int"),
        "frames": feature(context["frames"], "bytes"),
        "label": feature([context["label"]], "int"),
        "weight": feature([float(context["stats"]["samples"])], "float"),
        "context_id": feature([context["context_id"]], "bytes"),
        "program": feature([context["program"]], "bytes"),
        "version_label": feature([context["version_label"]], "bytes"),
    }
    example = tf.train.Example(features=tf.train.Features(feature=features))
    return example.SerializeToString(deterministic=True)


class WriteSortedShards(beam.PTransform):
    """Writes (split, context_id, record) as TFRecord shards sorted by context id.

    Sorting inside each shard makes the output byte-identical across runs and
    runners, whatever order the workers produced it in."""

    def __init__(self, out_dir: str, num_shards: int):
        super().__init__()
        self._out_dir = out_dir
        self._num_shards = num_shards

    def expand(self, records):
        n = self._num_shards
        return (records
                | "Shard" >> beam.Map(lambda r: ((r[0], int(r[1], 16) % n), (r[1], r[2])))
                | "Group" >> beam.GroupByKey()
                | "Write" >> beam.Map(_write_shard, self._out_dir, n))


def _write_shard(element, out_dir: str, num_shards: int) -> str:
    from apache_beam.io.tfrecordio import _TFRecordUtil

    (split, shard), records = element
    path = FileSystems.join(out_dir, f"{split}-{shard:05d}-of-{num_shards:05d}.tfrecord")
    with FileSystems.create(path) as f:
        for _, record in sorted(records):
            _TFRecordUtil.write_record(f, record)
    return path


def _summarize_contexts(labeled: list[dict], num_classes: int) -> dict:
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


def _summarize_files(file_stats: list[dict]) -> dict:
    by_program = collections.defaultdict(lambda: {"files": 0, "samples": 0, "frames": 0,
                                                  "named_frames": 0, "incomplete_files": 0})
    modules = {}
    for f in file_stats:
        p = by_program[f"{f['program']} ({f['version_label']})"]
        p["files"] += 1
        p["samples"] += f["samples"]
        p["frames"] += f["frames"]
        p["named_frames"] += f["named_frames"]
        p["incomplete_files"] += not f["complete"]
        modules.update(f["modules"])
    for p in by_program.values():
        p["symbolized_frame_share"] = p["named_frames"] / p["frames"] if p["frames"] else 0.0
    return {"programs": dict(sorted(by_program.items())), "modules": dict(sorted(modules.items()))}


def _write_json(path: str, value) -> str:
    with FileSystems.create(path) as f:
        f.write(json.dumps(value, indent=2, sort_keys=True).encode("utf-8") + b"\n")
    return path


def _write_lines(path: str, lines: Iterable[str]) -> str:
    with FileSystems.create(path) as f:
        f.write("".join(line + "\n" for line in lines).encode("utf-8"))
    return path


def dataset_context(dataset_dir: str) -> context_def.ContextDefinition:
    """The context definition recorded in a dataset's manifest."""
    return context_def.ContextDefinition.load(os.path.join(dataset_dir, "manifest.json"))


def match_inputs(inputs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """(glob, file or directory; version label) -> sorted (file, label) pairs.

    A directory stands for the profile files in it.  A pattern that matches nothing
    is an error, and so is one file given twice with different labels (its samples
    would count twice); the same file twice with one label is read once."""
    files: dict[str, str] = {}
    for pattern, label in inputs:
        if os.path.isdir(pattern):
            pattern = os.path.join(pattern, "*" + SUFFIX)
        matched = sorted(m.path for r in FileSystems.match([pattern]) for m in r.metadata_list)
        if not matched:
            raise InputError(f"--profiles {pattern}: matches no files")
        for path in matched:
            if files.get(path, label) != label:
                raise InputError(f"--profiles: {path} is given with two version labels "
                                 f"({files[path]!r} and {label!r})")
            files[path] = label
    return sorted(files.items())


def build_dataset(inputs: list[tuple[str, str]], out_dir: str, config: DatasetConfig,
                  vocab_path: str | None = None, beam_args: list[str] | None = None) -> dict:
    """Runs the job and returns the manifest (also written to OUT/manifest.json)."""
    files = match_inputs(inputs)
    vocab_given = tokenizer.Vocabulary.load(vocab_path) if vocab_path else None
    os.makedirs(out_dir, exist_ok=True)
    LOG.info("build-dataset: %d profile files -> %s", len(files), out_dir)
    with make_pipeline(beam_args) as p:
        read = (p | "Files" >> beam.Create(files) | "Read" >> ReadProfiles(config))
        cut, definition, stripped = read.contexts | "Contexts" >> ToContexts(config)
        labeled = cut | "Label" >> LabelContexts(config)
        if vocab_given:
            ranked = p | "GivenVocab" >> beam.Create([vocab_given.tokens])
        else:
            ranked = (labeled | "Vocabulary" >> BuildVocabulary(config.vocab_size)
                      | "WithReserved" >> beam.Map(
                          lambda top: tokenizer.Vocabulary.from_ranked(top).tokens))
        vocab = beam.pvalue.AsSingleton(ranked)
        _ = (ranked | "WriteVocab" >> beam.Map(
            lambda tokens: _write_lines(os.path.join(out_dir, "vocab.txt"), tokens)))
        _ = (labeled
             | "Example" >> beam.Map(
                 lambda c, v: (c["split"], c["context_id"],
                               make_example(c, tokenizer.Vocabulary(v))), vocab)
             | "Write" >> WriteSortedShards(out_dir, config.num_shards))
        context_summary = (labeled
                           | "Slim" >> beam.Map(lambda c: {k: c[k] for k in ("split", "label", "stats")})
                           | "AllContexts" >> beam.combiners.ToList()
                           | "SummarizeContexts" >> beam.Map(
                               _summarize_contexts, config.labels.num_classes))
        file_summary = (read[FILE_STATS] | "AllFiles" >> beam.combiners.ToList()
                        | "SummarizeFiles" >> beam.Map(_summarize_files))
        dead = (read[DEAD_LETTER]
                | "DeadLines" >> beam.Map(lambda d: json.dumps(d, sort_keys=True))
                | "AllDead" >> beam.combiners.ToList() | "SortDead" >> beam.Map(sorted))
        _ = dead | "WriteDead" >> beam.Map(
            lambda lines: _write_lines(os.path.join(out_dir, "dead_letters.jsonl"), lines))
        _ = (p | "One" >> beam.Create([None])
             | "Manifest" >> beam.Map(
                 lambda _, ctx, fs, dl, v, d, st: _write_json(
                     os.path.join(out_dir, "manifest.json"),
                     _manifest(files, config, vocab_path, ctx, fs, dl, v, d, st)),
                 beam.pvalue.AsSingleton(context_summary), beam.pvalue.AsSingleton(file_summary),
                 beam.pvalue.AsSingleton(dead), vocab, beam.pvalue.AsSingleton(definition),
                 beam.pvalue.AsSingleton(stripped)))
    with open(os.path.join(out_dir, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    if not any(manifest["splits"][s]["contexts"] for s in ("train", "eval")):
        dropped = manifest["dropped"]
        raise InputError(
            f"no usable samples in {len(files)} profile file(s): "
            f"{dropped['bad_records_or_files']} problems in "
            f"{len(dropped['files_with_problems'])} files, see "
            f"{os.path.join(out_dir, dropped['details'])}")
    return manifest


def _manifest(files, config, vocab_path, context_summary, file_summary, dead_lines, vocab,
              definition, stripped):
    dead = [json.loads(line) for line in dead_lines]
    return {
        "format": "lifetime-dataset-v1",
        "tokenizer_version": tokenizer.TOKENIZER_VERSION,
        "config": config.to_json(),
        "context": definition.to_json(),
        "context_cuts": stripped,  # samples whose context starts below each wrapper
        "inputs": [{"file": f, "version_label": label} for f, label in files],
        "vocabulary": {"file": "vocab.txt", "size": len(vocab), "given": vocab_path},
        "splits": context_summary,
        "files": file_summary,
        "dropped": {"bad_records_or_files": len(dead),
                    "by_category": dict(sorted(collections.Counter(
                        d.get("category", "other") for d in dead).items())),
                    "files_with_problems": sorted({d["file"] for d in dead}),
                    "details": "dead_letters.jsonl"},
    }
