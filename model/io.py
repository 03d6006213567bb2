"""The model directory: what `lifetime train` writes and everything else reads.

    model.keras     the Keras 3 model (input "token_ids" int32 [B, max_tokens],
                    output softmax float32 [B, num_classes])
    vocab.txt       the training datasets' vocabulary, same format (line = id)
    config.json     format, hyperparameters, class names, label scheme, tokenizer
                    version, training datasets
    metrics.json    held-out (eval split) metrics of the model and the baselines
    model_card.md   the same for people
    train_log.json  per-epoch history and wall time (not deterministic)
"""

from __future__ import annotations

import json
import os

from pipeline.tokenizer import Vocabulary
from lifetime.errors import LifetimeError

FORMAT = "lifetime-model-v1"
MODEL_FILE, VOCAB_FILE, CONFIG_FILE = "model.keras", "vocab.txt", "config.json"
METRICS_FILE, CARD_FILE, LOG_FILE = "metrics.json", "model_card.md", "train_log.json"


class ModelDirError(LifetimeError):
    """A model directory that cannot be loaded."""


def write_json(path: str, value) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2, sort_keys=True)
        f.write("\n")


def load_config(path: str) -> dict:
    if not os.path.isdir(path):
        raise ModelDirError(f"model {path}: no such directory")
    config_path = os.path.join(path, CONFIG_FILE)
    try:
        with open(config_path, encoding="utf-8") as f:
            config = json.load(f)
    except FileNotFoundError:
        raise ModelDirError(f"model {path}: no {CONFIG_FILE} (not written by `lifetime train`?)")
    except json.JSONDecodeError as e:
        raise ModelDirError(f"model {path}: {CONFIG_FILE} is not JSON ({e})") from e
    if config.get("format") != FORMAT:
        raise ModelDirError(f"model {path}: format {config.get('format')!r}, expected {FORMAT!r}")
    return config


def load_model_dir(path: str):
    """-> (keras model, config dict, Vocabulary); ModelDirError with the reason otherwise."""
    config = load_config(path)
    vocab_path = os.path.join(path, VOCAB_FILE)
    if not os.path.exists(vocab_path):
        raise ModelDirError(f"model {path}: no {VOCAB_FILE}")
    try:
        vocab = Vocabulary.load(vocab_path)
    except ValueError as e:
        raise ModelDirError(f"model {path}: {e}") from e
    size = config["hyperparameters"]["vocab_size"]
    if len(vocab) != size:
        raise ModelDirError(f"model {path}: {VOCAB_FILE} has {len(vocab)} tokens, the model "
                            f"was trained with {size}")
    model_path = os.path.join(path, MODEL_FILE)
    if not os.path.exists(model_path):
        raise ModelDirError(f"model {path}: no {MODEL_FILE}")
    import keras

    try:
        model = keras.saving.load_model(model_path, compile=False)
    except Exception as e:  # zip, HDF5 and deserialization errors all mean "corrupt"
        raise ModelDirError(f"model {path}: cannot load {MODEL_FILE}, corrupt or not a Keras "
                            f"model file ({type(e).__name__}: {e})") from e
    return model, config, vocab


def context_of(config: dict, path: str = ""):
    """The model's context definition (how its training stacks were cut)."""
    from pipeline.context import ContextDefinition, ContextDefinitionError

    try:
        return ContextDefinition.from_json(config.get("context"), where=f"model {path}".strip())
    except ContextDefinitionError as e:
        raise ModelDirError(str(e)) from e


def hparams_of(config: dict):
    from model.hparams import HParams

    return HParams.from_json(config["hyperparameters"])
