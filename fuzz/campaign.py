"""Fuzz campaigns: every target under libFuzzer, figures in one table.

    python -m fuzz.campaign --seconds 1800 --out out/fuzz          # the long campaign
    python -m fuzz.campaign --seconds 5 --targets records chunk    # a smoke run

Per target: inputs executed, seconds, crashes (an unexpected exception, a deadly
signal or an input over -rss_limit_mb), hangs (an input over -timeout seconds),
peak RSS as libFuzzer reports it, and the corpus it grew.  Writes OUT/fuzz.json
and OUT/fuzz.md; exits 1 if any target found anything."""

from __future__ import annotations

import argparse
import json
import pathlib
import re
import subprocess
import sys
import time

from fuzz import seeds, targets

_DONE = re.compile(r"Done (\d+) runs in (\d+) second")
_RSS = re.compile(r"rss: (\d+)Mb")


def run_target(name: str, corpus: pathlib.Path, artifacts: pathlib.Path, seconds: int,
               runs: int | None, timeout_s: int, rss_mb: int) -> dict:
    artifacts.mkdir(parents=True, exist_ok=True)
    flags = [f"-max_total_time={seconds}", f"-timeout={timeout_s}", f"-rss_limit_mb={rss_mb}",
             f"-artifact_prefix={artifacts}/", "-print_final_stats=1"]
    if runs:
        flags.append(f"-runs={runs}")
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "fuzz.run", name, str(corpus), *flags],
                          capture_output=True, text=True, errors="replace",
                          timeout=seconds + 10 * timeout_s + 120)
    log = proc.stderr + proc.stdout
    (artifacts / "log.txt").write_text(log)
    done = _DONE.search(log)
    found = sorted(p.name for p in artifacts.iterdir() if p.name != "log.txt")
    return {
        "target": name,
        "inputs": int(done.group(1)) if done else None,
        "seconds": round(time.monotonic() - start, 1),
        "exit_code": proc.returncode,
        "crashes": sum(not f.startswith("timeout-") for f in found),
        "hangs": sum(f.startswith("timeout-") for f in found),
        "artifacts": found,
        "peak_rss_mb": max((int(x) for x in _RSS.findall(log)), default=None),
        "corpus_files": sum(1 for _ in corpus.iterdir()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--targets", nargs="+", choices=sorted(targets.TARGETS),
                        default=list(targets.TARGETS))
    parser.add_argument("--seconds", type=int, default=1800, help="per target")
    parser.add_argument("--runs", type=int, default=None, help="stop after this many inputs")
    parser.add_argument("--timeout", type=int, default=10, help="seconds for one input (hang)")
    parser.add_argument("--rss-limit-mb", type=int, default=2048)
    parser.add_argument("--out", default="out/fuzz")
    parser.add_argument("--no-real-seed", action="store_true",
                        help="do not profile a real program for a seed")
    args = parser.parse_args(argv)
    out = pathlib.Path(args.out)
    results = []
    for name in args.targets:
        corpus = out / "corpus" / name
        n = seeds.write_seeds(corpus, real=not args.no_real_seed, target=name)
        print(f"fuzz {name}: {n} seeds, {args.seconds} s ...", flush=True)
        r = run_target(name, corpus, out / "artifacts" / name, args.seconds, args.runs,
                       args.timeout, args.rss_limit_mb)
        print(f"  {r['inputs']} inputs in {r['seconds']} s, {r['crashes']} crashes, "
              f"{r['hangs']} hangs, peak RSS {r['peak_rss_mb']} MB", flush=True)
        results.append(r)
    (out / "fuzz.json").write_text(json.dumps(results, indent=1) + "\n")
    rows = ["| target | inputs | seconds | crashes | hangs | peak RSS (MB) |",
            "|---|---:|---:|---:|---:|---:|"]
    rows += [f"| {r['target']} | {r['inputs']} | {r['seconds']} | {r['crashes']} | "
             f"{r['hangs']} | {r['peak_rss_mb']} |" for r in results]
    (out / "fuzz.md").write_text("\n".join(rows) + "\n")
    print("\n".join(rows))
    return 1 if any(r["crashes"] or r["hangs"] or r["exit_code"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
