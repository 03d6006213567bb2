"""`lifetime build-dataset`: profiles -> labeled, tokenized, weighted TFRecord examples.

The job is three parts, so everything between reading and writing runs (and is
tested) on in-memory PCollections:

    ReadProfiles      the read edge: (file, version label) -> per-file partial stats
                      per machinery-free stack (the file's source, pipeline/sources.py;
                      symbolized, allocator stripped), dead letters, file stats
    BuildDataset      ToContexts: the context definition (core/context.py), given
                        or with the wrappers detected in these stacks; strip wrappers,
                        keep the definition's max_frames, merge per context
                      LabelContexts: T95 -> class; tokenize; context id; train/eval split
                      BuildVocabulary: top-N tokens of the training contexts (or given)
                      examples (pipeline/examples.py), sharded and sorted by context id
                      the manifest: counts, class histograms, dropped counts,
                        configuration, the context definition (what was stripped, why)
    WriteDataset      the write edge: shards through Beam's file sink, vocab.txt,
                      dead_letters.jsonl, then manifest.json

Reruns are byte-identical for the same inputs and options, on any runner.

Two counts per context, not to be confused: `ContextStats.objects` is the objects its
samples represent (the sum of their sampling weights; T95 is per object), while an
example's `weight` feature, the training weight, is its number of samples.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import uuid
from typing import Iterable

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from core.files import refuse_irregular_output, write_json
from core.errors import InputError
from core import context as context_def
from core import lifetimes, symbolize, tokenizer
from pipeline import context_stats, examples, sources
from pipeline.manifest import DEAD_LETTERS, MANIFEST, VOCAB, make_manifest, summarize_contexts
from pipeline.context_stats import MergeContextStats
from pipeline.runner import make_pipeline
from profile_format import profile_pb2
from profile_format.container import ProfileFormatError, dead_letter

LOG = logging.getLogger(__name__)
DEAD_LETTER = "dead_letter"
FILE_STATS = "file_stats"


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
    # Versions the choices given to this build (--wrapper, ...) were made on: recorded
    # as the manifest's roles.selection (core/version_roles.py).
    selection_versions: tuple[str, ...] = ()
    # Profiles read only to detect wrappers ((pattern, version label) pairs, e.g. the
    # selection versions': `--detect-profiles`): their stacks join the dataset's in
    # `detect_wrappers`, nothing of them is in the dataset, and their labels are
    # recorded as selection (build_dataset adds them to selection_versions).
    detect_inputs: tuple[tuple[str, str], ...] = ()

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        d["labels"] = self.labels.to_json()
        d["context"] = self.context.to_json()
        return d


class ProfileToContextsFn(beam.DoFn):
    """One profile file -> ((program, version label, machinery-free stack), partial
    ContextStats) per distinct stack, with every problem of the file as a dead letter
    ({"file", "category", "reason"}: see profile_format.container.CATEGORIES) and one
    summary of the file.

    The file is read through its source (pipeline/sources.py: ours, or an importer's
    conversion) and streamed: samples are aggregated per stack as they arrive
    (context_stats.stack_stats), so memory is one chunk, the stack and mapping tables and
    the compact per-stack observations -- never the file's samples as messages.  Each
    stack is then symbolized once and each distinct address once per module (the
    symbolizer memoizes per module).  A bad file never raises: it is dead-lettered."""

    def __init__(self, config: DatasetConfig, profile_format: str = sources.AUTO):
        self._config = config
        self._format = profile_format
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
        try:
            source = sources.resolve(path, self._format)
            with source.open(path) as reader:
                yield from self._read(path, version_label, reader)
        except ProfileFormatError as e:  # unrecognised, unopenable, or import failed
            self._bad.inc()
            yield beam.pvalue.TaggedOutput(DEAD_LETTER, dead_letter(path, e.reason))

    def _read(self, path, version_label, reader):
        per_stack = context_stats.stack_stats(reader.samples(), self._config.labels.clock)
        for e in reader.problems:
            self._bad.inc()
            yield beam.pvalue.TaggedOutput(DEAD_LETTER, dead_letter(path, e.reason))
        self._dropped.inc(sum(reader.dropped.values()))
        if reader.header is None:
            return
        if (self._config.labels.clock == "bytes"
                and profile_pb2.CLOCK_ALLOCATED_BYTES not in reader.header.clocks):
            # e.g. an imported TCMalloc lifetime profile: its bytes readings would all be 0.
            yield beam.pvalue.TaggedOutput(DEAD_LETTER, dead_letter(
                path, "clock_not_recorded: the labels use the allocated-bytes clock, which "
                      "this profile does not record"))
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
        yield from per_context.items()
        yield beam.pvalue.TaggedOutput(FILE_STATS, {
            "file": path, "program": header.program, "version_label": label,
            "samples": reader.kept, "frames": total_frames,
            "named_frames": named_frames, "modules": modules,
            "complete": reader.trailer is not None,
            "dropped_samples": dict(sorted(reader.dropped.items())),
            "imported_from": header.imported_from,
            "lifetimes_derived": header.lifetimes_derived})

    def _contexts(self, reader, per_stack, label):
        symbolizer = context_def.make_symbolizer(reader.mappings, cache=self._modules)
        per_context = context_stats.merge_by(per_stack, lambda stack_id: (
            reader.header.program, label,
            context_def.machinery_free(symbolizer, reader.stacks[stack_id].addresses)))
        total_frames = named_frames = 0
        for stack_id in per_stack:
            addresses = reader.stacks[stack_id].addresses
            total_frames += len(addresses)
            named_frames += sum(f.resolved for a in addresses
                                for f in symbolizer.symbolize_address(a, True))
        modules = {m.path: m.status + (f" ({m.detail})" if m.detail else "")
                   for m in symbolizer.module_status().values()}
        return per_context, total_frames, named_frames, modules


class ReadProfiles(beam.PTransform):
    """The read edge: (file, version label) pairs -> context partials ("contexts"),
    with dead letters and file stats (tagged outputs DEAD_LETTER, FILE_STATS)."""

    def __init__(self, config: DatasetConfig, profile_format: str = sources.AUTO):
        super().__init__()
        self._config = config
        self._format = profile_format

    def expand(self, files):
        return (files
                | "Spread" >> beam.Reshuffle()
                | "Contexts" >> beam.ParDo(ProfileToContextsFn(self._config, self._format))
                .with_outputs(DEAD_LETTER, FILE_STATS, main="contexts"))


def _stack_label(element, scheme: lifetimes.LabelScheme) -> tuple:
    (_, _, stack), stats = element
    return stack, stats.samples, scheme.label(stats.t95())


def _define(stacks: list, config: DatasetConfig) -> context_def.ContextDefinition:
    return config.context.with_detected(context_def.detect_wrappers(stacks, config.context))


def _to_contexts(element, definition: context_def.ContextDefinition):
    """A stack's stats -> its context's; under `size_feature` one context per size
    frame, each with the samples of its sizes."""
    (program, version_label, stack), stats = element
    if not definition.size_feature:
        yield (program, version_label, definition.frames(stack)), stats
        return
    site = definition.site_frames(stack)
    for frame, part in sorted(stats.split_by(context_def.size_frame).items()):
        yield (program, version_label, (frame,) + site), part


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

    def __init__(self, config: DatasetConfig, detect_only=None):
        super().__init__()
        self._config = config
        self._detect_only = detect_only  # context partials read only for detection

    def expand(self, partials):
        stacks = partials | "MergeStacks" >> beam.CombinePerKey(MergeContextStats())
        if self._config.detect_wrappers:
            labeled = stacks | "StackLabels" >> beam.Map(_stack_label, self._config.labels)
            if self._detect_only is not None:
                extra = (self._detect_only
                         | "MergeDetectStacks" >> beam.CombinePerKey(MergeContextStats())
                         | "DetectStackLabels" >> beam.Map(_stack_label, self._config.labels))
                labeled = (labeled, extra) | "WithDetectOnly" >> beam.Flatten()
            definition = (labeled
                          | "AllStacks" >> beam.combiners.ToList()
                          | "Define" >> beam.Map(_define, self._config))
        else:  # given (--like): no labels or detection needed
            definition = stacks.pipeline | "Given" >> beam.Create([self._config.context])
        contexts = stacks | "Cut" >> beam.FlatMap(_to_contexts, beam.pvalue.AsSingleton(definition))
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
    cid = context_stats.context_id(program, version_label, frames)
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


def write_lines(path: str, lines: Iterable[str]) -> str:
    """A text file of lines, through FileSystems (like core.files.write_json)."""
    refuse_irregular_output(path)
    with FileSystems.create(path) as f:
        f.write("".join(line + "\n" for line in lines).encode("utf-8"))
    return path


class SortedDeadLetters(beam.PTransform):
    """Dead letters -> one sorted list of their JSON lines (a singleton)."""

    def expand(self, dead):
        return (dead
                | "Lines" >> beam.Map(lambda d: json.dumps(d, sort_keys=True))
                | "All" >> beam.combiners.ToList()
                | "Sort" >> beam.Map(sorted))


def match_inputs(inputs: list[tuple[str, str]],
                 profile_format: str = sources.AUTO, flag: str = "--profiles") -> list[tuple[str, str]]:
    """(glob, file or directory; version label) -> sorted (file, label) pairs.

    A directory stands for the profile files in it (the format's globs: *.ltprof for
    ours).  A pattern that matches nothing is an error, and so is one file given twice
    with different labels (its samples would count twice); the same file twice with
    one label is read once.  FLAG: the option the errors name."""
    files: dict[str, str] = {}
    for pattern, label in inputs:
        patterns = [pattern]
        if os.path.isdir(pattern):
            patterns = [os.path.join(pattern, g) for g in sources.directory_globs(profile_format)]
        matched = sorted({m.path for r in FileSystems.match(patterns) for m in r.metadata_list
                          if not os.path.isdir(m.path)})
        if not matched:
            raise InputError(f"{flag} {' '.join(patterns)}: matches no files")
        for path in matched:
            if files.get(path, label) != label:
                raise InputError(f"{flag}: {path} is given with two version labels "
                                 f"({files[path]!r} and {label!r})")
            files[path] = label
    return sorted(files.items())


class _ExampleFn(beam.DoFn):
    """A labeled context -> (split, context id, serialized example), with the
    vocabulary (a side input) made into a table once, not once per context."""

    def setup(self):
        self._tokens = self._vocab = None

    def process(self, context, tokens):
        if tokens is not self._tokens:
            self._tokens, self._vocab = tokens, tokenizer.Vocabulary(tokens)
        yield context["split"], context["context_id"], examples.make_example(context, self._vocab)


class BuildDataset(beam.PTransform):
    """The dataset job between its edges, on in-memory inputs.

    Input: a dict of PCollections as ReadProfiles makes them -- "contexts" (context
    partials), "dead_letters", "file_stats".  Output: a dict of PCollections --
    "shards" ((shard name, sorted serialized examples), one per non-empty shard),
    "vocabulary" (the token list, a singleton), "dead_letters" (their sorted JSON
    lines, a singleton) and "manifest" (a singleton dict).  `files` are the (file,
    version label) inputs the manifest lists; `vocab` a given vocabulary (recorded as
    `vocab_path`), else one is built from the training contexts."""

    def __init__(self, config: DatasetConfig, files: list[tuple[str, str]],
                 vocab: tokenizer.Vocabulary | None = None, vocab_path: str | None = None):
        super().__init__()
        self._config = config
        self._files = list(files)
        self._vocab = vocab
        self._vocab_path = vocab_path

    def expand(self, inputs):
        config, p = self._config, inputs["contexts"].pipeline
        cut, definition, stripped = inputs["contexts"] | "Contexts" >> ToContexts(
            config, inputs.get("detect_contexts"))
        labeled = cut | "Label" >> LabelContexts(config)
        if self._vocab:
            ranked = p | "GivenVocab" >> beam.Create([self._vocab.tokens])
        else:
            ranked = (labeled | "Vocabulary" >> BuildVocabulary(config.vocab_size)
                      | "WithReserved" >> beam.Map(
                          lambda top: tokenizer.Vocabulary.from_ranked(top).tokens))
        vocab = beam.pvalue.AsSingleton(ranked)
        shards = (labeled
                  | "Example" >> beam.ParDo(_ExampleFn(), vocab)
                  | "Shard" >> examples.ShardExamples(config.num_shards))
        context_summary = (labeled
                           | "Slim" >> beam.Map(lambda c: {k: c[k] for k in ("split", "label", "stats")})
                           | "AllContexts" >> beam.combiners.ToList()
                           | "SummarizeContexts" >> beam.Map(
                               summarize_contexts, config.labels.num_classes))
        file_stats = (inputs["file_stats"] | "AllFiles" >> beam.combiners.ToList())
        dead = inputs["dead_letters"] | "DeadLetters" >> SortedDeadLetters()
        manifest = (p | "One" >> beam.Create([None])
                    | "Manifest" >> beam.Map(
                        lambda _, ctx, fs, dl, v, d, st: make_manifest(
                            self._files, config, self._vocab_path, ctx, fs, dl, v, d, st),
                        beam.pvalue.AsSingleton(context_summary),
                        beam.pvalue.AsSingleton(file_stats), beam.pvalue.AsSingleton(dead),
                        vocab, beam.pvalue.AsSingleton(definition),
                        beam.pvalue.AsSingleton(stripped)))
        return {"shards": shards, "vocabulary": ranked, "dead_letters": dead,
                "manifest": manifest}


class WriteDataset(beam.PTransform):
    """The write edge: BuildDataset's outputs -> OUT_DIR/{split}-*.tfrecord, vocab.txt,
    dead_letters.jsonl, and last, once the others are written, manifest.json."""

    def __init__(self, out_dir: str):
        super().__init__()
        self._out_dir = out_dir

    def expand(self, parts):
        out = self._out_dir
        temp = FileSystems.join(out, f".shards-{uuid.uuid4().hex}")
        shards = parts["shards"] | "Shards" >> examples.WriteShards(out, temp)
        vocab = parts["vocabulary"] | "Vocab" >> beam.Map(
            lambda tokens: write_lines(FileSystems.join(out, VOCAB), tokens))
        dead = parts["dead_letters"] | "Dead" >> beam.Map(
            lambda lines: write_lines(FileSystems.join(out, DEAD_LETTERS), lines))
        return parts["manifest"] | "Manifest" >> beam.Map(
            _write_manifest, out, temp, beam.pvalue.AsList(shards),
            beam.pvalue.AsSingleton(vocab), beam.pvalue.AsSingleton(dead))


def _write_manifest(manifest: dict, out: str, temp: str, *_written) -> str:
    # Side inputs on the other writes make this the last one: a manifest says the
    # dataset is complete.  The shard sink leaves its (empty) temporary directory.
    if FileSystems.exists(temp):
        FileSystems.delete([temp])
    return write_json(FileSystems.join(out, MANIFEST), manifest)


def build_dataset(inputs: list[tuple[str, str]], out_dir: str, config: DatasetConfig,
                  vocab_path: str | None = None, beam_args: list[str] | None = None,
                  profile_format: str = sources.AUTO) -> dict:
    """Runs the job (read edge, BuildDataset, write edge) and returns the manifest
    (also written to OUT/manifest.json)."""
    profile_format = sources.check_format(profile_format)
    files = match_inputs(inputs, profile_format)
    vocab_given = tokenizer.Vocabulary.load(vocab_path) if vocab_path else None
    refuse_irregular_outputs(out_dir, (MANIFEST, VOCAB, DEAD_LETTERS))
    LOG.info("build-dataset: %d profile files -> %s", len(files), out_dir)
    detect_files = (match_inputs(list(config.detect_inputs), profile_format, "--detect-profiles")
                    if config.detect_inputs and config.detect_wrappers else [])
    if detect_files:
        config = dataclasses.replace(config, selection_versions=tuple(sorted(
            set(config.selection_versions) | {label for _, label in config.detect_inputs
                                              if label})))
    with make_pipeline(beam_args) as p:
        read = (p | "Files" >> beam.Create(files)
                | "Read" >> ReadProfiles(config, profile_format))
        extra = {}
        if detect_files:
            detect = (p | "DetectFiles" >> beam.Create(detect_files)
                      | "ReadDetect" >> ReadProfiles(config, profile_format))
            extra["detect_contexts"] = detect.contexts
        _ = ({"contexts": read.contexts, "dead_letters": read[DEAD_LETTER],
              "file_stats": read[FILE_STATS], **extra}
             | "Build" >> BuildDataset(config, files, vocab_given, vocab_path)
             | "Write" >> WriteDataset(out_dir))
    with FileSystems.open(FileSystems.join(out_dir, MANIFEST)) as f:
        manifest = json.load(f)
    if not any(manifest["splits"][s]["contexts"] for s in ("train", "eval")):
        dropped = manifest["dropped"]
        raise no_usable_samples(len(files), dropped["bad_records_or_files"],
                                len(dropped["files_with_problems"]),
                                FileSystems.join(out_dir, dropped["details"]))
    return manifest


def no_usable_samples(files: int, problems: int, bad_files: int, details: str) -> InputError:
    """The error of a job (build-dataset, characterize) whose inputs held no usable
    sample at all: every file bad, empty or dropped."""
    return InputError(f"no usable samples in {files} profile file(s): {problems} problems "
                      f"in {bad_files} files, see {details}")


def refuse_irregular_outputs(out_dir: str, names) -> None:
    """Before a job: an OSError if an output it will write is already a fifo, device or
    socket (writing one would block or go elsewhere), rather than a failure inside it."""
    for name in names:
        refuse_irregular_output(FileSystems.join(out_dir, name))
