"""The allocator's code layout (allocator/CMakeLists.txt): the functions programs run,
listed in allocator/src/hot_text.order by allocator/tools/hot_text.py, are linked
together, so a process keeps little of the library's file resident."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import time

import pytest

from allocator.tools import hot_text
from benchmarks.servers.machine import smaps_mappings
from tests.test_allocator import LIB, built

ORDER = pathlib.Path(hot_text.__file__).resolve().parents[1] / "src" / "hot_text.order"


def ordered_sections() -> tuple[list[str], list[tuple[int, int, str]]]:
    """The order file's entries, and the (address, size, name) of those in the link map."""
    link_map = built(LIB).with_suffix(".map")
    if not link_map.exists():
        if shutil.which("ld.gold"):
            pytest.fail(f"{link_map}: no link map, though gold is installed (allocator/CMakeLists.txt)")
        pytest.skip("no gold linker: the library keeps the default layout")
    names = [line.strip() for line in ORDER.read_text().splitlines() if line.startswith(".text")]
    sections = hot_text.map_sections(link_map)
    wanted = set(names)
    found = [s for s in sections if s[2] in wanted]
    return names, found


def test_order_file_names_the_library_s_sections():
    names, found = ordered_sections()
    assert len(names) > 50
    # A stale list (functions renamed since it was written) no longer orders much:
    # regenerate it with allocator/tools/hot_text.py.
    assert len({s[2] for s in found}) >= 0.9 * len(names), "run allocator/tools/hot_text.py"
    for entry in (".text.malloc", ".text.free", ".text.calloc", ".text.realloc"):
        assert entry in names


def test_ordered_code_is_contiguous():
    _, found = ordered_sections()
    lo = min(a for a, _, _ in found)
    hi = max(a + s for a, s, _ in found)
    total = sum(s for _, s, _ in found)
    # (alignment padding between functions: at most 15 bytes each)
    assert hi - lo <= total + 16 * len(found), (hex(lo), hex(hi), total)


def library_resident_kib(lib: pathlib.Path) -> int:
    proc = subprocess.Popen(["sleep", "2"], env={"LD_PRELOAD": str(lib), "PATH": "/usr/bin:/bin"})
    try:
        time.sleep(0.5)
        return sum(m["Rss"] for m in smaps_mappings(proc.pid) if m["name"] == str(lib))
    finally:
        proc.kill()
        proc.wait()


def test_idle_program_keeps_little_of_the_library_resident():
    ordered_sections()  # (skips without gold)
    # The kernel maps a file's cached pages 64 KiB at a time around each one touched, so
    # what stays resident depends on where the mapping lands: 272-336 KiB with the order,
    # 464-500 KiB without it (of 492 KiB mapped), over 10 runs each on 6.18; 208-272 KiB
    # (8 runs) once inprocess/'s C functions that run at start were ordered too, and 208
    # in every run once the segments were 64 KiB aligned (the windows then fall on the
    # same file offsets wherever the library is mapped).
    runs = [library_resident_kib(LIB) for _ in range(3)]
    assert min(runs) > 0, f"no resident page of {LIB} found: was it preloaded?"
    assert max(runs) <= 420, runs


def test_hot_text_refuses_a_build_without_the_library(tmp_path, capsys):
    out = tmp_path / "order"
    assert hot_text.main(["--build", str(tmp_path / "nowhere"), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nowhere/allocator/liblifetime_alloc.so: not found (the library)" in err[0]
    assert not out.exists()


@pytest.mark.parametrize("what", ["missing", "empty", "corrupt manifest"])
def test_hot_text_refuses_a_model_that_is_not_an_export(tmp_path, capsys, what):
    """--model is checked first, as `lifetime run --model` checks it: one line naming it."""
    model = tmp_path / "export"
    if what != "missing":
        model.mkdir()
    if what == "corrupt manifest":
        (model / "manifest.json").write_text('{"format": ')
    out = tmp_path / "order"
    assert hot_text.main(["--model", str(model), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("hot_text: --model: ") and str(model) in err[0], err
    assert not out.exists()


def test_hot_text_refuses_a_map_that_lays_out_nothing(tmp_path, capsys):
    lib_dir = tmp_path / "allocator"
    lib_dir.mkdir()
    (lib_dir / "liblifetime_alloc.so").write_bytes(b"")
    (lib_dir / "liblifetime_alloc.map").write_text("Memory map\n truncated")
    out = tmp_path / "order"
    assert hot_text.main(["--build", str(tmp_path), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "liblifetime_alloc.map: no .text sections laid out" in err[0]
    assert not out.exists()


def test_hot_text_reads_functions_with_and_without_line_tables():
    """callgrind_annotate names a function FILE:NAME, FILE "???" where its object has no
    line table (the C++ here) and the source path where it has (inprocess/'s C): both count
    (only "???" did, so the C functions that run at every start were never ordered, and
    their 64 KiB window stayed resident in every process)."""
    lines = ["594,448 (39.35%)  ???:_ZNK3sim16TcmallocBaseline10size_classEmj [/b/liblifetime_alloc.so]",
             "     16 ( 0.00%)  /src/inprocess/src/online.c:lt_online_plugin [/b/liblifetime_alloc.so]",
             "2 ( 0.00%)  const char *lt_online_plugin(void) {"]
    got = [m and m.group(1, 2) for m in map(hot_text.COST.match, lines)]
    assert got == [("594,448", "_ZNK3sim16TcmallocBaseline10size_classEmj"), ("16", "lt_online_plugin"), None]


def test_library_needs_no_shared_libgcc():
    # A program that maps the allocator maps nothing else it would not have mapped: libgcc
    # is linked in (allocator/CMakeLists.txt; 100 KiB of libgcc_s in every process before).
    dynamic = subprocess.run(["readelf", "-d", str(built(LIB))], capture_output=True, text=True,
                             check=True).stdout
    needed = sorted(line.split("[")[1].rstrip("]") for line in dynamic.splitlines() if "(NEEDED)" in line)
    assert all(n.startswith(("libc.so", "ld-linux")) for n in needed), needed
    proc = subprocess.Popen(["sleep", "2"], env={"LD_PRELOAD": str(built(LIB)), "PATH": "/usr/bin:/bin"})
    try:
        time.sleep(0.5)
        names = {pathlib.Path(m["name"]).name for m in smaps_mappings(proc.pid)}
    finally:
        proc.kill()
        proc.wait()
    assert not any(n.startswith(("libgcc_s", "libstdc++")) for n in names), names
