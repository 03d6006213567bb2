"""The fixed-shape serving graph that XLA compiles: `token_ids` int32 [1, max_tokens] ->
`probabilities` float32 [1, num_classes].

Two routes:

- "folded" (default when the model has the contract's layers): the model's weights
  become constants of a graph written for a single prediction.  The embedding and the
  LSTM input projection are folded into one table, P = E @ W_x (the mean of projected
  rows equals the projection of the mean), so a step's input is a gather and a sum;
  one loop runs the recurrence over the architecture's present steps
  (model/architectures/: max_frames steps of a frame's slots, or one step per token
  slot).  The result is checked against the Keras model before it is used (`verify`).
- "keras": the Keras model itself through keras.export.ExportArchive (any model; slower).
"""

from __future__ import annotations

import dataclasses
import logging

import numpy as np

from core.errors import LifetimeError
from model import architectures

# TensorFlow and Keras are imported inside functions: `lifetime --help` must not pay for them.

log = logging.getLogger("export.graph")

FEED = "token_ids"
FETCH = "probabilities"


class UnsupportedModel(LifetimeError):
    """The folded route does not apply to this model (the keras route still does)."""


@dataclasses.dataclass
class LstmWeights:
    embedding: np.ndarray        # [vocab, E]
    kernel: np.ndarray           # [E, 4U] (gates i, f, c, o)
    recurrent: np.ndarray        # [U, 4U]
    bias: np.ndarray             # [4U]
    dense_kernel: np.ndarray     # [U, C]
    dense_bias: np.ndarray       # [C]
    go_backwards: bool = False   # the LSTM reads the steps last to first


def _walk(layer):
    yield layer
    for sub in getattr(layer, "_layers", None) or []:
        if sub is not layer:
            yield from _walk(sub)


def extract_weights(model) -> LstmWeights:
    """The Embedding, LSTM and final softmax Dense of a contract model, or UnsupportedModel."""
    import keras

    layers = list(dict.fromkeys(_walk(model)))
    by_type = {t: [l for l in layers if type(l) is t]
               for t in (keras.layers.Embedding, keras.layers.LSTM, keras.layers.Dense)}
    emb, lstm, dense = (by_type[t] for t in (keras.layers.Embedding, keras.layers.LSTM,
                                             keras.layers.Dense))
    if len(emb) != 1 or len(lstm) != 1 or len(dense) != 1:
        raise UnsupportedModel(f"expected one Embedding, one LSTM and one Dense layer, found "
                               f"{len(emb)}, {len(lstm)}, {len(dense)}")
    emb, lstm, dense = emb[0], lstm[0], dense[0]
    cfg = lstm.get_config()
    wanted = {"activation": "tanh", "recurrent_activation": "sigmoid",
              "return_sequences": False, "return_state": False, "stateful": False}
    bad = {k: cfg.get(k) for k, v in wanted.items() if cfg.get(k, v) != v}
    if bad:
        raise UnsupportedModel(f"LSTM configuration not foldable: {bad}")
    dcfg = dense.get_config()
    if dcfg.get("activation") != "softmax":
        raise UnsupportedModel(f"final Dense activation is {dcfg.get('activation')!r}, "
                               "not softmax")
    cell = lstm.cell
    units = cell.units
    bias = (np.asarray(cell.bias.numpy()) if cell.use_bias
            else np.zeros(4 * units, np.float32))
    dbias = (np.asarray(dense.bias.numpy()) if dense.use_bias
             else np.zeros(dense.units, np.float32))
    return LstmWeights(embedding=np.asarray(emb.embeddings.numpy(), np.float32),
                       kernel=np.asarray(cell.kernel.numpy(), np.float32),
                       recurrent=np.asarray(cell.recurrent_kernel.numpy(), np.float32),
                       bias=bias.astype(np.float32),
                       dense_kernel=np.asarray(dense.kernel.numpy(), np.float32),
                       dense_bias=dbias.astype(np.float32),
                       go_backwards=bool(cfg.get("go_backwards", False)))


def folded_function(w: LstmWeights, architecture: str, max_frames: int,
                    tokens_per_frame: int):
    """A tf.function(token_ids [1, max_tokens]) -> {"probabilities": [1, C]} on constants.

    Written for one prediction on one core (issue 23: p50 12 -> 4 us on Redis stacks,
    benchmarks/export_latency.py); each choice was measured against the plain unrolled
    graph:
      * one loop over the steps (an XLA While), not 16 unrolled copies: the copies were
        85 KiB of code, more than the L1 instruction cache;
      * the loop runs from the first present step to the last one only (absent steps
        keep h = c = 0 or leave them unchanged, as Keras's mask does), and a step
        gathers and averages its own frame's rows, so padding costs nothing;
      * the four gates go through one tanh: sigmoid(x) = 0.5 + 0.5 tanh(x / 2), with the
        1/2 folded into the i, f, o columns of the weights (exact: a power of two),
        instead of three sigmoids (an exp and a division each) and a tanh.
    """
    import tensorflow as tf

    units = w.recurrent.shape[0]
    # Folded table: P[id] = E[id] @ W_x, in float64 then rounded once; P[PAD] = 0 so
    # padding adds nothing to a frame's sum.
    table = (w.embedding.astype(np.float64) @ w.kernel.astype(np.float64)).astype(np.float32)
    table[0] = 0.0
    # Gate order i, f, g, o: the sigmoid gates take x / 2, the cell input g takes x.
    half = np.full(4 * units, 0.5, np.float32)
    half[2 * units:3 * units] = 1.0
    table, recurrent, bias = table * half, w.recurrent * half, w.bias * half
    if architecture not in architectures.names():
        raise UnsupportedModel(f"unknown architecture {architecture!r}")
    # The architecture says how its LSTM steps map onto the token slots (model/architectures/).
    steps, width = architectures.get(architecture).folded_steps(max_frames, tokens_per_frame)

    @tf.function(input_signature=[tf.TensorSpec([1, steps * width], tf.int32, name=FEED)],
                 jit_compile=False, autograph=False)
    def serve(token_ids):
        p = tf.constant(table)                                         # [V, 4U]
        wh = tf.constant(recurrent)                                    # [U, 4U]
        b = tf.constant(bias)
        ids = tf.reshape(token_ids, [steps, width])
        if w.go_backwards:                                             # processing order
            ids = tf.reverse(ids, [0])
        count = tf.reduce_sum(tf.cast(tf.not_equal(ids, 0), tf.float32), axis=1)  # [S]
        order = tf.range(steps)
        present = count > 0.0
        first = tf.reduce_min(tf.where(present, order, steps))
        last = tf.reduce_max(tf.where(present, order, -1))

        def step(t, h, c):
            rows = tf.gather(p, tf.gather(ids, t))                     # [W, 4U]
            n = tf.gather(count, t)
            x = tf.reduce_sum(rows, axis=0) / tf.maximum(n, 1.0) + b   # frame mean
            z = tf.tanh(tf.reshape(x, [1, 4 * units]) + tf.matmul(h, wh))
            i = 0.5 * z[:, :units] + 0.5
            f = 0.5 * z[:, units:2 * units] + 0.5
            g = z[:, 2 * units:3 * units]
            o = 0.5 * z[:, 3 * units:] + 0.5
            c_new = f * c + i * g
            h_new = o * tf.tanh(c_new)
            keep = n > 0.0                                             # absent frame: skip
            return t + 1, tf.where(keep, h_new, h), tf.where(keep, c_new, c)

        _, h, _ = tf.while_loop(lambda t, h, c: t <= last, step,
                                [first, tf.zeros([1, units]), tf.zeros([1, units])])
        logits = tf.matmul(h, tf.constant(w.dense_kernel)) + tf.constant(w.dense_bias)
        return {FETCH: tf.nn.softmax(logits)}

    return serve


def verify(model, fn, inputs: np.ndarray, atol: float = 2e-5) -> float:
    """Max |Δp| between the Keras model and `fn` over `inputs` [n, max_tokens]."""
    import tensorflow as tf

    want = np.asarray(model.predict(inputs, verbose=0, batch_size=256))
    got = np.concatenate([fn(tf.constant(inputs[i:i + 1]))[FETCH].numpy()
                          for i in range(len(inputs))])
    delta = float(np.max(np.abs(want - got)))
    if not delta <= atol:
        raise UnsupportedModel(f"folded graph differs from the Keras model: max |dp| "
                               f"{delta:.3g} > {atol}")
    return delta


def probe_inputs(vocab_size: int, max_frames: int, tokens_per_frame: int, n: int = 96,
                 seed: int = 0) -> np.ndarray:
    """Random frame-slot inputs: random depths, partly filled frames, empty frames mid-stack."""
    rng = np.random.default_rng(seed)
    out = np.zeros((n, max_frames * tokens_per_frame), np.int32)
    for k in range(n):
        depth = int(rng.integers(0, max_frames + 1)) if k else 0
        for i in range(depth):
            if rng.random() < 0.1:
                continue  # empty frame
            m = int(rng.integers(1, tokens_per_frame + 1))
            out[k, i * tokens_per_frame: i * tokens_per_frame + m] = rng.integers(
                1, vocab_size, m)
    return out
