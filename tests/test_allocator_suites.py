"""Other projects' own test suites under the LLAMA allocator (liblifetime_alloc.so,
LD_PRELOAD): a subset of Redis 6.0.16's `runtest` units with every redis-server the suite
starts on the allocator (each writes the allocator's stats file: the proof it ran on it),
and a subset of CPython's regression tests (`python -m test`, PYTHONMALLOC=malloc), both
with the policy's invariant checker every N operations (LIFETIME_ALLOC_CHECK).  Both
subsets pass under glibc too (benchmarks/allocator_redis_suite.py runs the whole Redis
suite under both).  The signal-handler driver: malloc and free in a SIGALRM handler while
the interrupted thread is inside the allocator."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from benchmarks import allocator_redis_suite as suite_bench
from tests.test_allocator import BUILD, built, preload_env

# ~25 s under the allocator on the 2-core box (glibc: the same); --clients 2
REDIS_UNITS = ("unit/type/list", "unit/type/hash", "unit/type/set", "unit/type/zset",
               "unit/expire", "unit/keyspace", "unit/type/incr", "unit/type/string")
# 1714 tests, ~24 s under the allocator with the checker every 200 000 operations (glibc: 6 s)
PYTHON_MODULES = ("test_list", "test_dict", "test_set", "test_bytes", "test_tuple", "test_deque",
                  "test_heapq", "test_sort", "test_string", "test_json", "test_itertools",
                  "test_collections")


@pytest.mark.slow  # real servers, ~26 s (make test runs it; make test-fast leaves it out)
def test_redis_suite_subset_under_the_allocator(tmp_path):
    lib = built(BUILD / "liblifetime_alloc.so")
    if suite_bench.cached_suite() is None:
        pytest.skip("no cached Redis 6.0.16 source build with its test suite (build it with "
                    "`scripts/fetch-redis-source.sh`, which keeps DEST/suite); the test never "
                    "downloads or builds it")
    if not (shutil.which("tclsh8.6") or shutil.which("tclsh8.5")):
        pytest.skip("Redis's runtest needs tclsh 8.5 or 8.6 (Debian: tcl)")
    stats = tmp_path / "stats"
    stats.mkdir()
    suite = suite_bench.prepare_suite(tmp_path, suite_bench.llama_wrapper(lib, stats, check=100000))
    r = suite_bench.run_suite(suite, REDIS_UNITS, clients=2, timeout=300)
    assert r["rc"] == 0 and r["passed_all"], r["tail"]
    assert r["ok"] > 300 and not r["err"] and not r["exception"], r["tail"]
    assert set(r["units_s"]) == set(REDIS_UNITS), r["units_s"]
    # every server the suite started ran on the allocator and wrote its stats at exit
    st = suite_bench.server_stats(stats)
    # (most units' servers: the suite's kill_server escalates to SIGKILL when a server's
    # shutdown is slow, as on a loaded machine, and a killed server writes no stats)
    assert st["servers"] >= len(REDIS_UNITS) // 2 and st["failed_allocs"] == 0, st
    assert st["allocs"] > 1_000_000 and st["checks"] >= 10, st


@pytest.mark.slow  # ~24 s of CPython's regression tests
def test_cpython_regression_subset_under_the_allocator(tmp_path):
    env = {**preload_env(check=200000, stats=tmp_path / "stats.%p.json"), "PYTHONMALLOC": "malloc"}
    proc = subprocess.run([sys.executable, "-m", "test", *PYTHON_MODULES], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert "Result: SUCCESS" in proc.stdout, proc.stdout[-4000:]
    # the test runner's own process (a few tests start child interpreters: their files too)
    s = max((json.loads(f.read_text()) for f in tmp_path.glob("stats.*.json")), key=lambda s: s["allocs"])
    assert s["allocs"] > 1_000_000 and s["checks"] >= 10 and s["failed_allocs"] == 0


def test_malloc_in_signal_handlers_is_served_nested(tmp_path):
    """SIGALRM every 200 us while two threads malloc: the handler mallocs, callocs, frees
    its own blocks and blocks the threads handed it.  glibc deadlocks on this driver (its
    arena lock; 3 of 3 runs hung on the 2-core box); the allocator serves the handler's
    requests that interrupt it from its lock-free reentry arena and defers its frees."""
    driver = str(built(BUILD / "tests" / "alloc_signal_malloc"))
    env = preload_env(check=997, stats=tmp_path / "s.json")
    proc = subprocess.run([driver, "2"], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr
    s = json.loads((tmp_path / "s.json").read_text())
    r = s["reentry"]
    assert r["allocs"] > 0 and r["deferred_frees"] > 0 and r["frees"] <= r["allocs"], r
    assert s["checks"] > 0 and s["failed_allocs"] == 0
