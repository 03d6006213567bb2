"""Shared helpers for the sampler tests (tests/test_sampler_*.py).

They run the real liblifetime_sampler.so on real processes: small C programs from
tests/native/ compiled here with gcc, and read the profiles back with the project's
reader (profiler_proto.read_profile), which checks every record's CRC and parses
every chunk with the real protobuf library.
"""

from __future__ import annotations

import glob
import os
import pathlib
import shutil
import subprocess

import pytest

from profiler import launch
from profiler_proto import profile_pb2, read_profile

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
