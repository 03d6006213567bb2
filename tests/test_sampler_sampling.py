"""The sampler's statistics, entry points and stacks, on real processes.

Every test runs a small C program (tests/native/) with liblifetime_sampler.so
preloaded and reads the profile back with profile_format.read_profile.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys

import pytest

from tests.sampler_support import only_profile, pb, run_sampled


SIZES = [67, 1003, 4099, 30011]  # odd sizes nothing else in the process asks for
N = 300_000
INTERVAL = 65536


def test_sample_count_matches_the_poisson_expectation(bins, tmp_path):
    proc = run_sampled([bins["alloc_count"], str(N), *map(str, SIZES)], tmp_path,
                       interval=INTERVAL)
    assert proc.stdout.startswith(f"allocated {N // len(SIZES) * sum(SIZES)} in {N} calls")
    prof = only_profile(tmp_path)
    assert prof.header.sampling_interval_bytes == INTERVAL
    assert prof.trailer.end_reason == pb.END_EXIT
    assert prof.trailer.dropped_samples == 0 and prof.trailer.dropped_stacks == 0

    per_size = N // len(SIZES)
    total_expected = total_var = 0.0
    for size in SIZES:
        p = -math.expm1(-size / INTERVAL)
        expected, var = per_size * p, per_size * p * (1 - p)
        got = [s for s in prof.samples if s.size == size]
        assert abs(len(got) - expected) <= 4 * math.sqrt(var) + 1, (size, len(got), expected)
        # every sample of this size stands for 1/p allocations
        assert all(s.weight == pytest.approx(1 / p, rel=1e-12) for s in got)
        # Horvitz-Thompson: the weights add up to the number of allocations
        ht_sd = math.sqrt(per_size * (1 - p) / p)
        assert abs(sum(s.weight for s in got) - per_size) <= 4 * ht_sd + 1
        assert all(not s.censored and s.free_function == pb.FREE for s in got)
        total_expected += expected
        total_var += var
    ours = [s for s in prof.samples if s.size in SIZES]
    assert abs(len(ours) - total_expected) <= 4 * math.sqrt(total_var)

    # The trailer counts every allocation, sampled or not (plus libc's own few).
    our_bytes = per_size * sum(SIZES)
    assert N <= prof.trailer.total_allocations <= N + 1000
    assert our_bytes <= prof.trailer.total_allocated_bytes <= our_bytes + 1_000_000
    assert prof.trailer.end_allocated_bytes == prof.trailer.total_allocated_bytes
    assert prof.trailer.samples == len(prof.samples)
    # Lifetimes on both clocks are non-negative; these objects die immediately.
    for s in ours:
        assert s.free_monotonic_ns >= s.alloc_monotonic_ns
        assert 0 <= s.free_allocated_bytes - s.alloc_allocated_bytes < 64 * 1024


def test_fixed_seed_gives_the_same_samples(bins, tmp_path):
    runs = []
    for name in ("a", "b"):
        run_sampled([bins["alloc_count"], "20000", *map(str, SIZES)], tmp_path / name,
                    interval=INTERVAL, extra_env={"LIFETIME_SEED": "12345"})
        prof = only_profile(tmp_path / name)
        runs.append([(s.size, s.alloc_allocated_bytes) for s in prof.samples])
    assert runs[0] == runs[1] and len(runs[0]) > 100


def test_every_entry_point_is_recorded(bins, tmp_path):
    proc = run_sampled([bins["entry_points"]], tmp_path, interval=1)
    assert proc.stdout == "entry points done\n"
    prof = only_profile(tmp_path)
    page = os.sysconf("SC_PAGE_SIZE")
    expected = [  # (alloc function, size, alignment, free function)
        (pb.MALLOC, 1111, 0, pb.FREE),
        (pb.CALLOC, 539, 0, pb.FREE),
        (pb.MALLOC, 2222, 0, pb.FREED_BY_REALLOC),
        (pb.REALLOC, 3333, 0, pb.FREED_BY_REALLOCARRAY),
        (pb.REALLOCARRAY, 3333, 0, pb.FREE),
        (pb.POSIX_MEMALIGN, 4444, 64, pb.FREE),
        (pb.ALIGNED_ALLOC, 5120, 128, pb.FREE),
        (pb.MEMALIGN, 6666, 256, pb.FREE),
        (pb.VALLOC, 7777, page, pb.FREE),
        (pb.PVALLOC, 8888, page, pb.FREE),
        (pb.REALLOC, 9999, 0, pb.FREED_BY_REALLOC),
    ]
    ours = sorted(((s.alloc_function, s.size, s.alignment, s.free_function)
                   for s in prof.samples if s.size in {e[1] for e in expected}),
                  key=lambda e: (e[1], e[0]))
    assert ours == sorted(expected, key=lambda e: (e[1], e[0]))
    pid = prof.header.pid
    for s in prof.samples:
        if s.size in {e[1] for e in expected}:
            if s.alignment:
                assert s.address % s.alignment == 0
            assert s.alloc_thread == pid and s.free_thread == pid
            assert s.free_monotonic_ns >= s.alloc_monotonic_ns
            assert s.weight == pytest.approx(1.0)
            assert len(prof.stacks[s.stack_id].addresses) >= 2
    # Every entry point, and every way to end a life, shows up.
    assert {e[0] for e in ours} == set(pb.AllocFunction.values()) - {0}
    assert {e[3] for e in ours} == set(pb.FreeFunction.values()) - {0}


def _symbols(binary):
    """name -> (start, end) virtual addresses, from nm."""
    out = subprocess.run(["nm", "-S", "--defined-only", binary], check=True,
                         capture_output=True, text=True).stdout
    syms = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[2] in "tT":
            syms[parts[3]] = (int(parts[0], 16), int(parts[0], 16) + int(parts[1], 16))
    return syms


def _to_vaddr(binary, offset):
    from elftools.elf.elffile import ELFFile
    with open(binary, "rb") as f:
        for seg in ELFFile(f).iter_segments():
            if seg["p_type"] == "PT_LOAD" and \
                    seg["p_offset"] <= offset < seg["p_offset"] + seg["p_filesz"]:
                return offset - seg["p_offset"] + seg["p_vaddr"]
    return None


def _build_id(binary):
    from elftools.elf.elffile import ELFFile
    with open(binary, "rb") as f:
        for section in ELFFile(f).iter_sections():
            if section["sh_type"] == "SHT_NOTE":
                for note in section.iter_notes():
                    if note["n_type"] == "NT_GNU_BUILD_ID":
                        return bytes.fromhex(note["n_desc"])
    return None


def test_stacks_resolve_to_the_calling_functions(bins, tmp_path):
    """Built with -O2 -fomit-frame-pointer: the leaf frames are the helper's own
    alloc_one <- alloc_loop <- main, resolved through the emitted mapping."""
    binary = bins["alloc_count"]
    run_sampled([binary, "20000", "1003"], tmp_path, interval=4096)
    prof = only_profile(tmp_path)
    maps = [m for m in prof.mappings if m.path == os.path.realpath(binary)]
    assert maps, [m.path for m in prof.mappings]
    assert all(m.build_id == _build_id(binary) for m in maps)
    assert any(m.path.endswith("/libc.so.6") and m.build_id for m in prof.mappings)
    syms = _symbols(binary)

    def function_of(addr):
        for m in maps:
            if m.start <= addr < m.limit:
                vaddr = _to_vaddr(binary, addr - m.start + m.file_offset)
                for name, (lo, hi) in syms.items():
                    if lo <= vaddr - 1 < hi:  # a return address points after the call
                        return name
        return None

    ours = [s for s in prof.samples if s.size == 1003]
    assert len(ours) > 1000
    for stack_id in {s.stack_id for s in ours}:
        stack = prof.stacks[stack_id]
        names = [function_of(a) for a in stack.addresses[:3]]
        assert names == ["alloc_one", "alloc_loop", "main"], names
        assert not stack.truncated
        # ... down to libc's __libc_start_call_main and the program's _start
        assert function_of(stack.addresses[-1]) == "_start"
    assert prof.header.max_stack_depth == 128
    assert len({s.stack_id for s in ours}) == 1  # one call site, one stack, stored once


def test_builtin_unwinder_agrees_with_glibc_backtrace(bins, tmp_path):
    """LIFETIME_UNWINDER=check unwinds every sample twice, with the builtin DWARF
    unwinder and with glibc's backtrace(), and prints how many stacks differ."""
    proc = run_sampled([bins["deep_stacks"], "20000"], tmp_path, interval=512,
                       extra_env={"LIFETIME_UNWINDER": "check"})
    m = re.search(r"lifetime-sampler: unwinder check: (\d+) of (\d+) stacks differ from "
                  r"backtrace\(\), (\d+) of (\d+) frames", proc.stderr)
    assert m, proc.stderr
    differ, total, _, frames = map(int, m.groups())
    assert total > 5000 and frames > 20 * total
    assert differ == 0
    ticks = int(proc.stdout.split()[-1])
    prof = only_profile(tmp_path)
    if ticks:  # allocations inside the SIGALRM handler unwind through the signal frame
        in_handler = [s for s in prof.samples if s.size == 3000]
        assert in_handler and max(len(prof.stacks[s.stack_id].addresses)
                                  for s in in_handler) > 5
    deep = max(len(st.addresses) for st in prof.stacks.values())
    assert deep == 128 and any(st.truncated for st in prof.stacks.values())


def test_builtin_unwinder_agrees_on_cpython(tmp_path, lib):
    """A real interpreter without frame pointers, every object through malloc."""
    script = ("import json, re\n"
              "d = [{'k': i, 'v': str(i) * 5} for i in range(20000)]\n"
              "s = json.dumps(d)\n"
              "print(len(re.findall(r'\\d+', s)))\n")
    proc = run_sampled([sys.executable, "-c", script], tmp_path, interval=8192,
                       extra_env={"LIFETIME_UNWINDER": "check", "PYTHONMALLOC": "malloc"})
    assert proc.stdout.strip() == "40000"
    m = re.search(r"unwinder check: (\d+) of (\d+) stacks differ", proc.stderr)
    assert m, proc.stderr
    assert int(m.group(2)) > 200 and int(m.group(1)) == 0
