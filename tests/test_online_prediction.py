"""Online, counterfactual predictions: an exported model loaded into the sampler.

A small model, trained by `lifetime train`'s code on a synthetic dataset written by
`lifetime build-dataset`'s job (tests/export_support.py), is exported once with the
real XLA AOT toolchain, built into the sampler's model plugin through CMake
find_package, and loaded by `lifetime profile --model`. The tests check that every
sampled allocation carries a prediction, that the trailer's totals add up, that
evaluate-online reports on them, and that the profiler's host-safety guarantees hold
with a model loaded (threads with cross-thread frees, fork + exec, a model that cannot
be loaded).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from export import serve
from tests.proxy_support import proxy_binary
from tests.sampler_support import (PER_PRODUCER, PRODUCERS, check_cross_thread_profile, compile_c,
                                   only_profile, read_all, run_sampled)


@pytest.fixture(scope="module")
def exported(exported_model):
    """(export dir, plugin .so) of the session's small exported model."""
    _, export_dir = exported_model
    return str(export_dir), serve.model_plugin(str(export_dir))


def _model_env(plugin: str) -> dict:
    return {serve.PLUGIN_ENV: plugin}


def test_every_sample_carries_a_prediction(exported, tmp_path):

    export_dir, _ = exported
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "lifetime.cli", "profile", "--model", export_dir,
           "--interval", "65536", "--out", str(out), "--",
           str(proxy_binary("v2")), "--seconds", "3"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    prof = only_profile(out)
    assert prof.header.model_id and prof.header.model_path.endswith(".so")
    # Allocations made before the sampler's constructor (static initializers, e.g.
    # libstdc++'s 71 KiB exception pool) are sampled, but the model is loaded in that
    # constructor, never inside malloc: those few start-up samples carry no prediction.
    predicted = [s for s in prof.samples if s.predicted]
    early = [s for s in prof.samples if not s.predicted]
    assert len(predicted) > 1000 and len(early) <= 2
    assert all(e.alloc_monotonic_ns < min(s.alloc_monotonic_ns for s in predicted)
               for e in early)
    num_classes = 8
    assert all(0 <= s.predicted_class < num_classes for s in predicted)
    stats = prof.trailer.prediction
    assert stats.predictions == stats.cache_hits + stats.cache_misses
    assert stats.predictions >= len(predicted)  # dropped samples were predicted too
    assert stats.model_runs == stats.cache_misses + stats.revalidations
    assert stats.failures == 0
    assert sum(s.prediction_cache_hit for s in prof.samples) > 0
    # Misses run the model; hits do not: a miss costs more than the median hit.
    hits = sorted(s.prediction_ns for s in predicted if s.prediction_cache_hit)
    misses = sorted(s.prediction_ns for s in predicted if not s.prediction_cache_hit)
    assert misses[len(misses) // 2] > hits[len(hits) // 2]

    report = tmp_path / "online.json"
    broken = tmp_path / "broken.ltprof"  # one bad file is counted, named and skipped
    broken.write_bytes(b"\x00" * 30)
    proc = subprocess.run([sys.executable, "-m", "lifetime.cli", "evaluate-online",
                           *map(str, out.glob("*.ltprof")), str(broken), "--model", export_dir,
                           "--json", str(report)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "cache        hit rate" in proc.stdout and "per sample" in proc.stdout
    assert "skipped      1 unusable files" in proc.stdout
    assert f"{broken}: corrupt" in proc.stdout, proc.stdout
    result = json.loads(report.read_text())
    assert result["predicted_samples"] == len(predicted)
    assert result["cache"]["hit_rate"] > 0.9  # size classes keep the keys few
    for key in ("weighted_exact", "weighted_off_by_one", "weighted_under_prediction",
                "unweighted_exact", "per_sample_exact"):
        assert 0.0 <= result["headline"][key] <= 1.0


def test_threads_with_cross_thread_frees_and_a_model(exported, tmp_path):
    _, plugin = exported
    binary = compile_c("threads_xfree", tmp_path)
    proc = run_sampled([binary, str(PER_PRODUCER)], tmp_path / "out", interval=1,
                       extra_env=_model_env(plugin))
    total = PER_PRODUCER * PRODUCERS
    assert proc.stdout == f"produced {total} consumed {total}\n"
    prof = only_profile(tmp_path / "out")
    check_cross_thread_profile(prof, PER_PRODUCER)
    assert all(s.predicted for s in prof.samples)


def test_fork_and_exec_with_a_model(exported, tmp_path):
    _, plugin = exported
    binary = compile_c("fork_exec", tmp_path)
    out = tmp_path / "out"
    proc = run_sampled([binary, "parent", "alloc"], out, interval=1,
                       extra_env=_model_env(plugin))
    assert proc.stdout.startswith("parent ")
    profiles = read_all(out)
    # parent, forked child (it sampled before exec), exec'd image: one file each
    assert len(profiles) == 3
    assert sum(p.header.forked_from_pid != 0 for p in profiles) == 1
    for prof in profiles:
        assert prof.header.model_id
        assert all(s.predicted for s in prof.samples)


def test_an_unloadable_model_leaves_plain_profiling(tmp_path):

    bad = tmp_path / "not-a-model.so"
    bad.write_bytes(b"\x7fELF garbage")
    out = tmp_path / "out"
    proc = run_sampled([str(proxy_binary("v1")), "--seconds", "1"], out, interval=65536,
                       extra_env=_model_env(str(bad)))
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("lifetime-sampler:")]
    assert len(lines) == 1 and str(bad) in lines[0] and "predictions off" in lines[0]
    prof = only_profile(out)
    assert prof.samples and not any(s.predicted for s in prof.samples)
    assert not prof.header.model_id


def test_the_old_variable_name_says_its_new_one(tmp_path):
    """LIFETIME_MODEL_LIB, the sampler's name before LIFETIME_MODEL_PLUGIN served both the
    sampler and the allocator: one line naming the new one, plain profiling."""
    out = tmp_path / "out"
    proc = run_sampled(["/bin/echo", "hi"], out, extra_env={"LIFETIME_MODEL_LIB": "x.so"})
    assert proc.stdout == "hi\n"
    assert proc.stderr.splitlines() == [
        "lifetime-sampler: LIFETIME_MODEL_LIB: renamed LIFETIME_MODEL_PLUGIN; predictions off"]
    assert not only_profile(out).header.model_id


def test_profile_with_a_missing_export_is_a_clear_error(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "lifetime.cli", "profile", "--model",
                           str(tmp_path / "nope"), "--", "true"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "no such model export directory" in proc.stderr and "nope" in proc.stderr


def test_evaluate_online_needs_predictions(exported, tmp_path):

    export_dir, _ = exported
    out = tmp_path / "out"
    run_sampled([str(proxy_binary("v1")), "--seconds", "1"], out, interval=65536)
    proc = subprocess.run([sys.executable, "-m", "lifetime.cli", "evaluate-online",
                           *map(str, out.glob("*.ltprof")), "--model", export_dir],
                          capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert proc.returncode != 0
    assert "no online predictions" in proc.stderr


def test_evaluate_online_model_without_a_context_definition_fails_clearly(tmp_path):
    """--model must name a model or export directory whose context definition is readable."""
    (tmp_path / "empty").mkdir()
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    old = tmp_path / "old"
    old.mkdir()
    (old / "export_manifest.json").write_text('{"format": "lifetime-export-v1"}')
    for model, expected in ((tmp_path / "empty", "neither a model directory"),
                            (broken, "config.json: not valid JSON"),
                            (old, "no context definition")):
        proc = subprocess.run([sys.executable, "-m", "lifetime.cli", "evaluate-online",
                               "--model", str(model), str(tmp_path / "x.ltprof")],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode != 0
        assert expected in proc.stderr and str(model) in proc.stderr, proc.stderr


def test_a_model_keyed_on_size_predicts_each_sample_from_its_size_frame(
        exported_size_model, tmp_path):
    """The sampler's online path with a model keyed on size (issue 34 item 3): every
    sample's prediction is the model's C API class for its context made offline from its
    stack and its size (the size frame first), and evaluate-online scores those contexts."""
    from core import context as ctxmod
    from model.online_eval import evaluate_online
    from tests.test_allocator import BUILD, built
    from tests.test_simulator import _c_api_classes

    _, export_dir = exported_size_model
    plugin = serve.model_plugin(str(export_dir))
    definition = ctxmod.ContextDefinition.load(str(export_dir / "export_manifest.json"))
    out = tmp_path / "out"
    run_sampled([str(built(BUILD / "tests" / "alloc_model_sites"))], out,
                extra_env={**_model_env(plugin), "LIFETIME_FULL_TRACE": "1"})
    prof = only_profile(out)
    sym = ctxmod.make_symbolizer(prof.mappings)
    site = {sid: ctxmod.machinery_free(sym, list(s.addresses)) for sid, s in prof.stacks.items()}
    ours = [s for s in prof.samples
            if s.predicted and site[s.stack_id][:1] in (("site_kept",), ("site_short_lived",))]
    contexts = sorted({definition.frames(site[s.stack_id], s.size) for s in ours})
    assert {c[:2] for c in contexts} == {
        ("<size$24>", "site_short_lived"), ("<size$32>", "site_short_lived"),
        ("<size$40>", "site_short_lived"), ("<size$4096>", "site_kept")}
    want = dict(zip(contexts, _c_api_classes(plugin, [list(c) for c in contexts])))
    for s in ours:
        assert s.predicted_class == want[definition.frames(site[s.stack_id], s.size)]
    result = evaluate_online([str(p) for p in out.glob("*.ltprof")], definition)
    assert result["predicted_samples"] >= len(ours) > 20000
