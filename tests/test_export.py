"""The exported library: a real XLA AOT build linked by real C and C++ consumers.

One small model (tests/export_support.py) is exported per session.  A harness
(tests/native/export_consumer) is built against it through CMake find_package, the
way an allocator would, and checked against TensorFlow: parity of probabilities and
classes, the tokenizer's shared test vectors, zero mallocs on the prediction path,
the prediction cache, one-predictor-per-thread, and a dependency list without
TensorFlow.  Bad model directories fail with errors that name the file.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

from tests.export_support import (frame_slots, read_results, write_ids, write_stacks,
                                  write_vectors)

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONSUMER = ROOT / "tests" / "native" / "export_consumer"


@pytest.fixture(scope="module")
def harness(exported_model, tmp_path_factory):
    """Build dir with export_harness and export_c_consumer, linked via find_package."""
    _, export_dir = exported_model
    build = tmp_path_factory.mktemp("export-harness")
    subprocess.run(["cmake", "-S", str(CONSUMER), "-B", str(build), "-G", "Ninja",
                    f"-DCMAKE_PREFIX_PATH={export_dir}"], check=True, capture_output=True)
    subprocess.run(["cmake", "--build", str(build)], check=True, capture_output=True)
    return build


def _run(build, *args, check=True) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(build / "export_harness"), *map(str, args)],
                          capture_output=True, text=True, timeout=600)
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


@pytest.fixture(scope="module")
def eval_split(exported_model):
    """(stacks, Keras probabilities) for the model's eval split."""
    import keras

    from pipeline import tokenizer

    model_dir, _ = exported_model
    cases = json.loads((model_dir / "eval.json").read_text())
    config = json.loads((model_dir / "config.json").read_text())["hyperparameters"]
    vocab = tokenizer.Vocabulary.load(str(model_dir / "vocab.txt"))
    ids = np.array([frame_slots(c["frames"], vocab, config["max_frames"],
                                config["tokens_per_frame"]) for c in cases], dtype=np.int32)
    model = keras.saving.load_model(str(model_dir / "model.keras"), compile=False)
    probs = model.predict(ids, batch_size=256, verbose=0)
    return [c["frames"] for c in cases], ids, probs


def test_package_layout(exported_model):
    _, out = exported_model
    manifest = json.loads((out / "export_manifest.json").read_text())
    for rel in ["include/lifetime_model.h", "lib/liblifetime_model.a",
                "lib/cmake/LifetimeModel/LifetimeModelConfig.cmake",
                "lib/pkgconfig/lifetime_model.pc", "share/lifetime_model/model_card.md"]:
        assert (out / rel).is_file(), rel
    assert manifest["graph"] == "folded" and manifest["num_classes"] == 8
    assert manifest["folded_max_abs_dp"] < 1e-5


@pytest.mark.parametrize("route", ["predict-frames", "predict-ids"])
def test_parity_with_tensorflow(harness, eval_split, tmp_path, route):
    stacks, ids, want = eval_split
    inp = (write_stacks(tmp_path / "in", stacks) if route == "predict-frames"
           else write_ids(tmp_path / "in", ids))
    _run(harness, route, inp, tmp_path / "out")
    classes, got = read_results(tmp_path / "out", want.shape[1])
    assert len(classes) == len(stacks)
    agree = np.mean(classes == np.argmax(want, -1))
    dp = float(np.max(np.abs(got - want)))
    print(f"{route}: {len(stacks)} eval stacks, argmax agreement {agree:.4%}, max |dp| {dp:.2e}")
    assert agree >= 0.999
    assert dp <= 1e-4


def test_tokenizer_matches_shared_vectors(harness, tmp_path):
    vectors = json.loads((ROOT / "tests" / "data" / "tokenizer_vectors.json").read_text())
    cases = vectors["cases"]
    write_vectors(tmp_path / "v", vectors["vocabulary"], [c["frames"] for c in cases])
    lines = _run(harness, "tokenize", tmp_path / "v").stdout.splitlines()
    assert len(lines) == 2 * len(cases)
    for case, tokens, ids in zip(cases, lines[0::2], lines[1::2]):
        assert tokens.split("\t")[1:] == case["tokens"], case["frames"]
        fields = ids.split("\t")
        got = [int(i) for i in fields[1].split()] if len(fields) > 1 else []
        assert got == case["ids"], case["frames"]


def test_no_malloc_on_the_prediction_path(harness, eval_split, tmp_path):
    stacks, _, _ = eval_split
    out = json.loads(_run(harness, "mallocs", write_stacks(tmp_path / "s", stacks[:300])).stdout)
    assert out["interposer_sees"] == 1  # the interposer does count allocations
    assert out["predictions"] == 300
    assert out["mallocs_frames"] == 0
    assert out["mallocs_ids"] == 0
    assert out["mallocs_cache"] == 0
    assert out["revalidations"] > 0  # the cache's own model runs were counted too


def test_prediction_cache(harness):
    proc = _run(harness, "cache")
    for name in ["hit_miss", "revalidation_max_on_disagree", "aliasing", "keys_spread",
                 "c_api_thread_local"]:
        assert f"PASS {name}" in proc.stdout, proc.stdout
    assert proc.stdout.rstrip().endswith("OK")


def test_one_predictor_per_thread(harness, eval_split, tmp_path):
    stacks, _, _ = eval_split
    out = json.loads(_run(harness, "threads", write_stacks(tmp_path / "s", stacks[:200])).stdout)
    assert out["mismatches"] == 0


def test_links_without_tensorflow(harness):
    for binary in ("export_harness", "export_c_consumer"):
        deps = subprocess.run(["ldd", str(harness / binary)], capture_output=True, text=True,
                              check=True).stdout
        names = {line.split()[0] for line in deps.splitlines() if line.strip()}
        assert not any("tensorflow" in n for n in names), deps
        allowed = ("linux-vdso", "libstdc++", "libm.", "libgcc_s", "libc.", "ld-linux")
        assert all(n.startswith(allowed) or "/ld-linux" in n for n in names), deps


def test_c_consumer_and_pkg_config(harness, exported_model, tmp_path):
    proc = subprocess.run([str(harness / "export_c_consumer")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "hits=1 misses=1" in proc.stdout
    # The same consumer built with pkg-config instead of CMake.
    _, out = exported_model
    env = dict(os.environ, PKG_CONFIG_PATH=str(out / "lib" / "pkgconfig"))
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "lifetime_model"], env=env,
                           capture_output=True, text=True, check=True).stdout.split()
    exe = tmp_path / "c_consumer"
    subprocess.run(["cc", "-O2", str(CONSUMER / "export_c_consumer.c"), "-o", str(exe), *flags],
                   check=True, capture_output=True)
    assert subprocess.run([str(exe)], capture_output=True).returncode == 0


def test_example_consumer_builds_with_find_package(exported_model, tmp_path):
    _, out = exported_model
    build = tmp_path / "build"
    subprocess.run(["cmake", "-S", str(ROOT / "export" / "examples" / "consumer"), "-B",
                    str(build), "-G", "Ninja", f"-DCMAKE_PREFIX_PATH={out}"],
                   check=True, capture_output=True)
    subprocess.run(["cmake", "--build", str(build)], check=True, capture_output=True)
    proc = subprocess.run([str(build / "lifetime_consumer")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "cache: 1000000 allocations" in proc.stdout
    assert proc.stdout.count(" (p=") == 4


def test_export_is_deterministic(exported_model, tmp_path):
    """Same model, same library, except tfcompile's metadata object, whose proto (unused at
    run time) TF 2.20 serializes with map entries in varying order: same size there."""
    from export.exporter import export_model

    model_dir, first = exported_model
    before = json.loads((first / "export_manifest.json").read_text())
    again = export_model(model_dir, tmp_path / "again")
    assert again["model_id"] == before["model_id"]
    assert again["library_bytes"] == before["library_bytes"]
    metadata = "lifetime_model_xla_metadata.o"
    assert set(again["parts_sha256"]) == set(before["parts_sha256"]) >= {
        "lifetime_model_xla.o", "liblifetime_api.a", "libxla_aot_runtime.a", metadata}
    for name, digest in before["parts_sha256"].items():
        if name != metadata:
            assert again["parts_sha256"][name] == digest, name
    header = "include/lifetime_model/lifetime_model_xla.h"
    assert (first / header).read_bytes() == (tmp_path / "again" / header).read_bytes()


def _lifetime_export(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lifetime.cli", "export", *map(str, args)],
                          capture_output=True, text=True, timeout=300)


def test_bad_model_directories(exported_model, tmp_path):
    model_dir, _ = exported_model
    proc = _lifetime_export(tmp_path / "missing", "--out", tmp_path / "o1")
    assert proc.returncode == 1 and "missing: model directory does not exist" in proc.stderr

    broken = tmp_path / "broken"
    shutil.copytree(model_dir, broken)
    (broken / "config.json").write_text("{not json")
    proc = _lifetime_export(broken, "--out", tmp_path / "o2")
    assert proc.returncode == 1 and "config.json: not valid JSON" in proc.stderr

    shutil.copytree(model_dir, broken, dirs_exist_ok=True)
    (broken / "vocab.txt").unlink()
    proc = _lifetime_export(broken, "--out", tmp_path / "o3")
    assert proc.returncode == 1 and "vocab.txt is missing" in proc.stderr

    shutil.copytree(model_dir, broken, dirs_exist_ok=True)
    (broken / "model.keras").write_bytes(b"truncated")
    proc = _lifetime_export(broken, "--out", tmp_path / "o4")
    assert proc.returncode == 1 and "model.keras: cannot load the Keras model" in proc.stderr

    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "precious.txt").write_text("keep me")
    proc = _lifetime_export(model_dir, "--out", occupied)
    assert proc.returncode == 1 and "refusing to overwrite" in proc.stderr
    assert (occupied / "precious.txt").read_text() == "keep me"
