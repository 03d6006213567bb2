"""The files the C++ export harness (tests/native/export_consumer/export_harness.cc) reads
and writes: stacks of frame strings, token-id matrices, tokenizer vectors, results.
Used by tests/test_export.py and benchmarks/export_latency.py."""

from __future__ import annotations

import pathlib
import struct

import numpy as np


def _stack_bytes(frames: list[str]) -> bytes:
    out = [struct.pack("<I", len(frames))]
    for f in frames:
        b = f.encode("utf-8")
        out.append(struct.pack("<I", len(b)) + b)
    return b"".join(out)


def write_stacks(path: pathlib.Path, stacks: list[list[str]]) -> pathlib.Path:
    path.write_bytes(struct.pack("<I", len(stacks)) + b"".join(map(_stack_bytes, stacks)))
    return path


def write_ids(path: pathlib.Path, ids) -> pathlib.Path:
    ids = np.ascontiguousarray(ids, dtype="<i4")
    path.write_bytes(struct.pack("<II", *ids.shape) + ids.tobytes())
    return path


def write_vectors(path: pathlib.Path, vocabulary: list[str], cases: list[list[str]]) -> None:
    path.write_bytes(_stack_bytes(vocabulary) + struct.pack("<I", len(cases))
                     + b"".join(map(_stack_bytes, cases)))


def read_results(path: pathlib.Path, num_classes: int):
    """(classes [n], probabilities [n, C]) from the harness's OUT file."""
    rec = np.dtype([("cls", "<i4"), ("p", "<f4", (num_classes,))])
    data = np.frombuffer(path.read_bytes(), dtype=rec)
    return data["cls"].copy(), data["p"].copy()
