"""Training, the model directory, evaluate and report, on a tiny real dataset.

Small hyperparameters keep every training run to a few seconds on 2 cores."""

import json
import os
import zipfile

import numpy as np
import pytest

from model import io
from core.errors import UsageError
from model.data import DatasetError, load_dataset
from model.hparams import HParams
from model.io import ModelDirError
from tests.model_support import build_tiny_dataset

HP = HParams(max_frames=4, tokens_per_frame=4, embedding_dim=8, lstm_units=8, epochs=3,
             min_epochs=1, patience=2, batch_size=8, seed=7)


@pytest.fixture(scope="session")
def tiny_dataset(tmp_path_factory):
    return build_tiny_dataset(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="session")
def trained(tiny_dataset, tmp_path_factory):
    from model.train import train

    out = str(tmp_path_factory.mktemp("model") / "m")
    train([tiny_dataset], out, HP, verbose=0)
    return out


def _train(dataset, out, hp=HP):
    from model.train import train

    return train([dataset], str(out), hp, verbose=0)


def test_model_dir_holds_the_contract(trained, tiny_dataset):
    for name in ("model.keras", "vocab.txt", "config.json", "metrics.json", "model_card.md"):
        assert os.path.exists(os.path.join(trained, name)), name
    model, config, vocab = io.load_model_dir(trained)
    assert config["format"] == "lifetime-model-v1"
    hp = config["hyperparameters"]
    for key in ("architecture", "max_frames", "tokens_per_frame", "max_tokens", "vocab_size",
                "embedding_dim", "lstm_units", "learning_rate", "batch_size", "epochs",
                "patience", "seed"):
        assert key in hp, key
    assert hp["max_tokens"] == 16 and hp["vocab_size"] == len(vocab)
    assert config["class_names"][-1] == "inf" and config["label_scheme"]["rule"]
    assert config["tokenizer_version"] == "lifetime-tokenizer-v2"
    assert config["training_datasets"][0]["path"] == os.path.abspath(tiny_dataset)
    with open(os.path.join(tiny_dataset, "vocab.txt")) as a, open(os.path.join(trained, "vocab.txt")) as b:
        assert a.read() == b.read()
    assert model.inputs[0].name == "token_ids" and model.inputs[0].dtype == "int32"
    probs = np.asarray(model(np.zeros((3, 16), np.int32)))
    assert probs.shape == (3, 8) and probs.dtype == np.float32
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)
    m = json.load(open(os.path.join(trained, "metrics.json")))
    # The same comparison schema as `lifetime evaluate` and `lifetime report`.
    assert set(m["eval"]) == {"overall", "unseen", "unseen_share", "against_majority"}
    for scope in ("overall", "unseen"):
        assert set(m["eval"][scope]) == {"model", "baseline_majority", "baseline_exact",
                                         "baseline_site"}
    assert m["eval"]["overall"]["model"]["contexts"] == len(
        load_dataset(tiny_dataset).splits["eval"])
    card = open(os.path.join(trained, "model_card.md")).read()
    assert "| model |" in card and "| baseline: site |" in card
    # One frame limit: the dataset's context definition, recorded in the config.
    assert hp["max_frames"] == config["context"]["max_frames"] == 4


def test_training_is_deterministic(trained, tiny_dataset, tmp_path):
    _train(tiny_dataset, tmp_path / "again")
    assert (open(os.path.join(trained, "metrics.json")).read()
            == open(tmp_path / "again" / "metrics.json").read())
    a, _, _ = io.load_model_dir(trained)
    b, _, _ = io.load_model_dir(str(tmp_path / "again"))
    for wa, wb in zip(a.get_weights(), b.get_weights()):
        np.testing.assert_array_equal(wa, wb)
    c = _train(tiny_dataset, tmp_path / "other_seed", HP.replace(seed=8))
    assert c["epochs_run"] >= 1  # a different seed trains too (weights differ, checked below)
    d, _, _ = io.load_model_dir(str(tmp_path / "other_seed"))
    assert not np.array_equal(a.get_weights()[0], d.get_weights()[0])


def test_a_reused_fitter_gives_the_weights_of_a_fresh_fit(tiny_dataset):
    """One compiled trainer serves a refit and the report's sampling-curve runs; each
    fit must start from a new model's state (weights under its seed, Adam reset)."""
    from model.train import Fitter, fit

    ds = load_dataset(tiny_dataset)
    hp = HP.for_context(ds.context, "dataset").replace(vocab_size=len(ds.vocab))
    tr, ev = ds.splits["train"], ds.splits["eval"]
    classes = len(ds.label_scheme["class_names"])
    fitter = Fitter(classes)
    fitter.fit(tr, ev, hp.replace(seed=3), verbose=0)  # other weights and optimizer state
    for evl, run in ((ev, hp), (None, hp.replace(epochs=2))):
        reused, h_reused, best_reused = fitter.fit(tr, evl, run, verbose=0)
        reused = reused.get_weights()
        fresh, h_fresh, best_fresh = fit(tr, evl, run, classes, verbose=0)
        assert (h_reused, best_reused) == (h_fresh, best_fresh)
        for a, b in zip(reused, fresh.get_weights(), strict=True):
            np.testing.assert_array_equal(a, b)


def test_early_stopping_stops_when_the_eval_loss_only_creeps_down(tiny_dataset):
    """Scored on contexts it trains on, the model's eval loss keeps shrinking by ever
    smaller amounts: with min_delta 0 training runs to the epoch limit, with the
    default it stops `patience` epochs after the last decrease of at least min_delta."""
    from model.train import Fitter

    ds = load_dataset(tiny_dataset)
    hp = HP.for_context(ds.context, "dataset").replace(
        vocab_size=len(ds.vocab), epochs=40, min_epochs=2, patience=3, learning_rate=0.02)
    tr = ds.splits["train"]
    fitter = Fitter(len(ds.label_scheme["class_names"]))
    _, h, best = fitter.fit(tr, tr, hp.replace(min_delta=0.0), verbose=0)
    assert len(h["val_loss"]) == 40
    assert HParams().min_delta > 0
    _, h, best = fitter.fit(tr, tr, hp.replace(min_delta=HParams().min_delta), verbose=0)
    loss = h["val_loss"]
    assert best + hp.patience == len(loss) < 40
    assert min(loss[best:]) < loss[best - 1]  # it was still creeping down
    assert loss[best - 1] - min(loss[best:]) < HParams().min_delta


def test_max_frames_is_the_datasets(tiny_dataset, tmp_path):
    """A frame limit other than the dataset's context definition is refused before any
    training; left out, it is the dataset's."""
    with pytest.raises(UsageError, match=r"max_frames 5: dataset .* keeps 4 frames"):
        _train(tiny_dataset, tmp_path / "m", HP.replace(max_frames=5))
    assert not os.path.exists(tmp_path / "m" / "model.keras")
    assert HParams().max_frames is None
    assert HP.replace(max_frames=None).for_context(
        load_dataset(tiny_dataset).context, "dataset").max_frames == 4


def test_tokens_architecture_and_refit_train(tiny_dataset, tmp_path):
    metrics = _train(tiny_dataset, tmp_path / "tok", HP.replace(architecture="tokens", refit=True))
    assert metrics["refit_on_eval"] is True
    model, config, _ = io.load_model_dir(str(tmp_path / "tok"))
    assert config["hyperparameters"]["architecture"] == "tokens"
    assert np.asarray(model(np.ones((1, 16), np.int32))).shape == (1, 8)


def test_evaluate_cli_writes_json(trained, tiny_dataset, tmp_path, capsys):
    from lifetime.cli import main

    out = tmp_path / "eval.json"
    assert main(["evaluate", "--model", trained, "--dataset", tiny_dataset, "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["datasets"][0]["split"] == "eval"  # its own training dataset: held out only
    assert set(result["overall"]) == {"model", "baseline_majority", "baseline_exact",
                                      "baseline_site", "baseline_tcmalloc_rule",
                                      "baseline_tcmalloc_rule_all"}
    assert set(result["tcmalloc_rule"]["model_ahead"]["overall"]) == {"large", "all"}
    assert result["overall"]["model"]["contexts"] == result["datasets"][0]["contexts"]
    # The held-out comparison training wrote is the one evaluate computes on that split
    # (evaluate adds TCMalloc's rule, replayed over the dataset's profiles).
    held_out = json.loads(open(os.path.join(trained, "metrics.json")).read())["eval"]
    rules = {"baseline_tcmalloc_rule", "baseline_tcmalloc_rule_all"}
    assert {k: ({n: m for n, m in result[k].items() if n not in rules}
                if k in ("overall", "unseen") else result[k]) for k in held_out} == held_out
    assert "| baseline: site |" in capsys.readouterr().out


def test_report_renders_tables_and_plots(trained, tiny_dataset, tmp_path):
    from model.report import write_report

    out = tmp_path / "report"
    rep = write_report(trained, [tiny_dataset], [tiny_dataset], str(out), fractions=(0.5, 1.0))
    md = (out / "report.md").read_text()
    # The test dataset is the training one (its eval split): its version is not test data.
    assert rep["version_roles"]["v1"]["role"] == "seen (training)"
    for heading in ("## Exact stack overlap", "## Token and function overlap",
                    "## Model vs baselines: all compared (not all test: see Roles) contexts",
                    "## Confusion matrices", "## Against the majority class",
                    "## Accuracy against sampling fraction"):
        assert heading in md
    assert "| baseline: exact |" in md and "| from -> to | depth 1 | depth 2 |" in md
    for png in ("confusion_weighted.png", "confusion_unweighted.png", "sampling.png",
                "overlap.png", "bars_overall.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png
        assert f"]({png})" in md
    page = (out / "report.html").read_text()
    assert "<table>" in page and '<img alt="stack overlap" src="overlap.png"' in page
    saved = json.loads((out / "report.json").read_text())
    assert saved["summary"] == rep["summary"] and len(saved["sampling"]) == 2
    # One comparison schema: the test versions, each sampling run, the held-out split.
    trained_eval = json.loads(open(os.path.join(trained, "metrics.json")).read())["eval"]
    assert saved["within_version_held_out"] == trained_eval
    # ... and on the test versions, TCMalloc's rule replayed over their profiles
    from model import tcmalloc_rule

    rules = set(tcmalloc_rule.NAMES.values())
    assert rules <= set(saved["test"]["overall"]) and rules <= set(saved["test"]["unseen"])
    assert "| baseline: tcmalloc_rule |" in md and "| baseline: tcmalloc_rule_all |" in md
    assert "TCMalloc's removed lifetime rule" in md and "the model is ahead of the rule" in md
    assert saved["tcmalloc_rule"]["samples_replayed_share"] == 1.0
    assert set(saved["summary"]["model_ahead_of_tcmalloc_rule"]["overall"]) == {"large", "all"}
    for comparison in (saved["test"], *saved["sampling"], trained_eval):
        assert set(comparison["overall"]) - rules == set(saved["test"]["overall"]) - rules, \
            comparison.keys()
    assert saved["sampling"][-1]["overall"] == saved["test"]["overall"]  # fraction 1
    assert saved["stack_overlap"][0]["depths"]["1"]["contexts"] == 1.0  # same version
    am = saved["test"]["against_majority"]
    assert set(am) == {"overall", "unseen"} and 0 <= am["overall"]["lost"] <= 1
    assert f"| overall | {100 * am['overall']['lost']:.1f}% / " in md


def test_missing_dataset_fails_clearly(tmp_path):
    with pytest.raises(DatasetError, match="no such directory"):
        _train(str(tmp_path / "nope"), tmp_path / "m")


def test_empty_eval_split_fails_clearly(tmp_path):
    ds = build_tiny_dataset(tmp_path, eval_percent=0)
    with pytest.raises(DatasetError, match="eval split is empty"):
        _train(ds, tmp_path / "m")


def test_vocabulary_mismatch_fails_clearly(trained, tmp_path):
    from model.evaluate import evaluate

    vocab = tmp_path / "other_vocab.txt"
    vocab.write_text("<pad>\n<unk>\n<sep>\nmain\nsomething_else\n")
    ds = build_tiny_dataset(tmp_path, vocab_path=str(vocab), programs=("sites_a",))
    with pytest.raises(DatasetError, match="vocabulary differs from the model's"):
        evaluate(trained, [ds])


def test_bad_model_dirs_fail_clearly(trained, tmp_path):
    import shutil

    with pytest.raises(ModelDirError, match="nope: model directory does not exist"):
        io.load_model_dir(str(tmp_path / "nope"))
    broken = tmp_path / "broken"
    shutil.copytree(trained, broken)
    os.remove(broken / "vocab.txt")
    with pytest.raises(ModelDirError, match="no vocab.txt"):
        io.load_model_dir(str(broken))
    shutil.copy(os.path.join(trained, "vocab.txt"), broken / "vocab.txt")
    (broken / "model.keras").write_bytes(b"not a zip file at all")
    with pytest.raises(ModelDirError, match="model.keras: cannot load the Keras model, corrupt"):
        io.load_model_dir(str(broken))
    assert not zipfile.is_zipfile(broken / "model.keras")
    (broken / "config.json").write_text("{not json")
    with pytest.raises(ModelDirError, match="config.json: not valid JSON"):
        io.read_model_dir(str(broken))
    config = json.loads(open(os.path.join(trained, "config.json")).read())
    # A frame limit that disagrees with the model's context definition.
    config["hyperparameters"].update(max_frames=3, max_tokens=12)
    (broken / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelDirError, match="reads 3 frames but its contexts hold 4"):
        io.read_model_dir(str(broken))


def test_context_definition_mismatch_and_old_models_fail_clearly(trained, tmp_path):
    import json
    import shutil

    from model.evaluate import evaluate
    from core.context import ContextDefinition

    # A test set cut with a wrapper the model's training data did not strip.
    ds = build_tiny_dataset(tmp_path, programs=("sites_a",),
                            vocab_path=os.path.join(trained, "vocab.txt"))
    manifest_path = os.path.join(ds, "manifest.json")
    manifest = json.loads(open(manifest_path).read())
    manifest["context"] = ContextDefinition.make(configured=["parse_request"]).to_json()
    open(manifest_path, "w").write(json.dumps(manifest))
    with pytest.raises(DatasetError, match="context definition differs.*parse_request.*--like"):
        evaluate(trained, [ds])
    # A model trained before context definitions existed.
    old = tmp_path / "old-model"
    shutil.copytree(trained, old)
    config = json.loads((old / "config.json").read_text())
    del config["context"]
    (old / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelDirError, match="no context definition"):
        io.context_of(config, str(old))


def test_build_dataset_cli_rejects_like_with_its_own_definition(tmp_path):
    import subprocess
    import sys

    ds = build_tiny_dataset(tmp_path, programs=("sites_a",))
    proc = subprocess.run([sys.executable, "-m", "lifetime.cli", "build-dataset", "--profiles",
                           str(tmp_path / "profiles" / "*.ltprof"), "--out",
                           str(tmp_path / "again"), "--like", ds, "--wrapper", "zz"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "--like takes the context definition" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "lifetime.cli", "build-dataset", "--profiles",
                           str(tmp_path / "profiles" / "*.ltprof"), "--out",
                           str(tmp_path / "again"), "--like", ds, "--size-feature"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "drop --wrapper/--no-builtin-wrappers/--max-frames/--size-feature" \
        in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "lifetime.cli", "build-dataset", "--profiles",
                           str(tmp_path / "profiles" / "*.ltprof"), "--out",
                           str(tmp_path / "again"), "--like", str(tmp_path / "nope")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "nope" in proc.stderr and "manifest" in proc.stderr
