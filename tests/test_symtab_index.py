"""The in-process symbolizer's index (inprocess/src/symtab.c) against the offline symbol
tables (core/symbolize/), on every function symbol of the loaded modules.

The index copies what lookups need out of each module's ELF file (and its separate debug
file) -- compact entries and front-coded names -- and unmaps the files: a process with
a model pays for the symbols it can name, not for the file pages the index read
(issue 32).  tests/test_online_symbolizer.py checks real stacks; these tests check the
index itself at every symbol's edges (start, last byte, end, middle) of libc (named
through its debug file where /usr/lib/debug has it), ld.so, libm, libstdc++ (long
mangled names, front-coded) and a pyenv libpython (.symtab and .dynsym), and that no
file the index read stays mapped.
"""

from __future__ import annotations

import os
import pathlib
import random
import shutil
import subprocess
import threading

import pytest

from core.symbolize.elf_module import ElfModule
from core.symbolize.frames import module_token

REPO = pathlib.Path(__file__).resolve().parents[1]
PROBE = REPO / "build" / "tests" / "native" / "lifetime_symtab_probe"
NAME_CAP = 511  # the driver keeps this many bytes of a frame string
PER_MODULE = 3000  # symbols probed per module (all of them where fewer)


def _libraries() -> list[str]:
    libs = []
    for name in ("libstdc++.so.6", "libm.so.6"):
        for d in ("/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib64"):
            if os.path.exists(os.path.join(d, name)):
                libs.append(os.path.join(d, name))
                break
    pyenv = shutil.which("pyenv")
    if pyenv:
        prefix = subprocess.run([pyenv, "prefix", "3.11.7"], capture_output=True, text=True)
        lib = pathlib.Path(prefix.stdout.strip()) / "lib" / "libpython3.11.so.1.0"
        if prefix.returncode == 0 and lib.exists():
            libs.append(str(lib))
    return libs


@pytest.fixture(scope="module")
def probe():
    if not PROBE.exists():
        pytest.fail(f"{PROBE} is not built: run `make native`")
    proc = subprocess.Popen([str(PROBE), *_libraries()], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    header = []
    for line in proc.stdout:
        if line == "ready\n":
            break
        header.append(line.rstrip("\n").split("\t"))
    yield proc, header
    proc.kill()  # (a failed test leaves answers unread: never wait on the pipes)
    proc.wait(timeout=30)


def _expected(module: ElfModule, path: str, vaddr: int) -> tuple[int, str]:
    hit = module.function_at(vaddr)
    return (1, hit[0]) if hit else (0, module_token(path))


def _same(online: str, offline: str) -> bool:
    return online == offline or (len(online.encode()) == NAME_CAP
                                 and offline.encode().startswith(online.encode()))


def test_the_index_leaves_no_file_mapped(probe):
    """Every file the index read (modules, debug files) is unmapped after indexing."""
    _, header = probe
    left = [row[1] for row in header if row[0] == "mapped-after-index"]
    assert left == []
    modules = [row[1] for row in header if row[0] == "module"]
    assert any("libc.so" in m for m in modules) and len(modules) >= 4, modules


def test_every_symbol_edge_names_as_offline(probe):
    """For each loaded module, at each function symbol's start, last byte, end and
    middle (return address = vaddr + 1 + bias) the frame string, resolved flag and
    module equal the offline symbolizer's (ElfModule.function_at: .symtab or the debug
    file's, then .dynsym; innermost wins)."""
    proc, header = probe
    rng = random.Random(5)
    cases = []
    for row in header:
        if row[0] != "module":
            continue
        path, bias = row[1], int(row[2], 16)
        module = ElfModule(path)
        items = [it for table in (module.symtab, module.dynsym) if table is not None
                 for it in table._items]
        if len(items) > PER_MODULE:
            items = rng.sample(items, PER_MODULE)
        vaddrs = sorted({v for start, size, _, _ in items
                         for v in (start, start + size - 1, start + size, start + size // 2)})
        cases += [(path, module, bias, v) for v in vaddrs]
    assert len(cases) > 5000
    # written by a thread: the answers fill the pipe while the questions still go in
    writer = threading.Thread(target=lambda: (proc.stdin.write(
        "".join(f"{bias + v + 1:x}\n" for _, _, bias, v in cases)), proc.stdin.flush()))
    writer.start()
    resolved = 0
    for path, module, bias, v in cases:
        got = proc.stdout.readline().rstrip("\n").split("\t", 2)
        want_resolved, want = _expected(module, path, v)
        assert got[1] == os.path.basename(path), (path, hex(v), got)
        assert int(got[0]) == want_resolved and _same(got[2], want), (path, hex(v), got, want)
        resolved += want_resolved
    writer.join()
    assert resolved > len(cases) // 2
