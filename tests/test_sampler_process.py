"""Process lifecycle under the sampler: fork/exec, every way to exit, SIGKILL, bad
settings, and the Python launcher."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from profiler import launch
from profile_format import read_profile
from tests.sampler_support import only_profile, pb, profile_files, read_all, run_sampled


def _sizes(prof, lo, hi):
    return [s for s in prof.samples if lo <= s.size < hi]


# ---------------------------------------------------------------- fork + exec

@pytest.mark.parametrize("child_allocates", [False, True])
def test_fork_exec_writes_one_file_per_process_image(bins, tmp_path, child_allocates):
    """parent: 1000-byte churn, a live 1234-byte object, fork, 2000-byte churn.
    forked child: (3000-byte churn,) exec of itself as "image": 5000-byte churn."""
    proc = run_sampled([bins["fork_exec"], "parent", "alloc" if child_allocates else "noalloc"],
                       tmp_path, interval=64)
    parent_pid, child_pid = (int(x) for x in proc.stdout.split()[1::2])
    profs = read_all(tmp_path)
    by_kind = {}
    for p in profs:
        h = p.header
        if h.pid == parent_pid:
            kind = "parent"
        elif h.forked_from_pid:
            kind = "forked"
        else:
            kind = "image"
        assert kind not in by_kind, "two files for one process image"
        by_kind[kind] = p
    # every process image writes a file, with or without samples
    assert set(by_kind) == {"parent", "forked", "image"}
    # distinct files, each a complete profile of its own image
    assert len({(p.header.pid, p.header.start_time_unix_ns) for p in profs}) == len(profs)
    assert all(p.trailer is not None for p in profs)

    parent = by_kind["parent"]
    assert parent.trailer.end_reason == pb.END_EXIT and parent.header.forked_from_pid == 0
    assert len(_sizes(parent, 1000, 1007)) == 100 and len(_sizes(parent, 2000, 2007)) == 100
    assert not _sizes(parent, 3000, 3007) and not _sizes(parent, 5000, 5007)
    kept = [s for s in parent.samples if s.size == 1234]
    assert len(kept) == 1 and kept[0].censored and kept[0].observed_age_ns > 0

    image = by_kind["image"]
    assert image.header.pid == child_pid and image.header.parent_pid == parent_pid
    assert image.header.forked_from_pid == 0 and image.trailer.end_reason == pb.END_EXIT
    assert list(image.header.argv[1:]) == ["image"]
    assert len(_sizes(image, 5000, 5007)) == 200
    assert not _sizes(image, 1000, 1007) and not [s for s in image.samples if s.size == 1234]

    forked = by_kind["forked"]
    h = forked.header
    assert h.pid == child_pid and h.forked_from_pid == parent_pid == h.parent_pid
    assert forked.trailer.end_reason == pb.END_EXEC
    if not child_allocates:
        assert not forked.samples and forked.trailer.samples == 0
    else:
        assert len(_sizes(forked, 3000, 3007)) == 50
        # the parent's samples are never duplicated in the child ...
        assert not _sizes(forked, 1000, 1007) and not [s for s in forked.samples
                                                        if s.size == 1234]
        assert all(s.alloc_monotonic_ns >= h.start_monotonic_ns for s in forked.samples)
        assert all(s.alloc_thread == child_pid for s in forked.samples)
        # ... and every stack the child names is in the child's own file
        assert {s.stack_id for s in forked.samples} <= forked.stacks.keys()
        assert image.header.start_monotonic_ns >= forked.trailer.end_monotonic_ns


# ---------------------------------------------------------------- ways to exit

@pytest.mark.parametrize("mode,code,reason", [
    ("return", 0, pb.END_EXIT),
    ("_exit", 3, pb.END_IMMEDIATE_EXIT),
    ("Exit", 4, pb.END_IMMEDIATE_EXIT),
    ("thread", 5, pb.END_EXIT),  # exit() from a second thread while main allocates
])
def test_every_exit_leaves_a_complete_file(bins, tmp_path, mode, code, reason):
    proc = run_sampled([bins["exits"], mode], tmp_path, interval=256, check=False)
    assert proc.returncode == code and proc.stdout == f"mode {mode}\n"
    assert "lifetime-sampler" not in proc.stderr
    prof = only_profile(tmp_path)
    assert prof.trailer is not None and prof.trailer.end_reason == reason
    churned = _sizes(prof, 4200, 4300)
    assert len(churned) >= 200
    # all freed, except, when another thread still allocates during exit, the one
    # object it may hold at that instant
    live = [s for s in churned if s.censored]
    assert all(s.free_function == pb.FREE for s in churned if not s.censored)
    assert len(live) <= (1 if mode == "thread" else 0)
    kept = [s for s in prof.samples if s.size == 7000]
    assert len(kept) == 1 and kept[0].censored and not kept[0].free_monotonic_ns
    assert kept[0].observed_age_ns > 0 and kept[0].observed_age_bytes > 0
    assert prof.trailer.censored_samples == sum(s.censored for s in prof.samples) >= 1


def test_sigkill_keeps_every_chunk_flushed_before(bins, tmp_path):
    env = launch.profiled_env(str(tmp_path), interval=256, extra_env={"LIFETIME_FLUSH_MS": "100"})
    child = subprocess.Popen([bins["exits"], "loop"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "mode loop\n"
        assert child.stdout.readline() == "looping\n"
        time.sleep(0.6)  # several flush periods
    finally:
        child.kill()
        child.wait()
    assert child.returncode == -signal.SIGKILL
    files = profile_files(tmp_path)
    assert len(files) == 1
    prof = read_profile(files[0])  # strict: every record intact
    assert prof.trailer is None
    assert prof.chunks >= 2 and prof.header.pid == child.pid
    assert len(_sizes(prof, 4200, 4300)) > 100
    assert {s.stack_id for s in prof.samples} <= prof.stacks.keys()


# ---------------------------------------------------------------- bad settings

def _unwritable_dir(tmp_path):
    if os.geteuid() != 0:
        d = tmp_path / "readonly"
        d.mkdir()
        d.chmod(0o555)
        return str(d)
    # root writes through permission bits; /proc/self/fdinfo refuses even root
    return "/proc/self/fdinfo"


@pytest.mark.parametrize("case", ["missing_dir", "file_not_dir", "unwritable_dir",
                                  "bad_interval", "zero_interval", "bad_frames",
                                  "no_out_dir"])
def test_bad_settings_disable_sampling_and_change_nothing_else(bins, tmp_path, case):
    argv = [bins["alloc_count"], "50000", "100", "3000"]
    plain = subprocess.run(argv, capture_output=True, text=True, env={
        k: v for k, v in os.environ.items() if not k.startswith(("LIFETIME_", "LD_PRELOAD"))})
    out_dir = str(tmp_path / "out")
    os.makedirs(out_dir)
    extra = {}
    if case == "missing_dir":
        out_dir = str(tmp_path / "does" / "not" / "exist")
    elif case == "file_not_dir":
        out_dir = str(tmp_path / "a_file")
        open(out_dir, "w").close()
    elif case == "unwritable_dir":
        out_dir = _unwritable_dir(tmp_path)
    elif case == "bad_interval":
        extra["LIFETIME_INTERVAL_BYTES"] = "64k"
    elif case == "zero_interval":
        extra["LIFETIME_INTERVAL_BYTES"] = "0"
    elif case == "bad_frames":
        extra["LIFETIME_MAX_FRAMES"] = "500"
    env = launch.profiled_env(out_dir, interval=4096, extra_env=extra)
    if case == "no_out_dir":
        del env["LIFETIME_OUT_DIR"]
    sampled = subprocess.run(argv, capture_output=True, text=True, env=env)
    assert sampled.returncode == plain.returncode == 0
    assert sampled.stdout == plain.stdout
    lines = sampled.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("lifetime-sampler: "), sampled.stderr
    named = {"missing_dir": "does not exist", "file_not_dir": "is not a directory",
             "unwritable_dir": "is not writable", "bad_interval": "LIFETIME_INTERVAL_BYTES='64k'",
             "zero_interval": "LIFETIME_INTERVAL_BYTES='0'",
             "bad_frames": "LIFETIME_MAX_FRAMES='500'", "no_out_dir": "LIFETIME_OUT_DIR"}[case]
    assert named in lines[0] and "sampling disabled" in lines[0]
    assert not profile_files(tmp_path / "out")


# ---------------------------------------------------------------- launcher

def test_run_profiled_passes_exit_code_and_output_through(bins, tmp_path, capfd):
    out = tmp_path / "profiles"  # created by the launcher
    code = launch.run_profiled([bins["exits"], "_exit"], str(out), interval=512,
                               version_label="v-test")
    assert code == 3
    assert capfd.readouterr().out == "mode _exit\n"
    prof = only_profile(out)
    assert prof.header.version_label == "v-test"
    assert prof.header.sampling_interval_bytes == 512
    assert prof.header.program == "exits"
    assert prof.header.executable_path == os.path.realpath(bins["exits"])
    assert list(prof.header.argv) == [bins["exits"], "_exit"]
    assert list(prof.header.clocks) == [pb.CLOCK_MONOTONIC_NS, pb.CLOCK_ALLOCATED_BYTES]
    assert prof.header.sampler_version.startswith("lifetime-sampler ")
    assert prof.header.hostname == os.uname().nodename


def test_run_profiled_reports_signal_deaths_like_a_shell(tmp_path):
    code = launch.run_profiled([sys.executable, "-c", "import os; os.kill(os.getpid(), 9)"],
                               str(tmp_path))
    assert code == 128 + signal.SIGKILL


def test_missing_library_names_the_path_and_the_fix(monkeypatch, tmp_path):
    missing = tmp_path / "nope.so"
    monkeypatch.setenv(launch.LIBRARY_ENV, str(missing))
    with pytest.raises(launch.SamplerNotBuiltError, match="make native") as e:
        launch.sampler_library_path()
    assert str(missing) in str(e.value)
