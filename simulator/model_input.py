"""The model predictor's inputs for the engine (`lifetime simulate --model EXPORT_DIR`).

An exported model (`lifetime export`) is served to the engine as
  * its shared-library build, the plugin the sampler and the allocator also load
    (`export.serve.model_plugin`: export/plugin built with CMake against the export; the
    engine dlopens it, so the engine binary does not depend on any model), and
  * a "model contexts" side file (format in simulator/src/model_predictor.h): per stack id
    of the trace, the context's frame strings exactly as the model was trained on them --
    the stack symbolized offline (`core.context.machinery_free`) and cut with the
    MODEL's own context definition (its export_manifest.json "context", the one
    `lifetime train` recorded), the same path the dataset job took.

A model whose context definition this build cannot reproduce (another version, inline
frames, none recorded) is refused, as `lifetime profile --model` refuses it.  The engine
checks the plugin against the side file (model id, context version, wrappers,
max_frames, number of classes) before it runs.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Callable

import numpy as np

from core import export_dir as export_dirs
from core.context import ContextDefinitionError
from core.errors import LifetimeError
from export import serve
from simulator.tables import context_accuracy, symbolize_stacks

FORMAT = "lifetime-model-contexts-v1"


class ModelInputError(LifetimeError):
    """An --model directory the simulator cannot serve: not an export, a context
    definition that cannot be reproduced, classes that are not the trace's."""


@dataclasses.dataclass
class ModelInput:
    export_dir: str
    plugin: str
    contexts_file: str
    model_id: str
    manifest: dict
    context: object                  # core.context.ContextDefinition (the model's)
    stack_context: dict              # stack id -> context frames (tuple)


def load_export(export_dir: str):
    """(manifest, ContextDefinition) of an export directory; ModelInputError, one line."""
    export = export_dirs.read(export_dir, error=ModelInputError, label=f"--model {export_dir}")
    manifest = export.manifest
    try:
        definition = export.context()
    except ContextDefinitionError as e:
        raise ModelInputError(f"--model {export_dir}: {e}; the simulator cannot give the model "
                              "the contexts it was trained on (re-train and re-export)") from None
    return manifest, definition


def frame_line(frame: str) -> str:
    """A frame as one line of the contexts file: line breaks become spaces (the
    tokenizer splits at ASCII whitespace either way, so the model's ids are the same)."""
    return frame.replace("\r", " ").replace("\n", " ")


def write_contexts(path: str, *, plugin: str, model_id: str, definition,
                   stack_context: dict) -> str:
    with open(path, "w", encoding="utf-8", errors="surrogateescape", newline="\n") as f:
        f.write(f"{FORMAT}\nplugin {plugin}\nmodel_id {model_id}\n"
                f"context_version {definition.to_json()['version']}\n"
                f"max_frames {definition.max_frames}\nwrappers {len(definition.wrappers)}\n")
        for w in definition.wrappers:
            f.write(frame_line(w) + "\n")
        f.write(f"stacks {len(stack_context)}\n")
        for sid in sorted(stack_context):
            frames = stack_context[sid]
            f.write(f"stack {sid} {len(frames)}\n")
            for fr in frames:
                f.write(frame_line(fr) + "\n")
        f.write("end\n")
    return path


def prepare(export_dir: str, side: dict, out_dir: str, *, class_names: list,
            reuse: tuple | None = None, debug_dirs=None, sysroot: str | None = None,
            progress: Callable[[str], None] | None = None) -> ModelInput:
    """Checks the export, builds (or finds) its plugin, symbolizes the trace's stacks with
    the model's context definition (or reuses `reuse` = (definition, stack -> frames)
    when that definition is the model's) and writes OUT_DIR/contexts.txt."""
    say = progress or (lambda _m: None)
    manifest, definition = load_export(export_dir)
    names = manifest.get("class_names")
    if list(names or []) != list(class_names):
        raise ModelInputError(f"--model {export_dir}: the model's classes {names} are not the "
                              f"training dataset's {list(class_names)} (the trace is labelled "
                              "with the dataset's)")
    try:
        plugin = serve.model_plugin(export_dir)
    except serve.ModelExportError as e:
        raise ModelInputError(str(e)) from None
    if reuse is not None and reuse[0] == definition:
        stack_context = reuse[1]
    else:
        say(f"symbolizing {len(side['stacks']):,} stacks with the model's context definition")
        stack_context = symbolize_stacks(side, definition, debug_dirs=debug_dirs,
                                         sysroot=sysroot, progress=say)
    os.makedirs(out_dir, exist_ok=True)
    model_id = str(manifest.get("model_id", ""))
    contexts = write_contexts(os.path.join(out_dir, "contexts.txt"), plugin=plugin,
                              model_id=model_id, definition=definition,
                              stack_context=stack_context)
    return ModelInput(os.path.abspath(export_dir), plugin, contexts, model_id, manifest,
                      definition, stack_context)


def read_served(path: str) -> dict:
    """The engine's --model-served file: {label: {stack id: {class: objects}}}."""
    out: dict = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            label, sid, cls, n = line.split()
            out.setdefault(label, {}).setdefault(int(sid), {})[int(cls)] = int(n)
    return out


def per_context_accuracy(served: dict, stack_context: dict, side: dict, labels: dict) -> dict:
    """Table 3's per-context accuracy of the model: a context (the model's frames) is
    right when the class it was given most is its label, the T95 class of its objects in
    the trace (labels: simulator.tables.context_t95_classes over stack_context)."""
    per_stack = {int(s["id"]): s for s in side["stacks"]}
    objects: dict = {}
    given: dict = {}
    for sid, classes in served.items():
        c = stack_context[sid]
        objects[c] = objects.get(c, 0) + np.asarray(per_stack[sid]["objects"], np.float64)
        g = given.setdefault(c, {})
        for k, n in classes.items():
            g[k] = g.get(k, 0) + n
    right = {c: max(given[c], key=lambda k: (given[c][k], -k)) == labels[c]
             for c in objects if c in labels}
    return context_accuracy(right, {c: objects[c] for c in right})
