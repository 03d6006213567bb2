"""core/native_log.py: XLA's native notices are dropped from stderr, everything else kept."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_PROGRAM = r"""
import os, sys
from core.native_log import native_notices_dropped
with native_notices_dropped(%s):
    os.write(2, b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n")
    os.write(2, b"I0000 00:00:1795798693.850653   26726 device_compiler.h:196] Compiled cluster using XLA!\n")
    os.write(2, b"a line of our own\n")
    print("python stderr", file=sys.stderr)
    print("stdout passes", flush=True)
print("after", file=sys.stderr)
"""


def _run(arg: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _PROGRAM % arg], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_notices_dropped_the_rest_kept_in_order():
    r = _run("True")
    assert r.returncode == 0 and r.stdout == "stdout passes\n"
    assert r.stderr == "a line of our own\npython stderr\nafter\n"


def test_verbose_keeps_everything():
    r = _run("False")
    assert "absl::InitializeLog" in r.stderr and "Compiled cluster using XLA!" in r.stderr


def test_a_real_xla_compile_prints_no_notice():
    code = ("from core.native_log import native_notices_dropped\n"
            "import tensorflow as tf\n"
            "with native_notices_dropped(True):\n"
            "    print(tf.function(jit_compile=True)(lambda x: x * 2)(tf.constant(1.)).numpy())\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0 and r.stdout.strip() == "2.0", r.stderr
    assert "InitializeLog" not in r.stderr and "Compiled cluster" not in r.stderr, r.stderr
