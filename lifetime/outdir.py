"""Output directories, checked before a command does its work."""

import os

from lifetime.errors import UsageError


def writable_dir(path: str) -> str:
    """Creates an output directory (and its parents) and checks a file can be written
    in it, so a job fails at once rather than after its work."""
    try:
        os.makedirs(path, exist_ok=True)
        probe = os.path.join(path, f".lifetime-write-probe.{os.getpid()}")
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as e:
        raise UsageError(f"--out {path}: cannot write there ({e.strerror})") from None
    return path
