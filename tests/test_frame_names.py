"""Names of symbolized frames, no binary needed: qualified C++ names
(core.symbolize.cxx_names), module tokens of unnamed frames (frames) and the
allocator stripping that finds allocation sites (allocator_frames)."""

import json
import pathlib

import pytest

from core import symbolize as sym
from profile_format import profile_pb2


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
