"""Feature oracles (simulator/features.py, issue 34 item 2) on hand-written traces: a
feature that separates lifetimes inside one context gives the per-object oracle's
classes (and so its heap) where the context oracle cannot; "none" is the context
oracle; the engine's objects:FILE predictor reads the classes in trace order."""

from __future__ import annotations

import numpy as np
import pytest

import simulator
from core.lifetimes import LabelScheme
from simulator import features, tables
from simulator import trace as tr

pytestmark = pytest.mark.usefixtures("simulator_engine")

MS = 1_000_000
S = 1000 * MS
SHORT = 5 * MS          # class 0 (<10ms)
LONG = 50 * S           # class 4 (<100s)


def _true(recs, end_ns):
    return np.array([tr.true_class(tr.DEFAULT_BOUNDARIES_NS, r[0], r[1]) for r in recs])


def _write(tmp_path, recs, end_ns):
    recs = sorted(recs, key=lambda r: r[0])
    return tr.write_trace(tmp_path / "t.lttrace", recs, end_ns=end_ns, sort=False), recs


def _size_trace():
    """One context (stacks 1 and 2), 64 B objects die in 5 ms, 4 KiB ones live 50 s;
    interleaved, so the context's T95 class is the long one for both."""
    recs = []
    for i in range(400):
        t = i * MS
        recs.append((t, t + SHORT, 64, 1 + i % 2, 1))
        recs.append((t, t + LONG, 4096, 1 + i % 2, 1))
    return recs, 60 * S, {1: ("ctx",), 2: ("ctx",)}


def _thread_trace():
    recs = []
    for i in range(400):
        t = i * MS
        recs.append((t, t + SHORT, 256, 1, 1))
        recs.append((t, t + LONG, 256, 1, 2))
    return recs, 60 * S, {1: ("ctx",)}


def _prev_trace():
    """One thread: B then A (this A dies in 5 ms), C then A (this A lives 50 s)."""
    recs = []
    for i in range(200):
        t = 4 * i * MS
        recs.append((t, t + LONG, 256, 2, 1))          # B, long
        recs.append((t + 1, t + 1 + SHORT, 256, 1, 1))  # A after B: short
        recs.append((t + 2, t + 2 + LONG, 256, 3, 1))   # C, long
        recs.append((t + 3, t + 3 + LONG, 256, 1, 1))   # A after C: long
    return recs, 60 * S, {1: ("A",), 2: ("B",), 3: ("C",)}


@pytest.mark.parametrize("make,feature", [(_size_trace, "size"), (_thread_trace, "thread"),
                                          (_prev_trace, "prev1"), (_prev_trace, "prev2")])
def test_a_separating_feature_matches_the_per_object_oracle(tmp_path, make, feature):
    recs, end, ctx = make()
    path, recs = _write(tmp_path, recs, end)
    truth = _true(recs, end)
    scheme = LabelScheme()
    r = features.feature_classes(path, ctx, scheme, feature)
    assert (r["t95"] == truth).all() and (r["cost"] == truth).all()
    none = features.feature_classes(path, ctx, scheme, "none")
    assert not (none["t95"] == truth).all()
    # The engine: the feature oracle's heap is the per-object oracle's, the context's is not.
    f_file = tr.write_object_classes(tmp_path / "f.cls", r["t95"])
    c_file = tr.write_object_classes(tmp_path / "c.cls", none["t95"])
    sim = simulator.simulate(path, ["oracle", f"feat=objects:{f_file}", f"ctx=objects:{c_file}"],
                             policy=["segregated"], check_invariants=True)
    a = {x["name"]: x for x in sim["allocators"]}
    assert a["llama:feat"]["predictor"]["accuracy"] == 1.0
    assert a["llama:ctx"]["predictor"]["accuracy"] < 1.0
    for k in ("steady_state_bytes", "steady_state_resident_bytes", "peak_bytes"):
        assert a["llama:feat"][k] == a["llama:oracle"][k]


def test_none_is_the_context_oracle(tmp_path):
    """The feature oracles' "none" gives every record its context oracles' classes
    (tables.context_oracle_tables, the per-stack class tables of `lifetime simulate`)."""
    recs, end, ctx = _prev_trace()
    recs += [(r[0] + 7, r[1] + 7 if r[1] else None, 64, 2, 1) for r in recs[::5]]
    recs.append((3, None, 100, 3, 2))
    path, recs = _write(tmp_path, recs, end)
    scheme = LabelScheme()
    stacks = sorted(ctx)
    side = {"stacks": []}
    truth = _true(recs, end)
    for s in stacks:
        objs, byts = [0] * 8, [0] * 8
        for r, c in zip(recs, truth):
            if r[3] == s:
                objs[c] += 1
                byts[c] += r[2]
        side["stacks"].append({"id": s, "objects": objs, "bytes": byts})
    per_stack, _files, _labels, _info = tables.context_oracle_tables(path, side, ctx, scheme,
                                                                     str(tmp_path / "tbl"))
    none = features.feature_classes(path, ctx, scheme, "none")
    for rule in ("t95", "cost"):
        want = [per_stack[f"context_{rule}"][r[3]] for r in recs]
        assert none[rule].tolist() == want


def test_feature_values_definitions(tmp_path):
    recs = [(0, 10, 8, 1, 1), (1, 10, 16, 2, 2), (2, 10, 24, 1, 1), (3, 10, 32, 3, 1),
            (4, 10, 40, 1, 2), (5 * S, None, 48, 1, 1)]
    path, recs = _write(tmp_path, recs, 6 * S)
    header, rec = tables._trace_records(path)
    ctx = features.record_contexts(rec, {1: ("a",), 2: ("b",), 3: ("c",)})
    assert ctx.tolist() == [0, 1, 0, 2, 0, 0]
    none = 3
    assert features.feature_values("prev1", rec, ctx, header.end_ns).tolist() == [
        none, none, 0, 0, 1, 2]
    p2 = features.feature_values("prev2", rec, ctx, header.end_ns).tolist()
    assert p2 == [none * 4 + none, none * 4 + none, 0 * 4 + none, 0 * 4 + 0, 1 * 4 + none,
                  2 * 4 + 0]
    assert features.feature_values("size", rec, ctx, header.end_ns).tolist() == [8, 16, 24, 32, 40, 48]
    assert features.feature_values("time", rec, ctx, header.end_ns).tolist() == [0] * 5 + [13]
    # rate: five allocations in the first second (log2 5 = 2), one in the sixth
    assert features.feature_values("rate", rec, ctx, header.end_ns).tolist() == [2] * 5 + [0]
    assert features.feature_values("stack", rec, ctx, header.end_ns).tolist() == [0, 1, 0, 2, 0, 0]
    sh = features.feature_values("size_shuffled", rec, ctx, header.end_ns)
    sizes = np.array([8, 16, 24, 32, 40, 48])
    for c in range(3):   # each context keeps its own sizes, dealt out again
        assert sorted(sh[ctx == c]) == sorted(sizes[ctx == c])
    assert (sh == features.feature_values("size_shuffled", rec, ctx, header.end_ns)).all()
    with pytest.raises(ValueError):
        features.feature_values("colour", rec, ctx, header.end_ns)


def test_deterministic(tmp_path):
    recs, end, ctx = _prev_trace()
    path, _ = _write(tmp_path, recs, end)
    a = features.write_feature_oracles(path, ctx, LabelScheme(), str(tmp_path / "a"))
    b = features.write_feature_oracles(path, dict(reversed(list(ctx.items()))), LabelScheme(),
                                       str(tmp_path / "b"))
    assert a["keys"] == b["keys"] and set(a["files"]) == set(b["files"])
    for lab in a["files"]:
        with open(a["files"][lab], "rb") as fa, open(b["files"][lab], "rb") as fb:
            assert fa.read() == fb.read()


def test_gap_closed():
    assert features.gap_closed(0.5, 0.0, 1.0) == 0.5
    assert features.gap_closed(-0.1, 0.0, 0.5) == pytest.approx(-0.2)
    assert features.gap_closed(0.3, 0.3, 0.3) is None
    assert features.gap_closed(0.3, 0.3, 0.305) is None        # under one point: no gap
    assert features.gap_closed(0.0, -0.04, -0.22) is None      # the oracle behind: no gap
    assert features.gap_closed(None, 0.0, 1.0) is None


def test_object_class_file_must_match_the_trace(tmp_path):
    recs, end, _ = _size_trace()
    path, _ = _write(tmp_path, recs, end)
    short = tr.write_object_classes(tmp_path / "s.cls", np.zeros(len(recs) - 1, np.uint8))
    with pytest.raises(simulator.SimulationError, match="more records than"):
        simulator.simulate(path, [f"objects:{short}"])
    bad = tr.write_object_classes(tmp_path / "b.cls", np.full(len(recs), 9, np.uint8))
    with pytest.raises(simulator.SimulationError, match="out of range"):
        simulator.simulate(path, [f"objects:{bad}"])


def _bench():
    import importlib.util
    import os
    p = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                     "benchmarks", "feature_oracles.py")
    spec = importlib.util.spec_from_file_location("feature_oracles_bench", p)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_benchmark_locates_a_trace_in_any_sim_dir(tmp_path):
    fo = _bench()
    run = tmp_path / "load2"
    (run / "dataset-train").mkdir(parents=True)
    (run / "sim-segregated-seed0").mkdir()
    (run / "sim-segregated-seed0" / "trace.lttrace").write_bytes(b"")
    (run / "sim-paper-seed0").mkdir()                      # no trace kept: ignored
    assert fo.locate(f"w={run}") == ("w", str(run / "sim-segregated-seed0" / "trace.lttrace"),
                                      str(run / "dataset-train"))
    (run / "sim-seed0").mkdir()
    (run / "sim-seed0" / "trace.lttrace").write_bytes(b"")   # sim-seed0 first
    assert fo.locate(f"w={run}")[1] == str(run / "sim-seed0" / "trace.lttrace")
    t = run / "sim-segregated-seed0" / "trace.lttrace"
    assert fo.locate(f"w={t}") == ("w", str(t), str(run / "dataset-train"))
    assert fo.locate(f"w={t},{tmp_path}") == ("w", str(t), str(tmp_path))
    (run / "sim-seed0" / "trace.lttrace").unlink()
    (run / "sim-x-seed0").mkdir()
    (run / "sim-x-seed0" / "trace.lttrace").write_bytes(b"")
    with pytest.raises(SystemExit, match="2 traces"):
        fo.locate(f"w={run}")
    with pytest.raises(SystemExit):
        fo.locate(f"w={tmp_path / 'nope.lttrace'}")


def test_benchmark_combines_load_seeds(tmp_path):
    """--combine: mean, worst and n over the runs, the lead over the control at each run,
    candidates only where every run closes >= 20 points."""
    import json
    fo = _bench()

    def run(d, size, ctl, oracle_res):
        rows = {"oracle": {"resident": oracle_res, "huge pages": 0.0},
                "context_t95": {"resident": 0.0, "huge pages": 0.0},
                "context_cost": {"resident": 0.0, "huge pages": 0.0}}
        gc = {"context_size_t95": {"resident": size, "huge pages": None},
              "context_size_shuffled_t95": {"resident": ctl, "huge pages": None}}
        (tmp_path / d).mkdir()
        with open(tmp_path / d / "results.json", "w") as f:
            json.dump({"results": {"w": {"segregated": {"rows": rows, "gap_closed": gc}}},
                       "keys": {"w": {"size": 10}}}, f)
        return str(tmp_path / d)

    dirs = [run("l1", 0.5, 0.1, 0.1), run("l2", 0.3, 0.25, 0.2), run("l3", 0.25, 0.0, 0.3)]
    c = fo.combine(dirs)
    F = c["workloads"]["w"]["policies"]["segregated"]["features"]["size"]["t95"]["resident"]
    assert F["n"] == 3 and F["mean"] == pytest.approx(0.35) and F["worst"] == 0.25
    assert F["control_lead"]["worst"] == pytest.approx(0.05)
    hp = c["workloads"]["w"]["policies"]["segregated"]["features"]["size"]["t95"]["huge pages"]
    assert hp["n"] == 0 and hp["mean"] is None
    gap = c["workloads"]["w"]["policies"]["segregated"]["gap"]["t95"]["resident"]
    assert gap["mean"] == pytest.approx(0.2) and gap["worst"] == pytest.approx(0.1)
    assert [(k["feature"], k["measure"]) for k in c["candidates"]] == [("size", "resident")]
    assert "| size | T95 | +35 (+25) 3 | n/a | +5 / " in fo.combined_markdown(c)
    # one run below 20 points: no candidate
    dirs[2] = run("l4", 0.15, 0.0, 0.3)
    assert fo.combine(dirs)["candidates"] == []
    fo.main(["--out", str(tmp_path / "c"), "--combine", *dirs])
    assert (tmp_path / "c" / "combined.md").exists()


@pytest.mark.parametrize("feature", ["none", *features.FEATURES])
def test_pooled_over_processes(tmp_path, feature):
    """A server of processes (simulate_postgres): one process alone gives the trace's own
    classes; two identical processes give each of them those classes again (a key's
    objects doubled, its T95 and byte shares unchanged)."""
    recs, end, ctx = _prev_trace()
    recs += [(r[0] + 7, r[1] + 7 if r[1] else None, 64 * (1 + i % 3), 2, 1 + i % 2)
             for i, r in enumerate(recs[::5])]
    recs.append((3, None, 100, 3, 2))
    path, recs = _write(tmp_path, recs, end)
    scheme = LabelScheme()
    one = features.feature_classes(path, ctx, scheme, feature)
    proc = {"trace": path, "contexts": ctx, "stacks": {s: ("stack", s) for s in ctx}}
    alone = features.pooled_feature_classes([proc], scheme, feature)
    assert alone["keys"] == one["keys"]
    for rule in ("t95", "cost"):
        assert alone[rule][0].tolist() == one[rule].tolist()
    two = features.pooled_feature_classes([proc, proc], scheme, feature)
    for rule in ("t95", "cost"):
        assert two[rule][0].tolist() == one[rule].tolist() == two[rule][1].tolist()


def test_pooled_censors_at_each_process_end(tmp_path):
    """An object live at its process's end counts its age at that end, not the server's:
    one context, a process that ends 50 ms after allocating it and another whose nine
    objects live 1 s.  Censored at 50 ms it leaves the risk set before the deaths at 1 s
    (T95 1 s: class 3); censored at the server's end (100 s) it would outlive them (10%
    of the context past 1 s: never freed, class 7)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, _ = _write(tmp_path / "a", [(0, None, 64, 1, 1)], 50 * MS)
    b, _ = _write(tmp_path / "b", [(i, i + S, 64, 2, 1) for i in range(9)], 100 * S)
    ctx = {1: ("x",), 2: ("x",)}
    r = features.pooled_feature_classes([{"trace": a, "contexts": ctx, "stacks": {1: 1}},
                                         {"trace": b, "contexts": ctx, "stacks": {2: 2}}],
                                        LabelScheme(), "none")
    assert r["t95"][0].tolist() == [3] and r["t95"][1].tolist() == [3] * 9
    one, _ = _write(tmp_path, [(0, None, 64, 1, 1)] + [(i + 1, i + 1 + S, 64, 2, 1)
                                                       for i in range(9)], 100 * S)
    assert features.feature_classes(one, ctx, LabelScheme(), "none")["t95"].tolist() == [7] * 10
