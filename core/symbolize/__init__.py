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

Inline frames: DWARF inline chains (`dwarf_inline`, its docstring says how they are
read and what they cost).  Allocation sites: `strip_allocator_frames` removes the
allocator and its wrappers from the top of a symbolized stack (rules in its
docstring); `allocation_site` is the first frame left.

One module per job: `frames` (frames and module tokens), `cxx_names` (demangling,
qualified names), `intervals` (the sorted-interval lookup), `elf_file` (symbol
tables, build id, debuglink), `debug_files` (separate debug files), `dwarf_scan` and
`dwarf_inline` (inline chains), `elf_module` (one ELF file), `module_cache` (modules
loaded once, their status), `symbolizer` (stacks), `allocator_frames` (sites).
This package re-exports their public names.
"""

from core.symbolize.allocator_frames import (
    ALLOCATOR_FUNCTIONS, RUNTIME_MODULE_PREFIXES, SAMPLER_MODULE_PREFIXES, STD_NAMESPACES,
    allocation_site, allocator_rule, strip_allocator_frames)
from core.symbolize.cxx_names import demangle, qualified_name
from core.symbolize.debug_files import (
    DEFAULT_DEBUG_DIRS, DebugFile, effective_debug_dirs, file_crc32, find_debug_file)
from core.symbolize.elf_file import (
    SymbolTable, read_build_id, read_debuglink, read_symbols)
from core.symbolize.elf_module import ElfModule
from core.symbolize.frames import (
    UNKNOWN_MODULE_TOKEN, SymbolizedFrame, module_name, module_token)
from core.symbolize.intervals import Intervals
from core.symbolize.module_cache import (
    BUILD_ID_MISMATCH, DEFAULT_MAX_DWARF_BYTES, MISSING, NO_FILE, NOT_ELF, OK, UNVERIFIED,
    USABLE_STATUSES, ModuleCache, ModuleStatus, check_search_paths, default_cache)
from core.symbolize.symbolizer import Symbolizer

__all__ = [
    "ALLOCATOR_FUNCTIONS", "BUILD_ID_MISMATCH", "DEFAULT_DEBUG_DIRS", "DEFAULT_MAX_DWARF_BYTES",
    "DebugFile", "ElfModule", "Intervals", "MISSING", "ModuleCache", "ModuleStatus", "NOT_ELF",
    "NO_FILE", "OK", "RUNTIME_MODULE_PREFIXES", "SAMPLER_MODULE_PREFIXES", "STD_NAMESPACES",
    "SymbolTable", "SymbolizedFrame", "Symbolizer", "UNKNOWN_MODULE_TOKEN", "UNVERIFIED",
    "USABLE_STATUSES", "allocation_site", "allocator_rule", "check_search_paths",
    "default_cache", "demangle", "effective_debug_dirs", "file_crc32", "find_debug_file",
    "module_name", "module_token", "qualified_name", "read_build_id", "read_debuglink",
    "read_symbols", "strip_allocator_frames",
]
