"""Strings from a profile are bounded as they are read and printed escaped (issue 20,
item 9): an 8 MB program name no longer rides along in every context, example and
manifest line, nor reaches the terminal raw."""

import json
import os
import subprocess
import sys

import pytest

from profile_format import ProfileReader, container, profile_pb2, write_profile
from profile_format.container import MAX_ARGV, MAX_BUILD_ID_BYTES, MAX_STRING_BYTES
from tests.synthetic import make_profile

HOSTILE = "evil\x1b[2J\r\x00"
SAMPLES = [("parse_request", 3.0, False)] * 10 + [("cache_insert", 300.0, False)] * 10


def _profile(path, **header):
    chunk = profile_pb2.ProfileChunk()
    h = chunk.header
    h.schema_version, h.sampling_interval_bytes, h.program = profile_pb2.SCHEMA_VERSION, 64, "p"
    for k, v in header.items():
        if k == "argv":
            h.argv.extend(v)
        else:
            setattr(h, k, v)
    chunk.mappings.add(id=1, start=0x1000, limit=0x2000, path="/x" * 5000, build_id=b"\1" * 100)
    stack = chunk.stacks.add(id=1, addresses=[0x1010])
    stack.frames.add(function="f" * 5000, file="short.c")
    chunk.samples.add(stack_id=1, size=8, weight=1.0, censored=True)
    chunk.trailer.unprofiled_exec.path = "/bin/" + "y" * 5000
    write_profile(str(path), [chunk])


def test_long_strings_are_cut_and_counted_once(tmp_path):
    path = tmp_path / "long.ltprof"
    _profile(path, program=HOSTILE * 1_000_000, version_label="é" * 3000,
             argv=["a"] * (MAX_ARGV + 10) + ["z" * 9000], hostname="h" * 4096)
    reader = ProfileReader(str(path))
    assert len(list(reader.samples())) == 1  # the file is used
    h = reader.header
    assert len(h.program.encode()) == MAX_STRING_BYTES and h.program.startswith(HOSTILE)
    assert h.version_label == "é" * (MAX_STRING_BYTES // 2)  # cut at a character boundary
    assert len(h.argv) == MAX_ARGV and h.hostname == "h" * 4096  # 4096 fits
    assert len(reader.mappings[0].path) == MAX_STRING_BYTES
    assert reader.mappings[0].build_id == b"\1" * MAX_BUILD_ID_BYTES
    assert len(reader.stacks[1].frames[0].function) == MAX_STRING_BYTES
    assert len(reader.trailer.unprofiled_exec.path) == MAX_STRING_BYTES
    assert [p.category for p in reader.problems] == ["long_string"]
    assert str(reader.problems[0]).endswith(
        f"long_string: 7 strings cut; first: header.program ({len(HOSTILE) * 1_000_000} bytes, "
        f"more than {MAX_STRING_BYTES})")
    with pytest.raises(container.ProfileFormatError, match="long_string: header.program"):
        container.read_profile(str(path))  # strict: the first problem raises


# Forks and waits for the command from a fresh, small interpreter: Linux carries a
# process's peak RSS across fork and exec (the child's ru_maxrss starts at its parent's
# high-water mark), and pytest's own process holds gigabytes by the time this runs.
_MEASURE = (
    "import os, sys\n"
    "pid = os.fork()\n"
    "if pid == 0:\n"
    "    os.execv(sys.argv[2], sys.argv[2:])\n"
    "_, status, usage = os.wait4(pid, 0)\n"
    "open(sys.argv[1], 'w').write(str(usage.ru_maxrss))\n"
    "sys.exit(os.waitstatus_to_exitcode(status))\n")


def _run_measured(args, stdout_path, timeout=300):
    """Runs a command; (status, peak RSS in bytes) of that process alone."""
    peak_path = f"{stdout_path}.maxrss"
    with open(stdout_path, "wb") as out:
        p = subprocess.run([sys.executable, "-c", _MEASURE, peak_path, *args], stdout=out,
                           stderr=subprocess.DEVNULL, timeout=timeout)
    with open(peak_path) as f:
        return p.returncode, int(f.read()) * 1024


def test_an_8mb_program_name_costs_nothing_and_prints_escaped(tmp_path, sites):
    binary, addresses = sites
    name = (HOSTILE * (8 * 2**20 // len(HOSTILE) + 1))[: 8 * 2**20]
    make_profile(str(tmp_path / "big.ltprof"), binary, addresses, SAMPLES, program=name,
                 version_label="v1")
    out = tmp_path / "ds"
    rc, peak = _run_measured([sys.executable, "-m", "lifetime.cli", "build-dataset",
                              "--profiles", str(tmp_path / "big.ltprof"), "--out", str(out),
                              "--no-detect-wrappers"], tmp_path / "stdout")
    assert rc == 0
    written = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    assert written < 200_000, written  # 2 contexts; was 8 MB per example and manifest line
    assert peak < 1.5e9, peak  # the job's usual ~650 MB
    stdout = (tmp_path / "stdout").read_bytes()
    assert not set(stdout) & {0x00, 0x0d, 0x1b}, stdout[:200]
    assert b"evil\\x1b[2J\\x0d\\x00evil" in stdout and len(stdout) < 20_000
    dead = [json.loads(line) for line in (out / "dead_letters.jsonl").read_text().splitlines()]
    assert [d["category"] for d in dead] == ["long_string"]
    programs = json.loads((out / "manifest.json").read_text())["files"]["programs"]
    assert [len(p.encode()) for p in programs] == [MAX_STRING_BYTES + len(" (v1)")]
