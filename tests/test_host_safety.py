"""The sampler never changes what the host program does, and every process it runs
in writes a profile (issue 12).

The sampler has no thread of its own (host threads flush inline, profiler/src/
sampler.c): a helper thread moved glibc onto its multi-threaded paths, so malloc in
a signal handler could deadlock on an arena lock, setresuid/setresgid could abort,
unshare(CLONE_NEWUSER) failed and CPython warned at fork.  Every process image
writes a complete file (header, mappings, trailer), with or without samples, by
every way it can end: exit, _exit, quick_exit, daemon()'s parent, exec (and a
failed exec goes on with the same profile).  Programs the loader will not preload
into (static, setuid) get one warning line from `lifetime profile`.

tests/native/host_safety.c is the host; tests/native/harness_signals.c is the same
signal test against the sampler's sources under the sanitizers.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections import Counter

import pytest

from core.errors import LifetimeError
from profiler import launch
from profile_format import read_profile
from tests.sampler_support import (SANITIZERS, compile_c, harness_binary, only_profile, pb,
                                   plain_env, profile_files, read_all, run_harness,
                                   run_sampled)


@pytest.fixture(scope="module")
def host(bins):
    return bins["host_safety"]


@pytest.fixture(scope="module")
def static_host(tmp_path_factory):
    if not os.path.exists("/usr/lib/x86_64-linux-gnu/libc.a"):
        pytest.skip("needs a static libc (libc6-dev)")
    return compile_c("host_safety", tmp_path_factory.mktemp("static"), flags=("-static",))


def _sizes(prof, lo, hi):
    return [s for s in prof.samples if lo <= s.size < hi]


def _complete(prof):
    """One complete, consistent file: a trailer, every sample once, its stacks."""
    assert prof.header is not None and prof.trailer is not None
    assert prof.trailer.samples == len(prof.samples)
    assert prof.trailer.censored_samples == sum(s.censored for s in prof.samples)
    keys = Counter((s.address, s.alloc_monotonic_ns) for s in prof.samples)
    assert not keys or max(keys.values()) == 1, "duplicated samples"
    assert {s.stack_id for s in prof.samples} <= prof.stacks.keys()


# ---------------------------------------------------------------- no visible change

@pytest.mark.parametrize("interval", [None, 4096])
def test_malloc_in_a_signal_handler_does_not_hang(host, tmp_path, interval):
    """A SIGALRM handler that mallocs past the tcache: with a second thread in the
    process glibc takes its arena lock, and the handler can interrupt its own
    thread holding it (a hang, at the default interval too)."""
    plain = subprocess.run([host, "alarm", "3000000"], env=plain_env(), capture_output=True,
                           text=True, timeout=60)
    assert plain.stdout == "alarm ok 1\n"
    try:
        proc = run_sampled([host, "alarm", "3000000"], tmp_path, interval=interval, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("the profiled program hung (malloc in a SIGALRM handler)")
    assert proc.stdout == plain.stdout and proc.stderr == ""
    prof = only_profile(tmp_path)
    _complete(prof)
    assert prof.trailer.end_reason == pb.END_EXIT and prof.samples


# Full trace: every allocation recorded, back-pressure on a 64-record done buffer.
FULL_TRACE = {"LIFETIME_FULL_TRACE": "1", "LIFETIME_FULL_TRACE_BUFFER": "64"}


@pytest.mark.parametrize("full", [False, True], ids=["sampled", "full-trace"])
@pytest.mark.parametrize("kind", ["", *SANITIZERS])
def test_signal_handler_harness(kind, full, tmp_path):
    """The same, with the sampler's sources linked into a driver (LT_HARNESS), with
    and without ThreadSanitizer/AddressSanitizer, flushing every millisecond."""
    binary = harness_binary("lifetime_sampler_signals", kind)
    out = tmp_path / "out"
    rounds = 100000 if full else 300000
    stdout = run_harness(binary, rounds, out, {"LIFETIME_FLUSH_MS": "1",
                                               **(FULL_TRACE if full else
                                                  {"LIFETIME_INTERVAL_BYTES": "4096"})})
    words = stdout.split()
    assert words[:2] == ["signals", "ok"] and words[4] == "1"
    assert words[2] == words[3], "the sampler started a thread"
    prof = only_profile(out)
    _complete(prof)
    assert prof.chunks > 1 and len(prof.samples) >= (rounds if full else 1)


def test_no_thread_is_ever_added(host, tmp_path):
    proc = run_sampled([host, "threads"], tmp_path, interval=256)
    assert proc.stdout == "threads 1\n"
    assert only_profile(tmp_path).samples


@pytest.fixture
def shared_dir():
    """An output directory the unprivileged ids can reach (pytest's tmp_path is under
    a 0700 directory) and write (the exec'd image creates its own file)."""
    d = tempfile.mkdtemp(prefix="lifetime-setxid-", dir="/tmp")
    os.chmod(d, 0o1777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _setxid_ok(argv, out_dir, runs=20):
    for i in range(runs):
        proc = run_sampled(argv, out_dir, interval=256, check=False, timeout=30)
        assert proc.returncode == 0, f"run {i}: exit {proc.returncode}: {proc.stderr}"
        assert proc.stderr == "", proc.stderr
    profs = read_all(out_dir)
    assert all(p.trailer is not None for p in profs)
    return proc, profs


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
def test_setresuid_after_sampling_never_aborts(host, shared_dir):
    proc, profs = _setxid_ok([host, "setxid"], shared_dir)
    assert proc.stdout == "setxid ok\n"
    assert len(profs) == 20
    # the file was given to the new uid before the drop: the end was still written
    assert all(p.trailer.end_reason == pb.END_EXIT and len(_sizes(p, 3000, 3100)) > 50
               for p in profs)


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                    reason="needs root and setpriv")
def test_setpriv_never_aborts(shared_dir, lib):
    argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--", "/bin/true"]
    _, profs = _setxid_ok(argv, shared_dir)
    by_program = Counter(p.header.program for p in profs)
    assert by_program == {"setpriv": 20, "true": 20}
    assert all(p.trailer.end_reason == pb.END_EXEC for p in profs
               if p.header.program == "setpriv")


PY_PROBE = """
import os
data = [bytes(1000 + i % 50) for i in range(20000)]
with open("/proc/self/status") as f:
    print([l.split()[1] for l in f if l.startswith("Threads:")][0], flush=True)
try:
    os.unshare(os.CLONE_NEWUSER)
    print("unshare ok", flush=True)
except OSError as e:
    print("unshare failed", e.errno, flush=True)
pid = os.fork()
if pid == 0:
    os._exit(0)
os.waitpid(pid, 0)
print("forked", flush=True)
"""


def test_cpython_313_unshare_fork_and_threads(tmp_path, lib):
    try:
        prefix = subprocess.run(["pyenv", "prefix", "3.13.0"], capture_output=True,
                                text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("no pyenv CPython 3.13.0")
    python = os.path.join(prefix, "bin", "python3")
    argv = [python, "-W", "default", "-c", PY_PROBE]
    plain = subprocess.run(argv, env=dict(plain_env(), PYTHONMALLOC="malloc"),
                           capture_output=True, text=True, timeout=60)
    if "unshare ok" not in plain.stdout:
        pytest.skip(f"unshare(CLONE_NEWUSER) is not allowed here: {plain.stdout}")
    proc = run_sampled(argv, tmp_path, interval=4096, extra_env={"PYTHONMALLOC": "malloc"},
                       timeout=60)
    assert proc.stdout == plain.stdout == "1\nunshare ok\nforked\n"
    assert proc.stderr == plain.stderr == ""  # no "multi-threaded" DeprecationWarning
    profs = read_all(tmp_path)
    assert len(profs) == 2 and all(p.trailer is not None for p in profs)
    parent = [p for p in profs if not p.header.forked_from_pid]
    assert len(parent) == 1 and parent[0].samples


# ---------------------------------------------------------------- a profile for every process

@pytest.mark.parametrize("argv", [["none"], ["/bin/true"]], ids=["no-allocation", "true"])
def test_a_process_without_samples_writes_a_complete_profile(host, tmp_path, argv):
    cmd = [host, *argv] if argv[0] == "none" else argv
    proc = run_sampled(cmd, tmp_path)  # default interval: no sample
    assert proc.stdout == proc.stderr == ""
    prof = only_profile(tmp_path)
    _complete(prof)
    assert prof.header.pid > 0 and prof.header.sampling_interval_bytes > 0
    assert prof.trailer.end_reason == pb.END_EXIT
    assert len(prof.samples) == 0 and prof.trailer.samples == 0
    assert prof.mappings


def _wait_for(pred, timeout=15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.05)
    return pred()


def test_daemon_parent_and_child_each_write_their_profile(host, tmp_path):
    out, pidfile = tmp_path / "out", tmp_path / "child.pid"
    proc = run_sampled([host, "daemon", str(pidfile)], out, interval=2048)
    assert proc.stdout == proc.stderr == ""

    def done():
        if not pidfile.exists() or not pidfile.read_text().endswith("\n"):
            return None
        profs = read_all(out)
        return profs if len(profs) == 2 and all(p.trailer for p in profs) else None

    profs = _wait_for(done)
    assert profs, f"daemon child did not finish: {profile_files(out)}"
    child_pid = int(pidfile.read_text())
    parent = next(p for p in profs if p.header.pid != child_pid)
    child = next(p for p in profs if p.header.pid == child_pid)
    _complete(parent)
    _complete(child)
    # the parent leaves through _exit inside daemon(): its 20,000 allocations are kept
    assert parent.trailer.end_reason == pb.END_IMMEDIATE_EXIT
    assert parent.trailer.total_allocations >= 20000
    assert len(_sizes(parent, 3000, 3100)) > 1000 and not _sizes(parent, 6000, 6100)
    assert [s.censored for s in parent.samples if s.size == 7777] in ([], [True])
    assert child.header.forked_from_pid == parent.header.pid
    assert child.trailer.end_reason == pb.END_EXIT
    assert len(_sizes(child, 6000, 6100)) > 1000 and not _sizes(child, 3000, 3100)


# Every allocation recorded: sampled at a 1-byte interval, or the full-trace mode.
RECORD_ALL = {"interval-1": {"interval": 1},
              "full-trace": {"extra_env": {"LIFETIME_FULL_TRACE": "1"}}}


@pytest.mark.parametrize("recording", RECORD_ALL.values(), ids=RECORD_ALL.keys())
def test_quick_exit_writes_a_complete_profile(host, tmp_path, recording):
    proc = run_sampled([host, "quick"], tmp_path, check=False, **recording)
    assert proc.returncode == 6 and proc.stdout == "quick\n" and proc.stderr == ""
    prof = only_profile(tmp_path)
    _complete(prof)
    assert prof.trailer.end_reason == pb.END_IMMEDIATE_EXIT
    assert len(_sizes(prof, 4200, 4300)) == 200
    assert len(_sizes(prof, 4500, 4600)) == 100  # allocated by the at_quick_exit handler


def test_failed_execs_continue_the_same_profile(host, tmp_path):
    """execv of a missing file, execvp over a 3-entry PATH: the process goes on and
    its one file has everything once (the tentative end of each try cut back off)."""
    proc = run_sampled([host, "execfail", "-"], tmp_path, interval=1)
    assert proc.stdout == "execfail continued errno 2\n" and proc.stderr == ""
    prof = only_profile(tmp_path)
    _complete(prof)
    assert prof.chunks >= 2
    assert prof.trailer.end_reason == pb.END_EXIT
    assert len(_sizes(prof, 1100, 1200)) == 200 and len(_sizes(prof, 2200, 2300)) == 200
    kept = [s for s in prof.samples if s.size == 1234]
    assert len(kept) == 1 and kept[0].censored
    assert not prof.trailer.HasField("unprofiled_exec")


@pytest.mark.parametrize("recording", RECORD_ALL.values(), ids=RECORD_ALL.keys())
def test_failed_exec_then_exec(host, tmp_path, recording):
    proc = run_sampled([host, "execfail", host], tmp_path, **recording)
    assert proc.stdout == "execfail continued errno 2\n"
    profs = read_all(tmp_path)
    assert len(profs) == 2
    first = next(p for p in profs if p.trailer.end_reason == pb.END_EXEC)
    image = next(p for p in profs if p is not first)
    for p in profs:
        _complete(p)
    assert image.header.pid == first.header.pid and list(image.header.argv[1:]) == ["image"]
    assert len(_sizes(first, 1100, 1200)) == 200 and len(_sizes(first, 2200, 2300)) == 200
    assert [s.censored for s in first.samples if s.size == 1234] == [True]
    assert len(_sizes(image, 5500, 5600)) == 200 and not _sizes(image, 1100, 2300)
    assert image.trailer.end_reason == pb.END_EXIT


def test_exec_writes_one_complete_profile_per_image(host, tmp_path):
    proc = run_sampled([host, "exec", host], tmp_path, interval=1)
    assert proc.stdout == proc.stderr == ""
    profs = read_all(tmp_path)
    assert sorted(p.trailer.end_reason for p in profs) == sorted([pb.END_EXEC, pb.END_EXIT])
    execing = next(p for p in profs if p.trailer.end_reason == pb.END_EXEC)
    for p in profs:
        _complete(p)
    assert len(_sizes(execing, 1100, 1200)) == 200
    assert [s.censored for s in execing.samples if s.size == 1234] == [True]
    assert not execing.trailer.HasField("unprofiled_exec")


def test_sigkill_keeps_samples_older_than_one_flush_period(host, tmp_path):
    """No thread: the flushes come from the allocating thread itself.  Samples that
    completed more than LIFETIME_FLUSH_MS before the SIGKILL are all in the file."""
    period_ms = 100
    env = launch.profiled_env(str(tmp_path), interval=1,
                              extra_env={"LIFETIME_FLUSH_MS": str(period_ms)})
    child = subprocess.Popen([host, "loop"], env=env, stdout=subprocess.PIPE, text=True)
    lines = []
    try:
        start = time.monotonic()
        while time.monotonic() - start < 0.7:
            lines.append(child.stdout.readline().split())
        kill_ns = time.monotonic_ns()
        child.kill()
    finally:
        child.kill()
        child.wait()
    assert child.returncode == -signal.SIGKILL
    assert {ln[2] for ln in lines} == {"1"}, "the sampler started a thread"
    prof = read_profile(profile_files(tmp_path)[0])
    assert prof.trailer is None and prof.chunks >= 3
    assert {s.stack_id for s in prof.samples} <= prof.stacks.keys()
    old = [(int(a), int(t)) for a, t, _ in lines if int(t) <= kill_ns - period_ms * 1_000_000]
    assert len(old) >= 20
    frees = sorted(s.free_monotonic_ns for s in prof.samples if s.size == 4200)
    for allocs, t in old[-3:]:
        # every allocation before this line is sampled (p = 1 - e^-4200) and freed
        assert sum(1 for f in frees if f <= t) == allocs


# ---------------------------------------------------------------- programs we cannot preload into

def test_static_command_gets_one_warning(host, static_host, tmp_path, capfd):
    code = launch.run_profiled([static_host, "none"], str(tmp_path / "out"))
    assert code == 0
    err = capfd.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("lifetime profile: warning: ")
    assert static_host in err[0] and "statically linked" in err[0]
    assert not profile_files(tmp_path / "out")


def test_exec_of_a_static_program_is_reported_after_the_run(host, static_host, tmp_path, capfd):
    out = tmp_path / "out"
    code = launch.run_profiled([host, "exec", static_host], str(out), interval=1)
    assert code == 0
    err = capfd.readouterr().err.splitlines()
    assert len(err) == 1 and static_host in err[0] and "statically linked" in err[0]
    assert "wrote no profile" in err[0]
    prof = only_profile(out)
    assert prof.trailer.end_reason == pb.END_EXEC
    assert prof.trailer.unprofiled_exec.path == static_host
    assert "PT_INTERP" in prof.trailer.unprofiled_exec.reason


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (chown to another user)")
def test_setuid_command_gets_one_warning(host, tmp_path, capfd):
    suid = tmp_path / "suid_host"
    shutil.copy(host, suid)
    os.chown(suid, 65534, 65534)
    os.chmod(suid, 0o4755)
    if os.statvfs(suid).f_flag & os.ST_NOSUID:
        pytest.skip("the temporary directory is mounted nosuid")
    code = launch.run_profiled([str(suid), "none"], str(tmp_path / "out"))
    assert code == 0
    err = capfd.readouterr().err.splitlines()
    assert len(err) == 1 and str(suid) in err[0] and "setuid" in err[0]
    assert not profile_files(tmp_path / "out")
    # and exec'd by a profiled process: recorded in its trailer, reported after the run
    code = launch.run_profiled([host, "exec", str(suid)], str(tmp_path / "out2"))
    assert code == 0
    err = capfd.readouterr().err.splitlines()
    assert len(err) == 1 and str(suid) in err[0] and "setuid" in err[0]
    assert only_profile(tmp_path / "out2").trailer.unprofiled_exec.path == str(suid)


# ---------------------------------------------------------------- launcher errors

def test_launcher_errors_are_one_line_lifetime_errors(tmp_path, monkeypatch, lib):
    with pytest.raises(launch.CommandError, match="lifetime-no-such-program: command not found"):
        launch.run_profiled(["lifetime-no-such-program"], str(tmp_path))
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)
    with pytest.raises(launch.CommandError, match="not executable") as e:
        launch.run_profiled([str(script)], str(tmp_path))
    assert str(script) in str(e.value)
    with pytest.raises(launch.CommandError, match="no such file"):
        launch.run_profiled([str(tmp_path / "missing")], str(tmp_path))
    with pytest.raises(launch.CommandError, match="is a directory"):
        launch.run_profiled([str(tmp_path)], str(tmp_path))
    with pytest.raises(LifetimeError):
        launch.run_profiled([], str(tmp_path))
    monkeypatch.setenv(launch.LIBRARY_ENV, str(tmp_path / "nope.so"))
    with pytest.raises(launch.SamplerNotBuiltError, match="nope.so"):
        launch.run_profiled(["/bin/true"], str(tmp_path))
    for err in (launch.CommandError, launch.SamplerNotBuiltError):
        assert issubclass(err, LifetimeError)
    assert not profile_files(tmp_path)


def test_the_sampler_exports_only_its_hooks(lib):
    """Nothing else may interpose the host's symbols (libiberty's demangler was once
    exported, and would have replaced a host's own cplus_demangle*)."""
    out = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True,
                         text=True, check=True).stdout
    exported = {line.split()[-1] for line in out.splitlines() if line.strip()}
    hooks = {"malloc", "calloc", "realloc", "reallocarray", "free", "posix_memalign",
             "aligned_alloc", "memalign", "valloc", "pvalloc", "execve", "execv", "execvp",
             "execvpe", "execl", "execle", "execlp", "fexecve", "execveat", "_exit", "_Exit",
             "daemon", "setuid", "seteuid", "setreuid", "setresuid"}
    assert exported == hooks
