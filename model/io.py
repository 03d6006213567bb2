"""The model directory: what `lifetime train` writes and everything else reads.

    model.keras     the Keras 3 model (input "token_ids" int32 [B, max_tokens],
                    output softmax float32 [B, num_classes])
    vocab.txt       the training datasets' vocabulary, same format (line = id)
    config.json     format, hyperparameters, class names, label scheme, tokenizer
                    version, context definition, training datasets
    metrics.json    held-out (eval split) comparison of the model and the baselines
                    (model/compare.py), and the model on its training split
    model_card.md   the same for people
    train_log.json  per-epoch history and wall time (not deterministic)

`read_model_dir` is the one reader (evaluate, report, export, the benchmarks): every
check a model directory must pass, with a `ModelDirError` naming the file otherwise.
`read_json` and `read_vocab` are the small readers it shares with the dataset and
export-manifest readers.
"""

from __future__ import annotations

import dataclasses
import os

from core import files, tokenizer
from core.context import ContextDefinition, ContextDefinitionError
from core.errors import LifetimeError
from core.tokenizer import Vocabulary
from model.backoff import Backoff
from model.hparams import HParams

# Keras is imported inside load_keras: `lifetime --help` must not pay for TensorFlow.

FORMAT = "lifetime-model-v1"
MODEL_FILE, VOCAB_FILE, CONFIG_FILE = "model.keras", "vocab.txt", "config.json"
METRICS_FILE, CARD_FILE, LOG_FILE = "metrics.json", "model_card.md", "train_log.json"


class ModelDirError(LifetimeError):
    """A model directory that cannot be used: missing, incomplete, corrupt, or made by
    a build whose tokenizer or context definition this one cannot reproduce."""


read_json = files.read_json_object  # (path, error, missing): one JSON object file


def read_vocab(directory: str, error: type[LifetimeError], what: str) -> Vocabulary:
    """DIRECTORY/vocab.txt; `error` naming the file if it is missing or malformed."""
    path = os.path.join(directory, VOCAB_FILE)
    if not os.path.lexists(path):
        raise error(f"{directory}: no {VOCAB_FILE} ({what})")
    try:
        return Vocabulary.load(path)
    except (OSError, ValueError) as e:
        raise error(f"{path}: {e}") from None


@dataclasses.dataclass(frozen=True)
class ModelDir:
    """A checked model directory; the Keras model itself is loaded on demand."""

    path: str
    config: dict
    vocab: Vocabulary
    hparams: object            # model.hparams.HParams
    context: object            # core.context.ContextDefinition
    # model.backoff.Backoff the model is served with; None: both rules off, or a model
    # trained before the back-off existed
    backoff: Backoff | None = None

    @property
    def class_names(self) -> list[str]:
        return [str(c) for c in self.config["class_names"]]

    def load_keras(self):
        path = os.path.join(self.path, MODEL_FILE)
        if not os.path.lexists(path):
            raise ModelDirError(f"{self.path}: no {MODEL_FILE} (not a trained model directory)")
        try:  # Keras opens it by name: a fifo would block it
            files.check_regular(path)
        except OSError as e:
            raise ModelDirError(f"{path}: cannot read ({e.strerror})") from None
        import keras

        try:
            return keras.saving.load_model(path, compile=False)
        except Exception as e:  # zip, HDF5 and deserialization errors all mean "corrupt"
            first = (str(e).splitlines() or [""])[0][:200]
            raise ModelDirError(f"{path}: cannot load the Keras model, corrupt or not a Keras "
                                f"model file ({type(e).__name__}: {first})") from e


def backoff_of(config: dict, hp, config_path: str) -> Backoff | None:
    """config.json's back-off table, checked against the hyperparameters; ModelDirError
    naming the file if it is malformed or disagrees with them."""
    d = config.get("backoff")
    if d is None or not hp.backs_off:
        return None
    try:
        b = Backoff.from_json(d)
    except (KeyError, TypeError, ValueError) as e:
        raise ModelDirError(f"{config_path}: backoff: {e}") from None
    if (b.below, b.pure) != (hp.backoff_below, hp.backoff_pure):
        raise ModelDirError(f"{config_path}: backoff: thresholds differ from the "
                            "hyperparameters'")
    return b


def load_config(path: str) -> dict:
    """PATH/config.json, checked for the format `lifetime train` writes."""
    if not os.path.exists(path):
        raise ModelDirError(f"{path}: model directory does not exist")
    if not os.path.isdir(path):
        raise ModelDirError(f"{path}: not a directory (a model directory is expected)")
    config_path = os.path.join(path, CONFIG_FILE)
    config = read_json(config_path, ModelDirError,
                       "missing (not a model directory written by `lifetime train`)")
    if config.get("format") != FORMAT:
        raise ModelDirError(f"{config_path}: format {config.get('format')!r}, "
                            f"expected {FORMAT!r}")
    missing = [k for k in ("hyperparameters", "class_names", "label_scheme")
               if not config.get(k)]
    if missing:
        raise ModelDirError(f"{config_path}: missing {', '.join(missing)}")
    return config


def read_model_dir(path: str) -> ModelDir:
    """Every check short of loading the Keras model: config.json, the vocabulary, the
    hyperparameters, the tokenizer version and the context definition."""
    config = load_config(path)
    config_path = os.path.join(path, CONFIG_FILE)
    version = config.get("tokenizer_version", tokenizer.TOKENIZER_VERSION)
    if version != tokenizer.TOKENIZER_VERSION:
        raise ModelDirError(f"{config_path}: tokenizer {version!r}, this build (and the "
                            f"exported C++ tokenizer) implements {tokenizer.TOKENIZER_VERSION!r}; "
                            "retrain the model")
    vocab = read_vocab(path, ModelDirError, "the model's vocabulary; the exported library "
                       "compiles it in")
    hp = hparams_of(config, config_path)
    if hp.vocab_size != len(vocab):
        raise ModelDirError(f"{config_path}: vocab_size {hp.vocab_size}, but {VOCAB_FILE} has "
                            f"{len(vocab)} tokens")
    recorded = config["hyperparameters"].get("max_tokens", hp.max_tokens)
    if recorded != hp.max_tokens:
        raise ModelDirError(f"{config_path}: max_tokens {recorded} != max_frames * "
                            "tokens_per_frame")
    context = context_of(config, path)
    if context.max_frames != hp.max_frames:
        raise ModelDirError(f"{config_path}: the model reads {hp.max_frames} frames but its "
                            f"contexts hold {context.max_frames}")
    return ModelDir(path, config, vocab, hp, context, backoff_of(config, hp, config_path))


def load_model_dir(path: str):
    """-> (keras model, config dict, Vocabulary); ModelDirError with the reason otherwise."""
    md = read_model_dir(path)
    return md.load_keras(), md.config, md.vocab


def context_of(config: dict, path: str = ""):
    """The model's context definition (how its training stacks were cut)."""
    try:
        return ContextDefinition.from_json(config.get("context"), where=f"model {path}".strip())
    except ContextDefinitionError as e:
        raise ModelDirError(f"{e}: the model cannot be served the contexts it was trained "
                            "on") from e


def hparams_of(config: dict, where: str = "config.json"):
    """The recorded hyperparameters; ModelDirError if they are incomplete or invalid."""
    hp = config.get("hyperparameters")
    if not isinstance(hp, dict) or not hp.get("max_frames") or not hp.get("tokens_per_frame"):
        raise ModelDirError(f"{where}: hyperparameters without max_frames and tokens_per_frame")
    try:
        return HParams.from_json(hp)
    except (LifetimeError, TypeError, ValueError) as e:
        raise ModelDirError(f"{where}: {e}") from None
