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
TFRecord framing is profile_format.container.write_record, the one writer of it.
"""

from __future__ import annotations

from typing import Iterable

import apache_beam as beam
import numpy as np
from apache_beam.io import fileio
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.value_provider import StaticValueProvider

from core import tokenizer
from profile_format.container import write_record

SUFFIX = ".tfrecord"


def make_example(context: dict, vocab: tokenizer.Vocabulary) -> bytes:
    """A labeled context (dataset.LabelContexts' dict) -> serialized tf.train.Example.

    The bytes are exactly those of `tf.train.Example(...).SerializeToString(
    deterministic=True)` (features in key order, each a length-delimited map entry),
    written by hand so the job never imports TensorFlow; tests/test_dataset.py checks
    them against TensorFlow's."""
    features = (  # in key order, as a deterministic map serialization writes them
        (b"context_id", _bytes_feature([context["context_id"]])),
        (b"frames", _bytes_feature(context["frames"])),
        (b"label", _int64_feature([context["label"]])),
        (b"program", _bytes_feature([context["program"]])),
        (b"token_ids", _int64_feature(vocab.ids(context["tokens"]))),
        (b"tokens", _bytes_feature(context["tokens"])),
        (b"version_label", _bytes_feature([context["version_label"]])),
        (b"weight", _float_feature([float(context["stats"]["samples"])])),
    )
    entries = b"".join(_field(1, _field(1, key) + _field(2, value)) for key, value in features)
    return _field(1, entries)  # Example.features (Features.feature map entries inside)


def _varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64  # int64 on the wire: two's complement, ten bytes
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(number: int, data: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _bytes_feature(values) -> bytes:
    # Feature.bytes_list (1): BytesList.value (1), one field per value.
    return _field(1, b"".join(_field(1, v.encode("utf-8")) for v in values))


def _int64_feature(values) -> bytes:
    # Feature.int64_list (3): Int64List.value (1), packed; an empty list writes no field.
    packed = b"".join(_varint(int(v)) for v in values)
    return _field(3, _field(1, packed) if values else b"")


def _float_feature(values) -> bytes:
    # Feature.float_list (2): FloatList.value (1), packed little-endian float32s
    # (numpy's cast rounds as protobuf's C cast does, out-of-range values to inf).
    with np.errstate(over="ignore"):
        packed = np.asarray(values, dtype=np.float64).astype("<f4").tobytes()
    return _field(2, _field(1, packed) if values else b"")


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
