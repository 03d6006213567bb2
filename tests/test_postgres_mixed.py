"""The mixed PostgreSQL workload (benchmarks/servers/postgres_mixed.py): its plan is a pure
function of the seed, every fate occurs, no statement uses a session object after the
plan dropped it; and, against a real PostgreSQL 15.5 (the pgserver wheel, under the
sampler, a few seconds), every statement gets a reply, none is an error, and every
session is its own backend (one profile each)."""

from __future__ import annotations

import glob
import os
import re

import pytest

from benchmarks.servers import postgres, postgres_mixed
from benchmarks.servers.common import PrerequisiteMissing

SHORT = (("warm", 0.4), ("grow", 1.2), ("peak", 0.4), ("shrink", 0.8), ("steady", 1.2))


def test_plan_is_a_function_of_the_seed():
    a = postgres_mixed.Plan(3, 1.0, SHORT).summary()
    b = postgres_mixed.Plan(3, 1.0, SHORT).summary()
    c = postgres_mixed.Plan(4, 1.0, SHORT).summary()
    assert a == b
    assert a["sha256"] != c["sha256"]
    assert a["ticks"] == 80 and list(a["phase_starts"]) == ["warm", "grow", "peak", "shrink",
                                                             "steady"]


def test_every_fate_occurs_and_nothing_is_used_after_its_end():
    plan = postgres_mixed.Plan(1)
    n = plan.counts
    for kind, fates in (("prep", ("keep", "shrink", "later")),
                        ("temp", ("short", "later", "shrink", "keep")),
                        ("cursor", ("later", "shrink", "keep")), ("func", ("keep", "later"))):
        for f in fates:
            assert n[f"{kind}_fate_{f}"] > 0, (kind, f)
    assert n["short_sessions"] > 50 and n["ddl_end"] > 0 and n["bulk_end"] > 0
    # replay each session: an object is used only between its creation and its end
    for conn in range(postgres_mixed.LONG_SESSIONS):
        alive: set[str] = set()
        for tick in range(plan.n_ticks):
            for sql in plan.long.get(tick, {}).get(conn, []):
                if conn == postgres_mixed.LONG_SESSIONS - 1:
                    assert tick < plan.mid_close_tick
                made = re.match(r"(?:PREPARE|CREATE TEMP TABLE|CREATE FUNCTION) (\w+?)[ (]", sql) \
                    or re.search(r"DECLARE (\w+) CURSOR", sql)
                ended = re.match(r"(?:DEALLOCATE|DROP TABLE|CLOSE|DROP FUNCTION) (\w+)", sql)
                if made:
                    assert made.group(1) not in alive
                    alive.add(made.group(1))
                elif ended:
                    alive.remove(ended.group(1))
                else:
                    for name in re.findall(r"\b((?:tt|fn|p|cur)\d+_\d+)\b", sql):
                        assert name in alive, (tick, sql)


def test_protocol_parser_counts_ready_and_errors_split_anywhere():
    def msg(kind: bytes, body: bytes) -> bytes:
        return kind + (len(body) + 4).to_bytes(4, "big") + body
    stream = (msg(b"R", b"\0\0\0\0") + msg(b"S", b"a\0b\0") + msg(b"Z", b"I")
              + msg(b"T", b"\0\0") + msg(b"C", b"SELECT 1\0") + msg(b"Z", b"I")
              + msg(b"E", b"SERROR\0C42P01\0Mno such table\0\0") + msg(b"Z", b"I"))
    for cut in range(len(stream) + 1):
        c = postgres_mixed.Conn.__new__(postgres_mixed.Conn)
        c.name, c.inbuf, c.ready, c.errors, c.first_error = "t", bytearray(), 0, 0, ""
        c.inbuf += stream[:cut]
        c._parse()
        c.inbuf += stream[cut:]
        c._parse()
        assert (c.ready, c.errors, bytes(c.inbuf)) == (3, 1, b""), cut
        assert "no such table" in c.first_error


@pytest.mark.slow  # a real server
def test_real_server_runs_the_plan(tmp_path):
    """~7 s: postgres 15.5 under the sampler answers every planned statement."""
    from profiler import launch

    if not os.path.exists(launch.DEFAULT_LIBRARY) and not os.environ.get(launch.LIBRARY_ENV):
        pytest.skip("the sampler is not built (make native)")
    try:
        postgres.ensure("15.5")  # the pgserver wheel from PyPI, cached
    except PrerequisiteMissing as e:  # not cached, and no network / PyPI / pip to fetch it
        pytest.skip(f"postgres 15.5 could not be fetched: {e}")
    rec = postgres_mixed.run("15.5", str(tmp_path), seed=5, interval=65536, phases=SHORT)
    plan = postgres_mixed.Plan(5, 1.0, SHORT)
    assert rec["plan"]["sha256"] == plan.sha256()
    d = rec["driver"]
    assert d["errors"] == 0, d["first_error"]
    assert d["replies"] == d["sent"] == plan.statements()
    assert d["short_sessions"] == len(plan.short) > 0
    assert d["pacing"]["ticks"] == plan.n_ticks
    assert rec["pgbench"]["exit_code"] == 0 and rec["pgbench"]["transactions"] > 0
    assert rec["exit_code"] == 0
    # one profile per process: every session (long, short, pgbench's) had its own backend
    files = glob.glob(str(tmp_path / "postgres.*.ltprof"))
    assert len(files) == rec["files"]
    assert len(files) >= len(plan.short) + postgres_mixed.LONG_SESSIONS + 2


def test_server_memory_is_the_sum_of_the_process_heaps():
    """benchmarks/simulate_postgres.py: each process's series counts from its first
    allocation to its end (0 outside), summed on one grid; steady state = the mean over
    the second half of the server's run."""
    from benchmarks import simulate_postgres as sp

    def sim(start, end, t, base, live):
        return {"trace": {"start_ns": start, "end_ns": end},
                "series": {"t_ns": t, "live_bytes": live, "huge_page_bytes": {"baseline": base}}}
    a = sim(0, 40, [0, 10, 20, 30, 40], [2, 2, 4, 4, 4], [1, 1, 3, 3, 3])   # whole run
    b = sim(15, 25, [15, 25], [6, 6], [5, 5])                              # a short session
    s = sp._sum_series([a, b], ["baseline"], 10)
    assert s["t_ns"].tolist() == [0, 10, 20, 30, 40]
    assert s["bytes"]["baseline"].tolist() == [2, 2, 10, 4, 4]   # b alive at 20 only
    assert s["bytes"]["live"].tolist() == [1, 1, 8, 3, 3]
    fig = sp._server_figures(s)
    assert fig["baseline"]["peak_bytes"] == 10
    assert fig["baseline"]["steady_state_bytes"] == (10 + 4 + 4) / 3   # t >= 20
    assert [c["baseline"] for c in s["contrib"]] == [4, 2]
