"""pipeline.symbolize against a real binary built here with g++.

The demo program prints the runtime addresses of a few functions and its own
/proc/self/maps, so the addresses are resolved through real (PIE) mappings.
"""

import dataclasses
import os
import shutil
import subprocess

import pytest

from pipeline import symbolize as sym
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


def test_module_token():
    assert sym.module_token("/usr/lib/libfoo.so.1") == "<libfoo.so.1+?>"
    assert sym.module_token("[vdso]") == "<[vdso]+?>"
    assert sym.module_token("") == sym.UNKNOWN_MODULE_TOKEN


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
        assert module._dwarf._aranges is None and len(module._dwarf._unit_spans._items) > 0


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
    real_chain = sym._DwarfInlines.chain

    def counting_chain(self, vaddr):
        calls.append(vaddr)
        return real_chain(self, vaddr)

    monkeypatch.setattr(sym._DwarfInlines, "chain", counting_chain)
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
