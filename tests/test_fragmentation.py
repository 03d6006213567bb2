"""`lifetime fragmentation` (simulator/fragmentation.py, the engine's --attribute-at-ns
and --isolate in simulator/src/attribution.cc) on hand-built traces whose answer is known.

Stacks are symbolized through the side file's mappings; the modules do not exist, so a
frame is its module: stack 1 is context A = (<liba+?>, <liba+?>), stack 2 context
B = (<libb+?>, <libb+?>), stack 3 context C = (<libd+?>, <libd+?>).
"""

from __future__ import annotations

import gzip
import json
import os
import random
import shutil
import subprocess

import pytest

import simulator
from lifetime.cli import main
from simulator import trace as tr
from simulator.convert import stacks_path
from tests.trace_support import write_trace_with_stacks

MS = 1_000_000
S = 1000 * MS
HP = 2 << 20
MIB = float(1 << 20)
A, B, C = ("<liba+?>", "<liba+?>"), ("<libb+?>", "<libb+?>"), ("<libd+?>", "<libd+?>")
MAPPINGS = [{"id": i + 1, "start": base, "limit": base + 0x100000, "file_offset": 0,
             "path": f"/nonexistent/{name}.so", "build_id": f"{i + 1:02x}" * 4}
            for i, (name, base) in enumerate([("liba", 0x400000), ("libb", 0x600000),
                                              ("libd", 0x800000)])]
STACKS = {1: [0x400101, 0x400200], 2: [0x600101, 0x600200], 3: [0x800101, 0x800200]}

pytestmark = pytest.mark.skipif(
    not (simulator.ROOT / "build" / "simulator" / "lifetime_simulate").exists()
    and not os.environ.get("LIFETIME_SIMULATE"), reason="engine not built (make native)")


def write_trace(path, recs: list[tr.ObjectRecord], end: int) -> str:
    """The trace and its side file, as simulator/convert.py writes them."""
    return write_trace_with_stacks(path, sorted(recs, key=lambda r: r.alloc_ns), end, STACKS,
                                   MAPPINGS, "frag")


def pinned_trace(path, pages: int = 1) -> str:
    """`pages` huge pages' worth of 1 KiB objects of A, all freed at 1 s, and among them
    (one in every 2048, one per huge page) a never-freed 1 KiB object of B: after 1 s
    each huge page holds only B's object, so B pins it: 2 MiB - 1 KiB each."""
    recs, t = [], MS
    for i in range(2048 * pages):
        b = i % 2048 == 1024
        recs.append(tr.ObjectRecord(t, None if b else S, 1024, 2 if b else 1, thread_id=1))
        t += 1000
    return write_trace(path, recs, 4 * S)


def run_cli(capsys, *args) -> tuple[int, str, str]:
    rc = main(["fragmentation", *map(str, args)])
    out, err = capsys.readouterr()
    return rc, out, err


def result(out_dir) -> dict:
    with open(os.path.join(out_dir, "fragmentation.json")) as f:
        return json.load(f)


def ctx(view: dict, frames) -> dict:
    return next(c for c in view["contexts"] if tuple(c["context"]) == frames)


@pytest.mark.parametrize("policy", ["segregated", "baseline", "paper"])
def test_a_long_lived_object_pins_the_page_it_kept(tmp_path, capsys, policy):
    trace = pinned_trace(tmp_path / "pin.lttrace")
    args = [trace, "--out", tmp_path / "out", "--policy", policy, "--steady-samples", 4]
    rc, out, err = run_cli(capsys, *args + (["--predictor", "constant:0"] if policy == "paper" else []))
    assert rc == 0, err
    steady = result(tmp_path / "out")["views"][0]
    assert steady["label"] == "steady state" and len(steady["times_ns"]) == 4
    assert [tuple(c["context"]) for c in steady["contexts"]] == [B]  # A's objects are all dead
    b = ctx(steady, B)
    assert b["pinned_bytes"] == HP - 1024 and b["live_bytes"] == 1024 and b["objects"] == 1
    assert b["objects_per_class"]["inf"] == 1 and b["sole_huge_pages"] == 1
    assert b["saved_static_bytes"] == 0  # its own heap would need a huge page too
    t = steady["totals"]
    assert t["heap"] == HP and t["unattributed"] == 0 and t["pinned"] == HP - 1024
    assert t["pinned_vs_engine"] == pytest.approx(1.0, abs=1e-9)
    assert "2.00" in out and "<libb+?> < <libb+?>" in out  # the text: B pins 2.00 MiB


def test_counterfactual_static_and_rerun_agree_where_the_answer_is_known(tmp_path, capsys):
    """Eight huge pages each kept by one of B's objects; apart, B's eight objects share
    one huge page: both counterfactuals save 7 huge pages (the baseline's size classes)."""
    trace = pinned_trace(tmp_path / "pin8.lttrace", pages=8)
    rc, out, err = run_cli(capsys, trace, "--out", tmp_path / "out", "--policy", "baseline",
                           "--rerun", 2, "--steady-samples", 2)
    assert rc == 0, err
    steady = result(tmp_path / "out")["views"][0]
    b = ctx(steady, B)
    assert b["pinned_bytes"] == 8 * (HP - 1024) and b["sole_huge_pages"] == 8
    assert b["saved_static_bytes"] == 7 * HP
    assert b["saved_rerun_bytes"] == pytest.approx(7 * HP)
    # The top contexts together (B alone is live): the same.
    assert steady["totals"]["top_saved_static"] == 7 * HP
    assert steady["totals"]["top_saved_rerun"] == pytest.approx(7 * HP)
    assert "rerun MiB" in out


def mixed_trace(path) -> str:
    """Three contexts, random sizes (16 B .. 3 MiB: small, large and several-huge-page
    objects) and lifetimes (1 ms .. never) over 6 s."""
    rng = random.Random(7)
    recs, t = [], MS
    for i in range(6000):
        sid = rng.choice((1, 1, 2, 3))
        size = rng.choice((16, 48, 200, 1000, 5000, 40_000, 300_000, 3_000_000)
                          if i % 50 == 0 else (16, 48, 96, 200, 1000, 5000))
        life = rng.choice((MS, 50 * MS, 800 * MS, 3 * S, None)) if sid != 3 else None
        free = None if life is None or t + life > 6 * S else t + life
        recs.append(tr.ObjectRecord(t, free, size, sid, thread_id=1 + sid % 2))
        t += 900_000
    return write_trace(path, recs, 6 * S)


@pytest.mark.parametrize("policy,predictor", [("segregated", "constant:0"), ("baseline", None),
                                              ("paper", "oracle")])
def test_pinned_plus_unattributed_is_the_heap_minus_live(tmp_path, capsys, policy, predictor):
    """At every time: the heap is the engine's own page snapshot, live the trace's objects
    live then (computed here from the records), and the contexts' pinned bytes plus the
    huge pages with no live object are exactly heap - live (and pinned is within 1%)."""
    trace = mixed_trace(tmp_path / "mixed.lttrace")
    at = [0.5, 2.0, 4.5]
    args = [trace, "--out", tmp_path / "out", "--policy", policy, "--steady-samples", 3]
    if predictor:
        args += ["--predictor", predictor]
    for s in at:
        args += ["--at", s]
    rc, _, err = run_cli(capsys, *args)
    assert rc == 0, err
    views = result(tmp_path / "out")["views"]
    times = [t for v in views for t in v["times_ns"]]
    sim = simulator.simulate(trace, [predictor] if predictor else [], baseline=policy == "baseline",
                             policy=[policy] if predictor else [], snapshots_ns=times)
    name = sim["allocators"][0]["name"]
    heap_at = {s["t_ns"]: HP * sum(p.get("count", 1) for p in s["huge_pages"][name])
               for s in sim["snapshots"]}
    _, records = tr.read_trace(trace)
    records = list(records)
    live_at = {t: sum(r.size for r in records
                      if r.alloc_ns <= t and (r.free_ns is None or r.free_ns > t)) for t in times}
    for v in views:
        tot = v["totals"]
        heap = sum(heap_at[t] for t in v["times_ns"]) / len(v["times_ns"])
        live = sum(live_at[t] for t in v["times_ns"]) / len(v["times_ns"])
        assert tot["heap"] == heap and tot["live"] == pytest.approx(live)
        pinned = sum(c["pinned_bytes"] for c in v["contexts"])
        assert pinned == pytest.approx(tot["pinned"])
        assert pinned + tot["unattributed"] == pytest.approx(heap - live, rel=1e-9)
        assert tot["unattributed"] == 0 and pinned == pytest.approx(heap - live, rel=1e-9)
        # In memory: the free pages the size-class heaps gave back (subrelease) are not
        # held; what is left is shared the same way.
        resident = sum(c["pinned_resident_bytes"] for c in v["contexts"])
        assert resident == pytest.approx(tot["pinned_resident"]) and resident <= pinned + 1e-6
        assert tot["heap_resident"] <= tot["heap"]
        if tot["empty_pages"] == 0:
            assert resident == pytest.approx(tot["heap_resident"] - live, rel=1e-9, abs=1e-3)
        if policy != "paper":  # size-class heaps give back an empty huge page at once
            assert tot["empty_pages"] == 0
        assert {tuple(c["context"]) for c in v["contexts"]} <= {A, B, C}
    if policy == "paper":  # at 0.5 s LLAMA holds a huge page with no live object: pinned
        assert views[1]["totals"]["empty_pages"] == 1  # by the last stack that allocated there
        assert sum(c["live_bytes"] for c in v["contexts"]) == pytest.approx(live)


def test_pprof_profile_parses_and_sums_to_the_pinned_bytes(tmp_path, capsys):
    from interop.pprof import profile_pb2

    trace = mixed_trace(tmp_path / "mixed.lttrace")
    rc, _, err = run_cli(capsys, trace, "--out", tmp_path / "out", "--steady-samples", 2,
                         "--at", 1)
    assert rc == 0, err
    out = tmp_path / "out"
    assert (out / "pinned.png").stat().st_size > 10_000
    steady = result(out)["views"][0]["totals"]
    for name in ("pinned.pb.gz", "pinned_at_1s.pb.gz"):
        p = profile_pb2.Profile()
        p.ParseFromString(gzip.decompress((out / name).read_bytes()))
        st = [p.string_table[t.type] for t in p.sample_type]
        assert st == ["pinned_space", "live_space", "live_objects"]
        assert p.string_table[p.default_sample_type] == "pinned_space"
        names = {p.string_table[f.name] for f in p.function}
        assert {"<liba+?>", "<libb+?>", "<libd+?>"} <= names
        assert all(loc.mapping_id in {m.id for m in p.mapping} for loc in p.location)
    p = profile_pb2.Profile()
    p.ParseFromString(gzip.decompress((out / "pinned.pb.gz").read_bytes()))
    total = sum(s.value[0] for s in p.sample)
    assert total == pytest.approx(steady["heap"] - steady["live"], abs=len(p.sample))
    go = shutil.which("go")
    if go:  # the brief's reader, where installed
        top = subprocess.run([go, "tool", "pprof", "-top", str(out / "pinned.pb.gz")],
                             capture_output=True, text=True, timeout=120)
        assert top.returncode == 0, top.stderr
        assert "Type: pinned_space" in top.stdout and "<libd+?>" in top.stdout


def test_bad_input_is_one_line_naming_the_file(tmp_path, capsys):
    good = pinned_trace(tmp_path / "good.lttrace")
    missing = tmp_path / "missing.lttrace"
    not_trace = tmp_path / "notes.txt"
    not_trace.write_text("hello\n")
    truncated = tmp_path / "cut.lttrace"
    truncated.write_bytes(open(good, "rb").read()[:-7])
    shutil.copy(stacks_path(good), stacks_path(truncated))
    no_side = tmp_path / "alone.lttrace"
    shutil.copy(good, no_side)
    for bad in (missing, not_trace, truncated, no_side):
        rc, out, err = run_cli(capsys, bad, "--out", tmp_path / "out")
        lines = err.strip().splitlines()
        assert rc == 1 and out == "", (bad, err)
        assert len(lines) == 1 and lines[0].startswith("lifetime fragmentation: error: "), err
        named = os.path.basename(stacks_path(bad)) if bad == no_side else bad.name
        assert named in lines[0], lines[0]
    rc, _, err = run_cli(capsys, good, "--out", tmp_path / "out", "--at", 99)
    assert rc == 1 and "--at 99" in err and len(err.strip().splitlines()) == 1
