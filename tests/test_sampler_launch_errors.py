"""`lifetime profile` fails, in one line and with status 1, when no profile can come of
the run (issue 20, item 6).

An unwritable --out (a file, a fifo, a place that takes no new file) or an --interval
the sampler refuses used to end in one sampler warning, no profile and status 0.  The
launcher now checks both before the command runs (the command never starts), and
after it, that the command's own process wrote a complete profile: the sampler can
still refuse a setting from the environment or lose its directory mid-run.
"""

from __future__ import annotations

import os
import sys

import pytest

from lifetime import cli
from profiler import launch
from tests.sampler_support import profile_files, read_profile

MAX_INTERVAL = 1 << 40  # LIFETIME_INTERVAL_BYTES: the sampler's range


def _profile(out, *args, marker=None, cmd=None):
    cmd = cmd or ["sh", "-c", f'touch "{marker}"']
    return cli.main(["profile", "--out", str(out), *args, "--", *cmd])


def _one_error(capfd, *parts):
    err = capfd.readouterr().err.splitlines()
    errors = [line for line in err if line.startswith("lifetime profile: error: ")]
    assert len(errors) == 1, err
    for part in parts:
        assert part in errors[0], errors[0]
    return err


def _unwritable(tmp_path):
    if os.geteuid() != 0:
        d = tmp_path / "readonly"
        d.mkdir()
        d.chmod(0o555)
        return str(d)
    return "/proc/self/fdinfo"  # root writes through permission bits, not here


@pytest.mark.parametrize("case", ["file", "fifo", "unwritable", "under_a_file"])
def test_unwritable_out_fails_before_the_command_runs(tmp_path, capfd, lib, case):
    out = {"file": tmp_path / "a_file", "fifo": tmp_path / "a_fifo",
           "under_a_file": tmp_path / "a_file" / "sub"}.get(case) or _unwritable(tmp_path)
    (tmp_path / "a_file").write_text("")
    os.mkfifo(tmp_path / "a_fifo")
    marker = tmp_path / "ran"
    assert _profile(out, marker=marker) == 1
    why = {"file": "is a regular file, not a directory", "fifo": "is a fifo, not a directory",
           "unwritable": "cannot write there", "under_a_file": "Not a directory"}[case]
    err = _one_error(capfd, f"--out {out}: ", why)
    assert len(err) == 1  # the command never ran: no sampler line either
    assert not marker.exists()


@pytest.mark.parametrize("interval", ["99999999999999999999999", str(MAX_INTERVAL + 1)])
def test_interval_outside_the_samplers_range_fails_before_the_command_runs(
        tmp_path, capfd, lib, interval):
    marker = tmp_path / "ran"
    assert _profile(tmp_path / "out", "--interval", interval, marker=marker) == 1
    assert len(_one_error(capfd, f"--interval {interval}: ", str(MAX_INTERVAL))) == 1
    assert not marker.exists() and not profile_files(tmp_path / "out")


def test_the_largest_interval_is_accepted(tmp_path, capfd, lib):
    assert _profile(tmp_path / "out", "--interval", str(MAX_INTERVAL),
                    cmd=["true"]) == 0
    (path,) = profile_files(tmp_path / "out")
    assert read_profile(path).header.sampling_interval_bytes == MAX_INTERVAL
    assert capfd.readouterr().err == ""


def test_a_setting_the_sampler_refuses_fails_after_the_run(tmp_path, capfd, lib, monkeypatch):
    monkeypatch.setenv("LIFETIME_MAX_FRAMES", "500")
    assert _profile(tmp_path / "out", cmd=["true"]) == 1
    err = _one_error(capfd, f"--out {tmp_path / 'out'}: the sampler wrote no profile",
                     "exit status 0")
    assert len(err) == 2 and "LIFETIME_MAX_FRAMES='500'" in err[0]


def test_a_directory_lost_during_the_run_fails_after_it(tmp_path, capfd, lib):
    out = tmp_path / "out"
    assert _profile(out, cmd=["sh", "-c", f'rm -r "{out}"']) == 1
    err = _one_error(capfd, "the sampler wrote no profile")
    assert len(err) == 2 and err[0].startswith("lifetime-sampler: cannot open ")


def test_a_profile_without_its_end_fails_after_the_run(tmp_path, capfd, lib, monkeypatch):
    """A process that leaves by the raw exit_group system call runs no exit path of the
    sampler: its file has the periodic flushes but no trailer."""
    monkeypatch.setenv("LIFETIME_FLUSH_MS", "1")
    code = ("import ctypes, time\n"
            "end = time.monotonic() + 0.2\n"
            "while time.monotonic() < end: [bytes(1000) for _ in range(100)]\n"
            "ctypes.CDLL(None).syscall(231, 0)\n")
    assert _profile(tmp_path / "out", "--interval", "4096",
                    cmd=[sys.executable, "-c", code]) == 1
    err = _one_error(capfd, ".ltprof: incomplete (no trailer; exit status 0)")
    assert len(err) == 1
    (path,) = profile_files(tmp_path / "out")
    assert read_profile(path).samples  # what was flushed is kept


def test_the_library_call_raises_the_same_errors(tmp_path, lib):
    with pytest.raises(launch.ProfileNotWrittenError):
        launch.run_profiled(["true"], str(tmp_path / "out"),
                            extra_env={"LIFETIME_UNWINDER": "nope"})
    (tmp_path / "f").write_text("")
    with pytest.raises(launch.UsageError, match="is a regular file"):
        launch.run_profiled(["true"], str(tmp_path / "f"))
    assert issubclass(launch.ProfileNotWrittenError, launch.LifetimeError)
    assert launch.MAX_INTERVAL == MAX_INTERVAL
