"""The modules of a process image, loaded once (`ModuleCache`: each ELF file read
once, failures remembered), and how each fared (`ModuleStatus`)."""

from __future__ import annotations

import dataclasses
import os
import threading
from typing import Sequence

from core.errors import UsageError
from core.files import under_sysroot
from core.symbolize.debug_files import DEFAULT_DEBUG_DIRS
from core.symbolize.elf_file import file_identity
from core.symbolize.elf_module import ElfModule

# ModuleStatus.status values (the package docstring, "Build ids", says what each means).
OK = "ok"
UNVERIFIED = "unverified"
BUILD_ID_MISMATCH = "build_id_mismatch"
MISSING = "missing"
NOT_ELF = "not_elf"
NO_FILE = "no_file"
#: Statuses whose frames are symbolized.
USABLE_STATUSES = (OK, UNVERIFIED)

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


def strip_deleted(path: str) -> str:
    """A recorded mapping path without the " (deleted)" the kernel appends to files
    removed while mapped."""
    return path[:-len(" (deleted)")] if path.endswith(" (deleted)") else path


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
        return under_sysroot(strip_deleted(path), self.sysroot)

    def get(self, path: str) -> ElfModule | tuple[str, str]:
        """The module, or (status, detail) if it cannot be read."""
        try:
            st = os.stat(path)
            key = (path, *file_identity(st))
        except (OSError, ValueError):  # ValueError: a NUL in a path a profile names
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
