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
   module without ``.symtab`` also tries a separate debug file found by build id
   under the ``debug_dirs`` (``/usr/lib/debug/.build-id/ab/cdef....debug``).
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
``<libfoo.so+?>`` (module basename) for an address inside a mapping whose module
is missing, mismatched, stripped or has no symbol there, and ``<unknown+?>`` for an
address outside every mapping.  Module problems are reported per module as a
`ModuleStatus` (see `Symbolizer.module_status`), never raised.

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
read again), and each distinct virtual address is symbolized once per module.

Inline frames.  One address is one frame today.  DWARF inline expansion
(``.debug_info`` ``DW_TAG_inlined_subroutine`` chains, turning one address into
several frames marked ``inlined=True``) belongs in `ElfModule.inline_frames`,
which `Symbolizer.symbolize_address` already calls and whose results
`symbolize_stack` already flattens; it currently returns the symbol's frame alone.

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
from typing import Callable, Iterable, Sequence

import cxxfilt
from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

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
    function: str                  # demangled name, or a module token like <libfoo.so+?>
    module: str = ""               # mapping path ("" if the address is unmapped)
    module_offset: int | None = None  # file offset in the module
    symbol: str | None = None      # raw (mangled) symbol name, if named
    symbol_offset: int | None = None  # looked-up address minus the symbol's start
    inlined: bool = False          # set by DWARF inline expansion (not implemented yet)

    @property
    def resolved(self) -> bool:
        return self.symbol is not None


def module_token(path: str) -> str:
    """The stable stand-in for an unnamed frame in module ``path``."""
    if not path:
        return UNKNOWN_MODULE_TOKEN
    return f"<{os.path.basename(path.rstrip('/')) or path}+?>"


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
    """One ELF file, read once: build id, PT_LOAD segments, function symbols.

    Lookups are memoized per virtual address.  Thread-safe for lookups.
    """

    def __init__(self, path: str, debug_dirs: Sequence[str] = DEFAULT_DEBUG_DIRS):
        self.path = path
        with open(path, "rb") as f:
            elf = ELFFile(f)
            self.build_id = read_build_id(elf)
            self.elf_type = elf["e_type"]
            self._loads = sorted(
                (seg["p_offset"], seg["p_filesz"], seg["p_vaddr"])
                for seg in elf.iter_segments() if seg["p_type"] == "PT_LOAD")
            self.symtab = _read_symbols(elf, ".symtab")
            self.dynsym = _read_symbols(elf, ".dynsym")
        self.debug_file = None
        if self.symtab is None and self.build_id:
            self.debug_file, self.symtab = _debug_symtab(self.build_id, debug_dirs)
        self._memo: dict[int, tuple[str, str, int] | None] = {}
        self._lock = threading.Lock()

    @property
    def build_id_hex(self) -> str:
        return self.build_id.hex()

    @property
    def has_symbols(self) -> bool:
        return self.symtab is not None or self.dynsym is not None

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

    def inline_frames(self, vaddr: int, frame: SymbolizedFrame) -> list[SymbolizedFrame]:
        """Extension point for DWARF inline expansion (not implemented).

        Should return the frames at ``vaddr`` innermost first: the inlined callees
        (``inlined=True``) and last ``frame`` with its function replaced by the
        outermost (real) function.  Today: ``[frame]``.
        """
        return [frame]


def _debug_symtab(build_id: bytes, debug_dirs: Sequence[str]):
    if len(build_id) < 2:
        return None, None
    hexid = build_id.hex()
    for root in debug_dirs:
        path = os.path.join(root, ".build-id", hexid[:2], hexid[2:] + ".debug")
        if not os.path.isfile(path):
            continue
        try:
            with open(path, "rb") as f:
                elf = ELFFile(f)
                if read_build_id(elf) != build_id:
                    continue
                table = _read_symbols(elf, ".symtab")
            if table is not None:
                return path, table
        except (OSError, ELFError):
            continue
    return None, None


class ModuleCache:
    """Loads each ELF file once; remembers failures too.  Share one across profiles.

    Keyed by path and file identity (device, inode, size, mtime), so a file rebuilt
    in place is read again rather than answered from a stale entry.
    """

    def __init__(self, debug_dirs: Sequence[str] = DEFAULT_DEBUG_DIRS):
        self.debug_dirs = tuple(debug_dirs)
        self._modules: dict[tuple, ElfModule | tuple[str, str]] = {}
        self._lock = threading.Lock()

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
            result: ElfModule | tuple[str, str] = ElfModule(path, self.debug_dirs)
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
    machine, a sysroot); default: the path itself, without a " (deleted)" suffix.
    """

    def __init__(self, mappings: Iterable, cache: ModuleCache | None = None,
                 resolve_path: Callable[[str], str] | None = None,
                 allow_build_id_mismatch: bool = False):
        self.cache = cache if cache is not None else default_cache()
        self.resolve_path = resolve_path or _default_resolve
        self.allow_build_id_mismatch = allow_build_id_mismatch
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
        loaded = self.cache.get(self.resolve_path(path))
        if isinstance(loaded, tuple):
            return None, ModuleStatus(path, loaded[0], expected, detail=loaded[1])
        actual = loaded.build_id_hex
        if not expected:
            return loaded, ModuleStatus(path, UNVERIFIED, expected, actual,
                                        "the profile recorded no build id")
        if expected != actual:
            detail = ("the file has no build id" if not actual
                      else "the file is a different build")
            return loaded, ModuleStatus(path, BUILD_ID_MISMATCH, expected, actual, detail)
        return loaded, ModuleStatus(path, OK, expected, actual)

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
        """Frames for one stack address, innermost first (one, until inline expansion)."""
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

    Consequence: an application function inlined into a ``std::`` frame (a lambda
    body inlined into ``std::_Function_handler::_M_invoke``) is stripped with it,
    and the site becomes the frame below.  Unnamed application frames are kept.
    """
    i = 0
    while i < len(frames) and allocator_rule(frames[i]) is not None:
        i += 1
    return list(frames[i:])


def allocation_site(frames: Sequence[SymbolizedFrame]) -> SymbolizedFrame | None:
    """The first frame after stripping the allocator (None if nothing is left)."""
    rest = strip_allocator_frames(frames)
    return rest[0] if rest else None
