"""Idle places on or off (LIFETIME_ALLOC_IDLE_PLACES), on the selection set: the default
policy (`llama-segregated`, constant:0) on benchmarks/policy_selection.py's workloads
(clang, sqlite, churn: programs no reported figure runs), --runs each way, measured as
peer_suite.py measures (steady RSS, huge pages of the dense regions, elapsed).  Writes
OUT/results.json (the records, by setting) and OUT/results.md (medians).

    nice .venv/bin/python benchmarks/idle_places_selection.py [--runs 3] [--out out/idle_places_selection]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import peer_suite, policy_selection  # noqa: E402

ENV = "LIFETIME_ALLOC_IDLE_PLACES"


def render(res: dict) -> str:
    """Per workload and setting: peer_suite.aggregate's medians of the runs that finished."""
    lines = ["# Idle places on the selection set", "",
             f"`{ENV}` = 1 (the default) and 0; the default policy, constant:0; medians "
             "(huge pages: median (worst) where they differ).", "",
             "| workload | idle places | runs | steady RSS MiB | huge / dense regions % | elapsed s |",
             "|---|---|---|---|---|---|"]
    for on in ("1", "0"):
        for (w, _), c in peer_suite.aggregate(res[on]).items():
            st, el = c.get("steady_rss_median"), c.get("elapsed_median")
            lines.append(f"| {w} | {'on' if on == '1' else 'off'} | {c['ok']} | {'–' if st is None else f'{st:.1f}'} | "
                         f"{peer_suite.share(c, 'huge_share_of_dense')} | {'–' if el is None else f'{el:.2f}'} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "out" / "idle_places_selection"))
    ap.add_argument("--timeout", type=float, default=300)
    args = ap.parse_args(argv)
    out = pathlib.Path(args.out).resolve()
    tmp = out / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    cmds = policy_selection.commands(out / "inputs", tmp)
    res = {}
    before = os.environ.get(ENV)
    try:
        for on in ("1", "0"):
            os.environ[ENV] = on
            res[on] = peer_suite.run_matrix(list(policy_selection.WORKLOADS), ["llama-segregated"], cmds,
                                            args.runs, args.timeout, tmp)
    finally:
        if before is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = before
    (out / "results.json").write_text(json.dumps(res, indent=1))
    md = render(res)
    (out / "results.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
