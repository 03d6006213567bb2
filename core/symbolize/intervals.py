"""Half-open address ranges, each with a value, looked up by binary search.

The one sorted-interval lookup of the symbolizer, shared by the symbol tables
(`elf_file.SymbolTable`), the profile's mappings (`Symbolizer.mapping_for`) and the
DWARF reader's unit and function indexes.  Each caller chooses among the ranges
that hold an address (`covering`); `first` is the latest-starting one.
"""

from __future__ import annotations

import bisect
from typing import Callable, Generic, Iterable, Iterator, TypeVar

V = TypeVar("V")
Item = tuple  # (lo, hi, value): the range [lo, hi) and its value


def _by_range(item: Item):
    return item[0], item[1]


class Intervals(Generic[V]):
    """Ranges ``[lo, hi)`` with a value each, kept sorted by ``key`` (default: start,
    then end; the sort is stable, so equal keys keep the order they were added in).
    Ranges may overlap and nest.  Ranges may be added between lookups (the sort is
    redone lazily, on the next lookup)."""

    def __init__(self, items: Iterable[tuple[int, int, V]] = (),
                 key: Callable[[Item], object] = _by_range):
        self._key = key
        self._pending = list(items)
        self._items: list[tuple[int, int, V]] = []
        self._starts: list[int] = []
        # max end over _items[0..i]: bounds the backward scan for ranges holding x.
        self._max_end: list[int] = []

    def add(self, lo: int, hi: int, value: V) -> None:
        self._pending.append((lo, hi, value))

    def __len__(self) -> int:
        return len(self._items) + len(self._pending)

    def _build(self) -> None:
        items = self._items + self._pending
        self._pending = []
        items.sort(key=self._key)
        self._items = items
        self._starts = [lo for lo, _, _ in items]
        self._max_end, m = [], 0
        for _, hi, _ in items:
            m = max(m, hi)
            self._max_end.append(m)

    def covering(self, x: int) -> Iterator[tuple[int, int, V]]:
        """(lo, hi, value) of every range holding x, latest start first (among equal
        starts, the last in sort order first)."""
        if self._pending:
            self._build()
        i = bisect.bisect_right(self._starts, x) - 1
        while i >= 0 and self._max_end[i] > x:
            item = self._items[i]
            if x < item[1]:
                yield item
            i -= 1

    def first(self, x: int) -> V | None:
        """The value of the first range `covering` x (the latest-starting), or None."""
        for _, _, value in self.covering(x):
            return value
        return None
