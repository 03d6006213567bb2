"""The LLAMA allocator (liblifetime_alloc.so) at its limits (issue 32, item 4): objects near
a huge page in a long loop (the policy's fresh huge page ids, never reused, ran past the
reservation: NULL at pair 32,767 and no allocation after), and programs under an
address-space limit (`ulimit -v`: the fixed 64 GiB / 512 GiB reservation kept every
program from starting) or a commit limit (vm.overcommit_memory=2 charges writable private
mappings: the reservations must be PROT_NONE until used)."""

from __future__ import annotations

import json
import resource
import subprocess
import sys

import pytest

from tests.test_allocator import BUILD, built, preload_env

POLICIES = ("paper", "segregated", "baseline", "tolerant")
MiB = 1 << 20
GiB = 1 << 30

# (size, alignment): near a huge page on either side, the size-class heaps' 256-page
# span (2 MiB - 8 KiB + 1), an aligned object padded past 1 MiB.
BIG_PAIRS = [
    (2 * MiB - 4096, 16),
    (2 * MiB, 16),
    (2 * MiB + 1, 16),
    (2 * MiB - 8192 + 1, 16),
    (2 * MiB - 8192, 16),
    (MiB + 1, 64 << 10),
    (MiB, MiB),
]


def _stats(tmp_path) -> dict:
    (path,) = tmp_path.glob("stats*.json")
    return json.loads(path.read_text())


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("size,align", BIG_PAIRS)
def test_big_pairs_never_run_out(policy, size, align, tmp_path):
    # 100,000 malloc/free pairs under a 1 GiB reservation (before: NULL at pair 511 under
    # segregated and baseline, 32,767 with the default 64 GiB), then a 2 MiB object and
    # 100,000 small ones; peak RSS stays that of one object.
    env = preload_env(policy=policy, reserve_gib=1, stats=tmp_path / "stats.json")
    proc = subprocess.run([str(built(BUILD / "tests" / "alloc_big_pairs")), str(size), str(align), "100000"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.split()
    assert lines[-1] == "ok" and lines[:2] == ["pairs", "100000"], proc.stdout
    assert int(lines[3]) < 64 * 1024, proc.stdout  # peak RSS in KiB
    s = _stats(tmp_path)
    assert s["failed_allocs"] == 0


def test_big_pairs_default_reservation(tmp_path):
    # The case as reported: segregated, the default reservation.
    env = preload_env(policy="segregated", stats=tmp_path / "stats.json")
    proc = subprocess.run([str(built(BUILD / "tests" / "alloc_big_pairs")), str(2 * MiB - 4096), "16", "100000"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.split()[-1] == "ok", proc.stdout + proc.stderr


def _limited(limit: int):
    def set_limit():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    return set_limit


PROGRAMS = {
    "true": ["/bin/true"],
    # 100 MB in one object and 100 MB in 100,000 small ones
    "python": [sys.executable, "-c",
               "a = bytearray(100 << 20); b = [bytearray(1000) for _ in range(100000)]; print(len(a) + len(b))"],
}


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("limit_gib", (16, 4))
@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_starts_under_address_space_limit(policy, limit_gib, program, tmp_path):
    limit = limit_gib * GiB
    cmd = PROGRAMS[program]
    glibc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, preexec_fn=_limited(limit))
    assert glibc.returncode == 0, glibc.stderr
    env = preload_env(policy=policy, stats=tmp_path / "stats.json")
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60, preexec_fn=_limited(limit))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == glibc.stdout
    s = _stats(tmp_path)
    # the heaps' reservation is a share of what the limit left (and more than nothing)
    assert 0 < s["reserved_bytes"] <= limit // 2, s["reserved_bytes"]
    assert s["failed_allocs"] == 0


def test_starts_under_a_small_limit(tmp_path):
    # 512 MiB: every reservation shrinks to fit, the program still runs.
    env = preload_env(policy="segregated", stats=tmp_path / "stats.json")
    proc = subprocess.run(PROGRAMS["python"], env=env, capture_output=True, text=True, timeout=60,
                          preexec_fn=_limited(512 * MiB))
    assert proc.returncode == 0, proc.stderr


COMMIT_PROBE = """
total = 0
for line in open('/proc/self/maps'):
    f = line.split()
    lo, hi = (int(x, 16) for x in f[0].split('-'))
    if f[1][1] == 'w' and f[1][3] == 'p':
        total += hi - lo
print(total)
"""


@pytest.mark.parametrize("policy", POLICIES)
def test_reservations_cost_no_commit(policy):
    # Under vm.overcommit_memory=2 the kernel charges every writable private mapping,
    # MAP_NORESERVE or not (PROT_NONE ones are free): the allocator's reservations (the
    # heaps, the object table, the metadata arena) are PROT_NONE until used, so a program's
    # writable mappings stay near glibc's (before: ~80 GiB under paper: the object table and
    # the arena were mapped read/write whole).  This box need not run in mode 2: /proc's
    # maps say what mode 2 would charge.
    glibc = subprocess.run([sys.executable, "-c", COMMIT_PROBE], capture_output=True, text=True, timeout=60)
    proc = subprocess.run([sys.executable, "-c", COMMIT_PROBE], env=preload_env(policy=policy),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    extra = int(proc.stdout) - int(glibc.stdout)
    assert extra < 256 * MiB, extra
