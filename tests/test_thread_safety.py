"""The native code's lock annotations, checked by Clang's thread-safety analysis (issue 24).

inprocess/src/thread_annotations.h holds the macros (GUARDED_BY, REQUIRES, ACQUIRE, ...;
nothing under GCC); allocator/src/lock.h and the sampler's lt_lock (inprocess/src/runtime.h)
are the annotated lock types.  With Clang, allocator/CMakeLists.txt builds
liblifetime_alloc.so and profiler/CMakeLists.txt the sampler with `-Wthread-safety
-Werror=thread-safety`: a guarded field touched without its lock, a REQUIRES function
called without it, a lock taken twice, fail the build.  Here:

  * a Clang build of the annotated targets in build/thread-safety (cached: a rerun
    compiles what changed only; the first run takes ~10-60 s on 2 cores);
  * the analysis is really on there: the flags are on the allocator's compile commands,
    and a few lines that break the rules fail to compile with the project's header (so
    the macros cannot silently expand to nothing under Clang), in C++ and in C.

Skipped, with the reason, when clang-15 / clang++-15 are not installed
(scripts/system-deps.txt lists the package: clang-15).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "thread-safety"
# allocator/src, profiler/src and inprocess/src (the heap policies and the simulator take
# no lock)
ANNOTATED_TARGETS = ["lifetime_alloc", "lifetime_sampler", "lifetime_inprocess"]
CC, CXX = "clang-15", "clang++-15"

pytestmark = pytest.mark.skipif(
    not (shutil.which(CC) and shutil.which(CXX)),
    reason=f"{CC}/{CXX} not installed (Debian package clang-15, scripts/system-deps.txt): "
           "the lock annotations are checked by Clang only")


def _configure() -> None:
    cache = BUILD / "CMakeCache.txt"
    if cache.exists() and (BUILD / "build.ninja").exists():
        compilers = [line for line in cache.read_text(errors="replace").splitlines()
                     if line.startswith("CMAKE_CXX_COMPILER:")]
        if compilers and compilers[0].endswith(CXX):
            return  # cached: ninja rebuilds what changed (and reconfigures if CMake files did)
        shutil.rmtree(BUILD)
    BUILD.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, CC=CC, CXX=CXX)
    # Debug: the analysis needs no optimizer, and -O0 compiles fastest.
    r = subprocess.run(["cmake", "-S", str(ROOT), "-B", str(BUILD), "-G", "Ninja",
                        "-DCMAKE_BUILD_TYPE=Debug"], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_annotated_targets_build_clean_under_clang_thread_safety():
    _configure()
    r = subprocess.run(["nice", "cmake", "--build", str(BUILD), "-j2", "--target",
                        *ANNOTATED_TARGETS, "--", "-k", "0"],
                       capture_output=True, text=True, timeout=600)
    out = r.stdout + r.stderr
    findings = [line for line in out.splitlines() if "-Wthread-safety" in line]
    assert r.returncode == 0 and not findings, \
        "Clang's thread-safety analysis (or the Clang build) failed:\n" + \
        "\n".join(findings or out.splitlines()[-40:])

    # The flags are on every annotated source's compile command.
    commands = json.loads((BUILD / "compile_commands.json").read_text())
    sampler = ROOT / "profiler" / "src"
    by_file: dict = {}
    for c in commands:  # a profiler source is compiled for several targets: the sampler's
        path = Path(c["file"]).resolve()
        if path.parent != sampler or "lifetime_sampler.dir" in c["command"]:
            by_file[path] = c["command"]
    for src in [*sorted((ROOT / "allocator" / "src").glob("*.cc")), *sorted(sampler.glob("*.c")),
                *sorted((ROOT / "inprocess" / "src").glob("*.c"))]:
        cmd = by_file.get(src.resolve())
        assert cmd is not None, f"{src} is not compiled in the Clang build"
        assert "-Wthread-safety" in cmd and "-Werror=thread-safety" in cmd, \
            f"{src.name} is compiled without -Wthread-safety -Werror=thread-safety"


_CXX_PROBE = r"""
#include "lock.h"
namespace lalloc { Mutex heap_lock{}; }
using lalloc::heap_lock;
int counter GUARDED_BY(heap_lock);
void needs_lock() REQUIRES(heap_lock) { ++counter; }
%s
"""

_C_PROBE = r"""
#include <pthread.h>
#include "thread_annotations.h"
struct CAPABILITY("mutex") lk { pthread_mutex_t m; };
struct lk the_lock = {PTHREAD_MUTEX_INITIALIZER};
void take(struct lk* l) ACQUIRE(l);
void drop(struct lk* l) RELEASE(l);
int counter GUARDED_BY(the_lock);
%s
"""


def _compile(compiler: str, lang: str, source: str, tmp_path: Path) -> subprocess.CompletedProcess:
    path = tmp_path / ("probe.cc" if lang == "c++" else "probe.c")
    path.write_text(source)
    std = "-std=c++17" if lang == "c++" else "-std=c11"
    return subprocess.run([compiler, "-x", lang, std, "-fsyntax-only", "-Wthread-safety",
                           "-Werror=thread-safety", "-I", str(ROOT / "allocator" / "src"),
                           "-I", str(ROOT / "inprocess" / "src"),
                           str(path)], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("body,message", [
    ("int bad() { return counter; }", "requires holding mutex 'heap_lock'"),
    ("void bad() { needs_lock(); }", "requires holding mutex 'heap_lock'"),
    ("void bad() { heap_lock.lock(); }", "still held at the end of function"),
    ("void bad() { heap_lock.lock(); heap_lock.lock(); heap_lock.unlock(); }",
     "acquiring mutex 'heap_lock' that is already held"),
])
def test_the_analysis_catches_a_broken_rule_cxx(tmp_path, body, message):
    r = _compile(CXX, "c++", _CXX_PROBE % body, tmp_path)
    assert r.returncode != 0 and message in r.stderr, r.stderr


def test_the_analysis_accepts_the_rules_kept_cxx(tmp_path):
    body = ("int good() { heap_lock.lock(); int v = counter; needs_lock(); heap_lock.unlock(); "
            "return v; }\n"
            "void nested() { heap_lock.assert_held(); needs_lock(); }")
    r = _compile(CXX, "c++", _CXX_PROBE % body, tmp_path)
    assert r.returncode == 0, r.stderr


def test_the_header_works_in_c(tmp_path):
    """The header is plain C too (profiler/src is C)."""
    good = _compile(CC, "c", _C_PROBE % "int good(void) { take(&the_lock); int v = counter; "
                    "drop(&the_lock); return v; }", tmp_path)
    assert good.returncode == 0, good.stderr
    bad = _compile(CC, "c", _C_PROBE % "int bad(void) { return counter; }", tmp_path)
    assert bad.returncode != 0 and "requires holding mutex 'the_lock'" in bad.stderr, bad.stderr


def test_the_samplers_lock_is_a_capability(tmp_path):
    """lt_lock (inprocess/src/runtime.h) is annotated: reading what it guards without it fails."""
    probe = ('#include "runtime.h"\nlt_lock the_lock;\nint counter GUARDED_BY(the_lock);\n%s\n')
    good = _compile(CC, "c", probe % "int good(void) { lt_lock_acquire(&the_lock); int v = counter; "
                    "lt_lock_release(&the_lock); return v; }", tmp_path)
    assert good.returncode == 0, good.stderr
    bad = _compile(CC, "c", probe % "int bad(void) { return counter; }", tmp_path)
    assert bad.returncode != 0 and "requires holding mutex 'the_lock'" in bad.stderr, bad.stderr
