"""The proxy workload (workloads/proxy_server) as the tests use it: its ground truth and
its built binaries."""

from __future__ import annotations

import json
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PROXY_BUILD = ROOT / "build" / "workloads" / "proxy_server"
GROUND_TRUTH = json.loads((ROOT / "workloads" / "proxy_server" / "ground_truth.json").read_text())


def proxy_binary(version: str) -> pathlib.Path:
    path = PROXY_BUILD / GROUND_TRUTH["versions"][version]["binary"]
    if not path.exists():
        pytest.fail(f"{path} is not built: run `make native`")
    return path
