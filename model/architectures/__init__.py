"""The model architectures, one module each, found by name (in the style of
ml-compiler-opt's problem registry).

An architecture says how Keras builds the network (`build`, model/network.py) and
how the export folds it into a single-prediction graph (`folded_steps`,
export/graph.py): the folded graph reads `steps` LSTM inputs of `width` token slots
each, a step's input being the masked mean of its slots' embeddings.  Both sides
must describe the same network; tests/test_export.py checks every registered
architecture.  A new architecture is a new module here, imported at the bottom.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from core.errors import UsageError


@dataclasses.dataclass(frozen=True)
class Architecture:
    name: str
    help: str                                   # one line, for `lifetime train --help`
    # (token_ids keras input, HParams, num_classes) -> softmax output tensor
    build: Callable
    # (max_frames, tokens_per_frame) -> (LSTM steps, token slots per step)
    folded_steps: Callable[[int, int], tuple[int, int]]
    # HParams -> the model card's one-line description of the layers
    describe: Callable


_REGISTRY: dict[str, Architecture] = {}


def register(arch: Architecture) -> Architecture:
    if arch.name in _REGISTRY:
        raise ValueError(f"architecture {arch.name!r} registered twice")
    _REGISTRY[arch.name] = arch
    return arch


def names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def get(name: str) -> Architecture:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UsageError(f"unknown architecture {name!r} "
                         f"(expected one of {', '.join(_REGISTRY)})") from None


from model.architectures import frames, tokens  # noqa: E402,F401  (they register themselves)
