"""The simulator under hostile input (issue 20, item 3 and the simulator's part of item 4):
huge records in bounded memory, every header and record field bounded, out of memory as a
documented status, fifos refused without blocking, and the Python mirror of the trace
reader's checks (simulator.trace.check_trace) pinned to the engine's `--check`."""

from __future__ import annotations

import json
import os
import random
import resource
import struct
import subprocess
import sys
import time

import pytest

import simulator
from simulator import trace as tr

TIB = 1 << 40
HP = 2 << 20
NB = len(tr.DEFAULT_BOUNDARIES_NS)
HEADER = tr.FIXED.size + 8 * NB
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


pytestmark = pytest.mark.usefixtures("simulator_engine")


def _limit_as(nbytes):
    def pre():
        resource.setrlimit(resource.RLIMIT_AS, (nbytes, nbytes))
    return pre


# The engine under a helper process whose only child it is: the helper's RUSAGE_CHILDREN
# is the engine's own peak RSS.  An address-space limit keeps a regression from taking the
# machine's memory (the 16 TiB record once took 18.7 GB).
_MEASURE = """
import json, resource, subprocess, sys, time
lim = int(sys.argv[1])
t = time.monotonic()
p = subprocess.run(sys.argv[2:], capture_output=True, text=True,
                   preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (lim, lim)))
print(json.dumps({"rc": p.returncode, "stderr": p.stderr, "s": time.monotonic() - t,
                  "rss_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))
"""


def run_measured(*args, limit=2 << 30, timeout=120):
    p = subprocess.run([sys.executable, "-c", _MEASURE, str(limit), str(simulator.engine_path()),
                        *map(str, args)], capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def engine(*args, timeout=30, **kw):
    return subprocess.run([str(simulator.engine_path()), *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, **kw)


def alloc_by_name(report, name):
    return next(a for a in report["allocators"] if a["name"] == name)


# ---------------------------------------------------------------- huge objects

@pytest.mark.parametrize("size,align,freed,check", [
    (TIB, 16, False, True),                       # 1 TiB, live at the end
    (8 * TIB, 16, True, True),                    # 8 TiB, freed
    (16 * TIB - 1, 1 << 31, True, False),         # the largest the format allows, 2 GiB aligned
])
def test_huge_object_costs_no_memory_in_its_size(tmp_path, size, align, freed, check):
    """One 40-byte record of a multi-terabyte object: its whole huge pages are one entry
    in each heap, so the engine runs in well under a second and a few MB (it took 3.5 s
    and 1.16 GB for 1 TiB, and up to 18.7 GB for 8-16 TiB), with the same figures."""
    path = simulator.write_trace(tmp_path / "huge.lttrace",
                                 [(0, 5 if freed else None, size, 1, 0, align), (1, None, 100, 2)],
                                 end_ns=10)
    out = tmp_path / "r.json"
    m = run_measured(path, "--predictor", "oracle", "--predictor", "constant:0", "--json", out,
                     *(["--check-invariants", "--check-every", "1"] if check else []))
    assert m["rc"] == 0, m["stderr"]
    assert m["s"] < 10 and m["rss_kib"] < 100 * 1024, m
    r = json.loads(out.read_text())
    padded = size + max(align - 8192, 0)
    pages = -(-padded // HP)
    for a in r["allocators"]:
        # The small object: LLAMA opens a page of its own class; the baseline puts it in
        # the huge object's donated tail if it has a free 8 KiB page.
        extra = 1 if a["name"] != "baseline" or pages * HP - padded < 8192 else 0
        assert a["peak_huge_pages"] == pages + extra
        c = a["counters"]
        assert c["multi_huge_page_allocs"] == 1
        assert c["huge_pages_acquired"] - c["huge_pages_released"] == a["final_huge_pages"]
        assert a["final_huge_pages"] == (1 if freed else pages + extra)


def test_huge_objects_ids_and_expiries_count_every_page(tmp_path):
    """Huge pages of one object share their state changes, counted once per page; a
    freed object's ids are reused newest first, as if each page were its own entry."""
    MS = 1_000_000
    recs = [(0, 20 * MS, 3 * HP + 8192, 1), (1, None, 100, 2), (30 * MS, None, 255 * 8192, 3)]
    path = simulator.write_trace(tmp_path / "x.lttrace", recs, end_ns=45 * MS)
    r = simulator.simulate(path, ["constant:0"], check_invariants=True, check_every=1,
                           snapshots_ns=[10 * MS, 40 * MS])
    llama = alloc_by_name(r, "llama:constant:0")
    # 3 whole pages + the tail, class <10ms: their deadline (now + 2 x 10 ms) comes at the
    # free's own time, and expiries go first: four pages expire (page 4, active at 30 ms,
    # would expire at 50 ms: after the end).
    assert llama["counters"]["huge_pages_acquired"] == 4 + 1 + 1
    assert llama["counters"]["deadline_expiries"] == 4
    s10 = {p["id"]: p for p in r["snapshots"][0]["huge_pages"]["llama:constant:0"]}
    assert s10[0]["count"] == 3 and s10[0]["blocks"] == "R" * 256 and 3 in s10 and 4 in s10
    # After the free, the next new page takes id 3 (the tail's: the last released).
    s40 = r["snapshots"][1]["huge_pages"]["llama:constant:0"]
    assert sorted(p["id"] for p in s40) == [3, 4]
    base = r["snapshots"][0]["huge_pages"]["baseline"]
    assert [(p["id"], p.get("count", 1)) for p in base] == [(0, 3), (3, 1)]


def test_out_of_memory_is_a_documented_status(tmp_path):
    """Too little memory for the live objects: exit 4 and one line, not an undocumented 1."""
    n = 1_000_000
    path = tmp_path / "many.lttrace"
    with open(path, "wb") as f:
        f.write(tr.FIXED.pack(tr.MAGIC, 1, HEADER, 40, NB, n, n, 0)
                + struct.pack(f"<{NB}Q", *tr.DEFAULT_BOUNDARIES_NS))
        f.write(b"".join(tr.RECORD.pack(i, tr.NEVER, 100, 0, i, 16) for i in range(n)))
    p = engine(path, "--predictor", "oracle", "--json", tmp_path / "r.json", timeout=120,
               preexec_fn=_limit_as(100 << 20))
    assert p.returncode == 4, (p.returncode, p.stderr)
    assert p.stderr.startswith("lifetime_simulate: error: out of memory") and p.stderr.count("\n") == 1


# ---------------------------------------------------------------- bounded fields

def _header(**kw):
    f = dict(magic=tr.MAGIC, version=1, header_bytes=HEADER, record_bytes=40, nb=NB, n=1,
             end=100, reserved=0)
    f.update(kw)
    return (tr.FIXED.pack(f["magic"], f["version"], f["header_bytes"], f["record_bytes"], f["nb"],
                          f["n"], f["end"], f["reserved"])
            + struct.pack(f"<{NB}Q", *kw.get("bounds", tr.DEFAULT_BOUNDARIES_NS)))


def _record(alloc=0, free=10, size=100, stack=0, thread=0, align=16):
    return tr.RECORD.pack(alloc, free, size, stack, thread, align)


def check_both_refuse(path, *words):
    """The engine (--check and a real run) and the Python mirror refuse `path` with one
    and the same line naming it."""
    for args in (["--check"], ["--predictor", "oracle"]):
        p = engine(path, *args)
        assert p.returncode == 2 and p.stdout == "", (p.returncode, p.stderr)
        assert p.stderr.startswith(f"lifetime_simulate: error: {path}: ") and p.stderr.count("\n") == 1
        for w in words:
            assert w in p.stderr, p.stderr
    with pytest.raises(tr.TraceError) as e:
        tr.check_trace(path)
    assert f"lifetime_simulate: error: {e.value}\n" == p.stderr


def test_reserved_and_other_header_fields_are_bounded(tmp_path):
    cases = {
        "reserved": (_header(reserved=1) + _record(), ["byte offset 40", "reserved field is 1"]),
        "end": (_header(end=1 << 63) + _record(), ["byte offset 32", "not below 2^63"]),
        "bound": (_header(bounds=(*tr.DEFAULT_BOUNDARIES_NS[:-1], 1 << 63)) + _record(),
                  [f"byte offset {48 + 8 * (NB - 1)}", "class boundary"]),
        "count": (_header(n=(1 << 64) - 1) + _record(), ["header says 18446744073709551615 records"]),
        "size": (_header() + _record(size=16 * TIB), ["record 0", f"byte offset {HEADER}",
                                                     "implausible size"]),
        "total": (_header(n=300_000, end=10 ** 9) + _record(0, tr.NEVER, 16 * TIB - 1) * 300_000,
                  ["record 262143", "2^62"]),
    }
    for name, (data, words) in cases.items():
        path = tmp_path / f"{name}.lttrace"
        path.write_bytes(data)
        check_both_refuse(path, *words)


# ---------------------------------------------------------------- fifos

def _fifo(path):
    os.mkfifo(path)
    return str(path)


def test_engine_refuses_fifos_without_blocking(tmp_path):
    good = simulator.write_trace(tmp_path / "g.lttrace", [(0, 5, 100)])
    for args, where in (([_fifo(tmp_path / "x.lttrace")], "x.lttrace: is a fifo"),
                        ([good, "--check"], None),
                        ([good, "--predictor", f"table:{_fifo(tmp_path / 't.tbl')}"], "t.tbl: cannot open class table: is a fifo"),
                        ([good, "--predictor", f"model:{_fifo(tmp_path / 'c.txt')}"], "c.txt: cannot open the model contexts file: is a fifo"),
                        ([good, "--json", _fifo(tmp_path / "o.json")], "o.json: cannot write: a fifo with no reader")):
        t = time.monotonic()
        p = engine(*args, timeout=20)
        assert time.monotonic() - t < 10
        if where is None:
            assert p.returncode == 0 and p.stdout == f"{good}: 1 records, valid\n"
        else:
            assert p.returncode == 2 and where in p.stderr and p.stderr.count("\n") == 1, p.stderr


def _fake_dataset(path):
    """Just enough of a dataset for `simulate` to get past its label scheme."""
    from core.context import ContextDefinition

    os.makedirs(path)
    manifest = {"context": ContextDefinition.make().to_json(),
                "config": {"labels": {"clock": "wall", "boundaries": [1e1, 1e2, 1e3, 1e4, 1e5, 1e6]}}}
    with open(os.path.join(path, "manifest.json"), "w") as f:
        json.dump(manifest, f)
    return str(path)


def lifetime(*args, timeout=60):
    return subprocess.run([sys.executable, "-c", "import sys; from lifetime.cli import main; "
                           "sys.exit(main(sys.argv[1:]))", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def _error_line(p) -> str:
    assert p.returncode == 1, p.stderr
    lines = [x for x in p.stderr.splitlines() if x.startswith("lifetime simulate: error:")]
    assert len(lines) == 1, p.stderr
    return lines[0]


def test_simulate_refuses_fifos_without_blocking(tmp_path):
    dataset = _fake_dataset(tmp_path / "ds")
    out = tmp_path / "out"
    for name in ("x.lttrace", "x.ltprof"):
        fifo = _fifo(tmp_path / name)
        p = lifetime("simulate", fifo, "--train", dataset, "--out", out, timeout=30)
        assert _error_line(p) == f"lifetime simulate: error: {fifo}: cannot read (is a fifo, not a regular file)"
    # --train DIR whose manifest.json is a fifo.
    good = simulator.write_trace(tmp_path / "g.lttrace", [(0, 5, 100)])
    bad_ds = tmp_path / "fifo-ds"
    os.makedirs(bad_ds)
    manifest = _fifo(bad_ds / "manifest.json")
    p = lifetime("simulate", good, "--train", bad_ds, "--out", out, timeout=30)
    assert _error_line(p) == f"lifetime simulate: error: {manifest}: cannot read (is a fifo, not a regular file)"
    # A trace whose side file is a fifo; an output path in --out that is one.
    _fifo(tmp_path / "g.stacks.json")
    p = lifetime("simulate", good, "--train", dataset, "--out", out, timeout=30)
    assert _error_line(p).endswith("g.stacks.json: cannot read the trace's stack side file "
                                   "(is a fifo, not a regular file)")
    os.makedirs(out, exist_ok=True)
    _fifo(out / "simulation.json")
    p = lifetime("simulate", good, "--train", dataset, "--out", out, timeout=30)
    assert _error_line(p).endswith("simulation.json: cannot write there (is a fifo, not a regular file)")


# ---------------------------------------------------------------- the check-only paths

def _mutants(good: bytes, rng: random.Random):
    """Hostile variants of a good trace: every header field at its edges, records edited
    field by field, random byte flips, truncations and extensions."""
    hdr = tr.FIXED.size
    fields = [(8, "<I"), (12, "<I"), (16, "<I"), (20, "<I"), (24, "<Q"), (32, "<Q"), (40, "<Q")]
    edges = [0, 1, 2, 39, 40, 41, 62, 63, 2**31, 2**32 - 1, 2**44, 2**62, 2**63 - 1, 2**63, 2**64 - 1]
    for off, fmt in fields:
        for v in edges:
            if v < 2 ** (8 * struct.calcsize(fmt)):
                yield good[:off] + struct.pack(fmt, v) + good[off + struct.calcsize(fmt):]
    for i in range(NB):
        for v in (0, 1, 2**63 - 1, 2**63, 2**64 - 1):
            off = hdr + 8 * i
            yield good[:off] + struct.pack("<Q", v) + good[off + 8:]
    n = (len(good) - HEADER) // 40
    for _ in range(150):
        i, (off, fmt) = rng.randrange(n), rng.choice([(0, "<Q"), (8, "<Q"), (16, "<Q"), (32, "<I"), (36, "<I")])
        v = rng.choice(edges + [rng.randrange(2 ** (8 * struct.calcsize(fmt)))])
        if v < 2 ** (8 * struct.calcsize(fmt)):
            at = HEADER + 40 * i + off
            yield good[:at] + struct.pack(fmt, v) + good[at + struct.calcsize(fmt):]
    for _ in range(150):
        b = bytearray(good)
        for _ in range(rng.randrange(1, 4)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        yield bytes(b)
    for cut in (0, 7, 8, 47, 48, HEADER - 1, HEADER, HEADER + 39, len(good) - 1):
        yield good[:cut]
    yield good + b"\0" * 40
    yield good + b"x"


def test_python_mirror_agrees_with_the_engine_check(tmp_path):
    """simulator.trace.check_trace / check_trace_bytes (for fuzzing) accept exactly what
    `lifetime_simulate --check` accepts and refuse the rest with the engine's own line."""
    rng = random.Random(20)
    recs, t = [], 0
    for _ in range(40):
        t += rng.randrange(0, 1000)
        recs.append((t, rng.choice([None, t + rng.randrange(0, 5000)]), rng.randrange(0, 1 << 22),
                     rng.randrange(9), rng.randrange(3), rng.choice([0, 8, 16, 4096])))
    good = open(simulator.write_trace(tmp_path / "good.lttrace", recs, end_ns=t + 5000), "rb").read()
    seen = {"ok": 0, "refused": 0}
    for k, data in enumerate(_mutants(good, rng)):
        path = tmp_path / f"m{k}.lttrace"
        path.write_bytes(data)
        p = engine(path, "--check")
        assert p.returncode in (0, 2), (k, p.returncode, p.stderr)
        for check in (lambda: tr.check_trace(path), lambda: tr.check_trace_bytes(data, str(path))):
            if p.returncode == 0:
                assert check().num_records == int(p.stdout.rsplit(": ", 1)[1].split()[0]), k
            else:
                with pytest.raises(tr.TraceError) as e:
                    check()
                assert p.stderr == f"lifetime_simulate: error: {e.value}\n", k
        seen["ok" if p.returncode == 0 else "refused"] += 1
        path.unlink()
    assert seen["ok"] > 20 and seen["refused"] > 200, seen
