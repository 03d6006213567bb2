"""Symbolizing the stacks of one process image (`Symbolizer`): an address to its
mapping, module, virtual address, function symbol and (optionally) DWARF inline
frames; unnamed frames become module tokens."""

from __future__ import annotations

import dataclasses
from typing import Callable, Iterable, Sequence

from core.symbolize.elf_module import ElfModule
from core.symbolize.frames import UNKNOWN_MODULE_TOKEN, SymbolizedFrame, module_token
from core.symbolize.intervals import Intervals
from core.symbolize.module_cache import (
    BUILD_ID_MISMATCH, NO_FILE, OK, UNVERIFIED, ModuleCache, ModuleStatus, default_cache,
    strip_deleted)


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
        self._mappings = sorted(mappings, key=lambda m: (m.start, m.id))
        self._ranges = Intervals(((m.start, m.limit, m) for m in self._mappings),
                                 key=lambda item: (item[0], item[2].id))
        self._checked: dict[tuple[str, bytes], tuple[ElfModule | None, ModuleStatus]] = {}
        self._memo: dict[tuple[int, bool], list[SymbolizedFrame]] = {}

    # -- mappings and modules

    def mapping_for(self, address: int):
        """The mapping holding address (latest id where several do), or None."""
        # max() keeps the first of equal ids, in `covering` order: latest start first.
        return max((m for _, _, m in self._ranges.covering(address)),
                   key=lambda m: m.id, default=None)

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
            if self.cache.sysroot and local == strip_deleted(path):
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
            if local != strip_deleted(path):
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


def _joined(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


def _debug_detail(module: ElfModule, local: str, path: str) -> str:
    """Where a usable module's symbols came from, for ModuleStatus.detail."""
    parts = []
    if local != strip_deleted(path):
        parts.append(f"read {local}")
    if module.debug_file:
        parts.append(f"symbols from {module.debug_file}")
    parts += module.debug_problems
    return _joined(*parts)
