"""Offline symbolization of sampled allocation stacks (pyelftools + cxxfilt).

A profile stack is a list of raw return addresses, leaf first.  Symbolizing one:

1. **Mapping.**  The profile's mappings (``start``, ``limit``, ``file_offset``,
   ``path``, ``build_id``) place an address ``A`` in a module at file offset
   ``A - start + file_offset``.  Where mappings overlap (a library unloaded and
   another loaded at the same range) the one with the highest id (the latest) wins.
2. **Virtual address.**  The module's ``PT_LOAD`` program header that holds that
   file offset turns it into an ELF virtual address:
   ``offset - p_offset + p_vaddr``.
3. **Symbol.**  Function symbols (``STT_FUNC`` and ``STT_GNU_IFUNC``, defined,
   size > 0) of ``.symtab`` are searched first (binary search over start
   addresses; a symbol covers ``[value, value + size)``), then ``.dynsym``.  A
   module without ``.symtab`` (distributions strip binaries to ``.dynsym``, where
   static functions are absent) uses the ``.symtab`` of its separate debug file
   where one is found and matches (`find_debug_file`): by build id under the debug
   directories (``/usr/lib/debug/.build-id/ab/cdef....debug``), or through the
   binary's ``.gnu_debuglink`` (name and CRC32, looked up next to the binary, in
   ``.debug/`` beside it, and under the debug directories), as GDB does.  An
   address past every symbol's end is never given to the nearest symbol: it stays
   unnamed.
   Where several symbols cover an address (aliases such as ``malloc`` and
   ``__libc_malloc``), the preferred one is GLOBAL over WEAK over LOCAL, then
   fewest leading underscores, then the name.  Names are demangled with
   ``cxxfilt`` (clone suffixes read ``[clone .cold]`` and so on).
4. **Return addresses.**  A return address points just after its call
   instruction, which may already be the next function (a call at the very end of
   a ``noreturn`` path), so frames that hold return addresses are looked up at
   ``address - 1``.  `Symbolizer.symbolize_stack` treats every frame but the leaf
   that way, and the leaf too when ``leaf_is_return_address`` is set (the
   sampler's leaf is the return address into the allocator's caller).

Frames that cannot be named get a stable module-level token, never a raw address:
``<libfoo+?>`` (the module's name without its version, `module_name`:
``libfoo-3.38.so.0.0.0`` -> ``libfoo``, so a new release does not make new
contexts) for an address inside a mapping whose module is missing, mismatched,
stripped or has no symbol there, and ``<unknown+?>`` for an address outside every
mapping.  Module problems are reported per module as a `ModuleStatus` (see
`Symbolizer.module_status`), never raised; a usable module's ``detail`` says where
its symbols came from (a sysroot, a separate debug file) and which debug-file
candidates were rejected (CRC or build-id mismatch).

Other machines.  ``ModuleCache(debug_dirs=..., sysroot=...)``: mapping paths are
read under the sysroot first (`ModuleCache.resolve`) and debug directories are
searched under it first; `Symbolizer` takes ``resolve_path`` for anything else.

Build ids.  A module is symbolized only if the file's GNU build-id note equals
the build id the profile recorded for its mapping (``status == "ok"``), or the
profile recorded none (``"unverified"``: symbolized, but nothing proves it is
the same file).  A recorded id that the file does not have, or a different one,
is ``"build_id_mismatch"`` and its frames become module tokens (unless
``allow_build_id_mismatch``).  ``"missing"`` and ``"not_elf"`` speak for
themselves; ``"no_file"`` is a mapping with no backing file (``[vdso]``,
anonymous memory).

Memoization.  Each ELF file is opened and indexed once per `ModuleCache` (share
one cache across profiles, e.g. one per Beam worker; a file rebuilt in place is
read again).  The per-address work is memoized in the `ElfModule`, keyed by
virtual address and lookup kind (symbol: `ElfModule.function_at`; inline chain:
`ElfModule.inlined_at`), so an address that many profiles of one binary share is
looked up once per module per process whatever the load address of each profile;
each `Symbolizer` also keeps its own (address, is-return-address) -> frames memo.
Modules are thread-safe: the memos are under a lock, and the DWARF reader (whose
pyelftools streams are not thread-safe) under a second, per-module one.

Inline frames.  Where the module itself carries DWARF (a ``.debug_info``
section; separate debug files are used for ``.symtab`` only, never for DWARF),
`ElfModule.inline_frames` expands one address into several frames, innermost
first: the functions inlined at that address (``inlined=True``), deepest first,
then the symbol's own frame (the physical function, ``inlined=False``, named
from the symbol table as before).  The compile unit holding the address is found
through ``.debug_aranges`` (or, for addresses it lacks or files without it, by
reading compile units' top DIEs in order until one's ranges hold it); within it
the ``DW_TAG_subprogram`` holding the address, then the chain of
``DW_TAG_inlined_subroutine`` DIEs (through lexical blocks) whose ranges hold
it -- ``DW_AT_low_pc`` / ``DW_AT_high_pc`` (address or offset form) or
``DW_AT_ranges`` (DWARF 4 ``.debug_ranges`` or DWARF 5 ``.debug_rnglists``).
An inlined function's name is its ``DW_AT_linkage_name``, demangled (so it reads
like a symbol-table name: ``int ns::f<int>(int)``), found by following
``DW_AT_abstract_origin`` / ``DW_AT_specification``.  Failing that (C; and C++
functions GCC gives no linkage name, e.g. those with local types in their
signature or in anonymous namespaces) its ``DW_AT_name``, qualified by the
enclosing namespaces and classes but without a parameter list: ``ns::helper``,
``ns::f(int)::{lambda}::operator()``; plain in C, where symbols are plain too.
Inlined frames carry the physical frame's address, module and module offset, the
linkage name (or that name) as ``symbol``, and no ``symbol_offset``.

Cost.  DWARF is read lazily: a module's debug sections are loaded on the first
address asked about (pyelftools copies them into memory), a compile unit is read
only when an address falls in it -- its top-level function definitions found
once by skipping DIEs over the raw bytes (far cheaper than pyelftools parsing
the many type and declaration DIEs), with pyelftools parsing only those
functions and, within the one holding an address, the scopes that hold it --
and each address's chain is memoized in the module.  Modules without
``.debug_info`` cost nothing extra.  Measured: 2000 distinct random return
addresses in a pyenv ``libpython3.11.so`` (9 MiB of DWARF 5, 124 units touched)
take ~2 s on top of the symbol lookup (0.7 s), loading the sections included,
and ~90 MiB more memory; a second profile of that module, sharing the cache, is
answered from the memos (20 ms).
``Symbolizer(..., inline_frames=False)`` turns expansion off;
``ModuleCache(max_dwarf_bytes=...)`` skips modules whose ``.debug_info`` is
larger (default 256 MiB, for memory).  Both switches are deterministic, unlike a
time budget, so reruns of a dataset stay byte-identical.  DWARF that cannot be
read is reported in ``ElfModule.dwarf_error`` and leaves the symbol's frame alone.

Allocation sites.  `strip_allocator_frames` removes the allocator and its
wrappers from the top of a symbolized stack (rules in its docstring);
`allocation_site` is the first frame left.
"""

from __future__ import annotations

import bisect
import dataclasses
import os
import re
import threading
import zlib
from typing import Callable, Iterable, Sequence

import cxxfilt
from elftools.common.exceptions import ELFError
from elftools.dwarf.ranges import BaseAddressEntry
from elftools.elf.elffile import ELFFile

from lifetime.errors import UsageError
from lifetime.files import open_regular

# ---------------------------------------------------------------- module status

OK = "ok"
UNVERIFIED = "unverified"
BUILD_ID_MISMATCH = "build_id_mismatch"
MISSING = "missing"
NOT_ELF = "not_elf"
NO_FILE = "no_file"
#: Statuses whose frames are symbolized.
USABLE_STATUSES = (OK, UNVERIFIED)

UNKNOWN_MODULE_TOKEN = "<unknown+?>"
DEFAULT_DEBUG_DIRS = ("/usr/lib/debug",)
#: ModuleCache's default limit on a module's .debug_info for inline frames: pyelftools
#: holds a module's debug sections in memory (libpython3.11's .debug_info is ~9 MiB).
DEFAULT_MAX_DWARF_BYTES = 256 << 20


@dataclasses.dataclass(frozen=True)
class ModuleStatus:
    """How one mapped module fared.  ``status`` is one of the constants above."""

    path: str
    status: str
    expected_build_id: str = ""  # hex, as recorded in the profile ("" if none)
    actual_build_id: str = ""    # hex, from the file's note ("" if none / unread)
    detail: str = ""

    @property
    def usable(self) -> bool:
        return self.status in USABLE_STATUSES


@dataclasses.dataclass(frozen=True)
class SymbolizedFrame:
    """One frame of a symbolized stack."""

    address: int                   # the raw address from the stack
    function: str                  # demangled name, or a module token like <libfoo+?>
    module: str = ""               # mapping path ("" if the address is unmapped)
    module_offset: int | None = None  # file offset in the module
    symbol: str | None = None      # raw (mangled) symbol name, if named (inlined frames:
    #                                DW_AT_linkage_name, or the qualified DW_AT_name)
    symbol_offset: int | None = None  # looked-up address minus the symbol's start
    #                                   (None for inlined frames: no symbol of their own)
    inlined: bool = False          # a function inlined at this address (DWARF); the
    #                                physical function's frame follows the inlined ones

    @property
    def resolved(self) -> bool:
        return self.symbol is not None


def module_name(path: str) -> str:
    """A module's name without its version: the name in `module_token`.

    The rule (the sampler's C mirror, ``lt_module_name`` in profiler/src/symtab.c,
    follows it byte for byte; tests/data/module_token_vectors.json pins both):

    1. Take the basename (a trailing ``" (deleted)"`` and trailing slashes dropped).
    2. Shared objects: cut at the first ``.so`` that ends the name or is followed by
       ``.`` (``libglib-2.0.so.0.7400.6`` -> ``libglib-2.0``, ``libc-2.31.so`` ->
       ``libc-2.31``), and at a Python extension's ABI tag, the first ``.cpython-``,
       ``.pypy`` or ``.abi3`` (``_json.cpython-311-x86_64-linux-gnu.so`` -> ``_json``).
    3. Drop one trailing version: the longest run of digits and dots at the end that
       starts with a digit, together with the ``-``, ``_`` or ``.`` before it -- or
       with no separator if the run holds a dot (``libpython3.11`` -> ``libpython``,
       ``lua5.3`` -> ``lua``) -- but only if what is left ends in an ASCII letter.
       So ``libglib-2.0`` -> ``libglib``, ``libLLVM-14`` -> ``libLLVM``, ``clang-14``
       -> ``clang``, ``python3.11`` -> ``python``; while digits glued to a name are part
       of it (``libsqlite3``, ``libx264``, ``libbz2``, ``python3``) and so is a number
       after a name that ends in a digit (``ld-linux-x86-64``, ``libpcre2-8``).
    4. Nothing left (a file called ``.so``): the basename itself.  No basename at all
       (``/``, ``/x/ (deleted)``): the path as it is.

    Executables are names too: ``redis-server``, ``postgres`` and ``clang`` stay.
    ``libstdc++.so.6`` -> ``libstdc++``.  Pseudo-paths keep their name (``[vdso]``).
    """
    base = path.rstrip("/")
    if base.endswith(" (deleted)"):
        base = base[:-len(" (deleted)")]
    base = base.rsplit("/", 1)[-1]
    if not base:  # nothing after the last slash: the path as it is
        return path
    stem = base
    cut = _SO_SUFFIX.search(stem)
    if cut:
        stem = stem[:cut.start()]
    for tag in _ABI_TAGS:
        i = stem.find(tag)
        if i >= 0:
            stem = stem[:i]
    m = _TRAILING_VERSION.search(stem)
    if m:
        rest, sep, run = stem[:m.start()], m.group(1), m.group(2)
        if (sep or "." in run) and rest[-1:].isascii() and rest[-1:].isalpha():
            stem = rest
    return stem or base


_SO_SUFFIX = re.compile(r"\.so(?=\.|$)")
_ABI_TAGS = (".cpython-", ".pypy", ".abi3")
_TRAILING_VERSION = re.compile(r"([-_.]?)([0-9][0-9.]*)$")


def module_token(path: str) -> str:
    """The stable stand-in for an unnamed frame in module ``path``: ``<name+?>`` with
    the module's version-free name (`module_name`), ``<unknown+?>`` for no module."""
    if not path:
        return UNKNOWN_MODULE_TOKEN
    return f"<{module_name(path)}+?>"


def demangle(name: str) -> str:
    """Demangled C++ name; C names and anything cxxfilt rejects come back unchanged."""
    if not name.startswith("_Z"):
        return name
    try:
        return cxxfilt.demangle(name)
    except cxxfilt.InvalidName:
        return name


# ---------------------------------------------------------------- ELF modules

_FUNC_TYPES = frozenset({"STT_FUNC", "STT_GNU_IFUNC", "STT_LOOS"})  # LOOS == GNU_IFUNC
_BINDING_RANK = {"STB_GLOBAL": 0, "STB_WEAK": 1, "STB_GNU_UNIQUE": 1, "STB_LOCAL": 2}


class _SymbolTable:
    """Function symbols of one ELF symbol section, sorted for binary search."""

    def __init__(self, entries: Iterable[tuple[int, int, str, int]]):
        # entries: (start, size, name, preference rank); for equal ranges keep the best.
        best: dict[tuple[int, int], tuple[int, str]] = {}
        for start, size, name, rank in entries:
            key = (start, size)
            if key not in best or (rank, name) < best[key]:
                best[key] = (rank, name)
        items = sorted((start, size, rank, name) for (start, size), (rank, name) in best.items())
        self._starts = [s for s, _, _, _ in items]
        self._items = items
        # max end over items[0..i]: bounds the backward scan for enclosing symbols.
        self._max_end = []
        m = 0
        for start, size, _, _ in items:
            m = max(m, start + size)
            self._max_end.append(m)

    def __len__(self) -> int:
        return len(self._items)

    def lookup(self, vaddr: int) -> tuple[str, int] | None:
        """(name, start) of the symbol covering vaddr, or None.  Where symbols nest,
        the innermost (latest start, then smallest) wins."""
        i = bisect.bisect_right(self._starts, vaddr) - 1
        best = None
        while i >= 0 and self._max_end[i] > vaddr:
            start, size, rank, name = self._items[i]
            if vaddr < start + size:
                key = (-start, size, rank, name)
                if best is None or key < best:
                    best = key
            i -= 1
        return (best[3], -best[0]) if best else None


def _rank(name: str, binding: str) -> int:
    underscores = len(name) - len(name.lstrip("_"))
    return _BINDING_RANK.get(binding, 3) * 16 + min(underscores, 15)


def _read_symbols(elf: ELFFile, section_name: str) -> _SymbolTable | None:
    section = elf.get_section_by_name(section_name)
    if section is None or not hasattr(section, "iter_symbols"):
        return None
    entries = []
    for sym in section.iter_symbols():
        if sym["st_info"]["type"] not in _FUNC_TYPES:
            continue
        if sym["st_shndx"] == "SHN_UNDEF" or sym["st_size"] == 0 or not sym.name:
            continue
        entries.append((sym["st_value"], sym["st_size"], sym.name,
                        _rank(sym.name, sym["st_info"]["bind"])))
    return _SymbolTable(entries) if entries else None


def read_build_id(elf: ELFFile) -> bytes:
    """The GNU build-id note's bytes, or b"" if the file has none."""
    for segment in elf.iter_segments():
        if segment["p_type"] != "PT_NOTE":
            continue
        for note in segment.iter_notes():
            if note["n_type"] == "NT_GNU_BUILD_ID":
                return bytes.fromhex(note["n_desc"])
    for section in elf.iter_sections():  # objects without program headers
        if section["sh_type"] == "SHT_NOTE":
            for note in section.iter_notes():
                if note["n_type"] == "NT_GNU_BUILD_ID":
                    return bytes.fromhex(note["n_desc"])
    return b""


class ElfModule:
    """One ELF file, read once: build id, PT_LOAD segments, function symbols, and
    (lazily, if the file has ``.debug_info``) DWARF inline chains.

    Lookups are memoized per virtual address and lookup kind.  Thread-safe for lookups.
    ``max_dwarf_bytes``: a ``.debug_info`` larger than this is not read (no inline
    frames for this module); None: no limit.
    """

    def __init__(self, path: str, debug_dirs: Sequence[str] = DEFAULT_DEBUG_DIRS,
                 max_dwarf_bytes: int | None = None, sysroot: str | None = None):
        self.path = path
        with open_regular(path)[0] as f:  # a mapping may name a fifo: never block on it
            identity = _file_identity(os.fstat(f.fileno()))
            elf = ELFFile(f)
            self.build_id = read_build_id(elf)
            debuglink = read_debuglink(elf)
            self.elf_type = elf["e_type"]
            self._loads = sorted(
                (seg["p_offset"], seg["p_filesz"], seg["p_vaddr"])
                for seg in elf.iter_segments() if seg["p_type"] == "PT_LOAD")
            self.symtab = _read_symbols(elf, ".symtab")
            self.dynsym = _read_symbols(elf, ".dynsym")
            info = elf.get_section_by_name(".debug_info") or elf.get_section_by_name(".zdebug_info")
            self.dwarf_bytes = (info["sh_size"] if info is not None
                                and info["sh_type"] != "SHT_NOBITS" else 0)
        #: The separate debug file whose .symtab is used ("" if none), and what was
        #: wrong with candidates that were found but not used (CRC or build-id mismatch,
        #: unreadable, no .symtab).
        self.debug_file = ""
        self.debug_problems: tuple[str, ...] = ()
        if self.symtab is None:
            found = find_debug_file(path, self.build_id, debuglink, debug_dirs, sysroot)
            self.debug_file, self.debug_problems = found.path, found.problems
            self.symtab = found.symtab
        self.dwarf_error = ""  # why this module's DWARF is not (or not fully) used
        self._dwarf: _DwarfInlines | None = None
        if self.dwarf_bytes:
            if max_dwarf_bytes is not None and self.dwarf_bytes > max_dwarf_bytes:
                self.dwarf_error = (f".debug_info is {self.dwarf_bytes} bytes, over the "
                                    f"max_dwarf_bytes limit of {max_dwarf_bytes}")
            else:
                self._dwarf = _DwarfInlines(path, identity)
        self._memo: dict[int, tuple[str, str, int] | None] = {}
        self._inline_memo: dict[int, tuple[tuple[str, str], ...]] = {}
        self._lock = threading.Lock()
        self._dwarf_lock = threading.Lock()

    @property
    def build_id_hex(self) -> str:
        return self.build_id.hex()

    @property
    def has_symbols(self) -> bool:
        return self.symtab is not None or self.dynsym is not None

    @property
    def has_dwarf(self) -> bool:
        """Whether inline frames are read from this module's DWARF."""
        return self._dwarf is not None

    def offset_to_vaddr(self, offset: int) -> int | None:
        """The virtual address of a file offset, through the PT_LOAD that holds it."""
        for p_offset, p_filesz, p_vaddr in self._loads:
            if p_offset <= offset < p_offset + p_filesz:
                return offset - p_offset + p_vaddr
        return None

    def function_at(self, vaddr: int) -> tuple[str, str, int] | None:
        """(demangled name, raw symbol, symbol start) covering vaddr, or None.  Memoized."""
        with self._lock:
            if vaddr in self._memo:
                return self._memo[vaddr]
        found = None
        for table in (self.symtab, self.dynsym):
            hit = table.lookup(vaddr) if table is not None else None
            if hit is not None:
                found = (demangle(hit[0]), hit[0], hit[1])
                break
        with self._lock:
            self._memo[vaddr] = found
        return found

    def inlined_at(self, vaddr: int) -> tuple[tuple[str, str], ...]:
        """(name, raw name) of each function inlined at vaddr, innermost first; ()
        where nothing is inlined there or the module has no (usable) DWARF.  Memoized."""
        if self._dwarf is None:
            return ()
        with self._lock:
            hit = self._inline_memo.get(vaddr)
        if hit is not None:
            return hit
        with self._dwarf_lock:  # pyelftools' section streams are not thread-safe
            with self._lock:
                hit = self._inline_memo.get(vaddr)
            if hit is not None:
                return hit
            dwarf = self._dwarf
            if dwarf is None:  # given up on by another thread meanwhile
                return ()
            try:
                chain = dwarf.chain(vaddr)
            except _DwarfUnusable as e:
                self.dwarf_error, self._dwarf, chain = str(e), None, ()
            except Exception as e:  # damaged or unsupported DWARF: this address only
                self.dwarf_error = f"{type(e).__name__}: {e} (at {vaddr:#x})"
                chain = ()
            with self._lock:
                self._inline_memo[vaddr] = chain
        return chain

    def inline_frames(self, vaddr: int, frame: SymbolizedFrame) -> list[SymbolizedFrame]:
        """The frames at ``vaddr``, innermost first: one per function inlined there
        (``inlined=True``, deepest first, named from DWARF), then ``frame``, the
        symbol's own (physical) frame.  ``[frame]`` where nothing is inlined or the
        module has no DWARF."""
        chain = self.inlined_at(vaddr)
        if not chain:
            return [frame]
        out = [dataclasses.replace(frame, function=name, symbol=raw, symbol_offset=None,
                                   inlined=True) for name, raw in chain]
        out.append(frame)
        return out


def _file_identity(st: os.stat_result) -> tuple:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


# ---------------------------------------------------------------- DWARF inline chains

class _DwarfUnusable(Exception):
    """The module's DWARF cannot be used at all (unreadable, or the file changed)."""


_ADDRESS_FORMS = frozenset({"DW_FORM_addr", "DW_FORM_addrx", "DW_FORM_addrx1", "DW_FORM_addrx2",
                            "DW_FORM_addrx3", "DW_FORM_addrx4", "DW_FORM_GNU_addr_index"})
#: Scopes inside a function that may hold inlined subroutines.
_BLOCK_TAGS = frozenset({"DW_TAG_lexical_block", "DW_TAG_inlined_subroutine",
                         "DW_TAG_try_block", "DW_TAG_catch_block"})
#: Scopes walked (besides the unit itself) when indexing a unit's function definitions.
_DEFINITION_SCOPES = frozenset({"DW_TAG_namespace", "DW_TAG_module"})
#: Scopes that qualify a DW_AT_name.
_QUALIFYING_SCOPES = frozenset({"DW_TAG_namespace", "DW_TAG_class_type", "DW_TAG_structure_type",
                                "DW_TAG_union_type", "DW_TAG_interface_type"})
#: DW_LANG_C89, C, C99, C11, C17: names need no qualification.
_C_LANGUAGES = frozenset({0x1, 0x2, 0xc, 0x1d, 0x2c})
_MAX_REFERENCE_HOPS = 16


def _text(value) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class _Intervals:
    """Half-open address ranges with a value each; lookup gives the latest-starting
    range holding an address (the innermost, where ranges nest)."""

    def __init__(self, items=()):
        self._pending = list(items)
        self._items: list[tuple[int, int, object]] = []
        self._starts: list[int] = []
        self._max_end: list[int] = []

    def add(self, lo: int, hi: int, value) -> None:
        self._pending.append((lo, hi, value))

    def _build(self) -> None:
        items = self._items + self._pending
        self._pending = []
        items.sort(key=lambda t: (t[0], t[1]))
        self._items = items
        self._starts = [lo for lo, _, _ in items]
        self._max_end, m = [], 0
        for _, hi, _ in items:
            m = max(m, hi)
            self._max_end.append(m)

    def lookup(self, vaddr: int):
        if self._pending:
            self._build()
        i = bisect.bisect_right(self._starts, vaddr) - 1
        while i >= 0 and self._max_end[i] > vaddr:
            lo, hi, value = self._items[i]
            if vaddr < hi:
                return value
            i -= 1
        return None


class _UnitIndex:
    """The function definitions (DW_TAG_subprogram DIEs with code) of one unit found
    so far, and how deep the unit was searched for them (`_DwarfInlines._LEVELS`)."""

    def __init__(self, items, level: int):
        self.functions = _Intervals(items)
        self.level = level


class _SlowPath(Exception):
    """The raw DIE scanner met something it does not handle; use pyelftools."""


# Raw DIE scanning: skipping a DIE by its abbreviation is ~10x cheaper than pyelftools
# parsing it, and most of a unit's top-level DIEs (types, declarations from headers)
# are only skipped on the way to its function definitions.
_FIXED_FORM_SIZES = {
    "DW_FORM_flag_present": 0, "DW_FORM_implicit_const": 0,
    "DW_FORM_data1": 1, "DW_FORM_ref1": 1, "DW_FORM_flag": 1, "DW_FORM_strx1": 1,
    "DW_FORM_addrx1": 1,
    "DW_FORM_data2": 2, "DW_FORM_ref2": 2, "DW_FORM_strx2": 2, "DW_FORM_addrx2": 2,
    "DW_FORM_strx3": 3, "DW_FORM_addrx3": 3,
    "DW_FORM_data4": 4, "DW_FORM_ref4": 4, "DW_FORM_strx4": 4, "DW_FORM_addrx4": 4,
    "DW_FORM_ref_sup4": 4,
    "DW_FORM_data8": 8, "DW_FORM_ref8": 8, "DW_FORM_ref_sig8": 8, "DW_FORM_ref_sup8": 8,
    "DW_FORM_data16": 16,
}
_OFFSET_SIZE_FORMS = frozenset({"DW_FORM_strp", "DW_FORM_line_strp", "DW_FORM_sec_offset",
                                "DW_FORM_strp_sup", "DW_FORM_GNU_ref_alt",
                                "DW_FORM_GNU_strp_alt"})
_LEB_FORMS = frozenset({"DW_FORM_udata", "DW_FORM_sdata", "DW_FORM_ref_udata", "DW_FORM_strx",
                        "DW_FORM_addrx", "DW_FORM_rnglistx", "DW_FORM_loclistx",
                        "DW_FORM_GNU_addr_index", "DW_FORM_GNU_str_index"})
_BLOCK_LENGTH_SIZES = {"DW_FORM_block1": 1, "DW_FORM_block2": 2, "DW_FORM_block4": 4}
# ops of a skip plan
_OP_FIXED, _OP_LEB, _OP_CSTR, _OP_BLOCK, _OP_BLOCK_LEB, _OP_SIB_REL, _OP_SIB_REL_LEB, \
    _OP_SIB_ABS = range(8)


def _uleb(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7


class _RawUnit:
    """Skip plans for one unit's abbreviations, over the raw .debug_info bytes."""

    def __init__(self, cu, data: bytes):
        self.cu = cu
        self.data = data
        self.end = cu.cu_offset + cu.size
        self.little = cu.structs.little_endian
        self.offset_size = 8 if cu.structs.dwarf_format == 64 else 4
        self.address_size = cu["address_size"]
        self.version = cu["version"]
        self._abbrevs = cu.get_abbrev_table()
        self._plans: dict[int, tuple] = {}

    def plan(self, code: int) -> tuple:
        plan = self._plans.get(code)
        if plan is None:
            plan = self._plans[code] = self._make_plan(code)
        return plan

    def _make_plan(self, code: int) -> tuple:
        decl = self._abbrevs.get_abbrev(code)
        ops: list[tuple[int, int]] = []
        has_code = False
        for name, form in decl.iter_attr_specs():
            if name in ("DW_AT_low_pc", "DW_AT_ranges"):
                has_code = True
            if name == "DW_AT_sibling":
                if form == "DW_FORM_ref_udata":
                    ops.append((_OP_SIB_REL_LEB, 0))
                elif form in ("DW_FORM_ref1", "DW_FORM_ref2", "DW_FORM_ref4", "DW_FORM_ref8"):
                    ops.append((_OP_SIB_REL, _FIXED_FORM_SIZES[form]))
                elif form == "DW_FORM_ref_addr":
                    ops.append((_OP_SIB_ABS, self._ref_addr_size()))
                else:
                    raise _SlowPath(f"sibling in {form}")
                continue
            size = _FIXED_FORM_SIZES.get(form)
            if size is None:
                if form in _OFFSET_SIZE_FORMS:
                    size = self.offset_size
                elif form == "DW_FORM_addr":
                    size = self.address_size
                elif form == "DW_FORM_ref_addr":
                    size = self._ref_addr_size()
            if size is not None:
                if size:
                    if ops and ops[-1][0] == _OP_FIXED:
                        ops[-1] = (_OP_FIXED, ops[-1][1] + size)
                    else:
                        ops.append((_OP_FIXED, size))
            elif form in _LEB_FORMS:
                ops.append((_OP_LEB, 0))
            elif form == "DW_FORM_string":
                ops.append((_OP_CSTR, 0))
            elif form in _BLOCK_LENGTH_SIZES:
                ops.append((_OP_BLOCK, _BLOCK_LENGTH_SIZES[form]))
            elif form in ("DW_FORM_block", "DW_FORM_exprloc"):
                ops.append((_OP_BLOCK_LEB, 0))
            else:  # DW_FORM_indirect and anything unforeseen
                raise _SlowPath(f"attribute form {form}")
        return decl["tag"], decl.has_children(), has_code, tuple(ops)

    def _ref_addr_size(self) -> int:
        return self.address_size if self.version <= 2 else self.offset_size

    def skip_attributes(self, pos: int, ops: tuple) -> tuple[int, int | None]:
        """Position after a DIE's attributes, and its DW_AT_sibling target (absolute)."""
        data = self.data
        sibling = None
        for op, n in ops:
            if op == _OP_FIXED:
                pos += n
            elif op == _OP_LEB:
                while data[pos] & 0x80:
                    pos += 1
                pos += 1
            elif op == _OP_CSTR:
                pos = data.index(0, pos) + 1
            elif op == _OP_BLOCK:
                pos += n + int.from_bytes(data[pos:pos + n], "little" if self.little else "big")
            elif op == _OP_BLOCK_LEB:
                length, pos = _uleb(data, pos)
                pos += length
            elif op == _OP_SIB_REL_LEB:
                value, pos = _uleb(data, pos)
                sibling = self.cu.cu_offset + value
            else:
                value = int.from_bytes(data[pos:pos + n], "little" if self.little else "big")
                pos += n
                sibling = value if op == _OP_SIB_ABS else self.cu.cu_offset + value
        return pos, sibling

    def definitions(self, pos: int, descend: frozenset | None, out: list) -> int:
        """Appends the offsets of function definitions (DW_TAG_subprogram DIEs whose
        abbreviation has DW_AT_low_pc or DW_AT_ranges) among the DIEs from pos to the
        end of their sibling list, looking inside the children of DIEs whose tag is in
        descend (None: of every DIE); returns the position after that list."""
        data, end = self.data, self.end
        while pos < end:
            start = pos
            code, pos = _uleb(data, pos)
            if code == 0:
                return pos
            tag, has_children, has_code, ops = self.plan(code)
            pos, sibling = self.skip_attributes(pos, ops)
            if has_code and tag == "DW_TAG_subprogram":
                out.append(start)
            if has_children:
                if descend is None or tag in descend:
                    pos = self.definitions(pos, descend, out)
                elif sibling is not None and pos <= sibling <= end:
                    pos = sibling
                else:
                    pos = self.definitions(pos, frozenset(), [])  # skip the subtree
        return pos


class _DwarfInlines:
    """Lazy DWARF reader answering "which functions are inlined at this address".

    The debug sections are loaded on the first question (pyelftools copies them into
    memory, so no file stays open); a compile unit is parsed only when an address
    falls in it.  Not thread-safe: `ElfModule` serializes calls.
    """

    def __init__(self, path: str, identity: tuple):
        self.path = path
        self._identity = identity
        self._dwarf = None
        self._aranges = None
        self._range_lists = None
        self._units: dict[int, _UnitIndex] = {}     # CU offset -> its function index
        self._ranges: dict[int, list[tuple[int, int]] | None] = {}  # DIE offset -> ranges
        self._names: dict[int, tuple[str, str] | None] = {}         # DIE offset -> name
        self._info: bytes | None = None  # the raw .debug_info, for _RawUnit
        self._raw_units: dict[int, _RawUnit] = {}
        self._unit_spans = _Intervals()  # CU ranges read so far -> CU offset
        self._unit_iter = None           # the CUs not read yet

    # -- loading

    def _load(self):
        if self._dwarf is not None:
            return self._dwarf
        try:
            with open_regular(self.path)[0] as f:
                if _file_identity(os.fstat(f.fileno())) != self._identity:
                    raise _DwarfUnusable("the file changed since its symbols were read")
                elf = ELFFile(f)
                try:
                    dwarf = elf.get_dwarf_info()
                except Exception:  # e.g. a supplementary (dwz) file that is not there
                    dwarf = elf.get_dwarf_info(follow_links=False)
        except _DwarfUnusable:
            raise
        except Exception as e:
            raise _DwarfUnusable(f"unreadable DWARF: {type(e).__name__}: {e}") from e
        if not dwarf.has_debug_info:
            raise _DwarfUnusable("no .debug_info")
        try:
            self._aranges = dwarf.get_aranges()
            if self._aranges is not None and not self._aranges.entries:
                self._aranges = None
        except Exception:
            self._aranges = None  # fall back to scanning the units
        self._range_lists = dwarf.range_lists()
        stream = dwarf.debug_info_sec.stream
        self._info = stream.getvalue() if hasattr(stream, "getvalue") else None
        self._dwarf = dwarf
        return dwarf

    # -- the question

    def chain(self, vaddr: int) -> tuple[tuple[str, str], ...]:
        """(name, raw name) of the functions inlined at vaddr, innermost first."""
        self._load()
        cu = self._unit_at(vaddr)
        if cu is None:
            return ()
        subprogram = self._function_at(cu, vaddr)
        if subprogram is None:
            return ()
        dies = self._inlined_chain(subprogram, vaddr) or []
        names = []
        for die in reversed(dies):  # innermost first
            name = self._name(die)
            if name is not None:
                names.append(name)
        return tuple(names)

    # -- compile units

    def _unit_at(self, vaddr: int):
        dwarf = self._dwarf
        if self._aranges is not None:
            offset = self._aranges.cu_offset_at_addr(vaddr)
            if offset is not None:
                return dwarf.get_CU_at(offset)
        # Not in .debug_aranges (or no such section): the units' own ranges, read from
        # their top DIEs in order, as far as needed.
        offset = self._unit_spans.lookup(vaddr)
        if offset is not None:
            return dwarf.get_CU_at(offset)
        if self._unit_iter is None:
            self._unit_iter = dwarf.iter_CUs()
        for cu in self._unit_iter:
            found = False
            for lo, hi in self._die_ranges(cu.get_top_DIE()) or ():
                if lo < hi:
                    self._unit_spans.add(lo, hi, cu.cu_offset)
                    found = found or lo <= vaddr < hi
            if found:
                return cu
        return None

    # How deep a unit is searched for function definitions, in turn, as long as an
    # address in it is not found: the unit's top level (where GCC puts every
    # definition, with DW_AT_specification for members and namespace members), then
    # inside namespaces (clang), then everywhere (member functions of local classes
    # and lambdas inside their function).  C units stop after the top level.
    _LEVELS = (frozenset(), _DEFINITION_SCOPES, None)

    def _function_at(self, cu, vaddr: int):
        index = self._units.get(cu.cu_offset)
        if index is None:
            index = self._units[cu.cu_offset] = _UnitIndex(self._definitions(cu, 0), 0)
        die = index.functions.lookup(vaddr)
        if die is None and index.level == 0:
            language = cu.get_top_DIE().attributes.get("DW_AT_language")
            if language is not None and language.value in _C_LANGUAGES:
                index.level = len(self._LEVELS) - 1
        while die is None and index.level < len(self._LEVELS) - 1:
            level = index.level + 1
            index = self._units[cu.cu_offset] = _UnitIndex(self._definitions(cu, level), level)
            die = index.functions.lookup(vaddr)
        return die

    def _definitions(self, cu, level: int) -> list[tuple[int, int, object]]:
        """(low, high, DIE) of the unit's function definitions, searched to level."""
        descend = self._LEVELS[level]
        top = cu.get_top_DIE()
        dies = None
        if self._info is not None:
            try:
                offsets: list[int] = []
                raw = self._raw_units.get(cu.cu_offset)
                if raw is None:
                    raw = self._raw_units[cu.cu_offset] = _RawUnit(cu, self._info)
                if top.has_children:
                    raw.definitions(top.offset + top.size, descend, offsets)
                dies = [cu.get_DIE_from_refaddr(offset) for offset in offsets]
            except (_SlowPath, IndexError, KeyError, ValueError):
                dies = None  # an unusual form, or bytes the scanner misread: pyelftools
        if dies is None:
            dies = []
            self._collect_definitions(top, descend, dies)
        return [(lo, hi, die) for die in dies if die.tag == "DW_TAG_subprogram"
                for lo, hi in (self._die_ranges(die) or ()) if lo < hi]

    def _collect_definitions(self, scope, descend: frozenset | None, out: list) -> None:
        for die in scope.iter_children():
            if die.tag == "DW_TAG_subprogram" and ("DW_AT_low_pc" in die.attributes
                                                   or "DW_AT_ranges" in die.attributes):
                out.append(die)
            if die.has_children and (descend is None or die.tag in descend):
                self._collect_definitions(die, descend, out)

    # -- inside a function

    def _inlined_chain(self, scope, vaddr: int) -> list | None:
        """The DW_TAG_inlined_subroutine DIEs below scope whose ranges hold vaddr,
        outermost first; None if no block below scope holds vaddr."""
        for child in scope.iter_children():
            if child.tag not in _BLOCK_TAGS:
                continue
            ranges = self._die_ranges(child)
            if ranges is None:  # a block without code ranges of its own: look inside
                if child.has_children:
                    inner = self._inlined_chain(child, vaddr)
                    if inner:
                        return inner
                continue
            if any(lo <= vaddr < hi for lo, hi in ranges):
                inner = (self._inlined_chain(child, vaddr) if child.has_children else None) or []
                return [child] + inner if child.tag == "DW_TAG_inlined_subroutine" else inner
        return None

    def _die_ranges(self, die) -> list[tuple[int, int]] | None:
        """The DIE's code ranges (DW_AT_ranges, or DW_AT_low_pc/high_pc), or None."""
        key = die.offset
        if key in self._ranges:
            return self._ranges[key]
        attrs = die.attributes
        out = None
        if "DW_AT_ranges" in attrs and self._range_lists is not None:
            cu = die.cu
            top = cu.get_top_DIE()
            base_attr = top.attributes.get("DW_AT_low_pc")
            base = base_attr.value if base_attr is not None else 0
            out = []
            for entry in self._range_lists.get_range_list_at_offset(
                    attrs["DW_AT_ranges"].value, cu=cu):
                if isinstance(entry, BaseAddressEntry):
                    base = entry.base_address
                elif entry.is_absolute:
                    out.append((entry.begin_offset, entry.end_offset))
                else:
                    out.append((base + entry.begin_offset, base + entry.end_offset))
        elif "DW_AT_low_pc" in attrs:
            low = attrs["DW_AT_low_pc"].value
            high = attrs.get("DW_AT_high_pc")
            if high is None:
                out = [(low, low + 1)]
            elif high.form in _ADDRESS_FORMS:
                out = [(low, high.value)]
            else:  # DWARF 4+: an offset from low_pc
                out = [(low, low + high.value)]
        self._ranges[key] = out
        return out

    # -- names

    def _name(self, die) -> tuple[str, str] | None:
        """(demangled name, raw name) of the function an inlined subroutine (or any
        function DIE) stands for: the first DW_AT_linkage_name along
        DW_AT_abstract_origin / DW_AT_specification, else the qualified DW_AT_name."""
        key = die.offset
        if key in self._names:
            return self._names[key]
        found = None
        named = None
        seen = set()
        d = die
        for _ in range(_MAX_REFERENCE_HOPS):
            seen.add(d.offset)
            attrs = d.attributes
            linkage = attrs.get("DW_AT_linkage_name") or attrs.get("DW_AT_MIPS_linkage_name")
            if linkage is not None:
                raw = _text(linkage.value)
                found = (demangle(raw), raw)
                break
            if "DW_AT_name" in attrs:
                named = d  # the last one: a declaration, in its class or namespace
            ref = next((a for a in ("DW_AT_abstract_origin", "DW_AT_specification")
                        if a in attrs), None)
            if ref is None:
                break
            d = d.get_DIE_from_attribute(ref)
            if d.offset in seen:
                break
        if found is None and named is not None:
            qualified = self._qualified(named)
            found = (qualified, qualified)
        self._names[key] = found
        return found

    def _qualified(self, die) -> str:
        """die's DW_AT_name qualified by its enclosing namespaces and classes; a local
        class (a lambda's closure type: ``{lambda}``) by its enclosing function."""
        name = _text(die.attributes["DW_AT_name"].value)
        language = die.cu.get_top_DIE().attributes.get("DW_AT_language")
        if language is not None and language.value in _C_LANGUAGES:
            return name
        parts = [name]
        parent = die.get_parent()
        while parent is not None:
            if parent.tag in _QUALIFYING_SCOPES:
                attr = parent.attributes.get("DW_AT_name")
                if attr is not None:
                    parts.append(_text(attr.value))
                elif parent.tag == "DW_TAG_namespace":
                    parts.append("(anonymous namespace)")
                else:  # an unnamed class: a lambda's closure type, or a local one
                    parts.append("{lambda}" if len(parts) == 1 and name == "operator()"
                                 else "{unnamed type}")
            elif parent.tag == "DW_TAG_subprogram":  # a local class's function
                enclosing = self._name(parent)
                if enclosing is not None:
                    parts.append(enclosing[0])
                break
            elif parent.tag != "DW_TAG_lexical_block":
                break
            parent = parent.get_parent()
        return "::".join(reversed(parts))


# ---------------------------------------------------------------- separate debug files

def read_debuglink(elf: ELFFile) -> tuple[str, int] | None:
    """(file name, CRC32) of the ``.gnu_debuglink`` section, or None.  The section is
    the name, NUL-terminated and padded to 4 bytes, then the CRC32 of the debug file."""
    section = elf.get_section_by_name(".gnu_debuglink")
    if section is None or section["sh_type"] == "SHT_NOBITS":
        return None
    data = section.data()
    end = data.find(b"\0")
    if end <= 0:
        return None
    at = (end + 4) & ~3
    if at + 4 > len(data):
        return None
    crc = int.from_bytes(data[at:at + 4], "little" if elf.little_endian else "big")
    name = data[:end].decode("utf-8", "surrogateescape")
    if "/" in name:  # a bare file name, by definition; anything else is not followed
        return None
    return name, crc


def file_crc32(path: str) -> int:
    """The CRC32 that ``.gnu_debuglink`` records (zlib's CRC-32, as GDB computes it)."""
    crc = 0
    with open_regular(path)[0] as f:
        while chunk := f.read(1 << 20):
            crc = zlib.crc32(chunk, crc)
    return crc


def effective_debug_dirs(debug_dirs: Sequence[str], sysroot: str | None) -> tuple[str, ...]:
    """The global debug directories searched: each under the sysroot first (if one is
    given), then as given.  Duplicates are searched once."""
    out: list[str] = []
    for d in debug_dirs:
        if sysroot:
            out.append(os.path.join(sysroot, d.lstrip("/")))
        out.append(d)
    return tuple(dict.fromkeys(os.path.normpath(d) for d in out))


@dataclasses.dataclass(frozen=True)
class DebugFile:
    """The outcome of `find_debug_file`."""

    path: str = ""                    # the debug file used ("" if none)
    symtab: _SymbolTable | None = None
    how: str = ""                     # "build-id" or "debuglink"
    problems: tuple[str, ...] = ()    # candidates found but not used, and why


def find_debug_file(binary: str, build_id: bytes, debuglink: tuple[str, int] | None,
                    debug_dirs: Sequence[str] = DEFAULT_DEBUG_DIRS,
                    sysroot: str | None = None) -> DebugFile:
    """The separate debug file of ``binary`` with a usable ``.symtab``, looked up as
    GDB does:

    1. by build id: ``D/.build-id/ab/cdef....debug`` for each debug directory D (each
       under the sysroot first; `effective_debug_dirs`); used if its build id equals
       the binary's;
    2. by ``.gnu_debuglink`` (name, CRC): ``<binary's dir>/name``, then
       ``<binary's dir>/.debug/name``, then ``D/<binary's dir>/name`` for each debug
       directory D -- where <binary's dir> is the directory the profile recorded
       (the local file's, less the sysroot); used if the file's CRC32 equals the
       recorded one (and, where both have one, its build id equals the binary's).

    A candidate that exists but does not match (or cannot be read, or has no
    ``.symtab``) is never used; it is listed in ``problems``.  Debug directories
    that do not exist are skipped."""
    dirs = effective_debug_dirs(debug_dirs, sysroot)
    problems: list[str] = []
    if len(build_id) >= 2:
        hexid = build_id.hex()
        for root in dirs:
            path = os.path.join(root, ".build-id", hexid[:2], hexid[2:] + ".debug")
            if os.path.isfile(path):
                table = _debug_candidate(path, build_id, None, problems)
                if table is not None:
                    return DebugFile(path, table, "build-id", tuple(problems))
    if debuglink is not None:
        name, crc = debuglink
        local_dir = os.path.dirname(binary)
        recorded_dir = local_dir
        if sysroot:
            root = os.path.normpath(sysroot)
            if local_dir == root or local_dir.startswith(root + "/"):
                recorded_dir = "/" + local_dir[len(root):].lstrip("/")
        candidates = []
        for d in dict.fromkeys((local_dir, os.path.dirname(os.path.realpath(binary)))):
            candidates += [os.path.join(d, name), os.path.join(d, ".debug", name)]
        candidates += [os.path.join(root, recorded_dir.lstrip("/"), name) for root in dirs]
        for path in dict.fromkeys(os.path.normpath(c) for c in candidates):
            if os.path.realpath(path) == os.path.realpath(binary) or not os.path.isfile(path):
                continue
            table = _debug_candidate(path, build_id, crc, problems)
            if table is not None:
                return DebugFile(path, table, "debuglink", tuple(problems))
    return DebugFile(problems=tuple(problems))


def _debug_candidate(path: str, build_id: bytes, crc: int | None,
                     problems: list[str]) -> _SymbolTable | None:
    try:
        if crc is not None:
            actual = file_crc32(path)
            if actual != crc:
                problems.append(f"{path}: CRC32 {actual:08x}, but .gnu_debuglink records "
                                f"{crc:08x} (not used)")
                return None
        with open_regular(path)[0] as f:
            elf = ELFFile(f)
            theirs = read_build_id(elf)
            if (crc is None or theirs) and build_id and theirs != build_id:
                problems.append(f"{path}: build id {theirs.hex() or '(none)'}, but the binary's "
                                f"is {build_id.hex()} (not used)")
                return None
            table = _read_symbols(elf, ".symtab")
    except (OSError, ELFError) as e:
        problems.append(f"{path}: unreadable ({e}) (not used)")
        return None
    except Exception as e:  # whatever a damaged file makes pyelftools raise
        problems.append(f"{path}: not a readable ELF file ({type(e).__name__}: {e}) (not used)")
        return None
    if table is None:
        problems.append(f"{path}: no function symbols in .symtab (not used)")
    return table


class ModuleCache:
    """Loads each ELF file once; remembers failures too.  Share one across profiles:
    the modules' per-address memos (symbols, inline chains) then serve them all.
    ``max_dwarf_bytes``: modules whose ``.debug_info`` is larger get no inline frames
    (default `DEFAULT_MAX_DWARF_BYTES`; None: no limit).

    Keyed by path and file identity (device, inode, size, mtime), so a file rebuilt
    in place is read again rather than answered from a stale entry.

    ``debug_dirs``: global debug-file directories for modules without ``.symtab``
    (`find_debug_file`; default ``/usr/lib/debug``; missing ones are skipped).
    ``sysroot``: a directory holding another machine's files (or package trees
    unpacked under a private root): a profile's recorded path ``/usr/lib/libfoo.so``
    is read from ``SYSROOT/usr/lib/libfoo.so`` if that exists, else from the path
    itself (`resolve`; build ids still decide whether it is the same file), and
    each debug directory is searched under the sysroot first.
    """

    def __init__(self, debug_dirs: Sequence[str] = DEFAULT_DEBUG_DIRS,
                 max_dwarf_bytes: int | None = DEFAULT_MAX_DWARF_BYTES,
                 sysroot: str | None = None):
        if isinstance(debug_dirs, str):
            debug_dirs = (debug_dirs,)
        self.debug_dirs = tuple(debug_dirs)
        self.sysroot = os.path.normpath(sysroot) if sysroot else None
        self.max_dwarf_bytes = max_dwarf_bytes
        self._modules: dict[tuple, ElfModule | tuple[str, str]] = {}
        self._lock = threading.Lock()

    def resolve(self, path: str) -> str:
        """The local file for a recorded mapping path: without a " (deleted)" suffix,
        under the sysroot if the file is there, else the path itself."""
        path = _default_resolve(path)
        if self.sysroot and path.startswith("/"):
            inside = path
            for _ in range(40):  # an absolute symlink in the sysroot points into it
                candidate = os.path.join(self.sysroot, inside.lstrip("/"))
                if not os.path.islink(candidate):
                    break
                target = os.readlink(candidate)
                if not target.startswith("/"):
                    break
                inside = target
            if os.path.exists(candidate):
                return candidate
        return path

    def get(self, path: str) -> ElfModule | tuple[str, str]:
        """The module, or (status, detail) if it cannot be read."""
        try:
            st = os.stat(path)
            key = (path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        except OSError:
            key = (path,)
        with self._lock:
            if key in self._modules:
                return self._modules[key]
        try:
            result: ElfModule | tuple[str, str] = ElfModule(path, self.debug_dirs,
                                                           self.max_dwarf_bytes, self.sysroot)
        except FileNotFoundError:
            result = (MISSING, "no such file")
        except IsADirectoryError:
            result = (MISSING, "is a directory")
        except PermissionError as e:
            result = (MISSING, f"unreadable: {e.strerror}")
        except OSError as e:
            result = (MISSING, f"unreadable: {e}")
        except Exception as e:  # ELFError, or whatever a damaged file makes pyelftools raise
            result = (NOT_ELF, f"not a readable ELF file: {type(e).__name__}: {e}")
        with self._lock:
            return self._modules.setdefault(key, result)


def check_search_paths(debug_dirs: Sequence[str] | None, sysroot: str | None) -> None:
    """Raises ValueError, naming the option, for a ``--sysroot`` that is not a directory
    or a ``--debug-dir`` that is one neither as given nor under the sysroot.  (The
    default debug directory may be missing: it is searched where it exists.)"""
    if sysroot and not os.path.isdir(sysroot):
        raise UsageError(f"--sysroot {sysroot}: not a directory")
    for d in debug_dirs or ():
        if not (os.path.isdir(d) or (sysroot and os.path.isdir(
                os.path.join(sysroot, d.lstrip("/"))))):
            where = f" (nor under the sysroot {sysroot})" if sysroot else ""
            raise UsageError(f"--debug-dir {d}: not a directory{where}")


_DEFAULT_CACHE: ModuleCache | None = None


def default_cache() -> ModuleCache:
    """A process-wide ModuleCache (one per Beam worker process)."""
    global _DEFAULT_CACHE
    if _DEFAULT_CACHE is None:
        _DEFAULT_CACHE = ModuleCache()
    return _DEFAULT_CACHE


# ---------------------------------------------------------------- the symbolizer

def _is_pseudo_path(path: str) -> bool:
    return not path or path.startswith("[") or path.startswith("anon_inode:") \
        or path.startswith("/memfd:") or path.startswith("//anon")


class Symbolizer:
    """Symbolizes addresses of one process image (one profile's mappings).

    ``mappings``: objects with ``id``, ``start``, ``limit``, ``file_offset``,
    ``path``, ``build_id`` (the profile's Mapping messages, or anything alike).
    ``resolve_path``: maps a recorded path to a local file (profiles from another
    machine); default: the cache's `ModuleCache.resolve` (the path itself, without a
    " (deleted)" suffix, or its copy under the cache's sysroot).
    ``inline_frames``: expand addresses into DWARF inline frames (modules with
    ``.debug_info`` only); False: one frame per address.
    """

    def __init__(self, mappings: Iterable, cache: ModuleCache | None = None,
                 resolve_path: Callable[[str], str] | None = None,
                 allow_build_id_mismatch: bool = False, inline_frames: bool = True):
        self.cache = cache if cache is not None else default_cache()
        self.resolve_path = resolve_path or self.cache.resolve
        self.allow_build_id_mismatch = allow_build_id_mismatch
        self.inline_frames = inline_frames
        ordered = sorted(mappings, key=lambda m: (m.start, m.id))
        self._mappings = ordered
        self._starts = [m.start for m in ordered]
        self._max_limit = []
        top = 0
        for m in ordered:
            top = max(top, m.limit)
            self._max_limit.append(top)
        self._checked: dict[tuple[str, bytes], tuple[ElfModule | None, ModuleStatus]] = {}
        self._memo: dict[tuple[int, bool], list[SymbolizedFrame]] = {}

    # -- mappings and modules

    def mapping_for(self, address: int):
        """The mapping holding address (latest id where several do), or None."""
        i = bisect.bisect_right(self._starts, address) - 1
        found = None
        while i >= 0 and self._max_limit[i] > address:
            m = self._mappings[i]
            if m.start <= address < m.limit and (found is None or m.id > found.id):
                found = m
            i -= 1
        return found

    def _module(self, mapping) -> ElfModule | None:
        """The module to symbolize mapping's addresses with, or None (then tokens)."""
        key = (mapping.path, bytes(mapping.build_id))
        entry = self._checked.get(key)
        if entry is None:
            entry = self._checked[key] = self._check(mapping)
        module, status = entry
        if status.usable or (status.status == BUILD_ID_MISMATCH
                             and self.allow_build_id_mismatch):
            return module
        return None

    def _check(self, mapping) -> tuple[ElfModule | None, ModuleStatus]:
        path = mapping.path
        expected = bytes(mapping.build_id).hex()
        if _is_pseudo_path(path):
            return None, ModuleStatus(path, NO_FILE, expected, detail="no backing file")
        local = self.resolve_path(path)
        loaded = self.cache.get(local)
        if isinstance(loaded, tuple):
            detail = loaded[1]
            if self.cache.sysroot and local == _default_resolve(path):
                detail += f" (nor under the sysroot {self.cache.sysroot})"
            return None, ModuleStatus(path, loaded[0], expected, detail=detail)
        actual = loaded.build_id_hex
        if not expected:
            return loaded, ModuleStatus(path, UNVERIFIED, expected, actual,
                                        _joined("the profile recorded no build id",
                                                _debug_detail(loaded, local, path)))
        if expected != actual:
            detail = ("the file has no build id" if not actual
                      else "the file is a different build")
            if local != _default_resolve(path):
                detail += f" (read {local})"
            return loaded, ModuleStatus(path, BUILD_ID_MISMATCH, expected, actual, detail)
        return loaded, ModuleStatus(path, OK, expected, actual,
                                    _debug_detail(loaded, local, path))

    def module_status(self) -> dict[str, ModuleStatus]:
        """Status per module path seen so far (checked lazily, on first use)."""
        out: dict[str, ModuleStatus] = {}
        for (path, _), (_, status) in self._checked.items():
            if path not in out or not status.usable:
                out[path] = status
        return out

    def check_all_modules(self) -> dict[str, ModuleStatus]:
        """Checks every mapping's module now; returns module_status()."""
        for m in self._mappings:
            self._module(m)
        return self.module_status()

    # -- addresses and stacks

    def symbolize_address(self, address: int, is_return_address: bool) -> list[SymbolizedFrame]:
        """Frames for one stack address, innermost first: the functions inlined there
        (``inlined=True``), then the physical function's frame; a single frame where
        nothing is inlined, the module has no DWARF, or the address is not named."""
        key = (address, is_return_address)
        frames = self._memo.get(key)
        if frames is None:
            frames = self._symbolize(address, address - 1 if is_return_address else address)
            self._memo[key] = frames
        return frames

    def _symbolize(self, address: int, lookup: int) -> list[SymbolizedFrame]:
        mapping = self.mapping_for(lookup)
        if mapping is None:
            return [SymbolizedFrame(address, UNKNOWN_MODULE_TOKEN)]
        offset = lookup - mapping.start + mapping.file_offset
        token = SymbolizedFrame(address, module_token(mapping.path), mapping.path, offset)
        module = self._module(mapping)
        if module is None:
            return [token]
        vaddr = module.offset_to_vaddr(offset)
        if vaddr is None:
            return [token]
        hit = module.function_at(vaddr)
        if hit is None:
            return [token]
        name, raw, start = hit
        frame = dataclasses.replace(token, function=name, symbol=raw, symbol_offset=vaddr - start)
        if not self.inline_frames:
            return [frame]
        return module.inline_frames(vaddr, frame)

    def symbolize_stack(self, addresses: Sequence[int],
                        leaf_is_return_address: bool = False) -> list[SymbolizedFrame]:
        """Symbolized frames, leaf first.  Every non-leaf address is a return address
        (looked up at address - 1); the leaf is one too if leaf_is_return_address."""
        frames: list[SymbolizedFrame] = []
        for i, address in enumerate(addresses):
            frames.extend(self.symbolize_address(address, i > 0 or leaf_is_return_address))
        return frames


def _default_resolve(path: str) -> str:
    return path[:-len(" (deleted)")] if path.endswith(" (deleted)") else path


def _joined(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


def _debug_detail(module: ElfModule, local: str, path: str) -> str:
    """Where a usable module's symbols came from, for ModuleStatus.detail."""
    parts = []
    if local != _default_resolve(path):
        parts.append(f"read {local}")
    if module.debug_file:
        parts.append(f"symbols from {module.debug_file}")
    parts += module.debug_problems
    return _joined(*parts)


# ---------------------------------------------------------------- C++ names

_CLONE_SUFFIX = re.compile(r"( \[clone [^\]]*\])+$")
_OPEN = {"<": ">", "(": ")", "[": "]", "{": "}"}
_OPERATOR_PUNCT = set("<>=!+-*/%^&|~,")


def qualified_name(demangled: str) -> str:
    """The qualified function name of a demangled symbol: no return type, no
    parameter list, no qualifiers or clone suffix.

    ``void std::vector<int>::_M_realloc_insert<>(...) [clone .cold]`` ->
    ``std::vector<int>::_M_realloc_insert<>``;  ``(anonymous namespace)::f(int)`` ->
    ``(anonymous namespace)::f``;  ``X::operator()(int) const`` -> ``X::operator()``.
    Plain C names come back unchanged.
    """
    s = _CLONE_SUFFIX.sub("", demangled)
    depth = 0
    start = 0
    i = 0
    n = len(s)
    while i < n:
        c = s[i]
        if depth == 0 and s.startswith("operator", i) and (i == 0 or s[i - 1] in ": ") \
                and not (i + 8 < n and (s[i + 8].isalnum() or s[i + 8] == "_")):
            i = _skip_operator(s, i + 8)
            continue
        if c in _OPEN:
            if depth == 0 and c == "(":
                close = _match(s, i)
                if s.startswith("::", close + 1):  # "(anonymous namespace)::", "f(int)::"
                    i = close + 1
                    continue
                return s[start:i]
            depth += 1
        elif c in ">)]}":
            depth = max(depth - 1, 0)
        elif c == " " and depth == 0:
            start = i + 1
        i += 1
    return s[start:]


def _match(s: str, i: int) -> int:
    depth = 0
    for j in range(i, len(s)):
        if s[j] in "([{<":
            depth += 1
        elif s[j] in ")]}>":
            depth -= 1
            if depth == 0:
                return j
    return len(s) - 1


def _skip_operator(s: str, i: int) -> int:
    """Index just past the operator's symbol (s[i:] follows the word 'operator')."""
    n = len(s)
    if s.startswith("()", i) or s.startswith("[]", i):
        return i + 2
    if s.startswith('""', i):  # user-defined literal: operator"" _x
        j = i + 2
        while j < n and (s[j] == " " or s[j].isalnum() or s[j] == "_"):
            j += 1
        return j
    if i < n and s[i] == " ":  # new, delete, new[], conversion operators: up to "("
        j, depth = i, 0
        while j < n and not (depth == 0 and s[j] == "("):
            if s[j] in "<[":
                depth += 1
            elif s[j] in ">]":
                depth -= 1
            j += 1
        return j
    j = i
    while j < n and s[j] in _OPERATOR_PUNCT:
        j += 1
    if s.startswith(" <", j):  # template arguments of an operator: "operator< <char>"
        j += 1
    return j


# ---------------------------------------------------------------- allocation sites

#: Rule 2: allocator entry points and their glibc-internal aliases, by exact name.
ALLOCATOR_FUNCTIONS = frozenset({
    "malloc", "calloc", "realloc", "free", "cfree", "posix_memalign", "aligned_alloc",
    "memalign", "valloc", "pvalloc", "reallocarray", "malloc_usable_size",
    # libc functions that return fresh heap memory on their caller's behalf
    "strdup", "strndup", "wcsdup", "asprintf", "vasprintf", "__strdup", "__strndup",
    "__asprintf", "__vasprintf_internal",
    # C++ runtime allocations made on the caller's behalf
    "__cxa_allocate_exception", "__cxa_allocate_dependent_exception",
})
_GLIBC_INTERNAL = re.compile(
    r"^(?:__GI_)?(?:__libc_|__)(?:malloc|calloc|realloc|free|memalign|valloc|pvalloc|"
    r"posix_memalign|aligned_alloc|reallocarray)$|^_int_(?:malloc|free|realloc|memalign)$|"
    r"^_mid_memalign$|^tcache_init$|^malloc_hook_ini$")
#: Rule 1: modules that are allocation machinery as a whole (basename prefixes).
SAMPLER_MODULE_PREFIXES = ("liblifetime_sampler",)
#: Rule 4: runtime modules whose *unnamed* frames are stripped (basename prefixes).
RUNTIME_MODULE_PREFIXES = ("libc.so", "libc-", "libstdc++.so", "ld-linux", "libgcc_s.so",
                           "libpthread.so")
#: Rule 3: namespaces of the C++ standard library.
STD_NAMESPACES = ("std::", "__gnu_cxx::", "__cxxabiv1::")


def allocator_rule(frame: SymbolizedFrame) -> str | None:
    """Which stripping rule (``"sampler"``, ``"allocator"``, ``"std"``,
    ``"runtime"``) matches frame, or None if it is application code."""
    base = os.path.basename(frame.module)
    if base.startswith(SAMPLER_MODULE_PREFIXES):
        return "sampler"
    name = frame.function
    if not frame.resolved:
        return "runtime" if base.startswith(RUNTIME_MODULE_PREFIXES) else None
    qualified = qualified_name(name)
    if qualified in ALLOCATOR_FUNCTIONS or _GLIBC_INTERNAL.match(qualified):
        return "allocator"
    if qualified.startswith(("operator new", "operator delete")):
        return "allocator"
    if qualified.startswith(STD_NAMESPACES):
        return "std"
    return None


def strip_allocator_frames(frames: Sequence[SymbolizedFrame]) -> list[SymbolizedFrame]:
    """The stack without the allocation machinery at its top (leaf first in and out).

    Leading frames are removed while one of these rules matches (see
    `allocator_rule`); the first frame that matches none, and everything below it,
    is kept even if a later frame would match:

    1. ``sampler``: any frame in the sampler library (module basename starting
       with ``liblifetime_sampler``), named or not.
    2. ``allocator``: a function whose qualified name (`qualified_name`) is a C
       allocator entry point -- ``malloc calloc realloc free posix_memalign
       aligned_alloc memalign valloc pvalloc reallocarray`` and their glibc aliases
       (``__libc_malloc``, ``__GI___libc_malloc``, ``_int_malloc``, ...) -- or a
       libc/C++-runtime function allocating for its caller (``strdup strndup
       wcsdup asprintf vasprintf __cxa_allocate_exception``, listed in
       ``ALLOCATOR_FUNCTIONS``), or any ``operator new`` / ``operator new[]`` /
       ``operator delete`` overload (nothrow, sized, aligned), in any module.
    3. ``std``: a function of the C++ standard library, i.e. whose qualified name
       starts with ``std::``, ``__gnu_cxx::`` or ``__cxxabiv1::`` -- allocators
       (``std::__new_allocator``, ``__gnu_cxx::new_allocator``,
       ``std::allocator_traits``), containers and strings growing
       (``std::vector<T>::_M_realloc_insert``, ``std::__cxx11::basic_string::
       _M_create``, ``std::_Hashtable``...), smart-pointer factories
       (``std::make_unique``, ``std::__shared_count``).  The rule is by namespace,
       not by module, because these templates are instantiated in the application
       binary; it looks past a template function's return type, so
       ``std::vector<int> app::f<int>()`` is application code.
    4. ``runtime``: an *unnamed* frame (a ``<module+?>`` token) in libc, ld.so,
       libstdc++, libgcc_s or libpthread: not application code, and unknowable.

    Inline frames (``inlined=True``, from DWARF) are matched one by one like the
    others, with one exception: code inlined *into* an allocator function (rule 2:
    ``tcache_get`` inlined into ``malloc``, a pool helper into a custom ``operator
    new``) is part of it, so the inlined frames directly above a physical frame
    that matches rule 1 or 2 at the same address are stripped with it.

    Consequence: where the module has no DWARF, an application function inlined
    into a ``std::`` frame (a lambda body inlined into
    ``std::_Function_handler::_M_invoke``) is stripped with it, and the site becomes
    the frame below; with DWARF the lambda is its own inlined frame and becomes the
    site.  Unnamed application frames are kept.
    """
    i, n = 0, len(frames)
    while i < n:
        if allocator_rule(frames[i]) is not None:
            i += 1
            continue
        if not frames[i].inlined:
            break
        j = i  # the physical frame these inlined frames belong to
        while j < n and frames[j].inlined and frames[j].address == frames[i].address:
            j += 1
        if j < n and frames[j].address == frames[i].address \
                and allocator_rule(frames[j]) in ("sampler", "allocator"):
            i = j + 1
            continue
        break
    return list(frames[i:])


def allocation_site(frames: Sequence[SymbolizedFrame]) -> SymbolizedFrame | None:
    """The first frame after stripping the allocator (None if nothing is left)."""
    rest = strip_allocator_frames(frames)
    return rest[0] if rest else None
