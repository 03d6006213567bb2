"""benchmarks/allocator_rss.py's "Simulator vs measured" section on hand-made inputs: the
rows from run records and simulated figures, reading simulate_redis.py's results file,
and the policy heap's steady state from the allocator's interval stats."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from benchmarks import allocator_rss as ar

MIB = 1 << 20


def llama_run(workload="mixed", seed=1, opts=("--policy", "segregated", "--model",
                                              "/x/out/redis21/mixed/load1/export-seed0"),
              config="llama-segregated-model", **stats):
    st = {"committed_bytes": 100 * MIB, "held_free_pages": 1, "direct_bytes": 2 * MIB,
          "peak_policy_objects": 1_000_000, **stats}
    return {"workload": workload, "config": config, "label": ar.LABELS[config],
            "allocator": "llama", "load_seed": seed, "status": "ok",
            "command": ["lifetime", "run", "--allocator", "llama", *opts, "--", "redis-server"],
            "llama_stats": st,
            "metrics": {"run_s": 66.0, "steady_rss_mib": 200.0, "steady_anon_mib": 190.0,
                        "steady_anon_huge_mib": 98.0}}


def tcmalloc_run(workload="mixed", seed=1):
    return {"workload": workload, "config": "tcmalloc", "label": ar.LABELS["tcmalloc"],
            "allocator": "tcmalloc", "load_seed": seed, "status": "ok",
            "metrics": {"run_s": 66.0, "steady_rss_mib": 110.0, "steady_anon_mib": 105.0,
                        "steady_anon_huge_mib": 102.0}}


SIM = {("mixed", "segregated", 1): {"file": "out/redis21/mixed/load1/results-segregated.json",
                                    "steady_bytes": 96 * MIB, "live_steady_bytes": 45 * MIB,
                                    "trace_s": 66.1}}


def test_rows_split_rss_minus_simulated():
    rows = ar.sim_vs_measured([tcmalloc_run(), llama_run()], SIM)
    assert len(rows) == 1  # only LLAMA runs
    r = rows[0]
    assert r["simulation"] == "ok" and r["policy"] == "segregated"
    assert r["sim_mib"] == 96 and r["sim_live_mib"] == 45 and r["heap_from"] == "at exit"
    assert r["heap_mib"] == 100 and r["held_mib"] == 2 and r["direct_mib"] == 2
    assert r["sim_to_rss"] == pytest.approx(0.48) and not r["within_15pct_of_rss"]
    assert r["sim_to_heap"] == pytest.approx(0.96) and r["within_15pct_of_heap"]
    assert r["program_mib"] == pytest.approx(8.0)  # TCMalloc's RSS - AnonHugePages
    assert r["metadata_mib"] is None and r["metadata_keys"] == []
    # 200 - 96 = 104 = 4 (heap beyond) + 2 (held) + 2 (direct) + 8 (program) + 88 (rest)
    assert r["gap_mib"] == 104 and r["heap_beyond_sim_mib"] == 4
    assert r["rest_mib"] == pytest.approx(88)
    assert r["rest_bytes_per_peak_object"] == pytest.approx(88 * MIB / 1e6)


def test_reported_metadata_and_steady_heap_are_used():
    run = llama_run(internal_arena_bytes=10 * MIB)
    run["metrics"].update(steady_llama_committed_mib=97.0, steady_llama_held_mib=0.0,
                          steady_llama_direct_mib=0.0, llama_stats_samples_in_window=33)
    r = ar.sim_vs_measured([run], SIM)[0]
    assert r["heap_from"] == "steady mean (33 samples)" and r["heap_mib"] == 97
    assert r["metadata_mib"] == 10 and r["metadata_keys"] == ["internal_arena_bytes"]
    assert r["program_mib"] is None  # no TCMalloc run: left in the rest
    assert r["rest_mib"] == pytest.approx(104 - 1 - 10)
    assert "internal_arena_bytes" in "\n".join(ar.sim_markdown([r]))


def test_no_counterpart_says_so():
    constant = llama_run(opts=("--policy", "paper", "--predictor", "constant:0"),
                         config="llama-paper-constant")
    other_model = llama_run(opts=("--policy", "segregated", "--model", "/x/export-seed1"))
    missing = llama_run(seed=2)
    absent = {("mixed", "segregated", 2): {"file": "f.json", "missing": "no simulation (no such file)"}}
    rows = ar.sim_vs_measured([constant, other_model, missing], {**SIM, **absent})
    assert [r["simulation"] for r in rows] == [
        "no simulation (constant predictor; the simulator ran the models)",
        "no simulation (model export-seed1, not export-seed0)",
        "no simulation (no such file)"]
    text = "\n".join(ar.sim_markdown(rows))
    assert text.count("no simulation") == 3 and "RSS − simulated" not in text


def test_read_simulated(tmp_path):
    res = {"policy": "segregated", "load_seed": 1, "test": ar.VERSION, "trace": {"seconds": 66.1},
           "per_seed": {"0": {"rows": {"model": {"llama_steady_state_bytes": 96.0 * MIB,
                                                 "llama_steady_resident_bytes": 80.0 * MIB,
                                                 "live_steady_state_bytes": 45.0 * MIB}}}}}
    f = tmp_path / "results-segregated.json"
    f.write_text(json.dumps(res))
    got = ar.read_simulated(f, "rel.json", "segregated", 1)
    assert got == {"file": "rel.json", "steady_bytes": 96.0 * MIB, "steady_resident_bytes": 80.0 * MIB,
                   "live_steady_bytes": 45.0 * MIB, "trace_s": 66.1}
    assert "policy 'segregated', not 'paper'" in ar.read_simulated(f, "r", "paper", 1)["missing"]
    assert "load seed 1, not 2" in ar.read_simulated(f, "r", "segregated", 2)["missing"]
    assert ar.read_simulated(tmp_path / "no.json", "r", "paper", 1)["missing"].startswith(
        "no simulation")
    del res["policy"]  # older paper results lack the key
    f.write_text(json.dumps(res))
    assert "missing" not in ar.read_simulated(f, "r", "paper", 1)


def test_metrics_steady_heap_from_interval_stats():
    samples = [{"t": t, "Rss": 1024, "Anonymous": 1024, "AnonHugePages": 0, "cpu_s": 0.0}
               for t in range(11)]
    stats = [{"t": 0.5, "committed_bytes": 10 * MIB, "held_free_pages": 0, "direct_bytes": 0},
             {"t": 7.0, "committed_bytes": 20 * MIB, "held_free_pages": 2, "direct_bytes": 0}]
    r = {"workload": "mixed", "status": "ok", "samples": samples, "llama_stats_samples": stats,
         "load": {"marks_s": {"warm": 0.0, "end": 10.0}, "commands_at_mark": {"warm": 0, "end": 100},
                  "pacing": {"late_share": 0.0, "max_lag_s": 0.0}}}
    m = ar.metrics(r)
    # window [5, 10]: 10 MiB for 2 s, 20 MiB for 3 s
    assert m["steady_llama_committed_mib"] == pytest.approx(16.0)
    assert m["steady_llama_held_mib"] == pytest.approx(2.4)
    assert m["llama_stats_samples_in_window"] == 1
    r["llama_stats_samples"] = stats[1:]  # nothing before the window: no steady heap
    assert "steady_llama_committed_mib" not in ar.metrics(r)


def test_llama_stats_path_from_environment():
    env = {**os.environ, "LIFETIME_ALLOC_STATS": "/tmp/lifetime-run-x/stats.%p.json"}
    # the environment is the child's once it has exec'd: wait for its first line
    proc = subprocess.Popen(["sh", "-c", "echo up; sleep 5"], env=env, stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == b"up\n"
        assert str(ar.llama_stats_path(proc.pid)) == f"/tmp/lifetime-run-x/stats.{proc.pid}.json"
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()


def test_resident_heaps_compared():
    """Subrelease gives pages of live huge pages back on both sides: the simulator's
    resident heap is checked against the allocator's committed less subreleased."""
    run = llama_run()
    run["metrics"].update(steady_llama_resident_mib=40.0)
    sim = {k: dict(v, steady_resident_bytes=36 * MIB) for k, v in SIM.items()}
    r = ar.sim_vs_measured([run], sim)[0]
    assert r["sim_resident_mib"] == 36 and r["heap_resident_mib"] == 40
    assert r["sim_to_heap_resident"] == pytest.approx(0.9) and r["within_15pct_of_heap_resident"]
    assert "| 36.0 | 40.0 | 0.90 | yes |" in "\n".join(ar.sim_markdown([r]))
    run["metrics"]["steady_llama_resident_mib"] = 50.0
    assert not ar.sim_vs_measured([run], sim)[0]["within_15pct_of_heap_resident"]


def test_steady_resident_from_interval_stats():
    """metrics(): the resident heap's time-weighted mean over the steady window, from the
    interval stats' committed_bytes - subreleased_bytes."""
    samples = [{"t": t, "Rss": 1024, "Anonymous": 1024, "AnonHugePages": 0, "cpu_s": 0.0}
               for t in range(0, 67)]
    st = [{"t": float(t), "committed_bytes": 100 * MIB, "subreleased_bytes": 30 * MIB,
           "held_free_pages": 0, "direct_bytes": 0} for t in range(0, 67)]
    r = {"status": "ok", "workload": "mixed", "samples": samples, "llama_stats_samples": st,
         "load": {"marks_s": {"end": 66.0}, "commands_at_mark": {"end": 1000},
                  "pacing": {"late_share": 0.0, "max_lag_s": 0.0}}}
    m = ar.metrics(r)
    assert m["steady_llama_resident_mib"] == pytest.approx(70.0)


def test_smaps_mappings_of_this_process():
    """The one /proc/PID/smaps reader both server benchmarks use (servers/machine.py):
    this process's mappings, its heap among them with the fields read; a gone pid: []."""
    from benchmarks.servers import machine

    rows = machine.smaps_mappings(os.getpid())
    assert rows and all(set(machine.SMAPS_FIELDS) <= set(r) for r in rows)
    assert any(r["name"] == "[heap]" and r["Rss"] > 0 for r in rows)
    assert sum(r["Rss"] for r in rows) >= max(r["Rss"] for r in rows) > 0
    top = ar.mapping_summary(os.getpid(), 3)  # (read again: figures may move between reads)
    assert len(top) == 3 and [r["Rss"] for r in top] == sorted((r["Rss"] for r in top), reverse=True)
    assert machine.smaps_mappings(2 ** 22 + 12345) == []


@pytest.mark.parametrize("bad", ["THREAD_CACHE=0", "LIFETIME_ALLOC_THREAD_CACHE", "PATH=/x"])
def test_llama_env_takes_only_allocator_variables(bad, capsys):
    """--llama-env NAME=VALUE sets an allocator variable for the LLAMA runs; anything else
    is refused in one line before any server starts."""
    with pytest.raises(SystemExit) as e:
        ar.main(["--llama-env", bad, "--out", "/nonexistent/never-made"])
    assert e.value.code == 2
    assert f"--llama-env {bad!r}: expected LIFETIME_ALLOC_NAME=VALUE" in capsys.readouterr().err


@pytest.mark.parametrize("bad", ["mixed", "python=out/x", "mixed="])
def test_export_takes_a_workload_and_a_directory(bad, capsys):
    """--export WORKLOAD=DIR picks the model a workload's llama-*-model runs serve; a
    malformed one is refused in one line before any server starts."""
    with pytest.raises(SystemExit) as e:
        ar.main(["--export", bad, "--out", "/nonexistent/never-made"])
    assert e.value.code == 2
    assert f"--export {bad!r}: expected WORKLOAD=DIR" in capsys.readouterr().err
