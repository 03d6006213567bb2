"""Serving an exported model inside a process: its plugin, its checks, its one
environment contract.

The plugin is the export's library as a shared object (export/plugin/: plugin.c,
CMakeLists.txt, exports.map; only the C API of export/cc/lifetime_model.h is exported),
built against an export directory with CMake find_package(LifetimeModel) by
`model_plugin(EXPORT_DIR)`, once per library and plugin source content (cached in
build/model_plugins/).  Before it is built the export is checked: a `lifetime export`
output with its library and CMake package (core/export_dir.py), and a context definition
this code can reproduce (the model would otherwise be served contexts it was not trained
on).  The class count is the consumer's check, which knows its own classes: the
allocator's at start-up (allocator/src/predictor.cc), the simulator's against the
training dataset (simulator/model_input.py).

The one environment contract: PLUGIN_ENV=PLUGIN (LIFETIME_MODEL_PLUGIN) says "this
process serves this model's plugin".  The in-process runtime reads it
(inprocess/src/online.c, lt_online_plugin) for both hosts that preload it: the sampler
predicts each sampled allocation's class with it (`lifetime profile --model`,
profiler/launch.py), the allocator places every object by it (`lifetime run --allocator
llama --model`, allocator/run.py).  The simulator's engine is not preloaded: it gets the
plugin's path in its model contexts file (simulator/model_input.py).
"""

from __future__ import annotations

import hashlib
import pathlib
import shutil
import subprocess
import sys

from core import export_dir as export_dirs
from core.context import ContextDefinitionError
from core.errors import LifetimeError

REPO = pathlib.Path(__file__).resolve().parent.parent
PLUGIN_ENV = "LIFETIME_MODEL_PLUGIN"  # inprocess/src/online.h: LT_MODEL_PLUGIN_ENV
PLUGIN_SOURCE = REPO / "export" / "plugin"
PLUGIN_SOURCES = ("CMakeLists.txt", "exports.map", "plugin.c")
PLUGIN_BUILDS = REPO / "build" / "model_plugins"
PLUGIN_FILE = "liblifetime_model_plugin.so"


class ModelExportError(LifetimeError):
    """A --model directory that is not a usable `lifetime export` output."""


def check_export(export_dir: str) -> export_dirs.ExportDir:
    """The export at EXPORT_DIR if a process can serve it: a `lifetime export` output with
    its library and CMake package, and a context definition this code reproduces (the
    in-process runtime's and the dataset's).  ModelExportError in one line otherwise."""
    export = export_dirs.read(export_dir, error=ModelExportError, library=True)
    try:
        export.context()
    except ContextDefinitionError as e:
        raise ModelExportError(f"{e}; the model would not be given the contexts it was "
                               "trained on (re-train and re-export)") from e
    return export


def _digest(library: pathlib.Path) -> str:
    h = hashlib.sha256(library.read_bytes())
    for name in PLUGIN_SOURCES:
        h.update(name.encode() + b"\0" + (PLUGIN_SOURCE / name).read_bytes())
    return h.hexdigest()[:16]


def model_plugin(export_dir: str) -> str:
    """The path of EXPORT_DIR's plugin (checked by check_export, built once, cached in
    build/model_plugins/<digest of the library and the plugin's sources>/)."""
    check_export(export_dir)
    root = pathlib.Path(export_dir)
    build = PLUGIN_BUILDS / _digest(root / export_dirs.LIBRARY)
    plugin = build / PLUGIN_FILE
    if plugin.is_file():
        return str(plugin)
    if shutil.which("cmake") is None:
        raise ModelExportError("building the model plugin needs cmake")
    print(f"lifetime: building the model plugin for {export_dir}", file=sys.stderr)
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    for cmd in (["cmake", "-S", str(PLUGIN_SOURCE), "-B", str(build), *gen,
                 "-DCMAKE_BUILD_TYPE=Release", f"-DCMAKE_PREFIX_PATH={root.resolve()}"],
                ["cmake", "--build", str(build)]):
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise ModelExportError(f"{export_dir}: building the model plugin failed:\n"
                                   f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return str(plugin)


__all__ = ["PLUGIN_BUILDS", "PLUGIN_ENV", "PLUGIN_SOURCE", "ModelExportError", "check_export",
           "model_plugin"]
