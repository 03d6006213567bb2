"""A small trained lifetime model in the MODEL_DIR contract, for the export tests.

Until model/ exists this builds the contract's default "frames" architecture itself:
Embedding -> per-frame masked mean pool -> LSTM over frames (frame mask) -> softmax.
The data are synthetic stacks whose class follows from the allocation site and one
caller token, so a short training run gives a model with non-trivial probabilities.
"""

from __future__ import annotations

import json
import os
import pathlib
import random

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from pipeline import tokenizer  # noqa: E402

NUM_CLASSES = 8
CLASS_NAMES = ["10 ms", "100 ms", "1 s", "10 s", "100 s", "1000 s", ">=1000 s", "inf"]
_NAMESPACES = ["proxy", "http", "edge", "std", "absl", "grpc", "db", "cache", "io", "net"]
_NAMES = ["Parse", "Handle", "Alloc", "Push", "Insert", "Read", "Write", "Flush", "Grow",
          "Make", "Copy", "Encode", "Decode", "Resize", "Reserve", "Emplace"]
_TYPES = ["char", "int", "unsigned long", "std::string", "Request*", "Buffer&", "void"]


def _frame(rng: random.Random) -> str:
    ns = rng.choice(_NAMESPACES)
    name = rng.choice(_NAMES) + rng.choice(["", str(rng.randrange(40))])
    args = ", ".join(rng.choice(_TYPES) for _ in range(rng.randrange(3)))
    return f"{ns}::{rng.choice(_NAMES)}::{name}({args})"


def synthetic_stacks(n: int, seed: int) -> list[tuple[list[str], int]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        depth = rng.choice([1, 2, 3, 5, 8, 12, 16, 20, 24])
        frames = [_frame(rng) for _ in range(depth)]
        if rng.random() < 0.05:
            frames.insert(rng.randrange(len(frames)), "")       # an empty frame mid-stack
        if rng.random() < 0.05:
            frames.append("<libfoo.so+0x1234>")
        site = next(f for f in frames if f).split("::")[1]
        label = _NAMES.index(site) % NUM_CLASSES
        if any("Grow" in f for f in frames[1:4]):
            label = min(NUM_CLASSES - 1, label + 3)
        if rng.random() < 0.1:
            label = rng.randrange(NUM_CLASSES)
        out.append((frames, label))
    return out


def frame_slots(frames: list[str], vocab: tokenizer.Vocabulary, max_frames: int,
                tokens_per_frame: int) -> list[int]:
    """The contract's input layout (what export/ mirrors in C++)."""
    ids = [0] * (max_frames * tokens_per_frame)
    for i, frame in enumerate(frames[:max_frames]):
        toks = vocab.ids(tokenizer.frame_tokens(frame)[:tokens_per_frame])
        ids[i * tokens_per_frame: i * tokens_per_frame + len(toks)] = toks
    return ids


def build_frames_model(vocab_size: int, max_frames: int, tokens_per_frame: int,
                       embedding_dim: int, lstm_units: int, num_classes: int):
    import keras
    from keras import ops

    f, t, e = max_frames, tokens_per_frame, embedding_dim
    ids = keras.Input(shape=(f * t,), dtype="int32", name="token_ids")
    emb = keras.layers.Embedding(vocab_size, e, name="embedding")(ids)
    x = ops.reshape(emb, (-1, f, t, e))
    mask = ops.cast(ops.not_equal(ops.reshape(ids, (-1, f, t, 1)), 0), "float32")
    count = ops.sum(mask, axis=2)
    pooled = ops.sum(x * mask, axis=2) / ops.maximum(count, 1.0)
    frame_mask = ops.greater(ops.squeeze(count, -1), 0.0)
    h = keras.layers.LSTM(lstm_units, name="lstm")(pooled, mask=frame_mask)
    out = keras.layers.Dense(num_classes, activation="softmax", name="classes")(h)
    return keras.Model(ids, out, name="lifetime_frames")


def build_tokens_model(vocab_size: int, max_tokens: int, embedding_dim: int,
                       lstm_units: int, num_classes: int):
    import keras

    ids = keras.Input(shape=(max_tokens,), dtype="int32", name="token_ids")
    x = keras.layers.Embedding(vocab_size, embedding_dim, mask_zero=True, name="embedding")(ids)
    h = keras.layers.LSTM(lstm_units, name="lstm")(x)
    out = keras.layers.Dense(num_classes, activation="softmax", name="classes")(h)
    return keras.Model(ids, out, name="lifetime_tokens")


def make_model_dir(out: pathlib.Path, architecture: str = "frames", train: int = 3000,
                   eval_: int = 1000, epochs: int = 4, max_frames: int = 16,
                   tokens_per_frame: int = 8, embedding_dim: int = 32, lstm_units: int = 32,
                   seed: int = 7) -> pathlib.Path:
    """Trains a small model and writes MODEL_DIR (+ eval.json: the eval split's stacks)."""
    import keras
    import numpy as np

    keras.utils.set_random_seed(seed)
    out.mkdir(parents=True, exist_ok=True)
    train_set = synthetic_stacks(train, seed)
    eval_set = synthetic_stacks(eval_, seed + 1)
    counts: dict[str, int] = {}
    for frames, _ in train_set:
        for tok in tokenizer.tokenize(frames):
            counts[tok] = counts.get(tok, 0) + 1
    ranked = sorted(counts, key=lambda tok: (-counts[tok], tok))[:400]
    vocab = tokenizer.Vocabulary.from_ranked(ranked)
    vocab.save(str(out / "vocab.txt"))
    f, t = max_frames, tokens_per_frame

    def arrays(data):
        x = np.array([frame_slots(fr, vocab, f, t) for fr, _ in data], dtype=np.int32)
        return x, np.array([lab for _, lab in data], dtype=np.int32)

    if architecture == "frames":
        model = build_frames_model(len(vocab), f, t, embedding_dim, lstm_units, NUM_CLASSES)
    else:
        model = build_tokens_model(len(vocab), f * t, embedding_dim, lstm_units, NUM_CLASSES)
    model.compile(optimizer=keras.optimizers.Adam(5e-3),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    x, y = arrays(train_set)
    model.fit(x, y, epochs=epochs, batch_size=64, verbose=0)
    ex, ey = arrays(eval_set)
    acc = float(np.mean(np.argmax(model.predict(ex, verbose=0), -1) == ey))
    model.save(str(out / "model.keras"))
    config = {
        "format": "lifetime-model-v1",
        "hyperparameters": {"architecture": architecture, "max_frames": f,
                            "tokens_per_frame": t, "max_tokens": f * t,
                            "vocab_size": len(vocab), "embedding_dim": embedding_dim,
                            "lstm_units": lstm_units},
        "class_names": CLASS_NAMES,
        "label_scheme": {"clock": "wall", "unit": "ms",
                         "boundaries": [1e1, 1e2, 1e3, 1e4, 1e5, 1e6],
                         "class_names": CLASS_NAMES, "rule": "T95 < boundary"},
        "tokenizer_version": tokenizer.TOKENIZER_VERSION,
    }
    (out / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    (out / "metrics.json").write_text(json.dumps({"eval": {"accuracy": acc}}) + "\n")
    (out / "model_card.md").write_text(
        f"# Test lifetime model ({architecture})\n\nSynthetic stacks; eval accuracy "
        f"{acc:.3f}.\n")
    (out / "eval.json").write_text(json.dumps(
        [{"frames": fr, "label": lab} for fr, lab in eval_set]))
    return out


if __name__ == "__main__":
    import sys

    print(make_model_dir(pathlib.Path(sys.argv[1]),
                         sys.argv[2] if len(sys.argv) > 2 else "frames"))


# ---------------------------------------------------------------------------------
# Files the C++ harness (tests/native/export_consumer/export_harness.cc) reads/writes.

def _stack_bytes(frames: list[str]) -> bytes:
    import struct

    out = [struct.pack("<I", len(frames))]
    for f in frames:
        b = f.encode("utf-8")
        out.append(struct.pack("<I", len(b)) + b)
    return b"".join(out)


def write_stacks(path: pathlib.Path, stacks: list[list[str]]) -> pathlib.Path:
    import struct

    path.write_bytes(struct.pack("<I", len(stacks)) + b"".join(map(_stack_bytes, stacks)))
    return path


def write_ids(path: pathlib.Path, ids) -> pathlib.Path:
    import struct

    import numpy as np

    ids = np.ascontiguousarray(ids, dtype="<i4")
    path.write_bytes(struct.pack("<II", *ids.shape) + ids.tobytes())
    return path


def write_vectors(path: pathlib.Path, vocabulary: list[str], cases: list[list[str]]) -> None:
    import struct

    path.write_bytes(_stack_bytes(vocabulary) + struct.pack("<I", len(cases))
                     + b"".join(map(_stack_bytes, cases)))


def read_results(path: pathlib.Path, num_classes: int):
    """(classes [n], probabilities [n, C]) from the harness's OUT file."""
    import numpy as np

    rec = np.dtype([("cls", "<i4"), ("p", "<f4", (num_classes,))])
    data = np.frombuffer(path.read_bytes(), dtype=rec)
    return data["cls"].copy(), data["p"].copy()
