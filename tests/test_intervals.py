"""core.symbolize.intervals.Intervals, the one sorted-interval lookup (symbol
tables, mappings, DWARF unit and function indexes), against a plain scan."""

import random

from core.symbolize.elf_file import SymbolTable
from core.symbolize.intervals import Intervals


def _scan(items, x, key=lambda item: (item[0], item[1])):
    """The ranges holding x in `covering`'s order, by brute force: the stable sort by
    key, read backwards."""
    ordered = sorted(items, key=key)
    return [item for item in reversed(ordered) if item[0] <= x < item[1]]


def test_half_open_nested_and_outside():
    iv = Intervals([(10, 20, "outer"), (12, 15, "inner"), (30, 31, "byte")])
    assert iv.first(9) is None and iv.first(20) is None and iv.first(31) is None
    assert iv.first(10) == "outer" and iv.first(19) == "outer"
    assert iv.first(12) == "inner" and iv.first(14) == "inner" and iv.first(15) == "outer"
    assert [v for _, _, v in iv.covering(13)] == ["inner", "outer"]
    assert iv.first(30) == "byte" and len(iv) == 3


def test_a_long_range_is_found_past_shorter_later_ones():
    # The backward scan must not stop at the later, already-ended ranges.
    iv = Intervals([(0, 1000, "long")] + [(k, k + 1, k) for k in range(1, 500, 2)])
    assert iv.first(600) == "long" and iv.first(2) == "long" and iv.first(3) == 3


def test_equal_starts_follow_the_sort_key_and_then_insertion_order():
    iv = Intervals([(0, 10, "a"), (0, 5, "b"), (0, 10, "c")])
    # default key (start, end): the larger end sorts later, so it comes first
    assert [v for _, _, v in iv.covering(3)] == ["c", "a", "b"]
    by_value = Intervals([(0, 10, 2), (0, 5, 7), (0, 10, 1)], key=lambda item: (item[0], item[2]))
    assert [v for _, _, v in by_value.covering(3)] == [7, 2, 1]


def test_ranges_added_after_a_lookup_are_found():
    iv = Intervals()
    assert iv.first(5) is None
    iv.add(0, 10, "first")
    assert iv.first(5) == "first"
    iv.add(4, 6, "second")
    assert iv.first(5) == "second" and iv.first(7) == "first" and len(iv) == 2


def test_random_ranges_match_a_plain_scan():
    rng = random.Random(14)
    for _ in range(200):
        items = []
        for i in range(rng.randint(0, 30)):
            lo = rng.randint(0, 200)
            items.append((lo, lo + rng.randint(1, 60), i))
        key = rng.choice([lambda item: (item[0], item[1]), lambda item: (item[0], -item[2])])
        iv = Intervals(items, key=key)
        for x in range(-1, 262, 3):
            expected = _scan(items, x, key)
            assert list(iv.covering(x)) == expected
            assert iv.first(x) == (expected[0][2] if expected else None)


def test_symbol_table_prefers_the_innermost_then_the_best_named():
    table = SymbolTable([
        (0x100, 0x100, "outer", 0),
        (0x140, 0x20, "__libc_inner", 33),
        (0x140, 0x20, "inner", 1),       # same range: the better rank names it
        (0x140, 0x40, "wider", 0),       # same start, larger: not the innermost
        (0x300, 0x10, "after", 0),
    ])
    assert len(table) == 4
    assert table.lookup(0x100) == ("outer", 0x100)
    assert table.lookup(0x150) == ("inner", 0x140)
    assert table.lookup(0x170) == ("wider", 0x140)
    assert table.lookup(0x190) == ("outer", 0x100)
    assert table.lookup(0x200) is None and table.lookup(0x2ff) is None  # past every end
    assert table.lookup(0x30f) == ("after", 0x300) and table.lookup(0x310) is None
