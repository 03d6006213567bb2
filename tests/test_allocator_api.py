"""glibc's malloc API beyond allocation in the LLAMA allocator (issue 32, item 5):
mallinfo2/mallinfo, malloc_trim, malloc_stats, malloc_info, mallopt, free_sized and
free_aligned_sized, aligned_alloc's rules, and free/realloc of memory the allocator never
handed out.  One C driver (allocator/tests/api.c, a subcommand per check) run under
LD_PRELOAD of the built library and under glibc as the reference; the exported symbols
are exports.map's and nothing else."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import xml.etree.ElementTree as ET

import pytest

from tests.test_allocator import BUILD, LIB, ROOT, built, preload_env

DRIVER = BUILD / "tests" / "alloc_api"
MIB = 1 << 20
# Held free huge pages: up to 64 (128 MiB) kept for 10 minutes, so malloc_trim has them.
HOLD = {"release_keep": 64, "release_delay_ms": 600000}


def run(cmd, *args, env=None, check=True):
    proc = subprocess.run([str(built(DRIVER)), cmd, *args], env=env, capture_output=True,
                          text=True, timeout=120)
    if check:
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip().endswith("ok")
    return proc


def fields(proc) -> dict:
    out = {}
    for line in proc.stdout.splitlines():
        if "=" in line and not line.startswith("<"):
            k, _, v = line.partition("=")
            out[k] = v
    return out


def glibc_env() -> dict:
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    return env


def glibc_version() -> tuple:
    v = os.confstr("CS_GNU_LIBC_VERSION").split()[-1]
    return tuple(int(x) for x in v.split(".")[:2])


def test_exports_exactly_the_api():
    if shutil.which("nm") is None:
        pytest.skip("needs nm (binutils)")
    text = (ROOT / "allocator" / "src" / "exports.map").read_text()
    body = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    names = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", body.split("global:")[1].split("local:")[0]))
    out = subprocess.run(["nm", "-D", "--defined-only", str(built(LIB))], capture_output=True,
                         text=True, check=True).stdout
    exported = {line.split()[-1] for line in out.splitlines() if line.split()[1] in "TWiV"}
    assert exported == names
    assert {"mallinfo", "mallinfo2", "malloc_trim", "malloc_stats", "malloc_info", "mallopt",
            "free_sized", "free_aligned_sized", "aligned_alloc", "posix_memalign", "memalign",
            "valloc", "pvalloc", "malloc_usable_size", "reallocarray"} <= exported


@pytest.mark.parametrize("policy", ["paper", "segregated"])
def test_mallinfo2_counts_live_bytes(policy):
    f = fields(run("mallinfo", env=preload_env(policy=policy)))
    n = {k: int(v) for k, v in f.items()}
    live = n["usable"] + n["big_bytes"]  # ~230 MB of 1-8 KiB objects + 4 x 3 MiB past a huge page
    assert live > 200e6
    # uordblks: the program's live objects' usable bytes, direct mappings included
    assert abs(n["live.uordblks"] - live) <= 0.03 * live, (n["live.uordblks"], live)
    assert n["live.hblks"] == 4 and n["live.hblkhd"] >= n["big_bytes"]
    # arena: committed heap; fordblks = arena - the heap's bytes in use (the 3 MiB
    # objects' usable bytes are their mappings')
    heap_in_use = n["live.uordblks"] - n["big_bytes"]
    assert n["live.arena"] >= heap_in_use
    assert n["live.fordblks"] == n["live.arena"] - heap_in_use
    assert n["live.usmblks"] == 0
    assert n["live.int_uordblks"] == n["live.uordblks"]  # below INT_MAX: the same
    # after free: almost nothing in use, no direct mapping
    assert n["freed.uordblks"] < 0.01 * live
    assert n["freed.hblks"] == 0 and n["freed.hblkhd"] == 0
    assert n["freed.fordblks"] == n["freed.arena"] - n["freed.uordblks"]


def test_mallinfo2_under_glibc_reference():
    """glibc's own figures on the same driver: uordblks leaves mmapped chunks out (they
    are hblkhd); here uordblks includes them."""
    n = {k: int(v) for k, v in fields(run("mallinfo", env=glibc_env())).items()}
    live = n["usable"] + n["big_bytes"]
    assert abs(n["live.uordblks"] + n["live.hblkhd"] - live) <= 0.03 * live
    assert n["live.hblks"] == 4
    assert n["freed.uordblks"] < 0.01 * live


@pytest.mark.parametrize("policy", ["paper", "segregated"])
def test_malloc_trim_returns_held_pages(policy, tmp_path):
    stats = tmp_path / "s.json"
    n = {k: int(v) for k, v in fields(run("trim", env=preload_env(policy=policy, stats=stats, **HOLD))).items()}
    # 96 MiB freed: the policy released its pages, the backing holds them (up to 64)
    assert n["rss_live"] - n["rss_base"] >= 90 * MIB
    assert n["rss_freed"] - n["rss_base"] >= 64 * MIB
    assert n["keepcost"] >= 64 * MIB and n["ordblks"] == n["keepcost"] // (2 * MIB)
    assert n["trim"] == 1
    assert n["rss_freed"] - n["rss_trimmed"] >= 64 * MIB, n
    assert n["rss_trimmed"] - n["rss_base"] <= 8 * MIB
    assert n["trim_again"] == 0  # nothing left to return: 0, as glibc
    s = json.loads(stats.read_text())
    assert s["trims"] == 2 and s["trimmed_bytes"] >= 64 * MIB and s["held_free_pages"] == 0


def test_malloc_trim_returns_free_pages_inside_the_heap(tmp_path):
    """Free pages inside live huge pages and the 4 KiB pages of spans that hold only free
    places go back at malloc_trim, whatever recent demand says (as glibc's trim gives back
    the free pages inside its heap)."""
    stats = tmp_path / "s.json"
    # a subrelease interval of an hour: nothing goes back before the trim
    n = {k: int(v) for k, v in fields(run("trim_sparse", env=preload_env(
        policy="segregated", stats=stats, subrelease_ms=3600000))).items()}
    assert n["rss_live"] - n["rss_base"] >= 15 * MIB
    assert n["rss_freed"] - n["rss_base"] >= 15 * MIB  # nothing given back yet
    assert n["trim"] == 1
    # 8 MiB of free spans and 4 MiB of pages of free places back; the live objects' 4 MiB stay
    assert n["rss_freed"] - n["rss_trimmed"] >= 11 * MIB, n
    assert n["rss_trimmed"] - n["rss_base"] <= 6 * MIB, n
    s = json.loads(stats.read_text())
    assert s["trimmed_bytes"] >= 11 * MIB


def test_mallopt_trim_threshold_bounds_the_held_pages():
    """M_TRIM_THRESHOLD maps onto the free huge pages kept committed: 0 keeps none."""
    n = {k: int(v) for k, v in fields(run("trim", "0", env=preload_env(**HOLD))).items()}
    assert n["mallopt"] == 1
    assert n["keepcost"] == 0 and n["rss_freed"] - n["rss_base"] <= 8 * MIB


def test_malloc_trim_under_glibc_reference():
    n = {k: int(v) for k, v in fields(run("trim", env=glibc_env())).items()}
    assert n["trim"] in (0, 1) and n["rss_trimmed"] <= n["rss_freed"]


def _xml(proc) -> ET.Element:
    text = proc.stdout.split("--xml--\n")[1].split("--end--")[0]
    return ET.fromstring(text)


@pytest.mark.parametrize("policy", ["paper", "segregated"])
def test_malloc_info_xml_and_malloc_stats(policy):
    proc = run("info", env=preload_env(policy=policy))
    root = _xml(proc)
    assert root.tag == "malloc" and root.get("version") == "1"
    heap = root.find("heap")
    assert heap is not None and heap.get("nr") == "0" and heap.find("sizes") is not None
    totals = {t.get("type"): (int(t.get("count")), int(t.get("size"))) for t in root.findall("total")}
    assert set(totals) == {"fast", "rest", "mmap"}
    assert totals["mmap"][0] == 1 and totals["mmap"][1] >= 5 * MIB  # the 5 MiB object
    system = {s.get("type"): int(s.get("size")) for s in root.findall("system")}
    assert system["current"] >= 2 * MIB and system["max"] >= system["current"]
    aspace = {s.get("type"): int(s.get("size")) for s in root.findall("aspace")}
    assert aspace["total"] >= aspace["mprotect"] >= system["current"]
    f = fields(proc)
    assert (f["info1"], f["info1_errno"]) == ("-1", "22")  # options != 0: -1, EINVAL
    # malloc_stats: glibc's lines on stderr, the same figures
    lines = proc.stderr.splitlines()
    assert lines[0] == "Arena 0:" and lines[3] == "Total (incl. mmap):"
    val = {}
    for i, line in enumerate(lines[:8]):
        if "=" in line:
            val[(i > 3, line.split("=")[0].strip())] = int(line.split("=")[1])
    assert val[(False, "system bytes")] == system["current"]
    assert val[(True, "in use bytes")] - val[(False, "in use bytes")] >= 5 * MIB
    assert val[(True, "max mmap bytes")] >= 5 * MIB


def test_malloc_info_under_glibc_reference():
    proc = run("info", env=glibc_env())
    root = _xml(proc)
    assert root.tag == "malloc" and root.get("version") == "1" and root.find("heap") is not None
    assert {t.get("type") for t in root.findall("total")} == {"fast", "rest", "mmap"}
    # glibc 2.36 returns EINVAL itself and leaves errno; the allocator follows the manual
    assert fields(proc)["info1"] in ("22", "-1")
    assert proc.stderr.startswith("Arena 0:\nsystem bytes")


def test_mallopt_answers_as_glibc_for_its_parameters():
    ours = fields(run("mallopt", env=preload_env()))
    ref = fields(run("mallopt", env=glibc_env()))
    known = [k for k in ours if not k.startswith("unknown")]
    assert len(known) == 12
    assert {k: ours[k] for k in known} == {k: ref[k] for k in known}
    assert ours["M_MXFAST"] == "1" and ours["M_MXFAST_big"] == "0"
    assert ours["unknown_12345"] == ours["unknown_M_GRAIN"] == "0"  # glibc 2.36: 1 for anything


def test_free_sized_frees():
    f = fields(run("sized", env=preload_env(policy="segregated")))
    assert f["free_sized"] == f["free_aligned_sized"] == "present"
    assert int(f["uordblks_growth"]) < MIB  # 200 000 pairs of 6 KB: nothing kept
    assert int(fields(run("sized", env=preload_env(policy="paper")))["uordblks_growth"]) < MIB
    ref = fields(run("sized", env=glibc_env()))
    assert ref["free_sized"] in ("absent", "present")


def test_aligned_calls_as_glibc_but_aligned_alloc_einval():
    ours = fields(run("aligned", env=preload_env()))
    ref = fields(run("aligned", env=glibc_env()))

    def head(v):  # ptr/null, errno, aligned (usable sizes differ by design)
        return v.split(" usable_ge")[0]

    strict = ("aligned_alloc_24_100", "aligned_alloc_0_100", "aligned_alloc_3_100")
    for k in strict:  # C17 / glibc >= 2.38: not a power of two -> EINVAL
        assert head(ours[k]) == "null errno=22 aligned=-1"
        if glibc_version() < (2, 38):  # glibc 2.36: aligned_alloc is memalign (rounds up)
            assert head(ref[k]).startswith("ptr")
        else:
            assert head(ref[k]) == head(ours[k])
    for k in ours:
        if k not in strict and k != "ok":
            assert head(ours[k]) == head(ref[k]), k
    assert ours["aligned_alloc_64_100"].startswith("ptr errno=0 aligned=1")  # size not a multiple: fine
    assert ours["pvalloc_usable_page"] == "1"


@pytest.mark.parametrize("policy,check", [("paper", 97), ("segregated", 0)])
def test_free_and_realloc_of_foreign_memory(policy, check, tmp_path):
    """Memory the allocator never handed out (the dynamic loader's from before the
    preload; here an mmap): free leaves it, realloc moves what of it is readable into a
    new object and leaves it too."""
    stats = tmp_path / "s.json"
    proc = run("foreign", env=preload_env(policy=policy, check=check, stats=stats))
    f = fields(proc)
    assert f["realloc_zero"] == "null errno=0" and f["usable_foreign"] == "0"
    s = json.loads(stats.read_text())
    assert s["foreign_frees"] == 1 and s["foreign_reallocs"] == 4 and s["failed_allocs"] == 0


@pytest.mark.parametrize("policy", ["paper", "segregated"])
@pytest.mark.parametrize("how,says", [("free", "free(): invalid pointer"), ("realloc", "realloc(): invalid pointer")])
def test_invalid_pointer_inside_the_heap_aborts(policy, how, says):
    proc = run("invalid", how, env=preload_env(policy=policy), check=False)
    assert proc.returncode == -signal.SIGABRT
    assert proc.stderr.strip().splitlines() == [f"lifetime_alloc: {says}" + (" or double free" if how == "free" else "")]
