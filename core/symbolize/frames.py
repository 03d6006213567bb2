"""What a symbolized stack is made of: `SymbolizedFrame`, and the stable token that
stands for a frame that cannot be named (`module_token`, after `module_name`)."""

from __future__ import annotations

import dataclasses
import re

UNKNOWN_MODULE_TOKEN = "<unknown+?>"


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

    The rule (the sampler's C mirror, ``lt_module_name`` in inprocess/src/symtab.c,
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
