"""Allocation sites: the allocator and its wrappers stripped from the top of a
symbolized stack (`strip_allocator_frames`, rules in its docstring; `allocator_rule`
says which rule a frame matches); `allocation_site` is the first frame left."""

from __future__ import annotations

import os
import re
from typing import Sequence

from core.symbolize.cxx_names import qualified_name
from core.symbolize.frames import SymbolizedFrame

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
#: Rule 2: other allocators' internals, by qualified-name prefix (TCMalloc linked into
#: the program, as in an imported TCMalloc lifetime profile).
ALLOCATOR_PREFIXES = ("tcmalloc::", "TCMallocInternal")
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
    if qualified.startswith(("operator new", "operator delete", *ALLOCATOR_PREFIXES)):
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
       ``operator delete`` overload (nothrow, sized, aligned), in any module; or
       another allocator's internals linked into the program (``ALLOCATOR_PREFIXES``:
       TCMalloc's ``tcmalloc::`` namespace and ``TCMallocInternal*`` entry points).
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
