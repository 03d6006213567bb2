"""The C/C++ include graph of the native sources has no cycle (issue 24).

Parses the `#include "..."` lines of heap/src, inprocess/src, profiler/src,
allocator/src and simulator/src, resolves each as the compiler does for quoted includes
(the including file's own directory first, then the include directories the CMake files
give: the source folders and export/cc) and fails on:
  - a cycle among the files (a header that, through others, includes itself);
  - a source file (.c, .cc) included by another file;
  - a profiler/src or inprocess/src .c file over MAX_PROFILER_C_LINES lines (sampler.c was 1,344 lines
    with six jobs before it was split by job; the largest files are now unwind.c and
    symtab.c, each under 700).
Includes that resolve to no file in the repository (system headers written with
quotes, if any) are left out of the graph.
"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE_DIRS = [ROOT / "heap" / "src", ROOT / "inprocess" / "src", ROOT / "profiler" / "src",
               ROOT / "allocator" / "src", ROOT / "simulator" / "src"]
INCLUDE_DIRS = SOURCE_DIRS + [ROOT / "export" / "cc"]
EXTENSIONS = {".c", ".cc", ".cpp", ".h", ".hh", ".hpp"}
SOURCE_EXTENSIONS = {".c", ".cc", ".cpp"}
MAX_PROFILER_C_LINES = 700

INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def _resolve(name, including, include_dirs):
    for d in [including.parent] + list(include_dirs):
        candidate = (d / name).resolve()
        if candidate.is_file():
            return candidate
    return None


def include_graph(source_dirs, include_dirs):
    """{file: [files it includes]} over every C/C++ file of source_dirs (and the files
    they reach through quoted includes)."""
    graph = {}
    todo = [p.resolve() for d in source_dirs for p in sorted(d.iterdir())
            if p.is_file() and p.suffix in EXTENSIONS]
    while todo:
        path = todo.pop()
        if path in graph:
            continue
        edges = []
        for name in INCLUDE_RE.findall(path.read_text(errors="replace")):
            target = _resolve(name, path, include_dirs)
            if target is not None:
                edges.append(target)
                todo.append(target)
        graph[path] = edges
    return graph


def find_cycle(graph):
    """One cycle as a list of files (first == last), or None."""
    WHITE, GREY, BLACK = 0, 1, 2
    color = {node: WHITE for node in graph}
    stack = []

    def visit(node):
        color[node] = GREY
        stack.append(node)
        for nxt in graph.get(node, []):
            if color.get(nxt, WHITE) == GREY:
                return stack[stack.index(nxt):] + [nxt]
            if color.get(nxt, WHITE) == WHITE:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        color[node] = BLACK
        return None

    for node in sorted(graph):
        if color[node] == WHITE:
            found = visit(node)
            if found:
                return found
    return None


def _rel(p):
    try:
        return str(p.relative_to(ROOT))
    except ValueError:
        return str(p)


def test_no_include_cycle():
    cycle = find_cycle(include_graph(SOURCE_DIRS, INCLUDE_DIRS))
    assert cycle is None, "include cycle: " + " -> ".join(_rel(p) for p in cycle)


def test_no_source_file_included():
    graph = include_graph(SOURCE_DIRS, INCLUDE_DIRS)
    bad = [f"{_rel(src)} includes {_rel(dst)}" for src, dsts in graph.items() for dst in dsts
           if dst.suffix in SOURCE_EXTENSIONS]
    assert not bad, "source files included by others: " + "; ".join(bad)


def test_profiler_c_files_are_small():
    big = {}
    for p in [*sorted((ROOT / "profiler" / "src").glob("*.c")),
              *sorted((ROOT / "inprocess" / "src").glob("*.c"))]:
        n = len(p.read_text().splitlines())
        if n > MAX_PROFILER_C_LINES:
            big[p.name] = n
    assert not big, f"profiler/src, inprocess/src .c files over {MAX_PROFILER_C_LINES} lines: {big}"


def test_detector_finds_a_cycle_and_a_source_include(tmp_path):
    (tmp_path / "a.h").write_text('#include "b.h"\n')
    (tmp_path / "b.h").write_text('#pragma once\n#include "c.h"\n')
    (tmp_path / "c.h").write_text('  #  include "a.h"  // back to the start\n')
    (tmp_path / "d.c").write_text('#include <stdio.h>\n#include "e.c"\n#include "missing.h"\n')
    (tmp_path / "e.c").write_text("int e;\n")
    graph = include_graph([tmp_path], [])
    cycle = find_cycle(graph)
    assert cycle is not None and cycle[0] == cycle[-1]
    assert {p.name for p in cycle} == {"a.h", "b.h", "c.h"}
    assert [p.name for p in graph[(tmp_path / "d.c").resolve()]] == ["e.c"]
    (tmp_path / "c.h").write_text("int c;\n")
    assert find_cycle(include_graph([tmp_path], [])) is None
