"""benchmarks/peer_suite.py and its stress programs (workloads/stress/), fast: the
programs build and, at a tiny scale, give the same result line (checksum, operations)
under glibc and under LLAMA's allocator; the suite's parsing of a run works."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import allocator_pair_latency  # noqa: E402
import peer_suite  # noqa: E402

BUILD = ROOT / "build"
LIFETIME = str(ROOT / ".venv" / "bin" / "lifetime")
TINY = {  # program -> arguments of a run well under a second
    "larson_sim": ["-t", "3", "-s", "0.002", "-n", "300"],
    "mstress_sim": ["-t", "3", "-s", "0.005", "-R", "4"],
    "rptest_sim": ["-t", "3", "-s", "0.002", "-p", "6"],
}


@pytest.fixture(scope="module")
def stress_bin():
    if not (BUILD / "build.ninja").exists() and not (BUILD / "Makefile").exists():
        pytest.skip("native build not configured (make native)")
    proc = subprocess.run(["cmake", "--build", str(BUILD), "--target", *TINY],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return BUILD / "workloads" / "stress"


def _result(out: str, name: str) -> tuple[str, str]:
    m = re.search(rf"^{name}: .*\bops=(\d+) .*checksum=([0-9a-f]{{16}}) errors=0$", out, re.M)
    assert m, out
    return m.group(1), m.group(2)


@pytest.mark.parametrize("name", sorted(TINY))
def test_stress_same_result_glibc_and_llama(stress_bin, name):
    argv = [str(stress_bin / name), *TINY[name]]
    direct = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert direct.returncode == 0, direct.stderr
    again = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert _result(again.stdout, name) == _result(direct.stdout, name)  # deterministic
    other_seed = subprocess.run(argv + ["-r", "7"], capture_output=True, text=True, timeout=60)
    assert _result(other_seed.stdout, name)[1] != _result(direct.stdout, name)[1]
    if not (BUILD / "allocator" / "liblifetime_alloc.so").exists():
        pytest.skip("liblifetime_alloc.so not built")
    results = {}
    for alloc in ("glibc", "llama"):
        proc = subprocess.run([LIFETIME, "run", "--allocator", alloc, "--", *argv],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        rec = peer_suite.parse_run_line(proc.stderr)
        assert rec and rec["allocator"] == alloc and rec["exit"] == 0
        results[alloc] = _result(proc.stdout, name)
        if name != "larson_sim":
            assert peer_suite.MARKER.search(proc.stdout)
    assert results["glibc"] == results["llama"] == _result(direct.stdout, name)


def test_stress_rejects_bad_arguments(stress_bin):
    proc = subprocess.run([str(stress_bin / "larson_sim"), "-t", "0"], capture_output=True,
                          text=True, timeout=10)
    assert proc.returncode == 64 and "usage" in proc.stderr


def test_parse_run_line():
    err = ("some program noise\n"
           "lifetime run: llama (paper, constant:0): exit 0, peak RSS 341.4 MiB, wall 2.36 s; "
           "huge pages 6 live, 114 peak; objects 560 live, 7071236 allocated; 5 lock acquisitions\n")
    assert peer_suite.parse_run_line(err) == {
        "allocator": "llama", "detail": "paper, constant:0", "exit": 0,
        "peak_rss_mib": 341.4, "elapsed_s": 2.36}
    rec = peer_suite.parse_run_line("lifetime run: tcmalloc-gperftools: exit 1, peak RSS 12.0 MiB, wall 0.05 s\n")
    assert rec["allocator"] == "tcmalloc-gperftools" and rec["detail"] is None and rec["exit"] == 1
    assert peer_suite.parse_run_line("no summary here") is None


def test_steady_rss_marker_and_last_third():
    samples = [(t / 10, 100.0 if t < 50 else 20.0) for t in range(100)]
    assert peer_suite.steady_rss(samples, 10.0, 6.0) == (20.0, "marker")
    value, basis = peer_suite.steady_rss(samples, 10.0, None)
    assert basis == "last third" and value == 20.0
    assert peer_suite.steady_rss([], 1.0, None) == (None, "none")
    assert peer_suite.steady_rss([(0.0, 5.0)], 1.0, 2.0) == (5.0, "marker (last sample)")


def test_result_key_and_report():
    out = "mstress_sim: STEADY released\nmstress_sim: threads=2 scale=1 seed=1 ops=10 elapsed=0.1 ops/s=100 checksum=00000000000000ab errors=0\n"
    assert peer_suite.result_key("mstress", out) == "00000000000000ab ops=10"
    assert peer_suite.result_key("rocksdb", "readrandom : ... (253472 of 400000 found)\n") == "(253472 of 400000 found)"
    recs = []
    for alloc, el, res in (("glibc", 2.0, "a"), ("jemalloc", 1.0, "a"), ("llama", 4.0, "b")):
        recs.append({"program": "larson", "allocator": alloc, "error": None, "elapsed_s": el,
                     "peak_rss_mib": 10.0, "steady_rss_mib": 5.0, "steady_basis": "last third",
                     "result": res})
    recs.append(dict(recs[0], error="exit 1: boom"))
    agg = peer_suite.aggregate(recs)
    assert agg[("larson", "glibc")]["runs"] == 2 and agg[("larson", "glibc")]["ok"] == 1
    md = peer_suite.render(agg, ["larson"], ["glibc", "jemalloc", "llama"], ["a note"],
                           {"runs": 1, "machine": "x", "threads": 2, "scale": 1.0})
    assert "| larson | llama | 4.00 / 4.00 | 4.00 |" in md  # against jemalloc's 1.0 s
    assert "results differ" in md and "a note" in md


def test_elapsed_paired_by_run():
    recs = []
    # the machine slows from run 0 to run 1: each run's ratio is 1.1 whatever the drift
    for run, speed in ((0, 1.0), (1, 2.0), (2, 1.5)):
        for alloc, el in (("glibc", 2.0), ("llama", 2.2)):
            recs.append({"program": "rptest", "allocator": alloc, "error": None, "run": run,
                         "elapsed_s": el * speed, "peak_rss_mib": 1.0, "steady_rss_mib": 1.0,
                         "steady_basis": "marker", "result": "r"})
    recs.append(dict(recs[0], allocator="llama", run=3, elapsed_s=9.0))  # no glibc run 3: not paired
    recs[4] = dict(recs[4], error="exit 1")                                 # glibc's run 2 failed: not paired
    pairs = peer_suite.paired_elapsed(recs)
    assert list(pairs) == [("rptest", "llama")]
    assert pairs[("rptest", "llama")] == pytest.approx([1.1, 1.1])
    md = peer_suite.render(peer_suite.aggregate(recs), ["rptest"], ["glibc", "llama"], [],
                           {"runs": 4, "machine": "x", "threads": 2, "scale": 1.0}, pairs)
    assert "| rptest | llama | 1.10 / 1.10 | 2 |" in md


def test_huge_page_shares_over_the_steady_window():
    # (t, anonymous, huge, dense) MiB: 40 MiB anonymous, then 20 of it in huge pages in
    # 25 MiB of dense regions from t = 5
    mem = [(t / 10, 40.0, 0.0 if t < 50 else 20.0, 0.0 if t < 50 else 25.0) for t in range(100)]
    got = peer_suite.huge_pages(mem, 10.0, None)
    assert got["huge_share_of_anon"] == pytest.approx(0.5) and got["huge_share_of_dense"] == pytest.approx(0.8)
    # the dense regions read at every DENSE_EVERY-th sample only (None between): the same shares
    sparse = [(t, a, h, d if i % peer_suite.DENSE_EVERY == 0 else None) for i, (t, a, h, d) in enumerate(mem)]
    assert peer_suite.huge_pages(sparse, 10.0, None)["huge_share_of_dense"] == pytest.approx(0.8)
    # the share is of the huge pages in the samples that read the dense regions: huge
    # pages that swing between samples do not bias it
    swing = [(t, a, h if i % peer_suite.DENSE_EVERY == 0 else 0.0, d) for i, (t, a, h, d) in enumerate(sparse)]
    assert peer_suite.huge_pages(swing, 10.0, None)["huge_share_of_dense"] == pytest.approx(0.8)
    # a marker window that holds no dense reading: no share (not a reading from before it)
    peak = [(0.0, 400.0, 0.0, 400.0), (0.1, 40.0, 20.0, None), (0.2, 40.0, 20.0, None)]
    got_peak = peer_suite.huge_pages(peak, 0.3, 0.05)
    assert got_peak["huge_share_of_dense"] is None and got_peak["huge_share_of_anon"] == pytest.approx(0.5)
    quiet = peer_suite.huge_pages([(t / 10, 40.0, 0.0, 0.0) for t in range(10)], 1.0, None)
    assert quiet["huge_share_of_anon"] == 0.0 and quiet["huge_share_of_dense"] is None
    rec = {"program": "z3", "allocator": "llama", "error": None, "elapsed_s": 1.0, "peak_rss_mib": 10.0,
           "steady_rss_mib": 5.0, "steady_basis": "last third", "result": "r", **got}
    agg = peer_suite.aggregate([rec, dict(rec, huge_share_of_dense=0.6), dict(rec, huge_share_of_dense=None)])
    assert agg[("z3", "llama")]["huge_share_of_dense_median"] == pytest.approx(0.7)
    md = peer_suite.render(agg, ["z3"], ["llama"], [], {"runs": 3, "machine": "x", "threads": 2, "scale": 1.0})
    assert "| 50 | 70 (60) |" in md  # huge / anon; huge / dense: median (worst)


def test_dense_region_runs_give_only_their_share():
    """Runs that read the dense regions (slowed by the pagemap reads) give the huge-page
    share of the dense regions and nothing else; the other runs every other figure."""
    base = {"program": "rptest", "error": None, "peak_rss_mib": 10.0, "steady_basis": "marker",
            "result": "r", "huge_share_of_anon": 0.1, "huge_share_of_dense": None}
    recs = []
    for alloc in ("glibc", "llama"):
        for run in (0, 1):
            recs.append(dict(base, allocator=alloc, run=run, dense_scan=False, elapsed_s=2.0,
                             steady_rss_mib=5.0))
        recs.append(dict(base, allocator=alloc, run=2, dense_scan=True, elapsed_s=3.0,
                         steady_rss_mib=9.0, peak_rss_mib=20.0, huge_share_of_anon=0.9,
                         huge_share_of_dense=0.4))
    agg = peer_suite.aggregate(recs)
    c = agg[("rptest", "llama")]
    assert (c["elapsed_median"], c["elapsed_worst"], c["peak_rss_median"], c["steady_rss_median"]) == (2.0, 2.0, 10.0, 5.0)
    assert c["huge_share_of_anon_median"] == pytest.approx(0.1)
    assert c["huge_share_of_dense_median"] == pytest.approx(0.4) and c["ok"] == 3
    assert peer_suite.paired_elapsed(recs)[("rptest", "llama")] == pytest.approx([1.0, 1.0])
    md = peer_suite.render(agg, ["rptest"], ["glibc", "llama"], [],
                           {"runs": 2, "dense_runs": 1, "machine": "x", "threads": 2, "scale": 1.0})
    assert "from 1 more run(s) per cell" in md


def test_dense_runs_below_zero_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        peer_suite.main(["--dense-runs", "-1", "--out", str(tmp_path / "out")])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--dense-runs -1: must be 0 or more" in err
    assert not (tmp_path / "out").exists()  # refused before anything ran or was written


def test_program_memory_of_a_tree():
    # the sampler finds the program under lifetime run's launcher: here, no launcher
    assert peer_suite.program_memory_kib(os.getpid()) is None


@pytest.mark.parametrize("manifest", [None, "{not json", '{"format": "lifetime-export"}'])
def test_pair_latency_refuses_a_model_dir_that_is_not_an_export(manifest, tmp_path, capsys):
    model = tmp_path / "export"
    model.mkdir()
    if manifest is not None:
        (model / "export_manifest.json").write_text(manifest)
    assert allocator_pair_latency.main(["--model", str(model), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("allocator_pair_latency: ") and str(model) in err[0], err
    assert not (tmp_path / "out").exists()


def test_each_allocator_takes_a_different_place_each_run():
    allocs = ["glibc", "jemalloc", "mimalloc", "tcmalloc-gperftools", "tcmalloc", "llama"]
    orders = [peer_suite.round_order(allocs, r, 3) for r in range(3)]
    assert orders[0] == allocs and all(sorted(o) == sorted(allocs) for o in orders)
    places = {a: {o.index(a) for o in orders} for a in allocs}
    assert all(len(p) == 3 for p in places.values()), places  # three runs, three places each
    assert peer_suite.round_order(["glibc", "llama"], 1, 2) == ["llama", "glibc"]
    assert peer_suite.round_order(["llama"], 0, 1) == ["llama"]


def test_pair_latency_quiet_rounds_are_those_where_glibc_ran_at_its_speed():
    # rounds 1 and 2 throttled (glibc's own pair 1.5x its fastest): they leave the quiet table
    runs = {"glibc": [{"p50": v} for v in (9.0, 13.5, 14.0, 9.5)],
            "llama + model": [{"p50": v} for v in (14.2, 21.0, 22.0, 14.4)]}
    assert allocator_pair_latency.quiet_rounds(runs) == [0, 3]
    quiet = {k: allocator_pair_latency.summary([rs[i]["p50"] for i in (0, 3)]) for k, rs in runs.items()}
    md = allocator_pair_latency.markdown(
        {k: allocator_pair_latency.summary([x["p50"] for x in rs]) for k, rs in runs.items()},
        {"runs": 4, "cpu": 1, "direct": True, "model": "m", "load_before": [0], "load_after": [0]}, quiet)
    assert "| llama + model | 4 | 17.70 | **22.00** |" in md
    assert "2 of 4" in md and "| llama + model | 2 | 14.30 | **14.40** |" in md


def test_idle_places_selection_tables_medians():
    from benchmarks import idle_places_selection as ips
    rec = {"program": "sqlite", "allocator": "llama-segregated", "error": None, "steady_rss_mib": 80.0,
           "huge_share_of_dense": 0.4, "elapsed_s": 6.0, "peak_rss_mib": 90.0, "steady_basis": "last third",
           "result": "r"}
    res = {"1": [rec, dict(rec, steady_rss_mib=82.0, huge_share_of_dense=None), dict(rec, error="exit 1")],
           "0": [dict(rec, steady_rss_mib=83.0, huge_share_of_dense=0.0)]}
    s = peer_suite.aggregate(res["1"])[("sqlite", "llama-segregated")]
    assert (s["ok"], s["steady_rss_median"], s["huge_share_of_dense_median"], s["elapsed_median"]) == (2, 81.0, 0.4, 6.0)
    md = ips.render(res)
    assert "| sqlite | on | 2 | 81.0 | 40 | 6.00 |" in md and "| sqlite | off | 1 | 83.0 | 0 | 6.00 |" in md
