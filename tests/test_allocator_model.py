"""The LLAMA allocator with the model predictor (LIFETIME_MODEL_PLUGIN=PLUGIN, the one
variable that serves a model in a process, the sampler's too; `lifetime run --allocator
llama --model EXPORT_DIR` builds the plugin and sets it): the session's small exported model
(tests/export_support.py) on the allocation path through the sampler's own online code
(inprocess/src/online.c, unwind.c, symtab.c, context.c, linked without sampler.c).

The "serve what you trained on" check: the contexts the allocator cut in process for a
program's known call sites are the contexts the offline pipeline makes from the same
program's profile (core/context.py on core/symbolize/'s frames), and the class
the allocator used for each is the one the model's C API gives those frames."""

from __future__ import annotations

import json
import subprocess

import pytest

from core import context as ctxmod
from export import serve
from lifetime import cli
from tests.sampler_support import only_profile, run_sampled
from tests.test_allocator import BUILD, built, preload_env
from tests.test_simulator import _c_api_classes

SITES = ("site_short_lived", "site_medium", "site_kept")
SERVED_FRAMES = 16  # allocator/src/predictor.cc: kServedFrames


@pytest.fixture(scope="module")
def served_model(exported_model):
    """(export dir, plugin, context definition, model id)."""
    _, export_dir = exported_model
    manifest = json.loads((export_dir / "export_manifest.json").read_text())
    definition = ctxmod.ContextDefinition.load(str(export_dir / "export_manifest.json"))
    return export_dir, serve.model_plugin(str(export_dir)), definition, manifest["model_id"]


def _offline_contexts(profile, definition) -> set:
    """Every stack of a profile cut as the dataset cuts it (machinery_free + frames)."""
    sym = ctxmod.make_symbolizer(profile.mappings)
    return {definition.frames(ctxmod.machinery_free(sym, list(s.addresses)))
            for s in profile.stacks.values()}


def _run_sites(export_dir, capfd, tmp_path, check: int = 997) -> tuple[str, dict]:
    """alloc_model_sites under `lifetime run --allocator llama --model EXPORT_DIR`, the
    checker on every `check` operations (0: off, and so the thread caches on): (the
    program's path, the allocator's stats)."""
    program = str(built(BUILD / "tests" / "alloc_model_sites"))
    stats_file = tmp_path / "stats.json"
    rc = cli.main(["run", "--allocator", "llama", "--model", str(export_dir),
                   "--stats", str(stats_file), "--", "env", f"LIFETIME_ALLOC_CHECK={check}",
                   program])
    out, err = capfd.readouterr()
    assert rc == 0 and out.startswith("ok "), err
    assert "model cache" in err and "hits of" in err, err
    return program, json.loads(stats_file.read_text())


def test_model_on_the_allocation_path_serves_the_offline_contexts(served_model, capfd, tmp_path):
    export_dir, plugin, definition, model_id = served_model
    assert definition.max_frames <= SERVED_FRAMES
    program, stats = _run_sites(export_dir, capfd, tmp_path)
    assert stats["predictor"] == f"model:{plugin}" and stats["checks"] > 0
    p = stats["prediction"]
    assert p["model_id"] == model_id and p["failures"] == 0
    assert p["inline_lookup"] == 1  # hits looked up in malloc itself (LIFETIME_CACHE_LAYOUT)
    assert p["lookups"] == p["cache_hits"] + p["misses"] + p["revalidations"]
    assert p["model_runs"] == p["misses"] + p["revalidations"] > 0
    assert p["cache_hits"] > 0.9 * p["lookups"] and p["lookups"] > 40000
    assert sum(p["class_allocs"]) == stats["allocs"] - stats["direct_allocs"]
    assert p["model_ns_total"] > 0 and p["model_ns_p50"] > 0

    # The same program profiled by the sampler (every allocation, its stack and mappings).
    prof_dir = tmp_path / "profile"
    run_sampled([program], prof_dir, extra_env={"LIFETIME_FULL_TRACE": "1"})
    offline = _offline_contexts(only_profile(prof_dir), definition)

    served = [(tuple(s["frames"]), s["class"]) for s in p["served"]]
    ours = {(frames, cls) for frames, cls in served if frames and frames[0] in SITES}
    assert {frames[0] for frames, _ in ours} == set(SITES), served
    for frames, _ in ours:
        assert frames in offline, (frames, sorted(c for c in offline if c and c[0] in SITES))
    # One class per context, and it is the model's for those frames.
    contexts = sorted({frames for frames, _ in ours})
    expected = dict(zip(contexts, _c_api_classes(plugin, [list(c) for c in contexts])))
    assert {(f, c) for f, c in ours} == {(f, expected[f]) for f in contexts}


def test_model_with_threads_and_fork(served_model, tmp_path):
    """Cross-thread frees and fork from a threaded program, the model predicting."""
    _, plugin, _, _ = served_model
    for driver, args in (("threads_xfree", ["2000"]), ("fork_threads", [])):
        stats = tmp_path / f"{driver}.%p.json"
        env = preload_env(model_plugin=plugin, check=997, stats=stats)
        proc = subprocess.run([str(built(BUILD / "tests" / f"alloc_{driver}")), *args], env=env,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr
        files = list(tmp_path.glob(f"{driver}.*.json"))
        main = max((json.loads(f.read_text()) for f in files), key=lambda s: s["allocs"])
        assert main["prediction"]["model_runs"] > 0 and main["prediction"]["failures"] == 0


def test_a_plugin_that_cannot_load_is_one_line(tmp_path):
    bad = tmp_path / "not-a-model.so"
    bad.write_bytes(b"\x7fELF nope")
    proc = subprocess.run(["/bin/echo", "hi"], env=preload_env(model_plugin=bad),
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == -6 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert lines == [f"lifetime_alloc: LIFETIME_MODEL_PLUGIN: {bad}: cannot load {bad}"]


def test_a_model_and_a_constant_predictor_are_one_line(tmp_path):
    """LIFETIME_MODEL_PLUGIN and LIFETIME_ALLOC_PREDICTOR both choose: refused, never one
    silently over the other."""
    env = preload_env(model_plugin=tmp_path / "m.so", predictor="constant:1")
    proc = subprocess.run(["/bin/echo", "hi"], env=env, capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == -6 and proc.stderr.strip().splitlines() == [
        "lifetime_alloc: LIFETIME_MODEL_PLUGIN and LIFETIME_ALLOC_PREDICTOR both choose the "
        "predictor: set one"]


def test_run_predictor_drops_an_outer_model(capfd, monkeypatch, tmp_path):
    """`lifetime run --predictor` chooses the predictor: an outer LIFETIME_MODEL_PLUGIN
    is not passed on (and `--model` drops an outer LIFETIME_ALLOC_PREDICTOR the same way)."""
    monkeypatch.setenv(serve.PLUGIN_ENV, str(tmp_path / "stale.so"))
    stats = tmp_path / "stats.json"
    assert cli.main(["run", "--allocator", "llama", "--predictor", "constant:1", "--stats",
                     str(stats), "--", "true"]) == 0, capfd.readouterr().err
    assert json.loads(stats.read_text())["predictor"] == "constant:1"


def test_run_model_usage_errors(capfd, tmp_path):
    assert cli.main(["run", "--allocator", "llama", "--model", str(tmp_path / "none"),
                     "--", "true"]) == 1
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no such model export directory" in err[0], err
    assert cli.main(["run", "--allocator", "llama", "--model", str(tmp_path), "--predictor",
                     "constant:1", "--", "true"]) == 1
    assert "--model and --predictor" in capfd.readouterr().err
    assert cli.main(["run", "--allocator", "glibc", "--model", str(tmp_path), "--", "true"]) == 1
    assert "--model is an option of --allocator llama" in capfd.readouterr().err


@pytest.mark.parametrize("check", [997, 0])  # 0: the thread caches' allocation path
def test_a_model_keyed_on_size_serves_the_offline_contexts_with_their_size_frames(
        check, exported_size_model, capfd, tmp_path):
    """A model whose contexts begin with the object's size frame (issue 34 item 3) on the
    allocation path, with the checker (the locked path) and without (the thread caches):
    each context the allocator served is one the offline pipeline makes from the same
    program's profile (stack and size of a sample), size frame first, and its class is
    the model's C API class for those frames."""
    _, export_dir = exported_size_model
    plugin = serve.model_plugin(str(export_dir))
    definition = ctxmod.ContextDefinition.load(str(export_dir / "export_manifest.json"))
    assert definition.size_feature
    program, stats = _run_sites(export_dir, capfd, tmp_path, check)
    p = stats["prediction"]
    assert p["failures"] == 0 and p["lookups"] > 0
    if check:  # every allocation asks the model (with caches: only their refills and misses)
        assert p["cache_hits"] > 0.9 * p["lookups"]

    prof_dir = tmp_path / "profile"
    run_sampled([program], prof_dir, extra_env={"LIFETIME_FULL_TRACE": "1"})
    prof = only_profile(prof_dir)
    sym = ctxmod.make_symbolizer(prof.mappings)
    site = {sid: ctxmod.machinery_free(sym, list(s.addresses)) for sid, s in prof.stacks.items()}
    offline = {definition.frames(site[s.stack_id], s.size) for s in prof.samples}

    served = [(tuple(s["frames"]), s["class"]) for s in p["served"]]
    ours = {(frames, cls) for frames, cls in served if len(frames) > 1 and frames[1] in SITES}
    # site_short_lived: 24, 32 and 40 bytes; site_medium 200; site_kept 5000
    assert {frames[:2] for frames, _ in ours} == {
        ("<size$24>", "site_short_lived"), ("<size$32>", "site_short_lived"),
        ("<size$40>", "site_short_lived"), ("<size$192>", "site_medium"),
        ("<size$4096>", "site_kept")}, served
    for frames, _ in ours:
        assert frames in offline, frames
    contexts = sorted({frames for frames, _ in ours})
    expected = dict(zip(contexts, _c_api_classes(plugin, [list(c) for c in contexts])))
    assert {(f, c) for f, c in ours} == {(f, expected[f]) for f in contexts}
