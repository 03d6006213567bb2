"""One ELF file as the symbolizer uses it (`ElfModule`): read once, then asked which
function holds a virtual address and what is inlined there, with the answers
memoized per address."""

from __future__ import annotations

import dataclasses
import os
import threading
from typing import Sequence

from elftools.elf.elffile import ELFFile

from core.files import open_regular
from core.symbolize.cxx_names import demangle
from core.symbolize.debug_files import DEFAULT_DEBUG_DIRS, find_debug_file
from core.symbolize.dwarf_inline import DwarfInlines, DwarfUnusable
from core.symbolize.elf_file import file_identity, read_build_id, read_debuglink, read_symbols
from core.symbolize.frames import SymbolizedFrame


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
            identity = file_identity(os.fstat(f.fileno()))
            elf = ELFFile(f)
            self.build_id = read_build_id(elf)
            debuglink = read_debuglink(elf)
            self._loads = sorted(
                (seg["p_offset"], seg["p_filesz"], seg["p_vaddr"])
                for seg in elf.iter_segments() if seg["p_type"] == "PT_LOAD")
            self.symtab = read_symbols(elf, ".symtab")
            self.dynsym = read_symbols(elf, ".dynsym")
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
        self._dwarf: DwarfInlines | None = None
        if self.dwarf_bytes:
            if max_dwarf_bytes is not None and self.dwarf_bytes > max_dwarf_bytes:
                self.dwarf_error = (f".debug_info is {self.dwarf_bytes} bytes, over the "
                                    f"max_dwarf_bytes limit of {max_dwarf_bytes}")
            else:
                self._dwarf = DwarfInlines(path, identity)
        self._memo: dict[int, tuple[str, str, int] | None] = {}
        self._inline_memo: dict[int, tuple[tuple[str, str], ...]] = {}
        self._lock = threading.Lock()
        self._dwarf_lock = threading.Lock()

    @property
    def build_id_hex(self) -> str:
        return self.build_id.hex()

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
            except DwarfUnusable as e:
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
