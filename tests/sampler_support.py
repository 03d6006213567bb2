"""Shared helpers for the sampler tests (tests/test_sampler_*.py).

They run the real liblifetime_sampler.so on real processes: small C programs from
tests/native/ compiled here with gcc, and read the profiles back with the project's
reader (profile_format.read_profile), which checks every record's CRC and parses
every chunk with the real protobuf library.
"""

from __future__ import annotations

import glob
import os
import pathlib
import shutil
import subprocess
from collections import Counter

import pytest

from profiler import launch
from profile_format import profile_pb2, read_profile

REPO = pathlib.Path(__file__).resolve().parent.parent
NATIVE = REPO / "tests" / "native"
pb = profile_pb2


def sampler_library() -> str:
    """The built sampler; builds it (like `make native`) when it is missing."""
    try:
        return launch.sampler_library_path()
    except launch.SamplerNotBuiltError:
        if os.environ.get(launch.LIBRARY_ENV):
            raise
    if shutil.which("cmake") is None:
        pytest.fail("the sampler is not built and cmake is missing: run `make native`")
    build = REPO / "build"
    subprocess.run(["cmake", "-S", str(REPO), "-B", str(build), "-G", "Ninja",
                    "-DCMAKE_BUILD_TYPE=Release"], check=True, capture_output=True)
    subprocess.run(["cmake", "--build", str(build), "-j2", "--target", "lifetime_sampler"],
                   check=True, capture_output=True)
    return launch.sampler_library_path()


def compile_c(name: str, out_dir: pathlib.Path, flags: tuple[str, ...] = ()) -> str:
    """Compiles tests/native/<name>.c without frame pointers; returns the binary."""
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc")
    out = out_dir / name
    subprocess.run(["gcc", "-O2", "-g", "-fomit-frame-pointer", "-fno-builtin",
                    "-pthread", *flags, str(NATIVE / f"{name}.c"), "-o", str(out)],
                   check=True)
    return str(out)


class NativeBinaries:
    """binaries[name]: tests/native/<name>.c compiled (compile_c) on first use, once."""

    def __init__(self, out_dir: pathlib.Path):
        self._out_dir = out_dir
        self._built: dict[str, str] = {}

    def __getitem__(self, name: str) -> str:
        if name not in self._built:
            self._built[name] = compile_c(name, self._out_dir)
        return self._built[name]


def plain_env() -> dict[str, str]:
    """This environment without the sampler's settings: a program run without it."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith("LIFETIME_") and k != "LD_PRELOAD"}


# The sanitizers of the harness builds, as test parameters: slow (each configures and
# builds its own tree of the sampler, build/tsan or build/asan).
SANITIZERS = [pytest.param(kind, marks=pytest.mark.slow) for kind in ("thread", "address")]

# A sanitizer report fails the run with its own exit code (66 TSan, 67 ASan).
SANITIZER_ENV = {"TSAN_OPTIONS": "halt_on_error=1 exitcode=66 report_signal_unsafe=0",
                 "ASAN_OPTIONS": "halt_on_error=1 exitcode=67 detect_leaks=0"}


def harness_binary(target: str, sanitizer: str = "") -> str:
    """A harness of tests/native/CMakeLists.txt (a driver of tests/native/ linked with
    the sampler's LT_HARNESS build): lifetime_sampler_signals in build/, or with sanitizer "thread" or
    "address" lifetime_sampler_stress / _signals in build/<tsan|asan>/, configured once.
    Always rebuilt: cheap when nothing changed, correct when the sampler did."""
    if shutil.which("cmake") is None or shutil.which("gcc") is None:
        pytest.skip("needs cmake and gcc")
    if not sanitizer:
        sampler_library()
        build = REPO / "build"
    else:
        build = REPO / "build" / {"thread": "tsan", "address": "asan"}[sanitizer]
        if not (build / "CMakeCache.txt").exists():
            gen = ["-G", "Ninja"] if shutil.which("ninja") else []
            subprocess.run(["cmake", "-S", str(REPO), "-B", str(build), *gen,
                            f"-DLIFETIME_SANITIZE={sanitizer}",
                            "-DCMAKE_BUILD_TYPE=RelWithDebInfo"],
                           check=True, capture_output=True)
    subprocess.run(["cmake", "--build", str(build), "-j2", "--target", target],
                   check=True, capture_output=True)
    return str(build / "tests" / "native" / target)


def run_harness(binary: str, rounds: int, out_dir, env: dict[str, str]) -> str:
    """Runs a harness (harness_binary) for `rounds`, writing its profile to out_dir,
    under SANITIZER_ENV; fails on a hang, a sanitizer report or an exit status.
    Returns its stdout."""
    os.makedirs(out_dir, exist_ok=True)
    env = dict(plain_env(), **SANITIZER_ENV, LIFETIME_OUT_DIR=str(out_dir), **env)
    try:
        proc = subprocess.run([binary, str(rounds)], env=env, capture_output=True, text=True,
                              timeout=300)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{binary} hung")
    assert "Sanitizer" not in proc.stderr, proc.stderr[-4000:]
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout


def run_sampled(argv, out_dir, interval=None, extra_env=None, check=True, timeout=120,
                make_dir=True, **kwargs) -> subprocess.CompletedProcess:
    """Runs argv with the sampler (the launcher's environment); captures output."""
    if make_dir:
        os.makedirs(out_dir, exist_ok=True)
    env = launch.profiled_env(str(out_dir), interval=interval, extra_env=extra_env)
    kwargs.setdefault("capture_output", True)
    kwargs.setdefault("text", True)
    proc = subprocess.run(list(argv), env=env, timeout=timeout, **kwargs)
    if check and proc.returncode != 0:
        raise AssertionError(f"{argv} exited {proc.returncode}: {proc.stderr}")
    return proc


def profile_files(out_dir) -> list[str]:
    return sorted(glob.glob(os.path.join(str(out_dir), "*.ltprof")))


def read_all(out_dir) -> list:
    return [read_profile(path) for path in profile_files(out_dir)]


def only_profile(out_dir):
    files = profile_files(out_dir)
    assert len(files) == 1, files
    return read_profile(files[0])


# tests/native/threads_xfree.c: PRODUCERS threads malloc objects of 3000..3099 bytes
# and hand them through a queue to 4 consumers, which free them.
PRODUCERS = 4
PER_PRODUCER = 10_000


def check_cross_thread_profile(prof, per_producer):
    """threads_xfree.c sampled with a 1-byte interval: every object sampled exactly once,
    freed once by a consumer thread, never censored, never live twice at an address."""
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
