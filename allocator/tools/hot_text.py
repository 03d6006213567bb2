"""Lists the allocator's code that programs run, as link sections, for gold's
--section-ordering-file: allocator/src/hot_text.order (allocator/CMakeLists.txt says why).

Each command runs under valgrind's callgrind with LD_PRELOAD=the built library; every
function of the library that executed is named by its section from the link map the
build writes (build/allocator/liblifetime_alloc.map), the most executed first.  The
default commands are programs no figure reports (the peer suite, Redis and PostgreSQL are
measured with the order, not used to make it): an idle one, coreutils' sort, g++ on a
small file (C++: operator new/delete), xz on two threads (thread caches), bzip2 and sed
(blocks past the thread caches, freed and grown by realloc), awk churning a
26 MiB heap with pauses (subrelease, idle places, huge pages) and the allocator's own
16-thread test driver (thread exits).  Two kinds of code are listed whether or not they ran: the
lock's contended path (under valgrind threads run one at a time) and std::map's tree steps.

With --model EXPORT_DIR, sort and g++ run once more served by that model (its plugin):
the model path's code (the predictor's miss, inprocess/'s classification) is listed
before the rest, away from the code every process runs (allocator/src/hot_text.order is
made with the demo's model, out/demo/export).

    python allocator/tools/hot_text.py [--build build] [--model out/demo/export] \
        [--out allocator/src/hot_text.order]

Needs valgrind (apt-get install valgrind); run it again when the allocator's code moves
much (an entry no longer in the map is ignored by the linker, a new function is placed
after the ordered ones: tests/test_allocator_layout.py says when too little is ordered).
"""

from __future__ import annotations

import argparse
import bisect
import collections
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from core.errors import LifetimeError  # noqa: E402
from export import serve  # noqa: E402  (--model: the plugin of an export)

LIB = "liblifetime_alloc.so"
# The default commands run again served by --model's plugin (named, not by their place).
MODEL_PROGRAMS = ("sort", "g++")
# lalloc::Mutex's functions (lock.h), and libstdc++'s red-black tree steps (std::map).
ALWAYS = ("_ZN6lalloc5Mutex", "_ZSt18_Rb_tree_", "_ZSt28_Rb_tree_", "_ZSt29_Rb_tree_")

SECTION = re.compile(r"^ (\.text\S*)(?:\s+(0x[0-9a-f]+)\s+(0x[0-9a-f]+)\s+\S+)?$")
EXTENT = re.compile(r"^\s+(0x[0-9a-f]+)\s+(0x[0-9a-f]+)\s+\S+")
# Sections that hold more than one function (objects built without -ffunction-sections:
# the static libstdc++'s).
SHARED = {".text", ".text.startup", ".text.unlikely", ".text.hot", ".text.exit"}
# callgrind_annotate's line per function: "N (P%)  FILE:NAME [OBJECT]", FILE "???" where the
# object has no line table for it (the C++ here) and a source path where it has (inprocess/'s
# C: missed before, when only "???" was matched, so none of it was ordered).
COST = re.compile(r"^\s*([0-9,]+) \(\s*[\d.]+%\)\s+\S*:(\S+) \[(.*)\]$")


def map_sections(map_path: pathlib.Path) -> list[tuple[int, int, str]]:
    """(address, size, name) of every non-empty .text* input section a gold link map lays
    out (its "Memory map"; the ones it discarded are listed before)."""
    lines = map_path.read_text().splitlines()
    start = lines.index("Memory map") if "Memory map" in lines else 0
    out = []
    for i, line in enumerate(lines[start:], start):
        m = SECTION.match(line)
        if not m:
            continue
        if m.group(2):
            addr, size = int(m.group(2), 16), int(m.group(3), 16)
        else:  # a long name: the extent is on the next line
            e = EXTENT.match(lines[i + 1]) if i + 1 < len(lines) else None
            if not e:
                continue
            addr, size = int(e.group(1), 16), int(e.group(2), 16)
        if size:
            out.append((addr, size, m.group(1)))
    return sorted(out)


def symbol_addresses(lib: pathlib.Path) -> dict[str, int]:
    """Mangled function name -> address, from the library's symbol table."""
    nm = subprocess.run(["nm", "--defined-only", str(lib)], check=True, capture_output=True, text=True)
    out: dict[str, int] = {}
    for line in nm.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "tTwWiI":
            out.setdefault(parts[2], int(parts[0], 16))
    return out


def exported(lib: pathlib.Path) -> set[str]:
    """The library's exported functions (allocator/src/exports.map)."""
    nm = subprocess.run(["nm", "--defined-only", "--extern-only", "-D", str(lib)], check=True,
                        capture_output=True, text=True)
    return {p[2].split("@")[0] for p in (line.split() for line in nm.stdout.splitlines())
            if len(p) == 3 and p[1] in "TWi"}


def executed(cmd: list[str], lib: pathlib.Path, tmp: pathlib.Path, plugin: str | None = None) -> collections.Counter:
    """Instructions per function of the library over one command (and its children);
    PLUGIN: served by that model's plugin (constant:0 without)."""
    prefix = tmp / "cg"
    served = [f"LIFETIME_MODEL_PLUGIN={plugin}"] if plugin else []
    subprocess.run(["valgrind", "--tool=callgrind", "--demangle=no", "--trace-children=yes",
                    f"--callgrind-out-file={prefix}.%p", "env", f"LD_PRELOAD={lib}", *served, *cmd],
                   check=True, cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cost: collections.Counter = collections.Counter()
    for out in tmp.glob("cg.*"):
        ann = subprocess.run(["callgrind_annotate", "--threshold=100", str(out)],
                             check=True, capture_output=True, text=True)
        for line in ann.stdout.splitlines():
            m = COST.match(line)
            if m and m.group(3).endswith(LIB):
                cost[m.group(2).split("'")[0]] += int(m.group(1).replace(",", ""))
        out.unlink()
    return cost


def default_commands(tmp: pathlib.Path, build: pathlib.Path) -> list[list[str]]:
    lines = tmp / "lines.txt"
    lines.write_text("".join(f"{(i * 7919) % 100003} line {i}\n" for i in range(200000)))
    src = tmp / "small.cc"
    src.write_text("#include <map>\n#include <string>\n#include <vector>\n"
                   "int main() { std::map<std::string, std::vector<int>> m; m[\"a\"].push_back(1);"
                   " return int(m.size()); }\n")
    # A program that frees half of what it holds and pauses, again and again, its heap past
    # the 16 MiB where huge pages start: subrelease, idle places and dense pages come only
    # once a horizon (0.2 s and more) has passed, which the others end before (z3's idle
    # places had run code of the cold part, a 64 KiB window of its own).
    churn = ("BEGIN { for (r = 0; r < 4; r++) { for (i = 0; i < 300000; i++) a[i] = sprintf(\"%d-%d\", i, r);"
             " for (i = 0; i < 300000; i += 2) delete a[i]; system(\"sleep 0.3\") } }")
    return [["sleep", "0.1"], ["sort", str(lines), "-o", str(tmp / "sorted.txt")],
            ["g++", "-fsyntax-only", str(src)],
            ["xz", "-T2", "-k", "-f", "-3", str(lines)],
            # Blocks of 256 KiB to 2 MiB, past the thread caches and freed one at a time
            # (gs's were; the others here free none such).
            ["bzip2", "-k", "-f", str(lines)],
            # ... and grown by realloc (sed's hold space: all the lines; rptest's grew so).
            ["sed", "-n", "-e", "H", "-e", f"${{x;w {tmp / 'held.txt'}", "-e", "}", str(lines)],
            ["awk", churn],
            # 16 threads that pass objects to each other and exit, each exit draining its
            # cache (xz's and sort's threads came and went by timing, their exits with them).
            [str(build / "allocator" / "tests" / "alloc_threads_xfree"), "2000"]]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=str(ROOT / "build"), help="the CMake build directory")
    ap.add_argument("--out", default=str(ROOT / "allocator" / "src" / "hot_text.order"))
    ap.add_argument("--model", metavar="EXPORT_DIR",
                    help="also run two of the commands (sort, g++) served by this exported "
                         "model (its plugin): the model path's code, ordered before the rest")
    ap.add_argument("cmd", nargs="*", help="-- CMD ARGS: one command instead of the defaults")
    args = ap.parse_args(argv)
    plugin = None
    if args.model:
        try:
            plugin = serve.model_plugin(args.model)  # (checked as lifetime run --model checks it)
        except LifetimeError as e:
            print(f"hot_text: --model: {e}", file=sys.stderr)
            return 2
    lib = pathlib.Path(args.build) / "allocator" / LIB
    link_map = lib.with_suffix(".map")
    for need, what in ((lib, "the library"), (link_map, "its link map, which a GCC + gold build writes")):
        if not need.exists():
            print(f"hot_text: {need}: not found ({what}); build the lifetime_alloc target first",
                  file=sys.stderr)
            return 2
    sections = map_sections(link_map)
    if not sections:
        print(f"hot_text: {link_map}: no .text sections laid out (not a gold link map?)", file=sys.stderr)
        return 2
    if not shutil.which("valgrind"):
        print("hot_text: valgrind not found (apt-get install valgrind)", file=sys.stderr)
        return 2
    starts = [s[0] for s in sections]
    addresses = symbol_addresses(lib)
    cost: collections.Counter = collections.Counter()
    model_cost: collections.Counter = collections.Counter()
    with tempfile.TemporaryDirectory() as d:
        tmp = pathlib.Path(d)
        commands = [args.cmd] if args.cmd else default_commands(tmp, pathlib.Path(args.build))
        for cmd in commands:
            print(f"hot_text: {' '.join(cmd)}", file=sys.stderr, flush=True)
            cost.update(executed(cmd, lib, tmp))
        # The model path: a program served by a model runs it, one with constant:0 never.
        model_commands = ([args.cmd] if args.cmd else
                          [c for c in commands if c[0] in MODEL_PROGRAMS]) if plugin else []
        for cmd in model_commands:
            print(f"hot_text: (model) {' '.join(cmd)}", file=sys.stderr, flush=True)
            model_cost.update(executed(cmd, lib, tmp, plugin))
    def section_of(name: str) -> str | None:
        """The function's own section (None: a PLT stub, a symbol of no section, or one in
        an object's whole .text, which ordering would drag in with the rest)."""
        a = addresses.get(name)
        k = bisect.bisect_right(starts, a) - 1 if a is not None else -1
        if k < 0 or a >= sections[k][0] + sections[k][1] or sections[k][2] in SHARED:
            return None
        return sections[k][2]

    def by_section(costs: collections.Counter) -> tuple[dict[str, int], list[str]]:
        """COSTS summed per section; the functions of no section of their own."""
        total: dict[str, int] = {}
        unplaced = []
        for name, n in costs.items():
            sec = section_of(name)
            if sec is None:
                unplaced.append(name)
            else:
                total[sec] = total.get(sec, 0) + n
        return total, unplaced

    order, unplaced = by_section(cost)
    ranked = sorted(order, key=lambda s: (-order[s], s))
    # Every entry point a program may call (the malloc API, operator new and delete in all
    # their forms), after the ones that ran: one a run missed costs a window of its own.
    # And what a run shows only by chance: the lock's contended path (valgrind runs one
    # thread at a time) and the red-black tree's steps (which of them a std::map insert
    # takes depends on the order its keys come in: gs's huge page ids ran one no command
    # here did, a window of its own).
    chance = [name for name in addresses if name.startswith(ALWAYS)]
    for name in sorted(exported(lib)) + sorted(chance):
        sec = section_of(name)
        if sec is not None and sec not in order:
            order[sec] = 0
            ranked.append(sec)
    # First, what only a model-served run ran: a process with constant:0 never reaches it.
    # gold lays the ordered sections out last in .text, just before the start-up code and
    # .rodata, which every process touches: the code every process runs stays next to
    # them where it was, and the model's goes below it (after it, it had moved the rest
    # by its size, and a process with constant:0 kept a fourth 64 KiB window).
    model_only = {sec: n for sec, n in by_section(model_cost)[0].items() if sec not in order}
    ranked = sorted(model_only, key=lambda s: (-model_only[s], s)) + ranked
    order.update(model_only)
    pathlib.Path(args.out).write_text(
        "# Written by allocator/tools/hot_text.py: the allocator's sections that run, for gold's\n"
        "# --section-ordering-file (allocator/CMakeLists.txt).\n" + "".join(s + "\n" for s in ranked))
    size = sum(sec[1] for sec in sections if sec[2] in order)
    print(f"hot_text: {len(ranked)} sections, {size} bytes of code, to {args.out}"
          f" ({len(unplaced)} functions without a section of their own left where they are)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
