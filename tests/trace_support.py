"""Hand-built full traces for the simulator's tests: an .lttrace and the .stacks.json side
file beside it, as simulator/convert.py writes them (tests/test_context_oracle.py,
tests/test_fragmentation.py)."""

from __future__ import annotations

import json
import os

from core.lifetimes import LabelScheme
from simulator import trace as tr
from simulator.convert import STACKS_FORMAT, stacks_path


def write_trace_with_stacks(path, recs: list[tr.ObjectRecord], end_ns: int, stacks: dict,
                            mappings: list, program: str) -> str:
    """RECS (in allocation order) to PATH, and the side file: STACKS (id -> leaf-first
    return addresses) in MAPPINGS, each with its objects and bytes per true class."""
    with tr.TraceWriter(path, end_ns=end_ns) as w:
        for r in recs:
            w.write_record(r)
    nclass = len(tr.DEFAULT_BOUNDARIES_NS) + 2
    per = {sid: ([0] * nclass, [0] * nclass) for sid in stacks}
    for r in recs:
        c = tr.true_class(tr.DEFAULT_BOUNDARIES_NS, r.alloc_ns, r.free_ns)
        per[r.stack_id][0][c] += 1
        per[r.stack_id][1][c] += r.size
    scheme = LabelScheme()
    side = {
        "format": STACKS_FORMAT, "trace": os.path.basename(path),
        "source": {"profile": "hand-built", "program": program, "version_label": "v1",
                   "executable_path": f"/nonexistent/{program}", "pid": 1, "argv": [program],
                   "sampling_interval_bytes": 1, "full_trace": True, "sampled": False,
                   "complete": True, "end_reason": 1, "total_allocations": len(recs),
                   "total_allocated_bytes": sum(r.size for r in recs), "dropped_by_sampler": 0,
                   "coverage": 1.0, "start_monotonic_ns": 0},
        "boundaries_ns": list(tr.DEFAULT_BOUNDARIES_NS), "class_names": scheme.class_names,
        "label_scheme": scheme.to_json(),
        "counts": {"samples": len(recs), "records": len(recs),
                   "censored": sum(r.free_ns is None for r in recs), "skipped": {},
                   "dropped_by_reader": {}, "problems": [], "stacks": len(stacks),
                   "end_ns": end_ns, "runs": 1, "seconds": 0.0},
        "mappings": mappings,
        "stacks": [{"id": sid, "addresses": stacks[sid], "truncated": False,
                    "objects": per[sid][0], "bytes": per[sid][1]} for sid in sorted(stacks)],
    }
    with open(stacks_path(path), "w") as f:
        json.dump(side, f)
    return os.fspath(path)
