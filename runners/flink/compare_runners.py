#!/usr/bin/env python3
"""`lifetime build-dataset` on DirectRunner and on the Flink session cluster of
runners/flink/cluster.sh, byte for byte, with timings.

    nice .venv/bin/python runners/flink/compare_runners.py            # the demo's v1 profiles
    nice .venv/bin/python runners/flink/compare_runners.py --profiles 'DIR/*.ltprof' --version-label v2

Uses a running cluster (cluster.sh status) or starts one and stops it after.  Checks:
every file of the DirectRunner output directory (shards, vocab.txt, manifest.json,
dead_letters.jsonl) is in the Flink one with the same bytes and nothing else is; the
cluster's REST API lists the job as FINISHED, with subtasks on every TaskManager (so it
ran on the session cluster, not an embedded [local] one).  Writes SUMMARY.json in --out
and exits non-zero when a check fails.  `--environment loopback` shows why the SDK
workers use PROCESS here (README.md beside this file).
"""

from __future__ import annotations

import argparse
import collections
import filecmp
import json
import pathlib
import shutil
import subprocess
import sys
import time
import urllib.request

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def rest(master: str, path: str):
    with urllib.request.urlopen(f"http://{master}{path}", timeout=10) as r:
        return json.load(r)


def timed(cmd: list[str], log: pathlib.Path) -> tuple[int, float]:
    start = time.monotonic()
    with open(log, "w") as f:
        rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT).returncode
    return rc, time.monotonic() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profiles", default=str(ROOT / "out/demo/profiles/v1/*.ltprof"),
                        help="profiles (a quoted glob; default: the demo's v1 runs)")
    parser.add_argument("--version-label", default="v1")
    parser.add_argument("--out", default=str(ROOT / "build/flink/compare"),
                        help="direct/ and flink/ outputs, logs, SUMMARY.json")
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--environment", choices=["process", "loopback"], default="process")
    args = parser.parse_args()

    out = pathlib.Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    lifetime = str(ROOT / ".venv/bin/lifetime")
    cluster = str(HERE / "cluster.sh")
    jar = subprocess.run([str(HERE / "job-server.sh")], capture_output=True, text=True,
                         check=True).stdout.strip()
    summary: dict = {"profiles": args.profiles, "parallelism": args.parallelism,
                     "environment": args.environment}

    status = subprocess.run([cluster, "master"], capture_output=True, text=True)
    started_here = status.returncode != 0
    if started_here:
        t = time.monotonic()
        start = subprocess.run([cluster, "start"], capture_output=True, text=True)
        if start.returncode != 0:
            print(start.stderr, file=sys.stderr)
            return 1
        summary["cluster_start_s"] = round(time.monotonic() - t, 1)
        master = start.stdout.strip()
    else:
        master = status.stdout.strip()
    summary["master"] = master
    try:
        job = ["build-dataset", "--profiles", args.profiles,
               "--version-label", args.version_label]
        rc, direct_s = timed([lifetime, *job, "--out", str(out / "direct")],
                                        out / "direct.log")
        summary["direct_s"] = round(direct_s, 1)
        if rc != 0:
            print(f"DirectRunner run failed (rc {rc}): {out / 'direct.log'}", file=sys.stderr)
            return 1
        before = {j["jid"] for j in rest(master, "/jobs/overview")["jobs"]}
        env = (["--environment_type=LOOPBACK"] if args.environment == "loopback" else
               ["--environment_type=PROCESS",
                "--environment_config=" + json.dumps({"command": str(HERE / "sdk-worker")})])
        flink = ["--runner=FlinkRunner", f"--flink_master={master}", "--flink_version=1.19",
                 f"--flink_job_server_jar={jar}", f"--parallelism={args.parallelism}", *env]
        summary["flink_command"] = " ".join([lifetime, *job, "--out", str(out / "flink"),
                                             *flink])
        rc, flink_s = timed([lifetime, *job, "--out", str(out / "flink"), *flink],
                                       out / "flink.log")
        summary["flink_s"], summary["flink_rc"] = round(flink_s, 1), rc

        jobs = [j for j in rest(master, "/jobs/overview")["jobs"] if j["jid"] not in before]
        summary["cluster_jobs"] = [{k: j[k] for k in ("jid", "name", "state", "duration")}
                                   for j in jobs]
        subtasks: collections.Counter = collections.Counter()
        for j in jobs:
            for vertex in rest(master, f"/jobs/{j['jid']}")["vertices"]:
                vpath = f"/jobs/{j['jid']}/vertices/{vertex['id']}/taskmanagers"
                for tm in rest(master, vpath)["taskmanagers"]:
                    subtasks[tm["taskmanager-id"]] += sum(tm["status-counts"].values())
        summary["subtasks_per_taskmanager"] = dict(sorted(subtasks.items()))
        all_tms = sorted(tm["id"] for tm in rest(master, "/taskmanagers")["taskmanagers"])

        names = sorted(p.name for p in (out / "direct").iterdir())
        flink_names = (sorted(p.name for p in (out / "flink").iterdir())
                       if (out / "flink").is_dir() else [])
        match, mismatch, errors = filecmp.cmpfiles(out / "direct", out / "flink", names,
                                                   shallow=False)
        summary["files"] = {"identical": match, "different": mismatch, "missing": errors,
                            "extra": sorted(set(flink_names) - set(names))}
        checks = {
            "flink job succeeded": rc == 0,
            "outputs byte-identical": not mismatch and not errors and flink_names == names,
            "one job on the session cluster, FINISHED":
                [j["state"] for j in jobs] == ["FINISHED"],
            f"subtasks on every TaskManager ({len(all_tms)})": sorted(subtasks) == all_tms,
        }
        summary["checks"] = checks
    finally:
        if started_here:
            subprocess.run([cluster, "stop"], check=True)
    (out / "SUMMARY.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    for name, ok in checks.items():
        print(f"{'ok  ' if ok else 'FAIL'} {name}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
