"""Dataset examples: a labeled context as a tf.train.Example, and the TFRecord shards
they are written to.

Features of an example (what `model/data.py` parses):

    tokens, token_ids   the context's tokens (tokenizer.tokenize) and their vocabulary ids
    frames              the context's frames, the allocation site first
    label               lifetime class (lifetimes.LabelScheme)
    weight              the training weight: the number of samples of the context (not
                        the objects they represent: ContextStats.objects)
    context_id, program, version_label

Shards are TFRecord files named ``{split}-{shard:05d}-of-{num_shards:05d}.tfrecord``;
a context's shard is its id modulo the shard count, and a shard's records are sorted
by context id, so the same inputs give the same bytes on any runner.  They are written
through Beam's file sink (`fileio.WriteToFiles`: a temporary file, then a rename), one
element per shard, so each shard is exactly one file whatever the bundling.  The
TFRecord framing is profiler_proto.container.write_record, the one writer of it.
"""

from __future__ import annotations

import os
from typing import Iterable

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.value_provider import StaticValueProvider

from pipeline import tokenizer
from profiler_proto.container import write_record

SUFFIX = ".tfrecord"


def make_example(context: dict, vocab: tokenizer.Vocabulary) -> bytes:
    """A labeled context (dataset.LabelContexts' dict) -> serialized tf.train.Example."""
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


def shard_name(split: str, shard: int, num_shards: int) -> str:
    return f"{split}-{shard:05d}-of-{num_shards:05d}"


class ShardExamples(beam.PTransform):
    """(split, context_id, serialized example) -> one (shard name, records sorted by
    context id) element per non-empty shard."""

    def __init__(self, num_shards: int):
        super().__init__()
        self._num_shards = num_shards

    def expand(self, records):
        n = self._num_shards
        return (records
                | "Key" >> beam.Map(lambda r: (shard_name(r[0], int(r[1], 16) % n, n),
                                               (r[1], r[2])))
                | "Group" >> beam.GroupByKey()
                | "Sort" >> beam.MapTuple(lambda name, rs: (name, [r for _, r in sorted(rs)])))


def write_records(f, records: Iterable[bytes]) -> None:
    """TFRecord-frames records into an open binary file."""
    for record in records:
        write_record(f, record)


def write_tfrecord(path: str, records: Iterable[bytes]) -> str:
    """One TFRecord file outside a pipeline (benchmarks), through FileSystems."""
    with FileSystems.create(path) as f:
        write_records(f, records)
    return path


class _ShardSink(fileio.FileSink):
    """Writes one (shard name, records) element as one TFRecord file."""

    def open(self, fh):
        self._fh = fh

    def write(self, shard):
        write_records(self._fh, shard[1])

    def flush(self):
        self._fh.flush()


def _shard_file(window, pane, shard_index, total_shards, compression, destination):
    # One element per destination (ShardExamples), so one temporary file each: two
    # would be renamed onto the same name.
    if total_shards != 1:
        raise RuntimeError(f"{destination}: {total_shards} files for one shard")
    return destination + SUFFIX


class WriteShards(beam.PTransform):
    """(shard name, records) -> OUT_DIR/{shard name}.tfrecord, written to a temporary
    file under `temp_dir` and renamed (Beam's fileio); -> the files written."""

    def __init__(self, out_dir: str, temp_dir: str):
        super().__init__()
        self._out_dir = out_dir
        self._temp_dir = temp_dir

    def expand(self, shards):
        return (shards
                | "Files" >> fileio.WriteToFiles(
                    self._out_dir, file_naming=_shard_file, destination=lambda s: s[0],
                    sink=_ShardSink, temp_directory=StaticValueProvider(str, self._temp_dir),
                    shards=1)
                | "Names" >> beam.Map(lambda result: result.file_name))
