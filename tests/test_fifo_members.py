"""FIFOs (and other non-regular files) where a command opens a path: refused at once
with one line, never waited on (issue 20, item 4).  Each command runs as a real
process under a timeout, so a blocking open fails the test instead of hanging it."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from core.context import ContextDefinition
from tests.synthetic import make_profile

TIMEOUT = 120  # seconds: a Beam or TensorFlow start-up, never a wait on a fifo
SAMPLES = [("parse_request", 3.0, False)] * 10 + [("cache_insert", 300.0, False)] * 10


def _lifetime(*args):
    try:
        p = subprocess.run([sys.executable, "-m", "lifetime.cli", *map(str, args)],
                           capture_output=True, text=True, timeout=TIMEOUT,
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.fail(f"lifetime {args[0]} blocked (a fifo opened for reading or writing)")
    return p.returncode, [line for line in p.stderr.splitlines() if "error" in line]


@pytest.fixture
def profile(tmp_path, sites):
    binary, addresses = sites
    path = tmp_path / "a.ltprof"
    make_profile(str(path), binary, addresses, SAMPLES, version_label="v1")
    return path


@pytest.fixture
def like_dir(tmp_path):
    """A directory with a real manifest's context definition; vocab.txt a fifo."""
    d = tmp_path / "train-ds"
    d.mkdir()
    (d / "manifest.json").write_text(json.dumps({"context": ContextDefinition.make().to_json()}))
    os.mkfifo(d / "vocab.txt")
    return d


def test_build_dataset_vocab_fifo_is_refused(profile, tmp_path):
    os.mkfifo(tmp_path / "vocab.fifo")
    rc, errors = _lifetime("build-dataset", "--profiles", profile, "--out", tmp_path / "ds",
                           "--vocab", tmp_path / "vocab.fifo")
    assert rc == 1 and errors == [f"lifetime build-dataset: error: {tmp_path}/vocab.fifo: "
                                  "cannot read vocabulary (is a fifo, not a regular file)"]


def test_like_with_a_fifo_manifest_or_vocabulary_is_refused(profile, tmp_path, like_dir):
    rc, errors = _lifetime("build-dataset", "--profiles", profile, "--out", tmp_path / "ds",
                           "--like", like_dir)
    assert rc == 1 and errors == [f"lifetime build-dataset: error: {like_dir}/vocab.txt: "
                                  "cannot read vocabulary (is a fifo, not a regular file)"]
    (like_dir / "manifest.json").unlink()
    os.mkfifo(like_dir / "manifest.json")
    rc, errors = _lifetime("build-dataset", "--profiles", profile, "--out", tmp_path / "ds",
                           "--like", like_dir)
    assert rc == 1 and len(errors) == 1
    assert f"{like_dir}/manifest.json: cannot read a context definition (is a fifo" in errors[0]


def test_a_fifo_where_the_dataset_job_writes_is_refused_before_the_job(profile, tmp_path):
    out = tmp_path / "ds"
    out.mkdir()
    os.mkfifo(out / "manifest.json")
    rc, errors = _lifetime("build-dataset", "--profiles", profile, "--out", out)
    assert rc == 1 and errors == [f"lifetime build-dataset: error: {out}/manifest.json: "
                                  "is a fifo, not a regular file"]


def test_characterize_on_only_a_fifo_is_an_error_like_build_dataset(tmp_path):
    os.mkfifo(tmp_path / "only.ltprof")
    for command in ("characterize", "build-dataset"):
        out = tmp_path / command
        rc, errors = _lifetime(command, "--profiles", tmp_path / "only.ltprof", "--out", out)
        assert rc == 1 and len(errors) == 1, (command, errors)
        assert errors[0].startswith(f"lifetime {command}: error: no usable samples in 1 "
                                    "profile file(s): 1 problems in 1 files, see "), errors
        assert not (out / "report.md").exists()


def test_evaluate_online_json_fifo_and_model_members(tmp_path, profile):
    os.mkfifo(tmp_path / "out.fifo")
    model = tmp_path / "model"
    model.mkdir()
    os.mkfifo(model / "config.json")
    rc, errors = _lifetime("evaluate-online", profile, "--model", model, "--json",
                           tmp_path / "out.fifo")
    assert rc == 1 and errors == [f"lifetime evaluate-online: error: --json {tmp_path}/out.fifo: "
                                  "cannot write there (is a fifo, not a regular file)"]
    rc, errors = _lifetime("evaluate-online", profile, "--model", model)
    assert rc == 1 and errors == [f"lifetime evaluate-online: error: {model}/config.json: "
                                  "cannot read (is a fifo, not a regular file)"]


def test_a_fifo_model_file_is_refused_before_keras_opens_it(tmp_path):
    from model import io

    os.mkfifo(tmp_path / io.MODEL_FILE)
    with pytest.raises(io.ModelDirError, match="model.keras: cannot read \\(is a fifo"):
        io.ModelDir(str(tmp_path), {}, None, None, None).load_keras()


@pytest.mark.slow
def test_dataset_and_model_members_that_are_fifos(tmp_path, sites):
    """TFRecord shards and model.keras are opened by TensorFlow and Keras, by name."""
    from tests.model_support import build_tiny_dataset

    ds = build_tiny_dataset(tmp_path)
    broken = tmp_path / "broken"
    shutil.copytree(ds, broken)
    shard = sorted(broken.glob("train-*.tfrecord"))[0]
    shard.unlink()
    os.mkfifo(shard)
    rc, errors = _lifetime("train", "--dataset", broken, "--out", tmp_path / "m", "--epochs", 1)
    assert rc == 1 and errors == [f"lifetime train: error: {shard}: cannot read (is a fifo, "
                                  "not a regular file)"]
