"""Small trained lifetime models for the export and online tests, made the way
`lifetime build-dataset` and `lifetime train` make them.

Nothing here defines a network or a file format.  A synthetic C++ program (hundreds
of small functions in namespaces, with parameter lists) is compiled with `-g`; a
synthetic profile of it is written with the real container writer; the real Beam job
(`pipeline.dataset.build_dataset`) symbolizes, labels and tokenizes it into a
dataset; `model.train.train` builds the network with `model/network.py` and writes
the model directory (model.keras, vocab.txt, config.json, metrics.json, ...).
So the export tests compile exactly what training produces.

The stacks are random call chains whose class follows from the allocation site's
class-name component and one caller token ("Grow" among the next three frames adds
3), with 10% label noise: a short training run gives a model with non-trivial
probabilities.  `edge_stacks` adds inputs the dataset job never produces (empty
frames, frames without tokens, very deep stacks, unknown names) for parity checks.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import random
import subprocess

# the files the C++ harness (tests/native/export_consumer) reads and writes; the
# export latency benchmark uses them too
from benchmarks.export_harness_files import (read_results, write_ids,  # noqa: F401
                                             write_stacks, write_vectors)

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

NUM_CLASSES = 8
# Namespaces of the generated program; none is `std` (the dataset job strips std::
# frames from the top of a stack as allocation machinery).
_NAMESPACES = ["proxy", "http", "edge", "absl", "grpc", "db", "cache", "io", "net"]
_NAMES = ["Parse", "Handle", "Alloc", "Push", "Insert", "Read", "Write", "Flush", "Grow",
          "Make", "Copy", "Encode", "Decode", "Resize", "Reserve", "Emplace"]
_TYPES = ["char", "int", "unsigned long", "std::string", "Request*", "Buffer&",
          "char const*"]
_NUM_FUNCTIONS = 320
_LOAD = 0x400000              # where the synthetic process "mapped" the program
_LIB_LOAD = 0x7f0000000000    # a mapped library whose file is gone: <libfoo...+?> frames
_BUILD_ID = "5eed5eed"
# Lifetime (ms) of class k's objects: T95 = 3 * 10^k < 10^(k+1); class 7 is never freed.
_CLASS_MS = [3.0 * 10 ** k for k in range(NUM_CLASSES - 1)]

# The session model's hyperparameters: HParams' defaults for everything that shapes the
# network (architecture, tokens_per_frame, embedding_dim, lstm_units; max_frames is the
# dataset's), a short schedule for the rest (little word dropout: the site's token
# decides the class).
TRAIN_SCHEDULE = dict(epochs=6, min_epochs=3, patience=2, batch_size=64,
                      learning_rate=0.02, unk_dropout=0.1, seed=7)


def _catalogue(seed: int = 11) -> list[tuple[str, str, str, list[str]]]:
    """(namespace, class, method, parameter types) of each generated function."""
    rng = random.Random(seed)
    seen, out = set(), []
    while len(out) < _NUM_FUNCTIONS:
        ns, cls = rng.choice(_NAMESPACES), rng.choice(_NAMES)
        method = rng.choice(_NAMES) + rng.choice(["", str(rng.randrange(40))])
        args = [rng.choice(_TYPES) for _ in range(rng.randrange(3))]
        if (ns, cls, method) not in seen:
            seen.add((ns, cls, method))
            out.append((ns, cls, method, args))
    return out


def build_program(out_dir: pathlib.Path) -> tuple[str, dict[tuple[str, str, str], int]]:
    """Compiles the synthetic program (non-PIE, -O0 -g: nothing inlined, every
    function larger than the return-address offset used below); returns its path
    and {(namespace, class, method): runtime address}."""
    from elftools.elf.elffile import ELFFile

    from core.symbolize import demangle

    cat = _catalogue()
    lines = ["#include <string>", "struct Request; struct Buffer;"]
    for ns, cls, method, args in cat:
        params = ", ".join(f"{t} a{i}" for i, t in enumerate(args))
        lines.append(f"namespace {ns} {{ namespace {cls} {{ __attribute__((noinline)) "
                     f"void* {method}({params}) {{ asm volatile(\"\"); return nullptr; }} }} }}")
    lines.append("int main() { return 0; }")
    out_dir.mkdir(parents=True, exist_ok=True)
    src, binary = out_dir / "synthetic_program.cc", out_dir / "synthetic_program"
    src.write_text("\n".join(lines) + "\n")
    subprocess.run(["g++", "-O0", "-g", "-no-pie", f"-Wl,--build-id=0x{_BUILD_ID}",
                    "-o", str(binary), str(src)], check=True, capture_output=True)
    with open(binary, "rb") as f:
        elf = ELFFile(f)
        base = next(seg for seg in elf.iter_segments()
                    if seg["p_type"] == "PT_LOAD" and seg["p_offset"] == 0)["p_vaddr"]
        by_prefix = {}
        for s in elf.get_section_by_name(".symtab").iter_symbols():
            if s["st_info"]["type"] == "STT_FUNC" and s["st_size"] > 8:
                by_prefix[demangle(s.name).split("(")[0]] = _LOAD + s["st_value"] - base
    addresses = {(ns, cls, m): by_prefix[f"{ns}::{cls}::{m}"] for ns, cls, m, _ in cat}
    return str(binary), addresses


def _label(chain: list[tuple[str, str, str]], rng: random.Random) -> int:
    """The class of a call chain (site first): the site's class name, a Grow caller."""
    label = _NAMES.index(chain[0][1]) % NUM_CLASSES
    if any("Grow" in "::".join(f) for f in chain[1:4]):
        label = min(NUM_CLASSES - 1, label + 3)
    if rng.random() < 0.1:
        label = rng.randrange(NUM_CLASSES)
    return label


def write_profile(path: pathlib.Path, binary: str, addresses: dict, contexts: int,
                  seed: int, sized: bool = False) -> None:
    """A profile of `contexts` random call chains, each with 1-4 sampled objects
    whose lifetimes put the chain in its class; `sized`: objects of 64 or 4096 bytes,
    a 4096-byte one 3 classes longer-lived (what only the size can tell)."""
    from profile_format import profile_pb2
    from profile_format import write_profile as write_chunks

    rng = random.Random(seed)
    functions = sorted(addresses)
    chunk = profile_pb2.ProfileChunk()
    h = chunk.header
    h.schema_version = profile_pb2.SCHEMA_VERSION
    h.program, h.version_label, h.pid = "synthetic_program", "v1", 1
    h.sampling_interval_bytes = 1024
    chunk.mappings.add(id=1, start=_LOAD, limit=_LOAD + 0x1000000, file_offset=0,
                       path=binary, build_id=bytes.fromhex(_BUILD_ID))
    chunk.mappings.add(id=2, start=_LIB_LOAD, limit=_LIB_LOAD + 0x100000, file_offset=0,
                       path="/nonexistent/lib/libfoo.so.1", build_id=b"\x01\x02")
    t = 1_000_000
    for stack_id in range(1, contexts + 1):
        depth = rng.choice([1, 2, 3, 5, 8, 12, 16, 20, 24])
        chain = [rng.choice(functions) for _ in range(depth)]
        label = _label(chain, rng)
        # Leaf first; each address a return address inside its function.
        stack = [addresses[f] + 4 for f in chain]
        if rng.random() < 0.05:   # an unnamed frame (a library whose file is gone)
            stack.insert(rng.randrange(1, len(stack) + 1), _LIB_LOAD + 0x1234)
        chunk.stacks.add(id=stack_id, addresses=stack)
        for _ in range(1 + rng.randrange(4)):
            size = rng.choice((64, 4096)) if sized else 64
            s = chunk.samples.add(stack_id=stack_id, size=size, weight=17.0,
                                  alloc_monotonic_ns=t, alloc_function=profile_pb2.MALLOC)
            cls = min(NUM_CLASSES - 1, label + 3) if size == 4096 else label
            if cls == NUM_CLASSES - 1:
                s.censored, s.observed_age_ns = True, 5_000_000_000
            else:
                s.free_monotonic_ns = t + int(_CLASS_MS[cls] * 1e6)
                s.free_function = profile_pb2.FREE
            t += 1000
    end = profile_pb2.ProfileChunk()
    end.trailer.end_reason = profile_pb2.END_EXIT
    write_chunks(str(path), [chunk, end])


def make_dataset(out: pathlib.Path, contexts: int = 4400, seed: int = 7,
                 max_frames: int | None = None,
                 profiles: list[str] | None = None, sized: bool = False) -> pathlib.Path:
    """A dataset directory written by the real `lifetime build-dataset` job, from a new
    synthetic profile or from `profiles`; `max_frames`: the context definition's frame
    limit (default: the job's), which the model trained on it reads; `sized`: objects of
    two sizes that change their class, contexts keyed on size (size_feature)."""
    from pipeline import dataset
    from core.context import ContextDefinition
    from pipeline.dataset import DatasetConfig

    if profiles is None:
        work = out.parent / (out.name + "-inputs")
        binary, addresses = build_program(work)
        (work / "profiles").mkdir(exist_ok=True)
        path = work / "profiles" / "synthetic.ltprof"
        write_profile(path, binary, addresses, contexts, seed, sized)
        profiles = [str(path)]
    config = DatasetConfig(eval_percent=25)
    if max_frames is not None or sized:
        config = dataclasses.replace(config, context=ContextDefinition.make(
            max_frames or ContextDefinition().max_frames, size_feature=sized))
    dataset.build_dataset([(p, "v1") for p in profiles], str(out), config)
    return out


def dataset_profiles(dataset_dir: pathlib.Path) -> list[str]:
    """The profile files a dataset was built from (its manifest's inputs)."""
    import json

    manifest = json.loads((pathlib.Path(dataset_dir) / "manifest.json").read_text())
    return [i["file"] for i in manifest["inputs"]]


def train_model_dir(dataset_dir: pathlib.Path, out: pathlib.Path, **hparams) -> pathlib.Path:
    """`lifetime train --dataset DATASET --out OUT` with HParams(**hparams)."""
    from model.hparams import HParams
    from model.train import train

    train([str(dataset_dir)], str(out), HParams(**hparams), verbose=0)
    return out


def make_model_dir(out: pathlib.Path, **hparams) -> pathlib.Path:
    """The session model: a dataset next to `out` (out/../dataset), then a model
    trained on it into `out`.  `hparams` override TRAIN_SCHEDULE (and HParams)."""
    ds = make_dataset(out.parent / "dataset")
    return train_model_dir(ds, out, **{**TRAIN_SCHEDULE, **hparams})


def training_dataset(model_dir: pathlib.Path) -> pathlib.Path:
    """The (first) dataset a model directory was trained on, from its config.json."""
    import json

    config = json.loads((pathlib.Path(model_dir) / "config.json").read_text())
    return pathlib.Path(config["training_datasets"][0]["path"])


def eval_stacks(model_dir: pathlib.Path) -> list[list[str]]:
    """The frames of the eval split of the dataset the model was trained on."""
    from model.data import load_dataset

    return [list(f) for f in load_dataset(str(training_dataset(model_dir))).splits["eval"].frames]


def edge_stacks(stacks: list[list[str]]) -> list[list[str]]:
    """Inputs the dataset job does not produce, derived from real stacks: an empty
    frame mid-stack, a frame with no tokens, unknown names, one very long frame,
    stacks deeper than any max_frames, a single frame."""
    out = []
    for i, s in enumerate(stacks[:40]):
        kind = i % 6
        if kind == 0:
            out.append(s[:1] + [""] + s[1:])
        elif kind == 1:
            out.append(s[:2] + ["::()<>"] + s[2:])
        elif kind == 2:
            out.append([f"zz_unknown{i}::Nowhere{i}(Thing{i})"] + s)
        elif kind == 3:
            out.append([" ".join([s[0]] * 12)] + s[1:])
        elif kind == 4:
            out.append((s * 80)[:80])
        else:
            out.append(s[:1])
    return out


def keras_probabilities(model_dir: pathlib.Path, stacks: list[list[str]]):
    """(ids [n, max_tokens], probabilities [n, C]) of the saved model, through the
    model's own input layout (model/features.py) and loader (model/io.py)."""
    import numpy as np

    from model import io
    from model.features import encode_frames

    model, config, vocab = io.load_model_dir(str(model_dir))
    hp = io.hparams_of(config)
    ids = np.stack([encode_frames(s, vocab, hp) for s in stacks]).astype(np.int32)
    return ids, model.predict(ids, batch_size=256, verbose=0)


def served_classes(model_dir: pathlib.Path, stacks, probs):
    """The classes the model is served with on these contexts (STACKS: their frames;
    model/backoff.py): argmax, or the back-off table's class where the model is unsure or
    the site pure."""
    import numpy as np

    from model import io

    backoff = io.read_model_dir(str(model_dir)).backoff
    return backoff.apply(probs, stacks) if backoff is not None else np.argmax(probs, -1)


if __name__ == "__main__":
    import sys

    print(make_model_dir(pathlib.Path(sys.argv[1]),
                         architecture=sys.argv[2] if len(sys.argv) > 2 else "frames"))
