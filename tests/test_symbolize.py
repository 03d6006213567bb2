"""core.symbolize against a real binary built here with g++.

The demo program prints the runtime addresses of a few functions and its own
/proc/self/maps, so the addresses are resolved through real (PIE) mappings.
DWARF inline frames: test_dwarf_inline.py; separate debug files and sysroots:
test_debug_files.py; names, module tokens and allocation sites: test_frame_names.py.
"""

import dataclasses
import os
import shutil
import subprocess

import pytest

from core import symbolize as sym
from profile_format import profile_pb2
from tests.symbolize_support import name_at, parse_run, with_path

pytestmark = pytest.mark.skipif(shutil.which("g++") is None or shutil.which("strip") is None,
                                reason="needs g++ and strip")


SOURCE = r"""
#include <cstdio>
#include <cstring>

namespace demo {
static __attribute__((noinline)) int static_helper(int x) { return x * 7 + 3; }

template <class T>
__attribute__((noinline)) T twice(T x) { return x + x; }

struct Widget {
  __attribute__((noinline)) long method(long v);
};
long Widget::method(long v) { return v ^ 0x5a5a; }

__attribute__((noinline)) void* callee() { return __builtin_return_address(0); }
__attribute__((noinline)) void* caller() {
  void* r = callee();
  asm volatile("" ::: "memory");  // no tail call: the return address stays in caller()
  return r;
}
}  // namespace demo

extern "C" __attribute__((noinline)) int exported_c(int x) { return x - 11; }

int main() {
  std::printf("static_helper %p\n", (void*)&demo::static_helper);
  std::printf("twice %p\n", (void*)&demo::twice<int>);
  std::printf("method %p\n", (void*)&demo::Widget::method);
  std::printf("exported_c %p\n", (void*)&exported_c);
  std::printf("caller %p\n", (void*)&demo::caller);
  std::printf("return_address %p\n", demo::caller());
  std::FILE* maps = std::fopen("/proc/self/maps", "r");
  char line[4096];
  while (std::fgets(line, sizeof line, maps)) std::printf("map %s", line);
  return 0;
}
"""

BUILD_ID = "0123456789abcdef0123456789abcdef01234567"
OTHER_BUILD_ID = "fedcba9876543210fedcba9876543210fedcba98"


def _compile(src, out, build_id):
    subprocess.run(["g++", "-O2", "-g", "-fPIE", "-pie", "-rdynamic",
                    f"-Wl,--build-id=0x{build_id}", "-o", str(out), str(src)],
                   check=True, capture_output=True)


@dataclasses.dataclass
class Demo:
    binary: str
    stripped: str
    rebuilt: str
    addresses: dict
    mappings: list  # profile_pb2.Mapping, executable mappings only


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    d = tmp_path_factory.mktemp("symbolize")
    src = d / "demo.cc"
    src.write_text(SOURCE)
    binary, stripped, rebuilt = d / "demo", d / "demo_stripped", d / "demo_rebuilt"
    _compile(src, binary, BUILD_ID)
    subprocess.run(["strip", "-o", str(stripped), str(binary)], check=True)
    _compile(src, rebuilt, OTHER_BUILD_ID)
    out = subprocess.run([str(binary)], check=True, capture_output=True, text=True).stdout
    addresses, mappings = parse_run(out, {str(binary): bytes.fromhex(BUILD_ID)})
    assert any(m.path == str(binary) for m in mappings), out
    return Demo(str(binary), str(stripped), str(rebuilt), addresses, mappings)


def test_names_and_demangling(demo):
    s = sym.Symbolizer(demo.mappings, cache=sym.ModuleCache())
    a = demo.addresses
    assert name_at(s, a["static_helper"]) == "demo::static_helper(int)"  # .symtab only (local)
    assert name_at(s, a["twice"]) == "int demo::twice<int>(int)"
    assert name_at(s, a["method"]) == "demo::Widget::method(long)"
    assert name_at(s, a["exported_c"]) == "exported_c"
    frame = s.symbolize_address(a["method"] + 1, False)[0]
    assert frame.symbol == "_ZN4demo6Widget6methodEl"
    assert frame.symbol_offset == 1 and frame.module == demo.binary and frame.resolved
    assert s.module_status()[demo.binary].status == sym.OK


def test_return_addresses_are_looked_up_one_byte_earlier(demo):
    s = sym.Symbolizer(demo.mappings, cache=sym.ModuleCache())
    ret = demo.addresses["return_address"]
    assert name_at(s, ret, is_return_address=True) == "demo::caller()"
    # A function's first byte, read as a return address, belongs to whatever precedes it.
    assert name_at(s, demo.addresses["caller"], is_return_address=False) == "demo::caller()"
    assert name_at(s, demo.addresses["caller"], is_return_address=True) != "demo::caller()"
    # symbolize_stack: the leaf is exact unless told otherwise, the rest are return addresses.
    stack = [demo.addresses["caller"], ret]
    assert [f.function for f in s.symbolize_stack(stack)] == ["demo::caller()"] * 2
    leaf_ret = s.symbolize_stack([ret], leaf_is_return_address=True)
    assert leaf_ret[0].function == "demo::caller()"


def test_stripped_binary_gives_module_tokens_and_keeps_dynsym(demo):
    mappings = with_path(demo.mappings, demo.binary, demo.stripped)
    s = sym.Symbolizer(mappings, cache=sym.ModuleCache())
    token = "<demo_stripped+?>"
    assert name_at(s, demo.addresses["static_helper"]) == token
    assert name_at(s, demo.addresses["twice"]) == "int demo::twice<int>(int)"  # -rdynamic: .dynsym
    assert name_at(s, demo.addresses["exported_c"]) == "exported_c"
    assert s.module_status()[demo.stripped].status == sym.OK  # strip keeps the build id
    for frame in s.symbolize_stack(list(demo.addresses.values())):
        assert "0x" not in frame.function


def test_build_id_mismatch_is_reported_not_raised(demo):
    # The same mappings, but the file on disk is a rebuild with another build id.
    mappings = with_path(demo.mappings, demo.binary, demo.rebuilt)
    s = sym.Symbolizer(mappings, cache=sym.ModuleCache())
    assert name_at(s, demo.addresses["method"]) == "<demo_rebuilt+?>"
    status = s.module_status()[demo.rebuilt]
    assert status.status == sym.BUILD_ID_MISMATCH and not status.usable
    assert status.expected_build_id == BUILD_ID and status.actual_build_id == OTHER_BUILD_ID
    # Other modules are unaffected.
    libc = [m.path for m in mappings if os.path.basename(m.path).startswith("libc.so")]
    if libc:
        assert s.check_all_modules()[libc[0]].status == sym.UNVERIFIED
    # Opting in symbolizes anyway (same source, same layout here).
    loose = sym.Symbolizer(mappings, cache=sym.ModuleCache(), allow_build_id_mismatch=True)
    assert name_at(loose, demo.addresses["method"]) == "demo::Widget::method(long)"


def test_missing_file_unrecorded_build_id_and_unmapped(demo):
    missing = with_path(demo.mappings, demo.binary, demo.binary + ".gone")
    s = sym.Symbolizer(missing, cache=sym.ModuleCache())
    assert name_at(s, demo.addresses["method"]) == "<demo.gone+?>"
    assert s.module_status()[demo.binary + ".gone"].status == sym.MISSING

    unrecorded = with_path(demo.mappings, demo.binary, demo.binary, build_id=b"")
    s = sym.Symbolizer(unrecorded, cache=sym.ModuleCache())
    assert name_at(s, demo.addresses["method"]) == "demo::Widget::method(long)"
    assert s.module_status()[demo.binary].status == sym.UNVERIFIED

    assert name_at(s, 0x10) == sym.UNKNOWN_MODULE_TOKEN
    not_elf = with_path(demo.mappings, demo.binary, os.path.dirname(demo.binary) + "/demo.cc")
    s = sym.Symbolizer(not_elf, cache=sym.ModuleCache())
    assert name_at(s, demo.addresses["method"]) == "<demo.cc+?>"
    assert s.module_status()[os.path.dirname(demo.binary) + "/demo.cc"].status == sym.NOT_ELF


def test_modules_load_once_and_addresses_are_memoized(demo):
    cache = sym.ModuleCache()
    s1 = sym.Symbolizer(demo.mappings, cache=cache)
    s2 = sym.Symbolizer(demo.mappings, cache=cache)
    a = demo.addresses["method"]
    assert name_at(s1, a) == name_at(s2, a)
    module = cache.get(demo.binary)
    assert module is cache.get(demo.binary)
    before = len(module._memo)
    s1.symbolize_stack([a, a + 1, a + 1])  # nothing new: a+1 as a return address is a
    assert len(module._memo) == before
    s2.symbolize_stack([a + 1])  # a+1 as the (exact) leaf is new, to the module's memo too
    assert len(module._memo) == before + 1


def test_overlapping_mappings_prefer_the_latest():
    m_old = profile_pb2.Mapping(id=1, start=0x1000, limit=0x9000, path="/old.so")
    m_new = profile_pb2.Mapping(id=2, start=0x2000, limit=0x3000, path="/new.so")
    s = sym.Symbolizer([m_new, m_old], cache=sym.ModuleCache())
    assert s.mapping_for(0x2800).path == "/new.so"
    assert s.mapping_for(0x3800).path == "/old.so"
    assert s.mapping_for(0x9000) is None


def test_a_file_rebuilt_in_place_is_read_again(demo, tmp_path):
    path = tmp_path / "app"
    shutil.copy(demo.binary, path)
    cache = sym.ModuleCache()
    assert cache.get(str(path)).build_id_hex == BUILD_ID
    shutil.copy(demo.rebuilt, path)
    os.utime(path, ns=(1, 1))  # a different mtime even on a coarse clock
    assert cache.get(str(path)).build_id_hex == OTHER_BUILD_ID


def test_a_mapping_that_names_a_fifo_is_refused_without_blocking(tmp_path):
    import threading

    fifo = tmp_path / "libfifo.so"
    os.mkfifo(fifo)
    result = []
    reader = threading.Thread(target=lambda: result.append(sym.ModuleCache().get(str(fifo))),
                              daemon=True)
    reader.start()
    reader.join(timeout=30)  # before: open() blocked until a writer came
    assert result, "the symbolizer blocked on a fifo"
    status, detail = result[0]
    assert status == sym.MISSING and "is a fifo, not a regular file" in detail
