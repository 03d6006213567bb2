"""The sampler's descriptors stay out of the host's way (issue 20, item 7).

A host that closed stdout and writes to fd 1 from a thread must see every write fail
with EBADF.  The sampler opened its profile per flush with open(), which took the
lowest free number, 1: some of the host's writes succeeded and its text landed inside
the profile (which then read as corrupt).  Now every descriptor the sampler opens is
moved high (F_DUPFD_CLOEXEC) with closed 0..2 plugged by O_PATH descriptors meanwhile
(profiler/src/sampler.c, lt_openat_high).  tests/native/closed_fds.c writes to its
closed standard descriptors from one thread while its main thread allocates, samples
and flushes every millisecond.
"""

from __future__ import annotations

import resource

import pytest

from tests.sampler_support import pb, profile_files, read_profile, run_sampled


def _run(bins, tmp_path, redirect, nofile=None):
    out, report = tmp_path / "out", tmp_path / "report"
    limit = (lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))) \
        if nofile else None
    run_sampled(["sh", "-c", f'exec {redirect}; exec "$0" "$1" 300', bins["closed_fds"],
                 str(report)], out, interval=4096, extra_env={"LIFETIME_FLUSH_MS": "1"},
                preexec_fn=limit)
    fields = report.read_text().split()
    counts = dict(zip(fields[0::2], map(int, fields[1::2])))
    return out, counts


@pytest.mark.parametrize("redirect,closed,nofile", [
    (">&-", 1, None),                # the reproducer
    ("<&- >&- 2>&-", 3, None),
    ("<&- >&- 2>&-", 3, 64),         # a low limit: the floor follows it (48)
    ("<&- >&- 2>&-", 3, 16),         # below 20: the floor is 3, still above 0..2
])
def test_closed_standard_descriptors_stay_closed(bins, tmp_path, redirect, closed, nofile):
    out, counts = _run(bins, tmp_path, redirect, nofile)
    assert counts["closed"] == closed
    assert counts["writes"] > 10_000
    assert counts["ok"] == 0 and counts["other"] == 0, counts
    assert counts["ebadf"] == counts["writes"]
    assert counts["fds_same"] == 1  # nothing left open, nothing of the host's closed
    files = profile_files(out)
    for path in files:
        with open(path, "rb") as f:
            assert b"HOST-TEXT" not in f.read()
    host = [p for p in map(read_profile, files) if p.header.program == "closed_fds"]
    assert len(host) == 1  # strict read: every record's CRC and every chunk checked
    prof = host[0]
    assert prof.trailer.end_reason == pb.END_EXIT
    assert prof.trailer.samples == len(prof.samples) > 1000
