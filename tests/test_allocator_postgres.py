"""benchmarks/allocator_postgres.py on a real PostgreSQL 16.2 (the pgserver wheel) with a
short mixed plan, under glibc and LLAMA (segregated, constant:0): memory is summed over
every process of the server, and both runs reach results.json (~25 s)."""

from __future__ import annotations

import json
import os

import pytest

from benchmarks import allocator_postgres as ap
from benchmarks.servers import postgres
from benchmarks.servers.common import ServerSetupError

LLAMA = ap.ROOT / "build" / "allocator" / "liblifetime_alloc.so"
LAUNCHER = ap.ROOT / "build" / "allocator" / "lifetime_run_measured"


def test_tree_finds_a_forked_child():
    pid = os.fork()
    if pid == 0:  # the child idles until killed
        os.execvp("sleep", ["sleep", "30"])
    try:
        assert pid in ap.tree(os.getpid())
        assert ap.tree(pid) == [pid]
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)


@pytest.mark.slow  # a real server, two runs
def test_postgres_under_glibc_and_llama(tmp_path):
    if not LLAMA.exists() or not (LAUNCHER.exists() or os.environ.get("LIFETIME_RUN_MEASURED")):
        pytest.skip("the allocator is not built (make native)")
    try:
        postgres.ensure(ap.VERSION)  # the pgserver wheel from PyPI, cached
    except ServerSetupError as e:  # pip download failed (no network): say so
        pytest.skip(f"PostgreSQL {ap.VERSION} could not be fetched: {e}")
    configs = ["glibc", "llama-segregated-constant"]
    assert ap.main(["--allocators", *configs, "--load-seeds", "1", "--seconds", "6",
                    "--idle-pool", "3", "--out", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "results.json").read_text())
    runs = {r["config"]: r for r in res["runs"]}
    assert sorted(runs) == sorted(configs)
    for name in configs:
        r = runs[name]
        assert r["status"] == "ok", (name, r["error"])
        m = r["metrics"]
        assert m["peak_anon_mib"] > 0 and m["steady_anon_mib"] > 0
        # every process counted: the postmaster, its auxiliary processes, the backends
        assert m["max_processes"] > 1 and m["processes_seen"] >= m["max_processes"]
        assert m["statements"] == r["load"]["plan"]["statements"]
        assert r["idle_pool"]["backends"] == 3
        assert res["aggregate"][name]["seeds"] == [1]
    # LLAMA served the postmaster and its forked backends: each wrote its stats at exit
    st = runs["llama-segregated-constant"]["llama_process_stats"]
    assert st["processes"] > 1 and st["postmaster"] is not None
    assert st["policy"].startswith("segregate")
    assert runs["glibc"]["llama_process_stats"] is None
    md = (tmp_path / "results.md").read_text()
    assert "glibc 2.36" in md and "LLAMA segregated, constant:0" in md
