"""Real-server families (benchmarks/servers): reserved versions are refused, the load
plans are deterministic and version independent, and (when the cached Redis 6.0.16
source build is present) a short real Redis run under the sampler gives a complete
profile. Nothing here downloads or builds a server: the heavy runs are
benchmarks/servers/run_profiles.py."""

from __future__ import annotations

import glob
import os

import pytest

from benchmarks.servers import common, postgres, redis
from profiler import launch


@pytest.mark.parametrize("version", ["7.0.0", "7.0", "7.2.4", "8.0.1", "10.0"])
def test_redis_reserved_versions_are_refused(version, tmp_path):
    with pytest.raises(common.ReservedVersionError, match="reserved"):
        redis.check_version(version)
    with pytest.raises(common.ReservedVersionError):
        redis.ensure(version)
    with pytest.raises(common.ReservedVersionError):
        redis.profile(version, str(tmp_path), seconds=1)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("version", ["17", "17.0", "17.2", "18.1"])
def test_postgres_reserved_versions_are_refused(version, tmp_path):
    with pytest.raises(common.ReservedVersionError, match="reserved"):
        postgres.check_version(version)
    with pytest.raises(common.ReservedVersionError):
        postgres.profile(version, str(tmp_path), seconds=1)


def test_allowed_and_unknown_versions():
    for v in ("5.0.6", "6.0.16", "6.2.7", "6.2.9", "6.2.14"):
        assert redis.check_version(v) == v
    for v in ("15.5", "16.2"):
        assert postgres.check_version(v) == v
    with pytest.raises(ValueError, match="supported"):
        redis.check_version("6.2.1")
    with pytest.raises(ValueError, match="not a version"):
        postgres.check_version("latest")


# Commands Redis 5.0.6 has (the oldest version driven with the same plan).
REDIS_5_COMMANDS = {"SET", "GETSET", "APPEND", "HSET", "ZADD", "MSET", "EVAL"}
REDIS_5_TESTS = {"set", "get", "incr", "lpush", "rpush", "lpop", "rpop", "sadd", "hset",
                 "spop", "zadd", "zpopmin", "lrange_100", "mset", "ping"}


def test_redis_plan_is_deterministic_and_uses_redis5_commands():
    a, b = redis.load_plan(1, 60), redis.load_plan(1, 60)
    assert [(p.args, s) for p, s in a] == [(p.args, s) for p, s in b]
    assert [p.args for p, _ in a] != [p.args for p, _ in redis.load_plan(2, 60)]
    assert abs(sum(s for _, s in a) - 60) < 1e-6
    for phase, _ in a:
        args = list(phase.args)
        if "-t" in args:
            assert set(args[args.index("-t") + 1].split(",")) <= REDIS_5_TESTS
        else:
            command = next(x for x in args if not x.startswith("-") and not x.isdigit())
            assert command in REDIS_5_COMMANDS, phase
    names = {p.name for p, _ in a}
    assert {"set-px50", "set-px500", "set-ex5", "set-forever", "reconnect",
            "many-clients"} <= names


def test_postgres_plan_is_deterministic():
    a, b = postgres.load_plan(1, 60), postgres.load_plan(1, 60)
    assert a["scale"] == b["scale"]
    assert [(p.args, s) for p, s in a["phases"]] == [(p.args, s) for p, s in b["phases"]]
    assert sum(s for _, s in a["phases"]) <= 60
    for phase, _ in a["phases"]:
        for arg in phase.args:
            if arg.endswith(".sql") or ".sql@" in arg:
                assert arg.split("@")[0] in postgres.SCRIPTS


def _needs_redis_build():
    if not os.path.exists(launch.DEFAULT_LIBRARY) and not os.environ.get(launch.LIBRARY_ENV):
        pytest.skip("the sampler is not built (make native)")
    build = redis.cached("6.0.16")
    if build is None or build.benchmark is None:
        pytest.skip("no cached Redis 6.0.16 source build (build it with "
                    "`scripts/fetch-redis-source.sh` or `python3 -m benchmarks.servers.redis "
                    "fetch 6.0.16`); the test never downloads or builds it")
    return build


@pytest.mark.slow  # a real server
def test_real_redis_profile(tmp_path):
    """~5 s: redis-server 6.0.16 (glibc malloc, -g) under the sampler, one short plan,
    SHUTDOWN NOSAVE: one complete profile with freed and censored samples."""
    _needs_redis_build()
    from profile_format.container import read_profile

    record = redis.profile("6.0.16", str(tmp_path), seconds=4, interval=64 * 1024, seed=7)
    assert record["exit_code"] == 0
    assert record["failed_phases"] == []
    files = glob.glob(str(tmp_path / "redis-server.*.ltprof"))
    assert len(files) == 1, files
    profile = read_profile(files[0])
    assert profile.trailer is not None, "no trailer: the server did not exit normally"
    assert profile.header.version_label == "redis-6.0.16"
    censored = sum(s.censored for s in profile.samples)
    assert len(profile.samples) > 100
    assert 0 < censored < len(profile.samples)
    assert len(profile.stacks) > 20


def test_dense_regions_counts_what_a_huge_page_would_not_add():
    """machine.dense_regions_kib: 2 MiB regions with at most 8 small pages not resident;
    a region fully written counts, one written at 1 of 16 pages does not."""
    import mmap

    from benchmarks.servers import machine

    me = os.getpid()
    m = mmap.mmap(-1, 8 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        before = machine.dense_regions_kib(me)
        for off in range(0, 8 << 20, 4096):  # the whole mapping: at least 3 aligned regions
            m[off] = 1
        full = machine.dense_regions_kib(me)
        m.madvise(mmap.MADV_DONTNEED)
        for off in range(0, 8 << 20, 16 * 4096):  # 32 of every 512 pages
            m[off] = 1
        sparse = machine.dense_regions_kib(me)
    finally:
        m.close()
    assert full - before >= 3 * 2048
    assert sparse <= before + 2048  # (another mapping of the test process may change a little)
