"""A peer's suite, not only ours (issue 32, item 7): the kinds of program mimalloc-bench
runs, under every allocator `lifetime run` knows, measured as mimalloc-bench measures
(elapsed, peak RSS) and additionally by the steady RSS after the peak.

Programs
  larson   build/workloads/stress/larson_sim   slot arrays passed between threads
  mstress  build/workloads/stress/mstress_sim  mixed lifetimes, transfers, a retention
                                               then its release (marker)
  rptest   build/workloads/stress/rptest_sim   random sizes to a peak, a drain (marker)
  gs       Ghostscript renders a 200-page PDF made here (random curves, fills, text;
           PostScript written by this script, turned into PDF once, under glibc); the
           ppmraw device at 100 dpi, output discarded (mimalloc-bench: gs -dNODISPLAY on
           a large PDF it downloads)
  lua      lua5.4 benchmarks/peer_inputs/bench.lua (trees, strings, a peak of records
           dropped (marker), a cache churned; mimalloc-bench instead times `make` of Lua)
  z3       z3 on an SMT-LIB2 file made here: random 3-SAT near the threshold and
           bit-vector factoring (mimalloc-bench: a bit-vector maximization, test1.smt2)
  rocksdb  db_bench --benchmarks=fillrandom,readrandom (mimalloc-bench: fillrandom)
  cpython  CPython's regression tests, 12 modules (PYTHONMALLOC=malloc), the subset
           tests/test_allocator_suites.py runs under the allocator
The Debian programs are ghostscript, lua5.4, z3 and rocksdb-tools (scripts/system-deps.txt);
a missing one is skipped with a note.  Redis, which mimalloc-bench runs too, is measured
by benchmarks/allocator_rss.py.

Allocators (--allocators): glibc, jemalloc, mimalloc, tcmalloc-gperftools, tcmalloc
(Google's; only when built: `make tcmalloc-preload`, else skipped with a note) and LLAMA
(liblifetime_alloc.so, --predictor constant:0: no model): `llama` under lifetime run's
default policy, `llama-paper` under the paper's.

Each run takes every program in turn and, for each, every allocator, their order rotated
from run to run (round_order).  Per run: `nice lifetime run --allocator A -- CMD`; elapsed
and peak RSS are lifetime run's (wait4) from its stderr line; a thread samples VmRSS of
the program (the process tree under lifetime run's launcher) every 0.1 s.  Steady RSS: the mean of the samples after
the program's "STEADY" line when it prints one (mstress, rptest, lua: basis "marker"),
else over the last third of the run (basis "last third").  The huge-page share of the
dense regions (a read of the heap's pagemap every 0.5 s, which slows the program by a
quarter or more) comes from --dense-runs more runs per cell, which no other figure uses.
Each program's result line
(checksum, z3's answers, db_bench's found count) must agree across allocators; a
mismatch is flagged.  Writes OUT/results.json and OUT/results.md.

    nice .venv/bin/python benchmarks/peer_suite.py [--runs 3] [--dense-runs 1] [--out out/peer_suite]
        [--programs larson gs ...] [--allocators glibc llama ...] [--threads N] [--scale S]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pathlib
import random
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.servers.machine import dense_regions_kib, smaps_rollup_kib  # noqa: E402

LIFETIME = str(ROOT / ".venv" / "bin" / "lifetime")
STRESS = ROOT / "build" / "workloads" / "stress"
INPUTS = ROOT / "benchmarks" / "peer_inputs"
ALLOCATORS = ("glibc", "jemalloc", "mimalloc", "tcmalloc-gperftools", "tcmalloc", "llama", "llama-paper")
# LLAMA's configurations: `llama` is lifetime run's default policy; the others name one.
LLAMA_POLICY = {"llama": None, "llama-paper": "paper", "llama-segregated": "segregated",
                "llama-tolerant": "tolerant", "llama-baseline": "baseline"}
PROGRAMS = ("larson", "mstress", "rptest", "gs", "lua", "z3", "rocksdb", "cpython")
# CPython's regression tests that tests/test_allocator_suites.py runs under the allocator
# (PYTHONMALLOC=malloc: every object through it)
CPYTHON_MODULES = ("test_list", "test_dict", "test_set", "test_bytes", "test_tuple", "test_deque",
                   "test_heapq", "test_sort", "test_string", "test_json", "test_itertools",
                   "test_collections")
SAMPLE_S = 0.1
# The dense regions (a read of the whole heap's pagemap: ~25 ms a GiB, beside the program,
# which runs at nice 10) every 5th sample only: at every one the sampler had taken a
# quarter to a half of a CPU from the 2-CPU machine's runs of a large heap.  And only in
# runs of their own (--dense-runs), which no time, peak or steady RSS is taken from: even
# every 5th sample, rptest_sim took 1.70 -> 2.2 s under glibc and 1.61 -> 2.43 under LLAMA
# (4 runs each, the same nice 10 and lifetime run; the rest of the sampling cost 2-5%).
DENSE_EVERY = 5
LAUNCHER_COMM = "lifetime_run_me"  # allocator/tools' lifetime_run_measured, 15 chars

RUN_LINE = re.compile(r"lifetime run: (?P<alloc>\S+)(?: \((?P<detail>[^)]*)\))?: exit (?P<exit>-?\d+), "
                      r"peak RSS (?P<peak>[\d.]+) MiB, wall (?P<wall>[\d.]+) s")
MARKER = re.compile(r"\bSTEADY\b")


def parse_run_line(stderr: str) -> dict | None:
    """lifetime run's summary line (its last match on stderr) as numbers."""
    found = None
    for m in RUN_LINE.finditer(stderr):
        found = m
    if found is None:
        return None
    return {"allocator": found["alloc"], "detail": found["detail"], "exit": int(found["exit"]),
            "peak_rss_mib": float(found["peak"]), "elapsed_s": float(found["wall"])}


def steady_rss(samples: list[tuple[float, float]], end: float, marker: float | None) -> tuple[float | None, str]:
    """Mean RSS (MiB) of the samples (t, MiB) after the marker, else over the last third
    of [first sample, end]; the last sample when the window holds none."""
    if not samples:
        return None, "none"
    if marker is not None:
        win, basis = [r for t, r in samples if t >= marker], "marker"
    else:
        t0 = samples[0][0]
        cut = t0 + (end - t0) * 2 / 3
        win, basis = [r for t, r in samples if t >= cut], "last third"
    if not win:
        return samples[-1][1], basis + " (last sample)"
    return statistics.fmean(win), basis


def huge_pages(mem: list[tuple[float, float, float, float | None]], end: float, marker: float | None) -> dict:
    """Over steady_rss's window: huge pages as a share of the anonymous memory, and as a
    share of the dense 2 MiB regions (where they cost no RSS: issue 32's "huge pages
    where they do not cost RSS"; None when no region was dense)."""
    def mean(i, rows):
        win, basis = steady_rss([(m[0], m[i]) for m in rows], end, marker)
        return win, basis
    anon, _ = mean(1, mem)
    huge, _ = mean(2, mem)
    # The dense regions are read every DENSE_EVERY-th sample: their share is of the huge
    # pages in those same samples, and only of samples inside the window (a short window
    # may hold none: steady_rss's last-sample fallback had read one from the peak, 194 MiB
    # of dense regions in a 30 MiB steady lua).
    paired = [m for m in mem if m[3] is not None]
    dense, basis = mean(3, paired)
    huge_d, _ = mean(2, paired)
    if "last sample" in basis:
        dense = huge_d = None
    return {"steady_anon_mib": anon, "steady_huge_mib": huge, "steady_dense_mib": dense,
            "huge_share_of_anon": huge / anon if anon else None,
            "huge_share_of_dense": huge_d / dense if dense else None}


def result_key(program: str, stdout: str) -> str:
    """What must agree across allocators: the program's result, not its timings."""
    if program in ("larson", "mstress", "rptest", "lua"):
        m = re.findall(r"checksum=([0-9a-f]+)", stdout)
        key = m[-1] if m else ""
        if program != "lua":
            ops = re.findall(r"\bops=(\d+)", stdout)
            key += f" ops={ops[-1]}" if ops else ""
        return key
    if program == "rocksdb":
        return " ".join(re.findall(r"\(\d+ of \d+ found\)", stdout))
    if program == "cpython":
        return " ".join(re.findall(r"Result: \w+", stdout))
    return hashlib.sha1(stdout.encode()).hexdigest()[:12]


# --- inputs -------------------------------------------------------------------------

def make_postscript(path: pathlib.Path, pages: int = 200, seed: int = 1) -> None:
    r = random.Random(seed)
    lines = ["%!PS-Adobe-3.0", "/Helvetica findfont 10 scalefont setfont"]
    for page in range(pages):
        for i in range(400):
            pts = " ".join(f"{r.randint(0, 600)} {r.randint(0, 800)}" for _ in range(3))
            lines.append(f"{r.random():.3f} {r.random():.3f} {r.random():.3f} setrgbcolor newpath "
                         f"{r.randint(0, 600)} {r.randint(0, 800)} moveto {pts} curveto closepath "
                         + ("fill" if i % 2 else "stroke"))
            if i % 4 == 0:
                lines.append(f"{r.randint(0, 550)} {r.randint(0, 780)} moveto "
                             f"(page {page} item {i} {r.random():.6f}) show")
        lines.append("showpage")
    path.write_text("\n".join(lines) + "\n")


def _prime_below(n: int) -> int:
    def prime(k):
        return k > 1 and all(k % d for d in range(2, int(k ** 0.5) + 1))
    while not prime(n):
        n -= 1
    return n


def make_smt2(path: pathlib.Path, seed: int = 1) -> None:
    """Random 3-SAT near the threshold (4 instances of 240 variables) and bit-vector
    factoring of 5 semiprimes of 16-20-bit primes, each in its own push/pop scope."""
    r = random.Random(seed)
    out = []
    for q in range(4):
        n = 240
        out.append("(push 1)")
        out += [f"(declare-const b{q}_{i} Bool)" for i in range(n)]
        for _ in range(int(n * 4.26)):
            lits = [f"b{q}_{v}" if r.random() < 0.5 else f"(not b{q}_{v})" for v in r.sample(range(n), 3)]
            out.append(f"(assert (or {' '.join(lits)}))")
        out += ["(check-sat)", "(pop 1)"]
    for q in range(5):
        w = 16 + q
        p = _prime_below(r.randrange(1 << (w - 1), 1 << w))
        s = _prime_below(r.randrange(1 << (w - 1), 1 << w))
        out += ["(push 1)", f"(declare-const x{q} (_ BitVec {w}))", f"(declare-const y{q} (_ BitVec {w}))",
                f"(assert (= (bvmul ((_ zero_extend {w}) x{q}) ((_ zero_extend {w}) y{q})) (_ bv{p * s} {2 * w})))",
                f"(assert (bvugt x{q} (_ bv1 {w})))", f"(assert (bvugt y{q} (_ bv1 {w})))",
                f"(assert (bvule x{q} y{q}))", "(check-sat)", f"(get-value (x{q} y{q}))", "(pop 1)"]
    path.write_text("\n".join(out) + "\n")


def prepare_inputs(out: pathlib.Path, programs: list[str]) -> pathlib.Path:
    d = out / "inputs"
    d.mkdir(parents=True, exist_ok=True)
    if "gs" in programs and not (d / "doc.pdf").exists():
        make_postscript(d / "doc.ps")
        subprocess.run(["gs", "-q", "-dBATCH", "-dNOPAUSE", "-dSAFER", "-sDEVICE=pdfwrite",
                        f"-sOutputFile={d / 'doc.pdf'}", str(d / "doc.ps")], check=True)
    if "z3" in programs:
        make_smt2(d / "problem.smt2")
    return d


def commands(inputs: pathlib.Path, tmp: pathlib.Path, threads: int, scale: float) -> dict:
    stress = ["-t", str(threads), "-s", f"{scale:g}"]
    return {
        "larson": [str(STRESS / "larson_sim"), *stress],
        "mstress": [str(STRESS / "mstress_sim"), *stress],
        "rptest": [str(STRESS / "rptest_sim"), *stress],
        "gs": ["gs", "-q", "-dBATCH", "-dNOPAUSE", "-dSAFER", "-sDEVICE=ppmraw", "-r100",
               "-sOutputFile=/dev/null", str(inputs / "doc.pdf")],
        "lua": ["lua5.4", str(INPUTS / "bench.lua")],
        "z3": ["z3", str(inputs / "problem.smt2")],
        "rocksdb": ["db_bench", "--benchmarks=fillrandom,readrandom", "--num=1000000",
                    "--value_size=100", f"--db={tmp / 'rocksdb'}", "--threads=1",
                    "--compression_type=none", "--seed=1", "--use_existing_db=0",
                    "--cache_size=33554432"],
        "cpython": ["env", "PYTHONMALLOC=malloc", sys.executable, "-m", "test", *CPYTHON_MODULES],
    }


def missing_program(name: str, argv: list[str]) -> str | None:
    exe = argv[0] if argv[0] != "env" else argv[2]
    if os.sep in exe:
        return None if os.path.exists(exe) else f"{exe} not built (cmake --build build)"
    if shutil.which(exe) is None:
        pkg = {"gs": "ghostscript", "lua5.4": "lua5.4", "z3": "z3", "db_bench": "rocksdb-tools"}[exe]
        return f"{exe} not installed (Debian package {pkg}; scripts/install-system-deps.sh)"
    return None


def missing_allocator(name: str) -> str | None:
    from allocator import run as lrun
    from core.errors import LifetimeError
    try:
        lrun.library("llama" if name in LLAMA_POLICY else name)
    except LifetimeError as e:
        return str(e)
    return None


# --- one run --------------------------------------------------------------------------

def _children(pid: int) -> list[int]:
    kids = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                kids += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return kids


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def _rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def program_memory_kib(root: int, dense: bool = True) -> dict | None:
    """Summed over the processes under lifetime run's launcher, one walk of them: VmRSS,
    anonymous memory, what of it is in huge pages, and (DENSE; else None) the 2 MiB
    regions dense enough that a huge page there costs no RSS (servers/machine.py
    dense_regions_kib); None: not started (no launcher, or nothing under it yet)."""
    pids = _program_pids(root)
    if not pids:
        return None
    out = {"rss": 0, "anon": 0, "huge": 0, "dense": 0 if dense else None}
    for pid in pids:
        rollup = smaps_rollup_kib(pid, ("Anonymous", "AnonHugePages")) or {}
        out["rss"] += _rss_kib(pid)
        out["anon"] += rollup.get("Anonymous", 0)
        out["huge"] += rollup.get("AnonHugePages", 0)
        if dense:
            out["dense"] += dense_regions_kib(pid) or 0
    return out


def _program_pids(root: int) -> list[int] | None:
    """The processes under lifetime run's launcher (None: the launcher has not started)."""
    stack, launcher = [root], None
    while stack and launcher is None:
        pid = stack.pop()
        if _comm(pid) == LAUNCHER_COMM:
            launcher = pid
        stack += _children(pid)
    if launcher is None:
        return None
    pids, stack = [], _children(launcher)
    while stack:
        pid = stack.pop()
        pids.append(pid)
        stack += _children(pid)
    return pids


def run_once(program: str, allocator: str, argv: list[str], timeout: float,
             cwd: pathlib.Path, dense: bool = True) -> dict:
    """One run under lifetime run, sampled every SAMPLE_S; DENSE: the dense regions too
    (every DENSE_EVERY-th sample), which slows the program (DENSE_EVERY says by how much)."""
    cmd = ["nice", "-n", "10", LIFETIME, "run", "--allocator", allocator]
    if allocator in LLAMA_POLICY:
        cmd[-1] = "llama"
        if LLAMA_POLICY[allocator]:
            cmd += ["--policy", LLAMA_POLICY[allocator]]
        cmd += ["--predictor", "constant:0"]
    cmd += ["--", *argv]
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=cwd, env=env)
    samples: list[tuple[float, float]] = []
    mem: list[tuple[float, float, float, float | None]] = []  # (t, anonymous, huge, dense or None) MiB
    done = threading.Event()

    def sample():
        n = 0
        while not done.is_set():
            m = program_memory_kib(proc.pid, dense=dense and n % DENSE_EVERY == 0)
            if m is not None:
                n += 1
                t = time.monotonic() - start
                samples.append((t, m["rss"] / 1024))
                mem.append((t, m["anon"] / 1024, m["huge"] / 1024,
                            None if m["dense"] is None else m["dense"] / 1024))
            done.wait(SAMPLE_S)

    err_chunks: list[str] = []
    sampler = threading.Thread(target=sample, daemon=True)
    reader = threading.Thread(target=lambda: err_chunks.append(proc.stderr.read()), daemon=True)
    sampler.start()
    reader.start()
    marker, out_lines, timed_out = None, [], False
    killer = threading.Timer(timeout, lambda: proc.kill())
    killer.start()
    for line in proc.stdout:
        out_lines.append(line)
        if marker is None and MARKER.search(line):
            marker = time.monotonic() - start
    proc.wait()
    timed_out = not killer.is_alive() and proc.returncode != 0
    killer.cancel()
    end = time.monotonic() - start
    done.set()
    sampler.join()
    reader.join()
    stderr = "".join(err_chunks)
    stdout = "".join(out_lines)
    summary = parse_run_line(stderr)
    rec = {"program": program, "allocator": allocator, "command": cmd, "exit": proc.returncode,
           "error": None, "marker_s": marker, "end_s": round(end, 3), "dense_scan": dense,
           "samples": [[round(t, 2), round(r, 1)] for t, r in samples]}
    steady, basis = steady_rss(samples, end, marker)
    rec.update(huge_pages(mem, end, marker))
    rec["mem_samples"] = [[None if x is None else round(x, 2) for x in m] for m in mem]
    rec.update(steady_rss_mib=steady, steady_basis=basis,
               sampled_peak_mib=max((r for _, r in samples), default=None),
               result=result_key(program, stdout), stdout_tail=stdout[-400:])
    if summary:
        rec.update(elapsed_s=summary["elapsed_s"], peak_rss_mib=summary["peak_rss_mib"],
                   detail=summary["detail"])
    else:
        rec.update(elapsed_s=None, peak_rss_mib=None)
    if timed_out:
        rec["error"] = f"timed out after {timeout:.0f} s"
    elif proc.returncode != 0 or summary is None:
        rec["error"] = f"exit {proc.returncode}: " + (stderr.strip().splitlines() or ["?"])[-1][:300]
    return rec


def round_order(allocators: list[str], run: int, runs: int) -> list[str]:
    """The allocators' order in run RUN of RUNS: rotated by RUN x n / RUNS places, so each
    takes a different place in each run.  Why: on the 2-CPU VM this suite was measured on,
    a program's time drifts over a round of six allocators (z3: the last of the round took
    26.3-26.5 s in runs where the first took 20.8-22.4, and 21.1-22.4 s when run first
    itself), so a fixed order charged one allocator with the drift."""
    shift = run * len(allocators) // max(1, runs)
    return allocators[shift:] + allocators[:shift]


def run_matrix(programs: list[str], allocators: list[str], cmds: dict, runs: int, timeout: float,
               tmp: pathlib.Path, dense_runs: int = 1) -> list[dict]:
    """Every run x program x allocator (run_once, each in a fresh scratch directory TMP;
    the allocators in round_order), a progress line each on stderr; the records, each with
    its run index.  RUNS runs sample memory only; DENSE_RUNS more after them read the
    dense regions too (the huge-page share of them; aggregate says which figure is whose)."""
    records = []
    total = len(programs) * len(allocators) * (runs + dense_runs)
    i = 0
    for run in range(runs + dense_runs):
        for prog in programs:
            for alloc in round_order(allocators, run, runs + dense_runs):
                i += 1
                shutil.rmtree(tmp, ignore_errors=True)
                tmp.mkdir(parents=True)
                rec = run_once(prog, alloc, cmds[prog], timeout, tmp, dense=run >= runs)
                rec["run"] = run
                records.append(rec)
                shutil.rmtree(tmp, ignore_errors=True)
                if rec["error"]:
                    msg = f"FAILED: {rec['error']}"
                else:
                    st = rec["steady_rss_mib"]
                    msg = (f"{rec['elapsed_s']:.2f} s, peak {rec['peak_rss_mib']:.1f} MiB, steady "
                           f"{'-' if st is None else f'{st:.1f}'} MiB ({rec['steady_basis']}), {rec['result']}")
                kind = " (dense regions)" if rec["dense_scan"] else ""
                print(f"[{i}/{total}] {prog} {alloc} run {run}{kind}: {msg}", file=sys.stderr, flush=True)
    return records


# --- report ---------------------------------------------------------------------------

def aggregate(records: list[dict]) -> dict:
    """(program, allocator) -> elapsed median/worst, peak and steady RSS medians and the
    huge-page share of the anonymous memory, over the runs that did not read the dense
    regions; the huge-page share of the dense regions over those that did.  (Records
    without `dense_scan`, written before it: every figure over every run.)"""
    cells: dict = {}
    for r in records:
        cells.setdefault((r["program"], r["allocator"]), []).append(r)
    agg = {}
    for (prog, alloc), rs in cells.items():
        all_ok = [r for r in rs if not r["error"]]
        ok = [r for r in all_ok if not r.get("dense_scan")]
        scanned = [r for r in all_ok if r.get("dense_scan", True)]
        cell = {"runs": len(rs), "ok": len(all_ok), "errors": sorted({r["error"] for r in rs if r["error"]})}
        if ok:
            el = [r["elapsed_s"] for r in ok]
            cell.update(elapsed_median=statistics.median(el), elapsed_worst=max(el),
                        peak_rss_median=statistics.median(r["peak_rss_mib"] for r in ok),
                        steady_basis=ok[0]["steady_basis"])
            st = [r["steady_rss_mib"] for r in ok if r["steady_rss_mib"] is not None]
            cell["steady_rss_median"] = statistics.median(st) if st else None
        for key, among in (("huge_share_of_anon", ok), ("huge_share_of_dense", scanned)):
            vals = [r[key] for r in among if r.get(key) is not None]
            cell[key + "_median"] = statistics.median(vals) if vals else None
            cell[key + "_worst"] = min(vals) if vals else None
        if all_ok:
            cell["results"] = sorted({r["result"] for r in all_ok})
        agg[(prog, alloc)] = cell
    return agg


def paired_elapsed(records: list[dict]) -> dict:
    """(program, allocator) -> each run's elapsed over glibc's in the same run (the two ran
    within one round, seconds apart), for the runs where both finished.  Why: this VM's
    speed drifts by 10-30% over minutes, so the ratio of two medians taken over different
    minutes swung rptest 0.83-1.31x across sets while the pairs agreed far better."""
    by_run = {(r["program"], r["allocator"], r.get("run", 0)): r for r in records
              if not r["error"] and not r.get("dense_scan")}  # (those runs were slowed)
    out: dict = {}
    for prog, alloc, run in sorted(by_run):
        b = by_run.get((prog, "glibc", run))
        if alloc == "glibc" or b is None or not b["elapsed_s"]:
            continue
        out.setdefault((prog, alloc), []).append(by_run[(prog, alloc, run)]["elapsed_s"] / b["elapsed_s"])
    return out


def share(cell: dict, key: str) -> str:
    """A huge-page share cell: "median (worst)" in percent, – where none was measured."""
    med, worst = cell.get(key + "_median"), cell.get(key + "_worst")
    if med is None:
        return "–"
    return f"{100 * med:.0f}" + (f" ({100 * worst:.0f})" if worst is not None and worst < med else "")


def render(agg: dict, programs: list[str], allocators: list[str], notes: list[str], meta: dict,
           pairs: dict | None = None) -> str:
    L = ["# Peer suite (issue 32 item 7)", "",
         f"{meta['runs']} run(s) per cell; {meta['machine']}; stress programs -t {meta['threads']} "
         f"-s {meta['scale']:g}; LLAMA: constant:0 (llama: the default policy).  Elapsed: lifetime run's wall "
         "time (median, worst); peak RSS: wait4 (median); steady RSS: mean VmRSS sampled every "
         "0.1 s after the program's STEADY line (basis marker) or over the last third of the "
         "run (median over runs).  ×best: against the best of the non-LLAMA allocators on "
         "that program (1.00 = best).  Huge pages over the same window: their share of the "
         "anonymous memory, and of the 2 MiB regions dense enough (at most 8 of 512 small pages "
         "not resident) that a huge page there costs no RSS (median, worst run; – where no "
         f"region was dense), the latter from {meta.get('dense_runs', 0)} more run(s) per cell "
         "that read the dense regions (a read of the heap's pagemap, which slows the program: "
         "no other figure is taken from those runs).", ""]
    L += ["| program | allocator | elapsed s (med / worst) | ×best | peak RSS MiB | ×best | "
          "steady RSS MiB | ×best | huge / anon % | huge / dense regions % | steady basis | result |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    mism = []
    for prog in programs:
        peers = [agg[(prog, a)] for a in allocators if a not in LLAMA_POLICY and (prog, a) in agg
                 and agg[(prog, a)].get("ok")]

        def best(key):
            vals = [c[key] for c in peers if c.get(key) is not None]
            return min(vals) if vals else None
        b_el, b_pk, b_st = best("elapsed_median"), best("peak_rss_median"), best("steady_rss_median")
        results = set()
        for a in allocators:
            c = agg.get((prog, a))
            if c is None:
                continue
            if not c.get("ok"):
                L.append(f"| {prog} | {a} | failed: {'; '.join(c['errors'])[:120]} | | | | | | | | | |")
                continue
            results.update(c["results"])

            def ratio(v, b):
                return f"{v / b:.2f}" if v is not None and b else "–"
            st = c["steady_rss_median"]
            L.append(f"| {prog} | {a} | {c['elapsed_median']:.2f} / {c['elapsed_worst']:.2f} | "
                     f"{ratio(c['elapsed_median'], b_el)} | {c['peak_rss_median']:.1f} | "
                     f"{ratio(c['peak_rss_median'], b_pk)} | "
                     f"{'–' if st is None else f'{st:.1f}'} | {ratio(st, b_st)} | "
                     f"{share(c, 'huge_share_of_anon')} | {share(c, 'huge_share_of_dense')} | {c['steady_basis']} | "
                     f"{', '.join(c['results'])[:24]} |")
        if len(results) > 1:
            mism.append(f"{prog}: results differ across allocators: {sorted(results)}")
    L.append("")
    if pairs:
        L += ["Elapsed against glibc's in the same run (each run's ratio; median, worst, n):", "",
              "| program | allocator | elapsed ÷ glibc's (median / worst) | n |", "|---|---|---|---|"]
        for prog in programs:
            for a in allocators:
                rs = pairs.get((prog, a))
                if rs:
                    L.append(f"| {prog} | {a} | {statistics.median(rs):.2f} / {max(rs):.2f} | {len(rs)} |")
        L.append("")
    if mism:
        L += ["**Result mismatches:**", ""] + [f"* {m}" for m in mism] + [""]
    if notes:
        L += ["Notes:", ""] + [f"* {n}" for n in notes] + [""]
    return "\n".join(L)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "out" / "peer_suite"))
    ap.add_argument("--programs", nargs="+", default=list(PROGRAMS), choices=PROGRAMS)
    ap.add_argument("--allocators", nargs="+", default=list(ALLOCATORS),
                    choices=(*ALLOCATORS, *LLAMA_POLICY))
    ap.add_argument("--threads", type=int, default=max(2, os.cpu_count() or 2),
                    help="stress programs' threads (default: the CPUs, at least 2)")
    ap.add_argument("--scale", type=float, default=1.0, help="stress programs' work multiplier")
    ap.add_argument("--timeout", type=float, default=240, help="seconds per run")
    ap.add_argument("--dense-runs", type=int, default=1,
                    help="runs more per cell that read the dense regions, for their huge-page "
                         "share only (they slow the program; default 1)")
    args = ap.parse_args(argv)
    if args.dense_runs < 0:
        ap.error(f"--dense-runs {args.dense_runs}: must be 0 or more")
    out = pathlib.Path(args.out).resolve()  # the programs run in a scratch directory
    out.mkdir(parents=True, exist_ok=True)
    notes = []
    allocators = []
    for a in args.allocators:
        why = missing_allocator(a)
        if why:
            notes.append(f"allocator {a} skipped: {why}")
            print(f"peer_suite: skip allocator {a}: {why}", file=sys.stderr)
        else:
            allocators.append(a)
    tmp = out / "tmp"
    probe = commands(out / "inputs", tmp, args.threads, args.scale)
    programs = []
    for p in args.programs:
        why = missing_program(p, probe[p])
        if why:
            notes.append(f"program {p} skipped: {why}")
            print(f"peer_suite: skip program {p}: {why}", file=sys.stderr)
        else:
            programs.append(p)
    inputs = prepare_inputs(out, programs)
    cmds = commands(inputs, tmp, args.threads, args.scale)
    records = run_matrix(programs, allocators, cmds, args.runs, args.timeout, tmp, args.dense_runs)
    agg = aggregate(records)
    meta = {"runs": args.runs, "dense_runs": args.dense_runs, "threads": args.threads, "scale": args.scale,
            "machine": f"{os.cpu_count()} CPUs", "allocators": allocators, "programs": programs,
            "commands": {p: cmds[p] for p in programs}}
    (out / "results.json").write_text(json.dumps(
        {"meta": meta, "notes": notes, "records": records,
         "cells": [{"program": p, "allocator": a, **c} for (p, a), c in agg.items()]}, indent=1))
    md = render(agg, programs, allocators, notes, meta, paired_elapsed(records))
    (out / "results.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
