"""Redis 6.0.16's own test suite (`runtest`, the Debian source's tests/) with every
redis-server it starts on the LLAMA allocator (liblifetime_alloc.so, LD_PRELOAD through a
wrapper in the suite's src/), and the same run with glibc malloc, per unit: passed,
failed, errors, seconds; each llama server's stats file (allocs, checks) proves it ran on
the allocator.  scripts/fetch-redis-source.sh builds Redis and keeps the suite in
DEST/suite; nothing here downloads.

    nice .venv/bin/python benchmarks/allocator_redis_suite.py [--units unit/type/list ...]
        [--allocators glibc llama] [--clients 2] [--check 100000] [--policy paper]
        [--predictor constant:0] [--out out/allocator_redis_suite]

Without --units: the suite's whole default list (test_helper.tcl's all_tests: units and
integration tests, ~15-30 min per allocator on a 2-core box).  tests/test_allocator_suites.py
runs a subset (REDIS_UNITS) on every `make test`.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.servers import redis  # noqa: E402

# LIFETIME_TEST_ALLOC_BUILD: another build of allocator/ (as tests/test_allocator.py)
LIB = pathlib.Path(os.environ.get("LIFETIME_TEST_ALLOC_BUILD") or ROOT / "build" / "allocator") / "liblifetime_alloc.so"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def cached_suite() -> tuple[pathlib.Path, pathlib.Path] | None:
    """(suite dir, redis-server) of the cached 6.0.16 build, or None."""
    build = redis.cached("6.0.16")
    if build is None:
        return None
    suite = build.server.parent.parent / "suite"
    return (suite, build.server) if (suite / "runtest").is_file() else None


def prepare_suite(dest: pathlib.Path, server_wrapper: str | None = None) -> pathlib.Path:
    """A private copy of the cached suite under DEST (runtest writes under tests/tmp),
    src/ linking to the cached binaries; with server_wrapper, src/redis-server is that
    shell script.  Raises FileNotFoundError when the cache has no suite."""
    found = cached_suite()
    if found is None:
        raise FileNotFoundError("no cached Redis 6.0.16 build with its test suite: run "
                                "scripts/fetch-redis-source.sh (it keeps DEST/suite)")
    suite, _ = found
    out = dest / "suite"
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(suite, out, symlinks=True)
    for link in (out / "src").iterdir():
        target = (suite / "src" / link.name).resolve()
        link.unlink()
        link.symlink_to(target)
    if server_wrapper is not None:
        (out / "src" / "redis-server").unlink()
        (out / "src" / "redis-server").write_text(server_wrapper)
        (out / "src" / "redis-server").chmod(0o755)
    return out


def llama_wrapper(lib: pathlib.Path, stats_dir: pathlib.Path, check: int = 0, policy: str = "paper",
                  predictor: str = "constant:0") -> str:
    _, server = cached_suite()
    env = f"LD_PRELOAD={lib} LIFETIME_ALLOC_STATS={stats_dir}/s.%p.json LIFETIME_ALLOC_POLICY={policy} " \
          f"LIFETIME_ALLOC_PREDICTOR={predictor}"
    if check:
        env += f" LIFETIME_ALLOC_CHECK={check}"
    return ("#!/bin/sh\n# runtest starts src/redis-server: this one runs on the LLAMA allocator\n"
            f"{env} exec {server} \"$@\"\n")


def run_suite(suite: pathlib.Path, units=(), clients: int = 2, timeout: float | None = None,
              skip=(), env_extra=None) -> dict:
    """runtest [--single UNIT ...] [--skipunit UNIT ...] in SUITE (env_extra: added to its
    environment): exit status, output, per-unit seconds, the [ok]/[err]/[exception] lines."""
    args = ["./runtest", "--clients", str(clients)]
    for u in units:
        args += ["--single", u]
    for u in skip:
        args += ["--skipunit", u]
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    env.update(env_extra or {})
    t0 = time.monotonic()
    try:
        proc = subprocess.run(args, cwd=suite, env=env, capture_output=True, text=True, timeout=timeout)
        rc, out = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as e:
        rc, out = None, (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
    out = ANSI.sub("", out)
    return {
        "rc": rc,
        "wall_s": round(time.monotonic() - t0, 1),
        "passed_all": "All tests passed without errors" in out,
        "ok": len(re.findall(r"^\[ok\]: ", out, re.M)),
        "err": re.findall(r"^\[err\]: (.*)$", out, re.M),
        "exception": re.findall(r"^\[exception\]: (.*)$", out, re.M),
        "units_s": {m.group(2): int(m.group(1)) for m in re.finditer(r"^\s*(\d+) seconds - (\S+)$", out, re.M)},
        "tail": out[-3000:],
    }


def server_stats(stats_dir: pathlib.Path) -> dict:
    files = sorted(stats_dir.glob("s.*.json"))
    loaded = [json.loads(f.read_text()) for f in files]
    return {"servers": len(loaded), "allocs": sum(s["allocs"] for s in loaded),
            "checks": sum(s["checks"] for s in loaded),
            "failed_allocs": sum(s["failed_allocs"] for s in loaded),
            "reentry_allocs": sum(s.get("reentry", {}).get("allocs", 0) for s in loaded)}


# integration/logging runs `ldd src/redis-server`, which a shell wrapper is not: under
# llama the whole-suite run skips it and runs it alone with LD_PRELOAD in runtest's own
# environment (tclsh, redis-cli and the server all on the allocator).
WRAPPER_UNFIT = ("integration/logging",)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--units", nargs="*", default=[])
    ap.add_argument("--allocators", nargs="+", default=["glibc", "llama"], choices=["glibc", "llama"])
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--check", type=int, default=100000, help="LIFETIME_ALLOC_CHECK (0: off)")
    ap.add_argument("--policy", default="paper")
    ap.add_argument("--predictor", default="constant:0")
    ap.add_argument("--timeout", type=float, default=3600)
    ap.add_argument("--out", default=str(ROOT / "out" / "allocator_redis_suite"))
    args = ap.parse_args(argv)
    # Absolute: the wrapper names the stats directory to servers that runtest starts in its
    # own tests/tmp (a relative --out had them write nowhere: "servers 0" and no proof)
    out = pathlib.Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    for alloc in args.allocators:
        work = out / alloc
        stats_dir = work / "stats"
        if stats_dir.exists():
            shutil.rmtree(stats_dir)
        stats_dir.mkdir(parents=True)
        wrapper = None
        if alloc == "llama":
            if not LIB.is_file():
                print(f"{LIB} is not built: make native", file=sys.stderr)
                return 1
            wrapper = llama_wrapper(LIB, stats_dir, args.check, args.policy, args.predictor)
        suite = prepare_suite(work, wrapper)
        skip = [u for u in WRAPPER_UNFIT if alloc == "llama" and (not args.units or u in args.units)]
        units = [u for u in args.units if u not in skip]
        r = run_suite(suite, units, args.clients, args.timeout, skip=skip) if units or not args.units else \
            {"rc": 0, "ok": 0, "err": [], "exception": [], "units_s": {}, "wall_s": 0, "passed_all": True, "tail": ""}
        if alloc == "llama":
            r["server_stats"] = server_stats(stats_dir)
        for u in skip:  # alone, everything under LD_PRELOAD (the servers' stats files too)
            alone = run_suite(prepare_suite(work), [u], args.clients, args.timeout, env_extra={
                "LD_PRELOAD": str(LIB), "LIFETIME_ALLOC_STATS": f"{stats_dir}/alone.%p.json",
                "LIFETIME_ALLOC_POLICY": args.policy, "LIFETIME_ALLOC_PREDICTOR": args.predictor})
            r["ok"] += alone["ok"]
            r["err"] += alone["err"]
            r["exception"] += alone["exception"]
            r["units_s"].update(alone["units_s"])
            r["passed_all"] = r["passed_all"] and alone["passed_all"]
            r.setdefault("alone", {})[u] = {k: alone[k] for k in ("rc", "ok", "wall_s", "passed_all")}
        results[alloc] = r
        print(f"{alloc}: rc {r['rc']}, {r['ok']} ok, {len(r['err'])} err, {len(r['exception'])} exception, "
              f"{r['wall_s']} s" + (f", servers {r['server_stats']}" if alloc == "llama" else ""), flush=True)
        for e in r["err"] + r["exception"]:
            print(f"  {alloc}: {e}")
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    if len(results) == 2:
        g, l = results["glibc"], results["llama"]
        only_llama = sorted(set(l["err"] + l["exception"]) - set(g["err"] + g["exception"]))
        print(f"failing under llama only: {only_llama or 'none'}")
        return 1 if only_llama else 0
    return 0 if all(r["passed_all"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
