"""Attribution in a running allocator (issue 34 item 1; allocator/src/attribution.h,
simulator/fragmentation.py): `lifetime run --allocator llama --attribute DIR` writes dumps
at exit and on a signal (a fork child its own), each recorded object's stack on its huge
page; `lifetime fragmentation DUMP` attributes the held memory to contexts with the
simulator's definition.  The driver (allocator/tests/attribution_pin.c) keeps one 96-B
object in 32 and frees the rest, so `keeper` pins the pages at exit."""

from __future__ import annotations

import gzip
import json
import os
import pathlib
import shutil
import signal
import subprocess

import pytest

from interop.pprof import profile_pb2
from lifetime.cli import main
from tests.test_allocator import BUILD, built, preload_env

DRIVER = BUILD / "tests" / "alloc_attribution_pin"
MIB = 1 << 20


def dumps(d: pathlib.Path) -> dict:
    """trigger -> dump, for the dumps in d (one process's: the parent's)."""
    out = {}
    for f in sorted(d.glob("attribution.*.json")):
        doc = json.loads(f.read_text())
        out.setdefault(doc["pid"], {})[doc["trigger"]] = (f, doc)
    return out


def run_driver(tmp_path, *extra_env, signal_arg=True, **settings) -> dict:
    d = tmp_path / "dumps"
    env = preload_env(attribute=d, **settings)
    if signal_arg:
        env["LIFETIME_ALLOC_ATTRIBUTE_SIGNAL"] = str(int(signal.SIGUSR2))
    args = [str(built(DRIVER))] + ([str(int(signal.SIGUSR2))] if signal_arg else [])
    r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
    return dumps(d)


@pytest.mark.parametrize("settings", [{}, {"thread_cache": 0}, {"check": 997}],
                         ids=["default", "no-thread-cache", "checker"])
def test_dumps_record_every_live_object(tmp_path, settings):
    by_pid = run_driver(tmp_path, **settings)
    assert len(by_pid) == 2  # the parent (signal, exit) and the fork child (exit)
    parent = next(p for p, d in by_pid.items() if "signal" in d)
    assert set(by_pid[parent]) == {"signal", "exit"}
    for pid, docs in by_pid.items():
        for trigger, (path, doc) in docs.items():
            att, heap = doc["attribution"], doc["heap"]
            # Every live object the policy holds for the program is recorded, no more:
            # its usable bytes less what the thread caches hold (free to the program).
            assert att["live_bytes"] == heap["policy_usable_bytes"] - heap["thread_cache_bytes"], (path, trigger)
            assert doc["recording"]["stale_entries"] == 0
            assert sum(r[5] for r in att["rows"]) == att["live_bytes"]
            assert sum(r[4] for r in att["rows"]) == att["objects"]
    sig = by_pid[parent]["signal"][1]["attribution"]
    # At the signal: 200,000 temporaries, 6,250 keepers and 32 of 64 big objects live.
    assert sig["objects"] >= 200000 + 6250 + 32


def test_fragmentation_reads_a_dump(tmp_path, capsys):
    by_pid = run_driver(tmp_path)
    parent = next(d for d in by_pid.values() if "signal" in d)
    path, doc = parent["exit"]
    out = tmp_path / "frag"
    rc = main(["fragmentation", str(path), "--out", str(out)])
    text, err = capsys.readouterr()
    assert rc == 0, err
    res = json.loads((out / "fragmentation.json").read_text())
    view = res["views"][0]
    tot = view["totals"]
    # The one definition: sum of pinned + unattributed = heap - live, exactly.
    assert tot["check"]["pinned_plus_unattributed"] == pytest.approx(tot["heap"] - tot["live"], rel=1e-9)
    assert tot["heap"] == doc["attribution"]["huge_pages"] * 2 * MIB
    top = view["contexts"][0]
    assert top["name"].startswith("keeper < main"), top["name"]
    # keeper's 6,250 objects of 96 B on pages emptied of the 200,000 temporaries: they pin
    # nearly all of the heap less what is live.
    assert top["objects"] == 6250 and top["live_bytes"] == 6250 * 96
    assert top["pinned_bytes"] > 0.8 * (tot["heap"] - tot["live"])
    # In memory: less the free pages given back (subrelease), per huge page.
    given_back = sum(b for _, b in doc["attribution"]["subreleased"])
    assert tot["heap_resident"] == tot["heap"] - given_back
    assert all(0 <= c["pinned_resident_bytes"] <= c["pinned_bytes"] + 1e-6 for c in view["contexts"])
    assert tot["pinned_resident"] <= tot["heap_resident"] - tot["live"] + 1e-6
    assert "keeper < main" in text and "check: recorded live" in text
    p = profile_pb2.Profile()
    p.ParseFromString(gzip.decompress((out / "pinned.pb.gz").read_bytes()))
    assert [p.string_table[t.type] for t in p.sample_type] == ["pinned_space", "live_space", "live_objects"]
    assert sum(s.value[0] for s in p.sample) == pytest.approx(tot["pinned"], abs=len(p.sample))
    names = {p.string_table[f.name].split(".")[0] for f in p.function}  # (keeper.constprop.0)
    assert {"keeper", "big_keeper"} <= names  # (no temporary is live at exit)
    assert (out / "pinned.png").stat().st_size > 10000
    go = shutil.which("go")
    if go:
        top_out = subprocess.run([go, "tool", "pprof", "-top", str(out / "pinned.pb.gz")],
                                 capture_output=True, text=True, timeout=120)
        assert top_out.returncode == 0 and "keeper" in top_out.stdout, top_out.stderr


def test_lifetime_run_attribute(tmp_path, capfd):
    d = tmp_path / "dumps"
    rc = main(["run", "--allocator", "llama", "--attribute", str(d), "--attribute-signal", "USR2",
               "--", str(built(DRIVER)), str(int(signal.SIGUSR2))])
    _, err = capfd.readouterr()
    assert rc == 0, err
    assert "attribution: 2 dumps of pid" in err and "lifetime fragmentation" in err
    assert {doc["trigger"] for docs in dumps(d).values() for _, doc in docs.values()} == {"signal", "exit"}


def test_refusals_are_one_line(tmp_path, capfd):
    # A policy that keeps slots in the object table cannot attribute: at start-up.
    env = preload_env(attribute=tmp_path / "d", policy="paper")
    r = subprocess.run([str(built(DRIVER))], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert r.stderr.strip().splitlines()[0].startswith("lifetime_alloc: LIFETIME_ALLOC_ATTRIBUTE: ")
    env = preload_env(attribute_interval=2)
    r = subprocess.run([str(built(DRIVER))], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "without LIFETIME_ALLOC_ATTRIBUTE" in r.stderr
    env = preload_env(attribute=tmp_path / "d", attribute_signal=99)
    r = subprocess.run([str(built(DRIVER))], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert r.stderr.strip().splitlines()[0] == "lifetime_alloc: LIFETIME_ALLOC_ATTRIBUTE_SIGNAL: out of range: '99'"
    # `lifetime run`: the options belong to llama and need --attribute.
    for args in (["--allocator", "glibc", "--attribute", str(tmp_path)],
                 ["--allocator", "llama", "--attribute-every", "5"],
                 ["--allocator", "llama", "--attribute", str(tmp_path), "--attribute-signal", "KILL"],
                 ["--allocator", "llama", "--attribute", str(tmp_path), "--attribute-signal", "NOPE"]):
        assert main(["run", *args, "--", "true"]) != 0
        err = capfd.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--attribute" in err[0], err
    # `lifetime fragmentation`: a JSON that is not a dump; trace-only options on a dump.
    other = tmp_path / "other.json"
    other.write_text('{"format": "something-else"}\n')
    rc = main(["fragmentation", str(other), "--out", str(tmp_path / "o")])
    err = capfd.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1 and "not an allocator attribution dump" in err[0]
    by_pid = run_driver(tmp_path, signal_arg=False)
    path = next(iter(by_pid.values()))["exit"][0]
    # A truncated dump, one missing a field, one whose rows name a stack it lacks.
    good = json.loads(path.read_text())
    cut = tmp_path / "cut.json"
    cut.write_text(path.read_text()[:-40])
    no_heap = tmp_path / "no_heap.json"
    no_heap.write_text(json.dumps({k: v for k, v in good.items() if k != "heap"}))
    lost = tmp_path / "lost_stack.json"
    lost.write_text(json.dumps({**good, "stacks": []}))
    for bad, why in ((cut, "not valid JSON"), (no_heap, "malformed dump (no 'heap')"),
                     (lost, "has rows but is not among the dump's stacks"),
                     (tmp_path / "absent.json", "no such file")):
        rc = main(["fragmentation", str(bad), "--out", str(tmp_path / "o")])
        err = capfd.readouterr().err.strip().splitlines()
        assert rc == 1 and len(err) == 1 and str(bad) in err[0] and why in err[0], (bad, err)
    for opt in (["--at", "1"], ["--rerun", "2"], ["--predictor", "constant:1"], ["--policy", "paper"]):
        rc = main(["fragmentation", str(path), "--out", str(tmp_path / "o"), *opt])
        err = capfd.readouterr().err.strip().splitlines()
        assert rc == 1 and len(err) == 1 and opt[0] in err[0], (opt, err)


def test_fragmentation_reads_a_directory_of_one_process(tmp_path, capsys):
    by_pid = run_driver(tmp_path)
    d = tmp_path / "dumps"
    parent = next(p for p, docs in by_pid.items() if "signal" in docs)
    # Two processes' dumps (the fork child's too): --pid says which.
    rc = main(["fragmentation", str(d), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1 and "--pid" in err[0] and str(parent) in err[0], err
    out = tmp_path / "frag"
    rc = main(["fragmentation", str(d), "--pid", str(parent), "--at", "0", "--out", str(out)])
    text, err = capsys.readouterr()
    assert rc == 0, err
    res = json.loads((out / "fragmentation.json").read_text())
    steady, at0 = res["views"]
    assert steady["label"].startswith("steady state") and len(res["uptimes_ns"]) == 2
    for v in (steady, at0):
        t = v["totals"]
        assert t["check"]["pinned_plus_unattributed"] == pytest.approx(t["heap"] - t["live"], rel=1e-9)
    # --at 0: the dump nearest start-up, the one the signal asked for.
    sig = by_pid[parent]["signal"][1]
    assert at0["times_ns"] == [sig["uptime_ns"]]
    assert sum(c["objects"] for c in at0["contexts"]) == sig["attribution"]["objects"]
    assert (out / "pinned.pb.gz").exists() and (out / "pinned_at_0s.pb.gz").exists()
    assert "steady state" in text and "the dump nearest 0 s" in text
    # A --pid with no dump there: one line.
    rc = main(["fragmentation", str(d), "--pid", "1", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1 and "--pid 1: no dump of that process" in err[0], err
    # --at on one dump: one line.
    rc = main(["fragmentation", str(by_pid[parent]["exit"][0]), "--at", "1",
               "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1 and "--at" in err[0]
