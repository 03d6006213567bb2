"""core/export_dir.py, the export directory's reader: each bad directory gets one line
naming it and the problem (no export is built here; tests/test_export.py builds one)."""

from __future__ import annotations

import json

import pytest

from core import export_dir
from core.errors import LifetimeError


def _write(path, manifest) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / export_dir.MANIFEST).write_text(
        manifest if isinstance(manifest, str) else json.dumps(manifest))


def test_missing_directory_manifest_and_library(tmp_path):
    with pytest.raises(export_dir.ExportDirError, match="no such model export directory"):
        export_dir.read(str(tmp_path / "nope"))
    tmp_path.joinpath("empty").mkdir()
    with pytest.raises(export_dir.ExportDirError,
                       match=r"--model .*empty: not a `lifetime export` output \(no "):
        export_dir.read(str(tmp_path / "empty"), label=f"--model {tmp_path / 'empty'}")
    _write(tmp_path / "nolib", {"format": export_dir.FORMAT})
    assert export_dir.read(str(tmp_path / "nolib")).manifest["format"] == export_dir.FORMAT
    with pytest.raises(export_dir.ExportDirError, match="missing lib/liblifetime_model.a"):
        export_dir.read(str(tmp_path / "nolib"), library=True)


@pytest.mark.parametrize("content,message", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "not a JSON object"),
    (json.dumps({"format": "lifetime-export-v0"}), "not a lifetime-export-v1 manifest"),
    (json.dumps({}), "not a lifetime-export-v1 manifest"),
])
def test_bad_manifests_name_the_file(tmp_path, content, message):
    _write(tmp_path / "x", content)
    with pytest.raises(export_dir.ExportDirError) as e:
        export_dir.read(str(tmp_path / "x"))
    assert str(e.value).startswith(str(tmp_path / "x" / export_dir.MANIFEST))
    assert message in str(e.value)


def test_the_callers_error_class_is_raised(tmp_path):
    class Mine(LifetimeError):
        pass

    with pytest.raises(Mine):
        export_dir.read(str(tmp_path / "nope"), error=Mine)


def test_written_manifest_reads_back_with_its_format(tmp_path):
    export_dir.write_manifest(str(tmp_path), {"model_id": "abc"})
    got = export_dir.read(str(tmp_path))
    assert got.manifest == {"format": export_dir.FORMAT, "model_id": "abc"}
    assert export_dir.is_export(str(tmp_path))
