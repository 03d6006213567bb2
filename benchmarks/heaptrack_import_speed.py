"""heaptrack import speed (issue 23: >= 1 M lines/s): lines per second of
`interop.heaptrack.convert` (what `lifetime import --format heaptrack` runs per file)
on one raw recording, over several runs: median and spread, with the file's size and
line count and the sha256 of the .ltprof written (the same every run).

    # a real recording: Redis 6.2.14 under heaptrack's preload, the load plan of
    # benchmarks.servers.redis for 4 s (about 116 MB, 7.8 M lines)
    python -m benchmarks.heaptrack_import_speed --record-redis 4 --out out/ht-speed
    # or any raw recording (plain, .raw.zst or .raw.gz)
    python -m benchmarks.heaptrack_import_speed --recording heaptrack.x.1.raw --out out/ht-speed

`--profile` adds one cProfile run (not timed) and prints where the time goes.
`--baseline OLD.py` (a copy of an earlier interop/heaptrack.py) times that module too,
its runs interleaved with the current module's (a loaded machine slows both alike),
and says whether the two wrote the same bytes.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import importlib.util
import io
import json
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

PRELOAD = "/usr/lib/heaptrack/libheaptrack_preload.so"


def record_redis(seconds: float, out_dir: str, version: str = "6.2.14", seed: int = 1) -> str:
    """Redis under libheaptrack_preload (what `heaptrack --raw` does, writing the raw
    stream to a plain file) through the load plan; returns the recording."""
    from benchmarks.servers import redis as rd

    build, bench = rd.ensure(version), rd.benchmark_tool()
    raw = os.path.join(out_dir, f"heaptrack.redis-server.{seed}.raw")
    if os.path.exists(raw):
        os.unlink(raw)
    env = {**os.environ, "LD_PRELOAD": PRELOAD, "DUMP_HEAPTRACK_OUTPUT": raw}
    workdir = tempfile.mkdtemp(prefix="lt-ht-speed-")
    proc, port = rd.start_server(build.server, workdir, env)
    try:
        for phase, s in rd.load_plan(seed, seconds):
            rd.run_phase(bench, port, phase, s)
    finally:
        rd.stop_server(proc, port)
        shutil.rmtree(workdir, ignore_errors=True)
    return raw


def _load(path: str):
    """A module from a file (an earlier copy of interop/heaptrack.py)."""
    spec = importlib.util.spec_from_file_location("heaptrack_baseline", path)
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _stats(times: list[float], lines: int) -> dict:
    rates = sorted(lines / t for t in times)
    return {"seconds": [round(t, 3) for t in times],
            "lines_per_s_median": round(statistics.median(rates)),
            "lines_per_s_min": round(rates[0]), "lines_per_s_max": round(rates[-1]),
            "us_per_line_median": round(1e6 / statistics.median(rates), 3)}


def _digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def measure(recording: str, out_dir: str, runs: int, profile: bool,
            baseline: str | None = None) -> dict:
    from interop import heaptrack

    modules = {"current": heaptrack}
    if baseline:
        modules["baseline"] = _load(baseline)
    times = {name: [] for name in modules}
    digests = {name: set() for name in modules}
    lines = 0
    for _ in range(runs):
        for name, module in modules.items():  # interleaved
            out = os.path.join(out_dir, f"import-{name}.ltprof" if baseline else "import.ltprof")
            t0 = time.perf_counter()
            summary = module.convert(recording, out)
            times[name].append(time.perf_counter() - t0)
            lines = summary.lines
            digests[name].add(_digest(out))
            if name == "current":
                current = summary
    result = {
        "recording": recording, "bytes": os.path.getsize(recording), "lines": lines,
        "samples": current.samples, "output_bytes": os.path.getsize(
            os.path.join(out_dir, "import-current.ltprof" if baseline else "import.ltprof")),
        "output_sha256": sorted(digests["current"]), "runs": runs,
        **_stats(times["current"], lines),
    }
    if baseline:
        result["baseline"] = {"module": baseline, "output_sha256": sorted(digests["baseline"]),
                              "same_output": digests["baseline"] == digests["current"],
                              **_stats(times["baseline"], lines)}
        result["speedup_median"] = round(statistics.median(times["baseline"])
                                         / statistics.median(times["current"]), 2)
    if profile:  # outside the timed runs
        prof = cProfile.Profile()
        prof.runcall(heaptrack.convert, recording, os.path.join(out_dir, "import.ltprof"))
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(15)
        result["profile"] = text.getvalue()
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--recording", help="a raw heaptrack recording")
    src.add_argument("--record-redis", type=float, metavar="SECONDS",
                     help="record Redis under heaptrack for SECONDS of load first")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--profile", action="store_true", help="one cProfile run, not timed")
    ap.add_argument("--baseline", metavar="OLD.py",
                    help="also time this copy of an earlier interop/heaptrack.py, interleaved")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    recording = args.recording or record_redis(args.record_redis, args.out)
    result = measure(recording, args.out, args.runs, args.profile, args.baseline)
    profile = result.pop("profile", None)
    with open(os.path.join(args.out, "heaptrack_import_speed.json"), "w") as f:
        json.dump(result, f, indent=2, sort_keys=True)
    print(json.dumps(result, indent=2, sort_keys=True))
    if profile:
        print(profile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
