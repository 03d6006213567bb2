"""The layers of the code: Python (issue 24), checked over the import statements with
`ast`, and native (issue 31), checked over the quoted includes and the build's compile
commands (below, NATIVE).

    tools        benchmarks/, fuzz/, scripts/ (and tests/): may import anything
    CLI          lifetime/: the `lifetime` command, on top of what it runs
    middle       pipeline/, model/, export/, simulator/, interop/, profiler/ and
                 allocator/ (Python side: their launchers), profile_format/, runners/,
                 workloads/: never the CLI
    base         core/: imports nothing of the project

Every import counts: at module level and inside functions (a deferred import is still a
dependency).  The arrows between middle folders are recorded in ARROWS: a new one fails
here until it is added there on purpose (and makes no cycle).  Folder cycles are refused
except the ones in ALLOWED_CYCLES, which only shrinks.

The command line: every subcommand is registered by `add_parser(sub)` of the module
that owns its work, and lifetime/cli.py only lists those modules (SUBCOMMAND_MODULES).
Imports sit at the top of a module unless a heavy one (DEFERRED) is deferred on purpose,
which the module says once.

`python tests/test_layering.py` prints the folder -> folder arrows (import statements
per arrow), tests/ excluded, then the native folders' links.
"""

from __future__ import annotations

import ast
import collections
import json
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BASE = {"core"}
CLI = {"lifetime"}
MIDDLE = {"pipeline", "model", "export", "simulator", "interop", "profiler", "profile_format",
          "runners", "workloads", "allocator"}
TOOLS = {"benchmarks", "fuzz", "scripts"}
NOT_CODE = {"tests", "build", "out", "o", "docs"}  # tests/ may import anything, too

# Arrows between middle folders (an import of the right folder in the left one).
ARROWS = {
    ("allocator", "export"),        # lifetime run --model: the model's plugin (export/serve.py)
    ("export", "model"),            # the exporter compiles a trained model directory
    ("model", "pipeline"),          # evaluate-online aggregates profiles like the dataset job
    ("model", "profile_format"),
    ("pipeline", "interop"),        # build-dataset --format: other profilers' recordings
    ("pipeline", "profile_format"),
    ("interop", "profile_format"),
    ("profiler", "export"),         # lifetime profile --model: the model's plugin
    ("profiler", "profile_format"),
    ("simulator", "export"),        # lifetime simulate --model: the model's plugin
    ("simulator", "interop"),       # lifetime fragmentation: pinned bytes as pprof (its writer)
    ("simulator", "model"),
    ("simulator", "pipeline"),
    ("simulator", "profile_format"),
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


# -- the command line: every subcommand registered one way ----------------------------

REGISTER = "add_parser"  # the one name: `add_parser(sub)` of the module that owns the work


def _code_files():
    """The project's own code: the CLI, the middle and the base (not tools, not tests)."""
    for folder in sorted(set(folders()) - TOOLS):
        yield from _sources(ROOT / folder)


def _registered_subcommands(path: Path) -> list[str]:
    """The names a file registers: `<subparsers>.add_parser("name", ...)` calls."""
    return [node.args[0].value
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path)))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "add_parser" and node.args
            and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)]


def test_each_subcommand_is_registered_by_the_module_that_owns_it():
    from lifetime import cli

    listed = {Path(m.__file__).resolve().relative_to(ROOT).as_posix(): m
              for m in cli.SUBCOMMAND_MODULES}
    found = {str(p.relative_to(ROOT)): names for p in _code_files()
             if (names := _registered_subcommands(p))}
    in_cli = sorted(p for p in found if p.startswith("lifetime/"))
    assert not in_cli, (f"{in_cli} define subcommands: the CLI only lists them; move each to "
                        "the package that owns the work")
    assert set(found) == set(listed), (
        f"modules that register subcommands {sorted(found)} vs lifetime/cli.py's "
        f"SUBCOMMAND_MODULES {sorted(listed)}")
    for path, module in listed.items():
        assert callable(getattr(module, REGISTER, None)), f"{path}: no {REGISTER}(sub)"
    parser_names = list(cli.build_parser()._subparsers._group_actions[0].choices)
    assert sorted(parser_names) == sorted(n for names in found.values() for n in names)


def test_no_second_registration_name():
    others = [str(p.relative_to(ROOT)) for p in _code_files()
              if any(isinstance(n, ast.FunctionDef) and n.name in ("add_subcommands",
                                                                    "add_parsers", "register")
                     and n.args.args and n.args.args[0].arg == "sub"
                     for n in ast.parse(p.read_text(encoding="utf-8")).body)]
    assert not others, f"subcommands registered under another name than {REGISTER}: {others}"


# -- imports at the top, unless a heavy one is deliberately deferred -------------------

# What may be imported inside a function: slow to import, and not needed by
# `lifetime --help` or by every command.  A module that defers one says so once
# ("... imported inside ..." or "... imported when ...").
DEFERRED = ("tensorflow", "keras", "apache_beam", "matplotlib",
            "markdown", "importlib.metadata",      # ~15 ms each, on the `--help` path
            "model.network",                       # Keras at import
            "model.report",                        # matplotlib at import
            "model.online_eval", "pipeline.dataset", "pipeline.characterize",
            "pipeline.context_stats", "pipeline.runner")  # Apache Beam at import
UNCHECKED = {"runners/flink/sdk_worker.py"}  # a worker boot script (runners/flink/README.md)


def _imports_in_functions(path: Path) -> list[str]:
    names = []

    def visit(node, inside):
        for child in ast.iter_child_nodes(node):
            if inside and isinstance(child, ast.Import):
                names.extend(a.name for a in child.names)
            elif inside and isinstance(child, ast.ImportFrom):
                names.append(child.module if child.level == 0 else "." * child.level)
            visit(child, inside or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                      ast.Lambda)))

    visit(ast.parse(path.read_text(encoding="utf-8"), str(path)), False)
    return names


def test_imports_inside_functions_are_deliberate():
    wrong, unsaid = {}, []
    for path in _code_files():
        rel = str(path.relative_to(ROOT))
        if rel in UNCHECKED:
            continue
        names = _imports_in_functions(path)
        bad = [n for n in names if not any(n == d or n.startswith(d + ".") for d in DEFERRED)]
        if bad:
            wrong[rel] = bad
        text = path.read_text(encoding="utf-8")
        if names and "imported inside" not in text and "imported when" not in text:
            unsaid.append(rel)
    assert not wrong, (f"imports inside functions that belong at the top of the module: "
                       f"{wrong} (or add a heavy module to DEFERRED, saying why)")
    assert not unsaid, f"these defer imports without saying so near the top: {unsaid}"


# -- native code: each CMake folder compiles only its own sources and includes only its
# declared base libraries' headers ------------------------------------------------------

# folder -> (layer, the folders whose headers and libraries it may use).  A layer uses
# only layers below it, or a declared folder of its own layer.
NATIVE_LAYERS = {"base": 0, "stage": 1, "top": 2, "tools": 3}
NATIVE = {
    "export": ("base", set()),                       # export/cc: the model's C API
    "heap": ("base", set()),                         # the heap policies, their checker
    "inprocess": ("base", {"export"}),               # unwinder, symbolizer, context, online
    "profiler": ("stage", {"inprocess", "export"}),  # the LD_PRELOAD sampler
    "simulator": ("stage", {"heap", "inprocess", "export"}),  # the trace-driven heap simulator
    "workloads": ("stage", set()),                   # the proxy workload
    "interop/native": ("stage", set()),              # the heaptrack reader
    "allocator": ("top", {"heap", "inprocess", "export"}),  # liblifetime_alloc.so
    "tests/native": ("tools", {"profiler", "inprocess", "export"}),  # test drivers
}
NATIVE_EXTENSIONS = {".c", ".cc", ".cpp", ".h", ".hh", ".hpp"}
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
# Include directories of a folder: its src/ (or the folder itself), export's cc/.
_INCLUDE_DIR = {"export": "export/cc"}


def _native_folder(path: Path) -> str | None:
    """The NATIVE folder a file belongs to (the longest one containing it)."""
    rel = path.resolve().relative_to(ROOT).as_posix()
    best = None
    for folder in NATIVE:
        if (rel == folder or rel.startswith(folder + "/")) and \
                (best is None or len(folder) > len(best)):
            best = folder
    return best


def _include_dirs(folder: str) -> list[Path]:
    d = ROOT / _INCLUDE_DIR.get(folder, folder)
    return [d / "src"] if (d / "src").is_dir() else [d]


def native_includes() -> list[tuple[str, str, str]]:
    """(file, its folder, the folder of a header it includes) for every quoted include
    of a native file that resolves to another NATIVE folder's header (as the compiler
    would: the including file's directory, then every folder's include directories)."""
    every_dir = [d for f in NATIVE for d in _include_dirs(f)]
    found = []
    for folder in NATIVE:
        base = ROOT / folder
        for path in sorted(base.rglob("*")):
            if path.suffix not in NATIVE_EXTENSIONS or _native_folder(path) != folder:
                continue
            for name in INCLUDE_RE.findall(path.read_text(errors="replace")):
                for d in [path.parent] + every_dir:
                    target = d / name
                    if target.is_file():
                        other = _native_folder(target)
                        if other and other != folder:
                            found.append((str(path.relative_to(ROOT)), folder, other))
                        break
    return found


def test_native_folders_declare_lower_layers_only():
    for folder, (layer, uses) in NATIVE.items():
        assert (ROOT / folder).is_dir(), folder
        for used in uses:
            assert NATIVE_LAYERS[NATIVE[used][0]] <= NATIVE_LAYERS[layer], (folder, used)
    assert not _cycles((a, b) for a, (_, uses) in NATIVE.items() for b in uses)


def test_native_includes_follow_the_layers():
    wrong = sorted({(f, other) for f, folder, other in native_includes()
                    if other not in NATIVE[folder][1]})
    assert not wrong, ("native files including headers of a folder that is not their "
                       f"declared base (NATIVE in tests/test_layering.py): {wrong}")


def test_native_include_check_sees_an_upward_include(tmp_path, monkeypatch):
    """The check is live: a heap/ header including an allocator header is reported."""
    probe = ROOT / "heap" / "src" / "_layering_probe.h"
    probe.write_text('#include "heap.h"\n')  # allocator/src/heap.h
    try:
        found = [x for x in native_includes() if x[0].endswith("_layering_probe.h")]
    finally:
        probe.unlink()
    assert found == [("heap/src/_layering_probe.h", "heap", "allocator")]


def _compile_commands() -> list[dict]:
    path = ROOT / "build" / "compile_commands.json"
    if not path.exists():
        pytest.skip("no build/compile_commands.json: `make native` first")
    return json.loads(path.read_text())


def _target_folder(command: dict) -> str:
    """The folder of the CMakeLists.txt whose target a compile command belongs to, from
    its object path (build/<folder>/CMakeFiles/<target>.dir/...)."""
    args = shlex.split(command["command"]) if "command" in command else command["arguments"]
    parts = Path(args[args.index("-o") + 1]).parts
    where = "/".join(parts[:parts.index("CMakeFiles")]) if "CMakeFiles" in parts else ""
    inside = [f for f in NATIVE if where == f or where.startswith(f + "/")]
    return max(inside, key=len) if inside else where


def test_native_targets_compile_their_own_folder_and_include_their_bases():
    build = (ROOT / "build").resolve()
    wrong_source, wrong_dir, unplaced = [], [], set()
    for c in _compile_commands():
        folder = _target_folder(c)
        if folder not in NATIVE:
            unplaced.add(folder)
            continue
        src = Path(c["file"]).resolve()
        if _native_folder(src) != folder:
            wrong_source.append((folder, str(src.relative_to(ROOT))))
        allowed = {folder} | NATIVE[folder][1]
        args = shlex.split(c["command"]) if "command" in c else c["arguments"]
        dirs = [a[2:] for a in args if a.startswith("-I")] + \
               [args[i + 1] for i, a in enumerate(args) if a == "-isystem"]
        for d in dirs:
            p = Path(d).resolve()
            if p.is_relative_to(ROOT) and not p.is_relative_to(build):
                owner = _native_folder(p)
                if owner not in allowed:
                    wrong_dir.append((folder, str(p.relative_to(ROOT))))
    assert not unplaced, f"native folders not in NATIVE (tests/test_layering.py): {unplaced}"
    assert not wrong_source, f"targets compiling another folder's sources: {wrong_source}"
    assert not sorted(set(wrong_dir)), \
        f"targets given include directories outside their bases: {sorted(set(wrong_dir))}"


if __name__ == "__main__":
    found = arrows()
    print(f"{len(folders())} folders, {len(found)} arrows (import statements):")
    for (a, b), files in sorted(found.items()):
        cycle = "  <-> cycle" if (b, a) in found else ""
        print(f"  {a} -> {b} ({len(files)}){cycle}")
    print("native folders (layer: what each may use):")
    for folder, (layer, uses) in NATIVE.items():
        print(f"  {folder} ({layer}) -> {', '.join(sorted(uses)) or '-'}")
