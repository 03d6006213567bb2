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
