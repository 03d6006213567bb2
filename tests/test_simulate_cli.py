"""`lifetime simulate`: the profile -> trace converter, the table predictors, the report.

Real data throughout: the proxy workload profiled by the real sampler (every
allocation recorded: interval 1 byte) is simulated against a dataset built by
`lifetime build-dataset` from another run of it; the converter's ordering is checked on
a hand-built profile whose samples complete out of allocation order.
"""

from __future__ import annotations

import glob
import json
import os
import shutil

import pytest

from lifetime import cli
from profile_format import profile_pb2, write_profile
from simulator import NEVER, read_trace
from simulator.convert import ConvertError, convert_profile, load_stacks, stacks_path
from tests.proxy_support import proxy_binary

MS = 1_000_000


# -- the converter on a hand-built profile ------------------------------------------------

def _hand_profile(path: str, interval: int = 4096) -> list[tuple]:
    """A profile whose samples come in completion order (as the sampler writes them),
    spread over three chunks, censored ones in the last; returns the expected trace
    records (alloc, free, size, stack, thread, align) in allocation order."""
    # (alloc ns, free ns or None, size, stack, thread, alignment) in *file* order
    samples = [
        (5_000 * MS, 5_001 * MS, 100, 1, 11, 0),       # short-lived, completes first
        (1_000 * MS, 5_500 * MS, 200, 2, 12, 0),       # allocated earlier, freed later
        (3_000 * MS, 5_600 * MS, 300, 1, 11, 64),
        (3_000 * MS, 5_700 * MS, 301, 2, 13, 0),       # same alloc time: file order kept
        (4_000 * MS, 5_800 * MS, 400, 3, 11, 24),      # alignment 24 -> 32
        (2_000 * MS, 6_000 * MS, 500, 3, 12, 0),
        (500 * MS, None, 600, 2, 11, 0),               # censored: never freed
        (3_000 * MS, None, 700, 1, 14, 16),
    ]
    chunks = [profile_pb2.ProfileChunk() for _ in range(3)]
    h = chunks[0].header
    h.schema_version = profile_pb2.SCHEMA_VERSION
    h.program, h.version_label, h.pid = "handmade", "v0", 7
    h.sampling_interval_bytes = interval
    h.start_monotonic_ns = 400 * MS
    chunks[0].mappings.add(id=1, start=0x400000, limit=0x500000, file_offset=0,
                           path="/nonexistent/handmade", build_id=b"\x12\x34")
    for sid in (1, 2, 3):
        chunks[0].stacks.add(id=sid, addresses=[0x400100 + sid, 0x400200])
    for i, (a, f, size, stack, tid, align) in enumerate(samples):
        chunk = chunks[0] if i < 3 else chunks[1] if f is not None else chunks[2]
        s = chunk.samples.add(stack_id=stack, size=size, alignment=align, alloc_monotonic_ns=a,
                              alloc_thread=tid, weight=1.0, alloc_function=profile_pb2.MALLOC)
        if f is None:
            s.censored, s.observed_age_ns = True, 7_000 * MS - a
        else:
            s.free_monotonic_ns, s.free_function = f, profile_pb2.FREE
            s.alloc_allocated_bytes, s.free_allocated_bytes = 1, 2
    t = chunks[2].trailer
    t.end_reason, t.end_monotonic_ns = profile_pb2.END_EXIT, 7_000 * MS
    t.total_allocations, t.samples, t.censored_samples = 80, len(samples), 2
    write_profile(path, chunks)
    order = sorted(range(len(samples)), key=lambda i: (samples[i][0], i))
    return [(samples[i][0], NEVER if samples[i][1] is None else samples[i][1], samples[i][2],
             samples[i][3], samples[i][4], 32 if samples[i][5] == 24 else samples[i][5])
            for i in order]


def _records(trace: str) -> list[tuple]:
    header, it = read_trace(trace)
    return header, [(r.alloc_ns, NEVER if r.free_ns is None else r.free_ns, r.size, r.stack_id,
                     r.thread_id, r.align) for r in it]


def test_converter_sorts_out_of_order_completions_with_bounded_runs(tmp_path):
    prof = str(tmp_path / "hand.ltprof")
    expected = _hand_profile(prof)
    one = convert_profile(prof, tmp_path / "one.lttrace")
    many = convert_profile(prof, tmp_path / "many.lttrace", run_records=2)  # 4 runs, merged
    assert many.meta["counts"]["runs"] == 4 and one.meta["counts"]["runs"] == 1
    assert (tmp_path / "one.lttrace").read_bytes() == (tmp_path / "many.lttrace").read_bytes()
    header, records = _records(one.trace)
    assert records == expected
    assert header.end_ns == 7_000 * MS
    assert header.boundaries_ns == (10 * MS, 100 * MS, 1000 * MS, 10_000 * MS, 100_000 * MS,
                                    1_000_000 * MS)
    assert not list(tmp_path.glob(".lttrace-runs-*"))  # temporary runs are gone

    side = load_stacks(stacks_path(one.trace))
    assert side["trace"] == "one.lttrace"
    assert side["mappings"] == [{"id": 1, "start": 0x400000, "limit": 0x500000, "file_offset": 0,
                                 "path": "/nonexistent/handmade", "build_id": "1234"}]
    stacks = {s["id"]: s for s in side["stacks"]}
    assert stacks[2]["addresses"] == [0x400102, 0x400200]
    # stack 1: 1 ms (<10ms), 2.6 s (<10s), never freed (inf)
    assert stacks[1]["objects"] == [1, 0, 0, 1, 0, 0, 0, 1]
    assert stacks[1]["bytes"] == [100, 0, 0, 300, 0, 0, 0, 700]
    src = side["source"]
    assert src["sampled"] and not src["full_trace"] and src["sampling_interval_bytes"] == 4096
    assert src["coverage"] == pytest.approx(8 / 80)
    assert side["counts"]["censored"] == 2
    assert side["counts"]["skipped"] == {"alignment_rounded_up (kept)": 1}


def test_converter_full_trace_when_every_allocation_is_recorded(tmp_path):
    prof = str(tmp_path / "hand.ltprof")
    _hand_profile(prof, interval=1)
    side = convert_profile(prof, tmp_path / "t.lttrace").meta
    assert side["source"]["full_trace"] and not side["source"]["sampled"]


def test_corrupt_and_empty_profiles_are_convert_errors(tmp_path):
    bad = tmp_path / "bad.ltprof"
    bad.write_bytes(os.urandom(300))
    with pytest.raises(ConvertError, match=f"^{bad}: "):
        convert_profile(str(bad), tmp_path / "bad.lttrace")
    empty = tmp_path / "empty.ltprof"
    chunk = profile_pb2.ProfileChunk()
    chunk.header.schema_version = profile_pb2.SCHEMA_VERSION
    chunk.header.sampling_interval_bytes = 1
    write_profile(str(empty), [chunk])
    with pytest.raises(ConvertError, match="empty: the profile holds no usable samples"):
        convert_profile(str(empty), tmp_path / "empty.lttrace")


# -- the real thing: the proxy, profiled in full, against a dataset of another run ------

@pytest.fixture(scope="module")
def full_profile(tmp_path_factory):
    """proxy_server_v1 for 3 s with every allocation recorded (interval 1 byte)."""
    from profiler import launch

    out = tmp_path_factory.mktemp("proxy-full")
    rc = launch.run_profiled([str(proxy_binary("v1")), "--seconds", "3"], out_dir=str(out),
                             interval=1, version_label="v1")
    assert rc == 0
    (path,) = glob.glob(str(out / "*.ltprof"))
    return path


@pytest.fixture(scope="module")
def train_dataset(proxy_profile, tmp_path_factory):
    """`lifetime build-dataset` on another (sampled) run of proxy v1."""
    out = tmp_path_factory.mktemp("train-ds")
    assert cli.main(["build-dataset", "--profiles", proxy_profile("v1"), "--out", str(out)]) == 0
    return str(out)


def test_simulate_full_proxy_profile_writes_table3_report(full_profile, train_dataset, tmp_path,
                                                          capsys):
    out = tmp_path / "sim"
    assert cli.main(["simulate", full_profile, "--train", train_dataset, "--out", str(out),
                     "--series-interval-ms", "20", "--check-invariants"]) == 0
    captured = capsys.readouterr()
    assert "report: " in captured.out and "converted " in captured.err
    for name in ("report.md", "report.html", "report.json", "memory_over_time.png",
                 "memory_bars.png", "simulation.json", "trace.lttrace", "trace.stacks.json",
                 "tables/exact.tbl", "tables/site.tbl"):
        assert (out / name).is_file(), name
    assert (out / "memory_over_time.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rep = json.loads((out / "report.json").read_text())
    sim = json.loads((out / "simulation.json").read_text())

    assert not rep["sampled"] and rep["source"]["full_trace"]
    assert rep["source"]["coverage"] > 0.99  # nearly every allocation is in the trace
    assert sim["settings"]["check_invariants"] and sim["settings"]["series_interval_ns"] == 20 * MS
    rows = {r["predictor"]: r for r in rep["table3"]}
    assert list(rows) == ["oracle", "context oracle (T95)", "context oracle (cost rule)",
                          "exact-context table", "site table", "one class",
                          "TCMalloc rule (> 1 MiB)", "TCMalloc rule (all sizes)"]
    live = sim["live"]["steady_state_bytes"]
    base = next(a for a in sim["allocators"] if a["name"] == "baseline")["steady_state_bytes"]
    for r in rows.values():
        assert r["baseline_steady_state_bytes"] == base and r["live_steady_state_bytes"] == live
        assert r["fragmentation_reduction"] == pytest.approx(
            1 - (r["llama_steady_state_bytes"] - live) / (base - live))
        assert r["fragmentation_reduction"] == pytest.approx(r["engine_fragmentation_reduction"],
                                                             abs=1e-5)
    assert rows["oracle"]["accuracy_by_allocations"] == 1.0
    # The context oracles: every stack of the trace in their tables, the T95 one right on
    # every context by construction (its class is the per-context label).
    assert rows["context oracle (T95)"]["accuracy_per_context"] == 1.0
    assert 0 < rows["context oracle (cost rule)"]["accuracy_per_context"] <= 1
    assert rep["context_oracle"]["contexts"] > 0
    assert {"oracle_minus_context_t95", "oracle_minus_context_cost"} <= set(rep["gaps"])
    for name in ("context_t95", "context_cost"):
        assert (out / "tables" / f"{name}.tbl").is_file()
        assert f"llama:{name}" in {a["name"] for a in sim["allocators"]}
    # Same binary, same context definition: the trace's stacks are cut into the dataset's
    # contexts, so the exact table knows nearly all of them and predicts well.
    assert rep["coverage"]["exact"]["objects"] > 0.95 * rep["coverage"]["exact"]["objects_total"]
    assert rows["exact-context table"]["accuracy_by_allocations"] > 0.8
    assert rows["one class"]["accuracy_by_allocations"] < rows["exact-context table"]["accuracy_by_allocations"]
    one = next(a for a in sim["allocators"] if a["name"] == "llama:one_class")
    assert one["predictor"]["class"] == rep["training"]["majority_class"] == rep["table_default"]["class"]
    for name, pages in rep["pages"].items():
        assert {"reclassifications_down", "deadline_expiries"} <= set(pages)

    md = (out / "report.md").read_text()
    assert "## Table 3" in md and "| proxy\\_server\\_v1 (v1) | exact-context table |" in md
    assert "| proxy\\_server\\_v1 (v1) | context oracle (T95) |" in md
    assert "| proxy\\_server\\_v1 (v1) | context oracle (cost rule) |" in md
    assert "![memory over time (Figure 8)](memory_over_time.png)" in md
    assert "Sampled trace" not in md
    html = (out / "report.html").read_text()
    assert "<table>" in html and '<img alt="memory over time (Figure 8)" src="memory_over_time.png"' in html

    # The trace is reusable: given again, it is not converted and gives the same figures.
    again = tmp_path / "again"
    assert cli.main(["simulate", str(out / "trace.lttrace"), "--train", train_dataset, "--out",
                     str(again), "--series-interval-ms", "20"]) == 0
    assert not (again / "trace.lttrace").exists()
    rep2 = json.loads((again / "report.json").read_text())
    assert rep2["table3"] == rep["table3"]


def test_simulate_sampled_profile_says_it_is_sampled(proxy_profile, train_dataset, tmp_path,
                                                     capsys):
    out = tmp_path / "sim"
    assert cli.main(["simulate", proxy_profile("v1"), "--train", train_dataset, "--out",
                     str(out)]) == 0
    captured = capsys.readouterr()
    assert "Poisson-sampled" in captured.err and "sampled objects only" in captured.out
    rep = json.loads((out / "report.json").read_text())
    assert rep["sampled"] and rep["source"]["sampling_interval_bytes"] == 512 * 1024
    assert rep["source"]["coverage"] < 0.5
    assert "**Sampled trace.**" in (out / "report.md").read_text()


# "segregated" places every object in size-class heaps: the report has no LLAMA page counters
@pytest.mark.parametrize("policy,described", [
    ("occupancy:0.9,own-blocks,divert-mixed", "occupancy:0.9,own-blocks,divert-mixed"),
    ("segregated", "segregate-above:8,size-classes:inf")])
def test_simulate_policy_applies_to_every_llama_row(proxy_profile, train_dataset, tmp_path, policy,
                                                    described):
    out = tmp_path / "sim"
    assert cli.main(["simulate", proxy_profile("v1"), "--train", train_dataset, "--out",
                     str(out), "--policy", policy]) == 0
    sim = json.loads((out / "simulation.json").read_text())
    llamas = [a["name"] for a in sim["allocators"] if a["kind"] == "llama"]
    assert len(llamas) >= 5 and sim["settings"]["llama_policy"] == {n: described for n in llamas}
    assert json.loads((out / "report.json").read_text())["settings"]["policy"] == policy
    assert "## LLAMA pages" in (out / "report.md").read_text()


# -- bad inputs: one line each ------------------------------------------------------------

def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    err = [line for line in err if line.startswith("lifetime simulate: error:")]
    assert len(err) == 1, err
    return err[0]


def test_bad_inputs_give_one_clear_line(train_dataset, full_profile, tmp_path, capsys,
                                        monkeypatch):
    out = str(tmp_path / "out")
    corrupt = tmp_path / "corrupt.ltprof"
    corrupt.write_bytes(b"\x00" * 7 + os.urandom(200))
    assert cli.main(["simulate", str(corrupt), "--train", train_dataset, "--out", out]) == 1
    line = _one_error_line(capsys)
    assert f"error: {corrupt}: " in line and ("corrupt" in line or "truncated" in line)

    missing = tmp_path / "nope.ltprof"
    assert cli.main(["simulate", str(missing), "--train", train_dataset, "--out", out]) == 1
    assert f"{missing}: no such file" in _one_error_line(capsys)

    no_context = tmp_path / "no-context"
    shutil.copytree(train_dataset, no_context)
    manifest = json.loads((no_context / "manifest.json").read_text())
    del manifest["context"]
    (no_context / "manifest.json").write_text(json.dumps(manifest))
    assert cli.main(["simulate", full_profile, "--train", str(no_context), "--out", out]) == 1
    line = _one_error_line(capsys)
    assert f"--train {no_context}" in line and "no context definition" in line

    assert cli.main(["simulate", full_profile, "--train", str(tmp_path / "nodir"), "--out",
                     out]) == 1
    assert "no such dataset directory" in _one_error_line(capsys)

    sized = tmp_path / "sized"  # contexts keyed on size: not per stack, refused in one line
    shutil.copytree(train_dataset, sized)
    manifest = json.loads((sized / "manifest.json").read_text())
    manifest["context"]["size_feature"] = True
    (sized / "manifest.json").write_text(json.dumps(manifest))
    assert cli.main(["simulate", full_profile, "--train", str(sized), "--out", out]) == 1
    line = _one_error_line(capsys)
    assert f"--train {sized}" in line and "keyed on size" in line

    assert cli.main(["simulate", full_profile, "--train", train_dataset, "--out", out,
                     "--model", str(tmp_path)]) == 1
    line = _one_error_line(capsys)
    assert f"--model {tmp_path}: not a `lifetime export` output" in line
    assert cli.main(["simulate", full_profile, "--train", train_dataset, "--out", out,
                     "--model", str(tmp_path / "nodir")]) == 1
    assert "no such model export directory" in _one_error_line(capsys)
    assert cli.main(["simulate", full_profile, "--train", train_dataset, "--out", out,
                     "--debug-dir", str(tmp_path / "nodebug")]) == 1
    assert "--debug-dir" in (line := _one_error_line(capsys)) and "not a directory" in line

    # A trace without its side file, and a trace the engine refuses.
    trace = tmp_path / "t.lttrace"
    trace.write_bytes(b"LTTRACE\0" + b"\x01" * 7)
    assert cli.main(["simulate", str(trace), "--train", train_dataset, "--out", out]) == 1
    assert f"{tmp_path / 't.stacks.json'}: no such file" in _one_error_line(capsys)
    prof = str(tmp_path / "hand.ltprof")
    _hand_profile(prof)
    convert_profile(prof, tmp_path / "good.lttrace")
    shutil.copy(tmp_path / "good.stacks.json", tmp_path / "t.stacks.json")
    assert cli.main(["simulate", str(trace), "--train", train_dataset, "--out", out]) == 1
    assert f"{trace}: truncated header" in _one_error_line(capsys)

    assert cli.main(["simulate", full_profile, "--train", train_dataset, "--out", out,
                     "--policy", "occupancy,nope"]) == 1
    assert "--policy occupancy,nope: unknown policy 'nope'" in _one_error_line(capsys)

    monkeypatch.setenv("LIFETIME_SIMULATE", str(tmp_path / "no-engine"))
    assert cli.main(["simulate", full_profile, "--train", train_dataset, "--out", out]) == 1
    assert f"{tmp_path / 'no-engine'} is not built" in _one_error_line(capsys)


def test_truncated_profile_converts_what_was_flushed_and_says_so(tmp_path):
    prof = tmp_path / "hand.ltprof"
    _hand_profile(str(prof))
    data = prof.read_bytes()
    prof.write_bytes(data[:-10])  # the last chunk (trailer, censored samples) is cut
    res = convert_profile(str(prof), tmp_path / "t.lttrace", run_records=3)
    assert res.records == 6  # the six freed samples of the first two chunks
    assert any(p.startswith("truncated") for p in res.meta["counts"]["problems"])
    assert not res.meta["source"]["complete"] and res.meta["source"]["coverage"] is None
    _, records = _records(res.trace)
    assert [r[0] for r in records] == sorted(r[0] for r in records)


# -- the model predictor: the exported model through its C API and §2.3 cache ----------

@pytest.fixture(scope="module")
def model_run(exported_model, tmp_path_factory):
    """`lifetime simulate` of the session model's own synthetic profile, against its
    training dataset, with --model: (model dir, export dir, out dir, report)."""
    from tests.export_support import training_dataset

    model_dir, export_dir = exported_model
    dataset = training_dataset(model_dir)
    profile = dataset.parent / "dataset-inputs" / "profiles" / "synthetic.ltprof"
    out = tmp_path_factory.mktemp("sim-model")
    assert cli.main(["simulate", str(profile), "--train", str(dataset), "--model",
                     str(export_dir), "--out", str(out)]) == 0
    return model_dir, export_dir, out, json.loads((out / "report.json").read_text())


def test_model_predictor_serves_the_model_its_training_contexts(model_run):
    """Per stack, the class the engine got through the plugin's C API and cache is the
    trained Keras model's served class for that stack's context frames (argmax, or the
    back-off's where the model is unsure; the frames symbolized independently here with
    the model's context definition)."""
    import numpy as np

    from core.context import ContextDefinition
    from simulator.model_input import read_served
    from simulator.tables import symbolize_stacks
    from model.io import read_model_dir
    from tests.export_support import keras_probabilities, served_classes

    model_dir, export_dir, out, rep = model_run
    side = load_stacks(str(out / "trace.stacks.json"))
    definition = ContextDefinition.load(str(export_dir / "export_manifest.json"))
    contexts = symbolize_stacks(side, definition)
    served = read_served(str(out / "model" / "served.txt"))["model"]
    assert set(served) == set(contexts)  # every stack of the trace allocated
    ids = sorted(served)
    frames = [list(contexts[i]) for i in ids]
    _, probs = keras_probabilities(model_dir, frames)
    want = served_classes(model_dir, frames, probs)
    top2 = np.sort(probs, axis=1)[:, -2:]
    below = read_model_dir(str(model_dir)).hparams.backoff_below
    checked = 0
    for i, w, (second, first) in zip(ids, want, top2):
        assert len(served[i]) == 1, (i, served[i])  # one class per stack (the model is pure)
        if first - second < 1e-4 or abs(first - below) < 1e-4:  # near a tie or the threshold:
            continue                                             # float rounding may go either way
        assert next(iter(served[i])) == int(w), (i, contexts[i])
        checked += 1
    assert checked >= 0.95 * len(ids)
    # The objects per class the engine reports are the served classes' objects.
    v = rep["variants"]["llama:model"]["predictor"]
    per_class = [0] * len(v["predicted_per_class"])
    for classes in served.values():
        for c, n in classes.items():
            per_class[c] += n
    assert per_class == v["predicted_per_class"]


def test_model_predictor_reports_cache_and_cost(model_run):
    _, export_dir, out, rep = model_run
    m = rep["model"]
    c = m["cache"]
    objects = rep["trace"]["records"]
    assert c["lookups"] == c["hits"] + c["misses"] == objects
    assert m["model_runs"] == c["misses"] + c["revalidations"] > 0
    assert c["hits"] > 0  # stacks allocate several objects of one size class
    # Distinct keys: at least one miss each (one context and size class per stack here).
    assert c["misses"] >= m["distinct_contexts"]
    t = m["timing_ns"]
    assert t["model_call"]["calls"] == m["model_runs"]
    assert t["cache_hit"]["calls"] == objects - m["model_runs"]
    assert t["model_call"]["mean"] > t["cache_hit"]["mean"] > 0
    assert t["model_call"]["p99"] >= t["model_call"]["p50"] > 0
    manifest = json.loads((export_dir / "export_manifest.json").read_text())
    assert m["model_id"] == manifest["model_id"]
    row = next(r for r in rep["table3"] if r["predictor"] == "model")
    assert row["accuracy_by_allocations"] > 0.5 and row["accuracy_per_context"] is not None
    assert 0 <= row["accuracy_per_context_weighted"] <= 1
    md = (out / "report.md").read_text()
    assert "## Model predictor" in md and "model call (miss or revalidation)" in md


def test_model_with_another_context_definition_is_refused(model_run, tmp_path, capsys):
    from tests.export_support import training_dataset

    model_dir, export_dir, out, _ = model_run
    other = tmp_path / "export"
    shutil.copytree(export_dir, other)
    manifest = json.loads((other / "export_manifest.json").read_text())
    manifest["context"]["version"] = "lifetime-context-v1"
    (other / "export_manifest.json").write_text(json.dumps(manifest))
    assert cli.main(["simulate", str(out / "trace.lttrace"), "--train",
                     str(training_dataset(model_dir)), "--model", str(other), "--out",
                     str(tmp_path / "out")]) == 1
    line = _one_error_line(capsys)
    assert f"--model {other}" in line and "lifetime-context-v1" in line
    assert "cannot give the model the contexts it was trained on" in line


def test_oracle_classes_match_the_proxy_ground_truth(full_profile, tmp_path):
    """The proxy's designed lifetimes give the oracle a second check: on a full trace, the
    T95 class of each ground-truth site's objects is the site's designed class.  Checked for the sites whose objects die well inside the 3 s run (10ms, 100ms)
    or never (inf); longer classes are cut short by the end of the run."""
    from core import symbolize as sym
    from core.lifetimes import LabelScheme
    from simulator.convert import MappingRecord
    from simulator.tables import context_t95_classes
    from tests.proxy_support import GROUND_TRUTH

    result = convert_profile(full_profile, tmp_path / "t.lttrace")
    side = load_stacks(stacks_path(result.trace))
    names = side["class_names"]
    symbolizer = sym.Symbolizer([MappingRecord(m) for m in side["mappings"]], cache=sym.ModuleCache())
    site_of: dict[int, str] = {}
    for s in side["stacks"]:
        site = sym.allocation_site(symbolizer.symbolize_stack(s["addresses"], leaf_is_return_address=True))
        site_of[int(s["id"])] = site.function if site is not None else ""
    objects: dict[str, int] = {}
    for s in side["stacks"]:
        objects[site_of[int(s["id"])]] = objects.get(site_of[int(s["id"])], 0) + sum(s["objects"])
    # The T95 class of each site's objects in the trace, by the dataset's label rule (the
    # context oracle's; objects live at the end censored at their age then).
    per_site = context_t95_classes(result.trace, site_of, LabelScheme())
    checked = []
    for site in GROUND_TRUTH["sites"]:
        if site["class"] not in ("10ms", "100ms", "inf"):
            continue
        fn = site["functions"]["v1"]
        assert fn in per_site and objects[fn] >= 20, f"{site['id']}: too few objects"
        got = names[per_site[fn]]
        assert got == site["class"], f"{site['id']}: oracle T95 class {got}, designed {site['class']}"
        checked.append(site["id"])
    print("oracle vs ground truth:", checked)
    assert len(checked) >= 4, checked


def test_profiles_with_derived_lifetimes_are_refused(tmp_path):
    """An imported TCMalloc lifetime profile has lifetimes but no timeline to replay."""
    from interop import tcmalloc

    data = os.path.join(os.path.dirname(__file__), "data", "tcmalloc_lifetimes.pb.gz")
    ltprof = tmp_path / "tc.ltprof"
    tcmalloc.convert(data, str(ltprof))
    with pytest.raises(ConvertError, match="derived from per-stack aggregates .imported from tcmalloc"):
        convert_profile(str(ltprof), tmp_path / "tc.lttrace")
