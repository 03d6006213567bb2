"""DWARF inline frames (core.symbolize.dwarf_inline) against a fixture program
built here with g++ -O2 in several DWARF flavours (tests/native/inline_frames.cc)."""

import dataclasses
import os
import shutil
import subprocess

import pytest

from core import symbolize as sym
from core.symbolize.dwarf_inline import DwarfInlines
from profile_format import profile_pb2
from tests.symbolize_support import parse_run, with_path

pytestmark = pytest.mark.skipif(shutil.which("g++") is None or shutil.which("strip") is None,
                                reason="needs g++ and strip")


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
        returns, mappings = parse_run(out, {})
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
                                      with_path(base.mappings, base.binary, copy))
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
    mappings = with_path(build.mappings, build.binary, str(damaged))
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
