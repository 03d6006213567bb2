"""`lifetime run --allocator NAME [--policy P] [--predictor constant:C | --model EXPORT_DIR]
[--stats FILE] [--attribute DIR [--attribute-every S] [--attribute-signal SIG]] -- CMD ARGS...`
(registered in lifetime/cli.py's SUBCOMMAND_MODULES): the allocator's launcher.  Runs one
command under one allocator through LD_PRELOAD, returns its exit status and prints a
one-line summary on stderr.

NAME is `llama` (allocator/, liblifetime_alloc.so: the simulator's heap policy on real
memory), `glibc` (no preload), a Debian package's allocator for comparison, or
`tcmalloc`: Google's hugepage-aware TCMalloc, the library interop/tools/tcmalloc_preload.sh
builds into the cache (`make tcmalloc-preload`; not built here: a one-line error when
missing).  The
summary has the command's peak RSS (wait4) and wall time, and for llama the allocator's
own figures from its stats file (LIFETIME_ALLOC_STATS, written by the command's first
process; children write their own files, which are not summarized).  `--model` predicts
each object's class with an exported model: its plugin (export/serve.py's model_plugin, the
sampler's and the simulator's) is built or fetched from build/model_plugins and served
through the one variable the in-process runtime reads, LIFETIME_MODEL_PLUGIN=PLUGIN
(serve.PLUGIN_ENV; the sampler's too).  The command runs
under allocator/tools/run_measured.c, which measures it with wait4.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time

from core.errors import LifetimeError, UsageError
from core import options
from core.files import writable_dir, writable_parent
from export import serve  # the export's checks, the plugin's build cache, PLUGIN_ENV

ROOT = pathlib.Path(__file__).resolve().parents[1]

# name -> (library file, Debian package)
SYSTEM_ALLOCATORS = {
    "jemalloc": ("libjemalloc.so.2", "libjemalloc2"),
    "mimalloc": ("libmimalloc.so.2", "libmimalloc2.0"),
    "tcmalloc-gperftools": ("libtcmalloc_minimal.so.4", "libtcmalloc-minimal4"),
}
# Google's TCMalloc (hugepage-aware), built by this script into the model cache
TCMALLOC_SCRIPT = ROOT / "interop" / "tools" / "tcmalloc_preload.sh"
ALLOCATORS = ("llama", "glibc", *SYSTEM_ALLOCATORS, "tcmalloc")


def add_parser(sub) -> None:
    p = sub.add_parser(
        "run", help="run a command under an allocator (LLAMA's, glibc, jemalloc, ...)",
        description="Runs CMD with the chosen malloc preloaded (LD_PRELOAD, appended to any "
                    "already set), exits with its status and prints a one-line summary "
                    "(peak RSS, wall time; for llama the heap's huge pages and objects) on "
                    "stderr.")
    p.add_argument("--allocator", required=True, choices=ALLOCATORS)
    p.add_argument("--policy", metavar="NAME[,NAME...]",
                   help="llama: the simulator's policy names (default: segregated, chosen on "
                        "workloads no reported figure uses: benchmarks/policy_selection.py), or "
                        "`baseline` for the TCMalloc-like size-class heap")
    p.add_argument("--predictor", metavar="constant:C",
                   help="llama: lifetime class for every object (default: constant:0)")
    p.add_argument("--model", metavar="EXPORT_DIR",
                   help="llama: predict each object's class with this exported model "
                        "(`lifetime export` output; its plugin is built once and cached)")
    p.add_argument("--stats", metavar="FILE",
                   help="llama: also keep the allocator's stats JSON of the command's process")
    p.add_argument("--attribute", metavar="DIR",
                   help="llama: record each object's allocation stack and write attribution "
                        "dumps (which stacks' live objects sit on the huge pages held) into "
                        "DIR: at exit, every --attribute-every seconds and on "
                        "--attribute-signal; `lifetime fragmentation DUMP` reads one "
                        "(a stack walk per allocation: slower, for diagnosis)")
    p.add_argument("--attribute-every", type=options.int_range(1, 86400), metavar="SECONDS",
                   help="llama --attribute: also a dump every SECONDS")
    p.add_argument("--attribute-signal", type=_signal_number, metavar="SIG",
                   help="llama --attribute: also a dump after the process gets signal SIG "
                        "(a name such as USR2 or a number; the program must not use it)")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD ARGS...")
    p.set_defaults(func=run)


def _signal_number(text: str) -> int:
    name = text.upper().removeprefix("SIG")
    try:
        num = int(name) if name.isdigit() else int(getattr(signal, "SIG" + name))
    except (AttributeError, ValueError):
        raise argparse.ArgumentTypeError(f"not a signal: {text!r}") from None
    if not 1 <= num <= 64 or num in (signal.SIGKILL, signal.SIGSTOP):
        raise argparse.ArgumentTypeError(f"not a signal a process can catch: {text!r}")
    return num


def _built(name: str, env_var: str) -> str:
    env = os.environ.get(env_var)
    path = pathlib.Path(env) if env else ROOT / "build" / "allocator" / name
    if not path.exists():
        raise LifetimeError(f"{path} is not built: run `make native`")
    return str(path)


def library(name: str) -> str | None:
    """The library to preload for allocator `name` (None: glibc, nothing to preload)."""
    if name == "glibc":
        return None
    if name == "llama":
        return _built("liblifetime_alloc.so", "LIFETIME_ALLOC_LIB")
    if name == "tcmalloc":
        return google_tcmalloc()
    lib, package = SYSTEM_ALLOCATORS[name]
    multiarch = sysconfig.get_config_var("MULTIARCH") or "x86_64-linux-gnu"
    for d in (f"/usr/lib/{multiarch}", f"/lib/{multiarch}", "/usr/lib", "/lib"):
        if os.path.exists(os.path.join(d, lib)):
            return os.path.join(d, lib)
    raise LifetimeError(f"--allocator {name}: {lib} not found (install the Debian package {package})")


def google_tcmalloc() -> str:
    """Google's TCMalloc as an LD_PRELOAD library ($LIFETIME_TCMALLOC_LIB, else the path
    tcmalloc_preload.sh prints).  The script is run only when its library is already in
    the cache (it then just prints the path): building it takes minutes (cargo), so a
    missing one is a one-line error, never an implicit build."""
    env = os.environ.get("LIFETIME_TCMALLOC_LIB")
    if env:
        if not os.path.exists(env):
            raise LifetimeError(f"--allocator tcmalloc: LIFETIME_TCMALLOC_LIB={env} does not exist")
        return env
    # The script computes its own cache key; --cached only looks (building takes minutes).
    proc = subprocess.run(["bash", str(TCMALLOC_SCRIPT), "--cached"], capture_output=True,
                          text=True, timeout=60)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode == 3:
        raise LifetimeError("--allocator tcmalloc: Google's TCMalloc is not built: run "
                            "`make tcmalloc-preload` (minutes; needs cargo and g++)")
    if proc.returncode != 0 or not lines or not os.path.exists(lines[-1]):
        raise LifetimeError(f"--allocator tcmalloc: {TCMALLOC_SCRIPT.name} failed "
                            f"(exit {proc.returncode}): {(proc.stderr.strip() or '?').splitlines()[-1]}")
    return lines[-1]


def _mib(kib: int) -> str:
    return f"{kib / 1024:.1f} MiB"


def summary(name: str, status: int, maxrss_kib: int, wall_s: float, stats: dict | None) -> str:
    head = name if not stats else f"{name} ({stats['policy']}, {stats['predictor']})"
    line = f"lifetime run: {head}: exit {status}, peak RSS {_mib(maxrss_kib)}, wall {wall_s:.2f} s"
    if name == "llama":
        if stats is None:
            line += "; no allocator stats (the command's process wrote none)"
        else:
            line += (f"; huge pages {stats['live_huge_pages']} live, {stats['peak_huge_pages']} peak"
                     f"; objects {stats['objects']} live, {stats['allocs']} allocated"
                     f"; {stats['lock_acquisitions']} lock acquisitions")
            pred = stats.get("prediction", {})
            if "model_runs" in pred:
                hit = pred["cache_hits"] / pred["lookups"] if pred["lookups"] else 0.0
                line += (f"; model cache {hit:.1%} hits of {pred['lookups']} lookups, "
                         f"{pred['model_runs']} model runs (p50 {pred['model_ns_p50'] / 1000:.1f} us)")
    return line


def choose_predictor(env: dict, plugin: str | None, predictor: str | None) -> None:
    """One predictor in ENV: a model's plugin, or a constant (an outer setting of the other
    is dropped; with neither, the environment's stand)."""
    if plugin is not None:
        env.pop("LIFETIME_ALLOC_PREDICTOR", None)
        env[serve.PLUGIN_ENV] = plugin
    elif predictor is not None:
        env.pop(serve.PLUGIN_ENV, None)
        env["LIFETIME_ALLOC_PREDICTOR"] = predictor


def run(args: argparse.Namespace) -> int:
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        raise UsageError("no command given (usage: lifetime run --allocator NAME -- CMD ARGS...)")
    if args.allocator != "llama":
        for opt in ("policy", "predictor", "model", "stats", "attribute", "attribute_every",
                    "attribute_signal"):
            if getattr(args, opt) is not None:
                raise UsageError(f"--{opt.replace('_', '-')} is an option of --allocator llama")
    if args.attribute is None and (args.attribute_every or args.attribute_signal):
        raise UsageError("--attribute-every and --attribute-signal need --attribute DIR")
    if args.attribute is not None:
        writable_dir(args.attribute, "--attribute")
    if args.model is not None and args.predictor is not None:
        raise UsageError("--model and --predictor both choose the predictor: give one")
    if args.stats:
        writable_parent(args.stats, "--stats")
    lib = library(args.allocator)
    plugin = serve.model_plugin(args.model) if args.model is not None else None
    launcher = _built("lifetime_run_measured", "LIFETIME_RUN_MEASURED")
    env = os.environ.copy()
    preload = ""
    if lib:
        preload = f"{env['LD_PRELOAD']}:{lib}" if env.get("LD_PRELOAD") else lib
    with tempfile.TemporaryDirectory(prefix="lifetime-run-") as tmp:
        if args.allocator == "llama":
            env["LIFETIME_ALLOC_STATS"] = os.path.join(tmp, "stats.%p.json")
            if args.policy is not None:
                env["LIFETIME_ALLOC_POLICY"] = args.policy
            if args.attribute is not None:  # (else an outer LIFETIME_ALLOC_ATTRIBUTE stands)
                env["LIFETIME_ALLOC_ATTRIBUTE"] = os.path.abspath(args.attribute)
                if args.attribute_every:
                    env["LIFETIME_ALLOC_ATTRIBUTE_INTERVAL"] = str(args.attribute_every)
                if args.attribute_signal:
                    env["LIFETIME_ALLOC_ATTRIBUTE_SIGNAL"] = str(args.attribute_signal)
            choose_predictor(env, plugin, args.predictor)
        measured = os.path.join(tmp, "measured")
        start = time.monotonic()
        proc = subprocess.Popen([launcher, measured, preload, *cmd], env=env)
        # The command shares the terminal: Ctrl-C is its to handle; we wait and report.
        old = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            proc.wait()
        finally:
            signal.signal(signal.SIGINT, old)
        wall = time.monotonic() - start
        try:
            with open(measured, encoding="ascii") as f:
                fields = dict(kv.split("=", 1) for kv in f.read().split())
        except OSError:
            raise LifetimeError(f"the launcher {launcher} failed (exit {proc.returncode})") from None
        status, pid, maxrss = int(fields["status"]), int(fields["pid"]), int(fields["maxrss_kib"])
        stats = None
        stats_file = os.path.join(tmp, f"stats.{pid}.json")
        if args.allocator == "llama" and os.path.exists(stats_file):
            with open(stats_file, encoding="utf-8") as f:
                stats = json.load(f)
            if args.stats:
                shutil.copyfile(stats_file, args.stats)
    line = summary(args.allocator, status, maxrss, wall, stats)
    if args.attribute is not None:
        dumps = sorted(pathlib.Path(args.attribute).glob(f"attribution.{pid}.*.json"))
        line += (f"; attribution: {len(dumps)} dumps of pid {pid} in {args.attribute}"
                 + (f" (`lifetime fragmentation {dumps[-1]} --out DIR`)" if dumps else ""))
    print(line, file=sys.stderr)
    return status
