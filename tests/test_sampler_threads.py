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

import pytest

from tests.sampler_support import (PER_PRODUCER, PRODUCERS, SANITIZERS,
                                   check_cross_thread_profile, harness_binary, only_profile,
                                   run_harness, run_sampled)


def test_cross_thread_frees_lose_and_duplicate_nothing(bins, tmp_path):
    proc = run_sampled([bins["threads_xfree"], str(PER_PRODUCER)], tmp_path / "out", interval=1)
    total = PER_PRODUCER * PRODUCERS
    assert proc.stdout == f"produced {total} consumed {total}\n"
    check_cross_thread_profile(only_profile(tmp_path / "out"), PER_PRODUCER)


@pytest.mark.parametrize("kind", SANITIZERS)
def test_sanitizer_harness_is_clean(kind, tmp_path):
    binary = harness_binary("lifetime_sampler_stress", kind)
    out = tmp_path / "out"
    per = 20000  # long enough (>100 ms even under ASan) for several periodic flushes
    stdout = run_harness(binary, per, out, {"LIFETIME_INTERVAL_BYTES": "1",
                                            # many concurrent flushes while threads run
                                            "LIFETIME_FLUSH_MS": "20"})
    assert stdout == f"produced {per * PRODUCERS} consumed {per * PRODUCERS}\n"
    prof = only_profile(out)
    assert prof.chunks > 1  # periodic flushes ran on the threads, concurrently with the others
    check_cross_thread_profile(prof, per)
