"""TensorFlow's native start-up notices, kept out of normal output.

XLA logs through Abseil's C++ logging, which no environment variable silences
(TF_CPP_MIN_LOG_LEVEL covers TensorFlow's own): the first compile of a process prints
"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
and "I0000 ... Compiled cluster using XLA!".  `native_notices_dropped()` runs a block with
file descriptor 2 on a temporary file, then writes back every line but those notices, so
nothing else is lost (a Python exception's traceback is printed after the block ends).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile

# Abseil's preamble, and glog-style INFO lines ("I0000 00:00:... file.h:196] ...").
NOTICE = re.compile(rb"^(WARNING: All log messages before absl::InitializeLog\(\) is called"
                    rb"|I\d{4} \d\d:\d\d:[\d.]+ +\d+ [\w./-]+:\d+\] )")


def quiet() -> bool:
    """TensorFlow's native logs were asked to be quiet (TF_CPP_MIN_LOG_LEVEL >= 1: the
    `lifetime` command without --verbose, the tests): XLA's notices go with them."""
    return os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0").strip() not in ("", "0")


@contextlib.contextmanager
def native_notices_dropped(enabled: bool | None = None):
    """Runs the block with the process's stderr (fd 2) captured, then replays it less
    TensorFlow's native INFO notices.  enabled: default quiet(); False: a plain block."""
    if not (quiet() if enabled is None else enabled):
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            kept = [line for line in captured.read().splitlines(keepends=True)
                    if not NOTICE.match(line)]
            if kept:
                sys.stderr.flush()
                os.write(2, b"".join(kept))
