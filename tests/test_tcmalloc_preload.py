"""Google's TCMalloc as an LD_PRELOAD library (interop/tools/tcmalloc_preload.sh).

The library is built by `make tcmalloc-preload` (minutes: cargo fetches and compiles the
libtcmalloc-sys crate's TCMalloc + Abseil), never here: without it in the cache every
test skips, saying so.  With it, real programs run under it and under glibc must print
the same and exit 0, and the process must really be served by TCMalloc: malloc resolved
into the library, TCMalloc's extension answering, its hugepage-aware page allocator
in the stats, libc's and the program's own malloc/free bound to it.
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys

import pytest

from tests.sampler_support import NATIVE, compile_c

CACHE = pathlib.Path(os.environ.get("LIFETIME_CACHE_DIR",
                                    os.path.expanduser("~/.cache/lifetime-models")))
LIBRARY = CACHE / "tcmalloc" / "libtcmalloc_google.so"

ENTRY_POINTS = {
    "malloc", "free", "calloc", "realloc", "reallocarray", "memalign", "posix_memalign",
    "aligned_alloc", "valloc", "pvalloc", "malloc_usable_size", "__libc_malloc",
    "__libc_free", "__libc_memalign",
    # operator new/delete: plain, array, nothrow, sized, aligned
    "_Znwm", "_Znam", "_ZnwmRKSt9nothrow_t", "_ZnamRKSt9nothrow_t", "_ZnwmSt11align_val_t",
    "_ZnamSt11align_val_t", "_ZnwmSt11align_val_tRKSt9nothrow_t",
    "_ZnamSt11align_val_tRKSt9nothrow_t", "_ZdlPv", "_ZdaPv", "_ZdlPvm", "_ZdaPvm",
    "_ZdlPvRKSt9nothrow_t", "_ZdaPvRKSt9nothrow_t", "_ZdlPvSt11align_val_t",
    "_ZdaPvSt11align_val_t", "_ZdlPvmSt11align_val_t", "_ZdaPvmSt11align_val_t",
    "_ZdlPvSt11align_val_tRKSt9nothrow_t", "_ZdaPvSt11align_val_tRKSt9nothrow_t",
}

# Allocation-heavy Python (PYTHONMALLOC=malloc: every object through malloc/free).
ALLOC_SCRIPT = r"""
import hashlib, random
rng = random.Random(7)
h = hashlib.sha256()
live = {}
for i in range(100000):
    k = rng.randrange(20000)
    if k in live and rng.random() < 0.5:
        del live[k]
    else:
        live[k] = ("x" * rng.randrange(1, 3000)) + str(i)
    if i % 20000 == 0:
        h.update(b"".join(bytes([i % 256]) * rng.randrange(1, 200000) for _ in range(20)))
h.update(repr(sorted((k, len(v)) for k, v in live.items())).encode())
print(len(live), h.hexdigest())
"""

# Runs inside the preloaded process: who serves malloc, and what TCMalloc says.
PROBE_SCRIPT = r"""
import ctypes, json, os
libc = ctypes.CDLL(None)
def mapping(addr):
    for line in open("/proc/self/maps"):
        parts = line.split()
        lo, hi = (int(x, 16) for x in parts[0].split("-"))
        if lo <= addr < hi:
            return parts[5] if len(parts) > 5 else ""
libc.malloc.restype = ctypes.c_void_p
libc.malloc_usable_size.argtypes = [ctypes.c_void_p]
prop = libc.MallocExtension_Internal_GetNumericProperty
prop.restype = ctypes.c_bool
def numeric(name):
    value = ctypes.c_size_t()
    return value.value if prop(name, ctypes.c_size_t(len(name)), ctypes.byref(value)) else None
stats = ctypes.create_string_buffer(1 << 20)
libc.TCMalloc_Internal_GetStats(stats, ctypes.c_size_t(len(stats)))
p = libc.malloc(1000)
print(json.dumps({
    "malloc_in": mapping(ctypes.cast(libc.malloc, ctypes.c_void_p).value),
    "block_in": mapping(p),
    "usable_1000": libc.malloc_usable_size(p),
    "allocated_bytes": numeric(b"generic.current_allocated_bytes"),
    "per_cpu": numeric(b"tcmalloc.per_cpu_caches_active"),
    "stats": stats.value.decode(),
    "threads": sorted(open(f"/proc/self/task/{t}/comm").read().strip()
                      for t in os.listdir("/proc/self/task")),
}))
"""


@pytest.fixture(scope="module")
def library() -> str:
    if not LIBRARY.exists():
        pytest.skip(f"{LIBRARY} not built: `make tcmalloc-preload` builds it (minutes; "
                    "needs cargo and g++), kept out of `make test`")
    return str(LIBRARY.resolve())


def run(cmd, preload=None, env=None, **kw) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "GLIBC_TUNABLES")}
    full.update(env or {})
    if preload:
        full["LD_PRELOAD"] = preload
    # Own process group: a hang (a forked child deadlocked) is killed whole, children too.
    with subprocess.Popen(cmd, env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          start_new_session=True, **kw) as proc:
        try:
            out, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            pytest.fail(f"{cmd[0]} hung (120 s)\n{err[-2000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def test_exports_every_entry_point_and_nothing_else(library):
    if shutil.which("nm") is None:
        pytest.skip("needs nm (binutils)")
    out = subprocess.run(["nm", "-D", "--defined-only", library], capture_output=True,
                         text=True, check=True).stdout
    defined = {line.split()[-1] for line in out.splitlines() if line.strip()}
    assert ENTRY_POINTS <= defined, sorted(ENTRY_POINTS - defined)
    # Abseil and libstdc++ are linked in but hidden: they must not interpose a program's.
    leaked = [s for s in defined if "absl" in s or s.startswith(("_ZNSt", "_ZNKSt", "_ZSt"))]
    assert not leaked, leaked[:10]


@pytest.mark.parametrize("tunables", ["", "glibc.pthread.rseq=0"])
def test_tcmalloc_serves_the_process(library, tunables):
    import json

    env = {"GLIBC_TUNABLES": tunables} if tunables else {}
    res = run([sys.executable, "-c", PROBE_SCRIPT], library, env, text=True)
    assert res.returncode == 0, res.stderr
    probe = json.loads(res.stdout)
    assert probe["malloc_in"] == library
    assert probe["block_in"] not in ("[heap]", library)  # TCMalloc's own mmap'ed heap
    assert probe["usable_1000"] == 1024  # TCMalloc's size class (glibc: 1000)
    assert probe["allocated_bytes"] and probe["allocated_bytes"] > 0
    assert "HugePageAware" in probe["stats"]  # the hugepage-aware page allocator
    assert "tcmalloc_bg" in probe["threads"]  # tcmalloc_preload_background.cc
    if tunables:  # glibc no longer holds rseq: TCMalloc's per-CPU caches
        assert probe["per_cpu"] == 1

    off = run([sys.executable, "-c", PROBE_SCRIPT], library,
              {**env, "TCMALLOC_PRELOAD_BACKGROUND": "0"}, text=True)
    assert off.returncode == 0, off.stderr
    assert "tcmalloc_bg" not in json.loads(off.stdout)["threads"]


def test_libc_and_program_bind_to_tcmalloc(library, tmp_path):
    data = tmp_path / "in.txt"
    data.write_text("b\na\nc\n")
    res = run(["sort", str(data)], library, {"LD_DEBUG": "bindings"}, text=True)
    assert res.returncode == 0 and res.stdout == "a\nb\nc\n", res.stderr[-2000:]
    bound: dict[tuple[str, str], str] = {}
    for m in re.finditer(r"binding file (\S+) \[\d+\] to (\S+) \[\d+\]: normal symbol `(\w+)'",
                         res.stderr):
        bound[(os.path.basename(m.group(1)), m.group(3))] = m.group(2)
    for key in [("libc.so.6", "malloc"), ("libc.so.6", "free"), ("sort", "malloc"),
                ("sort", "free")]:
        assert key in bound, f"no binding of {key[1]} in {key[0]}"
        assert os.path.realpath(bound[key]) == library, (key, bound[key])


def _sort_input(tmp_path) -> str:
    path = tmp_path / "sort.txt"
    lines = (f"{(i * 2654435761) % 1000003:07d} line {i}\n" for i in range(200000))
    path.write_text("".join(lines))  # ~4 MB
    return str(path)


@pytest.mark.parametrize("program", ["python", "sort", "threads", "fork", "c++"])
def test_real_programs_match_glibc(library, tmp_path, program):
    env: dict[str, str] = {}
    if program == "python":
        cmd, env = [sys.executable, "-c", ALLOC_SCRIPT], {"PYTHONMALLOC": "malloc"}
    elif program == "sort":  # small buffer, 2 threads: temporary files and merges
        cmd = ["sort", "-S", "1M", "--parallel=2", "-T", str(tmp_path), _sort_input(tmp_path)]
    elif program == "threads":  # 8 threads, frees on other threads than the malloc
        cmd = [compile_c("threads_xfree", tmp_path), "20000"]
    elif program == "fork":  # children forked while TCMalloc's background thread runs
        cmd = [compile_c("fork_many", tmp_path), "300", "200", "4000", "thread"]
    else:
        if shutil.which("g++") is None:
            pytest.skip("needs g++")
        binary = tmp_path / "new_delete_forms"
        subprocess.run(["g++", "-std=c++17", "-O1", "-fno-allocation-dce", "-pthread",
                        str(NATIVE / "new_delete_forms.cc"), "-o", str(binary)], check=True)
        cmd = [str(binary)]
    glibc = run(cmd, None, env, text=True)
    tcmalloc = run(cmd, library, env, text=True)
    assert glibc.returncode == 0, glibc.stderr
    assert tcmalloc.returncode == 0, tcmalloc.stderr
    norm = (lambda s: re.sub(r"parent \d+", "parent PID", s)) if program == "fork" else str
    assert norm(tcmalloc.stdout) == norm(glibc.stdout)
    assert tcmalloc.stdout.strip()
