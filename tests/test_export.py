"""The exported library: a real XLA AOT build linked by real C and C++ consumers.

The model is the one `lifetime train` writes: a synthetic program is profiled (on
paper), `build-dataset` turns the profile into a dataset, `model.train.train` builds
the network with model/network.py and writes the model directory
(tests/export_support.py).  It is exported once per session.  A harness
(tests/native/export_consumer) is built against it through CMake find_package, the
way an allocator would, and checked against the saved Keras model on the dataset's
eval split: parity of probabilities and classes, the tokenizer's shared test vectors,
zero mallocs on the prediction path, the prediction cache, one-predictor-per-thread,
and a dependency list without TensorFlow.  Bad model directories fail with errors
that name the file.  The folded serving graph (export/graph.py) restates the network:
models with other shapes and both architectures, built by model/network.py, must
fold and export with parity, so a change to the network that the export does not
follow fails here.
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

from tests.export_support import (TRAIN_SCHEDULE, dataset_profiles, edge_stacks, served_classes,
                                  eval_stacks, keras_probabilities, make_dataset,
                                  read_results, train_model_dir, training_dataset, write_ids,
                                  write_stacks, write_vectors)

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONSUMER = ROOT / "tests" / "native" / "export_consumer"


def _build_harness(export_dir, build):
    """export_harness and export_c_consumer built against export_dir via find_package."""
    subprocess.run(["cmake", "-S", str(CONSUMER), "-B", str(build), "-G", "Ninja",
                    f"-DCMAKE_PREFIX_PATH={export_dir}"], check=True, capture_output=True)
    subprocess.run(["cmake", "--build", str(build)], check=True, capture_output=True)
    return build


@pytest.fixture(scope="module")
def harness(exported_model, tmp_path_factory):
    """Build dir with export_harness and export_c_consumer, linked via find_package."""
    _, export_dir = exported_model
    return _build_harness(export_dir, tmp_path_factory.mktemp("export-harness"))


def _run(build, *args, check=True) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(build / "export_harness"), *map(str, args)],
                          capture_output=True, text=True, timeout=600)
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def _parity_cases(model_dir):
    """(stacks, ids, Keras probabilities): the eval split of the dataset the model was
    trained on, then edge cases derived from it, through model/features.py."""
    stacks = eval_stacks(model_dir)
    stacks += edge_stacks(stacks)
    ids, probs = keras_probabilities(model_dir, stacks)
    return stacks, ids, probs


@pytest.fixture(scope="module")
def eval_split(exported_model):
    """(stacks, ids, Keras probabilities) for the model's eval split (+ edge cases)."""
    model_dir, _ = exported_model
    return _parity_cases(model_dir)


def _check_parity(build, stacks, ids, want, tmp_path, route, served):
    """The library's probabilities are TensorFlow's; its classes are the served ones
    (SERVED: export_support.served_classes, the back-off included) on the frames route,
    and the model's own on the ids route (no frame text there to key the back-off by)."""
    if route == "predict-ids":
        served = np.argmax(want, -1)
    inp = (write_stacks(tmp_path / "in", stacks) if route == "predict-frames"
           else write_ids(tmp_path / "in", ids))
    _run(build, route, inp, tmp_path / "out")
    classes, got = read_results(tmp_path / "out", want.shape[1])
    assert len(classes) == len(stacks)
    agree = np.mean(classes == served)
    dp = float(np.max(np.abs(got - want)))
    print(f"{route}: {len(stacks)} stacks, served-class agreement {agree:.4%}, max |dp| {dp:.2e}")
    assert agree >= 0.999
    assert dp <= 1e-4


def test_package_layout(exported_model, harness):
    from model.hparams import HParams
    from core.context import ContextDefinition
    from core import export_dir, lifetimes

    model_dir, out = exported_model
    manifest = json.loads((out / "export_manifest.json").read_text())
    for rel in ["include/lifetime_model.h", "lib/liblifetime_model.a",
                "lib/cmake/LifetimeModel/LifetimeModelConfig.cmake",
                "lib/pkgconfig/lifetime_model.pc", "share/lifetime_model/model_card.md"]:
        assert (out / rel).is_file(), rel
    assert manifest["graph"] == "folded" and manifest["num_classes"] == 8
    assert manifest["folded_max_abs_dp"] < 1e-5
    from export.exporter import resolve_target_cpu

    assert manifest["target_cpu"] == (resolve_target_cpu("host") or "generic")
    # The session model is what `lifetime train` writes with the default network shape;
    # its frame limit is its dataset's (the dataset job's default context definition).
    config = json.loads((model_dir / "config.json").read_text())
    hp = config["hyperparameters"]
    default = HParams()
    for key in ("architecture", "tokens_per_frame", "embedding_dim", "lstm_units"):
        assert hp[key] == getattr(default, key), key
        assert manifest.get(key, hp[key]) == hp[key], key
    dataset_context = ContextDefinition.load(str(training_dataset(model_dir) / "manifest.json"))
    assert hp["max_frames"] == manifest["max_frames"] == dataset_context.max_frames
    assert manifest["context"] == config["context"] == dataset_context.to_json()
    assert manifest["class_names"] == config["class_names"]
    assert manifest["vocab_size"] == hp["vocab_size"]
    # The label scheme: the training dataset's (its --boundaries), in the manifest and in
    # the library's info struct, on the wall clock in ns too.
    labels = json.loads((training_dataset(model_dir) / "manifest.json").read_text())
    labels = labels["config"]["labels"]
    scheme = export_dir.read(str(out)).label_scheme()
    assert scheme.clock == labels["clock"] == "wall"
    assert list(scheme.boundaries) == labels["boundaries"] == config["label_scheme"]["boundaries"]
    ns = list(lifetimes.boundaries_ns(labels["boundaries"]))
    assert manifest["label_scheme"]["boundaries_ns"] == ns
    assert manifest["num_classes"] == len(ns) + 2
    info = json.loads(_run(harness, "info").stdout)
    assert info["num_classes"] == manifest["num_classes"] and info["label_clock"] == "wall"
    assert info["boundaries"] == labels["boundaries"] and info["boundaries_ns"] == ns
    assert info["class_names"] == manifest["class_names"]
    assert (out / "share" / "lifetime_model" / "config.json").read_text() == \
        (model_dir / "config.json").read_text()


def test_target_cpu_host_is_this_machines_x86_64_level(tmp_path):
    """`--target-cpu host` compiles for x86-64-v3 only where the CPU has all of its
    features (the library refuses to run elsewhere); otherwise generic x86-64."""
    from export.exporter import HOST, X86_64_V3_FLAGS, resolve_target_cpu

    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse2 " + " ".join(sorted(X86_64_V3_FLAGS))
                       + "\n")
    assert resolve_target_cpu(HOST, str(cpuinfo)) == "x86-64-v3"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\n")  # no bmi2 etc.
    assert resolve_target_cpu(HOST, str(cpuinfo)) == ""
    assert resolve_target_cpu(HOST, str(tmp_path / "missing")) == ""
    assert resolve_target_cpu("", str(cpuinfo)) == ""
    assert resolve_target_cpu("znver4", str(cpuinfo)) == "znver4"


@pytest.mark.parametrize("route", ["predict-frames", "predict-ids"])
def test_parity_with_tensorflow(exported_model, harness, eval_split, tmp_path, route):
    stacks, ids, want = eval_split
    assert len(stacks) >= 1000
    # Non-trivial probabilities: a confident model, not a uniform one.
    assert float(np.median(np.max(want, -1))) > 0.4
    model_dir, _ = exported_model
    _check_parity(harness, stacks, ids, want, tmp_path, route, served_classes(model_dir, stacks, want))


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


def test_size_frames_match_shared_vectors(harness):
    """lifetime_size_frame: the size frame core/context.py makes (contexts keyed on size)."""
    vectors = json.loads((ROOT / "tests" / "data" / "size_frame_vectors.json").read_text())
    cases = vectors["cases"]
    lines = _run(harness, "size-frames", *[size for size, _ in cases]).stdout.splitlines()
    assert [line.split() for line in lines] == [[frame, str(len(frame))] for _, frame in cases]
    assert json.loads(_run(harness, "info").stdout)["size_frame"] == 0  # the session model's


def test_no_malloc_on_the_prediction_path(harness, eval_split, tmp_path):
    stacks, _, _ = eval_split
    out = json.loads(_run(harness, "mallocs", write_stacks(tmp_path / "s", stacks[:300])).stdout)
    assert out["interposer_sees"] == 1  # the interposer does count allocations
    assert out["predictions"] == 300
    assert out["mallocs_frames"] == 0
    assert out["mallocs_ids"] == 0
    assert out["mallocs_cache"] == 0
    assert out["revalidations"] > 0  # the cache's own model runs were counted too


def _anonymous_kib() -> int:
    for line in pathlib.Path("/proc/self/smaps_rollup").read_text().splitlines():
        if line.startswith("Anonymous:"):
            return int(line.split()[1])
    raise AssertionError("no Anonymous line in /proc/self/smaps_rollup")


def test_predictors_cost_their_memo_only_once_they_predict(exported_model, eval_split):
    """A predictor's frame memo (4096 entries, ~160 KiB) is an anonymous mapping left
    unbacked until predictions write it: the in-process runtime creates 4 predictors in
    every process that serves a model and a program predicting from one thread at a
    time runs only the first (inprocess/src/online.c, pool_take).  Zeroed at creation,
    the four memos were ~640 KiB of every such process.  Predictions through a memo
    that has seen the frames equal those of a fresh predictor."""
    import ctypes

    from export import serve

    _, export_dir = exported_model
    lib = ctypes.CDLL(serve.model_plugin(str(export_dir)))
    lib.lifetime_predictor_create.restype = ctypes.c_void_p
    lib.lifetime_predict_frames.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_char_p),
                                            ctypes.POINTER(ctypes.c_size_t), ctypes.c_int,
                                            ctypes.POINTER(ctypes.c_float)]
    lib.lifetime_predictor_destroy.argtypes = [ctypes.c_void_p]
    lib.lifetime_predictor_create()  # the library's own first-use allocations
    before = _anonymous_kib()
    predictors = [lib.lifetime_predictor_create() for _ in range(4)]
    grown = _anonymous_kib() - before
    assert all(predictors)
    assert grown < 160, f"4 predictors took {grown} KiB of anonymous memory"

    def predict(p, frames):
        arr = (ctypes.c_char_p * len(frames))(*[f.encode() for f in frames])
        lengths = (ctypes.c_size_t * len(frames))(*[len(f.encode()) for f in frames])
        probs = (ctypes.c_float * 8)()
        cls = lib.lifetime_predict_frames(p, arr, lengths, len(frames), probs)
        return cls, list(probs)

    stacks = [list(s) for s in eval_split[0][:100]]
    seen = [predict(predictors[0], s) for s in stacks]  # fills predictor 0's memo
    again = [predict(predictors[0], s) for s in stacks]  # through it
    fresh = [predict(predictors[1], s) for s in reversed(stacks)][::-1]
    assert seen == again == fresh and len({cls for cls, _ in seen}) >= 1
    for p in predictors:
        lib.lifetime_predictor_destroy(p)


def test_prediction_cache(harness):
    proc = _run(harness, "cache")
    for name in ["hit_miss", "revalidation_max_on_disagree", "aliasing", "keys_spread",
                 "c_api_thread_local", "inline_layout"]:
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
    assert proc.returncode == 1 and "no vocab.txt" in proc.stderr

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


# ------------------------------------------------------------------------------------
# The folded graph restates model/network.py: both must change together.

# Shapes other than HParams' defaults in every dimension the serving graph and the C++
# input layout take from config.json.
NETWORK_SHAPES = {
    "frames-5x3-e12-u20": dict(architecture="frames", max_frames=5, tokens_per_frame=3,
                               embedding_dim=12, lstm_units=20),
    "frames-9x7-e6-u9": dict(architecture="frames", max_frames=9, tokens_per_frame=7,
                             embedding_dim=6, lstm_units=9),
    "frames-6x4-site-last": dict(architecture="frames", max_frames=6, tokens_per_frame=4,
                                 embedding_dim=8, lstm_units=10, site_last=True),
    "tokens-4x3-e10-u6": dict(architecture="tokens", max_frames=4, tokens_per_frame=3,
                              embedding_dim=10, lstm_units=6),
}


@pytest.mark.parametrize("shape", list(NETWORK_SHAPES))
def test_folded_graph_matches_network_py(shape):
    """model/network.py's model, with large random weights (far from a uniform output),
    against the folded graph export/graph.py builds from its weights."""
    from export import graph
    from model.hparams import HParams
    from model.network import build_model

    hp = HParams(vocab_size=60, **NETWORK_SHAPES[shape])
    model = build_model(hp, 8)
    rng = np.random.default_rng(3)
    for w in model.weights:
        w.assign(rng.normal(0.0, 0.7, tuple(w.shape)).astype(np.float32))
    fn = graph.folded_function(graph.extract_weights(model), hp.architecture, hp.max_frames,
                               hp.tokens_per_frame)
    probe = graph.probe_inputs(hp.vocab_size, hp.max_frames, hp.tokens_per_frame, n=200)
    want = np.asarray(model.predict(probe, verbose=0))
    assert float(np.median(np.max(want, -1))) > 0.2  # far from uniform (0.125): a
    assert float(np.std(want, axis=0).mean()) > 0.02  # difference would show
    assert graph.verify(model, fn, probe) < 1e-5


def test_trained_network_with_other_shapes_exports_with_parity(exported_model, tmp_path):
    """A model `lifetime train` writes with non-default shapes, exported and linked:
    the folded route is taken (not the Keras fallback) and the C++ library agrees with
    the saved Keras model on the eval split and the edge cases.  The frame limit is
    the dataset's (its context definition; train() takes it from there), so the
    session's profile is rebuilt into a dataset with another one."""
    from export.exporter import export_model

    session_model, _ = exported_model
    shape = NETWORK_SHAPES["frames-5x3-e12-u20"]
    dataset = make_dataset(tmp_path / "dataset", max_frames=shape["max_frames"],
                           profiles=dataset_profiles(training_dataset(session_model)))
    # (an unsure model, a high back-off threshold and the pure-site rule: the library's
    # site table is used both ways)
    model_dir = train_model_dir(dataset, tmp_path / "model", backoff_below=0.9, backoff_pure=0.8,
                                **{**TRAIN_SCHEDULE, "epochs": 3, "min_epochs": 1, **shape})
    manifest = export_model(model_dir, tmp_path / "export")
    assert manifest["graph"] == "folded" and manifest["folded_max_abs_dp"] < 1e-5
    assert (manifest["architecture"], manifest["max_frames"], manifest["tokens_per_frame"],
            manifest["max_tokens"]) == ("frames", 5, 3, 15)
    build = _build_harness(tmp_path / "export", tmp_path / "harness")
    stacks, ids, want = _parity_cases(model_dir)
    assert ids.shape[1] == 15
    served = served_classes(model_dir, stacks, want)
    unsure = np.max(want, -1) < np.float32(0.9)
    backed = served != np.argmax(want, -1)
    print(f"{unsure.sum()} of {len(stacks)} unsure, {(backed & unsure).sum()} of them and "
          f"{(backed & ~unsure).sum()} sure ones (pure sites) served another class")
    assert (backed & unsure).sum() >= 10  # the back-off changes classes, and the library agrees
    for route in ("predict-frames", "predict-ids"):
        (tmp_path / route).mkdir()
        _check_parity(build, stacks, ids, want, tmp_path / route, route, served)


def test_a_model_keyed_on_size_is_served_the_size_frame(exported_size_model, tmp_path):
    """Issue 34 item 3 end to end: a dataset keyed on size (size_feature), a model trained
    on it and its export.  The library says so (info.size_frame), and the §2.3 cache's
    miss path, given the stack's frames and the object's size, predicts what TensorFlow
    predicts on the context (the size frame first); the model tells the sizes apart."""
    from core import context

    model_dir, export = exported_size_model
    build = _build_harness(export, tmp_path / "harness")
    assert json.loads(_run(build, "info").stdout)["size_frame"] == 1
    stacks = eval_stacks(model_dir)
    assert {s[0] for s in stacks} == {"<size$64>", "<size$4096>"}
    ids, want = keras_probabilities(model_dir, stacks)
    sized = [[s[0][len("<size$"):-1]] + s[1:] for s in stacks]  # the size, then the stack
    _run(build, "cache-sized", write_stacks(tmp_path / "in", sized), tmp_path / "out")
    classes = np.fromfile(tmp_path / "out", dtype=np.int32)
    assert len(classes) == len(stacks)
    assert np.mean(classes == served_classes(model_dir, stacks, want)) >= 0.999
    # Stacks seen at both sizes: a 4096-byte object lives 3 classes longer (unless capped).
    by_site = {}
    for s, c in zip(stacks, classes):
        by_site.setdefault(tuple(s[1:]), {})[s[0]] = int(c)
    both = [v for v in by_site.values() if len(v) == 2]
    longer = np.mean([v["<size$4096>"] > v["<size$64>"] for v in both])
    print(f"{len(both)} stacks at both sizes; predicted longer-lived at 4096 B: {longer:.1%}")
    assert len(both) >= 30 and longer >= 0.6  # 47 and 74.5% here
    assert context.size_frame(4096) == "<size$4096>"
