#!/usr/bin/env python3
"""Are the simulator's and the allocator's outputs the same as at another revision?  The
check behind a refactoring that moves native code (issue 31): it should change nothing a
user can see.

    .venv/bin/python benchmarks/same_outputs.py --base REV [--trace T.lttrace ...] [--out DIR]

1. Builds REV in a temporary git worktree (its own CMake build directory) and uses this
   checkout's build/ as the other side (`make native` first).
2. Traces: a synthetic Zipf-site trace (benchmarks/simulator_speed.py's generator, 400,000
   objects, seed 7), a 5 s full trace of the proxy workload (v2), and every --trace.
3. The simulator: every trace x policy (paper, segregated, size-classes, tolerant) x
   predictor (oracle, constant:0, constant:3), plus --deadline-k 3, --check-invariants
   (paper + oracle, segregated + constant:2) and --snapshot-at-ns with spans on the proxy
   trace, and a non-trace input (the error line).  Reports, stderr and exit codes must be
   byte-identical; a `timing_ns` object (the model predictor's) is left out.
4. The allocator: single-threaded programs (a Python workload, tests' alignment and calloc
   drivers) under LD_PRELOAD of both libraries x policy (paper, segregated, baseline,
   tolerant) x constant:0/3/7, and LIFETIME_ALLOC_CHECK=4096.  Its policy runs on the
   real clock and the kernel's address layout, so the runs use a clock shim (every
   clock_gettime advances 20 us) and `setarch -R` (no ASLR) and the release delay 0; the
   base library runs twice and every field of the stats JSON the two base runs agree on
   (pid, times and the metadata census aside: all of them in practice) must be the
   same in the new run, and so must the program's output.

Prints one line per configuration and a summary; exits 1 if any differs.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from simulator_speed import synthetic_trace  # noqa: E402

POLICIES = ["paper", "segregated", "size-classes", "tolerant"]
PREDICTORS = ["oracle", "constant:0", "constant:3"]
ALLOC_POLICIES = ["paper", "segregated", "baseline", "tolerant"]
PYTHON_WORKLOAD = """\
d = {}
for i in range(150000): d[i] = str(i) * 3
for i in range(0, 150000, 2): del d[i]
l = [bytearray(n % 5000 + 1) for n in range(40000)]
del l[::3]
print(len(d), sum(map(len, l)))
import json, re
s = json.dumps([{"k": i, "v": [j * 1.5 for j in range(i % 50)]} for i in range(20000)])
print(len(json.loads(s)), len(re.findall(r"\\d+", s)))
"""
CLOCK_SHIM = r"""
#include <stdint.h>
#include <time.h>
static uint64_t t = 1000000000ull;
int clock_gettime(clockid_t c, struct timespec* ts) {
  (void)c; t += 20000; ts->tv_sec = t / 1000000000ull; ts->tv_nsec = t % 1000000000ull; return 0;
}
"""
TARGETS = ["lifetime_simulate", "lifetime_alloc", "alloc_alignment", "alloc_calloc_errno"]


def sh(cmd, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def build_base(rev: str, work: Path) -> Path:
    """REV's native build, in a worktree under work/."""
    tree, build = work / "src", work / "build"
    sh(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), rev])
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    sh(["cmake", "-S", str(tree), "-B", str(build), *gen, "-DCMAKE_BUILD_TYPE=Release"])
    sh(["nice", "cmake", "--build", str(build), "-j2", "--target", *TARGETS])
    return build


def find(build: Path, name: str) -> str:
    hits = [p for p in glob.glob(str(build / "**" / name), recursive=True) if os.path.isfile(p)]
    if not hits:
        sys.exit(f"same_outputs: {build}: no {name}")
    return hits[0]


def proxy_trace(out: Path) -> str:
    from simulator.convert import convert_profile

    prof = out / "proxy-profile"
    subprocess.run([str(ROOT / ".venv" / "bin" / "lifetime"), "profile", "--full-trace", "--out",
                    str(prof), "--", str(ROOT / "build/workloads/proxy_server/proxy_server_v2"),
                    "--seconds", "5"], check=True, capture_output=True)
    trace = out / "proxy.lttrace"
    convert_profile(sorted(prof.glob("*.ltprof"))[0], trace)
    return str(trace)


def _without_timing(text: str) -> str:
    def strip(x):
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if k != "timing_ns"}
        return [strip(v) for v in x] if isinstance(x, list) else x
    try:
        return json.dumps(strip(json.loads(text)), sort_keys=True)
    except ValueError:
        return text


def simulate(engine: str, args: list[str], out: Path) -> tuple:
    report = out / "report.json"
    report.unlink(missing_ok=True)
    r = subprocess.run([engine, *args, "--json", str(report)], capture_output=True, text=True)
    text = report.read_text() if report.exists() else ""
    return r.returncode, r.stderr, _without_timing(text)


def simulator_configs(traces: dict[str, str], proxy: str) -> list[tuple[str, list[str]]]:
    configs = []
    for name, t in traces.items():
        for pol in POLICIES:
            for pred in PREDICTORS:
                configs.append((f"{name} {pol} {pred}", [t, "--policy", pol, "--predictor", pred]))
        configs.append((f"{name} paper oracle --deadline-k 3",
                        [t, "--policy", "paper", "--predictor", "oracle", "--deadline-k", "3"]))
    configs += [
        ("proxy paper oracle --check-invariants",
         [proxy, "--policy", "paper", "--predictor", "oracle", "--check-invariants"]),
        ("proxy segregated constant:2 --check-invariants",
         [proxy, "--policy", "segregated", "--predictor", "constant:2", "--check-invariants"]),
        ("proxy snapshot at 2 s with spans",
         [proxy, "--predictor", "oracle", "--snapshot-at-ns", "2000000000", "--snapshot-spans"]),
        ("not a trace", [__file__, "--predictor", "oracle"]),
    ]
    return configs


def _flat(x, path=""):
    if isinstance(x, dict):
        for k, v in x.items():
            yield from _flat(v, f"{path}/{k}")
    else:
        yield path, json.dumps(x)


def allocator_run(lib: str, shim: str, argv: list[str], env: dict, out: Path) -> tuple:
    stats = out / "stats.json"
    stats.unlink(missing_ok=True)
    full = dict(os.environ, **env, LD_PRELOAD=f"{shim} {lib}", LIFETIME_ALLOC_STATS=str(stats),
                LIFETIME_ALLOC_RELEASE_DELAY_MS="0", PYTHONHASHSEED="0")
    r = subprocess.run(["setarch", "-R", *argv], env=full, capture_output=True, text=True,
                       timeout=600)
    fields = {}
    if stats.exists():
        fields = {k: v for k, v in _flat(json.loads(stats.read_text()))
                  if not k.endswith("_ns") and k not in ("/pid",)
                  and not k.startswith("/internal_arena_census")}
    return r.returncode, r.stdout + r.stderr, fields


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="the revision to compare with")
    ap.add_argument("--trace", action="append", default=[], help="another .lttrace to replay")
    ap.add_argument("--out", help="keep the work here (default: a temporary directory)")
    args = ap.parse_args()
    work = Path(args.out or tempfile.mkdtemp(prefix="same-outputs-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    new = ROOT / "build"
    try:
        print(f"building {args.base} in {work / 'src'} ...", flush=True)
        base = build_base(args.base, work)
        print("making traces ...", flush=True)
        traces = {"zipf": str(work / "zipf.lttrace")}
        synthetic_trace(traces["zipf"], 400_000, seed=7, sites=True)
        traces["proxy"] = proxy_trace(work)
        for t in args.trace:
            traces[Path(t).stem] = t
        differ = total = 0
        old_engine, new_engine = find(base, "lifetime_simulate"), find(new, "lifetime_simulate")
        for name, cfg in simulator_configs(traces, traces["proxy"]):
            a, b = simulate(old_engine, cfg, work), simulate(new_engine, cfg, work)
            total += 1
            differ += a != b
            print(f"{'same' if a == b else 'DIFFERS'}  simulate {name} (exit {a[0]})", flush=True)

        shim = work / "clock_shim.so"
        (work / "clock_shim.c").write_text(CLOCK_SHIM)
        sh(["cc", "-O2", "-shared", "-fPIC", "-o", str(shim), str(work / "clock_shim.c")])
        old_lib, new_lib = find(base, "liblifetime_alloc.so"), find(new, "liblifetime_alloc.so")
        programs = {"python": [sys.executable, "-c", PYTHON_WORKLOAD],
                    "alignment": [find(new, "alloc_alignment")],
                    "calloc_errno": [find(new, "alloc_calloc_errno")]}
        for pol in ALLOC_POLICIES:
            runs = [(f"python constant:{c}", programs["python"],
                     {"LIFETIME_ALLOC_PREDICTOR": f"constant:{c}"}) for c in (0, 3, 7)]
            runs.append(("python LIFETIME_ALLOC_CHECK=4096", programs["python"],
                         {"LIFETIME_ALLOC_CHECK": "4096"}))
            runs += [(p, programs[p], {}) for p in ("alignment", "calloc_errno")]
            for name, argv, env in runs:
                env = dict(env, LIFETIME_ALLOC_POLICY=pol)
                a1 = allocator_run(old_lib, str(shim), argv, env, work)
                a2 = allocator_run(old_lib, str(shim), argv, env, work)
                b = allocator_run(new_lib, str(shim), argv, env, work)
                stable = [k for k in a1[2] if a2[2].get(k) == a1[2][k]]
                bad = [k for k in stable if b[2].get(k) != a1[2][k]]
                same = not bad and a1[:2] == b[:2] and set(a1[2]) == set(b[2]) and stable
                total += 1
                differ += not same
                print(f"{'same' if same else 'DIFFERS'}  allocator {pol} {name}: "
                      f"{len(stable)}/{len(a1[2])} stats fields stable"
                      f"{'; differ: ' + ', '.join(bad[:5]) if bad else ''}", flush=True)
        print(f"{total} configurations, {differ} differ (base {args.base}, new: {new})")
        return 1 if differ else 0
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                        str(work / "src")], capture_output=True)
        if not args.out:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
