"""The allocation context (core/context.py) against its C mirror
(inprocess/src/context.c, driven through build/tests/native/lifetime_context_rules): the
helpers tests/test_context.py and tests/test_real_redis.py compare the two with."""

from __future__ import annotations

import pathlib
import subprocess

import pytest

from core import context, symbolize
from core.context import ContextDefinition

REPO = pathlib.Path(__file__).resolve().parents[1]
DRIVER = REPO / "build" / "tests" / "native" / "lifetime_context_rules"


def symbolized(frames) -> list[symbolize.SymbolizedFrame]:
    """(module, named, name) triples as the offline symbolizer's frames."""
    return [symbolize.SymbolizedFrame(address=i, function=name, module=f"/x/{module}",
                                      symbol=name if named else None)
            for i, (module, named, name) in enumerate(frames)]


def python_context(frames, wrappers, max_frames) -> list[str]:
    stack = [context.normalize_frame(f.function)
             for f in symbolize.strip_allocator_frames(symbolized(frames))]
    definition = ContextDefinition.make(max_frames, configured=wrappers, builtin=False)
    return list(definition.frames(stack))


def _driver(lines: list[str]) -> list[str]:
    if not DRIVER.exists():
        pytest.fail(f"{DRIVER} is not built: run `make native`")
    return subprocess.run([str(DRIVER)], input="\n".join(lines) + "\n", capture_output=True,
                          text=True, check=True).stdout.split("\n")[:-1]


def c_normalized(frames: list[str]) -> list[str]:
    out = _driver([f"N\t{f}" for f in frames])
    assert len(out) == len(frames)
    return out


def c_contexts(cases, max_frames) -> list[list[str]]:
    """The C mirror's context for each (frames, wrappers) case: the driver's start
    index, then the normalized names of the next max_frames frames."""
    lines = []
    for frames, wrappers in cases:
        lines += [f"W\t{w}" for w in wrappers]
        lines += [f"F\t{m}\t{int(named)}\t{name}" for m, named, name in frames]
        lines.append("E")
    starts = [int(x) for x in _driver(lines)]
    assert len(starts) == len(cases)
    cut = [[name for _, _, name in frames[start:start + n]]
           for (frames, _), start, n in zip(cases, starts, max_frames)]
    flat = c_normalized([f for names in cut for f in names])
    out, i = [], 0
    for names in cut:
        out.append(flat[i:i + len(names)])
        i += len(names)
    return out


def real_cases(profiles, extra_wrappers: int = 12):
    """(frames, wrappers) per distinct real stack: the built-in wrappers, the ones
    detected there, and some of the stacks' own sites made wrappers, so real frames
    hit every rule."""
    stacks = set()
    for prof in profiles:
        sym = context.make_symbolizer(prof.mappings, symbolize.ModuleCache())
        for stack in prof.stacks.values():
            frames = sym.symbolize_stack(list(stack.addresses), leaf_is_return_address=True)
            stacks.add(tuple((pathlib.Path(f.module).name, f.resolved, f.function)
                             for f in frames))
    stacks = sorted(s for s in stacks if all("\n" not in f and "\t" not in f for _, _, f in s))
    free = [[context.normalize_frame(f.function)
             for f in symbolize.strip_allocator_frames(symbolized(s))] for s in stacks]
    sites = sorted({symbolize.qualified_name(f[0]) for f in free if f and context.is_named(f[0])})
    detected = context.detect_wrappers([(f, 1.0, i % 3) for i, f in enumerate(free)],
                                       ContextDefinition.make())
    wrappers = sorted(set(context.BUILTIN_WRAPPERS) | set(detected)
                      | set(sites[::3][:extra_wrappers]))
    return [(list(s), wrappers) for s in stacks]


def check_real(cases, max_frames=ContextDefinition.max_frames) -> int:
    """Asserts C and Python agree on every case; returns how many a wrapper cut."""
    hit_wrapper = 0
    for (frames, wrappers), got in zip(cases, c_contexts(cases, [max_frames] * len(cases))):
        expected = python_context(frames, wrappers, max_frames)
        assert got == expected, frames
        hit_wrapper += expected != python_context(frames, [], max_frames)
    return hit_wrapper
