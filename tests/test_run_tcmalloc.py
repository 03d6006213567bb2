"""`lifetime run --allocator tcmalloc`: Google's TCMalloc (interop/tools/tcmalloc_preload.sh,
`make tcmalloc-preload`) preloaded into a command.  The library is never built here:
without it in the cache the tests that need it skip, saying so; the missing-library
error is checked against an empty cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from allocator import run
from lifetime import cli

# Inside the preloaded process: TCMalloc's extension API answers, and malloc is its own.
PROBE = r"""
import ctypes, json
libc = ctypes.CDLL(None)
prop = libc.MallocExtension_Internal_GetNumericProperty
prop.restype = ctypes.c_bool
v = ctypes.c_size_t()
name = b"generic.current_allocated_bytes"
ok = prop(name, ctypes.c_size_t(len(name)), ctypes.byref(v))
x = [bytes(1000) for _ in range(1000)]
print(json.dumps({"ok": bool(ok), "allocated": v.value}))
"""


@pytest.fixture(scope="module")
def library() -> str:
    """The library; skips only when the building script says it is not in the cache
    (`--cached` exits 3).  A LIFETIME_TCMALLOC_LIB that does not exist, a script that
    fails any other way, a path that is not there: the error fails the test."""
    if not os.environ.get("LIFETIME_TCMALLOC_LIB"):
        probe = subprocess.run(["bash", str(run.TCMALLOC_SCRIPT), "--cached"],
                               capture_output=True, text=True, timeout=60)
        if probe.returncode == 3:
            pytest.skip("Google's TCMalloc is not built; `make tcmalloc-preload` builds it")
    return run.google_tcmalloc()


def test_cache_path_is_the_scripts(library):
    """`--cached` prints the path the building script prints (one cache key, the script's)."""
    out = subprocess.run(["bash", str(run.TCMALLOC_SCRIPT)], capture_output=True, text=True,
                         check=True, timeout=60).stdout.strip().splitlines()[-1]
    assert out == library


def test_run_under_google_tcmalloc(library, capfd):
    rc = cli.main(["run", "--allocator", "tcmalloc", "--", "env", "PYTHONMALLOC=malloc",
                   sys.executable, "-c", PROBE])
    out, err = capfd.readouterr()
    assert rc == 0, err
    got = json.loads(out)
    assert got["ok"] and got["allocated"] > 0
    assert err.startswith("lifetime run: tcmalloc: exit 0, peak RSS"), err
    rc = cli.main(["run", "--allocator", "tcmalloc", "--", "sh", "-c", "echo hi; exit 3"])
    assert (rc, capfd.readouterr().out) == (3, "hi\n")


def test_missing_library_is_one_line(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("LIFETIME_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("LIFETIME_TCMALLOC_LIB", raising=False)
    assert cli.main(["run", "--allocator", "tcmalloc", "--", "true"]) == 1
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "run `make tcmalloc-preload`" in err[0], err


def test_llama_options_refused(capfd):
    assert cli.main(["run", "--allocator", "tcmalloc", "--policy", "paper", "--", "true"]) == 1
    assert "--policy is an option of --allocator llama" in capfd.readouterr().err
