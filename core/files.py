"""Files the commands read and write: inputs that are regular files, outputs checked
before a command does its work."""

import errno
import json
import os
import stat
from typing import BinaryIO

from core.errors import UsageError

# Apache Beam is imported inside write_json, for non-local paths only: `lifetime --help`
# and the local commands must not pay for it.


def writable_dir(path: str, option: str = "--out") -> str:
    """Creates an output directory (and its parents) and checks a file can be written
    in it, so a job fails at once rather than after its work.  `option` is the flag
    the user gave the path with: the error names it."""
    try:
        _probe_dir(path)
    except OSError as e:
        raise UsageError(f"{option} {path}: cannot write there ({e.strerror})") from None
    return path


def writable_parent(path: str, option: str = "--out") -> None:
    """writable_dir for the directory an output file goes into; an existing path that
    is not a regular file (a fifo would block the write, a directory fail it late) is
    refused too.  The error names the file as given."""
    try:
        _probe_dir(os.path.dirname(os.path.abspath(path)))
        if os.path.lexists(path):
            check_regular(path)
    except OSError as e:
        raise UsageError(f"{option} {path}: cannot write there ({e.strerror})") from None


def _probe_dir(path: str) -> None:
    os.makedirs(path, exist_ok=True)
    probe = os.path.join(path, f".lifetime-write-probe.{os.getpid()}")
    with open(probe, "w"):
        pass
    os.remove(probe)


def _refuse_irregular(st: os.stat_result, path: str) -> None:
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, "is a directory", path)
    if not stat.S_ISREG(st.st_mode):
        kind = ("a fifo" if stat.S_ISFIFO(st.st_mode) else
                "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else
                "a socket" if stat.S_ISSOCK(st.st_mode) else "not a regular file")
        raise OSError(errno.ENODEV, f"is {kind}, not a regular file", path)


def check_regular(path: str) -> None:
    """The OSError open_regular would raise for `path`, from stat alone (no open, so
    never blocking): for files another library opens by name (a Keras model, TFRecord
    shards)."""
    _refuse_irregular(os.stat(path), path)


def open_regular(path: str) -> tuple[BinaryIO, int]:
    """Opens a regular file for reading: (binary file, size).  A fifo, device, socket or
    directory is refused with an OSError (EISDIR, or ENODEV "not a regular file")
    without ever blocking on it: opened O_NONBLOCK, checked with fstat."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        _refuse_irregular(st, path)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb"), st.st_size
    except BaseException:
        os.close(fd)
        raise


def read_text(path: str) -> str:
    """The whole text (UTF-8) of a file a command reads as a member of a directory (a
    dataset's manifest.json or vocab.txt, a model's config.json, an export manifest),
    through open_regular: a fifo or device is refused, never waited on.  OSError for
    an unreadable or non-regular file, UnicodeDecodeError (a ValueError) for bad text."""
    f, _ = open_regular(path)
    with f:
        return f.read().decode("utf-8")


def read_json(path: str):
    """read_text parsed as JSON (ValueError for bad JSON)."""
    return json.loads(read_text(path))


def read_json_object(path: str, error: type[Exception], missing: str) -> dict:
    """A JSON object file; `error` naming the file if it is absent (`missing` says what
    that means), unreadable, not JSON or not a JSON object."""
    if not os.path.lexists(path):
        raise error(f"{path}: {missing}")
    try:  # a fifo or device is refused, not waited on
        value = read_json(path)
    except OSError as e:
        raise error(f"{path}: cannot read ({e.strerror})") from None
    except ValueError as e:  # bad JSON or bad UTF-8
        raise error(f"{path}: not valid JSON ({e})") from None
    if not isinstance(value, dict):
        raise error(f"{path}: not a JSON object (a JSON {type(value).__name__})")
    return value


def write_json(path: str, value) -> str:
    """Writes `value` as indented, key-sorted JSON (deterministic bytes) through Beam's
    FileSystems, so an output can be a local path or any filesystem Beam knows
    (gs://, hdfs://...).  Returns the path."""
    data = (json.dumps(value, indent=2, sort_keys=True) + "\n").encode()
    refuse_irregular_output(path)
    if "://" not in path and path.endswith(".json"):
        # What Beam's local filesystem does for an uncompressed name, without importing
        # Beam (0.3 s of every `lifetime train` and `report`).
        if os.path.dirname(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        return path
    from apache_beam.io.filesystems import FileSystems

    with FileSystems.create(path) as f:
        f.write(data)
    return path


def refuse_irregular_output(path: str) -> None:
    """An OSError if `path` is a local fifo, device or socket: opening one to write
    would block (a fifo with no reader) or write somewhere else than a file.  Other
    filesystems' paths (gs://...) and absent files pass."""
    if "://" in path:
        return
    try:
        st = os.stat(path)
    except OSError:
        return
    if not stat.S_ISDIR(st.st_mode):
        _refuse_irregular(st, path)


def under_sysroot(path: str, sysroot: str | None) -> str:
    """The file a recorded absolute path names under `sysroot` if it is there (absolute
    symlinks inside the sysroot are followed inside it), else the path itself.  The one
    rule for the symbolizer and the importers; a symlink whose target is only on this
    machine (a test's sysroot, say) is followed as the filesystem follows it."""
    if sysroot and path.startswith("/"):
        inside = path
        for _ in range(40):  # an absolute symlink in the sysroot points into it
            candidate = os.path.join(sysroot, inside.lstrip("/"))
            if not os.path.islink(candidate):
                break
            target = os.readlink(candidate)
            if not target.startswith("/"):
                break
            inside = target
        if os.path.exists(candidate):
            return candidate
        direct = os.path.join(sysroot, path.lstrip("/"))
        if os.path.exists(direct):
            return direct
    return path
