""""tokens": an LSTM over every token slot (max_tokens steps), for comparison."""

from __future__ import annotations

from model.architectures import Architecture, register

# Keras is imported inside build: `lifetime --help` must not pay for TensorFlow.


def build(ids, hp, num_classes):
    """An LSTM over every token slot, PAD masked (LSTM steps = max_tokens)."""
    from keras import layers

    emb = layers.Embedding(hp.vocab_size, hp.embedding_dim, mask_zero=True, name="embedding")(ids)
    state = layers.LSTM(hp.lstm_units, go_backwards=hp.site_last, name="lstm")(emb)
    return layers.Dense(num_classes, activation="softmax", name="classes")(state)


def describe(hp) -> str:
    return (f"Embedding({hp.vocab_size}, {hp.embedding_dim}) -> LSTM({hp.lstm_units}) over "
            f"tokens ({hp.max_tokens} steps)")


TOKENS = register(Architecture(
    name="tokens", help="LSTM over every token slot (max_tokens steps; slower to serve)",
    build=build,
    # One slot per step: the "mean" of a single slot is its embedding, and a PAD slot is
    # a masked step, as Embedding(mask_zero=True) makes it.
    folded_steps=lambda max_frames, tokens_per_frame: (max_frames * tokens_per_frame, 1),
    describe=describe))
