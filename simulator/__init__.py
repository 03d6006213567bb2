"""The trace-driven LLAMA heap simulator: a thin front for the C++ engine.

The simulation itself runs in the `lifetime_simulate` binary (built by CMake into
build/simulator/); this module finds it, runs it and returns the parsed JSON report.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import tempfile
from typing import Sequence

from simulator.trace import (DEFAULT_BOUNDARIES_NS, NEVER, ObjectRecord, TraceWriter,  # noqa: F401
                             read_trace, true_class, write_class_table, write_trace)

ROOT = pathlib.Path(__file__).resolve().parents[1]


class SimulationError(RuntimeError):
    """The engine refused the input (exit 2), found an invariant violated (exit 3) or failed."""

    def __init__(self, message: str, returncode: int):
        super().__init__(message)
        self.returncode = returncode


def engine_path() -> pathlib.Path:
    """The engine binary: $LIFETIME_SIMULATE, else build/simulator/lifetime_simulate."""
    env = os.environ.get("LIFETIME_SIMULATE")
    path = pathlib.Path(env) if env else ROOT / "build" / "simulator" / "lifetime_simulate"
    if not path.exists():
        raise FileNotFoundError(f"{path} is not built: run `make native`")
    return path


def simulate(trace: str | os.PathLike, predictors: Sequence[str] = ("oracle",), *, baseline: bool = True,
             table_default: int | None = None, series_interval_ms: int | None = None,
             series_interval_ns: int | None = None, snapshots_ns: Sequence[int] = (),
             deadline_k: int | None = None, check_invariants: bool = False, check_every: int | None = None,
             json_out: str | os.PathLike | None = None, timeout: float | None = None,
             model_revalidate_every: int | None = None,
             model_served: str | os.PathLike | None = None,
             recycle_spans_immediately: bool = False,
             policy: str | Sequence[str] = (), snapshot_spans: bool = False,
             attribute_at_ns: Sequence[int] = (),
             isolate: Sequence[tuple[str, Sequence[int]]] = (),
             subrelease: str | None = None) -> dict:
    """Runs the engine on `trace` and returns its report (see simulator/README.md).

    predictors: engine specs, e.g. "oracle", "table:FILE", "constant:3", "exact=table:FILE",
    "model=model:CONTEXTS" (simulator/model_input.py writes CONTEXTS); model_served: where the
    engine writes the model predictors' classes per stack (`--model-served`).
    attribute_at_ns: times of fragmentation attributions (`--attribute-at-ns`, report key
    "attributions"); isolate: (label, stack ids) groups, each one more instance of every
    allocator with those stacks' objects in a heap of their own (`--isolate`); subrelease:
    the size-class heaps' rule, "MS:LONGEST:SHORTEST" (`--subrelease`)."""
    args = [str(engine_path()), os.fspath(trace)]
    for p in predictors:
        args += ["--predictor", p]
    if not baseline:
        args.append("--no-baseline")
    if table_default is not None:
        args += ["--table-default", str(table_default)]
    if series_interval_ms is not None:
        args += ["--series-interval-ms", str(series_interval_ms)]
    if series_interval_ns is not None:
        args += ["--series-interval-ns", str(series_interval_ns)]
    for t in snapshots_ns:
        args += ["--snapshot-at-ns", str(t)]
    if snapshot_spans:
        args.append("--snapshot-spans")
    for t in attribute_at_ns:
        args += ["--attribute-at-ns", str(t)]
    for label, ids in isolate:
        args += ["--isolate", f"{label}=" + ",".join(str(int(i)) for i in ids)]
    if deadline_k is not None:
        args += ["--deadline-k", str(deadline_k)]
    if recycle_spans_immediately:
        args.append("--recycle-spans-immediately")
    if subrelease is not None:
        args += ["--subrelease", subrelease]
    for p in [policy] if isinstance(policy, str) else policy:  # LLAMA: [LABEL=]NAME[,NAME...]
        args += ["--policy", p]
    if check_invariants:
        args.append("--check-invariants")
    if check_every is not None:
        args += ["--check-every", str(check_every)]
    if model_revalidate_every is not None:
        args += ["--model-revalidate-every", str(model_revalidate_every)]
    if model_served is not None:
        args += ["--model-served", os.fspath(model_served)]
    with tempfile.TemporaryDirectory() as tmp:
        out = os.fspath(json_out) if json_out is not None else os.path.join(tmp, "report.json")
        proc = subprocess.run(args + ["--json", out], capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            msg = proc.stderr.strip() or f"lifetime_simulate exited with {proc.returncode}"
            raise SimulationError(msg, proc.returncode)
        with open(out) as f:
            return json.load(f)
