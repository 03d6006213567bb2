"""heaptrack vs our sampler on the same program: do the imported data give the same
allocation contexts and the same per-context lifetime classes?

One program is run twice: under `heaptrack --raw` (imported with `lifetime import`) and
under `lifetime profile --full-trace` (every allocation, so neither side samples).  Our
profile's dataset is built first (`lifetime build-dataset`, wrappers detected); the
heaptrack one is cut like it (`--like`), so both use one context definition.  Then:

* contexts: found by both, by ours only, by heaptrack only (and their byte shares);
* agreement: the share of our sampler's allocated bytes whose context heaptrack also
  found *with the same lifetime class* (a context heaptrack missed counts against it);
  the same from heaptrack's bytes.

    python -m benchmarks.heaptrack_agreement proxy --seconds 4 --out out/ht-proxy
    python -m benchmarks.heaptrack_agreement redis --version 6.2.14 --seconds 20 \\
        --out out/ht-redis

Redis runs `benchmarks.servers.redis`'s load plan against the server, preloaded with
heaptrack's `libheaptrack_preload.so` (what `heaptrack --raw` does, writing the raw
stream to a file instead of a pipe) or with our sampler.  Redis 7.0+ is refused.
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

PROXY = os.path.join(REPO, "build", "workloads", "proxy_server", "proxy_server_v1")
PRELOAD = "/usr/lib/heaptrack/libheaptrack_preload.so"


# ---------------------------------------------------------------- recording

def record_heaptrack(cmd: list[str], out_prefix: str) -> str:
    """Runs CMD under `heaptrack --raw -o OUT_PREFIX`; returns the raw recording."""
    proc = subprocess.run(["heaptrack", "--raw", "-o", out_prefix, *cmd],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    found = sorted(glob.glob(out_prefix + ".raw.*"))
    if proc.returncode != 0 or not found:
        raise RuntimeError(f"heaptrack {cmd} failed ({proc.returncode}): {proc.stdout[-2000:]}")
    return found[0]


def record_ours(cmd: list[str], out_dir: str) -> str:
    """Runs CMD under `lifetime profile --full-trace`; returns its profile."""
    lifetime = os.path.join(REPO, ".venv", "bin", "lifetime")
    proc = subprocess.run([lifetime, "profile", "--full-trace", "--out", out_dir, "--", *cmd],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    found = sorted(glob.glob(os.path.join(out_dir, "*.ltprof")), key=os.path.getsize)
    if proc.returncode != 0 or not found:
        raise RuntimeError(f"lifetime profile {cmd} failed ({proc.returncode}): "
                           f"{proc.stdout[-2000:]}")
    return found[-1]


def import_heaptrack(raw: str, out_dir: str) -> str:
    from interop import importing
    done, failed = importing.import_files([raw], "heaptrack", out_dir)
    if failed:
        raise RuntimeError(failed[0][1])
    return done[0]["output"]


# ---------------------------------------------------------------- datasets

def build_dataset(profile: str, out_dir: str, like: str | None = None) -> None:
    from lifetime import cli
    args = ["build-dataset", "--profiles", profile, "--out", out_dir, "--eval-percent", "0"]
    if like:
        args += ["--like", like]
    if cli.main(args) != 0:
        raise RuntimeError(f"build-dataset {profile} failed")


def dataset_labels(dataset_dir: str) -> dict[tuple[str, ...], int]:
    """Context frames -> lifetime class, from the dataset's examples."""
    import tensorflow as tf
    labels = {}
    for path in sorted(glob.glob(os.path.join(dataset_dir, "*.tfrecord"))):
        for raw in tf.data.TFRecordDataset(path).as_numpy_iterator():
            f = tf.train.Example.FromString(raw).features.feature
            labels[tuple(x.decode() for x in f["frames"].bytes_list.value)] = \
                f["label"].int64_list.value[0]
    return labels


def context_bytes(profile: str, dataset_dir: str) -> dict[tuple[str, ...], int]:
    """Context frames -> bytes allocated there, with the dataset's context definition
    (the dataset job's own steps: machinery_free, then the definition's cut)."""
    from core import context
    from pipeline.manifest import dataset_context
    from profile_format import ProfileReader

    definition = dataset_context(dataset_dir)
    reader = ProfileReader(profile)
    per_stack: collections.Counter = collections.Counter()
    for s in reader.samples():
        per_stack[s.stack_id] += s.size * s.weight
    symbolizer = context.make_symbolizer(reader.mappings)
    out: collections.Counter = collections.Counter()
    for sid, nbytes in per_stack.items():
        stack = context.machinery_free(symbolizer, reader.stacks[sid].addresses)
        out[definition.frames(stack)] += nbytes
    return dict(out)


def compare(ours: tuple[str, str], theirs: tuple[str, str]) -> dict:
    """(profile, dataset) of our sampler and of the heaptrack import -> the figures."""
    lab_o, lab_h = dataset_labels(ours[1]), dataset_labels(theirs[1])
    bytes_o, bytes_h = context_bytes(ours[0], ours[1]), context_bytes(theirs[0], ours[1])
    both = set(lab_o) & set(lab_h)

    def agreement(weights: dict, mine: dict) -> dict:
        total = sum(weights.get(c, 0) for c in mine)
        same = sum(weights.get(c, 0) for c in both if lab_o[c] == lab_h[c])
        found = sum(weights.get(c, 0) for c in mine if c in both)
        return {"bytes": total, "share_in_shared_contexts": found / total if total else None,
                "agreement_by_bytes": same / total if total else None}

    disagreeing = sorted(
        ({"frames": list(c[:3]), "ours": lab_o[c], "heaptrack": lab_h[c],
          "bytes_ours": bytes_o.get(c, 0)} for c in both if lab_o[c] != lab_h[c]),
        key=lambda d: -d["bytes_ours"])
    return {
        "contexts": {"ours": len(lab_o), "heaptrack": len(lab_h), "both": len(both),
                     "ours_only": len(set(lab_o) - both),
                     "heaptrack_only": len(set(lab_h) - both)},
        "contexts_agreeing": sum(lab_o[c] == lab_h[c] for c in both),
        "ours": agreement(bytes_o, lab_o),
        "heaptrack": agreement(bytes_h, lab_h),
        "disagreeing": disagreeing[:10],
        "ours_only": sorted((list(c[:3]) for c in set(lab_o) - both))[:10],
        "heaptrack_only": sorted((list(c[:3]) for c in set(lab_h) - both))[:10],
    }


def run_pair(ours_profile: str, raw: str, out: str) -> dict:
    """Import, build both datasets, compare."""
    imported = import_heaptrack(raw, os.path.join(out, "imported"))
    ds_o, ds_h = os.path.join(out, "ds-ours"), os.path.join(out, "ds-heaptrack")
    build_dataset(ours_profile, ds_o)
    build_dataset(imported, ds_h, like=ds_o)
    result = compare((ours_profile, ds_o), (imported, ds_h))
    result["inputs"] = {"ours": ours_profile, "heaptrack_raw": raw, "imported": imported,
                        "raw_bytes": os.path.getsize(raw)}
    return result


# ---------------------------------------------------------------- programs

def proxy(out: str, seconds: float) -> dict:
    cmd = [PROXY, "--seconds", str(seconds)]
    raw = record_heaptrack(cmd, os.path.join(out, "heaptrack.proxy_server_v1"))
    ours = record_ours(cmd, os.path.join(out, "ours"))
    return run_pair(ours, raw, out)


def redis(out: str, version: str, seconds: float, seed: int = 1) -> dict:
    from benchmarks.servers import redis as rd
    from profiler import launch

    rd.check_version(version)  # refuses 7.0 and newer
    build, bench = rd.ensure(version), rd.benchmark_tool()
    plan = rd.load_plan(seed, seconds)
    os.makedirs(os.path.join(out, "ours"), exist_ok=True)
    raw = os.path.join(out, f"heaptrack.redis-server.{version}.raw")
    envs = {"heaptrack": {**os.environ, "LD_PRELOAD": PRELOAD, "DUMP_HEAPTRACK_OUTPUT": raw},
            "ours": launch.profiled_env(os.path.join(out, "ours"), None, f"redis-{version}",
                                        {"LIFETIME_SEED": str(seed)}, full_trace=True)}
    runs = {}
    for name, env in envs.items():
        workdir = tempfile.mkdtemp(prefix=f"lt-ht-redis-{name}-")
        t0 = time.monotonic()
        proc, port = rd.start_server(build.server, workdir, env)
        try:
            phases = [rd.run_phase(bench, port, phase, s) for phase, s in plan]
        finally:
            code = rd.stop_server(proc, port)
            shutil.rmtree(workdir, ignore_errors=True)
        runs[name] = {"exit_code": code, "wall_s": round(time.monotonic() - t0, 1),
                      "requests": sum(p["requests_completed"] for p in phases)}
    ours = sorted(glob.glob(os.path.join(out, "ours", "*.ltprof")), key=os.path.getsize)[-1]
    result = run_pair(ours, raw, out)
    result["runs"] = runs
    result["redis"] = {"version": version, "seconds": seconds, "seed": seed}
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("program", choices=["proxy", "redis"])
    ap.add_argument("--seconds", type=float, default=4)
    ap.add_argument("--version", default="6.2.14", help="Redis version (6.x; 7.0+ refused)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    t0 = time.monotonic()
    result = (proxy(args.out, args.seconds) if args.program == "proxy"
              else redis(args.out, args.version, args.seconds))
    result["wall_s"] = round(time.monotonic() - t0, 1)
    with open(os.path.join(args.out, "agreement.json"), "w") as f:
        json.dump(result, f, indent=2, sort_keys=True)
    print(json.dumps(result, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
