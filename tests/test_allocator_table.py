"""benchmarks/allocator_table.py: the one table of every workload x allocator, read from
the benchmarks' result files (synthetic ones here), and the bars each LLAMA row misses."""

from __future__ import annotations

import json
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import allocator_table  # noqa: E402


def spread(*values):
    return {"n": len(values), "values": list(values)}


def write(folder: pathlib.Path, res: dict) -> str:
    folder.mkdir()
    (folder / "results.json").write_text(json.dumps(res))
    return str(folder)


def peer_cell(program, allocator, steady, peak, elapsed, dense):
    return {"program": program, "allocator": allocator, "ok": 3, "steady_rss_median": steady,
            "peak_rss_median": peak, "elapsed_median": elapsed,
            "huge_share_of_dense_median": dense, "huge_share_of_anon_median": 0.0}


def test_table_judges_llama_against_the_best_peer(tmp_path, capsys):
    peer = {"cells": [peer_cell("z3", "glibc", 44.5, 45.0, 20.0, 0.0),
                      peer_cell("z3", "tcmalloc", 56.0, 56.0, 21.0, 1.0),
                      peer_cell("z3", "llama", 45.0, 45.5, 25.0, 1.0)],
            "records": [{"program": "z3", "allocator": "llama", "steady_rss_mib": v,
                         "dense_scan": False} for v in (44.9, 45.0, 45.3)]}
    redis = {"aggregate": {"phases": {
        "jemalloc": {"seeds": [1, 2], "steady_rss_mib": spread(110.0, 108.0),
                     "peak_rss_mib": spread(240.0, 236.0), "grow_commands_per_s": spread(1e5, 1e5),
                     "huge_share_of_dense": spread(0.0, 0.0)},
        "glibc": {"seeds": [1, 2], "steady_rss_mib": spread(220.0, 222.0),
                  "peak_rss_mib": spread(230.0, 230.0), "grow_commands_per_s": spread(2e5, 2e5)},
        "llama-segregated-model": {"seeds": [1, 2], "steady_rss_mib": spread(45.0, 47.0),
                                   "peak_rss_mib": spread(200.0, 200.0),
                                   "grow_commands_per_s": spread(1.9e5, 1.9e5),
                                   "huge_share_of_dense": spread(0.9, 0.85)},
        "llama-paper-constant": {"seeds": [1], "steady_rss_mib": spread(1000.0)}}}}
    postgres = {"aggregate": {
        "glibc": {"seeds": [1], "steady_anon_mib": spread(87.0), "peak_anon_mib": spread(103.0),
                  "cpu_ms_per_statement": spread(0.6), "huge_share_of_anon": spread(0.0)},
        "llama-segregated-constant": {"seeds": [1], "steady_anon_mib": spread(75.0),
                                      "peak_anon_mib": spread(95.0),
                                      "cpu_ms_per_statement": spread(0.7),
                                      "huge_share_of_anon": spread(0.3)}}}
    out = tmp_path / "table.md"
    assert allocator_table.main(["--peer", write(tmp_path / "p", peer),
                                 "--redis", write(tmp_path / "r", redis),
                                 "--postgres", write(tmp_path / "g", postgres),
                                 "--out", str(out)]) == 0
    text = out.read_text()
    assert text == capsys.readouterr().out
    judged = json.loads(out.with_suffix(".json").read_text())
    z3 = judged["z3"]["judged"]["llama-segregated-constant"]
    assert z3["best_peer"] == "glibc" and abs(z3["steady_to_best"] - 45.0 / 44.5) < 1e-9
    assert abs(z3["worst_to_best"] - 45.3 / 44.5) < 1e-9
    assert abs(z3["throughput_to_glibc"] - 20.0 / 25.0) < 1e-9  # elapsed: lower is better
    assert z3["misses"] == ["steady", "steady (worst run)", "throughput"]
    phases = judged["Redis phases"]["judged"]["llama-segregated-model"]
    assert phases["best_peer"] == "jemalloc" and abs(phases["steady_to_best"] - 46 / 109) < 1e-9
    assert abs(phases["throughput_to_glibc"] - 0.95) < 1e-9  # commands/s: higher is better
    assert phases["misses"] == []  # no Google TCMalloc run: the peak bar is not judged
    assert "llama-paper-constant" not in judged["Redis phases"]["rows"]
    pg = judged["PostgreSQL mixed (anon)"]["judged"]["llama-segregated-constant"]
    # 30% of all anonymous memory: not the dense-region bar; paced: 0.86x glibc's CPU per
    # statement is shown, not judged
    assert pg["misses"] == [] and judged["PostgreSQL mixed (anon)"]["rows"][
        "llama-segregated-constant"]["paced"]
    assert "| z3 | LLAMA constant:0 | 45.0 (45.3) | 1.01 |" in text
    assert "- z3, LLAMA constant:0: steady, steady (worst run), throughput" in text


def test_a_missing_results_file_is_one_line(tmp_path):
    with pytest.raises(SystemExit, match=r"allocator_table: .*nowhere/results.json"):
        allocator_table.main(["--peer", str(tmp_path / "nowhere")])


def test_a_truncated_or_foreign_results_file_is_one_line(tmp_path):
    cut = tmp_path / "cut"
    cut.mkdir()
    (cut / "results.json").write_text('{"cells": [')
    with pytest.raises(SystemExit, match=r"allocator_table: .*cut/results.json: "):
        allocator_table.main(["--peer", str(cut)])
    # Redis's results given as the peer suite's
    redis = write(tmp_path / "r", {"aggregate": {}})
    with pytest.raises(SystemExit, match=r"r/results.json: not benchmarks/peer_suite.py's "
                                         r"results \(no 'cells'\)"):
        allocator_table.main(["--peer", redis])
