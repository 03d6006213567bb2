#!/usr/bin/env python3
"""Prints where `make demo` put its outputs, with the headline figures."""

import json
import pathlib
import sys

out = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "out/demo")


def pct(x):
    return "n/a" if x is None else f"{100 * x:.1f}%"


def load(path):
    p = out / path
    return json.loads(p.read_text()) if p.exists() else None


report = load("report/report.json")
online = load("online.json")
manifest = load("export/export_manifest.json")
print("outputs:")
for name, path in [("profiles", "profiles"), ("datasets", "datasets"), ("model", "model"),
                   ("report (v1 -> v2)", "report/report.md"),
                   ("characterization", "characterize"), ("exported library", "export"),
                   ("online evaluation", "online.json"),
                   ("simulation", "simulate/report.md")]:
    print(f"  {name:20s} {out / path}")
if report:
    s = report["summary"]
    share = s.get("unseen_share", {})
    print(f"offline, trained on v1, tested on v2 ({pct(share.get('contexts'))} of v2's "
          f"contexts, {pct(share.get('samples'))} of its samples, unseen in v1):")
    for scope in ("unseen", "overall"):
        for name in ("model", "baseline_exact", "baseline_site", "baseline_majority"):
            m = s.get(f"{scope}/{name}")
            if m:
                print(f"  {scope:8s} {name:18s} weighted exact {pct(m['weighted_exact'])}, "
                      f"off-by-one {pct(m['weighted_off_by_one'])}, under-prediction "
                      f"{pct(m['weighted_under_prediction'])}; unweighted exact "
                      f"{pct(m['unweighted_exact'])}")
if online:
    h = online["headline"]
    print(f"online (v2, model inside the sampler): weighted exact {pct(h['weighted_exact'])}, "
          f"off-by-one {pct(h['weighted_off_by_one'])}, cache hit rate "
          f"{pct(online['cache']['hit_rate'])}, added cost p50 "
          f"{online['cost_ns_per_sampled_allocation']['p50'] / 1e3:.2f} us per sampled allocation")
simulation = load("simulate/report.json")
if simulation:
    mib = lambda b: f"{b / 2**20:.1f} MiB"  # noqa: E731
    print("simulated heap (v2 full trace; steady-state huge-page memory, Table 3 row):")
    for row in simulation["table3"]:
        print(f"  LLAMA + {row['predictor']:19s} {mib(row['llama_steady_state_bytes'])} vs "
              f"baseline {mib(row['baseline_steady_state_bytes'])}, live "
              f"{mib(row['live_steady_state_bytes'])}: fragmentation reduction "
              f"{pct(row['fragmentation_reduction'])}, accuracy {pct(row['accuracy_by_allocations'])}")
if manifest:
    print(f"exported library: {manifest.get('library', out / 'export/lib')}")
