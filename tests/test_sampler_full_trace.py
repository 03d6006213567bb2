"""Full-trace mode of the sampler (issue 13, item 1): LIFETIME_FULL_TRACE=1 /
`lifetime profile --full-trace` records every allocation and free, with its stack.

tests/native/full_trace.c makes a known sequence between two marker allocations and
prints it; the profile must hold exactly that sequence (sizes, entry points, free
order, the never-freed objects censored, every stack).  Capacity: more objects live
at once than the sampled mode's table holds lose nothing; a table made too small
drops, and counts the drops (trailer, `lifetime inspect`).  The host-safety cases of
tests/test_host_safety.py (signal handler malloc, fork/exec, exec, zero samples, no
thread added) are run again in full-trace mode; quick_exit, failed exec and the
SIGALRM harness are parametrized over both modes there.
"""

from __future__ import annotations

import array
import os
import subprocess
from collections import Counter

import pytest

from lifetime import cli
from profiler import launch
from profile_format import ProfileReader
from tests.sampler_support import (PRODUCERS, SANITIZERS, harness_binary,
                                   only_profile, pb, plain_env, profile_files, read_all,
                                   run_harness, run_sampled)

FULL = {"LIFETIME_FULL_TRACE": "1"}
MARK_BEGIN, MARK_END = 987651, 987652
DEFAULT_CAPACITY = 1 << 22
SAMPLED_TABLE = 1 << 18


def _complete(prof, full=True):
    """A complete, consistent full trace: a trailer, every sample once, its stacks,
    weight 1, and every allocation the sampler counted is a sample."""
    assert prof.header is not None and prof.trailer is not None
    assert prof.header.full_trace is full
    if full:
        assert prof.header.sampling_interval_bytes == 1
        assert all(s.weight == 1.0 for s in prof.samples)
        assert prof.trailer.dropped_samples == 0 and prof.trailer.dropped_stacks == 0
        assert prof.trailer.total_allocations == prof.trailer.samples
    assert prof.trailer.samples == len(prof.samples)
    assert prof.trailer.censored_samples == sum(s.censored for s in prof.samples)
    keys = Counter((s.address, s.alloc_monotonic_ns) for s in prof.samples)
    assert not keys or max(keys.values()) == 1, "duplicated samples"
    assert {s.stack_id for s in prof.samples} <= prof.stacks.keys()


def _sizes(prof, lo, hi):
    return [s for s in prof.samples if lo <= s.size < hi]


def _window(samples):
    """The samples allocated between the two markers, in allocation order (the
    allocated-bytes clock is folded at every allocation of a full trace: strictly
    increasing on one thread)."""
    ordered = sorted(samples, key=lambda s: s.alloc_allocated_bytes)
    clocks = [s.alloc_allocated_bytes for s in ordered]
    assert len(set(clocks)) == len(clocks)
    begin = next(i for i, s in enumerate(ordered) if s.size == MARK_BEGIN)
    end = next(i for i, s in enumerate(ordered) if s.size == MARK_END)
    return ordered[begin + 1:end]


# ---------------------------------------------------------------- exactness

def test_a_known_sequence_is_recorded_exactly(bins, tmp_path):
    n = 20000
    proc = run_sampled([bins["full_trace"], "seq", str(n)], tmp_path, extra_env=FULL)
    allocs, frees, live = [], [], set()
    for line in proc.stdout.splitlines():
        kind, *rest = line.split()
        if kind == "a":
            allocs.append((int(rest[0]), int(rest[1])))
        elif kind == "f":
            frees.append(int(rest[0]))
        else:
            live.add(int(rest[0]))
    assert len(allocs) == n and len(frees) + len(live) == n
    prof = only_profile(tmp_path)
    _complete(prof)
    assert prof.header.live_capacity == DEFAULT_CAPACITY
    seq = _window(prof.samples)
    # exactly the N allocations, in order, with their sizes and entry points
    assert [(s.size, s.alloc_function) for s in seq] == allocs
    aligns = {pb.POSIX_MEMALIGN: 64, pb.ALIGNED_ALLOC: 32}
    assert all(s.alignment == aligns.get(s.alloc_function, 0) for s in seq)
    assert all(s.address % max(s.alignment, 16) == 0 for s in seq)
    # the frees in the program's order; the others censored
    index = {id(s): i for i, s in enumerate(seq)}
    freed = sorted((s for s in seq if not s.censored), key=lambda s: s.free_monotonic_ns)
    assert [index[id(s)] for s in freed] == frees
    assert all(s.free_function == pb.FREE and s.free_monotonic_ns > s.alloc_monotonic_ns
               for s in freed)
    assert {index[id(s)] for s in seq if s.censored} == live
    assert all(s.observed_age_ns > 0 for s in seq if s.censored)
    # every allocation has its stack, leaf frame in the program (one site per entry point)
    exe = [m for m in prof.mappings if m.path == bins["full_trace"]]
    assert exe
    for s in seq:
        addresses = prof.stacks[s.stack_id].addresses
        assert len(addresses) >= 2
        assert any(m.start <= addresses[0] < m.limit for m in exe)
    sites = {fn: {prof.stacks[s.stack_id].addresses[0] for s in seq if s.alloc_function == fn}
             for fn in set(fn for _, fn in allocs)}
    assert all(len(v) == 1 for v in sites.values()) and len(set.union(*sites.values())) == 5


def test_the_header_says_sampled_or_full(bins, tmp_path):
    run_sampled([bins["full_trace"], "live", "100"], tmp_path / "s", interval=4096)
    sampled = only_profile(tmp_path / "s")
    assert not sampled.header.full_trace and sampled.header.sampling_interval_bytes == 4096
    assert sampled.header.live_capacity == SAMPLED_TABLE
    run_sampled([bins["full_trace"], "live", "100"], tmp_path / "f",
                extra_env={**FULL, "LIFETIME_FULL_TRACE_CAPACITY": "5000"})
    full = only_profile(tmp_path / "f")
    _complete(full)
    assert full.header.live_capacity == 5000 and len(_window(full.samples)) == 100


# ---------------------------------------------------------------- capacity

def test_more_live_objects_than_the_sampled_table_lose_nothing(bins, tmp_path):
    m = 1_200_000
    assert m > SAMPLED_TABLE
    run_sampled([bins["full_trace"], "live", str(m)], tmp_path, extra_env=FULL, timeout=300)
    [path] = profile_files(tmp_path)
    reader = ProfileReader(path)
    alloc = array.array("Q")
    free = array.array("Q")
    marks = {}
    for s in reader.samples():  # streamed: 1.2M samples never held as messages
        if s.size == 16 and not s.censored:
            alloc.append(s.alloc_allocated_bytes)
            free.append(s.free_monotonic_ns)
        elif s.size in (MARK_BEGIN, MARK_END):
            marks[s.size] = s.alloc_allocated_bytes
    t = reader.trailer
    assert not reader.problems and t.dropped_samples == 0 and t.dropped_stacks == 0
    assert t.total_allocations == t.samples == reader.kept
    inside = sorted((a, f) for a, f in zip(alloc, free) if marks[MARK_BEGIN] < a < marks[MARK_END])
    assert len(inside) == m
    # freed in allocation order
    assert all(inside[i][1] < inside[i + 1][1] for i in range(m - 1))


def test_drops_from_a_tiny_table_are_counted_and_reported(bins, tmp_path, capsys):
    out = tmp_path / "out"
    code = cli.main(["profile", "--full-trace", "--full-trace-capacity", "1000", "--out",
                     str(out), "--", bins["full_trace"], "live", "5000"])
    assert code == 0
    prof = only_profile(out)
    t = prof.trailer
    assert prof.header.full_trace and prof.header.live_capacity == 1000
    # every allocation is either a sample or a counted drop
    assert t.samples + t.dropped_samples == t.total_allocations
    assert 4000 <= t.dropped_samples <= 5010 and t.samples == len(prof.samples)
    assert len(prof.samples) <= 1000 + 10
    capsys.readouterr()
    assert cli.main(["inspect", "--samples", "0", profile_files(out)[0]]) == 0
    text = capsys.readouterr().out
    assert f"dropped:         {t.dropped_samples} samples" in text
    assert "recording:       full trace (every allocation; live table of 1000)" in text


@pytest.mark.parametrize("program, chunk", [(["seq", "20000"], 1), (["seq", "20000"], 5),
                                            (["live", "100"], 1)],
                         ids=["first-chunk", "fifth-chunk", "only-chunk"])
def test_an_overflowed_chunk_is_counted_as_dropped(bins, tmp_path, program, chunk):
    """A chunk that overflows its buffer is never written (flush.c); its samples are
    counted as dropped, the stacks and mappings it named are named again, a header it
    held is written with the next chunk, a trailer it held is written again ("live 100"
    with the default buffer makes one chunk).  The overflow cannot happen with
    flush.c's size bounds: LIFETIME_TEST_OVERFLOW_CHUNK=N makes the Nth chunk overflow."""
    env = {**FULL, "LIFETIME_TEST_OVERFLOW_CHUNK": str(chunk)}
    if program[0] == "seq":
        env["LIFETIME_FULL_TRACE_BUFFER"] = "64"  # a flush (a chunk) every 64 records
    proc = run_sampled([bins["full_trace"], *program], tmp_path, extra_env=env)
    assert proc.stderr.count("internal error: chunk overflow in ") == 1, proc.stderr
    [path] = profile_files(tmp_path)
    reader = ProfileReader(path)
    samples = list(reader.samples())
    assert not reader.problems, reader.problems
    t = reader.trailer
    assert reader.header is not None and reader.header.full_trace and t is not None
    # sampled + dropped = taken: every allocation is a written sample or a counted drop
    assert t.dropped_samples > 0 and t.dropped_stacks == 0
    assert t.samples == len(samples) == reader.kept
    assert t.samples + t.dropped_samples == t.total_allocations
    assert t.censored_samples == sum(s.censored for s in samples)
    assert {s.stack_id for s in samples} <= reader.stacks.keys()
    assert [m for m in reader.mappings if m.path == bins["full_trace"]]  # written again
    if program[0] == "seq":  # one flush of the 64-record buffer lost, the rest written
        assert t.dropped_samples <= 64 + 1 and len(samples) > int(program[1]) - 64
    else:  # everything was in the one chunk
        assert t.samples == 0 and t.dropped_samples == t.total_allocations > 100


def test_an_overflowed_chunk_around_a_failed_exec_is_counted_once(bins, tmp_path):
    """Two failed execs, each ending the file tentatively (truncated when the exec
    fails), then more allocations: whichever of the first chunks overflows, the file is
    complete and counts what it lost; a dropped tentative end (its censored samples
    still live, written at the real end) is no loss."""
    dropped = []
    for chunk in (1, 2, 3, 4):
        out = tmp_path / str(chunk)
        proc = run_sampled([bins["host_safety"], "execfail", "-"], out,
                           extra_env={**FULL, "LIFETIME_TEST_OVERFLOW_CHUNK": str(chunk)})
        assert proc.stdout == "execfail continued errno 2\n"
        assert proc.stderr.count("internal error: chunk overflow in ") == 1, proc.stderr
        [path] = profile_files(out)
        reader = ProfileReader(path)
        samples = list(reader.samples())
        t = reader.trailer
        assert not reader.problems and t is not None, (chunk, reader.problems)
        assert t.samples == len(samples) and t.censored_samples == sum(s.censored
                                                                       for s in samples)
        assert t.samples + t.dropped_samples == t.total_allocations, chunk
        assert {s.stack_id for s in samples} <= reader.stacks.keys()
        dropped.append(t.dropped_samples)
    assert 0 in dropped and max(dropped) > 0, dropped


def test_threads_with_back_pressure_lose_nothing(bins, tmp_path):
    """4 threads free each other's objects; a 16-record done buffer makes threads
    wait for the flush lock and flush themselves all the time."""
    per = 50000
    proc = run_sampled([bins["full_trace"], "threads", str(per)], tmp_path,
                       extra_env={**FULL, "LIFETIME_FULL_TRACE_BUFFER": "16"}, timeout=300)
    assert proc.stdout == "threads\n"
    prof = only_profile(tmp_path)
    _complete(prof)
    handed = [s for s in prof.samples if 32 <= s.size < 232 and s.free_thread != s.alloc_thread]
    assert len(handed) >= 4 * per and not any(s.censored for s in handed)
    assert prof.chunks > 100


def test_bad_settings_disable_sampling_with_one_line(bins, tmp_path):
    for env, what in (({"LIFETIME_FULL_TRACE": "2"}, "LIFETIME_FULL_TRACE='2'"),
                      ({**FULL, "LIFETIME_FULL_TRACE_CAPACITY": "0"},
                       "LIFETIME_FULL_TRACE_CAPACITY='0'"),
                      ({**FULL, "LIFETIME_FULL_TRACE_BUFFER": "x"},
                       "LIFETIME_FULL_TRACE_BUFFER='x'")):
        out = tmp_path / str(len(os.listdir(tmp_path)))
        proc = run_sampled([bins["full_trace"], "live", "10"], out, extra_env=env)
        assert proc.stdout == "live 10\n"
        assert proc.stderr.startswith("lifetime-sampler: " + what)
        assert proc.stderr.count("\n") == 1 and not profile_files(out)


def test_launcher_and_cli_options(tmp_path):
    env = launch.profiled_env(str(tmp_path), full_trace=True, full_trace_capacity=123,
                              base={"LIFETIME_FULL_TRACE_BUFFER": "64"})
    assert env["LIFETIME_FULL_TRACE"] == "1" and env["LIFETIME_FULL_TRACE_CAPACITY"] == "123"
    assert env["LIFETIME_FULL_TRACE_BUFFER"] == "64"  # knobs outside the launcher pass
    stale = launch.profiled_env(str(tmp_path), base={"LIFETIME_FULL_TRACE": "1"})
    assert "LIFETIME_FULL_TRACE" not in stale
    with pytest.raises(ValueError):
        launch.profiled_env(str(tmp_path), interval=4096, full_trace=True)
    assert cli.main(["profile", "--full-trace", "--interval", "4096", "--", "true"]) == 1
    assert cli.main(["profile", "--full-trace-capacity", "10", "--", "true"]) == 1


# ---------------------------------------------------------------- host safety, full trace

def test_malloc_in_a_signal_handler_does_not_hang(bins, tmp_path):
    """host_safety's alarm case in full-trace mode."""
    host = bins["host_safety"]
    plain = subprocess.run([host, "alarm", "300000"], env=plain_env(), capture_output=True,
                           text=True, timeout=60)
    try:
        proc = run_sampled([host, "alarm", "300000"], tmp_path, extra_env=FULL, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("the profiled program hung (malloc in a SIGALRM handler)")
    assert proc.stdout == plain.stdout == "alarm ok 1\n" and proc.stderr == ""
    prof = only_profile(tmp_path)
    _complete(prof)
    assert prof.trailer.end_reason == pb.END_EXIT and len(prof.samples) >= 300000


@pytest.mark.parametrize("kind", SANITIZERS)
def test_sanitizer_stress_harness(kind, tmp_path):
    """8 threads freeing each other's objects (tests/native/threads_xfree.c) under
    TSan/ASan, every allocation traced, back-pressure on a 64-record buffer."""
    binary = harness_binary("lifetime_sampler_stress", kind)
    per = 10000
    out = tmp_path / "out"
    # Run once: glibc's thread-exit abort under ASan ("__malloc_arena_thread_freeres:
    # a->attached_threads > 0", once rerun here) came from the threads' racing first
    # calls into glibc's malloc, now set up by the harness build's constructor
    # (profiler/src/sampler.c, lt_constructor).
    stdout = run_harness(binary, per, out, {"LIFETIME_FULL_TRACE": "1",
                                            "LIFETIME_FULL_TRACE_BUFFER": "64",
                                            "LIFETIME_FLUSH_MS": "20"})
    assert stdout == f"produced {per * PRODUCERS} consumed {per * PRODUCERS}\n"
    prof = only_profile(out)
    _complete(prof)
    assert len(prof.samples) >= per * PRODUCERS


def test_no_thread_is_ever_added(bins, tmp_path):
    proc = run_sampled([bins["host_safety"], "threads"], tmp_path, extra_env=FULL)
    assert proc.stdout == "threads 1\n"
    _complete(only_profile(tmp_path))


@pytest.mark.parametrize("argv", [["none"], ["/bin/true"]], ids=["no-allocation", "true"])
def test_a_process_without_samples_writes_a_complete_profile(bins, tmp_path, argv):
    cmd = [bins["host_safety"], *argv] if argv[0] == "none" else argv
    proc = run_sampled(cmd, tmp_path, extra_env=FULL)
    assert proc.stdout == proc.stderr == ""
    prof = only_profile(tmp_path)
    _complete(prof)
    assert prof.trailer.end_reason == pb.END_EXIT and prof.mappings


@pytest.mark.parametrize("child_allocates", [False, True])
def test_fork_exec_one_file_per_image(bins, tmp_path, child_allocates):
    proc = run_sampled([bins["fork_exec"], "parent", "alloc" if child_allocates else "noalloc"],
                       tmp_path, extra_env=FULL)
    parent_pid, child_pid = (int(x) for x in proc.stdout.split()[1::2])
    by_kind = {}
    for p in read_all(tmp_path):
        _complete(p)
        kind = ("parent" if p.header.pid == parent_pid else
                "forked" if p.header.forked_from_pid else "image")
        assert kind not in by_kind, "two files for one process image"
        by_kind[kind] = p
    assert set(by_kind) == {"parent", "forked", "image"}
    parent, forked, image = by_kind["parent"], by_kind["forked"], by_kind["image"]
    assert len(_sizes(parent, 1000, 1007)) == 100 and len(_sizes(parent, 2000, 2007)) == 100
    assert [s.censored for s in parent.samples if s.size == 1234] == [True]
    assert not _sizes(parent, 3000, 3007) and not _sizes(parent, 5000, 5007)
    assert image.header.pid == child_pid and len(_sizes(image, 5000, 5007)) == 200
    assert not _sizes(image, 1000, 1007)
    assert forked.trailer.end_reason == pb.END_EXEC
    assert len(_sizes(forked, 3000, 3007)) == (50 if child_allocates else 0)
    assert not _sizes(forked, 1000, 1007) and not [s for s in forked.samples if s.size == 1234]
    assert all(s.alloc_monotonic_ns >= forked.header.start_monotonic_ns for s in forked.samples)
