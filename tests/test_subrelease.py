"""Subrelease (issue 32 item 2): the size-class heaps give the free pages of sparse huge
pages back to the OS once recent demand says they will not be needed, and the simulator
reports resident memory beside huge-page memory.  Hand-built traces through the real
engine; the allocator's side in a real process under `lifetime run`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import simulator
from tests.test_allocator import LIB, ROOT, built

LIFETIME = ROOT / ".venv" / "bin" / "lifetime"

MS = 1_000_000
S = 1000 * MS
HP = 2 * 1024 * 1024
PAGE = 8192

pytestmark = pytest.mark.usefixtures("simulator_engine")


def _base(r: dict) -> dict:
    return next(a for a in r["allocators"] if a["name"] == "baseline")


def _scattered_trace(tmp_path, end_s: int):
    """A grow to 16 MiB of 64 KiB objects (8 pages each: one span per object), then 7 of
    every 8 freed at 1 s: every huge page keeps one span in eight (sparse), none empties.
    A small object allocated and freed every 100 ms keeps the clock moving."""
    recs = []
    n = 256
    for i in range(n):
        recs.append((i * 1000, None if i % 8 == 0 else S, 64 * 1024, 1))
    t = S + 100 * MS
    while t < end_s * S:
        recs.append((t, t + 10 * MS, 32, 2))
        t += 100 * MS
    return simulator.write_trace(tmp_path / "scattered.lttrace", recs, end_ns=end_s * S), n


def test_sparse_pages_go_back_after_demand_falls(tmp_path):
    path, n = _scattered_trace(tmp_path, 20)
    r = simulator.simulate(path, [], check_invariants=True, check_every=1)
    b = _base(r)
    hps = n * 64 * 1024 // HP
    # Placement is unchanged: every huge page stays (one live span in each of 8 pages).
    assert b["final_huge_pages"] == hps
    # After demand has been low for the remembered windows (5 x 1 s), the free pages of
    # those huge pages are returned: resident is the live spans (1/8) and the small span.
    live_pages = (n // 8) * 8 + 1
    assert b["final_resident_bytes"] == live_pages * PAGE
    # (every free page at least once: the small object's pages are among them, taken
    # again and given back again as demand decays)
    freed_once = hps * 256 - (n // 8) * 8
    assert freed_once <= b["counters"]["pages_subreleased"] <= freed_once + 8
    # Steady state (10 s - 20 s): all of it already released.
    assert b["steady_state_resident_bytes"] == pytest.approx(live_pages * PAGE)
    assert b["steady_state_bytes"] == pytest.approx(hps * HP)


def test_recent_demand_decays(tmp_path):
    """The same fall under a fixed horizon of 5 windows of 1 s ("1000:5:5"), the trace
    ending at it, 4 s and 5 s after it: a window's peak counts in full for the first half
    of the horizon (2 windows, besides the current one), then decays by thirds, so pages
    go back a share at a time: none at once, some after 4 s, more after 5 s, not yet all."""
    got = []
    for end in (1, 5, 6):
        path, n = _scattered_trace(tmp_path, end)
        b = _base(simulator.simulate(path, [], check_invariants=True, check_every=1, subrelease="1000:5:5"))
        got.append(b["final_resident_bytes"])
        hps = b["final_huge_pages"]
    live = ((n // 8) * 8 + 1) * PAGE
    assert got[0] == hps * HP  # the fall has just happened: all kept
    assert hps * HP > got[1] > got[2] > live, got


def test_a_fall_that_stays_goes_back_at_once(tmp_path):
    """Under the default rule the horizon starts at its shortest (2 windows of 100 ms): a
    fall that demand does not come back from is given back within 0.3 s, and nothing
    given back is touched again, so the horizon stays short."""
    path, n = _scattered_trace(tmp_path, 2)
    r = simulator.simulate(path, [], check_invariants=True, check_every=1, json_out=tmp_path / "r.json")
    b = _base(r)
    live = ((n // 8) * 8 + 1) * PAGE
    assert b["final_resident_bytes"] == live
    assert b["counters"]["subrelease_horizon_windows"] == 2
    assert b["counters"]["subrelease_horizon_changes"] == 0


def _cycles_trace(tmp_path, period_ms: int, cycles: int):
    """Demand that swings: every period, 16 MiB of 64 KiB objects (one span each), freed
    50 ms later, but for one in 8 of the first period's, which stay: the huge pages stay,
    sparse, and every period fills them again.  A small object every 20 ms keeps the
    clock moving."""
    recs = [(t * 20 * MS + 7, t * 20 * MS + 10 * MS, 32, 2) for t in range(cycles * period_ms // 20)]
    t = 0
    for c in range(cycles):
        for i in range(256):
            death = None if c == 0 and i % 8 == 0 else t + 50 * MS
            recs.append((t + i * 1000, death, 64 * 1024, 1))
        t += period_ms * MS
    return simulator.write_trace(tmp_path / f"cycles{period_ms}.lttrace", recs, end_ns=t)


def test_demand_that_comes_back_lengthens_the_horizon(tmp_path):
    """Demand that comes back every 0.5 s: a short fixed horizon (2 windows) gives the
    pages back each time and faults them in again; the adaptive rule sees the faults
    (1% of the time or more), doubles its horizon and gives back less of what returns."""
    path = _cycles_trace(tmp_path, 500, 20)
    short = _base(simulator.simulate(path, [], check_invariants=True, check_every=1, subrelease="100:2:2"))
    adaptive = _base(simulator.simulate(path, [], check_invariants=True, check_every=1))
    assert short["counters"]["subreleased_pages_refaulted"] > 10 * 1792, short["counters"]
    assert adaptive["counters"]["subrelease_horizon_changes"] >= 1
    assert adaptive["counters"]["subreleased_pages_refaulted"] < short["counters"]["subreleased_pages_refaulted"] / 2


def test_subrelease_rule_is_checked(tmp_path):
    path, _ = _scattered_trace(tmp_path, 2)
    for bad in ("100:2", "100:0:0", "100:2:3", "100:65:2", "x:2:2"):
        with pytest.raises(simulator.SimulationError, match="--subrelease"):
            simulator.simulate(path, [], subrelease=bad)


def test_released_pages_are_reused(tmp_path):
    """A second grow after the release takes the released pages again (the filler's
    choice does not change): resident returns to the huge pages' size, and the invariant
    checker (released pages never in use) holds throughout."""
    recs = [(i * 1000, None if i % 8 == 0 else S, 64 * 1024, 1) for i in range(256)]
    t = S + 100 * MS
    while t < 12 * S:
        recs.append((t, t + 10 * MS, 32, 2))
        t += 100 * MS
    recs += [(12 * S + i * 1000, None, 64 * 1024, 3) for i in range(224)]
    path = simulator.write_trace(tmp_path / "regrow.lttrace", recs, end_ns=13 * S)
    b = _base(simulator.simulate(path, [], check_invariants=True, check_every=1))
    assert b["counters"]["pages_subreleased"] > 0
    assert b["final_huge_pages"] == 256 * 64 * 1024 // HP  # the regrow fits the old pages
    assert b["final_resident_bytes"] >= (256 * 8) * PAGE


CHURN = r"""
import sys, time
keep = []
big = [bytearray(3000) for _ in range(40000)]   # ~120 MB, 3 KiB objects
keep = big[::16]                                # one in 16 survives: every page sparse
del big
t = time.time()
while time.time() - t < 8:
    x = [bytearray(64) for _ in range(100)]
    time.sleep(0.01)
for line in open('/proc/self/smaps_rollup'):
    if line.startswith('Rss:'):
        print(int(line.split()[1]) * 1024)
"""


@pytest.mark.slow
def test_allocator_returns_sparse_pages(tmp_path):
    """The real allocator under `segregated`: after a grow and a scattered fall, RSS at
    the end is far below the same run with subrelease off, and the stats say why."""
    built(LIB)
    rss = {}
    for sr in ("0", "1000"):
        stats = tmp_path / f"stats{sr}.json"
        env = {**os.environ, "PYTHONMALLOC": "malloc", "LIFETIME_ALLOC_SUBRELEASE_MS": sr}
        out = subprocess.run([str(LIFETIME), "run", "--allocator", "llama",
                              "--policy", "segregated", "--predictor", "constant:0",
                              "--stats", str(stats), "--", sys.executable, "-c", CHURN],
                             env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        rss[sr] = int(out.stdout.split()[-1])
        st = json.loads(stats.read_text())
        if sr == "0":
            assert st["total_subreleased_bytes"] == 0
        else:
            assert st["total_subreleased_bytes"] > 50 * 2**20
    assert rss["1000"] < rss["0"] - 50 * 2**20, rss
