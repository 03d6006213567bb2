"""The trace-driven heap simulator (simulator/): hand-built traces with known answers,
invariants on a random trace, determinism and bad input.  Every test drives the real
engine binary through simulator.simulate()."""

from __future__ import annotations

import dataclasses
import random
import struct
import subprocess

import pytest

import simulator
from simulator import trace as tr

MS = 1_000_000
BLOCK = 8192
HP = 2 * 1024 * 1024


pytestmark = pytest.mark.usefixtures("simulator_engine")


def alloc_by_name(report: dict, name: str) -> dict:
    return next(a for a in report["allocators"] if a["name"] == name)


def pages(snapshot: dict, name: str) -> dict[int, dict]:
    return {p["id"]: p for p in snapshot["huge_pages"][name]}


# ---------------------------------------------------------------- Figure 1

def test_figure1_placing_by_lifetime_frees_a_page(tmp_path):
    """Two long-lived and two short-lived 1 MiB objects allocated alternately.  The
    size-class allocator puts one long and one short object on each huge page, so after the
    short ones die both pages stay (Figure 1); LLAMA-oracle puts both long ones on one page
    and the short ones on another, which is returned to the OS."""
    mib = 1 << 20
    recs = [(0, None, mib, 1), (1, 10 * MS, mib, 2), (2, None, mib, 1), (3, 10 * MS, mib, 2)]
    path = simulator.write_trace(tmp_path / "fig1.lttrace", recs, end_ns=20 * MS)
    r = simulator.simulate(path, ["oracle"], check_invariants=True, check_every=1,
                           snapshots_ns=[20 * MS])
    base, llama = alloc_by_name(r, "baseline"), alloc_by_name(r, "llama:oracle")
    assert base["peak_huge_pages"] == 2 and llama["peak_huge_pages"] == 2
    assert base["final_huge_pages"] == 2
    assert llama["final_huge_pages"] == 1
    assert llama["counters"]["huge_pages_released"] == 1
    assert base["counters"]["huge_pages_released"] == 0
    # Baseline: each page half used; LLAMA: the page of the long-lived (inf) objects is full.
    snap = r["snapshots"][0]
    assert [p["pages"] for p in snap["huge_pages"]["baseline"]] == ["#" * 128 + "." * 128] * 2
    (inf_page,) = snap["huge_pages"]["llama:oracle"]
    assert inf_page["lc"] == 7 and inf_page["blocks"] == "R" * 256 and inf_page["state"] == "active"
    assert r["live"]["final_bytes"] == 2 * mib
    # Steady state (second half, [10 ms, 20 ms]): 2 pages against 1, live 2 MiB.
    assert base["steady_state_bytes"] == pytest.approx(2 * HP)
    assert llama["steady_state_bytes"] == pytest.approx(HP)
    assert llama["fragmentation_reduction_vs_baseline"] == pytest.approx(1.0)


# ---------------------------------------------------------------- Figure 7

FIG7_BOUNDS = (10 * MS, 100 * MS, 1000 * MS)  # classes 0 <10ms, 1 <100ms, 2 <1s, 3 >=1s, 4 inf
S0, S1, S2 = 10, 11, 12                        # stacks predicted 0, 1 and 2 by the table


def fig7_trace(tmp_path):
    b = BLOCK
    recs = [
        # (a) initial allocations at t=0: three full pages, one open page
        (0, 700 * MS, 128 * b, S2),  # A1 -> page 0 (class 2)
        (0, 15 * MS, 128 * b, S2),   # A2 -> page 0, now full: active
        (0, 60 * MS, 130 * b, S1),   # B1 -> page 1 (class 1)
        (0, 15 * MS, 126 * b, S1),   # B2 -> page 1, full
        (0, 300 * MS, 128 * b, S0),  # C1 -> page 2 (class 0), but lives 300 ms: under-predicted
        (0, 5 * MS, 128 * b, S0),    # C2 -> page 2, full
        (0, 650 * MS, 64 * b, S2),   # E1 -> page 3, class 2, stays open
        # (c) shorter-class objects recycle free blocks of longer-class active pages
        (30 * MS, 35 * MS, 2 * b, S0),    # D1: class 0 -> page 0 (highest class first)
        (31 * MS, 90 * MS, 2 * b, S1),    # D2: class 1 -> page 0 (class 2 > 1)
        (32 * MS, 75 * MS, 126 * b, S0),  # D3: class 0, too big for page 0 -> page 1 (best fit)
    ]
    path = simulator.write_trace(tmp_path / "fig7.lttrace", recs, boundaries_ns=FIG7_BOUNDS, end_ns=700 * MS)
    table = simulator.write_class_table(tmp_path / "fig7.tbl", {S0: 0, S1: 1, S2: 2})
    return path, table


def test_figure7_sequence(tmp_path):
    path, table = fig7_trace(tmp_path)
    snaps = [1 * MS, 10 * MS, 25 * MS, 33 * MS, 61 * MS, 250 * MS]
    r = simulator.simulate(path, [f"pred=table:{table}"], baseline=False, check_invariants=True,
                           check_every=1, snapshots_ns=snaps)
    name = "llama:pred"
    assert r["trace"]["classes"] == ["<10ms", "<100ms", "<1s", ">=1s", "inf"]
    s = {x["t_ns"]: pages(x, name) for x in r["snapshots"]}
    R, n, f = "R", "n", "."

    def page(state, lc, blocks, deadline_ms):
        return {"state": state, "lc": lc, "blocks": blocks,
                "deadline_ns": None if deadline_ms is None else deadline_ms * MS}

    def strip(ps):
        return {i: {k: p[k] for k in ("state", "lc", "blocks", "deadline_ns")} for i, p in ps.items()}

    # (a) three full active pages (deadline = fill time + 2 x class bound) and one open page.
    assert strip(s[1 * MS]) == {
        0: page("active", 2, R * 256, 2000),
        1: page("active", 1, R * 256, 200),
        2: page("active", 0, R * 256, 20),
        3: page("open", 2, R * 64 + f * 192, None),
    }
    # (b) frees leave free blocks on active pages.
    assert strip(s[10 * MS])[2] == page("active", 0, R * 128 + f * 128, 20)
    # (e) page 2's deadline expired at 20 ms with its residual block live: class 0 -> 1,
    # new deadline 20 + 2 x 100 ms; residual blocks stay residual.
    assert strip(s[25 * MS]) == {
        0: page("active", 2, R * 128 + f * 128, 2000),
        1: page("active", 1, R * 130 + f * 126, 200),
        2: page("active", 1, R * 128 + f * 128, 220),
        3: page("open", 2, R * 64 + f * 192, None),
    }
    # (c) recycling: D1 (class 0) and D2 (class 1) into page 0 (class 2, the longest),
    # D3 (126 blocks, class 0) does not fit there and goes to page 1 (class 1, best fit),
    # all non-residual; the open page 3 is not eligible.
    assert strip(s[33 * MS]) == {
        0: page("active", 2, R * 128 + n * 4 + f * 124, 2000),
        1: page("active", 1, R * 130 + n * 126, 200),
        2: page("active", 1, R * 128 + f * 128, 220),
        3: page("open", 2, R * 64 + f * 192, None),
    }
    # (d) B1, page 1's last residual object, died at 60 ms: only non-residual blocks are
    # left, so page 1 drops to class 0, its live blocks become residual, deadline 60 + 20 ms.
    s61 = strip(s[61 * MS])
    assert s61[1] == page("active", 0, f * 130 + R * 126, 80)
    assert s61[0] == page("active", 2, R * 128 + f * 2 + n * 2 + f * 124, 2000)
    # Page 1 was freed with D3 at 75 ms; page 2 expired again at 220 ms (class 1 -> 2).
    assert strip(s[250 * MS]) == {
        0: page("active", 2, R * 128 + f * 128, 2000),
        2: page("active", 2, R * 128 + f * 128, 2220),
        3: page("open", 2, R * 64 + f * 192, None),
    }
    a = alloc_by_name(r, name)
    assert a["final_huge_pages"] == 0 and a["peak_huge_pages"] == 4
    assert a["counters"] == {
        "huge_pages_acquired": 4, "huge_pages_released": 4, "open_to_active": 3,
        "reclassifications_down": 1, "deadline_expiries": 2, "class_increases": 2,
        "recycled_block_allocs": 3, "recycled_blocks": 130, "recycled_span_reuses": 0,
        "spans_opened": 0, "spans_released": 0, "small_allocs": 0, "large_allocs": 10,
        "multi_huge_page_allocs": 0}
    p = a["predictor"]
    assert p["kind"] == "table" and p["entries"] == 3
    assert (p["correct"], p["under_predicted"], p["over_predicted"]) == (7, 2, 1)  # A2 over; C1, D3 under


def test_table_default_class_for_missing_stacks(tmp_path):
    """Stacks missing from the table take --table-default."""
    recs = [(0, None, 64 * BLOCK, 99)]
    path = simulator.write_trace(tmp_path / "t.lttrace", recs, end_ns=MS)
    table = simulator.write_class_table(tmp_path / "t.tbl", {1: 0})
    for default, lc in ((None, 7), (3, 3)):
        r = simulator.simulate(path, [f"table:{table}"], baseline=False, table_default=default,
                               snapshots_ns=[MS])
        (pg,) = r["snapshots"][0]["huge_pages"]["llama:table:t.tbl"]
        assert pg["lc"] == lc


# ---------------------------------------------------------------- small objects

def test_small_objects_share_lines_and_spans(tmp_path):
    """Small objects of one thread and class are bump-allocated into one 16 KiB span
    (128 B lines); the span is returned when it is closed and empty."""
    # 200 objects of 100 B at a 112 B stride: 146 fit one 16 KiB span, so two spans; all die at 5 ms.
    recs = [(i, 5 * MS, 100, 1, 7, 16) for i in range(200)]
    recs.append((6 * MS, None, 100, 1, 7, 16))  # a later object, never freed
    path = simulator.write_trace(tmp_path / "small.lttrace", recs, end_ns=10 * MS)
    r = simulator.simulate(path, ["oracle"], check_invariants=True, check_every=1, snapshots_ns=[1 * MS])
    a = alloc_by_name(r, "llama:oracle")
    c = a["counters"]
    assert c["small_allocs"] == 201 and c["spans_opened"] == 3
    # The first span was closed when full and released when empty; the second stays open.
    assert c["spans_released"] == 1
    (pg,) = r["snapshots"][0]["huge_pages"]["llama:oracle"]
    assert pg["blocks"] == "R" * 4 + "." * 252


# ---------------------------------------------------------------- invariants

def random_trace(path, n, seed=1):
    rng = random.Random(seed)
    classes = [(0.55, 0, 8 * MS), (0.2, 10 * MS, 90 * MS), (0.12, 100 * MS, 900 * MS),
               (0.06, 1000 * MS, 4000 * MS), (0.07, None, None)]
    recs = []
    t = 0
    for i in range(n):
        t += rng.randrange(0, 40_000)
        x = rng.random()
        if x < 0.80:
            size = int(rng.lognormvariate(4.5, 1.2)) + 1
        elif x < 0.97:
            size = rng.randrange(8192, 200_000)
        elif x < 0.995:
            size = rng.randrange(200_000, 1_500_000)
        else:
            size = rng.randrange(2_000_000, 5_000_000)
        size = min(size, 5_000_000)
        u = rng.random()
        for p, lo, hi in classes:
            if u < p or lo is None:
                break
            u -= p
        free = None if lo is None else t + rng.randrange(lo, hi)
        align = rng.choice([8, 16, 16, 16, 64, 4096]) if rng.random() < 0.2 else 16
        stack = rng.randrange(200)
        recs.append((t, free, size, stack, rng.randrange(4), align))
    return simulator.write_trace(path, recs)


def test_invariants_random_trace(tmp_path):
    """~100k objects of mixed sizes and lifetimes, with correct, constant (badly
    under-predicting: deadlines expire) and random-table predictions, checked after every
    event: no overlap, every free matches a live object, bytes conserved, page states agree
    with their blocks, spans and lines."""
    path = random_trace(tmp_path / "rand.lttrace", 100_000)
    rng = random.Random(5)
    table = simulator.write_class_table(tmp_path / "rand.tbl", {s: rng.randrange(8) for s in range(150)})
    r = simulator.simulate(path, ["oracle", "constant:0", f"table:{table}"], check_invariants=True,
                           check_every=4096, table_default=2, timeout=600)
    assert r["settings"]["check_invariants"] is True
    assert r["events"]["allocs"] == 100_000
    assert r["events"]["allocs"] == r["events"]["frees"] + r["events"]["never_freed"]
    for a in r["allocators"]:
        assert a["peak_bytes"] >= r["live"]["peak_bytes"]
        assert a["final_bytes"] >= r["live"]["final_bytes"]
        c = a["counters"]
        assert c["huge_pages_acquired"] - c["huge_pages_released"] == a["final_huge_pages"]
    c0 = alloc_by_name(r, "llama:constant:0")["counters"]
    assert c0["deadline_expiries"] > 0 and c0["class_increases"] > 0
    oracle = alloc_by_name(r, "llama:oracle")
    assert oracle["predictor"]["accuracy"] == 1.0
    assert oracle["counters"]["recycled_block_allocs"] > 0
    assert oracle["counters"]["reclassifications_down"] > 0
    # The time series: one sample per interval, every allocator at least the live bytes.
    s = r["series"]
    assert len(s["t_ns"]) == len(s["live_bytes"]) > 100
    for name, series in s["huge_page_bytes"].items():
        assert len(series) == len(s["t_ns"])
        assert all(m >= live for m, live in zip(series, s["live_bytes"]))


def test_multi_huge_page_objects(tmp_path):
    """Objects of several huge pages (baseline: whole pages + donated tail; LLAMA: fresh
    contiguous pages) with small objects filling the tails."""
    recs = [(0, 50 * MS, 5 * HP + 3 * BLOCK, 1), (1, None, 300, 2), (2, 30 * MS, 20_000, 3),
            (3, 40 * MS, 2 * HP, 4), (4, None, 9 * BLOCK, 5, 0, 65536)]
    path = simulator.write_trace(tmp_path / "big.lttrace", recs, end_ns=60 * MS)
    r = simulator.simulate(path, ["oracle", "constant:0"], check_invariants=True, check_every=1)
    base = alloc_by_name(r, "baseline")
    assert base["peak_huge_pages"] == 6 + 2 + 0  # 5 whole + donated tail (shared), then 2 whole
    assert base["counters"]["multi_huge_page_allocs"] == 2
    llama = alloc_by_name(r, "llama:oracle")
    assert llama["counters"]["multi_huge_page_allocs"] == 2
    assert llama["final_huge_pages"] == 1  # the two never-freed small/aligned objects share a page


# ---------------------------------------------------------------- determinism, output

def test_deterministic_output(tmp_path):
    path = random_trace(tmp_path / "det.lttrace", 20_000, seed=3)
    outs = []
    for i in range(2):
        out = tmp_path / f"r{i}.json"
        simulator.simulate(path, ["oracle", "constant:3"], series_interval_ms=10, json_out=out)
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]


def test_series_sampling(tmp_path):
    recs = [(0, 25 * MS, 64 * BLOCK), (12 * MS, None, 64 * BLOCK)]
    path = simulator.write_trace(tmp_path / "s.lttrace", recs, end_ns=40 * MS)
    r = simulator.simulate(path, ["oracle"], series_interval_ms=10)
    s = r["series"]
    assert s["t_ns"] == [0, 10 * MS, 20 * MS, 30 * MS, 40 * MS]
    assert s["live_bytes"] == [64 * BLOCK, 64 * BLOCK, 128 * BLOCK, 64 * BLOCK, 64 * BLOCK]
    assert s["huge_page_bytes"]["baseline"] == [HP] * 5
    assert s["huge_page_bytes"]["llama:oracle"] == [HP, HP, 2 * HP, HP, HP]
    # Steady state: mean over [20 ms, 40 ms]: 5 ms with both objects, 15 ms with one.
    assert r["live"]["steady_state_bytes"] == pytest.approx((5 * 128 + 15 * 64) * BLOCK / 20)


# ---------------------------------------------------------------- bad input

def run_engine(*args):
    return subprocess.run([str(simulator.engine_path()), *map(str, args)], capture_output=True, text=True)


def check_refused(path, *words):
    p = run_engine(path, "--predictor", "oracle", "--check-invariants")
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert str(path) in p.stderr
    for w in words:
        assert w in p.stderr, p.stderr
    assert p.stdout == ""
    with pytest.raises(simulator.SimulationError) as e:
        simulator.simulate(path)
    assert e.value.returncode == 2 and str(path) in str(e.value)


def test_bad_inputs(tmp_path):
    good = simulator.write_trace(tmp_path / "good.lttrace", [(0, 5, 100), (3, None, 200), (4, 9, 300)])
    data = open(good, "rb").read()
    header = tr.FIXED.size + 8 * len(tr.DEFAULT_BOUNDARIES_NS)

    truncated = tmp_path / "truncated.lttrace"
    truncated.write_bytes(data[:-10])
    check_refused(truncated, "truncated")

    short_header = tmp_path / "short.lttrace"
    short_header.write_bytes(data[:20])
    check_refused(short_header, "truncated header")

    magic = tmp_path / "magic.lttrace"
    magic.write_bytes(b"NOTATRCE" + data[8:])
    check_refused(magic, "bad magic")

    version = tmp_path / "version.lttrace"
    version.write_bytes(data[:8] + struct.pack("<I", 9) + data[12:])
    check_refused(version, "version 9")

    recs = [data[header + i * 40: header + (i + 1) * 40] for i in range(3)]
    unsorted = tmp_path / "unsorted.lttrace"
    unsorted.write_bytes(data[:header] + recs[1] + recs[0] + recs[2])
    check_refused(unsorted, "record 1", "sorted")

    backwards = tmp_path / "backwards.lttrace"
    bad = struct.pack("<QQQQII", 4, 2, 300, 0, 0, 16)
    backwards.write_bytes(data[:header] + recs[0] + recs[1] + bad)
    check_refused(backwards, "record 2", "free time 2 precedes alloc time 4")

    trailing = tmp_path / "trailing.lttrace"
    trailing.write_bytes(data + b"x")
    check_refused(trailing, "trailing")

    missing = tmp_path / "missing.lttrace"
    check_refused(missing, "cannot open")

    empty = tmp_path / "empty.lttrace"
    empty.write_bytes(b"")
    check_refused(empty, "truncated header")


def test_bad_options(tmp_path):
    good = simulator.write_trace(tmp_path / "g.lttrace", [(0, 5, 100)])
    for args, word in ((["--predictor", "constant:8"], "bad class"),
                       (["--predictor", "bogus"], "expected oracle"),
                       (["--predictor", f"table:{tmp_path}/nope.tbl"], "cannot open class table"),
                       (["--predictor", "oracle", "--predictor", "oracle"], "used twice"),
                       (["--predictor", "model:x"], "cannot open the model contexts file"),
                       (["--model-revalidate-every", "-1"], "non-negative integer"),
                       (["--series-interval-ms", "0"], "series-interval"),
                       (["--frobnicate"], "unknown option")):
        p = run_engine(good, *args)
        assert p.returncode == 2 and word in p.stderr, (args, p.stderr)
    bad_table = tmp_path / "bad.tbl"
    bad_table.write_text("1 2\nxyz 3\n")
    p = run_engine(good, "--predictor", f"table:{bad_table}")
    assert p.returncode == 2 and "line 2" in p.stderr and str(bad_table) in p.stderr


def test_python_reader_round_trip(tmp_path):
    recs = [tr.ObjectRecord(0, 10, 5, 1, 2, 16), tr.ObjectRecord(3, None, 7, 4, 5, 64)]
    path = simulator.write_trace(tmp_path / "rt.lttrace", recs, end_ns=100)
    header, it = simulator.read_trace(path)
    assert header.num_records == 2 and header.end_ns == 100
    assert header.boundaries_ns == tr.DEFAULT_BOUNDARIES_NS
    assert list(it) == recs
    assert tr.true_class(header.boundaries_ns, 0, None) == 7
    assert tr.true_class(header.boundaries_ns, 0, 10 * MS) == 1


def test_native_unit_driver():
    """simulator/tests/unit.cc: the bit-map helpers and the free queue against references."""
    unit = simulator.engine_path().parent / "lifetime_sim_unit"
    p = subprocess.run([str(unit)], capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr


def test_partially_free_spans_recycled_only_after_deadline(tmp_path):
    """§3.5: a closed, partially free span is reused only after its huge page's deadline
    expired.  Everything is predicted class 0 (< 10 ms)."""
    # 250 objects of 100 B at a 112 B stride (16 B alignment): 146 in span 1, 104 in span 2
    recs = [(i, 50 * MS if i == 0 else 1 * MS, 100, 1, 1, 16) for i in range(250)]
    recs.append((300, 2 * MS, 252 * BLOCK, 2, 1, 16))  # fills page 0: active, deadline 300 ns + 20 ms
    recs.append((10 * MS, 60 * MS, 100, 3, 3, 16))     # before expiry: a fresh span on a new page
    recs.append((25 * MS, 60 * MS, 100, 3, 2, 16))     # after expiry: span 1 is recycled
    path = simulator.write_trace(tmp_path / "spans.lttrace", recs, end_ns=60 * MS)
    r = simulator.simulate(path, ["constant:0"], baseline=False, check_invariants=True, check_every=1,
                           snapshots_ns=[15 * MS, 30 * MS])
    a = alloc_by_name(r, "llama:constant:0")
    c = a["counters"]
    assert (c["spans_opened"], c["recycled_span_reuses"]) == (3, 1)
    assert (c["deadline_expiries"], c["class_increases"]) == (1, 1)
    s15, s30 = (pages(s, "llama:constant:0") for s in r["snapshots"])
    assert s15[0]["lc"] == 0 and s15[0]["blocks"] == "R" * 4 + "." * 252
    assert s15[1]["state"] == "open" and s15[1]["blocks"] == "RR" + "." * 254
    assert s30[0]["lc"] == 1 and s30[0]["deadline_ns"] == 300 + 20 * MS + 200 * MS
    assert a["final_huge_pages"] == 2  # thread-local spans stay open

    # The ablation reuses span 1's free lines at once, for its own class: thread 3 takes it
    # at 10 ms (before the deadline) and no second page is needed until thread 2 at 25 ms.
    r = simulator.simulate(path, ["constant:0"], baseline=False, check_invariants=True, check_every=1,
                           recycle_spans_immediately=True, snapshots_ns=[15 * MS])
    assert r["settings"]["recycle_spans_immediately"] is True
    a = alloc_by_name(r, "llama:constant:0")
    assert (a["counters"]["spans_opened"], a["counters"]["recycled_span_reuses"]) == (3, 1)
    assert sorted(pages(r["snapshots"][0], "llama:constant:0")) == [0]


def test_invariants_random_trace_immediate_span_recycling(tmp_path):
    """The immediate span-recycling ablation keeps every invariant."""
    path = random_trace(tmp_path / "rand.lttrace", 30_000)
    r = simulator.simulate(path, ["oracle", "constant:0"], check_invariants=True, check_every=1024,
                           recycle_spans_immediately=True, timeout=600)
    for name in ("llama:oracle", "llama:constant:0"):
        assert alloc_by_name(r, name)["counters"]["recycled_span_reuses"] > 0


# ---------------------------------------------------------------- model predictor

@pytest.fixture(scope="module")
def model_served(exported_model):
    """(export dir, plugin, context definition, model id) of the session's exported model."""
    import json

    from core.context import ContextDefinition
    from export import serve

    _, export_dir = exported_model
    manifest = json.loads((export_dir / "export_manifest.json").read_text())
    definition = ContextDefinition.load(str(export_dir / "export_manifest.json"))
    return export_dir, serve.model_plugin(str(export_dir)), definition, manifest["model_id"]


def _c_api_classes(plugin: str, stacks: list[list[str]]) -> list[int]:
    """The model's class for each stack through the plugin's lifetime_predict_frames."""
    import ctypes

    lib = ctypes.CDLL(plugin)
    lib.lifetime_predictor_create.restype = ctypes.c_void_p
    lib.lifetime_predict_frames.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_char_p),
                                            ctypes.POINTER(ctypes.c_size_t), ctypes.c_int,
                                            ctypes.c_void_p]
    lib.lifetime_predictor_destroy.argtypes = [ctypes.c_void_p]
    p = lib.lifetime_predictor_create()
    out = []
    for s in stacks:
        raw = [f.encode("utf-8", "surrogateescape") for f in s]
        frames = (ctypes.c_char_p * max(1, len(raw)))(*raw)
        lengths = (ctypes.c_size_t * max(1, len(raw)))(*map(len, raw))
        out.append(lib.lifetime_predict_frames(p, frames, lengths, len(raw), None))
    lib.lifetime_predictor_destroy(p)
    return out


def test_model_predictor_serves_each_stack_the_model_class(model_served, exported_model, tmp_path):
    """Stacks (the model's eval contexts and odd inputs: an empty frame, a frame with a
    line break, deep stacks) in several size classes, revalidating every 2 hits: every
    object of a stack gets the class the C API gives its frames, and the cache counts add up."""
    from simulator.model_input import read_served, write_contexts
    from tests.export_support import edge_stacks, eval_stacks

    export_dir, plugin, definition, model_id = model_served
    model_dir, _ = exported_model
    stacks = eval_stacks(model_dir)[:120] + edge_stacks(eval_stacks(model_dir))[:30]
    stacks.append(["proxy::Odd::Frame(char)\nwith a line break"] + stacks[0])
    stacks.append([])
    contexts = {1000 + i: tuple(s) for i, s in enumerate(stacks)}
    write_contexts(str(tmp_path / "contexts.txt"), plugin=plugin, model_id=model_id,
                   definition=definition, stack_context=contexts)
    records, t = [], 0
    for rep in range(3):
        for sid in contexts:
            for size in (24, 40, 5000):  # size classes 32, 64, 8192
                records.append((t, t + 5 * MS if rep else None, size, sid, 1))
                t += 1000
    path = simulator.write_trace(tmp_path / "t.lttrace", records)
    served = tmp_path / "served.txt"
    r = simulator.simulate(path, ["oracle", f"m=model:{tmp_path / 'contexts.txt'}"],
                           model_revalidate_every=2, model_served=served, check_invariants=True)
    expected = dict(zip(contexts, _c_api_classes(plugin, [list(s) for s in stacks])))
    got = read_served(str(served))["m"]
    assert {sid: set(c) for sid, c in got.items()} == {sid: {c} for sid, c in expected.items()}
    assert all(sum(c.values()) == 9 for c in got.values())
    p = alloc_by_name(r, "llama:m")["predictor"]
    c = p["cache"]
    assert p["kind"] == "model" and p["model_id"] == model_id and p["stacks"] == len(stacks)
    assert c["lookups"] == c["hits"] + c["misses"] == len(records)
    assert c["revalidate_every"] == 2 and c["revalidations"] > 0 and c["disagreements"] == 0
    assert p["model_runs"] == c["misses"] + c["revalidations"]
    assert c["misses"] >= 3 * p["distinct_contexts"]  # one key per context and size class
    assert p["timing_ns"]["model_call"]["calls"] == p["model_runs"]


def test_model_predictor_sparse_stack_ids_serve_the_same(model_served, exported_model, tmp_path):
    """The engine looks a stack id up by array index when the trace's ids are dense and in
    a hash map when they are sparse: the same trace with its ids spread over 64 bits gets
    the same classes per stack, the same cache counts and the same simulation; a gap in
    dense ids and an id past the last one are refused like any stack with no context."""
    from simulator.model_input import read_served, write_contexts
    from tests.export_support import eval_stacks

    export_dir, plugin, definition, model_id = model_served
    model_dir, _ = exported_model
    stacks = eval_stacks(model_dir)[:40]
    runs = {}
    for name, sid in (("dense", lambda i: i), ("sparse", lambda i: (i + 1) * 0x9E3779B97F4A7C15 % 2**64)):
        contexts = {sid(i): tuple(s) for i, s in enumerate(stacks)}
        write_contexts(str(tmp_path / f"{name}.txt"), plugin=plugin, model_id=model_id,
                       definition=definition, stack_context=contexts)
        records, t = [], 0
        for rep in range(4):
            for i in range(len(stacks)):
                for size in (24, 5000):
                    records.append((t, t + 3 * MS if rep % 2 else None, size, sid(i), 1))
                    t += 1000
        path = simulator.write_trace(tmp_path / f"{name}.lttrace", records)
        served = tmp_path / f"{name}.served"
        r = simulator.simulate(path, [f"m=model:{tmp_path / f'{name}.txt'}"], baseline=False,
                               model_revalidate_every=3, model_served=served)
        inv = {sid(i): i for i in range(len(stacks))}
        got = {inv[k]: v for k, v in read_served(str(served))["m"].items()}
        a = alloc_by_name(r, "llama:m")
        p = dict(a["predictor"])
        del p["timing_ns"], p["contexts_file"]
        runs[name] = (got, p, {k: v for k, v in a.items() if k != "predictor"})
    assert runs["dense"] == runs["sparse"]
    assert len(runs["dense"][0]) == len(stacks)

    path = simulator.write_trace(tmp_path / "gap.lttrace", [(0, 5, 100, 7), (3, None, 200, 8)])
    for name, ctx in (("gap.txt", {7: (), 9: ()}), ("past.txt", {7: ()})):
        write_contexts(str(tmp_path / name), plugin=plugin, model_id=model_id,
                       definition=definition, stack_context=ctx)
        p = run_engine(path, "--predictor", f"model:{tmp_path / name}")
        assert p.returncode == 2 and "stack id 8 of the trace has no context" in p.stderr, p.stderr


def test_model_predictor_refuses_what_it_cannot_serve(model_served, tmp_path):
    from simulator.model_input import write_contexts

    export_dir, plugin, definition, model_id = model_served
    path = simulator.write_trace(tmp_path / "t.lttrace", [(0, 5, 100, 7), (3, None, 200, 8)])
    ctx = {7: ("proxy::Parse::Read(char)",), 8: ()}

    def refused(name, *words, contexts=ctx, **kw):
        f = tmp_path / name
        args = dict(plugin=plugin, model_id=model_id, definition=definition, stack_context=contexts)
        write_contexts(str(f), **{**args, **kw})
        p = run_engine(path, "--predictor", f"model:{f}")
        assert p.returncode == 2, (p.returncode, p.stderr)
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("lifetime_simulate: error: "), lines
        for w in words:
            assert w in lines[0], lines[0]

    refused("id.txt", "expected 0000", "not made for this model", model_id="0000")
    refused("wrappers.txt", "context definition (wrappers, max_frames) differs",
            definition=dataclasses.replace(definition, wrappers=definition.wrappers[1:]))
    refused("frames.txt", "differs", definition=dataclasses.replace(definition, max_frames=3))
    refused("plugin.txt", "cannot load the model plugin", plugin=str(tmp_path / "nope.so"))
    refused("missing.txt", "stack id 8 of the trace has no context", contexts={7: ()})
    (tmp_path / "junk.txt").write_text("something else\n")
    p = run_engine(path, "--predictor", f"model:{tmp_path / 'junk.txt'}")
    assert p.returncode == 2 and "expected the format line" in p.stderr
    ok = tmp_path / "ok.txt"
    write_contexts(str(ok), plugin=plugin, model_id=model_id, definition=definition,
                   stack_context=ctx)
    p = run_engine(path, "--predictor", f"a=model:{ok}", "--predictor", f"b=model:{ok}")
    assert p.returncode == 2 and "already used by another model predictor" in p.stderr
    assert run_engine(path, "--predictor", f"model:{ok}").returncode == 0
    # As many classes as the model's, but other boundaries: the model's info says so.
    other = simulator.write_trace(tmp_path / "other.lttrace", [(0, 5, 100, 7), (3, None, 200, 8)],
                                  boundaries_ns=[b // 2 for b in tr.DEFAULT_BOUNDARIES_NS])
    p = run_engine(other, "--predictor", f"model:{ok}")
    assert p.returncode == 2 and "class boundaries are not the trace's" in p.stderr, p.stderr
