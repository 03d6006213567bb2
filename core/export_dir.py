"""The directory `lifetime export` writes: its format in one place, reader and writer.

    DIR/export_manifest.json   model id, graph, shapes, classes, the label scheme and
                               the context definition the model was trained with,
                               target CPU, part digests
    DIR/include/               lifetime_model.h (the C and C++ API)
    DIR/lib/liblifetime_model.a, lib/cmake/LifetimeModel/, lib/pkgconfig/
    DIR/share/lifetime_model/  the model card, config.json, metrics.json

export/exporter.py builds the library and writes the manifest through `write_manifest`;
the sampler's launcher, the simulator and evaluate-online read it through `read`."""

from __future__ import annotations

import dataclasses
import os

from core import files, lifetimes
from core.context import ContextDefinition
from core.errors import LifetimeError
from core.lifetimes import LabelScheme

MANIFEST = "export_manifest.json"
FORMAT = "lifetime-export-v1"
LIBRARY = os.path.join("lib", "liblifetime_model.a")
CMAKE_CONFIG = os.path.join("lib", "cmake", "LifetimeModel", "LifetimeModelConfig.cmake")


class ExportDirError(LifetimeError):
    """An export directory that is missing, incomplete or of another format."""


@dataclasses.dataclass(frozen=True)
class ExportDir:
    path: str
    manifest: dict

    def context(self) -> ContextDefinition:
        """The context definition the model was trained with (ContextDefinitionError,
        naming the manifest, when it is not one this code can apply)."""
        return ContextDefinition.from_json(self.manifest.get("context"),
                                           where=os.path.join(self.path, MANIFEST))

    def label_scheme(self) -> LabelScheme | None:
        """The label scheme the model was trained with (its class boundaries), or None
        for an export written before the manifest carried it; ExportDirError naming the
        manifest when it is not a scheme (label_scheme_json wrote it)."""
        d = self.manifest.get("label_scheme")
        if d is None:
            return None
        try:
            scheme = LabelScheme.from_json(d)
        except (KeyError, TypeError, LifetimeError) as e:
            raise ExportDirError(f"{os.path.join(self.path, MANIFEST)}: label_scheme is not "
                                 f"a label scheme ({e})") from None
        if scheme.clock == "wall" and d.get("boundaries_ns") != list(
                lifetimes.boundaries_ns(scheme.boundaries)):
            raise ExportDirError(f"{os.path.join(self.path, MANIFEST)}: label_scheme's "
                                 "boundaries_ns are not its boundaries in ns")
        return scheme


def label_scheme_json(scheme: LabelScheme) -> dict:
    """A scheme as the manifest holds it: LabelScheme.to_json, and on the wall clock its
    boundaries in ns (as the library's lifetime_model_info.boundaries_ns)."""
    d = scheme.to_json()
    if scheme.clock == "wall":
        d["boundaries_ns"] = list(lifetimes.boundaries_ns(scheme.boundaries))
    return d


def is_export(path: str) -> bool:
    """PATH holds a manifest (a fifo or a bad file there is for `read` to refuse)."""
    return os.path.lexists(os.path.join(path, MANIFEST))


def write_manifest(out_dir: str, manifest: dict) -> str:
    return files.write_json(os.path.join(out_dir, MANIFEST), {"format": FORMAT, **manifest})


def read(path: str, *, error: type[LifetimeError] = ExportDirError, label: str | None = None,
         library: bool = False) -> ExportDir:
    """The export at PATH, or `error` in one line naming it (`label`, default PATH): no such
    directory, no manifest, a manifest of another format, and with `library` a missing
    library or CMake package."""
    label = label or path
    if not os.path.isdir(path):
        raise error(f"{label}: no such model export directory")
    manifest_path = os.path.join(path, MANIFEST)
    if not os.path.lexists(manifest_path):
        raise error(f"{label}: not a `lifetime export` output (no {MANIFEST})")
    manifest = files.read_json_object(manifest_path, error, "missing")
    if manifest.get("format") != FORMAT:
        raise error(f"{manifest_path}: not a {FORMAT} manifest")
    if library:
        for rel in (LIBRARY, CMAKE_CONFIG):
            if not os.path.isfile(os.path.join(path, rel)):
                raise error(f"{label}: not a `lifetime export` output (missing {rel})")
    return ExportDir(path, manifest)
