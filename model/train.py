"""`lifetime train`: datasets -> a model directory (model/io.py).

Deterministic: the same datasets, hyperparameters and seed give the same weights
(keras.utils.set_random_seed + TensorFlow op determinism; tf.data shuffles with
the seed). Training uses the datasets' train splits; the eval splits drive early
stopping and the held-out figures in metrics.json.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import time

import numpy as np

from core import version_roles
from core.files import write_json
from core.native_log import native_notices_dropped
from model import backoff as backoff_mod
from model import io
from model.baselines import majority_class
from model.card import model_card
from model.compare import compare
from model.data import DatasetError, Examples, check_compatible, load_dataset
from model.features import layout_from_token_ids
from model.hparams import HParams
from model.metrics import classification_metrics
from core.tokenizer import TOKENIZER_VERSION

# TensorFlow and Keras are imported inside functions: `lifetime --help` must not pay for them.

LOG = logging.getLogger(__name__)
MIN_STEPS_PER_EPOCH = 20  # tiny datasets are repeated so an epoch is a real amount of training


def encode(examples: Examples, hp: HParams) -> np.ndarray:
    if not len(examples):
        return np.zeros((0, hp.max_tokens), np.int32)
    return np.stack([layout_from_token_ids(t, hp) for t in examples.token_ids])


def example_weights(samples: np.ndarray, power: float) -> np.ndarray:
    w = np.asarray(samples, np.float64) ** power
    return (w / w.mean()).astype(np.float32) if len(w) else w.astype(np.float32)


def set_determinism(seed: int) -> None:
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(seed)
    tf.config.experimental.enable_op_determinism()


def use_xla_on_cpu(trainer) -> None:
    """XLA-compiles the trainer's train and eval steps where TensorFlow sees no GPU:
    the LSTM's loop and its gradient fused, about half the time per step on 2 cores.
    Keras turns jit_compile off whenever op determinism is on, for GPU kernels XLA
    has no deterministic version of; XLA's CPU code is deterministic (the same seed
    gives the same weights, run to run: tests/test_model_training.py), so on a CPU-only
    machine it is turned back on. With a GPU the steps run as before, without XLA."""
    import tensorflow as tf

    if not tf.config.list_physical_devices("GPU"):
        trainer._jit_compile = True  # the property's setter would apply Keras' GPU rule


class Fitter:
    """Fits fresh models of one shape (the hyperparameters but the seed and the epoch
    and stopping counts, and the number of classes) through one compiled Keras
    trainer, so TensorFlow traces the train and eval steps once rather than once per
    fit (a refit, the report's sampling-curve runs).

    Every fit starts from the state a new model and optimizer would have: the
    weights initialized under the fit's seed, Adam's slots and step count zero, the
    word-dropout generator at its seed; the weights are those a fit alone gives."""

    def __init__(self, num_classes: int):
        self.num_classes = num_classes
        self.shape = None
        self.model = self.trainer = None

    @staticmethod
    def _shape(hp: HParams):
        return hp.replace(seed=0, epochs=1, patience=0, min_epochs=0, min_delta=0.0, refit=False)

    def _reset(self, hp: HParams):
        """A fresh model under hp.seed; compiled once per shape, variables reset after."""
        import keras

        from model.network import build_model, training_wrapper

        model = build_model(hp, self.num_classes)
        trainer = training_wrapper(model, hp)
        if self.shape != self._shape(hp):
            trainer.compile(optimizer=keras.optimizers.Adam(hp.learning_rate),
                            loss=keras.losses.SparseCategoricalCrossentropy(),
                            weighted_metrics=[keras.metrics.SparseCategoricalAccuracy(name="acc")])
            use_xla_on_cpu(trainer)
            self.shape, self.model, self.trainer = self._shape(hp), model, trainer
            return
        # The new model's initial variables (weights, dropout generator) into the
        # compiled one, and a new optimizer's (zero slots, step 0) into its optimizer.
        for v, fresh in zip(self.trainer.variables, trainer.variables, strict=True):
            v.assign(fresh)
        optimizer = self.trainer.optimizer
        fresh_optimizer = keras.optimizers.Adam(hp.learning_rate)
        fresh_optimizer.build(self.trainer.trainable_variables)
        for v, fresh in zip(optimizer.variables, fresh_optimizer.variables, strict=True):
            v.assign(fresh)

    def fit(self, train: Examples, evl: Examples | None, hp: HParams,
            checkpoint_dir: str | None = None, verbose: int = 2):
        """Trains a fresh model; returns (keras model, history dict, best epoch).
        The model is this Fitter's: the next fit overwrites its weights."""
        import keras
        import tensorflow as tf

        set_determinism(hp.seed)
        x, y = encode(train, hp), train.label.astype(np.int32)
        w = example_weights(train.weight, hp.weight_power)
        steps = max(math.ceil(len(y) / hp.batch_size), MIN_STEPS_PER_EPOCH)
        train_ds = (tf.data.Dataset.from_tensor_slices((x, y, w))
                    .shuffle(len(y), seed=hp.seed, reshuffle_each_iteration=True)
                    .repeat().batch(hp.batch_size).prefetch(2))
        self._reset(hp)
        model, trainer = self.model, self.trainer
        if evl is None:  # a refit for a known number of epochs
            with native_notices_dropped():
                history = trainer.fit(train_ds, epochs=hp.epochs, steps_per_epoch=steps,
                                      verbose=verbose, shuffle=False)
            return model, {k: [float(v) for v in vals] for k, vals in history.history.items()}, \
                hp.epochs
        eval_ds = tf.data.Dataset.from_tensor_slices(
            (encode(evl, hp), evl.label.astype(np.int32),
             example_weights(evl.weight, hp.weight_power))
        ).batch(1024)
        stopping = keras.callbacks.EarlyStopping(monitor="val_loss", patience=hp.patience,
                                                 min_delta=hp.min_delta,
                                                 restore_best_weights=True,
                                                 start_from_epoch=hp.min_epochs)
        with native_notices_dropped():
            history = trainer.fit(train_ds, validation_data=eval_ds, epochs=hp.epochs,
                                  steps_per_epoch=steps, callbacks=[stopping],
                                  verbose=verbose, shuffle=False)
        if checkpoint_dir:
            # The weights early stopping kept (restored above), written once rather than
            # at every improving epoch (40 ms each).
            os.makedirs(checkpoint_dir, exist_ok=True)
            trainer.save_weights(os.path.join(checkpoint_dir, "best.weights.h5"))
        h = {k: [float(v) for v in vals] for k, vals in history.history.items()}
        # The epoch whose weights early stopping restored: the last improvement by at
        # least min_delta from min_epochs on (with min_delta 0, the lowest eval loss).
        best = stopping.best_epoch + 1 if len(h["val_loss"]) > hp.min_epochs \
            else len(h["val_loss"])
        return model, h, best


def fit(train: Examples, evl: Examples | None, hp: HParams, num_classes: int,
        checkpoint_dir: str | None = None, verbose: int = 2):
    """Trains a fresh model; returns (keras model, history dict, best epoch)."""
    return Fitter(num_classes).fit(train, evl, hp, checkpoint_dir, verbose)


def predict_classes(model, examples: Examples, hp: HParams,
                    backoff: backoff_mod.Backoff | None = None) -> np.ndarray:
    """The served classes: the model's argmax, or BACKOFF's where the model is unsure
    (model/backoff.py; None: the model alone)."""
    if not len(examples):
        return np.zeros(0, np.int32)
    x = encode(examples, hp)
    with native_notices_dropped():
        probs = model.predict(x, batch_size=2048, verbose=0)
    if backoff is not None:
        return backoff.apply(probs, examples.frames)
    return np.argmax(probs, axis=-1).astype(np.int32)


def fit_backoff(examples: Examples, hp: HParams, context) -> backoff_mod.Backoff | None:
    """The back-off table over the examples a model was fitted on (None: both rules off)."""
    if not hp.backs_off or not len(examples):
        return None
    return backoff_mod.fit(examples.frames, examples.label, examples.weight,
                           hp.backoff_below, majority_class(examples.label, examples.weight),
                           2 if context.size_feature else 1, hp.backoff_pure)


def load_training_data(dataset_dirs: list[str]):
    if not dataset_dirs:
        raise DatasetError("no training datasets given")
    datasets = [load_dataset(d) for d in dataset_dirs]
    check_compatible(datasets, what="first training dataset")
    train = Examples.concat([d.splits["train"] for d in datasets])
    evl = Examples.concat([d.splits["eval"] for d in datasets])
    if not len(train):
        raise DatasetError(f"datasets {', '.join(dataset_dirs)}: the train split is empty")
    if not len(evl):
        raise DatasetError(f"datasets {', '.join(dataset_dirs)}: the eval split is empty; "
                           "early stopping and held-out metrics need eval contexts (rebuild "
                           "with `lifetime build-dataset --eval-percent 20`)")
    return datasets, train, evl


def model_roles(datasets, eval_ex: Examples, selection_versions=()) -> dict:
    """config.json's roles: train, the training datasets' version labels; selection,
    the labels early stopping watched (the eval split: those same versions), those the
    datasets record as selection, and SELECTION_VERSIONS (choices made elsewhere)."""
    train_labels = {v for d in datasets for v in d.all().version_label.tolist()}
    selection = set(selection_versions) | set(eval_ex.version_label.tolist())
    for d in datasets:
        selection |= set((version_roles.roles_of(d.manifest) or {}).get("selection", ()))
    version_roles.refuse_reserved(train_labels, "training", "lifetime train")
    version_roles.refuse_reserved(selection, "selection", "lifetime train")
    return {**version_roles.record(train_labels, selection),
            "early_stopping": "the training datasets' eval split"}


def train(dataset_dirs: list[str], out_dir: str, hp: HParams = HParams(), verbose: int = 2,
          selection_versions=()) -> dict:
    """Trains on the datasets and writes the model directory; returns metrics.json.
    SELECTION_VERSIONS: version labels choices for this model were made on (its
    config.json's roles.selection)."""
    datasets, train_ex, eval_ex = load_training_data(dataset_dirs)
    roles = model_roles(datasets, eval_ex, selection_versions)
    vocab = datasets[0].vocab
    labels = datasets[0].label_scheme
    class_names = labels["class_names"]
    context = datasets[0].context
    # One frame limit: the model reads every frame of the dataset's contexts.
    hp = hp.for_context(context, f"dataset {datasets[0].path}").replace(vocab_size=len(vocab))
    os.makedirs(out_dir, exist_ok=True)
    LOG.info("train: %d train / %d eval contexts, vocabulary %d, %s",
             len(train_ex), len(eval_ex), len(vocab), hp)
    start = time.monotonic()
    fitter = Fitter(len(class_names))
    model, history, best = fitter.fit(train_ex, eval_ex, hp, os.path.join(out_dir, "checkpoints"),
                                      verbose)
    backoff = fit_backoff(train_ex, hp, context)
    held_out = compare(predict_classes(model, eval_ex, hp, backoff), train_ex, eval_ex, class_names)
    if hp.refit:
        LOG.info("train: refit on train + eval splits for %d epochs", best)
        train_ex = Examples.concat([train_ex, eval_ex])
        model, _, _ = fitter.fit(train_ex, None, hp.replace(epochs=best), None, verbose)
        backoff = fit_backoff(train_ex, hp, context)  # over what the saved model was fit on
    seconds = time.monotonic() - start
    model.save(os.path.join(out_dir, io.MODEL_FILE))
    shutil.copyfile(os.path.join(datasets[0].path, "vocab.txt"), os.path.join(out_dir, io.VOCAB_FILE))
    config = {
        "format": io.FORMAT, "hyperparameters": hp.to_json(), "class_names": class_names,
        "label_scheme": labels, "tokenizer_version": TOKENIZER_VERSION,
        "context": context.to_json(),
        "input": {"name": "token_ids", "dtype": "int32", "shape": [None, hp.max_tokens],
                  "layout": "frame slots, see model/features.py"},
        "output": {"dtype": "float32", "shape": [None, len(class_names)], "kind": "softmax"},
        "training_datasets": [{
            "path": d.path, "train_contexts": len(d.splits["train"]),
            "eval_contexts": len(d.splits["eval"]),
            "version_labels": sorted(set(d.all().version_label.tolist())),
            "tokenizer_version": d.manifest.get("tokenizer_version")} for d in datasets],
        "roles": roles,
    }
    if backoff is not None:
        config["backoff"] = backoff.to_json()
    metrics = {"eval": held_out, "refit_on_eval": hp.refit,
               "train": {"model": classification_metrics(
                   train_ex.label, predict_classes(model, train_ex, hp, backoff), train_ex.weight,
                   class_names)},
               "epochs_run": len(history["loss"]), "best_epoch": best}
    write_json(os.path.join(out_dir, io.CONFIG_FILE), config)
    write_json(os.path.join(out_dir, io.METRICS_FILE), metrics)
    write_json(os.path.join(out_dir, io.LOG_FILE), {"seconds": seconds, "history": history})
    with open(os.path.join(out_dir, io.CARD_FILE), "w", encoding="utf-8") as f:
        f.write(model_card(config, metrics))
    LOG.info("train: %d epochs in %.1f s -> %s", len(history["loss"]), seconds, out_dir)
    return metrics
