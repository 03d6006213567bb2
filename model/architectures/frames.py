""""frames" (the default and the export's): the mean of each frame's token embeddings,
then an LSTM over the frames (max_frames steps: XLA AOT costs ~1.2-3 us per step)."""

from __future__ import annotations

from core.tokenizer import PAD_ID
from model.architectures import Architecture, register

# Keras is imported inside build: `lifetime --help` must not pay for TensorFlow.


def build(ids, hp, num_classes):
    """Per-frame masked mean of token embeddings, then an LSTM over the frames.

    The masks are computed with explicit ops (not Keras mask propagation, which
    does not survive the Reshape): a token counts iff it is not PAD, a frame is
    present iff it has a token. LSTM steps = max_frames."""
    from keras import layers, ops

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


def describe(hp) -> str:
    return (f"Embedding({hp.vocab_size}, {hp.embedding_dim}) -> per-frame masked mean of token "
            f"embeddings -> LSTM({hp.lstm_units}) over frames ({hp.max_frames} steps)")


FRAMES = register(Architecture(
    name="frames", help="LSTM over the frames' mean token embeddings (the export default)",
    build=build, folded_steps=lambda max_frames, tokens_per_frame: (max_frames, tokens_per_frame),
    describe=describe))
