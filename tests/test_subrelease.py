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


# --- idle places: free object places inside spans ---------------------------------------

OS_PAGE = 4096


def _places_trace(tmp_path, spans: int, free_half_of: int, regrow: int = 0, end_s: int = 3):
    """`spans` spans of 1 KiB objects (8 to a span: places 0-3 on its first 4 KiB page,
    4-7 on its second), then at 1 s the second page's four objects freed in the first
    `free_half_of` spans (the rest stay live): each such span keeps a live object and holds
    a 4 KiB page of free places only.  At 2.5 s, `regrow` 1 KiB objects again.  A small
    object every 100 ms moves the clock."""
    recs = []
    for i in range(spans * 8):
        span, place = divmod(i, 8)
        recs.append((i * 100, S if span < free_half_of and place >= 4 else None, 1024, 1))
    t = S + 100 * MS
    while t < end_s * S:
        recs.append((t, t + 10 * MS, 32, 2))
        t += 100 * MS
    recs += [(2500 * MS + i * 100, None, 1024, 3) for i in range(regrow)]
    return simulator.write_trace(tmp_path / f"places{spans}_{free_half_of}_{regrow}.lttrace", recs,
                                 end_ns=end_s * S)


def test_idle_places_go_back(tmp_path):
    """Spans that keep a live object but hold a whole 4 KiB page of free places, and that
    no allocation took from for a horizon: those pages go back (and the invariant checker
    sees no live object on one)."""
    b = _base(simulator.simulate(_places_trace(tmp_path, 128, 128), [], check_invariants=True, check_every=1))
    c = b["counters"]
    assert c["idle_place_pages_released"] == 128
    assert c["idle_place_bytes_released"] == 128 * OS_PAGE
    assert c["idle_place_pages_refaulted"] == 0
    # Resident: every span's first page, and the small object's span.
    assert b["final_resident_bytes"] == 128 * OS_PAGE + PAGE


def test_places_handed_out_again_come_back(tmp_path):
    """A later grow of the class fills the free places again (fullest span first, and
    every span here is half full): each page given back is faulted in again, counted,
    and resident returns to the spans' whole size."""
    b = _base(simulator.simulate(_places_trace(tmp_path, 128, 128, regrow=512), [], check_invariants=True,
                                 check_every=1))
    c = b["counters"]
    assert c["idle_place_pages_released"] == 128
    assert c["idle_place_pages_refaulted"] == 128
    assert c["idle_place_bytes_released"] == 0
    assert b["final_resident_bytes"] == 128 * PAGE + PAGE


def test_a_dense_huge_page_keeps_its_few_idle_places(tmp_path):
    """A huge page full of spans (256 of them; the small object's span is on another)
    with an idle 4 KiB page in 32 of its spans stays whole: with those counted free it is
    still dense by the policy's rule (at most 1/16 of it free), and backing it whole costs
    little.  With 33, they go."""
    for idle, released in ((32, 0), (33, 33)):
        b = _base(simulator.simulate(_places_trace(tmp_path, 256, idle), [], check_invariants=True, check_every=1))
        assert b["counters"]["idle_place_pages_released"] == released, (idle, b["counters"])


def test_free_places_on_every_page_stay(tmp_path):
    """Free places scattered so that every 4 KiB page keeps a live object: nothing goes
    back (a page goes only when none of its places is live)."""
    recs = [(i * 100, S if i % 2 else None, 1024, 1) for i in range(128 * 8)]
    t = S + 100 * MS
    while t < 3 * S:
        recs.append((t, t + 10 * MS, 32, 2))
        t += 100 * MS
    path = simulator.write_trace(tmp_path / "scattered_places.lttrace", recs, end_ns=3 * S)
    b = _base(simulator.simulate(path, [], check_invariants=True, check_every=1))
    assert b["counters"]["idle_place_pages_released"] == 0
    assert b["final_resident_bytes"] == 128 * PAGE + PAGE


IDLE = r"""
import time
objs = [bytearray(1000) for _ in range(16384)]   # 1 KiB slots: 8 to an 8 KiB span
keep = objs[::8]                                 # one per span: its second 4 KiB page idle
del objs
t = time.time()
while time.time() - t < 1.5:                     # small objects move the policy's clock
    x = [bytearray(64) for _ in range(50)]
    time.sleep(0.01)
"""


@pytest.mark.parametrize("on", ["1", "0"])
def test_allocator_gives_back_idle_places(on, tmp_path):
    """The real allocator: after the fall, spans that keep one live object give back their
    pages of free places within the horizon, unless LIFETIME_ALLOC_IDLE_PLACES=0."""
    built(LIB)
    stats = tmp_path / "stats.json"
    env = {**os.environ, "PYTHONMALLOC": "malloc", "LIFETIME_ALLOC_IDLE_PLACES": on}
    out = subprocess.run([str(LIFETIME), "run", "--allocator", "llama", "--policy", "segregated",
                          "--predictor", "constant:0", "--stats", str(stats), "--", sys.executable, "-c", IDLE],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    c = json.loads(stats.read_text())["counters"]
    if on == "1":
        assert c["idle_place_pages_released"] >= 1000, c  # ~2048 spans, one idle page each
    else:
        assert c["idle_place_pages_released"] == 0
