"""Model input layout ("frame slots"): the contract the C++ mirror (export/) follows.

The input is one int32 vector of length max_tokens = max_frames * tokens_per_frame.
Frame i of the stack (i = 0 is the top: the allocation site, allocator frames
already stripped by the dataset job) fills slots [i*T, i*T + T) with the ids of its
first T = tokens_per_frame tokens (`core.tokenizer.frame_tokens`, then
`Vocabulary.ids`, so unknown tokens are UNK = 1); unused slots are PAD = 0.

Truncation policy:
  * frames beyond max_frames are dropped from the *bottom* (thread start, main):
    the allocation-site end of the stack is what carries the most information;
  * tokens beyond tokens_per_frame are dropped from the *end* of a frame: the
    qualified name comes first, parameter types last (C++ demangled names);
  * no SEP token appears in the layout: the slot position is the frame boundary;
  * a frame with no tokens is an all-PAD slot, which the model treats as absent.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from core import tokenizer
from core.tokenizer import PAD_ID, SEP_ID


def _place(frame_ids: Iterable[Sequence[int]], max_frames: int, tokens_per_frame: int) -> np.ndarray:
    out = np.zeros(max_frames * tokens_per_frame, dtype=np.int32)
    for i, ids in enumerate(frame_ids):
        if i >= max_frames:
            break
        ids = list(ids)[:tokens_per_frame]
        out[i * tokens_per_frame: i * tokens_per_frame + len(ids)] = ids
    return out


def encode_frames(frames: Sequence[str], vocab: tokenizer.Vocabulary, hp) -> np.ndarray:
    """Symbolized frames (top of stack first) -> int32[max_tokens] frame-slot layout."""
    return _place((vocab.ids(tokenizer.frame_tokens(f)) for f in frames),
                  hp.max_frames, hp.tokens_per_frame)


def split_frames(token_ids: Sequence[int]) -> list[list[int]]:
    """A dataset's flat `token_ids` (frames joined by SEP) -> one id list per frame."""
    frames: list[list[int]] = [[]]
    for t in token_ids:
        if t == SEP_ID:
            frames.append([])
        else:
            frames[-1].append(int(t))
    return frames if token_ids is not None and len(token_ids) else []


def layout_from_token_ids(token_ids: Sequence[int], hp) -> np.ndarray:
    """The dataset feature `token_ids` -> the same layout `encode_frames` gives."""
    return _place(split_frames(token_ids), hp.max_frames, hp.tokens_per_frame)


def frame_mask(layout: np.ndarray, hp) -> np.ndarray:
    """[..., max_frames] bool: a frame is present iff it holds a non-PAD token."""
    shaped = np.asarray(layout).reshape(*np.shape(layout)[:-1], hp.max_frames, hp.tokens_per_frame)
    return (shaped != PAD_ID).any(axis=-1)
