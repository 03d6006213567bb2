#!/usr/bin/env python3
"""Issue 32's one table: every workload x every allocator, from the result folders of the
allocator benchmarks (nothing is run here), so that no figure is read without the others.

    .venv/bin/python benchmarks/allocator_table.py --peer out/peer_suite_s21 \\
        --redis out/rss_s21 --postgres out/postgres_s21 --out out/allocator_table_s21.md

--peer: benchmarks/peer_suite.py's results.json (its eight programs); --redis:
benchmarks/allocator_rss.py's (Redis phases, mixed, fates); --postgres:
benchmarks/allocator_postgres.py's (PostgreSQL mixed; anonymous memory of all its
processes, since their RSS counts shared memory once per process).  Each row: steady
memory median (worst run or load seed), against the best of the five peers (glibc,
jemalloc, mimalloc, gperftools, Google TCMalloc) that ran; peak against Google TCMalloc's;
the huge-page share (of the dense regions where the benchmark measured them, else of the
anonymous memory); time against glibc's (the peer suite's elapsed; Redis phases' unpaced
grow burst; the paced workloads' CPU per command or statement).  Then, per LLAMA
configuration, the bars issue 32 sets and where each is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

PEERS = ("glibc", "jemalloc", "mimalloc", "tcmalloc-gperftools", "tcmalloc")
LLAMAS = ("llama-segregated-constant", "llama-segregated-model")
NAMES = {"glibc": "glibc", "jemalloc": "jemalloc", "mimalloc": "mimalloc",
         "tcmalloc-gperftools": "gperftools", "tcmalloc": "Google TCMalloc",
         "llama-segregated-constant": "LLAMA constant:0", "llama-segregated-model": "LLAMA + model"}
STEADY_BAR, PEAK_BAR, HUGE_BAR, TIME_BAR = 1.0, 1.1, 0.8, 0.9


def _read(folder: str) -> dict:
    path = os.path.join(folder, "results.json")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise SystemExit(f"allocator_table: {path}: {e}")


def _row(steady, worst, peak, huge, huge_of, time, time_kind, lower_time_is_better,
         paced=False) -> dict:
    # paced: the load's rate is the plan's, so its time is CPU per request, shown but not
    # judged (issue 32's throughput bar is on unpaced work)
    return {"steady": steady, "worst": worst, "peak": peak, "huge": huge, "huge_of": huge_of,
            "time": time, "time_kind": time_kind, "lower_time_is_better": lower_time_is_better,
            "paced": paced}


def peer_rows(res: dict) -> dict:
    """{program: {allocator: row}} from peer_suite.py's cells and records."""
    out: dict = {}
    for c in res["cells"]:
        if not c.get("ok"):
            continue
        alloc = "llama-segregated-constant" if c["allocator"] == "llama" else c["allocator"]
        runs = [r["steady_rss_mib"] for r in res["records"]
                if r["program"] == c["program"] and r["allocator"] == c["allocator"]
                and not r.get("dense_scan") and r.get("steady_rss_mib") is not None]
        huge = c.get("huge_share_of_dense_median")
        out.setdefault(c["program"], {})[alloc] = _row(
            c["steady_rss_median"], max(runs) if runs else None, c["peak_rss_median"],
            huge if huge is not None else c.get("huge_share_of_anon_median"),
            "dense" if huge is not None else "anon", c["elapsed_median"], "elapsed s", True)
    return out


def _agg(row: dict, key: str, how=statistics.median):
    v = row.get(key)
    return how(v["values"]) if v and v.get("values") else None


def redis_rows(res: dict) -> dict:
    out: dict = {}
    for wl, cfgs in res["aggregate"].items():
        for alloc, row in cfgs.items():
            if alloc not in PEERS + LLAMAS or not row.get("seeds"):
                continue
            unpaced = wl == "phases"
            huge = _agg(row, "huge_share_of_dense")
            out.setdefault(f"Redis {wl}", {})[alloc] = _row(
                _agg(row, "steady_rss_mib"), _agg(row, "steady_rss_mib", max),
                _agg(row, "peak_rss_mib"), huge if huge is not None else _agg(row, "huge_share_of_anon"),
                "dense" if huge is not None else "anon",
                _agg(row, "grow_commands_per_s" if unpaced else "cpu_us_per_command"),
                "grow burst cmd/s" if unpaced else "CPU µs/command", not unpaced,
                paced=not unpaced)
    return out


def postgres_rows(res: dict) -> dict:
    out: dict = {}
    for alloc, row in res["aggregate"].items():
        if alloc not in PEERS + LLAMAS or not row.get("seeds"):
            continue
        out.setdefault("PostgreSQL mixed (anon)", {})[alloc] = _row(
            _agg(row, "steady_anon_mib"), _agg(row, "steady_anon_mib", max),
            _agg(row, "peak_anon_mib"), _agg(row, "huge_share_of_anon"), "anon",
            _agg(row, "cpu_ms_per_statement"), "CPU ms/statement", True, paced=True)
    return out


def judge(rows: dict) -> dict:
    """Per LLAMA row: its ratios and which of issue 32's bars it misses."""
    peers = {a: r for a, r in rows.items() if a in PEERS and r["steady"] is not None}
    best = min(peers, key=lambda a: peers[a]["steady"]) if peers else None
    out = {}
    for a, r in rows.items():
        j: dict = {"best_peer": best}
        if best and r["steady"] is not None:
            j["steady_to_best"] = r["steady"] / peers[best]["steady"]
            if r["worst"] is not None:
                j["worst_to_best"] = r["worst"] / peers[best]["steady"]
        tc = rows.get("tcmalloc")
        if tc and tc["peak"] and r["peak"] is not None:
            j["peak_to_tcmalloc"] = r["peak"] / tc["peak"]
        gl = rows.get("glibc")
        if gl and gl["time"] and r["time"]:
            # throughput against glibc's: > 1 is faster, whichever way the figure runs
            j["throughput_to_glibc"] = (gl["time"] / r["time"] if r["lower_time_is_better"]
                                        else r["time"] / gl["time"])
        if a in LLAMAS:
            j["misses"] = [name for name, bad in (
                ("steady", j.get("steady_to_best", 0) > STEADY_BAR),
                ("steady (worst run)", j.get("worst_to_best", 0) > STEADY_BAR),
                ("peak", j.get("peak_to_tcmalloc", 0) > PEAK_BAR),
                # judged where a huge page costs no RSS: the dense regions (a share of
                # all anonymous memory counts sparse memory too)
                ("huge pages", r["huge_of"] == "dense" and r["huge"] is not None
                 and r["huge"] < HUGE_BAR),
                ("throughput", not r.get("paced") and j.get("throughput_to_glibc", 1) < TIME_BAR))
                if bad]
        out[a] = j
    return out


def _f(v, fmt="{:.1f}", none="–"):
    return none if v is None else fmt.format(v)


def markdown(table: dict, sources: dict) -> str:
    L = ["# Allocators: every workload, one table", "",
         "Sources: " + "; ".join(f"{k} `{v}`" for k, v in sources.items() if v) + ".", "",
         f"Bars (issue 32): steady ≤ {STEADY_BAR:g}× the best peer's median, LLAMA's median "
         f"and its worst run (or load seed) each; peak ≤ {PEAK_BAR:g}× Google TCMalloc's; huge "
         f"pages ≥ {HUGE_BAR:.0%} where they cost no RSS (of the dense regions: judged only "
         f"where those were measured; \"anon\" is of all anonymous memory); throughput ≥ "
         f"{TIME_BAR:g}× glibc's on unpaced work (on paced work, Redis mixed and fates and "
         f"PostgreSQL, the time is CPU per request: shown, not judged).", "",
         "| workload | allocator | steady MiB, median (worst) | ÷ best peer | peak MiB | "
         "÷ Google TCMalloc | huge pages % | time | throughput ÷ glibc |",
         "|---|---|---|---|---|---|---|---|---|"]
    misses = []
    for wl, rows in table.items():
        judged = judge(rows)
        for a in PEERS + LLAMAS:
            if a not in rows:
                continue
            r, j = rows[a], judged[a]
            best = " (best)" if j.get("best_peer") == a else ""
            L.append(f"| {wl} | {NAMES[a]}{best} | {_f(r['steady'])} ({_f(r['worst'])}) | "
                     f"{_f(j.get('steady_to_best'), '{:.2f}')} | {_f(r['peak'])} | "
                     f"{_f(j.get('peak_to_tcmalloc'), '{:.2f}')} | "
                     f"{_f(None if r['huge'] is None else 100 * r['huge'], '{:.0f}')} "
                     f"({r['huge_of']}) | {_f(r['time'], '{:.3g}')} {r['time_kind']} | "
                     f"{_f(j.get('throughput_to_glibc'), '{:.2f}')} |")
            if j.get("misses"):
                misses.append(f"- {wl}, {NAMES[a]}: {', '.join(j['misses'])}")
    L += ["", "## Bars missed", ""] + (misses or ["- none"])
    return "\n".join(L) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peer", help="benchmarks/peer_suite.py's output folder")
    ap.add_argument("--redis", help="benchmarks/allocator_rss.py's output folder")
    ap.add_argument("--postgres", help="benchmarks/allocator_postgres.py's output folder")
    ap.add_argument("--out", help="write the Markdown here too (and .json beside it)")
    args = ap.parse_args(argv)
    if not (args.peer or args.redis or args.postgres):
        ap.error("give at least one of --peer, --redis, --postgres")
    table: dict = {}
    for folder, rows, script in ((args.redis, redis_rows, "allocator_rss.py"),
                                 (args.postgres, postgres_rows, "allocator_postgres.py"),
                                 (args.peer, peer_rows, "peer_suite.py")):
        if folder:
            try:
                table.update(rows(_read(folder)))
            except (KeyError, TypeError, AttributeError) as e:
                raise SystemExit(f"allocator_table: {os.path.join(folder, 'results.json')}: "
                                 f"not benchmarks/{script}'s results (no {e})")
    text = markdown(table, {"peer suite": args.peer, "Redis": args.redis,
                            "PostgreSQL": args.postgres})
    print(text, end="")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text)
        with open(os.path.splitext(args.out)[0] + ".json", "w", encoding="utf-8") as f:
            json.dump({w: {"rows": r, "judged": judge(r)} for w, r in table.items()}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
