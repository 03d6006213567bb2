"""The Keras 3 model (llama-paper §2.2, Fig. 5): embedding -> LSTM -> softmax.

Only standard layers and keras.ops, so `keras.export.ExportArchive` and
`saved_model_cli aot_compile_cpu` can compile it. Input "token_ids": int32
[batch, max_tokens] in the frame-slot layout of model/features.py. Output:
softmax probabilities float32 [batch, num_classes].
"""

from __future__ import annotations

import keras
from keras import layers, ops

from pipeline.tokenizer import PAD_ID, UNK_ID


def build_model(hp, num_classes: int) -> keras.Model:
    ids = keras.Input(shape=(hp.max_tokens,), dtype="int32", name="token_ids")
    if hp.architecture == "frames":
        probs = _frames(ids, hp, num_classes)
    else:
        probs = _tokens(ids, hp, num_classes)
    return keras.Model(ids, probs, name=f"lifetime_{hp.architecture}")


def _frames(ids, hp, num_classes):
    """Per-frame masked mean of token embeddings, then an LSTM over the frames.

    The masks are computed with explicit ops (not Keras mask propagation, which
    does not survive the Reshape): a token counts iff it is not PAD, a frame is
    present iff it has a token. LSTM steps = max_frames."""
    F, T = hp.max_frames, hp.tokens_per_frame
    emb = layers.Embedding(hp.vocab_size, hp.embedding_dim, name="embedding")(ids)  # [B, F*T, E]
    emb = layers.Reshape((F, T, hp.embedding_dim), name="frame_slots")(emb)
    tok_mask = ops.cast(ops.not_equal(ops.reshape(ids, (-1, F, T)), PAD_ID), "float32")
    counts = ops.sum(tok_mask, axis=-1, keepdims=True)                         # [B, F, 1]
    pooled = ops.sum(emb * ops.expand_dims(tok_mask, -1), axis=2) / ops.maximum(counts, 1.0)
    frame_present = ops.greater(ops.squeeze(counts, -1), 0.0)                   # [B, F]
    state = layers.LSTM(hp.lstm_units, go_backwards=hp.site_last, name="lstm")(
        pooled, mask=frame_present)
    return layers.Dense(num_classes, activation="softmax", name="classes")(state)


def _tokens(ids, hp, num_classes):
    """An LSTM over every token slot, PAD masked (LSTM steps = max_tokens)."""
    emb = layers.Embedding(hp.vocab_size, hp.embedding_dim, mask_zero=True, name="embedding")(ids)
    state = layers.LSTM(hp.lstm_units, go_backwards=hp.site_last, name="lstm")(emb)
    return layers.Dense(num_classes, activation="softmax", name="classes")(state)


class TokenDropout(layers.Layer):
    """Training-only word dropout: each non-PAD id becomes UNK with probability `rate`.

    It wraps the model during `fit` only (model/train.py) and is not part of the
    saved model, so the exported graph stays exactly embedding -> LSTM -> softmax."""

    def __init__(self, rate: float, seed: int, **kwargs):
        super().__init__(**kwargs)
        self.rate = rate
        self.seed_generator = keras.random.SeedGenerator(seed)

    def call(self, ids, training=None):
        if not training or self.rate <= 0:
            return ids
        drop = ops.less(keras.random.uniform(ops.shape(ids), seed=self.seed_generator), self.rate)
        drop = ops.logical_and(drop, ops.not_equal(ids, PAD_ID))
        return ops.where(drop, ops.full_like(ids, UNK_ID), ids)


def training_wrapper(model: keras.Model, hp) -> keras.Model:
    """The model with TokenDropout in front, sharing its weights."""
    ids = keras.Input(shape=(hp.max_tokens,), dtype="int32", name="token_ids")
    dropped = TokenDropout(hp.unk_dropout, hp.seed, name="unk_dropout")(ids)
    return keras.Model(ids, model(dropped), name="lifetime_training")
