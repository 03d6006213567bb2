"""The context oracles of `lifetime simulate` (simulator/tables.py) on hand-built traces
with known per-context lifetimes.

Stacks are symbolized through the side file's mappings; the modules do not exist, so a
frame is its module, `<liba+?>`, and the contexts (the dataset's definition) are

    A = (<liba+?>, <liba+?>)  stacks 1, 2    90 objects die in 1 ms, 10 never freed (64 B)
    B = (<libb+?>, <libb+?>)  stack 3        20 objects live 50 ms
    C = (<liba+?>, <libb+?>)  stack 4        16 objects live 5 s, 4 die in 1 ms
    D = (<libb+?>, <liba+?>)  stack 5        one object a second living 5 s; the last four
                                             are live at the end (ages 4..1 s)
    E = (<libe+?>, <libe+?>)  stacks 6, 7    90 x 16 B die in 1 ms, 10 x 512 B never freed

over a 30 s trace.  Expected, by hand:

  T95 (Kaplan-Meier, the dataset's rule): A inf (10% outlive every free); B <100ms;
      C <10s; D <10s (the four censored objects are younger than 5 s when the trace ends,
      so they say nothing past their ages -- counting them as never freed would give inf);
      E inf.
  cost rule on bytes (K = 2, H = 1e7 ms; life = [10, 100, 1e3, 1e4, 1e5, 1e6, 1e7, 1e7],
      hold = [20, 200, 2e3, 2e4, 2e5, 2e6, 1e7, 1e7]):
      A: p = 90% <10ms, 10% inf: C(0) = 0.1 x (1e7 - 20) = 999998 < C(1) = 0.9 x 190 +
         0.1 x (1e7 - 200) = 1000151 < ... < C(inf) = 0.9 x (1e7 - 10): <10ms;
      B: <100ms (pure);  C: 80% <10s: C(3) = 0.2 x (2e4 - 10) = 3998, C(2) = 0.2 x 1990 +
         0.8 x 8000 = 6798, C(0) = 0.8 x 9980 = 7984: <10s;
      D: 26 objects <10s, 4 inf: C(3) = (4/30) x (1e7 - 2e4) = 1330667 < C(4) = (26/30) x
         (2e5 - 1e4) + (4/30) x (1e7 - 2e5) = 1471333: <10s;
      E: bytes 1440 <10ms vs 5120 inf (78% inf): C(inf) = 0.22 x (1e7 - 10) < C(0) = 0.78 x
         (1e7 - 20): inf (by objects it would be <10ms: bytes are the weight).
"""

from __future__ import annotations

import json

import pytest

import simulator
from simulator import trace as tr
from simulator.convert import stacks_path
from tests.trace_support import write_trace_with_stacks

MS = 1_000_000
S = 1000 * MS
END = 30 * S
C0, C1, C3, INF = 0, 1, 3, 7

MAPPINGS = [{"id": i + 1, "start": base, "limit": base + 0x100000, "file_offset": 0,
             "path": f"/nonexistent/{name}.so", "build_id": f"{i + 1:02x}" * 4}
            for i, (name, base) in enumerate([("liba", 0x400000), ("libb", 0x600000),
                                              ("libe", 0x800000)])]
# stack id -> leaf-first return addresses (liba 0x4..., libb 0x6..., libe 0x8...)
STACKS = {1: [0x400101, 0x400200], 2: [0x400102, 0x400201], 3: [0x600101, 0x600200],
          4: [0x400103, 0x600202], 5: [0x600103, 0x400202], 6: [0x800101, 0x800200],
          7: [0x800102, 0x800201]}
A, B, C, D, E = (("<liba+?>", "<liba+?>"), ("<libb+?>", "<libb+?>"), ("<liba+?>", "<libb+?>"),
                 ("<libb+?>", "<liba+?>"), ("<libe+?>", "<libe+?>"))
CONTEXT_OF = {1: A, 2: A, 3: B, 4: C, 5: D, 6: E, 7: E}
T95 = {A: INF, B: C1, C: C3, D: C3, E: INF}
# The cost rule with the project's A = 0.25 (core.lifetimes.UNDER_WEIGHT, chosen on
# selection data): a longer class needs well over 4/5 of a context's bytes, so C (4/5 of
# its objects living 5 s) and E (78% of its bytes never freed) stay short; with A = 1
# they took C3 and INF.
COST = {A: C0, B: C1, C: C0, D: C3, E: C0}


def mixed_records() -> list[tr.ObjectRecord]:
    recs = []
    t = MS  # one allocation per 10 ms from 1 ms on, interleaving the contexts
    def put(free_after, size, stack):
        nonlocal t
        recs.append(tr.ObjectRecord(t, None if free_after is None else t + free_after, size, stack,
                                    thread_id=1 + stack % 2))
        t += 10 * MS
    for i in range(100):                       # A: 90 short, 10 never freed
        put(None if i % 10 == 9 else MS, 64, 2 if i % 10 == 9 else 1)
    for _ in range(20):                        # B: 50 ms
        put(50 * MS, 256, 3)
    for i in range(20):                        # C: 16 x 5 s, 4 x 1 ms
        put(MS if i % 5 == 4 else 5 * S, 128, 4)
    for i in range(100):                       # E: 90 x 16 B short, 10 x 512 B never freed
        put(None if i % 10 == 9 else MS, 512 if i % 10 == 9 else 16, 7 if i % 10 == 9 else 6)
    for k in range(30):                        # D: one a second, each living 5 s
        a = k * S + 5 * MS
        recs.append(tr.ObjectRecord(a, a + 5 * S if a + 5 * S <= END else None, 96, 5, 3))
    return sorted(recs, key=lambda r: r.alloc_ns)


def write_mixed_trace(path) -> str:
    """The trace (TraceWriter) and its side file, as simulator/convert.py writes them."""
    return write_trace_with_stacks(path, mixed_records(), END, STACKS, MAPPINGS, "mixed")


def _side(path):
    from simulator.convert import load_stacks

    return load_stacks(stacks_path(path))


def test_contexts_are_the_dataset_definitions_frames(tmp_path):
    from core.context import ContextDefinition
    from simulator.tables import symbolize_stacks

    trace = write_mixed_trace(tmp_path / "mixed.lttrace")
    assert symbolize_stacks(_side(trace), ContextDefinition()) == CONTEXT_OF


def test_context_t95_is_the_dataset_label_rule_with_censoring(tmp_path):
    from core.lifetimes import LabelScheme
    from simulator.tables import context_t95_classes

    trace = write_mixed_trace(tmp_path / "mixed.lttrace")
    assert context_t95_classes(trace, CONTEXT_OF, LabelScheme()) == T95
    # Per stack too (any key): stack 2 is A's never-freed half, stack 1 its short one.
    per_stack = context_t95_classes(trace, {s: s for s in STACKS}, LabelScheme())
    assert per_stack == {1: C0, 2: INF, 3: C1, 4: C3, 5: C3, 6: C0, 7: INF}


def test_context_oracle_tables_and_the_engine_with_invariants(tmp_path):
    from core.lifetimes import LabelScheme
    from simulator.tables import context_oracle_tables

    trace = write_mixed_trace(tmp_path / "mixed.lttrace")
    stack_class, files, labels, info = context_oracle_tables(
        trace, _side(trace), CONTEXT_OF, LabelScheme(), str(tmp_path / "tables"))
    assert labels == T95
    assert stack_class["context_t95"] == {s: T95[c] for s, c in CONTEXT_OF.items()}
    assert stack_class["context_cost"] == {s: COST[c] for s, c in CONTEXT_OF.items()}
    assert info["cost"]["horizon_ms"] == 1e7
    assert info["cost"]["deadline_k"] == 2 and info["cost"]["weights"] == "bytes"
    assert info["contexts"] == 5 and info["cost_rule_equals_t95"] == 2  # B and D
    assert info["cost"]["under_weight"] == 0.25
    # The class tables the engine reads: every stack, its context's class.
    for name, expected in (("context_t95", T95), ("context_cost", COST)):
        rows = [line.split() for line in open(files[name]) if not line.startswith("#")]
        assert {int(s): int(c) for s, c in rows} == {s: expected[c] for s, c in CONTEXT_OF.items()}

    rep = simulator.simulate(trace, ["oracle", f"context_t95=table:{files['context_t95']}",
                                     f"context_cost=table:{files['context_cost']}"],
                             check_invariants=True, check_every=1)
    objects = {s: 0 for s in STACKS}
    for r in mixed_records():
        objects[r.stack_id] += 1
    for name, expected in (("context_t95", T95), ("context_cost", COST)):
        a = next(x for x in rep["allocators"] if x["name"] == f"llama:{name}")
        per_class = [0] * 8
        for s, c in CONTEXT_OF.items():
            per_class[expected[c]] += objects[s]
        assert a["predictor"]["predicted_per_class"] == per_class, name
        assert a["steady_state_bytes"] > 0


@pytest.fixture(scope="module")
def mixed_dataset(tmp_path_factory):
    """`lifetime build-dataset` on a hand-built sampled profile over the same modules (the
    simulate command needs a training dataset: its context definition and tables)."""
    from lifetime import cli
    from profile_format import profile_pb2, write_profile

    d = tmp_path_factory.mktemp("mixed-ds")
    chunk = profile_pb2.ProfileChunk()
    h = chunk.header
    h.schema_version = profile_pb2.SCHEMA_VERSION
    h.program, h.version_label, h.pid = "mixed", "v0", 7
    h.sampling_interval_bytes = 4096
    h.start_monotonic_ns = 0
    for m in MAPPINGS:
        chunk.mappings.add(id=m["id"], start=m["start"], limit=m["limit"], file_offset=0,
                           path=m["path"], build_id=bytes.fromhex(m["build_id"]))
    for sid, addrs in STACKS.items():
        chunk.stacks.add(id=sid, addresses=addrs)
    t = MS
    for sid, life in ((1, MS), (3, 50 * MS), (4, 5 * S), (6, MS), (5, 5 * S)):
        for _ in range(5):
            s = chunk.samples.add(stack_id=sid, size=64, alloc_monotonic_ns=t, alloc_thread=1,
                                  weight=1.0, alloc_function=profile_pb2.MALLOC)
            s.free_monotonic_ns, s.free_function = t + life, profile_pb2.FREE
            s.alloc_allocated_bytes, s.free_allocated_bytes = 1, 2
            t += 10 * MS
    tail = profile_pb2.ProfileChunk()
    tail.trailer.end_reason, tail.trailer.end_monotonic_ns = profile_pb2.END_EXIT, 40 * S
    tail.trailer.total_allocations, tail.trailer.samples = 25, 25
    prof = d / "mixed.ltprof"
    write_profile(str(prof), [chunk, tail])
    out = d / "ds"
    assert cli.main(["build-dataset", "--profiles", str(prof), "--out", str(out)]) == 0
    return str(out)


def test_simulate_reports_both_context_oracle_rows(mixed_dataset, tmp_path, capsys):
    from lifetime import cli

    trace = write_mixed_trace(tmp_path / "mixed.lttrace")
    out = tmp_path / "sim"
    assert cli.main(["simulate", trace, "--train", mixed_dataset, "--out", str(out),
                     "--check-invariants"]) == 0
    printed = capsys.readouterr().out
    assert "context oracle (T95)" in printed and "context oracle (cost rule)" in printed
    assert "TCMalloc rule (> 1 MiB)" in printed and "TCMalloc rule (all sizes)" in printed
    for name, expected in (("context_t95", T95), ("context_cost", COST)):
        rows = [line.split() for line in open(out / "tables" / f"{name}.tbl")
                if not line.startswith("#")]
        assert {int(s): int(c) for s, c in rows} == {s: expected[c] for s, c in CONTEXT_OF.items()}

    sim = json.loads((out / "simulation.json").read_text())
    names = [a["name"] for a in sim["allocators"]]
    assert names[:4] == ["baseline", "llama:oracle", "llama:context_t95", "llama:context_cost"]
    assert sim["settings"]["check_invariants"]

    rep = json.loads((out / "report.json").read_text())
    rows = {r["predictor"]: r for r in rep["table3"]}
    assert list(rows) == ["oracle", "context oracle (T95)", "context oracle (cost rule)",
                          "exact-context table", "site table", "one class",
                          "TCMalloc rule (> 1 MiB)", "TCMalloc rule (all sizes)"]
    # TCMalloc's rule (tests/test_tcmalloc_rule.py): no object here is over 1 MiB, so the
    # large-object rule is the one-class row; the all-sizes rule gives what its Python
    # twin gives over the same records.
    from model import tcmalloc_rule

    by_name = {a["name"]: a for a in sim["allocators"]}
    large, every = by_name["llama:tcmalloc_rule"], by_name["llama:tcmalloc_rule_all"]
    one = by_name["llama:one_class"]
    assert large["predictor"]["eligible_objects"] == 0
    assert large["predictor"]["predicted_per_class"] == one["predictor"]["predicted_per_class"]
    assert large["steady_state_bytes"] == one["steady_state_bytes"]
    recs = mixed_records()
    shorts = tcmalloc_rule.LifetimeRule("all").replay(
        (r.alloc_ns, r.free_ns, r.size, r.stack_id) for r in recs)
    want = [0] * 8
    for c in tcmalloc_rule.predict_classes(shorts, 2, INF, one["predictor"]["class"]).tolist():
        want[c] += 1
    assert every["predictor"]["predicted_per_class"] == want and 0 < want[2] < len(recs)
    assert rows["TCMalloc rule (all sizes)"]["accuracy_per_context"] is not None
    # Per context, against the T95 class in the trace: the T95 oracle is right by
    # construction; the cost rule differs on A, C and E (100, 20 and 100 objects).
    t95, cost = rows["context oracle (T95)"], rows["context oracle (cost rule)"]
    assert t95["accuracy_per_context"] == 1.0 and t95["accuracy_per_context_weighted"] == 1.0
    assert cost["accuracy_per_context"] == pytest.approx(2 / 5)
    total = len(mixed_records())
    assert cost["accuracy_per_context_weighted"] == pytest.approx((total - 220) / total)
    co = rep["context_oracle"]
    assert co["contexts"] == 5 and co["cost_rule_equals_t95"] == 2
    assert co["cost"]["horizon_ms"] == 1e7
    assert set(rep["gaps"]) >= {"oracle_minus_context_t95", "oracle_minus_context_cost"}
    assert rep["variants"]["llama:context_cost"]["name"] == "context oracle (cost rule)"

    md = (out / "report.md").read_text()
    assert "| mixed (v1) | context oracle (T95) |" in md
    assert "| mixed (v1) | context oracle (cost rule) |" in md
    assert "| LLAMA context oracle (cost rule) |" in md and "Context oracles, computed" in md
    assert "oracle − context oracle (T95)" in md
    assert "| mixed (v1) | TCMalloc rule (all sizes) |" in md
    assert "TCMalloc's removed lifetime rule" in md and "short > long + 10" in md
