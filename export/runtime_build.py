"""Builds (once) the XLA AOT runtime and the Abseil subset every exported model links.

The result is cached outside the clone, keyed by the TensorFlow version, the runtime
sources, the Abseil version, our CMake project and the compiler:

    ${LIFETIME_CACHE_DIR:-~/.cache/lifetime-models}/xla-aot-runtime-<key>/
        lib/libxla_aot_runtime.a  lib/libabsl_subset.a  manifest.json

Abseil: the wheel ships only Abseil headers (inline namespace lts_20250127); the
grpcio==1.73.0 source distribution bundles exactly that Abseil under
third_party/abseil-cpp.  It is fetched with `pip download` (cached beside the runtime)
and never vendored into the repository.

    python -m export.runtime_build          # build or reuse; prints the directory
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import json
import logging
import os
import pathlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

from core.errors import LifetimeError

# importlib.metadata is imported inside tensorflow_version: `lifetime --help` must not pay
# for it (~15 ms of email parsing modules).

log = logging.getLogger("export.runtime")

HERE = pathlib.Path(__file__).resolve().parent
CMAKE_PROJECT = HERE / "runtime"
GRPCIO_SDIST = "grpcio==1.73.0"
ABSL_NAMESPACE = "lts_20250127"
LIBS = ("libxla_aot_runtime.a", "libabsl_subset.a")


class RuntimeBuildError(LifetimeError):
    pass


def cache_root() -> pathlib.Path:
    root = os.environ.get("LIFETIME_CACHE_DIR")
    return pathlib.Path(root) if root else pathlib.Path.home() / ".cache" / "lifetime-models"


def tensorflow_dir() -> pathlib.Path:
    """The installed tensorflow package directory, found without importing it (slow)."""
    spec = importlib.util.find_spec("tensorflow")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeBuildError("tensorflow is not installed in this Python environment")
    return pathlib.Path(list(spec.submodule_search_locations)[0])


def tensorflow_version() -> str:
    from importlib.metadata import version

    return version("tensorflow")


def _compiler_id() -> str:
    cxx = os.environ.get("CXX", "c++")
    try:
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        raise RuntimeBuildError(f"no C++ compiler ({cxx}): {e}") from e
    return out.stdout.splitlines()[0]


def _tree_digest(h: "hashlib._Hash", root: pathlib.Path) -> None:
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(root)).encode() + b"\0")
        h.update(hashlib.sha256(path.read_bytes()).digest())


def runtime_key() -> str:
    tf_dir = tensorflow_dir()
    h = hashlib.sha256()
    h.update(f"tf={tensorflow_version()}\0grpcio={GRPCIO_SDIST}\0".encode())
    h.update(f"cxx={_compiler_id()}\0".encode())
    _tree_digest(h, tf_dir / "xla_aot_runtime_src")
    _tree_digest(h, CMAKE_PROJECT)
    h.update(pathlib.Path(__file__).read_bytes())
    return f"tf{tensorflow_version()}-{h.hexdigest()[:16]}"


def run_command(cmd: list[str], error: type[LifetimeError] = RuntimeBuildError,
                capture: bool = False, **kw) -> None:
    """Runs a build tool; a missing tool or a failure raises `error` in one message (with
    the last lines of the tool's output when `capture`).  The exporter's steps capture;
    the runtime build lets its long compile print."""
    log.info("$ %s", " ".join(str(c) for c in cmd))
    try:
        res = subprocess.run(cmd, capture_output=capture, text=capture or None, **kw)
    except FileNotFoundError as e:
        raise error(f"{cmd[0]}: not found (install it: scripts/system-deps.txt)") from e
    if res.returncode != 0:
        tail = ("\n" + "\n".join((res.stdout + res.stderr).strip().splitlines()[-20:])
                if capture else "")
        raise error(f"command failed ({res.returncode}): {' '.join(map(str, cmd))}{tail}")


def _abseil_source(work: pathlib.Path) -> pathlib.Path:
    """Fetches the grpcio sdist with pip (cached) and extracts its bundled Abseil."""
    downloads = cache_root() / "downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    name, ver = GRPCIO_SDIST.split("==")
    sdist = downloads / f"{name}-{ver}.tar.gz"
    if not sdist.exists():
        log.info("fetching the %s source distribution (bundles Abseil %s)",
                 GRPCIO_SDIST, ABSL_NAMESPACE)
        run_command([sys.executable, "-m", "pip", "download", "--quiet", "--no-binary", ":all:",
              "--no-deps", GRPCIO_SDIST, "-d", str(downloads)])
    if not sdist.exists():
        raise RuntimeBuildError(f"pip download did not produce {sdist}")
    prefix = f"{name}-{ver}/third_party/abseil-cpp/"
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(prefix)]
        tar.extractall(work, members=members, filter="data")
    absl = work / prefix
    options = (absl / "absl/base/options.h").read_text()
    if f"ABSL_OPTION_INLINE_NAMESPACE_NAME {ABSL_NAMESPACE}" not in options:
        raise RuntimeBuildError(f"{sdist}: bundled Abseil is not {ABSL_NAMESPACE}")
    return absl


@contextlib.contextmanager
def _locked(path: pathlib.Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def ensure_runtime(build_dir: str | os.PathLike | None = None, jobs: int | None = None
                   ) -> pathlib.Path:
    """Returns the cached runtime directory, building it first when missing."""
    key = runtime_key()
    out = cache_root() / f"xla-aot-runtime-{key}"
    if all((out / "lib" / lib).exists() for lib in LIBS):
        return out
    with _locked(cache_root() / f".xla-aot-runtime-{key}.lock"):
        if all((out / "lib" / lib).exists() for lib in LIBS):
            return out
        tf_dir = tensorflow_dir()
        build = pathlib.Path(build_dir) if build_dir else (
            HERE.parent / "build" / "export-runtime")
        build.mkdir(parents=True, exist_ok=True)
        start = time.monotonic()
        log.info("building the XLA AOT runtime + Abseil subset (once; about 5-15 min on "
                 "2 cores) in %s", build)
        with tempfile.TemporaryDirectory(prefix="absl-") as tmp:
            absl = _abseil_source(pathlib.Path(tmp))
            staging = out.with_name(out.name + ".tmp")
            shutil.rmtree(staging, ignore_errors=True)
            nice = ["nice", "-n", "10"] if shutil.which("nice") else []
            gen = ["-G", "Ninja"] if shutil.which("ninja") else []
            run_command(["cmake", "-S", str(CMAKE_PROJECT), "-B", str(build), *gen,
                  "-DCMAKE_BUILD_TYPE=Release",
                  f"-DTF_RUNTIME_SRC={tf_dir / 'xla_aot_runtime_src'}",
                  f"-DTF_INCLUDE={tf_dir / 'include'}", f"-DABSL_SRC={absl}",
                  f"-DCMAKE_INSTALL_PREFIX={staging}"], stdout=subprocess.DEVNULL)
            run_command([*nice, "cmake", "--build", str(build), "-j", str(jobs or os.cpu_count() or 2)])
            run_command(["cmake", "--install", str(build)], stdout=subprocess.DEVNULL)
        (staging / "manifest.json").write_text(json.dumps({
            "key": key, "tensorflow": tensorflow_version(), "abseil": ABSL_NAMESPACE,
            "abseil_source": GRPCIO_SDIST, "compiler": _compiler_id(),
            "build_seconds": round(time.monotonic() - start, 1)}, indent=1) + "\n")
        shutil.rmtree(out, ignore_errors=True)
        staging.rename(out)
        log.info("runtime ready in %.0f s: %s", time.monotonic() - start, out)
    return out


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        print(ensure_runtime())
    except RuntimeBuildError as e:
        print(f"export runtime: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
