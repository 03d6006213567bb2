"""Full trace (issue 23): each thread keeps its last stack walk and the next walk
replays the frames it shares with it, after checking that the words it read still
hold the same values (inprocess/src/unwind.c, "the walk's memo").  The stacks must be
exactly those of a walk without the memo: LIFETIME_UNWINDER=check walks every
allocation again without it (and with glibc's backtrace()) and prints how many
differ."""

from __future__ import annotations

import re
import sys

from tests.sampler_support import only_profile, profile_files, read_all, run_sampled

FULL = {"LIFETIME_FULL_TRACE": "1", "LIFETIME_UNWINDER": "check"}
CHECK = re.compile(r"unwinder check: (\d+) of (\d+) stacks differ from backtrace\(\), "
                   r"(\d+) of (\d+) frames; memo: (\d+) of (\d+) walks differ")


def _checks(stderr):
    found = [tuple(map(int, m.groups())) for m in CHECK.finditer(stderr)]
    assert found, stderr[-2000:]
    return found


def test_deep_recursion_and_signal_frames(bins, tmp_path):
    """Mutually recursive functions with different frame layouts (one with a VLA: its
    CFA is rbp-based) and allocations in a SIGALRM handler (the signal frame)."""
    proc = run_sampled([bins["deep_stacks"], "20000"], tmp_path, extra_env=FULL)
    (differ, total, _, frames, memo_differ, walks), = _checks(proc.stderr)
    assert total > 20000 and frames > 20 * total and walks == total
    assert differ == 0 and memo_differ == 0
    prof = only_profile(tmp_path)
    assert prof.header.full_trace and prof.trailer.dropped_samples == 0


def test_threads(bins, tmp_path):
    proc = run_sampled([bins["full_trace"], "threads", "5000"], tmp_path, extra_env=FULL)
    (differ, total, _, _, memo_differ, walks), = _checks(proc.stderr)
    assert total > 20000 and walks == total and differ == 0 and memo_differ == 0


def test_cpython(tmp_path):
    """A real interpreter without frame pointers, every object through malloc."""
    script = ("import json, re\n"
              "d = [{'k': i, 'v': str(i) * 5} for i in range(20000)]\n"
              "s = json.dumps(d)\n"
              "print(len(re.findall(r'\\d+', s)))\n")
    proc = run_sampled([sys.executable, "-c", script], tmp_path,
                       extra_env={**FULL, "PYTHONMALLOC": "malloc"})
    assert proc.stdout.strip() == "40000"
    checks = _checks(proc.stderr)
    assert sum(c[5] for c in checks) > 100_000
    assert all(c[0] == 0 and c[4] == 0 for c in checks), checks
    assert len(profile_files(tmp_path)) == len(checks)
    assert all(p.trailer.dropped_samples == 0 for p in read_all(tmp_path))
