"""Separate debug files: where a stripped binary's ``.symtab`` is found
(`find_debug_file`), by build id under the debug directories or through its
``.gnu_debuglink``, as GDB looks for them."""

from __future__ import annotations

import dataclasses
import os
import zlib
from typing import Sequence

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from core.files import open_regular
from core.symbolize.elf_file import SymbolTable, read_build_id, read_symbols

DEFAULT_DEBUG_DIRS = ("/usr/lib/debug",)


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
    symtab: SymbolTable | None = None
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
                    return DebugFile(path, table, tuple(problems))
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
                return DebugFile(path, table, tuple(problems))
    return DebugFile(problems=tuple(problems))


def _debug_candidate(path: str, build_id: bytes, crc: int | None,
                     problems: list[str]) -> SymbolTable | None:
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
            table = read_symbols(elf, ".symtab")
    except (OSError, ELFError) as e:
        problems.append(f"{path}: unreadable ({e}) (not used)")
        return None
    except Exception as e:  # whatever a damaged file makes pyelftools raise
        problems.append(f"{path}: not a readable ELF file ({type(e).__name__}: {e}) (not used)")
        return None
    if table is None:
        problems.append(f"{path}: no function symbols in .symtab (not used)")
    return table
