"""The Keras 3 model (llama-paper §2.2, Fig. 5): embedding -> LSTM -> softmax; each
architecture's layers are in model/architectures/.

Only standard layers and keras.ops, so `keras.export.ExportArchive` and
`saved_model_cli aot_compile_cpu` can compile it. Input "token_ids": int32
[batch, max_tokens] in the frame-slot layout of model/features.py. Output:
softmax probabilities float32 [batch, num_classes].
"""

from __future__ import annotations

import keras
from keras import layers, ops

from model import architectures
from core.tokenizer import PAD_ID, UNK_ID


def build_model(hp, num_classes: int) -> keras.Model:
    """The network of `hp.architecture` (model/architectures/)."""
    ids = keras.Input(shape=(hp.max_tokens,), dtype="int32", name="token_ids")
    probs = architectures.get(hp.architecture).build(ids, hp, num_classes)
    return keras.Model(ids, probs, name=f"lifetime_{hp.architecture}")


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
