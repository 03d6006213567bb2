"""Runs a program under the LD_PRELOAD allocation-lifetime sampler.

The sampler (profiler/src, built to build/profiler/liblifetime_sampler.so) is
configured through the environment; this module sets it:

    LD_PRELOAD               the sampler, in front of any existing preloads
    LIFETIME_OUT_DIR         where each process image writes
                             <program>.<pid>.<start_unix_ns>.ltprof
    LIFETIME_INTERVAL_BYTES  mean bytes between samples (None: the sampler's default)
    LIFETIME_VERSION_LABEL   free-form label stored in every header
    LIFETIME_MODEL_PLUGIN    with `model`: the exported model's plugin, for online,
                             counterfactual predictions (export/serve.py: the plugin
                             and the one variable that serves it, PLUGIN_ENV)
    LIFETIME_FULL_TRACE      with `full_trace`: 1, record every allocation and free
                             (no sampling; Header.full_trace is set)
    LIFETIME_FULL_TRACE_CAPACITY  with `full_trace_capacity`: live objects the full
                             trace's table holds (default 4,194,304)
Other knobs (LIFETIME_MAX_FRAMES, LIFETIME_FLUSH_MS, LIFETIME_SEED, LIFETIME_UNWINDER,
LIFETIME_SYMBOLIZE) can be passed through `extra_env`.

The environment is inherited by children, so every process the command starts
(fork, exec, posix_spawn, shells) profiles itself into the same directory, unless a
program builds its children's environment from scratch.  Every process image the
sampler is loaded into writes a file, samples or not.

The loader does not preload anything into a statically linked program (no
PT_INTERP) or into one that runs in secure-execution mode (setuid/setgid to other
ids, file capabilities): such a program writes no profile.  run_profiled says so in
one warning line on stderr for the command it starts, and after the run for the
programs exec'd by profiled processes (Trailer.unprofiled_exec).
"""

from __future__ import annotations

import os
import pathlib
import shutil
import stat
import struct
import subprocess
import sys
import time
from typing import Mapping, Sequence

from core.errors import LifetimeError, UsageError
from core.files import writable_dir
from export import serve  # the model's plugin, and PLUGIN_ENV: the one variable that serves it
from profile_format.container import last_chunk

REPO = pathlib.Path(__file__).resolve().parent.parent
LIBRARY_ENV = "LIFETIME_SAMPLER_LIB"
DEFAULT_LIBRARY = REPO / "build" / "profiler" / "liblifetime_sampler.so"


class SamplerNotBuiltError(LifetimeError):
    """The sampler library is not where it should be."""


class CommandError(LifetimeError):
    """The command to profile cannot be run (missing, not executable, a directory)."""


class ProfileNotWrittenError(LifetimeError):
    """The command ran but the sampler wrote no complete profile for it (it refused
    its settings, or could not write the file)."""


# The sampler's ranges (profiler/src/sampler.c, global_init): checked here, before the
# command runs, since the sampler itself can only refuse, print a line and sample
# nothing.
MAX_INTERVAL = 1 << 40
MAX_FULL_TRACE_CAPACITY = 1 << 28


def sampler_library_path() -> str:
    """The sampler library: $LIFETIME_SAMPLER_LIB, else <repo>/build/profiler/...

    Raises SamplerNotBuiltError naming the path when the file is missing."""
    override = os.environ.get(LIBRARY_ENV)
    path = pathlib.Path(override) if override else DEFAULT_LIBRARY
    if not path.is_file():
        how = (f"${LIBRARY_ENV} points to {path}, which does not exist"
               if override else f"the sampler library {path} does not exist")
        raise SamplerNotBuiltError(
            f"{how}; build it with `make native` (cmake -S . -B build -G Ninja && "
            "cmake --build build)")
    return str(path.resolve())


def profiled_env(out_dir: str, interval: int | None = None, version_label: str | None = None,
                 extra_env: Mapping[str, str] | None = None,
                 base: Mapping[str, str] | None = None,
                 model_plugin: str | None = None, full_trace: bool = False,
                 full_trace_capacity: int | None = None) -> dict[str, str]:
    """The environment run_profiled gives the command (exposed for tools and tests)."""
    env = dict(os.environ if base is None else base)
    for key in ("LIFETIME_INTERVAL_BYTES", "LIFETIME_VERSION_LABEL", serve.PLUGIN_ENV,
                "LIFETIME_FULL_TRACE", "LIFETIME_FULL_TRACE_CAPACITY"):
        env.pop(key, None)  # only what the caller asks for, never a stale outer setting
    library = sampler_library_path()
    preload = [p for p in env.get("LD_PRELOAD", "").replace(":", " ").split() if p != library]
    env["LD_PRELOAD"] = " ".join([library] + preload)
    env["LIFETIME_OUT_DIR"] = os.path.abspath(out_dir)
    if interval is not None:
        if not 1 <= int(interval) <= MAX_INTERVAL:
            raise ValueError(f"--interval {interval}: the sampler takes 1..{MAX_INTERVAL} "
                             "bytes (1 TiB)")
        env["LIFETIME_INTERVAL_BYTES"] = str(int(interval))
    if version_label is not None:
        env["LIFETIME_VERSION_LABEL"] = version_label
    if model_plugin is not None:
        env[serve.PLUGIN_ENV] = model_plugin
    if full_trace:
        if interval is not None:
            raise ValueError("a full trace records every allocation: no interval with it")
        env["LIFETIME_FULL_TRACE"] = "1"
    if full_trace_capacity is not None:
        if not full_trace:
            raise ValueError("full_trace_capacity is for a full trace (full_trace=True)")
        if not 1 <= int(full_trace_capacity) <= MAX_FULL_TRACE_CAPACITY:
            raise ValueError(f"--full-trace-capacity {full_trace_capacity}: the sampler takes "
                             f"1..{MAX_FULL_TRACE_CAPACITY} live objects")
        env["LIFETIME_FULL_TRACE_CAPACITY"] = str(int(full_trace_capacity))
    if extra_env:
        env.update({k: str(v) for k, v in extra_env.items()})
    return env


def resolve_command(program: str, env: Mapping[str, str] | None = None) -> str:
    """The file `program` runs, searched on $PATH (of `env`) when it has no slash.

    Raises CommandError naming the program and the problem."""
    env = os.environ if env is None else env
    if os.sep in program:
        path = program
        try:
            st = os.stat(path)
        except FileNotFoundError:
            raise CommandError(f"{path}: no such file") from None
        except OSError as e:
            raise CommandError(f"{path}: cannot be run: {e.strerror}") from None
    else:
        found = shutil.which(program, path=env.get("PATH", os.defpath))
        if found is None:
            # an existing but non-executable match says more than "not found"
            for d in env.get("PATH", os.defpath).split(os.pathsep):
                candidate = os.path.join(d or ".", program)
                if os.path.isfile(candidate):
                    raise CommandError(f"{candidate}: not executable (found on $PATH, "
                                       "no execute permission)")
            raise CommandError(f"{program}: command not found on $PATH")
        path = found
        st = os.stat(path)
    if stat.S_ISDIR(st.st_mode):
        raise CommandError(f"{path}: is a directory, not a program")
    if not os.access(path, os.X_OK) or not st.st_mode & 0o111:
        raise CommandError(f"{path}: not executable (mode {stat.filemode(st.st_mode)})")
    return path


_PT_INTERP, _PT_DYNAMIC = 3, 2


def preload_problem(path: str, _depth: int = 0) -> str | None:
    """Why the loader will not preload the sampler into the program at `path`, or None.

    Mirrors the sampler's own check before an exec (profiler/src/hooks_process.c,
    elf_problem): statically linked (no PT_INTERP), secure-execution mode (setuid or
    setgid to other ids, file capabilities), a 32-bit program; for a #! script, the
    same of its interpreter."""
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            return None
        nosuid = bool(os.statvfs(path).f_flag & os.ST_NOSUID)
        if not nosuid:
            euid = st.st_uid if st.st_mode & stat.S_ISUID else os.geteuid()
            setgid = st.st_mode & stat.S_ISGID and st.st_mode & stat.S_IXGRP
            egid = st.st_gid if setgid else os.getegid()
            if euid != os.getuid() or egid != os.getgid():
                return ("setuid/setgid program (the loader ignores LD_PRELOAD in "
                        "secure-execution mode)")
            if os.getuid() != 0:
                try:
                    if os.getxattr(path, "security.capability"):
                        return ("has file capabilities (the loader ignores LD_PRELOAD in "
                                "secure-execution mode)")
                except OSError:
                    pass
        with open(path, "rb") as f:
            head = f.read(64)
            if head[:2] == b"#!":
                if _depth:
                    return None
                line = (head + f.read(192)).split(b"\n", 1)[0][2:].strip()
                interp = line.split()[0].decode(errors="replace") if line else ""
                why = preload_problem(interp, 1) if interp else None
                return f"its #! interpreter {interp} cannot be profiled: {why}" if why else None
            if head[:4] != b"\x7fELF" or len(head) < 64:
                return None
            if head[4] != 2:
                return "32-bit program (the sampler is a 64-bit library)"
            e_type, = struct.unpack_from("<H", head, 16)
            e_phoff, = struct.unpack_from("<Q", head, 32)
            e_phentsize, e_phnum = struct.unpack_from("<HH", head, 54)
            if e_type not in (2, 3) or e_phentsize != 56 or not 0 < e_phnum <= 64:
                return None
            f.seek(e_phoff)
            table = f.read(56 * e_phnum)
    except OSError:
        return None
    types = {struct.unpack_from("<I", table, 56 * i)[0] for i in range(len(table) // 56)}
    if _PT_INTERP in types or (e_type == 3 and _PT_DYNAMIC in types):
        return None
    return "statically linked (no PT_INTERP: nothing loads LD_PRELOAD)"


def _warn(message: str) -> None:
    print(f"lifetime profile: warning: {message}", file=sys.stderr, flush=True)


def report_unprofiled_execs(out_dir: str, since_ns: int) -> list[str]:
    """Warns (stderr, one line each) about the programs that profiled processes
    exec'd into and that could not be profiled; looks at the files written since
    `since_ns` (time.time_ns()).  Returns the lines."""
    lines, seen = [], set()
    try:
        entries = sorted(os.scandir(out_dir), key=lambda e: e.name)
    except OSError:
        return lines
    for entry in entries:
        if not entry.name.endswith(".ltprof"):
            continue
        try:
            if entry.stat().st_mtime_ns < since_ns:
                continue
        except OSError:
            continue
        chunk = last_chunk(entry.path)
        if chunk is None or not chunk.HasField("trailer"):
            continue
        note = chunk.trailer.unprofiled_exec
        if not note.path or (note.path, note.reason) in seen:
            continue
        seen.add((note.path, note.reason))
        line = f"{note.path}: {note.reason}; exec'd by {entry.name}, it wrote no profile"
        _warn(line)
        lines.append(line)
    return lines


def _kind(st: os.stat_result) -> str:
    return ("a regular file" if stat.S_ISREG(st.st_mode) else
            "a fifo" if stat.S_ISFIFO(st.st_mode) else
            "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else
            "a socket" if stat.S_ISSOCK(st.st_mode) else "not a directory")


def check_out_dir(out_dir: str) -> str:
    """Creates `out_dir` if needed and checks that a file can be created there, as the
    sampler will (core.files.writable_dir); an existing path that is not a
    directory (a file, a fifo) is refused without being opened.  UsageError naming
    --out otherwise."""
    try:
        st = os.stat(out_dir)
    except FileNotFoundError:
        pass
    except OSError as e:
        raise UsageError(f"--out {out_dir}: cannot write there ({e.strerror})") from None
    else:
        if not stat.S_ISDIR(st.st_mode):
            raise UsageError(f"--out {out_dir}: is {_kind(st)}, not a directory")
    return writable_dir(out_dir)


def profiles_of(out_dir: str, pid: int, since_ns: int) -> list[str]:
    """The files <program>.<pid>.<start_unix_ns>.ltprof of process `pid` started at or
    after `since_ns` (time.time_ns()), oldest image first."""
    found = []
    try:
        entries = list(os.scandir(out_dir))
    except OSError:
        return []
    for entry in entries:
        parts = entry.name.rsplit(".", 3)
        if (len(parts) == 4 and parts[3] == "ltprof" and parts[1] == str(pid)
                and parts[2].isdigit() and int(parts[2]) >= since_ns):
            found.append((int(parts[2]), entry.path))
    return [path for _, path in sorted(found)]


def check_profile_written(out_dir: str, pid: int, since_ns: int, code: int) -> str:
    """After a run that ended without a signal: the command's own process (`pid`)
    must have written a profile whose last image ends with a trailer.  Otherwise the
    sampler refused its settings or could not write (its one `lifetime-sampler:` line
    on stderr says why) and ProfileNotWrittenError says so.  Returns the last file."""
    files = profiles_of(out_dir, pid, since_ns)
    if not files:
        raise ProfileNotWrittenError(
            f"--out {out_dir}: the sampler wrote no profile for the command (pid {pid}, "
            f"exit status {code}): it refused its settings or could not write there (see "
            "its lifetime-sampler line)")
    chunk = last_chunk(files[-1])
    if chunk is None or not chunk.HasField("trailer"):
        raise ProfileNotWrittenError(
            f"{files[-1]}: incomplete (no trailer; exit status {code}): the sampler could "
            "not finish writing it (see its lifetime-sampler line), or the process left "
            "without exit() or _exit()")
    return files[-1]


def run_profiled(cmd: Sequence[str], out_dir: str, interval: int | None = None,
                 version_label: str | None = None,
                 extra_env: Mapping[str, str] | None = None, model: str | None = None,
                 full_trace: bool = False, full_trace_capacity: int | None = None) -> int:
    """Runs `cmd` with the sampler preloaded and returns its exit code.

    `full_trace`: record every allocation and free with its stack instead of sampling
    (LIFETIME_FULL_TRACE=1; `interval` must then be None); `full_trace_capacity`: the
    most objects live at once it can follow (more are dropped and counted in
    Trailer.dropped_samples; default 4,194,304, ~64 bytes of memory each when used).

    `model`: a `lifetime export` directory; each sampled allocation then also gets
    the model's predicted class (online, counterfactual: the allocation is untouched).
    stdin, stdout and stderr are the caller's.  A child killed by signal N returns
    128 + N, as a shell reports it.  `out_dir` is created if needed.

    Before the command runs: SamplerNotBuiltError (no sampler library), CommandError
    (the command is missing or not executable), UsageError (empty command, `out_dir`
    not a directory or not writable, an interval or capacity outside the sampler's
    range).  After it, unless it died by a signal: ProfileNotWrittenError when its own
    process wrote no complete profile (the sampler refused a setting given through
    `extra_env`, or could not write).  All LifetimeErrors with one line naming the path
    or option and the problem.  A command (or a program it execs) that cannot be
    profiled gets one "lifetime profile: warning:" line on stderr instead.
    """
    if not cmd:
        raise UsageError("no command given to profile")
    plugin = serve.model_plugin(model) if model else None
    try:
        env = profiled_env(out_dir, interval, version_label, extra_env, model_plugin=plugin,
                           full_trace=full_trace, full_trace_capacity=full_trace_capacity)
    except ValueError as e:
        raise UsageError(str(e)) from None
    program = resolve_command(cmd[0], env)
    check_out_dir(out_dir)
    why = preload_problem(program)
    if why:
        _warn(f"{program}: {why}; it will write no profile")
    started = time.time_ns() - 1_000_000_000  # coarse file-system timestamps
    try:
        proc = subprocess.Popen(list(cmd), env=env)
    except OSError as e:
        raise CommandError(f"{program}: cannot be run: {e.strerror}") from None
    while True:
        try:
            code = proc.wait()
            break
        except KeyboardInterrupt:
            # The child got the same SIGINT from the terminal; let it decide, and
            # report its exit status rather than a Python traceback.
            continue
    report_unprofiled_execs(os.path.abspath(out_dir), started)
    if code < 0:
        return 128 + (-code)  # no trailer to expect: the profile ends where it was cut
    if why is None:
        check_profile_written(out_dir, proc.pid, started, code)
    return code


__all__ = ["LIBRARY_ENV", "DEFAULT_LIBRARY", "MAX_FULL_TRACE_CAPACITY", "MAX_INTERVAL",
           "CommandError", "ProfileNotWrittenError",
           "SamplerNotBuiltError", "check_out_dir", "check_profile_written",
           "preload_problem", "profiled_env", "profiles_of", "report_unprofiled_execs",
           "resolve_command", "run_profiled", "sampler_library_path"]
