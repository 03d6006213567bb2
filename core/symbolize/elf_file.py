"""What is read from one ELF file's headers and sections: its function symbols
(`SymbolTable`, `read_symbols`), GNU build id (`read_build_id`) and
``.gnu_debuglink`` (`read_debuglink`); and `file_identity`, which tells whether a
file was replaced since it was read."""

from __future__ import annotations

import os
from typing import Iterable

from elftools.elf.elffile import ELFFile

from core.symbolize.intervals import Intervals

_FUNC_TYPES = frozenset({"STT_FUNC", "STT_GNU_IFUNC", "STT_LOOS"})  # LOOS == GNU_IFUNC
_BINDING_RANK = {"STB_GLOBAL": 0, "STB_WEAK": 1, "STB_GNU_UNIQUE": 1, "STB_LOCAL": 2}


class SymbolTable:
    """Function symbols of one ELF symbol section, sorted for binary search."""

    def __init__(self, entries: Iterable[tuple[int, int, str, int]]):
        # entries: (start, size, name, preference rank); for equal ranges keep the best.
        best: dict[tuple[int, int], tuple[int, str]] = {}
        for start, size, name, rank in entries:
            key = (start, size)
            if key not in best or (rank, name) < best[key]:
                best[key] = (rank, name)
        #: (start, size, rank, name) of each symbol, sorted.
        self._items = sorted((start, size, rank, name)
                             for (start, size), (rank, name) in best.items())
        self._ranges = Intervals((start, start + size, (size, rank, name))
                                 for start, size, rank, name in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def lookup(self, vaddr: int) -> tuple[str, int] | None:
        """(name, start) of the symbol covering vaddr, or None.  Where symbols nest,
        the innermost (latest start, then smallest) wins."""
        best = min(self._ranges.covering(vaddr), default=None,
                   key=lambda item: (-item[0], *item[2]))
        return (best[2][2], best[0]) if best else None


def _rank(name: str, binding: str) -> int:
    """Which of several symbols at one range names it: GLOBAL over WEAK over LOCAL,
    then fewest leading underscores (``malloc`` over ``__libc_malloc``)."""
    underscores = len(name) - len(name.lstrip("_"))
    return _BINDING_RANK.get(binding, 3) * 16 + min(underscores, 15)


def read_symbols(elf: ELFFile, section_name: str) -> SymbolTable | None:
    """The defined function symbols (size > 0) of a symbol section, or None if the
    section is absent or holds none."""
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
    return SymbolTable(entries) if entries else None


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


def file_identity(st: os.stat_result) -> tuple:
    """(device, inode, size, mtime): changes when a file is rebuilt or replaced."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
