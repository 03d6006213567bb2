"""The Python layers (issue 24), checked over the import statements with `ast`.

    tools        benchmarks/, fuzz/, scripts/ (and tests/): may import anything
    CLI          lifetime/: the `lifetime` command, on top of what it runs
    middle       pipeline/, model/, export/, simulator/, interop/, profiler/ (Python
                 side), profiler_proto/, runners/, workloads/: never the CLI
    base         core/: imports nothing of the project

Every import counts: at module level and inside functions (a deferred import is still a
dependency).  The arrows between middle folders are recorded in ARROWS: a new one fails
here until it is added there on purpose (and makes no cycle).  Folder cycles are refused
except the ones in ALLOWED_CYCLES, which only shrinks.

`python tests/test_layering.py` prints the folder -> folder arrows (import statements
per arrow), tests/ excluded.
"""

from __future__ import annotations

import ast
import collections
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASE = {"core"}
CLI = {"lifetime"}
MIDDLE = {"pipeline", "model", "export", "simulator", "interop", "profiler", "profiler_proto",
          "runners", "workloads"}
TOOLS = {"benchmarks", "fuzz", "scripts"}
NOT_CODE = {"tests", "build", "out", "o", "docs"}  # tests/ may import anything, too

# Arrows between middle folders (an import of the right folder in the left one).
ARROWS = {
    ("export", "model"),            # the exporter compiles a trained model directory
    ("model", "pipeline"),          # evaluate-online aggregates profiles like the dataset job
    ("model", "profiler_proto"),
    ("pipeline", "interop"),        # build-dataset --format: other profilers' recordings
    ("pipeline", "profiler_proto"),
    ("interop", "profiler_proto"),
    ("profiler", "profiler_proto"),
    ("simulator", "model"),
    ("simulator", "pipeline"),
    ("simulator", "profiler"),      # the model plugin's build
    ("simulator", "profiler_proto"),
}

# Folder cycles still there.  Remove an entry once its cycle is gone (the test says so).
ALLOWED_CYCLES: set = set()


def folders() -> list[str]:
    """Top-level folders holding Python code (their own, or generated *_pb2.py left out)."""
    return sorted(p.name for p in ROOT.iterdir()
                  if p.is_dir() and not p.name.startswith(".") and p.name not in NOT_CODE
                  and any(_sources(p)))


def _sources(folder: Path):
    for path in sorted(folder.rglob("*.py")):
        if not path.name.endswith("_pb2.py") and "__pycache__" not in path.parts:
            yield path


def imports(path: Path) -> list[str]:
    """Absolute module names a file imports, wherever the statement is."""
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


def arrows() -> dict[tuple[str, str], list[str]]:
    """(folder, imported folder) -> the files of `folder` that import it, once per
    import statement."""
    tops = set(folders())
    found = collections.defaultdict(list)
    for folder in sorted(tops):
        for path in _sources(ROOT / folder):
            for name in imports(path):
                top = name.split(".")[0]
                if top in tops and top != folder:
                    found[(folder, top)].append(str(path.relative_to(ROOT)))
    return dict(found)


def _cycles(edges) -> set[frozenset]:
    """The folders of each strongly connected component of more than one folder."""
    graph = collections.defaultdict(set)
    for a, b in edges:
        graph[a].add(b)

    def reach(start):
        seen, todo = set(), [start]
        while todo:
            for nxt in graph[todo.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    reachable = {n: reach(n) for n in list(graph)}
    return {frozenset({a} | {b for b in reachable[a] if a in reachable.get(b, ())})
            for a in reachable if a in reachable[a]}


def test_every_folder_has_a_layer():
    unplaced = set(folders()) - BASE - CLI - MIDDLE - TOOLS
    assert not unplaced, f"place {sorted(unplaced)} in a layer of tests/test_layering.py"


def test_core_imports_nothing_of_the_project():
    wrong = {k: v for k, v in arrows().items() if k[0] in BASE}
    assert not wrong, f"core/ imports another folder of the project: {wrong}"


def test_only_tools_import_the_cli():
    wrong = {k: v for k, v in arrows().items() if k[1] in CLI and k[0] not in TOOLS}
    assert not wrong, f"imports of the CLI (lifetime/) from below it: {wrong}"


def test_middle_arrows_are_the_recorded_ones():
    new = {k: v for k, v in arrows().items()
           if k[0] in MIDDLE and k[1] in MIDDLE and k not in ARROWS}
    assert not new, (f"new arrows between folders: {new}; add each to ARROWS in "
                     "tests/test_layering.py on purpose (and check it makes no cycle)")


def test_no_folder_cycles_but_the_allowed():
    found = _cycles(k for k in arrows() if k[0] not in TOOLS)
    assert found - ALLOWED_CYCLES == set(), f"new folder cycles: {found - ALLOWED_CYCLES}"
    assert ALLOWED_CYCLES - found == set(), (
        f"cycles gone: remove {ALLOWED_CYCLES - found} from ALLOWED_CYCLES")


def test_cycle_finder():
    assert _cycles([("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")]) == {frozenset("abc")}
    assert _cycles([("a", "b"), ("b", "c")]) == set()


if __name__ == "__main__":
    found = arrows()
    print(f"{len(folders())} folders, {len(found)} arrows (import statements):")
    for (a, b), files in sorted(found.items()):
        cycle = "  <-> cycle" if (b, a) in found else ""
        print(f"  {a} -> {b} ({len(files)}){cycle}")
