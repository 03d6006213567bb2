"""pipeline.symbolize against a real binary built here with g++.

The demo program prints the runtime addresses of a few functions and its own
/proc/self/maps, so the addresses are resolved through real (PIE) mappings.
"""

import dataclasses
import json
import os
import pathlib
import shutil
import subprocess

import pytest

from lifetime.errors import UsageError
from pipeline import symbolize as sym
from pipeline.symbolize.dwarf_inline import DwarfInlines
from profiler_proto import profile_pb2

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


def _parse_run(output, build_ids):
    addresses, mappings = {}, []
    for line in output.splitlines():
        if line.startswith("map "):
            fields = line[4:].split(maxsplit=5)
            if len(fields) < 6 or "x" not in fields[1]:
                continue
            start, limit = (int(x, 16) for x in fields[0].split("-"))
            path = fields[5].strip()
            mappings.append(profile_pb2.Mapping(
                id=len(mappings) + 1, start=start, limit=limit, file_offset=int(fields[2], 16),
                path=path, build_id=build_ids.get(path, b"")))
        else:
            name, value = line.split()
            addresses[name] = int(value, 16)
    return addresses, mappings


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
    addresses, mappings = _parse_run(out, {str(binary): bytes.fromhex(BUILD_ID)})
    assert any(m.path == str(binary) for m in mappings), out
    return Demo(str(binary), str(stripped), str(rebuilt), addresses, mappings)


def _with_path(mappings, old, new, build_id=None):
    out = []
    for m in mappings:
        m2 = profile_pb2.Mapping()
        m2.CopyFrom(m)
        if m.path == old:
            m2.path = new
            if build_id is not None:
                m2.build_id = build_id
        out.append(m2)
    return out


def _name(symbolizer, address, is_return_address=False):
    [frame] = symbolizer.symbolize_address(address, is_return_address)
    return frame.function


def test_names_and_demangling(demo):
    s = sym.Symbolizer(demo.mappings, cache=sym.ModuleCache())
    a = demo.addresses
    assert _name(s, a["static_helper"]) == "demo::static_helper(int)"  # .symtab only (local)
    assert _name(s, a["twice"]) == "int demo::twice<int>(int)"
    assert _name(s, a["method"]) == "demo::Widget::method(long)"
    assert _name(s, a["exported_c"]) == "exported_c"
    frame = s.symbolize_address(a["method"] + 1, False)[0]
    assert frame.symbol == "_ZN4demo6Widget6methodEl"
    assert frame.symbol_offset == 1 and frame.module == demo.binary and frame.resolved
    assert s.module_status()[demo.binary].status == sym.OK


def test_return_addresses_are_looked_up_one_byte_earlier(demo):
    s = sym.Symbolizer(demo.mappings, cache=sym.ModuleCache())
    ret = demo.addresses["return_address"]
    assert _name(s, ret, is_return_address=True) == "demo::caller()"
    # A function's first byte, read as a return address, belongs to whatever precedes it.
    assert _name(s, demo.addresses["caller"], is_return_address=False) == "demo::caller()"
    assert _name(s, demo.addresses["caller"], is_return_address=True) != "demo::caller()"
    # symbolize_stack: the leaf is exact unless told otherwise, the rest are return addresses.
    stack = [demo.addresses["caller"], ret]
    assert [f.function for f in s.symbolize_stack(stack)] == ["demo::caller()"] * 2
    leaf_ret = s.symbolize_stack([ret], leaf_is_return_address=True)
    assert leaf_ret[0].function == "demo::caller()"


def test_stripped_binary_gives_module_tokens_and_keeps_dynsym(demo):
    mappings = _with_path(demo.mappings, demo.binary, demo.stripped)
    s = sym.Symbolizer(mappings, cache=sym.ModuleCache())
    token = "<demo_stripped+?>"
    assert _name(s, demo.addresses["static_helper"]) == token
    assert _name(s, demo.addresses["twice"]) == "int demo::twice<int>(int)"  # -rdynamic: .dynsym
    assert _name(s, demo.addresses["exported_c"]) == "exported_c"
    assert s.module_status()[demo.stripped].status == sym.OK  # strip keeps the build id
    for frame in s.symbolize_stack(list(demo.addresses.values())):
        assert "0x" not in frame.function


def test_build_id_mismatch_is_reported_not_raised(demo):
    # The same mappings, but the file on disk is a rebuild with another build id.
    mappings = _with_path(demo.mappings, demo.binary, demo.rebuilt)
    s = sym.Symbolizer(mappings, cache=sym.ModuleCache())
    assert _name(s, demo.addresses["method"]) == "<demo_rebuilt+?>"
    status = s.module_status()[demo.rebuilt]
    assert status.status == sym.BUILD_ID_MISMATCH and not status.usable
    assert status.expected_build_id == BUILD_ID and status.actual_build_id == OTHER_BUILD_ID
    # Other modules are unaffected.
    libc = [m.path for m in mappings if os.path.basename(m.path).startswith("libc.so")]
    if libc:
        assert s.check_all_modules()[libc[0]].status == sym.UNVERIFIED
    # Opting in symbolizes anyway (same source, same layout here).
    loose = sym.Symbolizer(mappings, cache=sym.ModuleCache(), allow_build_id_mismatch=True)
    assert _name(loose, demo.addresses["method"]) == "demo::Widget::method(long)"


def test_missing_file_unrecorded_build_id_and_unmapped(demo):
    missing = _with_path(demo.mappings, demo.binary, demo.binary + ".gone")
    s = sym.Symbolizer(missing, cache=sym.ModuleCache())
    assert _name(s, demo.addresses["method"]) == "<demo.gone+?>"
    assert s.module_status()[demo.binary + ".gone"].status == sym.MISSING

    unrecorded = _with_path(demo.mappings, demo.binary, demo.binary, build_id=b"")
    s = sym.Symbolizer(unrecorded, cache=sym.ModuleCache())
    assert _name(s, demo.addresses["method"]) == "demo::Widget::method(long)"
    assert s.module_status()[demo.binary].status == sym.UNVERIFIED

    assert _name(s, 0x10) == sym.UNKNOWN_MODULE_TOKEN
    not_elf = _with_path(demo.mappings, demo.binary, os.path.dirname(demo.binary) + "/demo.cc")
    s = sym.Symbolizer(not_elf, cache=sym.ModuleCache())
    assert _name(s, demo.addresses["method"]) == "<demo.cc+?>"
    assert s.module_status()[os.path.dirname(demo.binary) + "/demo.cc"].status == sym.NOT_ELF


def test_modules_load_once_and_addresses_are_memoized(demo):
    cache = sym.ModuleCache()
    s1 = sym.Symbolizer(demo.mappings, cache=cache)
    s2 = sym.Symbolizer(demo.mappings, cache=cache)
    a = demo.addresses["method"]
    assert _name(s1, a) == _name(s2, a)
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


# ---------------------------------------------------------------- names and stripping

@pytest.mark.parametrize("demangled, qualified", [
    ("malloc", "malloc"),
    ("operator new(unsigned long)", "operator new"),
    ("operator new[](unsigned long, std::nothrow_t const&)", "operator new[]"),
    ("operator delete(void*, unsigned long, std::align_val_t)", "operator delete"),
    ("void std::vector<int, std::allocator<int> >::_M_realloc_insert<int const&>("
     "__gnu_cxx::__normal_iterator<int*, std::vector<int, std::allocator<int> > >, int const&)",
     "std::vector<int, std::allocator<int> >::_M_realloc_insert<int const&>"),
    ("std::vector<int, std::allocator<int> > app::make<int>(int) [clone .isra.0] [clone .cold]",
     "app::make<int>"),
    ("(anonymous namespace)::Helper::run(int)", "(anonymous namespace)::Helper::run"),
    ("foo(int)::{lambda(int)#2}::operator()(int) const", "foo(int)::{lambda(int)#2}::operator()"),
    ("bool std::operator< <char>(std::string const&, char const*)", "std::operator< <char>"),
    ("X::operator<<(int)", "X::operator<<"),
    ("X::operator bool() const", "X::operator bool"),
    ("proxy::cache::MakeCacheKey[abi:cxx11](proxy::http::ParsedRequest const&)",
     "proxy::cache::MakeCacheKey[abi:cxx11]"),
    ("unsigned long foo::bar<int>()", "foo::bar<int>"),
    ("operator_count(int)", "operator_count"),
    # inline frames named from DWARF without a linkage name
    ("proxy::Janitor::Run()::{lambda}::operator()", "proxy::Janitor::Run()::{lambda}::operator()"),
    ("util::EveryPeriod<proxy::Janitor::Run()::<lambda(int64_t)> >",
     "util::EveryPeriod<proxy::Janitor::Run()::<lambda(int64_t)> >"),
])
def test_qualified_name(demangled, qualified):
    assert sym.qualified_name(demangled) == qualified


def _f(function, module="/usr/bin/app", symbol="x"):
    return sym.SymbolizedFrame(0, function, module, 0, symbol)


LIBC = "/usr/lib/x86_64-linux-gnu/libc.so.6"
LIBSTDCXX = "/usr/lib/x86_64-linux-gnu/libstdc++.so.6"
SAMPLER = "/opt/lifetime/lib/liblifetime_sampler.so"


def test_strip_allocator_frames_rules():
    stack = [
        _f("<liblifetime_sampler.so+?>", SAMPLER, None),      # rule 1, unnamed
        _f("lifetime::sampler::Record(unsigned long)", SAMPLER),  # rule 1, named
        _f("malloc", LIBC),                                    # rule 2
        _f("__libc_malloc", LIBC),                             # rule 2 (alias)
        _f("operator new(unsigned long)", LIBSTDCXX),          # rule 2
        _f("std::__new_allocator<char>::allocate(unsigned long, void const*)"),  # rule 3
        _f("std::allocator_traits<std::allocator<int> >::allocate(std::allocator<int>&, "
           "unsigned long)"),
        _f("void std::vector<int, std::allocator<int> >::_M_realloc_insert<int>("
           "__gnu_cxx::__normal_iterator<int*, std::vector<int, std::allocator<int> > >, int&&)"),
        _f("__gnu_cxx::new_allocator<int>::allocate(unsigned long, void const*)"),
        _f("<libc.so.6+?>", LIBC, None),                        # rule 4
        _f("std::vector<int, std::allocator<int> > app::make<int>(int)"),  # the site
        _f("std::thread::_M_start_thread(...)", LIBSTDCXX),   # below the site: kept
        _f("main"),
    ]
    rules = [sym.allocator_rule(f) for f in stack]
    assert rules == ["sampler", "sampler", "allocator", "allocator", "allocator", "std", "std",
                     "std", "std", "runtime", None, "std", None]
    rest = sym.strip_allocator_frames(stack)
    assert [f.function for f in rest][:2] == [
        "std::vector<int, std::allocator<int> > app::make<int>(int)",
        "std::thread::_M_start_thread(...)"]
    assert sym.allocation_site(stack).function.endswith("app::make<int>(int)")


def test_strip_keeps_unnamed_application_frames_and_handles_empty():
    app_token = _f("<app+?>", "/usr/bin/app", None)
    assert sym.strip_allocator_frames([_f("malloc", LIBC), app_token]) == [app_token]
    assert sym.allocation_site([_f("malloc", LIBC), _f("operator new[](unsigned long)")]) is None
    assert sym.allocation_site([]) is None
    # operator delete and the aligned / nothrow overloads count as the allocator too.
    for name in ("operator delete(void*)", "operator new(unsigned long, std::align_val_t)",
                 "posix_memalign", "aligned_alloc", "reallocarray", "pvalloc", "valloc",
                 "memalign", "calloc", "realloc", "free", "strdup"):
        assert sym.allocator_rule(_f(name, LIBC)) == "allocator", name


MODULE_TOKEN_VECTORS = json.loads(
    (pathlib.Path(__file__).parent / "data" / "module_token_vectors.json").read_text("utf-8"))


def test_module_token():
    assert sym.module_token("/usr/lib/libfoo.so.1") == "<libfoo+?>"
    assert sym.module_token("/usr/lib/x86_64-linux-gnu/libfoo-3.38.so.0.0.0") == \
        sym.module_token("/usr/lib/x86_64-linux-gnu/libfoo-3.40.so.0.0.0") == "<libfoo+?>"
    assert sym.module_token("[vdso]") == "<[vdso]+?>"
    assert sym.module_token("") == sym.UNKNOWN_MODULE_TOKEN


@pytest.mark.parametrize("case", MODULE_TOKEN_VECTORS["cases"], ids=lambda c: c["path"])
def test_module_token_vectors(case):
    """The shared vectors (the sampler's C mirror is checked against the same file)."""
    assert sym.module_token(case["path"]) == case["token"]


def test_unnamed_frames_carry_no_version_and_runtime_stripping_still_matches():
    """Two releases of a library give one token; rule 4 (unnamed frames in libc,
    libstdc++, ...) still goes by the module's basename, not by the token."""
    old = "/usr/lib/x86_64-linux-gnu/libglib-2.0.so.0.7200.4"
    new = "/usr/lib/x86_64-linux-gnu/libglib-2.0.so.0.7400.6"
    m_old = profile_pb2.Mapping(id=1, start=0x10000, limit=0x20000, path=old)
    m_new = profile_pb2.Mapping(id=1, start=0x10000, limit=0x20000, path=new)
    a = sym.Symbolizer([m_old], cache=sym.ModuleCache()).symbolize_address(0x10100, True)
    b = sym.Symbolizer([m_new], cache=sym.ModuleCache()).symbolize_address(0x10100, True)
    assert [f.function for f in a] == [f.function for f in b] == ["<libglib+?>"]
    for path in ("/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/libc-2.31.so",
                 "/usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.30",
                 "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
                 "/usr/lib/x86_64-linux-gnu/libgcc_s.so.1"):
        frame = sym.SymbolizedFrame(0, sym.module_token(path), path, 0, None)
        assert sym.allocator_rule(frame) == "runtime", path
    app = "/usr/lib/x86_64-linux-gnu/libcrypto.so.3"
    assert sym.allocator_rule(sym.SymbolizedFrame(0, sym.module_token(app), app, 0)) is None


def test_a_file_rebuilt_in_place_is_read_again(demo, tmp_path):
    path = tmp_path / "app"
    shutil.copy(demo.binary, path)
    cache = sym.ModuleCache()
    assert cache.get(str(path)).build_id_hex == BUILD_ID
    shutil.copy(demo.rebuilt, path)
    os.utime(path, ns=(1, 1))  # a different mtime even on a coarse clock
    assert cache.get(str(path)).build_id_hex == OTHER_BUILD_ID


# ---------------------------------------------------------------- DWARF inline frames

INLINE_SOURCE = os.path.join(os.path.dirname(__file__), "native", "inline_frames.cc")

# Return address of the opaque_alloc call in each noinline caller -> expected frames,
# innermost first: (function, inlined).
INLINE_EXPECTED = {
    "caller": [("inl::make_buffer(unsigned long)", True),
               ("inl::caller(unsigned long)", False)],
    "template_caller": [("int* inl::make_array<int>(unsigned long)", True),
                        ("inl::template_caller(unsigned long)", False)],
    "nested_caller": [("inl::make_buffer(unsigned long)", True),
                      ("inl::Pool::grab(unsigned long)", True),
                      ("inl::nested_caller(unsigned long)", False)],
}


@dataclasses.dataclass
class InlineBuild:
    binary: str
    returns: dict   # caller name -> runtime return address (inside the inlined body)
    mappings: list  # profile_pb2.Mapping, executable mappings only


@pytest.fixture(scope="module")
def inline_builds(tmp_path_factory):
    """The fixture program built -O2 with DWARF 5 (-g), DWARF 4, and without -g; plus
    copies of the DWARF 5 build stripped and without .debug_aranges (same addresses)."""
    d = tmp_path_factory.mktemp("inline")
    builds = {}
    for variant, flags in (("dwarf5", ["-g"]), ("dwarf4", ["-gdwarf-4"]), ("nodebug", [])):
        binary = str(d / f"inline_{variant}")
        subprocess.run(["g++", "-O2", *flags, "-fPIE", "-pie", "-o", binary, INLINE_SOURCE],
                       check=True, capture_output=True)
        out = subprocess.run([binary], check=True, capture_output=True, text=True).stdout
        returns, mappings = _parse_run(out, {})
        assert set(returns) == set(INLINE_EXPECTED), out
        builds[variant] = InlineBuild(binary, returns, mappings)
    base = builds["dwarf5"]
    copies = {"stripped": ["strip", "-o", "{copy}", base.binary]}
    if shutil.which("objcopy") is not None:
        copies["noaranges"] = ["objcopy", "--remove-section=.debug_aranges", base.binary,
                               "{copy}"]
    for variant, command in copies.items():
        copy = str(d / f"inline_{variant}")
        subprocess.run([copy if arg == "{copy}" else arg for arg in command], check=True)
        builds[variant] = InlineBuild(copy, base.returns,
                                      _with_path(base.mappings, base.binary, copy))
    return builds


def _frames(symbolizer, address):
    return [(f.function, f.inlined) for f in symbolizer.symbolize_address(address, True)]


@pytest.mark.parametrize("variant", ["dwarf5", "dwarf4", "noaranges"])
def test_inline_frames_from_dwarf(inline_builds, variant):
    if variant not in inline_builds:
        pytest.skip("needs objcopy")
    build = inline_builds[variant]
    cache = sym.ModuleCache()
    s = sym.Symbolizer(build.mappings, cache=cache)
    for caller, expected in INLINE_EXPECTED.items():
        ret = build.returns[caller]
        assert _frames(s, ret) == expected, caller
        frames = s.symbolize_address(ret, True)
        # One address, one module offset; only the physical frame has a symbol offset.
        assert {(f.address, f.module, f.module_offset) for f in frames} == {
            (ret, build.binary, frames[-1].module_offset)}
        assert all(f.resolved for f in frames)
        assert [f.symbol_offset is None for f in frames] == [f.inlined for f in frames]
        assert frames[-1].symbol_offset > 0
    make_buffer = s.symbolize_address(build.returns["caller"], True)[0]
    assert make_buffer.symbol == "_ZN3inl11make_bufferEm"  # DW_AT_linkage_name, raw
    # symbolize_stack flattens: every address's frames, innermost first, in stack order.
    stack = [build.returns["nested_caller"], build.returns["template_caller"]]
    assert [(f.function, f.inlined) for f in s.symbolize_stack(stack, True)] == \
        INLINE_EXPECTED["nested_caller"] + INLINE_EXPECTED["template_caller"]
    module = cache.get(build.binary)
    assert module.has_dwarf and module.dwarf_error == ""
    if variant == "noaranges":  # found the unit by reading units' own ranges
        assert module._dwarf._aranges is None and len(module._dwarf._unit_spans) > 0


def test_no_inline_frames_without_dwarf_or_when_off(inline_builds):
    # Built without -g: one frame per address, and no DWARF machinery at all.
    build = inline_builds["nodebug"]
    cache = sym.ModuleCache()
    s = sym.Symbolizer(build.mappings, cache=cache)
    for caller, expected in INLINE_EXPECTED.items():
        assert _frames(s, build.returns[caller]) == [expected[-1]]
    module = cache.get(build.binary)
    assert not module.has_dwarf and module._dwarf is None and not module._inline_memo
    # Stripped: the noinline callers are .symtab-only, so module tokens, one frame each.
    build = inline_builds["stripped"]
    s = sym.Symbolizer(build.mappings, cache=sym.ModuleCache())
    for caller in INLINE_EXPECTED:
        assert _frames(s, build.returns[caller]) == [("<inline_stripped+?>", False)]
    assert not s.cache.get(build.binary).has_dwarf
    # With DWARF but inline_frames=False: the physical frame alone.
    build = inline_builds["dwarf5"]
    s = sym.Symbolizer(build.mappings, cache=sym.ModuleCache(), inline_frames=False)
    for caller, expected in INLINE_EXPECTED.items():
        assert _frames(s, build.returns[caller]) == [expected[-1]]
    # A module whose .debug_info is over max_dwarf_bytes is not read.
    cache = sym.ModuleCache(max_dwarf_bytes=64)
    s = sym.Symbolizer(build.mappings, cache=cache)
    assert _frames(s, build.returns["caller"]) == [INLINE_EXPECTED["caller"][-1]]
    module = cache.get(build.binary)
    assert not module.has_dwarf and "max_dwarf_bytes" in module.dwarf_error


def _shifted(mappings, path, delta):
    """The mappings with path's loaded delta bytes higher (another process, ASLR)."""
    out = []
    for m in mappings:
        m2 = profile_pb2.Mapping()
        m2.CopyFrom(m)
        if m.path == path:
            m2.start, m2.limit = m.start + delta, m.limit + delta
        out.append(m2)
    return out


def test_inline_chains_are_memoized_per_module(inline_builds, monkeypatch):
    calls = []
    real_chain = DwarfInlines.chain

    def counting_chain(self, vaddr):
        calls.append(vaddr)
        return real_chain(self, vaddr)

    monkeypatch.setattr(DwarfInlines, "chain", counting_chain)
    build = inline_builds["dwarf5"]
    cache = sym.ModuleCache()
    # Two profiles of the same binary, loaded at different addresses (ASLR).
    delta = 0x1000_0000
    s1 = sym.Symbolizer(build.mappings, cache=cache)
    s2 = sym.Symbolizer(_shifted(build.mappings, build.binary, delta), cache=cache)
    ret = build.returns["nested_caller"]
    f1 = s1.symbolize_address(ret, True)
    f2 = s2.symbolize_address(ret + delta, True)
    assert len(calls) == 1  # the DWARF work was done once, for the module
    assert [(f.function, f.inlined, f.symbol) for f in f1] == \
        [(f.function, f.inlined, f.symbol) for f in f2]
    assert {f.address for f in f2} == {ret + delta}
    module = cache.get(build.binary)
    assert list(module._inline_memo) == calls
    s1.symbolize_stack([ret, ret], leaf_is_return_address=True)
    s2.symbolize_stack([ret + delta], leaf_is_return_address=True)
    assert len(calls) == 1
    # A fresh cache is a fresh module: the work is done again.
    sym.Symbolizer(build.mappings, cache=sym.ModuleCache()).symbolize_address(ret, True)
    assert len(calls) == 2


def test_inline_frames_are_thread_safe(inline_builds):
    import concurrent.futures

    build = inline_builds["dwarf4"]
    cache = sym.ModuleCache()
    module = cache.get(build.binary)
    # Every byte of the callers' code, from several threads at once, on one module.
    addresses = []
    for caller in INLINE_EXPECTED:
        vaddr = module.offset_to_vaddr(
            sym.Symbolizer(build.mappings, cache=cache).symbolize_address(
                build.returns[caller], True)[-1].module_offset)
        name, raw, start = module.function_at(vaddr)
        addresses.extend(range(start, vaddr + 8))
    alone = sym.ElfModule(build.binary)
    serial = {a: alone.inlined_at(a) for a in addresses}

    def work(k):
        return {a: module.inlined_at(a) for a in addresses[k::3] + addresses}

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        for result in pool.map(work, range(4)):
            assert result == {a: serial[a] for a in result}
    assert any(serial.values())


def test_damaged_or_replaced_dwarf_is_reported_not_raised(inline_builds, tmp_path):
    from elftools.elf.elffile import ELFFile

    build = inline_builds["dwarf5"]
    damaged = tmp_path / "damaged"
    shutil.copy(build.binary, damaged)
    with open(damaged, "rb") as f:
        section = ELFFile(f).get_section_by_name(".debug_info")
        offset, size = section["sh_offset"], section["sh_size"]
    with open(damaged, "r+b") as f:
        f.seek(offset + 12)  # keep the first unit header; garble its DIEs
        f.write(b"\xff" * (size - 12))
    mappings = _with_path(build.mappings, build.binary, str(damaged))
    cache = sym.ModuleCache()
    s = sym.Symbolizer(mappings, cache=cache)
    for caller, expected in INLINE_EXPECTED.items():
        assert _frames(s, build.returns[caller]) == [expected[-1]]
    assert cache.get(str(damaged)).dwarf_error

    # A file replaced after its symbols were read: its DWARF is not trusted.
    replaced = tmp_path / "replaced"
    shutil.copy(build.binary, replaced)
    module = sym.ElfModule(str(replaced))
    os.utime(replaced, ns=(1, 1))
    assert module.inlined_at(0x1000) == ()
    assert "changed" in module.dwarf_error and not module.has_dwarf


def test_strip_allocator_frames_with_inline_frames():
    def inl(function, address, module="/usr/bin/app"):
        return sym.SymbolizedFrame(address, function, module, 0, "x", None, inlined=True)

    def phys(function, address, module="/usr/bin/app"):
        return sym.SymbolizedFrame(address, function, module, 0, "x", 4)

    # Code inlined into the allocator goes with it; then std:: inlined frames go one by
    # one; an application function inlined into its caller is the site.
    stack = [inl("tcache_get", 1, LIBC), inl("checked_request2size", 1, LIBC),
             phys("malloc", 1, LIBC),
             inl("std::__new_allocator<int>::allocate(unsigned long, void const*)", 2),
             inl("app::Pool::grab(unsigned long)", 2), phys("app::f()", 2), phys("main", 3)]
    assert [f.function for f in sym.strip_allocator_frames(stack)] == [
        "app::Pool::grab(unsigned long)", "app::f()", "main"]
    # An inlined frame above an application frame is kept even when unnamed by rules.
    assert sym.allocation_site([inl("helper", 5), phys("app::g()", 5)]).function == "helper"
    # A lambda body inlined into std::function's invoker is its own site now.
    lam = inl("app::f()::{lambda}::operator()", 7)
    stack = [phys("operator new(unsigned long)", 6, LIBSTDCXX), lam,
             phys("std::_Function_handler<void (), app::f()::{lambda()#1}>::_M_invoke("
                  "std::_Any_data const&)", 7)]
    assert sym.allocation_site(stack) is lam
    # Inlined frames above an allocator frame at another address are not its own.
    stack = [phys("malloc", 8, LIBC), inl("helper", 9), phys("free", 10, LIBC)]
    assert sym.allocation_site(stack).function == "helper"


# ---------------------------------------------------------------- separate debug files

DEBUG_SOURCE = r"""
#include <stdio.h>
#include <stdlib.h>
#define NOINLINE __attribute__((noinline, noclone))
static NOINLINE int static_alpha(int x) { volatile int v = x; return v * 3 + 1; }
int NOINLINE exported_fn(int x) { volatile int v = x; return v - 5; }
static NOINLINE long static_beta(long x) { volatile long v = x; return v ^ 0x77; }
static NOINLINE void *static_gamma(size_t n) { return malloc(n + (size_t)static_alpha(1)); }
int main(int argc, char **argv) {
  (void)argv;
  printf("%d %ld %p\n", exported_fn(argc), static_beta(argc), static_gamma(argc));
  return 0;
}
"""
DEBUG_BUILD_ID = "5eed00000000000000000000000000000000d00d"
DEBUG_OTHER_BUILD_ID = "5eed00000000000000000000000000000000beef"
STATIC_FUNCTIONS = ("static_alpha", "static_beta", "static_gamma")
LOAD_BIAS = 0x5555_5555_4000


def _function_symbols(path) -> dict:
    """name -> (value, size) of the FUNC symbols of path's .symtab."""
    from elftools.elf.elffile import ELFFile

    with open(path, "rb") as f:
        table = ELFFile(f).get_section_by_name(".symtab")
        return {s.name: (s["st_value"], s["st_size"]) for s in table.iter_symbols()
                if s["st_info"]["type"] == "STT_FUNC" and s["st_size"]} if table else {}


def _load_mappings(path, recorded_path, build_id: bytes) -> list:
    """The mappings a process would have recorded for path loaded at LOAD_BIAS."""
    from elftools.elf.elffile import ELFFile

    with open(path, "rb") as f:
        loads = [(s["p_vaddr"], s["p_memsz"], s["p_offset"]) for s in ELFFile(f).iter_segments()
                 if s["p_type"] == "PT_LOAD"]
    return [profile_pb2.Mapping(id=i + 1, start=LOAD_BIAS + vaddr, limit=LOAD_BIAS + vaddr + size,
                                file_offset=offset, path=recorded_path, build_id=build_id)
            for i, (vaddr, size, offset) in enumerate(loads)]


@dataclasses.dataclass
class SplitBuild:
    dir: pathlib.Path
    full: str          # built with -g, .symtab and DWARF
    stripped: str      # strip --strip-debug --strip-unneeded + --add-gnu-debuglink=app.debug
    debug: str         # objcopy --only-keep-debug
    other_debug: str   # the debug file of a rebuild with another build id
    functions: dict    # name -> (vaddr, size), from the full build

    def address(self, name: str) -> int:
        vaddr, size = self.functions[name]
        return LOAD_BIAS + vaddr + size // 2

    def mappings(self, recorded_path: str, build_id: str = DEBUG_BUILD_ID) -> list:
        return _load_mappings(self.stripped, recorded_path, bytes.fromhex(build_id))

    def place(self, dest: pathlib.Path, what: str = "stripped") -> pathlib.Path:
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(getattr(self, what), dest)
        return dest


def _split(d: pathlib.Path, build_id: str, name: str) -> tuple[str, str, str]:
    src = d / "app.c"
    src.write_text(DEBUG_SOURCE)
    work = d / name
    work.mkdir()
    full, debug, stripped = work / "app.full", work / "app.debug", work / "app"
    subprocess.run(["gcc", "-O2", "-g", "-fno-reorder-functions", "-fPIE", "-pie", "-rdynamic",
                    f"-Wl,--build-id=0x{build_id}", "-o", str(full), str(src)],
                   check=True, capture_output=True)
    subprocess.run(["objcopy", "--only-keep-debug", str(full), str(debug)], check=True)
    subprocess.run(["strip", "--strip-debug", "--strip-unneeded", "-o", str(stripped), str(full)],
                   check=True)
    # objcopy records the debug file's basename and CRC32; run beside it.
    subprocess.run(["objcopy", "--add-gnu-debuglink=app.debug", "app"], check=True, cwd=work)
    return str(full), str(stripped), str(debug)


@pytest.fixture(scope="module")
def split_build(tmp_path_factory):
    if shutil.which("gcc") is None or shutil.which("objcopy") is None:
        pytest.skip("needs gcc and objcopy")
    d = tmp_path_factory.mktemp("debugfiles")
    full, stripped, debug = _split(d, DEBUG_BUILD_ID, "main")
    _, _, other_debug = _split(d, DEBUG_OTHER_BUILD_ID, "other")
    functions = _function_symbols(full)
    assert set(STATIC_FUNCTIONS) | {"exported_fn"} <= set(functions)
    assert _function_symbols(stripped) == {}  # no .symtab left
    return SplitBuild(d, full, stripped, debug, other_debug, functions)


def _build_id_path(root: pathlib.Path, build_id: str = DEBUG_BUILD_ID) -> pathlib.Path:
    return root / ".build-id" / build_id[:2] / (build_id[2:] + ".debug")


def _names(build: SplitBuild, mappings, cache) -> dict:
    s = sym.Symbolizer(mappings, cache=cache)
    return {name: _name(s, build.address(name)) for name in (*STATIC_FUNCTIONS, "exported_fn")}


def _named_statics(names: dict) -> bool:
    return all(names[f] == f for f in STATIC_FUNCTIONS)


def test_stripped_split_binary_names_static_functions_only_with_its_debug_file(split_build):
    b = split_build
    lone = b.place(b.dir / "lone" / "app")  # no debug file anywhere near
    names = _names(b, b.mappings(str(lone)), sym.ModuleCache(debug_dirs=()))
    assert names["exported_fn"] == "exported_fn"  # -rdynamic: in .dynsym
    # Static functions are absent from .dynsym: a module token, never a neighbour's name.
    assert all(names[f] == "<app+?>" for f in STATIC_FUNCTIONS), names


def test_debug_file_by_build_id_in_a_debug_dir(split_build, tmp_path):
    b = split_build
    lone = b.place(tmp_path / "bin" / "app")
    debug_dir = tmp_path / "debug"
    b.place(_build_id_path(debug_dir), "debug")
    cache = sym.ModuleCache(debug_dirs=[str(tmp_path / "nowhere"), str(debug_dir)])
    mappings = b.mappings(str(lone))
    assert _named_statics(_names(b, mappings, cache))
    module = cache.get(str(lone))
    assert module.debug_file == str(_build_id_path(debug_dir)) and not module.debug_problems
    status = sym.Symbolizer(mappings, cache=cache).check_all_modules()[str(lone)]
    assert status.status == sym.OK and f"symbols from {module.debug_file}" in status.detail
    # Not used without the directory (the default /usr/lib/debug does not have it).
    assert not _named_statics(_names(b, mappings, sym.ModuleCache(debug_dirs=())))


def test_debug_file_under_a_build_id_of_another_build_is_refused(split_build, tmp_path):
    b = split_build
    lone = b.place(tmp_path / "bin" / "app")
    debug_dir = tmp_path / "debug"
    b.place(_build_id_path(debug_dir), "other_debug")  # right place, wrong file
    cache = sym.ModuleCache(debug_dirs=[str(debug_dir)])
    assert not _named_statics(_names(b, b.mappings(str(lone)), cache))
    [problem] = cache.get(str(lone)).debug_problems
    assert DEBUG_OTHER_BUILD_ID in problem and "not used" in problem


@pytest.mark.parametrize("layout", ["beside", "dot-debug", "global"])
def test_debug_file_through_gnu_debuglink(split_build, tmp_path, layout):
    """GDB's three places for a .gnu_debuglink name: next to the binary, in .debug/
    beside it, and under a debug directory at the binary's own directory."""
    b = split_build
    binary = b.place(tmp_path / "opt" / "bin" / "app")
    debug_dir = tmp_path / "debug"
    dest = {"beside": binary.parent / "app.debug",
            "dot-debug": binary.parent / ".debug" / "app.debug",
            "global": debug_dir / str(binary.parent).lstrip("/") / "app.debug"}[layout]
    b.place(dest, "debug")
    # No build id recorded, and none under the debug dir: the debuglink alone finds it.
    cache = sym.ModuleCache(debug_dirs=[str(debug_dir)])
    assert _named_statics(_names(b, b.mappings(str(binary)), cache))
    assert cache.get(str(binary)).debug_file == str(dest)


def test_debuglink_with_a_wrong_crc_is_not_used_and_is_reported(split_build, tmp_path):
    b = split_build
    binary = b.place(tmp_path / "bin" / "app")
    bad = b.place(binary.parent / "app.debug", "debug")
    with open(bad, "ab") as f:  # still a valid ELF file with the right build id
        f.write(b"\0" * 16)
    cache = sym.ModuleCache(debug_dirs=())
    mappings = b.mappings(str(binary))
    names = _names(b, mappings, cache)
    assert all(names[f] == "<app+?>" for f in STATIC_FUNCTIONS), names
    module = cache.get(str(binary))
    assert module.debug_file == "" and len(module.debug_problems) == 1
    assert "CRC32" in module.debug_problems[0] and "not used" in module.debug_problems[0]
    status = sym.Symbolizer(mappings, cache=cache).check_all_modules()[str(binary)]
    assert status.usable and "CRC32" in status.detail  # reported in the manifest's modules
    # A good copy under .debug/ is found after the bad one is refused.
    b.place(binary.parent / ".debug" / "app.debug", "debug")
    cache = sym.ModuleCache(debug_dirs=())
    assert _named_statics(_names(b, mappings, cache))
    assert "CRC32" in cache.get(str(binary)).debug_problems[0]


def test_sysroot_with_build_id_and_debuglink_layouts(split_build, tmp_path):
    b = split_build
    recorded = "/usr/lib/lifetime-test/app"  # the path on the profiled machine
    root = tmp_path / "root"
    b.place(root / recorded.lstrip("/"))
    b.place(_build_id_path(root / "usr/lib/debug"), "debug")
    cache = sym.ModuleCache(sysroot=str(root))  # default debug dir, under the sysroot
    mappings = b.mappings(recorded)
    assert _named_statics(_names(b, mappings, cache))
    status = sym.Symbolizer(mappings, cache=cache).check_all_modules()[recorded]
    assert status.status == sym.OK
    assert f"read {root}{recorded}" in status.detail and "symbols from" in status.detail
    # GDB's global debuglink layout under the sysroot: /usr/lib/debug/<recorded dir>/name.
    root2 = tmp_path / "root2"
    b.place(root2 / recorded.lstrip("/"))
    dest = b.place(root2 / "usr/lib/debug" / "usr/lib/lifetime-test" / "app.debug", "debug")
    cache = sym.ModuleCache(sysroot=str(root2))
    assert _named_statics(_names(b, b.mappings(recorded, build_id=""), cache))
    assert cache.get(str(root2 / recorded.lstrip("/"))).debug_file == str(dest)
    # An absolute symlink inside the sysroot points into the sysroot.
    (root2 / "usr/lib/lifetime-test/app-link").symlink_to("/usr/lib/lifetime-test/app")
    assert cache.resolve("/usr/lib/lifetime-test/app-link") == str(root2 / recorded.lstrip("/"))


def test_sysroot_without_the_file(split_build, tmp_path):
    b = split_build
    root = tmp_path / "empty-root"
    root.mkdir()
    cache = sym.ModuleCache(sysroot=str(root))
    missing = "/usr/lib/lifetime-test/no-such-app"
    s = sym.Symbolizer(b.mappings(missing), cache=cache)
    assert _name(s, b.address("exported_fn")) == "<no-such-app+?>"
    status = s.module_status()[missing]
    assert status.status == sym.MISSING and str(root) in status.detail
    # A file the sysroot lacks but this machine has is read from here (build ids decide).
    s = sym.Symbolizer(b.mappings(b.full), cache=cache)
    assert _name(s, b.address("static_beta")) == "static_beta"
    assert s.module_status()[b.full].status == sym.OK


def test_bad_debug_dir_and_sysroot_options(tmp_path):
    # A missing debug directory is skipped by the cache ...
    cache = sym.ModuleCache(debug_dirs=[str(tmp_path / "no-such-dir")])
    assert sym.find_debug_file("/bin/true", b"\x01\x02\x03", None, cache.debug_dirs).path == ""
    # ... but named explicitly on a command line it is an error, naming the option.
    with pytest.raises(ValueError, match="--debug-dir .*no-such-dir: not a directory"):
        sym.check_search_paths([str(tmp_path / "no-such-dir")], None)
    with pytest.raises(ValueError, match="--sysroot .*: not a directory"):
        sym.check_search_paths(None, str(tmp_path / "no-such-root"))
    (tmp_path / "root" / "dbg").mkdir(parents=True)
    sym.check_search_paths(["/dbg"], str(tmp_path / "root"))  # found under the sysroot
    sym.check_search_paths(None, None)


def test_cli_flags_reach_the_dataset_config(tmp_path):
    from lifetime import cli
    from pipeline.dataset import DatasetConfig

    parser = cli.build_parser()
    for argv in (["build-dataset", "--profiles", "x", "--out", str(tmp_path)],
                 ["characterize", "--profiles", "x", "--out", str(tmp_path)],
                 ["evaluate-online", "p.ltprof", "--model", str(tmp_path)]):
        args, _ = parser.parse_known_args(argv + ["--debug-dir", str(tmp_path),
                                                  "--debug-dir", "/usr/lib/debug",
                                                  "--sysroot", str(tmp_path)])
        options = cli._symbol_options(args)
        assert options == {"debug_dirs": (str(tmp_path), "/usr/lib/debug"),
                           "sysroot": str(tmp_path)}, argv
        args, _ = parser.parse_known_args(argv + ["--debug-dir", str(tmp_path / "missing")])
        with pytest.raises(UsageError, match="--debug-dir .*missing: not a directory"):
            cli._symbol_options(args)
        args, _ = parser.parse_known_args(argv)
        assert cli._symbol_options(args) == {"debug_dirs": sym.DEFAULT_DEBUG_DIRS, "sysroot": ""}
    # Recorded in the manifest's configuration (manifest["config"] is config.to_json()).
    config = DatasetConfig(debug_dirs=(str(tmp_path),), sysroot=str(tmp_path)).to_json()
    assert json.loads(json.dumps(config))["debug_dirs"] == [str(tmp_path)]
    assert config["sysroot"] == str(tmp_path)


# ---------------------------------------------------------------- real Debian binaries

def _text_range(path) -> tuple[int, int]:
    from elftools.elf.elffile import ELFFile

    with open(path, "rb") as f:
        text = ELFFile(f).get_section_by_name(".text")
        return text["sh_addr"], text["sh_addr"] + text["sh_size"]


def _dynsym_ranges(path) -> list[tuple[int, int]]:
    from elftools.elf.elffile import ELFFile

    with open(path, "rb") as f:
        return [(s["st_value"], s["st_value"] + s["st_size"])
                for s in ELFFile(f).get_section_by_name(".dynsym").iter_symbols()
                if s["st_info"]["type"] in ("STT_FUNC", "STT_GNU_IFUNC", "STT_LOOS")
                and s["st_shndx"] != "SHN_UNDEF" and s["st_size"]]


def test_debian_stripped_library_never_names_an_address_past_a_symbol(tmp_path):
    """Debian's libc.so.6 keeps only .dynsym (static functions such as _int_malloc are
    absent): an address that no .dynsym function covers must stay unnamed, however
    close the nearest symbol below it is."""
    libc = "/usr/lib/x86_64-linux-gnu/libc.so.6"
    if not os.path.exists(libc):
        pytest.skip(f"no {libc}")
    cache = sym.ModuleCache(debug_dirs=())  # as if no debug files were installed
    module = cache.get(libc)
    assert module.symtab is None and module.dynsym is not None, "expected a stripped libc"
    lo, hi = _text_range(libc)
    ranges = _dynsym_ranges(libc)
    mappings = _load_mappings(libc, libc, module.build_id)
    s = sym.Symbolizer(mappings, cache=cache)
    gaps = covered = 0
    for vaddr in range(lo, hi, 61):
        inside = any(a <= vaddr < b for a, b in ranges)
        [frame] = s.symbolize_address(LOAD_BIAS + vaddr, False)
        if inside:
            covered += 1
            assert frame.resolved and frame.symbol_offset < max(b - a for a, b in ranges)
        else:
            gaps += 1
            assert frame.function == "<libc+?>" and not frame.resolved, hex(vaddr)
    assert gaps > 100 and covered > 100, (gaps, covered)


DEBIAN_PACKAGES = {
    # name: (binary package, -dbg package, file in the binary package)
    "vsftpd": ("vsftpd", "vsftpd-dbg", "/usr/sbin/vsftpd"),  # a C server, .dynsym only
    "liblua5.4": ("liblua5.4-0", "liblua5.4-0-dbg",
                  "/usr/lib/x86_64-linux-gnu/liblua5.4.so.0"),  # a library, its API in .dynsym
}


def _cache_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get("LIFETIME_CACHE_DIR",
                                       os.path.expanduser("~/.cache/lifetime-models")))


def debian_root(name: str) -> pathlib.Path:
    """The binary and -dbg packages of DEBIAN_PACKAGES[name], downloaded with
    `apt-get download` and unpacked with `dpkg-deb -x` under a private root (cached under
    $LIFETIME_CACHE_DIR/debian-dbg/NAME).  Skips, saying why, if they cannot be fetched."""
    root = _cache_dir() / "debian-dbg" / name
    done = root / ".unpacked"
    if done.exists():
        return root
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        pytest.skip("needs apt-get and dpkg-deb to fetch Debian packages")
    debs = root.parent / f"{name}.debs"
    debs.mkdir(parents=True, exist_ok=True)
    packages = DEBIAN_PACKAGES[name][:2]
    got = subprocess.run(["apt-get", "download", *packages], cwd=debs, capture_output=True,
                         text=True)
    files = sorted(debs.glob("*.deb"))
    if got.returncode != 0 or len(files) < 2:
        pytest.skip(f"cannot fetch {' '.join(packages)} with apt-get download (run "
                    f"`apt-get update`?): {got.stderr.strip()[-300:]}")
    for deb in files:
        subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    done.write_text("".join(f.name + "\n" for f in files))
    return root


def named_shares(root: pathlib.Path, recorded: str) -> dict:
    """Shares of addresses named without and with the package's debug files: every
    function of the debug file's .symtab at its middle byte, and every 16th byte of
    .text; also how many were named wrongly (never allowed)."""
    binary = sym.ModuleCache(sysroot=str(root)).resolve(recorded)
    with_debug = sym.ModuleCache(sysroot=str(root))  # SYSROOT/usr/lib/debug
    without = sym.ModuleCache(debug_dirs=(), sysroot=str(root))
    module = with_debug.get(binary)
    assert module.debug_file, f"no debug file found for {binary}: {module.debug_problems}"
    truth = module.symtab  # the debug file's own .symtab: the ground truth
    mappings = _load_mappings(binary, recorded, module.build_id)
    lo, hi = _text_range(binary)
    functions = sorted({start + size // 2 for start, size, _, _ in truth._items})
    samples = {"functions": functions, "text": list(range(lo, hi, 16))}
    out = {}
    for kind, vaddrs in samples.items():
        for label, cache in (("without", without), ("with", with_debug)):
            s = sym.Symbolizer(mappings, cache=cache)
            named = wrong = 0
            for vaddr in vaddrs:
                [frame] = s.symbolize_address(LOAD_BIAS + vaddr, False)
                if frame.resolved:
                    named += 1
                    expected = truth.lookup(vaddr)
                    wrong += expected is None or expected[1] != vaddr - frame.symbol_offset
            out[f"{kind}_{label}"] = named / len(vaddrs)
            out[f"{kind}_{label}_wrong"] = wrong
        out[f"{kind}_count"] = len(vaddrs)
    return out


@pytest.mark.parametrize("name", sorted(DEBIAN_PACKAGES))
def test_debian_dbg_package_under_a_private_root(name):
    """A Debian package and its -dbg package unpacked under a private root (a sysroot):
    the profile's recorded path is read from the root, its debug file found by build id
    under ROOT/usr/lib/debug; far more is named with it, and nothing wrongly."""
    root = debian_root(name)
    recorded = DEBIAN_PACKAGES[name][2]
    shares = named_shares(root, recorded)
    print(f"\n{name}: named without / with the -dbg package: functions "
          f"{shares['functions_without']:.1%} / {shares['functions_with']:.1%} of "
          f"{shares['functions_count']}; .text bytes (every 16th) {shares['text_without']:.1%}"
          f" / {shares['text_with']:.1%} of {shares['text_count']}")
    assert shares["functions_with"] > 0.99 and shares["text_with"] > 0.9, shares
    assert shares["functions_without"] < shares["functions_with"] - 0.2, shares
    assert all(shares[k] == 0 for k in shares if k.endswith("_wrong")), shares


# ---------------------------------------------------------------- online (in the sampler)

ONLINE_SOURCE = r"""
#include <stdlib.h>
#define NOINLINE __attribute__((noinline, noclone))
static void *volatile sink;
static NOINLINE void *static_make(size_t n) { void *p = malloc(n); sink = p; return p; }
static NOINLINE void static_loop(int rounds) {
  for (int i = 0; i < rounds; i++) free(static_make(64 + (size_t)(i % 7) * 16));
  __asm__ volatile("" ::: "memory");
}
int main(void) { static_loop(200000); return 0; }
"""


@pytest.mark.parametrize("layout", ["build-id", "debuglink"])
def test_in_process_symbolizer_uses_separate_debug_files(tmp_path, layout):
    """The sampler's symbolizer (LIFETIME_SYMBOLIZE=1) finds the same debug files: by
    build id under LIFETIME_DEBUG_DIR, or through .gnu_debuglink; its frames equal the
    offline ones given the same debug directory."""
    from tests.sampler_support import only_profile, run_sampled, sampler_library

    if shutil.which("gcc") is None or shutil.which("objcopy") is None:
        pytest.skip("needs gcc and objcopy")
    sampler_library()
    src = tmp_path / "online.c"
    src.write_text(ONLINE_SOURCE)
    full, app = tmp_path / "full", tmp_path / "bin" / "app"
    app.parent.mkdir()
    subprocess.run(["gcc", "-O2", "-g", "-fno-omit-frame-pointer", "-fPIE", "-pie",
                    f"-Wl,--build-id=0x{DEBUG_BUILD_ID}", "-o", str(full), str(src)], check=True)
    debug = tmp_path / ("app.debug")
    subprocess.run(["objcopy", "--only-keep-debug", str(full), str(debug)], check=True)
    subprocess.run(["strip", "--strip-debug", "--strip-unneeded", "-o", str(app), str(full)],
                   check=True)
    debug_dir = tmp_path / "debug"
    if layout == "build-id":
        dest = _build_id_path(debug_dir)
    else:
        subprocess.run(["objcopy", f"--add-gnu-debuglink={debug}", str(app)], check=True)
        dest = debug_dir / str(app.parent).lstrip("/") / "app.debug"
    dest.parent.mkdir(parents=True)
    shutil.copy(debug, dest)

    def frames(env_debug_dir):
        out = tmp_path / f"out-{bool(env_debug_dir)}"
        env = {"LIFETIME_SYMBOLIZE": "1"}
        if env_debug_dir:
            env["LIFETIME_DEBUG_DIR"] = f"{tmp_path / 'nowhere'}:{env_debug_dir}"
        run_sampled([str(app)], out, interval=4096, extra_env=env)
        prof = only_profile(out)
        stacks = [s for s in prof.stacks.values() if s.frames]
        assert stacks
        online = {f.function for s in stacks for f in s.frames}
        # Online: LIFETIME_DEBUG_DIR's directories, then /usr/lib/debug (always).
        cache = sym.ModuleCache(debug_dirs=[env_debug_dir, *sym.DEFAULT_DEBUG_DIRS]
                                if env_debug_dir else sym.DEFAULT_DEBUG_DIRS)
        for s in stacks:
            o = sym.Symbolizer(prof.mappings, cache=cache, inline_frames=False).symbolize_stack(
                list(s.addresses), leaf_is_return_address=True)
            assert [f.function for f in s.frames] == [f.function for f in o]
        return online

    named = frames(str(debug_dir))
    assert {"static_make", "static_loop"} <= named, named
    unnamed = frames("")
    assert not {"static_make", "static_loop"} & unnamed and "<app+?>" in unnamed, unnamed


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
