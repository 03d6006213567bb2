"""Datasets written by `lifetime build-dataset`, read through tf.data into memory.

Datasets here are tens of thousands of contexts, so one pass of tf.data parses every
TFRecord into numpy arrays (`Examples`): the model trains from those, and the metrics
and baselines need the frames as text anyway.
"""

from __future__ import annotations

import dataclasses
import glob
import os

import numpy as np

from core.context import ContextDefinition, ContextDefinitionError
from core.errors import LifetimeError
from core.files import check_regular
from model.io import read_json, read_vocab
from pipeline.manifest import FORMAT, MANIFEST
from core.tokenizer import TOKENIZER_VERSION, Vocabulary

# TensorFlow is imported inside _parse_files: `lifetime --help` must not pay for it.

SPLITS = ("train", "eval")


class DatasetError(LifetimeError):
    """A dataset directory that cannot be used (missing, incomplete, incompatible)."""


@dataclasses.dataclass
class Examples:
    """Contexts as parallel arrays; `frames` are tuples of symbolized names."""

    token_ids: list            # list of int64 arrays (flat, SEP between frames)
    frames: list               # list of tuple[str, ...]
    label: np.ndarray          # int32 [n]
    weight: np.ndarray         # float32 [n]: sample count
    context_id: np.ndarray     # str [n]
    program: np.ndarray        # str [n]
    version_label: np.ndarray  # str [n]

    def __len__(self) -> int:
        return len(self.label)

    @classmethod
    def empty(cls) -> "Examples":
        return cls([], [], np.zeros(0, np.int32), np.zeros(0, np.float32),
                   *(np.zeros(0, dtype=object) for _ in range(3)))

    @classmethod
    def concat(cls, parts: list["Examples"]) -> "Examples":
        parts = [p for p in parts if len(p)]
        if not parts:
            return cls.empty()
        return cls(sum((p.token_ids for p in parts), []), sum((p.frames for p in parts), []),
                   *(np.concatenate([getattr(p, f) for p in parts])
                     for f in ("label", "weight", "context_id", "program", "version_label")))

    def select(self, mask) -> "Examples":
        idx = np.flatnonzero(np.asarray(mask))
        return Examples([self.token_ids[i] for i in idx], [self.frames[i] for i in idx],
                        self.label[idx], self.weight[idx], self.context_id[idx],
                        self.program[idx], self.version_label[idx])


@dataclasses.dataclass
class Dataset:
    path: str
    manifest: dict
    vocab: Vocabulary
    splits: dict  # split -> Examples

    @property
    def label_scheme(self) -> dict:
        return self.manifest["config"]["labels"]

    @property
    def context(self):
        """The dataset's context definition (core/context.py)."""
        try:
            return ContextDefinition.from_json(self.manifest.get("context"),
                                               where=f"dataset {self.path}")
        except ContextDefinitionError as e:
            raise DatasetError(str(e)) from e

    def all(self) -> Examples:
        return Examples.concat([self.splits[s] for s in SPLITS])


def _parse_files(files: list[str]) -> Examples:
    import tensorflow as tf

    spec = {"token_ids": tf.io.VarLenFeature(tf.int64), "frames": tf.io.VarLenFeature(tf.string),
            "label": tf.io.FixedLenFeature([], tf.int64),
            "weight": tf.io.FixedLenFeature([], tf.float32),
            "context_id": tf.io.FixedLenFeature([], tf.string),
            "program": tf.io.FixedLenFeature([], tf.string),
            "version_label": tf.io.FixedLenFeature([], tf.string)}
    if not files:
        return Examples.empty()
    ds = (tf.data.TFRecordDataset(files).batch(4096)
          .map(lambda raw: tf.io.parse_example(raw, spec)))
    parts = []
    for batch in ds:
        batch = {k: (v.indices.numpy()[:, 0], v.values.numpy()) if isinstance(v, tf.SparseTensor)
                 else v.numpy() for k, v in batch.items()}
        n = len(batch["label"])
        rows_ids, rows_frames = (np.split(values, np.searchsorted(rows, np.arange(1, n)))
                                 for rows, values in (batch["token_ids"], batch["frames"]))
        parts.append(Examples(
            list(rows_ids), [tuple(f.decode("utf-8") for f in r) for r in rows_frames],
            batch["label"].astype(np.int32), batch["weight"].astype(np.float32),
            *(np.array([x.decode("utf-8") for x in batch[k]], dtype=object)
              for k in ("context_id", "program", "version_label"))))
    return Examples.concat(parts)


def load_dataset(path: str) -> Dataset:
    """Reads a dataset directory; clear errors for anything missing."""
    if not os.path.isdir(path):
        raise DatasetError(f"dataset {path}: no such directory")
    manifest = read_json(os.path.join(path, MANIFEST), DatasetError,
                         "missing (not written by `lifetime build-dataset`, or the job did "
                         "not finish)")
    if manifest.get("format") != FORMAT:
        raise DatasetError(f"dataset {path}: unknown format {manifest.get('format')!r}")
    vocab = read_vocab(path, DatasetError, "the dataset's vocabulary")
    files = {s: sorted(glob.glob(os.path.join(path, f"{s}-*.tfrecord"))) for s in SPLITS}
    if not files["train"] and not files["eval"]:
        raise DatasetError(f"dataset {path}: no train-*.tfrecord or eval-*.tfrecord files")
    for shard in files["train"] + files["eval"]:
        try:  # tf.data opens them by name: a fifo would block it
            check_regular(shard)
        except OSError as e:
            raise DatasetError(f"{shard}: cannot read ({e.strerror})") from None
    splits = {s: _parse_files(files[s]) for s in SPLITS}
    return Dataset(os.path.abspath(path), manifest, vocab, splits)


def check_compatible(datasets: list[Dataset], vocab: Vocabulary | None = None,
                     label_scheme: dict | None = None, what: str = "model",
                     context=None) -> None:
    """All datasets share one vocabulary (token ids), one label scheme and one context
    definition (the same stacks would otherwise be cut into different contexts)."""
    ref_vocab = vocab.tokens if vocab else datasets[0].vocab.tokens
    ref_labels = label_scheme or datasets[0].label_scheme
    ref_context = context or datasets[0].context
    for d in datasets:
        version = d.manifest.get("tokenizer_version")
        if version != TOKENIZER_VERSION:
            raise DatasetError(f"dataset {d.path}: tokenizer {version!r}, this build reads "
                               f"{TOKENIZER_VERSION!r}; rebuild it with `lifetime build-dataset`")
        if d.context.wrappers != ref_context.wrappers \
                or d.context.max_frames != ref_context.max_frames:
            extra = sorted(set(d.context.wrappers) ^ set(ref_context.wrappers))
            raise DatasetError(
                f"dataset {d.path}: its context definition differs from the {what}'s "
                f"(max_frames {d.context.max_frames} vs {ref_context.max_frames}; wrappers "
                f"not in both: {', '.join(extra[:8]) or 'none'}). Rebuild it with "
                f"`lifetime build-dataset ... --like <the {what}'s training dataset>`")
        if d.vocab.tokens != ref_vocab:
            first = next((i for i, (a, b) in enumerate(zip(d.vocab.tokens, ref_vocab)) if a != b),
                         min(len(d.vocab), len(ref_vocab)))
            raise DatasetError(
                f"dataset {d.path}: its vocabulary differs from the {what}'s "
                f"({len(d.vocab)} vs {len(ref_vocab)} tokens, first difference at id {first}); "
                f"token ids would not match. Rebuild it with `lifetime build-dataset ... --vocab "
                f"<the {what}'s vocab.txt>`")
        if d.label_scheme != ref_labels:
            raise DatasetError(f"dataset {d.path}: its label scheme {d.label_scheme} differs from "
                               f"the {what}'s {ref_labels}")
