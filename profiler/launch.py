"""Runs a program under the LD_PRELOAD allocation-lifetime sampler.

The sampler (profiler/src, built to build/profiler/liblifetime_sampler.so) is
configured through the environment; this module sets it:

    LD_PRELOAD               the sampler, in front of any existing preloads
    LIFETIME_OUT_DIR         where each process image writes
                             <program>.<pid>.<start_unix_ns>.ltprof
    LIFETIME_INTERVAL_BYTES  mean bytes between samples (None: the sampler's default)
    LIFETIME_VERSION_LABEL   free-form label stored in every header
    LIFETIME_MODEL_LIB       with `model`: a shared build of an exported model
                             (`model_plugin`), for online, counterfactual predictions
Other knobs (LIFETIME_MAX_FRAMES, LIFETIME_FLUSH_MS, LIFETIME_SEED, LIFETIME_UNWINDER,
LIFETIME_SYMBOLIZE) can be passed through `extra_env`.

The environment is inherited by children, so every process the command starts
(fork, exec, posix_spawn, shells) profiles itself into the same directory, unless a
program builds its children's environment from scratch.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import shutil
import subprocess
import sys
from typing import Mapping, Sequence

from lifetime.errors import LifetimeError

REPO = pathlib.Path(__file__).resolve().parent.parent
LIBRARY_ENV = "LIFETIME_SAMPLER_LIB"
DEFAULT_LIBRARY = REPO / "build" / "profiler" / "liblifetime_sampler.so"


class SamplerNotBuiltError(LifetimeError):
    """The sampler library is not where it should be."""


def sampler_library_path() -> str:
    """The sampler library: $LIFETIME_SAMPLER_LIB, else <repo>/build/profiler/...

    Raises SamplerNotBuiltError naming the path when the file is missing."""
    override = os.environ.get(LIBRARY_ENV)
    path = pathlib.Path(override) if override else DEFAULT_LIBRARY
    if not path.is_file():
        how = (f"${LIBRARY_ENV} points to {path}, which does not exist"
               if override else f"the sampler library {path} does not exist")
        raise SamplerNotBuiltError(
            f"{how}; build it with `make native` (cmake -S . -B build -G Ninja && "
            "cmake --build build)")
    return str(path.resolve())


PLUGIN_SOURCE = REPO / "profiler" / "model_plugin"
PLUGIN_BUILDS = REPO / "build" / "model_plugins"


class ModelExportError(LifetimeError):
    """A --model directory that is not a usable `lifetime export` output."""


def _check_context(root: pathlib.Path) -> None:
    """Refuses an export whose context definition the sampler cannot reproduce."""
    from pipeline.context import ContextDefinition, ContextDefinitionError

    try:
        ContextDefinition.load(str(root / "export_manifest.json"))
    except ContextDefinitionError as e:
        raise ModelExportError(f"{e}; the sampler would not give the model the contexts it "
                               "was trained on (re-train and re-export)") from e


def model_plugin(export_dir: str) -> str:
    """The shared library of an exported model that the sampler loads for online
    predictions: profiler/model_plugin built against EXPORT_DIR with CMake
    find_package(LifetimeModel), once per library content (cached in build/)."""
    root = pathlib.Path(export_dir)
    library = root / "lib" / "liblifetime_model.a"
    config = root / "lib" / "cmake" / "LifetimeModel" / "LifetimeModelConfig.cmake"
    if not root.is_dir():
        raise ModelExportError(f"{export_dir}: no such model export directory")
    if not library.is_file() or not config.is_file():
        raise ModelExportError(f"{export_dir}: not a `lifetime export` output (missing "
                               f"{library.name} or LifetimeModelConfig.cmake)")
    _check_context(root)
    digest = hashlib.sha256(library.read_bytes()).hexdigest()[:16]
    build = PLUGIN_BUILDS / digest
    plugin = build / "liblifetime_model_plugin.so"
    if plugin.is_file():
        return str(plugin)
    if shutil.which("cmake") is None:
        raise ModelExportError("building the model plugin needs cmake")
    print(f"lifetime profile: building the model plugin for {export_dir}", file=sys.stderr)
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    for cmd in (["cmake", "-S", str(PLUGIN_SOURCE), "-B", str(build), *gen,
                 "-DCMAKE_BUILD_TYPE=Release", f"-DCMAKE_PREFIX_PATH={root.resolve()}"],
                ["cmake", "--build", str(build)]):
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise ModelExportError(f"{export_dir}: building the model plugin failed:\n"
                                   f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return str(plugin)


def profiled_env(out_dir: str, interval: int | None = None, version_label: str | None = None,
                 extra_env: Mapping[str, str] | None = None,
                 base: Mapping[str, str] | None = None,
                 model_lib: str | None = None) -> dict[str, str]:
    """The environment run_profiled gives the command (exposed for tools and tests)."""
    env = dict(os.environ if base is None else base)
    for key in ("LIFETIME_INTERVAL_BYTES", "LIFETIME_VERSION_LABEL", "LIFETIME_MODEL_LIB"):
        env.pop(key, None)  # only what the caller asks for, never a stale outer setting
    library = sampler_library_path()
    preload = [p for p in env.get("LD_PRELOAD", "").replace(":", " ").split() if p != library]
    env["LD_PRELOAD"] = " ".join([library] + preload)
    env["LIFETIME_OUT_DIR"] = os.path.abspath(out_dir)
    if interval is not None:
        if int(interval) <= 0:
            raise ValueError(f"interval must be a positive number of bytes, not {interval!r}")
        env["LIFETIME_INTERVAL_BYTES"] = str(int(interval))
    if version_label is not None:
        env["LIFETIME_VERSION_LABEL"] = version_label
    if model_lib is not None:
        env["LIFETIME_MODEL_LIB"] = model_lib
    if extra_env:
        env.update({k: str(v) for k, v in extra_env.items()})
    return env


def run_profiled(cmd: Sequence[str], out_dir: str, interval: int | None = None,
                 version_label: str | None = None,
                 extra_env: Mapping[str, str] | None = None, model: str | None = None) -> int:
    """Runs `cmd` with the sampler preloaded and returns its exit code.

    `model`: a `lifetime export` directory; each sampled allocation then also gets
    the model's predicted class (online, counterfactual: the allocation is untouched).
    stdin, stdout and stderr are the caller's.  A child killed by signal N returns
    128 + N, as a shell reports it.  `out_dir` is created if needed; if it cannot be,
    the command still runs and the sampler says why on stderr (one
    "lifetime-sampler:" line) and samples nothing.
    """
    if not cmd:
        raise ValueError("run_profiled: empty command")
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError:
        pass  # the sampler reports the unusable directory itself
    model_lib = model_plugin(model) if model else None
    env = profiled_env(out_dir, interval, version_label, extra_env, model_lib=model_lib)
    proc = subprocess.Popen(list(cmd), env=env)
    while True:
        try:
            code = proc.wait()
            break
        except KeyboardInterrupt:
            # The child got the same SIGINT from the terminal; let it decide, and
            # report its exit status rather than a Python traceback.
            continue
    if code < 0:
        return 128 + (-code)
    return code


__all__ = ["LIBRARY_ENV", "DEFAULT_LIBRARY", "ModelExportError", "SamplerNotBuiltError",
           "model_plugin", "profiled_env", "run_profiled", "sampler_library_path"]
