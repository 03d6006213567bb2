"""Files the commands read and write: inputs that are regular files, outputs checked
before a command does its work."""

import errno
import os
import stat
from typing import BinaryIO

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


def writable_parent(path: str) -> None:
    """writable_dir for the directory an output file goes into."""
    writable_dir(os.path.dirname(os.path.abspath(path)))


def open_regular(path: str) -> tuple[BinaryIO, int]:
    """Opens a regular file for reading: (binary file, size).  A fifo, device, socket or
    directory is refused with an OSError (EISDIR, or ENODEV "not a regular file")
    without ever blocking on it: opened O_NONBLOCK, checked with fstat."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory", path)
        if not stat.S_ISREG(st.st_mode):
            kind = ("a fifo" if stat.S_ISFIFO(st.st_mode) else
                    "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else
                    "a socket" if stat.S_ISSOCK(st.st_mode) else "not a regular file")
            raise OSError(errno.ENODEV, f"is {kind}, not a regular file", path)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb"), st.st_size
    except BaseException:
        os.close(fd)
        raise


def write_json(path: str, value) -> str:
    """Writes `value` as indented, key-sorted JSON (deterministic bytes) through Beam's
    FileSystems, so an output can be a local path or any filesystem Beam knows
    (gs://, hdfs://...).  Returns the path."""
    import json

    from apache_beam.io.filesystems import FileSystems

    data = (json.dumps(value, indent=2, sort_keys=True) + "\n").encode()
    with FileSystems.create(path) as f:
        f.write(data)
    return path
