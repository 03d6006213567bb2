"""The engine works out its events (frees, then the allocation after them, and the slot each
allocation gets) a few events ahead of the simulation, to fetch the frees' slot records
into the cache (engine.cc): the same events in the same order as one loop, whatever the
trace.  Traces where the lookahead window holds objects freed at their allocation time,
many frees at one time and slots reused within the window; an error the lookahead meets
is raised after the events before it, as before."""

from __future__ import annotations

import random
import struct

import pytest

import simulator
from simulator import trace as tr

pytestmark = pytest.mark.usefixtures("simulator_engine")


def bursty_trace(path, n=20_000, seed=3):
    """Bursts of objects at one time, a third freed at their allocation time, others at a
    handful of shared times (many equal-time frees), sizes small to several huge pages."""
    rng = random.Random(seed)
    recs, t = [], 0
    for i in range(n):
        if rng.random() < 0.3:
            t += rng.randrange(1, 5000)
        u = rng.random()
        size = (rng.randrange(1, 8192) if u < 0.85 else rng.randrange(8192, 600_000) if u < 0.99
                else rng.randrange(2 << 20, 5 << 20))
        v = rng.random()
        free = t if v < 0.33 else (t - t % 20_000 + 20_000 * rng.randrange(1, 4) if v < 0.9 else None)
        recs.append((t, free, size, rng.randrange(40), rng.randrange(4)))
    return simulator.write_trace(path, recs, sort=False)


def test_lookahead_zero_lifetimes_and_equal_times_keep_invariants(tmp_path):
    path = bursty_trace(tmp_path / "burst.lttrace")
    preds = ["oracle", "c=constant:0"]
    checked = simulator.simulate(path, preds, check_invariants=True, check_every=256, timeout=600)
    plain = simulator.simulate(path, preds, timeout=600)
    assert checked["events"]["allocs"] == 20_000
    assert checked["events"]["allocs"] == checked["events"]["frees"] + checked["events"]["never_freed"]
    checked["settings"].pop("check_invariants")
    checked["settings"].pop("check_every", None)
    plain["settings"].pop("check_invariants")
    plain["settings"].pop("check_every", None)
    assert checked == plain


@pytest.mark.parametrize("bad_at", [5, 100, 19_999])
def test_lookahead_error_comes_after_the_events_before_it(tmp_path, bad_at):
    """A bad record anywhere (inside the lookahead window of the first events, or the
    last record) is the one-line error naming that record, exit status 2."""
    path = bursty_trace(tmp_path / "burst.lttrace")
    data = bytearray(open(path, "rb").read())
    off = tr.check_trace(path).header_bytes + tr.RECORD.size * bad_at
    struct.pack_into("<I", data, off + 36, 24)  # alignment not a power of two
    bad = tmp_path / "bad.lttrace"
    bad.write_bytes(bytes(data))
    with pytest.raises(simulator.SimulationError) as e:
        simulator.simulate(bad, ["oracle"], check_invariants=True, check_every=64, timeout=600)
    assert e.value.returncode == 2
    assert f"record {bad_at} " in str(e.value), str(e.value)
