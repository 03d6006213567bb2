#!/usr/bin/env python3
"""`make demo`'s two Python steps.

  demo_summary.py [OUT]
      Prints where the demo put its outputs and the headline figures, ending with what
      the proxy shows: the simulated heap (Table 3) in one line, then the real program
      under each allocator, peak RSS and wall time side by side (OUT/allocators.json).

  demo_summary.py --run-allocators OUT --model EXPORT_DIR -- CMD ARGS...
      Runs CMD once under each allocator with `lifetime run` (glibc, jemalloc, mimalloc,
      gperftools' tcmalloc, LLAMA with constant:0 and LLAMA + the exported model), one
      after the other, shows each run's lines and writes OUT/allocators.json.  Peak RSS and wall time
      are read from `lifetime run`'s summary line on stderr (it has no machine-readable
      form for them; its --stats JSON, kept for LLAMA, holds the allocator's own
      figures only); a line that does not parse is a failed run, never a guess.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import re
import shutil
import subprocess
import sys

ALLOCATORS_JSON = "allocators.json"
# (name in the table, `lifetime run` options; {model} and {stats} are filled in).
# glibc first: the others are compared with it.
RUNS = (
    ("glibc", ["--allocator", "glibc"]),
    ("jemalloc", ["--allocator", "jemalloc"]),
    ("mimalloc", ["--allocator", "mimalloc"]),
    ("tcmalloc (gperftools)", ["--allocator", "tcmalloc-gperftools"]),
    ("LLAMA, constant:0", ["--allocator", "llama", "--stats", "{stats}"]),
    ("LLAMA + model", ["--allocator", "llama", "--model", "{model}", "--stats", "{stats}"]),
)
# lifetime run's summary line (allocator/README.md), e.g.
# `lifetime run: llama (paper, constant:0): exit 0, peak RSS 341.4 MiB, wall 2.36 s; ...`
RUN_LINE = re.compile(r"^lifetime run: (?P<head>.*?): exit (?P<status>\d+), "
                      r"peak RSS (?P<rss>[0-9.]+) MiB, wall (?P<wall>[0-9.]+) s")
# the proxy's last line: `proxy_server_v2: 4.02 s, 7898 requests (0 dropped), ...`
PROXY_LINE = re.compile(r"(?P<program>proxy_server_v\d): (?P<seconds>[0-9.]+) s, "
                        r"(?P<requests>\d+) requests \((?P<dropped>\d+) dropped\)")


def pct(x):
    return "n/a" if x is None else f"{100 * x:.1f}%"


def mib(b):
    return f"{b / 2**20:.1f} MiB"


def signed(x):
    """A relative difference as `+12.3%` / `-4.5%`."""
    return f"{100 * x:+.1f}%"


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def parse_run(stderr: str, stdout: str) -> dict:
    """What one `lifetime run` measured: its summary line's exit status, peak RSS and
    wall time (the last such line), and the proxy's requests and drops if it printed them."""
    fields: dict = {}
    for line in stderr.splitlines():
        m = RUN_LINE.match(line)
        if m:
            fields = {"summary": line, "exit": int(m["status"]),
                      "peak_rss_mib": float(m["rss"]), "wall_s": float(m["wall"])}
    for line in stdout.splitlines():
        m = PROXY_LINE.search(line)
        if m:
            fields.update(program_seconds=float(m["seconds"]), requests=int(m["requests"]),
                          dropped=int(m["dropped"]))
    return fields


def run_allocators(out: pathlib.Path, model: str, command: list[str]) -> dict:
    lifetime = pathlib.Path(sys.executable).parent / "lifetime"
    lifetime = str(lifetime) if lifetime.exists() else (shutil.which("lifetime") or "lifetime")
    runs_dir = out / "allocators"
    runs_dir.mkdir(parents=True, exist_ok=True)
    runs = []
    for name, options in RUNS:
        stats = runs_dir / f"{_slug(name)}.stats.json"
        argv = [lifetime, "run", *(o.format(model=model, stats=stats) for o in options),
                "--", *command]
        stats.unlink(missing_ok=True)
        proc = subprocess.run(argv, capture_output=True, text=True)
        for text in (proc.stdout, proc.stderr):  # shown once the run has ended
            if text.strip():
                print(f"[{name}] " + text.rstrip("\n").replace("\n", f"\n[{name}] "),
                      flush=True)
        run = {"allocator": name, "argv": argv[1:], "returncode": proc.returncode,
               **parse_run(proc.stderr, proc.stdout)}
        if "summary" not in run or run["exit"] != 0:
            lines = proc.stderr.strip().splitlines()
            run["error"] = lines[-1] if lines else f"exit {proc.returncode}, nothing on stderr"
        if stats.exists():
            s = json.loads(stats.read_text())
            run["llama"] = {k: s.get(k) for k in (
                "policy", "predictor", "peak_huge_pages", "peak_committed_bytes",
                "peak_bytes_requested", "allocs")}
            run["llama"]["stats_file"] = str(stats)
            pred = s.get("prediction") or {}
            if pred.get("lookups"):
                run["llama"]["model_cache_hit_rate"] = pred["cache_hits"] / pred["lookups"]
        runs.append(run)
    result = {"command": command, "runs": runs,
              "note": "one run each, in this order, on whatever else the machine was doing"}
    (out / ALLOCATORS_JSON).write_text(json.dumps(result, indent=2) + "\n")
    return result


def simulation_line(simulation: dict) -> str | None:
    """One sentence on what the simulated heap shows, from its Table 3 rows: LLAMA with
    the model and with the oracle against the TCMalloc-like baseline, steady state."""
    rows = {r["predictor"]: r for r in simulation.get("table3", [])}
    model, oracle = rows.get("model"), rows.get("oracle")
    lead = model or oracle
    if lead is None or not lead.get("baseline_steady_state_bytes"):
        return None
    base = lead["baseline_steady_state_bytes"]

    def versus(row):
        x = row["llama_steady_state_bytes"] / base - 1
        word = "above" if x > 0 else "below" if x < 0 else "level with"
        return x, f"{mib(row['llama_steady_state_bytes'])}, {abs(100 * x):.1f}% {word} it"

    seconds = simulation.get("trace", {}).get("seconds")
    trace = f"{seconds:.0f} s full trace of v2, " if seconds else ""
    head = (f"the proxy shows: on its simulated heap ({trace}steady state: the mean over the "
            f"trace's second half) the TCMalloc-like baseline takes {mib(base)} (live "
            f"{mib(lead['live_steady_state_bytes'])}); ")
    parts = []
    if model:
        xm, text = versus(model)
        parts.append(f"LLAMA + model {text}")
    if oracle:
        xo, text = versus(oracle)
        parts.append(f"LLAMA + oracle {text}")
    line = head + "; ".join(parts)
    if model and oracle:
        if xo >= 0 and xm >= 0:
            line += " (not even perfect predictions make LLAMA win on this workload)"
        elif xo < 0 <= xm:
            line += " (perfect predictions would win; the model's do not)"
        elif xm < 0 <= xo:
            line += " (the model beats the oracle)"
        else:
            saved_oracle = base - oracle["llama_steady_state_bytes"]
            saved_model = base - model["llama_steady_state_bytes"]
            line += f" (the model gets {pct(saved_model / saved_oracle)} of the oracle's saving)"
    return line


def allocator_lines(result: dict) -> list[str]:
    """The real runs side by side (peak RSS, wall time, the proxy's requests), then one
    line comparing LLAMA + model with glibc and with the smallest peak."""
    runs = result.get("runs", [])
    command = " ".join([pathlib.Path(result["command"][0]).name, *result["command"][1:]])
    lines = [f"real allocators, one run each of `{command}` under `lifetime run`:",
             f"  {'allocator':22s} {'peak RSS':>11s} {'wall':>8s}  requests (dropped)"]
    ok = {}
    for r in runs:
        if "error" in r:
            lines.append(f"  {r['allocator']:22s} failed: {r['error']}")
            continue
        ok[r["allocator"]] = r
        served = (f"{r['requests']} ({r['dropped']})" if "requests" in r else "")
        lines.append(f"  {r['allocator']:22s} {r['peak_rss_mib']:7.1f} MiB {r['wall_s']:6.2f} s"
                     f"  {served}")
    glibc, llama = ok.get("glibc"), ok.get("LLAMA + model")
    if glibc and llama:
        x = llama["peak_rss_mib"] / glibc["peak_rss_mib"] - 1
        best = min(ok.values(), key=lambda r: r["peak_rss_mib"])
        walls = [r["wall_s"] for r in ok.values()]
        dropped = [f"{r['allocator']} {r['dropped']}" for r in ok.values() if r.get("dropped")]
        kept_up = ("every allocator kept up (no request dropped)" if not dropped
                   else "dropped requests: " + ", ".join(dropped))
        lines.append(
            f"LLAMA + model peaks at {llama['peak_rss_mib']:.1f} MiB RSS, {signed(x)} against "
            f"glibc's {glibc['peak_rss_mib']:.1f} MiB (smallest: {best['allocator']}, "
            f"{best['peak_rss_mib']:.1f} MiB); wall {min(walls):.2f}-{max(walls):.2f} s: the "
            f"proxy serves a fixed request rate for a fixed time (it has no fixed-work mode), "
            f"so wall time only shows whether an allocator keeps up: {kept_up}")
    return lines


def summary(out: pathlib.Path) -> int:
    def load(path):
        p = out / path
        return json.loads(p.read_text()) if p.exists() else None

    report = load("report/report.json")
    online = load("online.json")
    manifest = load("export/export_manifest.json")
    simulation = load("simulate/report.json")
    allocators = load(ALLOCATORS_JSON)
    print("outputs:")
    for name, path in [("profiles", "profiles"), ("datasets", "datasets"), ("model", "model"),
                       ("report (v1 -> v2)", "report/report.md"),
                       ("characterization", "characterize"), ("exported library", "export"),
                       ("online evaluation", "online.json"),
                       ("simulation", "simulate/report.md"),
                       ("allocator runs", ALLOCATORS_JSON)]:
        print(f"  {name:20s} {out / path}")
    if manifest:
        print(f"exported library: {manifest.get('library', out / 'export/lib')}")
    if report:
        s = report["summary"]
        share = s.get("unseen_share", {})
        print(f"offline, trained on v1, tested on v2 ({pct(share.get('contexts'))} of v2's "
              f"contexts, {pct(share.get('samples'))} of its samples, unseen in v1):")
        for scope in ("unseen", "overall"):
            for name in ("model", "baseline_exact", "baseline_site", "baseline_majority"):
                m = s.get(f"{scope}/{name}")
                if m:
                    print(f"  {scope:8s} {name:18s} weighted exact {pct(m['weighted_exact'])}, "
                          f"off-by-one {pct(m['weighted_off_by_one'])}, under-prediction "
                          f"{pct(m['weighted_under_prediction'])}; unweighted exact "
                          f"{pct(m['unweighted_exact'])}")
    if online:
        h = online["headline"]
        print(f"online (v2, model inside the sampler): weighted exact {pct(h['weighted_exact'])}, "
              f"off-by-one {pct(h['weighted_off_by_one'])}, cache hit rate "
              f"{pct(online['cache']['hit_rate'])}, added cost p50 "
              f"{online['cost_ns_per_sampled_allocation']['p50'] / 1e3:.2f} us per sampled allocation")
    if simulation:
        print("simulated heap (v2 full trace; steady-state huge-page memory, Table 3 row):")
        for row in simulation["table3"]:
            print(f"  LLAMA + {row['predictor']:26s} {mib(row['llama_steady_state_bytes'])} vs "
                  f"baseline {mib(row['baseline_steady_state_bytes'])}, live "
                  f"{mib(row['live_steady_state_bytes'])}: fragmentation reduction "
                  f"{pct(row['fragmentation_reduction'])}, accuracy {pct(row['accuracy_by_allocations'])}")
        line = simulation_line(simulation)
        if line:
            print(line)
    failed = False
    if allocators:
        for line in allocator_lines(allocators):
            print(line)
        failed = any("error" in r for r in allocators.get("runs", []))
    return 1 if failed else 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["--run-allocators"]:
        p = argparse.ArgumentParser(prog="demo_summary.py --run-allocators",
                                    usage="%(prog)s OUT --model EXPORT_DIR -- CMD ARGS...")
        p.add_argument("out", type=pathlib.Path)
        p.add_argument("--model", required=True, metavar="EXPORT_DIR")
        cut = argv.index("--") if "--" in argv else len(argv)
        args, command = p.parse_args(argv[1:cut]), argv[cut + 1:]
        if not command:
            p.error("no command given after --")
        run_allocators(args.out, args.model, command)
        return 0
    return summary(pathlib.Path(argv[0] if argv else "out/demo"))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
