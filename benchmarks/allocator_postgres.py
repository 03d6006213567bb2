"""Real allocators on PostgreSQL 16.2, every backend a process (issue 32, item 8): the
server's anonymous memory and RSS over time, summed over ALL its processes (postmaster,
auxiliary processes, every backend), peak, steady state, huge-page share, elapsed time and
statements per second, per load seed, under each allocator (`lifetime run --allocator`):
glibc, jemalloc, mimalloc, tcmalloc-gperftools (Debian's packages) and LLAMA
(liblifetime_alloc.so) with one class for every object (constant:0) under the segregated
preset and the paper's policy (CONFIGS: one line per configuration).

Server: PostgreSQL 16.2 from the pgserver wheel (benchmarks/servers/postgres.py fetches
it; as root the server runs as an unprivileged user, $LIFETIME_SERVER_USER or nobody,
with a staged world-readable copy of the build, as postgres.py does).  `lifetime run` (as
root: the project's Python is not reachable for that user) preloads the allocator into
`setpriv --reuid USER ... postgres`, so the postmaster and every process it forks run
under it.  Load: benchmarks/servers/postgres_mixed.py's setup (126 tables, `items`,
pgbench -i) and its mixed plan (long sessions held to the end, short sessions, temp
tables, cursors, prepared statements, sorts and aggregates, pgbench at a fixed rate),
paced by the wall clock; --seconds shrinks the plan's phases (tests), --scale its rates.

Measured every --interval s: /proc/PID/smaps_rollup of every process of the server (the
postmaster's descendants, found through /proc/*/stat's parent pid; Rss, Anonymous,
AnonHugePages, Pss, Pss_Anon), summed; the processes' CPU time (children reaped by the
postmaster included).  Steady state as the simulator defines it (servers/machine.py's
time_mean): the time-weighted mean over the second half of the run, server ready to end
of load.  Huge-page share = steady AnonHugePages / steady Anonymous.  Summed RSS counts a
page shared by several processes (shared_buffers, pages inherited copy-on-write from
the postmaster) once per process; Anonymous excludes shared memory; Pss splits shared
pages between their processes (the honest total).

Per-backend fixed cost: after the load, --idle-pool fresh connections run `SELECT 1` and
idle; each new backend's smaps_rollup (Rss, Anonymous, Private = Private_Clean +
Private_Dirty: what the backend alone holds) and the mappings of one of them
(/proc/PID/smaps, largest first: the allocator's reservations and metadata show there).
LLAMA runs also keep every process's stats file at its exit (LIFETIME_ALLOC_STATS in the
server's temporary directory): committed heap and internal arena per process.

Each run writes OUT/runs/<config>/load<S>/run.json as it ends; the report (results.json,
results.md, commands.txt) is built from every run.json under OUT, so seeds run in
separate invocations add up (--report-only rebuilds it).  A run that fails (or outlives
--timeout) is recorded with its error; the others go on.

    nice .venv/bin/python benchmarks/allocator_postgres.py [--allocators CONFIG...] \
        [--load-seeds 1 2 3] [--llama-lib PATH] [--out out/allocator_postgres]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pathlib
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.allocator_rss import LABELS as RSS_LABELS, snapshot_llama_lib  # noqa: E402
from benchmarks.servers import common, machine, postgres, postgres_mixed as pm  # noqa: E402
from benchmarks.servers.machine import Sampler, time_mean  # noqa: E402

LIFETIME = str(ROOT / ".venv" / "bin" / "lifetime")
VERSION = "16.2"
MIB = 1024 * 1024
# config name -> (allocator, lifetime run options): a new policy is one more line
CONFIGS = {
    "glibc": ("glibc", []),
    "jemalloc": ("jemalloc", []),
    "mimalloc": ("mimalloc", []),
    "tcmalloc-gperftools": ("tcmalloc-gperftools", []),
    "llama-segregated-constant": ("llama", ["--policy", "segregated", "--predictor", "constant:0"]),
    "llama-paper-constant": ("llama", ["--policy", "paper", "--predictor", "constant:0"]),
}
LABELS = {name: RSS_LABELS.get(name, name) for name in CONFIGS}
# postgresql.conf, as postgres_mixed.profiled_server writes it
SETTINGS = {"listen_addresses": "'127.0.0.1'", "fsync": "off", "synchronous_commit": "off",
            "full_page_writes": "off", "log_min_messages": "warning", "logging_collector": "off",
            **{k: f"'{v}'" for k, v in pm.SERVER_SETTINGS.items()}}
RUN_LINE = re.compile(r"lifetime run: .*?: exit (-?\d+), peak RSS ([\d.]+) MiB, wall ([\d.]+) s")


def log(msg: str) -> None:
    print(f"[allocator_postgres {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --- the server's processes ----------------------------------------------------------

def _stat(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields after the command name (fields[1] = ppid), or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def tree(root: int) -> list[int]:
    """ROOT and its descendants (parent pids from /proc/*/stat; this kernel may lack
    /proc/PID/task/TID/children)."""
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            st = _stat(int(d))
            if st:
                kids.setdefault(int(st[1]), []).append(int(d))
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, ()))
    return out


def rollup(pid: int) -> dict | None:
    """Every kB field of /proc/PID/smaps_rollup (None: the process is gone)."""
    try:
        text = pathlib.Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return None
    out = {}
    for line in text.splitlines()[1:]:
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            out[name] = int(parts[0])
    return out


def mappings(pid: int, top: int = 14) -> dict:
    """/proc/PID/smaps, one row per mapping (size, Rss, Anonymous, AnonHugePages,
    Private_Dirty in kB), the TOP largest by Rss, then the TOP largest by size."""
    rows = machine.smaps_mappings(pid)
    if not rows:
        return {}
    by_rss = sorted(rows, key=lambda r: -r["Rss"])[:top]
    by_size = [r for r in sorted(rows, key=lambda r: -r["size_kib"]) if r not in by_rss][:top // 2]
    anon = [r for r in rows if r["name"] == "[anon]"]
    return {"mappings": len(rows), "anon_mappings": len(anon),
            "anon_reserved_kib": sum(r["size_kib"] for r in anon),
            "anon_rss_kib": sum(r["Rss"] for r in anon),
            "largest_by_rss": by_rss, "largest_by_size": by_size}


class TreeSampler(Sampler):
    """servers/machine.Sampler over a process tree: every INTERVAL s, the sum of FIELDS
    over ROOT and all its descendants, how many there were ("procs"), and their CPU time
    (utime + stime + the reaped children's cutime + cstime); stops when ROOT is gone."""

    FIELDS = ("Rss", "Anonymous", "AnonHugePages", "Pss", "Pss_Anon")

    def __init__(self, root: int, t0: float, interval: float):
        super().__init__(root, t0, interval)
        self.seen: set[int] = set()
        self.max_procs = 0

    def sample(self) -> dict | None:
        if _stat(self.pid) is None:
            return None
        s = {"t": round(time.monotonic() - self.t0, 3), **{k: 0 for k in self.FIELDS}}
        n, ticks = 0, 0
        for pid in tree(self.pid):
            r, st = rollup(pid), _stat(pid)
            if r is None or st is None:
                continue  # exited meanwhile
            n += 1
            self.seen.add(pid)
            for k in self.FIELDS:
                s[k] += r.get(k, 0)
            ticks += sum(int(x) for x in st[11:15])
        if n == 0:
            return None
        s["procs"] = n
        s["cpu_s"] = round(ticks / os.sysconf("SC_CLK_TCK"), 2)
        self.max_procs = max(self.max_procs, n)
        self.samples.append(s)
        return s


# --- one run ---------------------------------------------------------------------------

def readable_copy(path: str, user: common.RunUser, name: str) -> str:
    """PATH itself if USER can read it, else a copy under common.stage_root()/allocator
    (the server's user must map the preloaded library)."""
    if common.can_access(user, path, "r"):
        return path
    data = pathlib.Path(path).read_bytes()
    d = common.stage_root() / "allocator"
    d.mkdir(parents=True, exist_ok=True)
    for p in (d, *(q for q in d.parents if str(q).startswith(str(common.stage_root())))):
        p.chmod(p.stat().st_mode | 0o755)
    stem, dot, ext = name.partition(".")
    dest = d / f"{stem}.{hashlib.sha256(data).hexdigest()[:12]}{dot}{ext}"
    if not dest.exists():
        tmp = dest.with_name(dest.name + f".tmp{os.getpid()}")
        tmp.write_bytes(data)
        tmp.chmod(0o755)
        tmp.rename(dest)
    return str(dest)


def snapshot_launcher(out: pathlib.Path) -> str:
    """A private copy of `lifetime run`'s launcher (build/allocator/lifetime_run_measured,
    or $LIFETIME_RUN_MEASURED): the build tree may be rebuilt while the benchmark runs."""
    src = pathlib.Path(os.environ.get("LIFETIME_RUN_MEASURED")
                       or ROOT / "build" / "allocator" / "lifetime_run_measured")
    if not src.exists():
        raise SystemExit(f"{src} is not built: run `make native`")
    data = src.read_bytes()
    dest = out / "lib" / f"lifetime_run_measured.{hashlib.sha256(data).hexdigest()[:12]}"
    if not dest.exists():
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(dest.name + ".tmp")
        tmp.write_bytes(data)
        tmp.chmod(0o755)
        tmp.rename(dest)
    return str(dest)


def _backends(pids: list[int]) -> list[int]:
    """The client backends among PIDS (`postgres: USER DB HOST(PORT) ...`)."""
    out = []
    for p in pids:
        try:
            title = pathlib.Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if re.match(rb"postgres: \S+ \S+ 127\.0\.0\.1\(\d+\)", title):
            out.append(p)
    return out


def idle_pool(port: int, postmaster: int, n: int) -> dict:
    """N fresh connections run SELECT 1 and idle for a second: each new backend's
    smaps_rollup, their mean, one backend's mappings, and the postmaster's rollup."""
    before = set(tree(postmaster))
    conns = [pm.Conn(port, f"idle{i}") for i in range(n)]
    for c in conns:
        c.query("SELECT 1")
    pm._wait_all(conns, time.monotonic() + 60)
    time.sleep(1.0)
    new = _backends([p for p in tree(postmaster) if p not in before])
    per = {p: rollup(p) for p in new}
    per = {p: r for p, r in per.items() if r}
    out: dict = {"connections": n, "backends": len(per), "postmaster": rollup(postmaster)}
    if per:
        keys = ("Rss", "Anonymous", "AnonHugePages", "Pss", "Pss_Anon", "Private_Clean",
                "Private_Dirty")
        out["mean_kib"] = {k: statistics.fmean(r.get(k, 0) for r in per.values()) for k in keys}
        out["mean_kib"]["Private"] = out["mean_kib"]["Private_Clean"] + out["mean_kib"]["Private_Dirty"]
        first = sorted(per)[0]
        out["sample_backend"] = {"pid": first, "rollup": per[first], **mappings(first)}
    out["errors"] = sum(c.errors for c in conns)
    for c in conns:
        c.terminate()
    pm._wait_closed(conns, time.monotonic() + 30)
    return out


def llama_process_stats(stats_dir: pathlib.Path, postmaster: int | None) -> dict | None:
    """Every process's stats file (written at its exit): how many, and per process the
    committed heap, its peak, the internal arena (medians, maxima, the postmaster's)."""
    files = sorted(stats_dir.glob("stats.*.json"))
    if not files:
        return None
    rows = []
    for f in files:
        try:
            d = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        rows.append({k: d.get(k) for k in ("pid", "policy", "predictor", "committed_bytes",
                                           "peak_committed_bytes", "internal_arena_bytes",
                                           "reserved_bytes", "peak_huge_pages", "allocs",
                                           "peak_policy_objects", "uptime_ns")})
    out: dict = {"processes": len(rows), "policy": rows[0]["policy"] if rows else None,
                 "predictor": rows[0]["predictor"] if rows else None}
    for k in ("peak_committed_bytes", "internal_arena_bytes", "reserved_bytes", "allocs"):
        vals = [r[k] for r in rows if r.get(k) is not None]
        if vals:
            out[k] = {"median": statistics.median(vals), "max": max(vals), "sum": sum(vals)}
    out["postmaster"] = next((r for r in rows if r["pid"] == postmaster), None)
    return out


def run_one(name: str, seed: int, args, run_dir: pathlib.Path) -> dict:
    """One server run under one allocator configuration; the record (also written to
    RUN_DIR/run.json)."""
    allocator, opts = CONFIGS[name]
    run_dir.mkdir(parents=True, exist_ok=True)
    for f in ("run.json", "postgres.log"):
        (run_dir / f).unlink(missing_ok=True)
    record: dict = {"config": name, "label": LABELS[name], "allocator": allocator,
                    "load_seed": seed, "version": VERSION, "scale": args.scale,
                    "phases": args.phases, "status": "ok", "error": None,
                    "llama_lib": args.llama_lib if allocator == "llama" else None}
    user = common.run_user()
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="lt-alloc-pg-"))
    data, stats_dir, logf_path = tmp / "data", tmp / "llama-stats", tmp / "postgres.log"
    stats_dir.mkdir()
    if os.geteuid() == 0 and user.uid != 0:
        for p in (tmp, stats_dir):
            os.chown(p, user.uid, user.gid)
    os.chmod(tmp, 0o755)
    proc = postmaster = sampler = mon = None
    killed = threading.Event()
    watchdog = None
    t_launch = time.monotonic()
    try:
        build = postgres.runnable_by(postgres.ensure(VERSION), user)
        record["server"] = build.to_json()
        record["user"] = user.name
        server_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C",
                      "HOME": str(tmp)}
        postgres.initdb(build, str(data), server_env, str(tmp), user, VERSION)
        with open(data / "postgresql.conf", "a") as conf:
            conf.write("\n# benchmarks/allocator_postgres.py\n"
                       + "".join(f"{k} = {v}\n" for k, v in SETTINGS.items()))
        port = common.free_port()
        inner = []
        if os.geteuid() == 0 and user.uid != 0:  # PostgreSQL refuses root
            inner = ["setpriv", f"--reuid={user.uid}", f"--regid={user.gid}", "--clear-groups", "--"]
        if allocator == "llama":  # every process's stats at its exit, where USER may write
            inner += ["env", f"LIFETIME_ALLOC_STATS={stats_dir}/stats.%p.json"]
        server = [build.tool("postgres"), "-D", str(data), "-p", str(port), "-k", str(tmp)]
        cmd = [LIFETIME, "run", "--allocator", allocator, *opts, "--", *inner, *server]
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("LIFETIME_ALLOC_", "PG")) and k != "LD_PRELOAD"}
        env.update(server_env, LIFETIME_RUN_MEASURED=args.launcher)
        lib_env = f"LIFETIME_RUN_MEASURED={args.launcher} "
        if allocator == "llama":
            env["LIFETIME_ALLOC_LIB"] = args.llama_lib["served"]
            lib_env += f"LIFETIME_ALLOC_LIB={args.llama_lib['served']} "
        record["command"] = cmd
        record["reproduce"] = (f"{lib_env}{shlex.join(cmd)}   # after initdb; or the whole run: "
                               + shlex.join([sys.executable, "benchmarks/allocator_postgres.py",
                                             "--allocators", name, "--load-seeds", str(seed)]))
        plan = pm.Plan(seed, args.scale, args.phases)
        with open(logf_path, "wb") as logf:
            proc = subprocess.Popen(cmd, env=env, cwd=tmp, stdin=subprocess.DEVNULL,
                                    stdout=logf, stderr=subprocess.STDOUT,
                                    start_new_session=True)

        watchdog = common.group_watchdog(proc, args.timeout, killed)
        common.wait_until(lambda: postgres._ready(build, port), 60, f"postgres {VERSION}",
                          proc, str(logf_path))
        t0 = time.monotonic()
        record["startup_s"] = round(t0 - t_launch, 3)
        postmaster = int((data / "postmaster.pid").read_text().split()[0])
        record["postmaster_pid"] = postmaster
        marks: dict[str, float] = {}

        def mark(what: str) -> None:
            marks[what] = round(time.monotonic() - t0, 2)

        with TreeSampler(postmaster, t0, args.interval) as sampler, machine.Monitor() as mon:
            mark("setup")
            pm.run_sql(port, pm.SETUP, "setup")
            code, out = postgres._pgbench(build, port, ["-i", "-s", "1", "-q"], str(tmp), 300)
            if code != 0:
                raise common.ServerSetupError(f"pgbench -i failed ({code}):\n{out[-2000:]}")
            stats0 = pm._stats(build, port)
            mark("load")
            bench = subprocess.Popen(
                [build.tool("pgbench"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres",
                 "-b", "select-only@3", "-b", "simple-update@1", "-M", "prepared", "-n",
                 "-c", str(pm.PGBENCH["clients"]), "-j", "1", "-R", str(pm.PGBENCH["rate"]),
                 "-T", str(max(1, int(plan.seconds))), f"--random-seed={seed}", "postgres"],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp,
                env=postgres._client_env())
            try:
                driven = pm.drive(port, plan, lambda ph: mark(f"phase:{ph}"))
                bench_out, _ = bench.communicate(timeout=120)
            finally:
                if bench.poll() is None:
                    bench.kill()
                    bench.wait()
            stats1 = pm._stats(build, port)
            mark("end")
            sampler.sample()  # one at the end of the load
        record["machine"] = mon.summary()
        if driven["errors"] or driven["replies"] != driven["sent"]:
            raise RuntimeError(f"mixed driver: {driven['errors']} errors ({driven['first_error']}), "
                               f"{driven['replies']} replies of {driven['sent']}")
        m = re.search(r"number of transactions actually processed: (\d+)", bench_out)
        record["load"] = {
            "marks_s": marks, "plan": plan.summary(),
            "sent": driven["sent"], "replies": driven["replies"], "errors": driven["errors"],
            "short_sessions": driven["short_sessions"], "pacing": driven["pacing"],
            "pgbench": {"exit_code": bench.returncode,
                        "transactions": int(m.group(1)) if m else 0,
                        **({"output": bench_out[-800:]} if bench.returncode else {})},
            "server_stats": {k: stats1[k] - stats0[k] for k in stats1}}
        if args.idle_pool:
            record["idle_pool"] = idle_pool(port, postmaster, args.idle_pool)
    except Exception as e:  # noqa: BLE001 - a failed run is recorded, the others go on
        record["status"] = "timeout" if killed.is_set() else "error"
        record["error"] = f"{type(e).__name__}: {e}"[-2000:]
        if mon is not None and "machine" not in record:
            record["machine"] = mon.summary()
    finally:
        code = None
        if proc is not None:
            if postmaster and proc.poll() is None and not killed.is_set():
                try:
                    os.kill(postmaster, signal.SIGINT)  # fast shutdown: backends exit normally
                    code = proc.wait(120)
                except ProcessLookupError:
                    code = proc.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    code = proc.wait()
            elif proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                code = proc.wait()
            else:
                code = proc.returncode
        if watchdog is not None:
            watchdog.cancel()
    record["exit_code"] = code
    record["wall_s"] = round(time.monotonic() - t_launch, 2)
    text = logf_path.read_text(errors="replace") if logf_path.exists() else ""
    (run_dir / "postgres.log").write_text(text[-20000:])
    record["log_tail"] = text[-2000:]
    if killed.is_set():
        record["status"] = "timeout"
        record["error"] = record["error"] or f"killed after {args.timeout} s"
    elif code not in (0, None) and record["status"] == "ok":
        record["status"] = "error"
        record["error"] = f"lifetime run exited {code}: {text[-500:]}"
    m = RUN_LINE.search(text)
    record["wait4_peak_rss_mib_postmaster"] = float(m.group(2)) if m else None
    record["llama_process_stats"] = (llama_process_stats(stats_dir, postmaster)
                                     if allocator == "llama" else None)
    shutil.rmtree(tmp, ignore_errors=True)
    record["samples"] = sampler.samples if sampler else []
    record["processes_seen"] = len(sampler.seen) if sampler else 0
    record["max_processes"] = sampler.max_procs if sampler else 0
    record["metrics"] = metrics(record)
    (run_dir / "run.json").write_text(json.dumps(record, indent=1))
    return record


def metrics(r: dict) -> dict:
    s, load = r["samples"], r.get("load") or {}
    marks = load.get("marks_s", {})
    if r["status"] != "ok" or not s or "end" not in marks:
        return {}
    end, begin = marks["end"], marks["load"]
    lo = end / 2  # the simulator's steady state: the second half of the run
    mean = {k: time_mean(s, k, lo, end) for k in TreeSampler.FIELDS}
    load_s = end - begin
    xact = load["server_stats"]["xact_commit"] + load["server_stats"]["xact_rollback"]
    out = {"run_s": end, "steady_from_s": round(lo, 2), "load_s": round(load_s, 2),
           "steady_anon_mib": mean["Anonymous"] / 1024, "steady_rss_mib": mean["Rss"] / 1024,
           "steady_pss_mib": mean["Pss"] / 1024, "steady_anon_huge_mib": mean["AnonHugePages"] / 1024,
           "huge_share_of_anon": mean["AnonHugePages"] / mean["Anonymous"] if mean["Anonymous"] else None,
           "peak_anon_mib": max(x["Anonymous"] for x in s) / 1024,
           "peak_rss_mib": max(x["Rss"] for x in s) / 1024,
           "peak_pss_mib": max(x["Pss"] for x in s) / 1024,
           "peak_anon_huge_mib": max(x["AnonHugePages"] for x in s) / 1024,
           "max_processes": max(x["procs"] for x in s),
           "steady_processes": time_mean(s, "procs", lo, end),
           "processes_seen": r.get("processes_seen"),
           "statements": load["replies"], "statements_per_s": load["replies"] / load_s,
           "transactions_per_s": xact / load_s, "sessions": load["server_stats"]["sessions"],
           "late_tick_share": load["pacing"]["late_share"], "max_lag_s": load["pacing"]["max_lag_s"],
           "server_cpu_s": s[-1]["cpu_s"],
           "cpu_ms_per_statement": s[-1]["cpu_s"] / load["replies"] * 1e3 if load["replies"] else None,
           "wall_s": r.get("wall_s"), "samples": len(s)}
    pool = r.get("idle_pool") or {}
    if pool.get("mean_kib"):
        for k, name in (("Anonymous", "idle_backend_anon_kib"), ("Rss", "idle_backend_rss_kib"),
                        ("Private", "idle_backend_private_kib"), ("Pss", "idle_backend_pss_kib"),
                        ("AnonHugePages", "idle_backend_anon_huge_kib")):
            out[name] = pool["mean_kib"][k]
    return out


# --- the report --------------------------------------------------------------------------

def load_runs(out: pathlib.Path) -> list[dict]:
    return [json.loads(f.read_text()) for f in sorted(out.glob("runs/*/load*/run.json"))]


def _stats(vals: list[float]) -> dict:
    return {"n": len(vals), "mean": statistics.fmean(vals),
            "sd": statistics.stdev(vals) if len(vals) > 1 else 0.0,
            "min": min(vals), "max": max(vals), "spread": max(vals) - min(vals), "values": vals}


KEYS = ("peak_anon_mib", "peak_rss_mib", "peak_pss_mib", "steady_anon_mib", "steady_rss_mib",
        "steady_pss_mib", "huge_share_of_anon", "steady_anon_huge_mib", "load_s", "wall_s",
        "statements_per_s", "transactions_per_s", "cpu_ms_per_statement", "late_tick_share",
        "max_processes", "processes_seen", "idle_backend_anon_kib", "idle_backend_rss_kib",
        "idle_backend_private_kib", "idle_backend_pss_kib", "idle_backend_anon_huge_kib")


def aggregate(runs: list[dict]) -> dict:
    """Per config: each metric over load seeds (mean, sd, min, max, spread, values) and
    the per-seed ratios to glibc (steady and peak anonymous memory, CPU per statement)."""
    by: dict = {}
    for r in runs:
        by.setdefault(r["config"], {})[r["load_seed"]] = r
    gl = {s: r["metrics"] for s, r in by.get("glibc", {}).items() if r["metrics"]}
    rows = {}
    for name in [*CONFIGS, *sorted(set(by) - set(CONFIGS))]:
        if name not in by:
            continue
        ok = {s: r["metrics"] for s, r in sorted(by[name].items()) if r["metrics"]}
        failed = {s: {"status": r["status"], "error": r["error"], "reproduce": r.get("reproduce")}
                  for s, r in sorted(by[name].items()) if not r["metrics"]}
        row: dict = {"label": LABELS.get(name, name), "seeds": sorted(ok), "failed": failed}
        for k in KEYS:
            vals = [m[k] for m in ok.values() if m.get(k) is not None]
            if vals:
                row[k] = _stats(vals)
        for k in ("steady_anon_mib", "peak_anon_mib", "steady_rss_mib", "cpu_ms_per_statement"):
            vals = [ok[s][k] / gl[s][k] for s in ok if s in gl and gl[s].get(k)]
            if vals:
                row[f"{k}_to_glibc"] = _stats(vals)
        rows[name] = row
    return rows


def _cell(row: dict, key: str, fmt: str = ".1f", worst: str = "max", scale: float = 1.0,
          unit: str = "") -> str:
    st = row.get(key)
    if not st:
        return "n/a"
    s = f"{st['mean'] * scale:{fmt}}{unit}"
    if st["n"] > 1:
        s += f" (worst {st[worst] * scale:{fmt}}{unit}, spread {st['spread'] * scale:{fmt}}{unit})"
    return s


def markdown(agg: dict, runs: list[dict]) -> str:
    plans = sorted({(r["scale"], json.dumps(r["phases"])) for r in runs})
    lines = [f"# PostgreSQL {VERSION} under real allocators (issue 32, item 8)", "",
             "Every backend a process: memory summed over the postmaster and all its "
             "descendants (/proc/PID/smaps_rollup every sample). Load: "
             "benchmarks/servers/postgres_mixed.py's setup and mixed plan (" +
             "; ".join(f"scale {s}, phases {p}" for s, p in plans) + "). Steady state: "
             "time-weighted mean over the second half of the run (server ready to end of "
             "load). Huge pages = steady AnonHugePages / steady Anonymous. Each cell: mean "
             "over load seeds (worst seed, spread = max - min); memory's worst is the "
             "largest, throughput's the smallest. Elapsed: the load (setup excluded), paced "
             "by the wall clock, so statements/s is the plan's unless the server falls "
             "behind (late ticks).", "",
             "| allocator | seeds | peak Anonymous MiB | steady Anonymous MiB | / glibc | "
             "peak RSS MiB | steady RSS MiB | steady PSS MiB | huge / anon | elapsed s | "
             "statements/s | CPU ms/stmt | late ticks | processes (max, seen) | failed |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in agg.items():
        failed = "; ".join(f"load {s}: {f['status']}" for s, f in r["failed"].items())
        procs = (f"{r['max_processes']['max']:.0f}, {r['processes_seen']['max']:.0f}"
                 if "max_processes" in r and "processes_seen" in r else "n/a")
        lines.append("| " + " | ".join([
            r["label"], ",".join(map(str, r["seeds"])) or "-",
            _cell(r, "peak_anon_mib"), _cell(r, "steady_anon_mib"),
            _cell(r, "steady_anon_mib_to_glibc", ".2f"),
            _cell(r, "peak_rss_mib"), _cell(r, "steady_rss_mib"), _cell(r, "steady_pss_mib"),
            _cell(r, "huge_share_of_anon", ".1f", "min", 100, " %"),
            _cell(r, "load_s"), _cell(r, "statements_per_s", ".0f", "min"),
            _cell(r, "cpu_ms_per_statement", ".2f"),
            _cell(r, "late_tick_share", ".1f", "max", 100, " %"), procs, failed]) + " |")
    lines += ["", "## Per-backend fixed cost: an idle backend", "",
              "After the load, fresh connections run `SELECT 1` and idle; per new backend "
              "(mean over them, then over seeds): Anonymous (includes pages still shared "
              "copy-on-write with the postmaster), Private = Private_Clean + Private_Dirty "
              "(what that backend alone holds), PSS, AnonHugePages. LLAMA: per process (stats "
              "at each process's exit, medians over the run's processes) the address space "
              "reserved, the peak committed heap and the internal arena.", "",
              "| allocator | idle backend Anonymous KiB | Private KiB | PSS KiB | "
              "AnonHugePages KiB | LLAMA per process: reserved GiB, peak committed MiB, "
              "internal arena KiB (median; processes) |", "|---|---|---|---|---|---|"]
    by_cfg: dict = {}
    for r in runs:
        if r.get("llama_process_stats"):
            by_cfg.setdefault(r["config"], []).append(r["llama_process_stats"])
    for name, r in agg.items():
        ll = by_cfg.get(name)
        cell = "-"
        if ll:
            med = lambda k: statistics.median(x[k]["median"] for x in ll if k in x)  # noqa: E731
            cell = (f"{med('reserved_bytes') / 2**30:.0f}, {med('peak_committed_bytes') / MIB:.1f}, "
                    f"{med('internal_arena_bytes') / 1024:.0f}; "
                    f"{'/'.join(str(x['processes']) for x in ll)}")
        lines.append(f"| {r['label']} | {_cell(r, 'idle_backend_anon_kib', '.0f')} | "
                     f"{_cell(r, 'idle_backend_private_kib', '.0f')} | "
                     f"{_cell(r, 'idle_backend_pss_kib', '.0f')} | "
                     f"{_cell(r, 'idle_backend_anon_huge_kib', '.0f')} | {cell} |")
    sample = [r for r in runs if (r.get("idle_pool") or {}).get("sample_backend")]
    if sample:
        lines += ["", "## One idle backend's anonymous mappings (lowest load seed)", "",
                  "Anonymous private mappings of one idle backend: how many, address space, "
                  "resident; the largest resident ones ([anon] and [heap]) as size / Rss / "
                  "Private_Dirty / AnonHugePages KiB: Rss beyond Private_Dirty is shared "
                  "copy-on-write with the postmaster (and its other children).", "",
                  "| allocator | anon mappings | reserved GiB | resident KiB | largest resident "
                  "|", "|---|---|---|---|---|"]
        seen = set()
        for r in sorted(sample, key=lambda r: (list(agg).index(r["config"]) if r["config"] in agg
                                               else 99, r["load_seed"])):
            if r["config"] in seen:
                continue
            seen.add(r["config"])
            b = r["idle_pool"]["sample_backend"]
            anon = [m for m in b["largest_by_rss"] if m["name"] in ("[anon]", "[heap]")
                    and m.get("Rss")]
            big = "; ".join(f"{m['size_kib']} / {m['Rss']} / {m.get('Private_Dirty', 0)} / "
                            f"{m.get('AnonHugePages', 0)}{' heap' if m['name'] == '[heap]' else ''}"
                            for m in anon[:4])
            lines.append(f"| {r['label']} | {b['anon_mappings']} | "
                         f"{b['anon_reserved_kib'] / 2**20:.1f} | {b['anon_rss_kib']} | {big} |")
    libs = sorted({r["llama_lib"]["sha256"][:12] for r in runs if r.get("llama_lib")})
    if libs:
        lines += ["", f"LLAMA library (sha256 prefix) of the LLAMA runs: {', '.join(libs)}"
                  + (" — MIXED: runs of different libraries are not comparable" if len(libs) > 1
                     else "")]
    bad = [r for r in runs if r["status"] != "ok"]
    if bad:
        lines += ["", "## Failed runs", ""]
        for r in bad:
            lines += [f"* {r['config']} / load {r['load_seed']}: **{r['status']}** — {r['error']}",
                      f"  reproduce: `{r.get('reproduce', '?')}`"]
    lines.append("")
    return "\n".join(lines)


def report(out: pathlib.Path) -> dict:
    runs = load_runs(out)
    agg = aggregate(runs)
    res = {"version": VERSION, "aggregate": agg,
           "runs": [{k: v for k, v in r.items() if k != "samples"} for r in runs]}
    (out / "results.json").write_text(json.dumps(res, indent=1))
    (out / "results.md").write_text(markdown(agg, runs))
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--allocators", nargs="+", default=list(CONFIGS), metavar="CONFIG",
                    help=f"from: {', '.join(CONFIGS)}")
    ap.add_argument("--load-seeds", nargs="+", type=int, default=[1, 2, 3])
    ap.add_argument("--out", default=str(ROOT / "out" / "allocator_postgres"))
    ap.add_argument("--llama-lib", default=None, help="liblifetime_alloc.so to copy and use "
                    "(default: build/allocator/'s, copied into OUT/lib at start)")
    ap.add_argument("--interval", type=float, default=0.25,
                    help="seconds between samples of the server's processes")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per run before it is killed")
    ap.add_argument("--scale", type=float, default=1.0, help="factor on every rate of the plan")
    ap.add_argument("--seconds", type=float, default=None,
                    help="shrink the plan's phases to about this total (default: the plan's "
                         f"{sum(s for _, s in pm.PHASES):.0f} s)")
    ap.add_argument("--idle-pool", type=int, default=8, metavar="N",
                    help="fresh idle connections measured after the load (0: none)")
    ap.add_argument("--report-only", action="store_true", help="rebuild the report from OUT/runs")
    args = ap.parse_args(argv)
    args.phases = pm.PHASES
    if args.seconds:
        f = args.seconds / sum(s for _, s in pm.PHASES)
        args.phases = tuple((n, max(pm.TICK_S, round(s * f, 2))) for n, s in pm.PHASES)
    args.phases = [list(p) for p in args.phases]
    out = pathlib.Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        for name in args.allocators:
            if name not in CONFIGS:
                raise SystemExit(f"unknown allocator config {name} (choose from {', '.join(CONFIGS)})")
        user = common.run_user()
        args.launcher = snapshot_launcher(out)
        args.llama_lib = snapshot_llama_lib(args.llama_lib, out)
        args.llama_lib["served"] = readable_copy(args.llama_lib["path"], user,
                                                 "liblifetime_alloc.so")
        log(f"llama library: {args.llama_lib['served']} (sha256 {args.llama_lib['sha256'][:12]}, "
            f"from {args.llama_lib['source']}, built {args.llama_lib['built']}, HEAD "
            f"{args.llama_lib['git_head']}); server user {user.name}")
        with open(out / "commands.txt", "a") as f:
            f.write(f"# {time.strftime('%Y-%m-%d %H:%M:%S')} load {os.getloadavg()}\n"
                    + shlex.join([sys.executable, *sys.argv]) + "\n")
        total = len(args.load_seeds) * len(args.allocators)
        k = 0
        for s in args.load_seeds:
            for name in args.allocators:
                k += 1
                log(f"[{k}/{total}] {name} load seed {s} (load avg {os.getloadavg()[0]:.1f})")
                r = run_one(name, s, args, out / "runs" / name / f"load{s}")
                m = r["metrics"]
                if m:
                    log(f"    peak anon {m['peak_anon_mib']:.1f} MiB, steady anon "
                        f"{m['steady_anon_mib']:.1f} MiB, steady RSS {m['steady_rss_mib']:.1f} MiB, "
                        f"huge/anon {m['huge_share_of_anon']:.1%}, {m['max_processes']} processes "
                        f"at most ({m['processes_seen']} seen), {m['statements_per_s']:.0f} stmt/s, "
                        f"load {m['load_s']:.1f} s, run {r['wall_s']:.1f} s")
                else:
                    log(f"    {r['status']}: {r['error']}")
                report(out)
    report(out)
    log(f"wrote {out / 'results.md'}, {out / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
