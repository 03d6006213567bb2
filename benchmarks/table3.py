"""Helpers shared by the Table 3 benchmarks (benchmarks/simulate_redis.py and
benchmarks/simulate_postgres.py): the command log, the output stamp (which
configuration and code made OUT), mean / sd spreads, and the machine-load rows of the
profiling runs."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIFETIME = os.path.join(ROOT, ".venv", "bin", "lifetime")
MB = 1 << 20
# the code whose changes make earlier outputs stale
CODE_PATHS = ("benchmarks", "core", "pipeline", "model", "simulator", "profiler", "export",
              "lifetime", "profile_format")


class Log:
    """The commands a benchmark ran, in order (commands.txt)."""

    def __init__(self):
        self.lines: list[str] = []

    def note(self, line: str) -> None:
        self.lines.append(line)
        print(line, flush=True)

    def sh(self, cmd: list[str]) -> None:
        self.lines.append(" ".join(shlex.quote(c) for c in cmd))
        print("+", self.lines[-1], flush=True)
        subprocess.run(cmd, check=True, cwd=ROOT)


def code_state(paths=CODE_PATHS) -> dict:
    """The git commit and the modified files under PATHS (uncommitted changes)."""
    def git(*a):
        p = subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True)
        return p.stdout.strip() if p.returncode == 0 else None
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", *paths)
    diff = git("diff", "HEAD", "--", *paths) or ""
    return {"commit": git("rev-parse", "HEAD"),
            "modified": sorted(line[3:] for line in (dirty or "").splitlines()),
            "diff_sha256": hashlib.sha256(diff.encode()).hexdigest()[:16]}


def check_stamp(out: str, config: dict, fresh: bool, resume: bool, who: str) -> dict:
    """Refuses to reuse OUT's outputs made by another configuration or other code;
    writes OUT/stamp.json. Returns {"reused_outputs_of_other_code": the stamp of the code
    that made the reused outputs ("unknown" without a stamp), or None}."""
    path = os.path.join(out, "stamp.json")
    code = code_state()
    if fresh and os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out, exist_ok=True)
    stale = None
    if os.path.exists(path):
        with open(path) as f:
            old = json.load(f)
        if old.get("config") != config:
            raise SystemExit(f"{who}: {out} holds outputs of another configuration "
                             f"({old.get('config')} != {config}); use another --out or --fresh")
        if old.get("code") != code:
            if not resume:
                raise SystemExit(
                    f"{who}: {out} holds outputs made by other code (commit "
                    f"{(old.get('code') or {}).get('commit')}, modified "
                    f"{(old.get('code') or {}).get('modified')}; now {code['commit']}, "
                    f"modified {code['modified']}): --fresh redoes them, --resume reuses them")
            stale = old.get("code")
    elif any(os.scandir(out)):
        if not resume:
            raise SystemExit(f"{who}: {out} holds outputs of an unknown run (no stamp.json): "
                             "--fresh redoes them, --resume reuses them")
        stale = "unknown"
    with open(path, "w") as f:
        json.dump({"config": config, "code": code if stale is None else (stale if stale != "unknown" else None),
                   "now": code}, f, indent=1)
    return {"reused_outputs_of_other_code": stale}


def policy_tag(policy: str) -> str:
    """The suffix of a policy's outputs (sim<TAG>-seedS, results<TAG>.json): none for the
    paper's, else '-' and the policy with every character outside [A-Za-z0-9.-] as '_'."""
    if policy in ("", "paper"):
        return ""
    return "-" + re.sub(r"[^A-Za-z0-9.-]", "_", policy)


def spread(values) -> dict:
    values = [v for v in values if v is not None]
    if not values:
        return {"mean": None, "sd": None, "n": 0}
    sd = statistics.stdev(values) if len(values) > 1 else 0.0  # sample sd (n - 1)
    return {"mean": statistics.fmean(values), "sd": sd,
            "min": min(values), "max": max(values), "n": len(values)}


def machine_rows(runs: dict) -> list[dict]:
    """Per profiling run (run.json by path): what ran and how loaded the machine was."""
    out = []
    for path, rec in sorted(runs.items()):
        m = (rec.get("machine") or {}).get("during") or {}
        pacing = (rec.get("driver") or {}).get("pacing") or {}
        out.append({"run": os.path.dirname(path), "version": rec.get("version"),
                    "full_trace": rec.get("full_trace"),
                    "wall_s": rec.get("wall_s") or (rec.get("marks_s") or {}).get("end"),
                    "loadavg1_mean": (m.get("loadavg1") or {}).get("mean"),
                    "loadavg1_max": (m.get("loadavg1") or {}).get("max"),
                    "busy_mean": (m.get("busy") or {}).get("mean"), "cpus": m.get("cpus"),
                    "late_share": pacing.get("late_share"),
                    "max_lag_s": pacing.get("max_lag_s"),
                    "marks_s": (rec.get("driver") or {}).get("phase_marks_s") or rec.get("marks_s")})
    return out


def loaded(m: dict) -> bool:
    """A machine_rows row recorded with the mean load average above the core count."""
    return bool(m.get("loadavg1_mean") and m.get("cpus") and m["loadavg1_mean"] > m["cpus"])


def machine_markdown(rows: list[dict]) -> str:
    lines = ["Machine while each profile was recorded (lifetimes are wall-clock: load shifts "
             "labels; LOADED: mean load average above the core count):", "",
             "| run | version | full trace | wall s | load avg (mean / max) | CPU busy | "
             "late ticks | max lag s |", "|---|---|---|---|---|---|---|---|"]

    def f(x, fmt):
        return format(x, fmt) if isinstance(x, (int, float)) else "n/a"
    for m in rows:
        lines.append(f"| {m['run']} | {m['version']} | {m['full_trace']} | "
                     f"{f(m['wall_s'], '.1f')} | {f(m['loadavg1_mean'], '.2f')} / "
                     f"{f(m['loadavg1_max'], '.2f')} ({m['cpus']} cores)"
                     f"{' LOADED' if loaded(m) else ''} | {f(m['busy_mean'], '.0%')} | "
                     f"{f(m['late_share'], '.1%')} | {f(m['max_lag_s'], '.2f')} |")
    return "\n".join(lines)


def write_combined(dest: str, result: dict, lines: list[str], tag: str = "") -> None:
    """DEST/combined<TAG>.json (the figures) and combined<TAG>.md (the table), also printed."""
    os.makedirs(dest, exist_ok=True)
    with open(os.path.join(dest, f"combined{tag}.json"), "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(dest, f"combined{tag}.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
