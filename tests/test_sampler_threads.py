"""8 threads with cross-thread frees: nothing lost, nothing duplicated, no crash.

tests/native/threads_xfree.c: 4 producers malloc objects of 3000..3099 bytes and
hand them through a queue to 4 consumers, which free them.  With a 1-byte interval
every one of them is sampled (p = 1 - e^-3000).

The same program also runs linked with the sampler's own sources under
ThreadSanitizer and AddressSanitizer (profiler/CMakeLists.txt, LIFETIME_SANITIZE):
a sanitizer runtime intercepts malloc itself, so an instrumented sampler cannot be
LD_PRELOADed in front of it; the harness calls the renamed hooks (lt_malloc, lt_free)
directly, which exercises all of the sampler's synchronisation (pre-filter, striped
live table, stack table, completed-sample buffer, inline flushes by the host's own
threads, final flush).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections import Counter

import pytest

from tests.sampler_support import REPO, compile_c, only_profile, pb, run_sampled, sampler_library

PER_PRODUCER = 10_000
PRODUCERS = 4


@pytest.fixture(scope="module")
def lib():
    return sampler_library()


def check_cross_thread_profile(prof, per_producer):
    assert prof.trailer is not None and prof.trailer.end_reason == pb.END_EXIT
    assert prof.trailer.dropped_samples == 0 and prof.trailer.dropped_stacks == 0
    ours = [s for s in prof.samples if 3000 <= s.size < 3100 and s.alloc_function == pb.MALLOC]
    # every allocation was sampled exactly once ...
    assert len(ours) == per_producer * PRODUCERS
    keys = Counter((s.address, s.alloc_monotonic_ns) for s in ours)
    assert max(keys.values()) == 1, "duplicated samples"
    # ... and freed exactly once, by a consumer thread, never censored
    assert all(not s.censored and s.free_function == pb.FREE and s.free_thread for s in ours)
    assert sum(1 for s in ours if s.free_thread) == len(ours)
    producers = {s.alloc_thread for s in ours}
    consumers = {s.free_thread for s in ours}
    assert len(producers) == PRODUCERS and not producers & consumers
    assert 1 <= len(consumers) <= 4
    for s in ours:
        assert s.free_monotonic_ns >= s.alloc_monotonic_ns
        assert s.free_allocated_bytes >= s.alloc_allocated_bytes
    # at any instant, a given address is live at most once
    by_addr: dict[int, list] = {}
    for s in ours:
        by_addr.setdefault(s.address, []).append((s.alloc_monotonic_ns, s.free_monotonic_ns))
    for spans in by_addr.values():
        spans.sort()
        for (a0, f0), (a1, _) in zip(spans, spans[1:]):
            assert a1 >= f0
    assert prof.trailer.samples == len(prof.samples)
    assert prof.trailer.censored_samples == sum(s.censored for s in prof.samples)


def test_cross_thread_frees_lose_and_duplicate_nothing(lib, tmp_path):
    binary = compile_c("threads_xfree", tmp_path)
    proc = run_sampled([binary, str(PER_PRODUCER)], tmp_path / "out", interval=1)
    total = PER_PRODUCER * PRODUCERS
    assert proc.stdout == f"produced {total} consumed {total}\n"
    check_cross_thread_profile(only_profile(tmp_path / "out"), PER_PRODUCER)


def _sanitizer_harness(kind: str) -> str:
    """build/<tsan|asan>/profiler/lifetime_sampler_stress, configured and built once."""
    if shutil.which("cmake") is None or shutil.which("gcc") is None:
        pytest.skip("needs cmake and gcc")
    build = REPO / "build" / {"thread": "tsan", "address": "asan"}[kind]
    binary = build / "profiler" / "lifetime_sampler_stress"
    if not (build / "CMakeCache.txt").exists():
        gen = ["-G", "Ninja"] if shutil.which("ninja") else []
        subprocess.run(["cmake", "-S", str(REPO), "-B", str(build), *gen,
                        f"-DLIFETIME_SANITIZE={kind}", "-DCMAKE_BUILD_TYPE=RelWithDebInfo"],
                       check=True, capture_output=True)
    # always rebuild: cheap when nothing changed, correct when the sampler did
    subprocess.run(["cmake", "--build", str(build), "-j2", "--target", "lifetime_sampler_stress"],
                   check=True, capture_output=True)
    return str(binary)


@pytest.mark.parametrize("kind", ["thread", "address"])
def test_sanitizer_harness_is_clean(kind, tmp_path):
    binary = _sanitizer_harness(kind)
    out = tmp_path / "out"
    out.mkdir()
    per = 20000  # long enough (>100 ms even under ASan) for several periodic flushes
    env = dict(os.environ, LIFETIME_OUT_DIR=str(out), LIFETIME_INTERVAL_BYTES="1",
               LIFETIME_FLUSH_MS="20",  # many concurrent flushes while threads run
               TSAN_OPTIONS="halt_on_error=1 exitcode=66 report_signal_unsafe=0",
               ASAN_OPTIONS="halt_on_error=1 exitcode=67 detect_leaks=0")
    env.pop("LD_PRELOAD", None)
    proc = subprocess.run([binary, str(per)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert "Sanitizer" not in proc.stderr, proc.stderr[-4000:]
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout == f"produced {per * PRODUCERS} consumed {per * PRODUCERS}\n"
    prof = only_profile(out)
    assert prof.chunks > 1  # periodic flushes ran on the threads, concurrently with the others
    check_cross_thread_profile(prof, per)
