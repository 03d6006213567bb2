"""scripts/demo_summary.py (issue 31): `make demo` ends with what the proxy shows, derived
from the numbers: one line on the simulated heap (LLAMA + model and + oracle against the
baseline) and the real allocators' peak RSS and wall time side by side, read from
`lifetime run`'s summary lines into OUT/allocators.json."""

import importlib.util
import json
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("demo_summary", ROOT / "scripts" / "demo_summary.py")
demo = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(demo)

MIB = 2**20


def _row(predictor, llama_mib, base_mib=400.0, live_mib=350.0):
    return {"predictor": predictor, "llama_steady_state_bytes": llama_mib * MIB,
            "baseline_steady_state_bytes": base_mib * MIB,
            "live_steady_state_bytes": live_mib * MIB, "fragmentation_reduction": None,
            "accuracy_by_allocations": 1.0}


def _simulation(*rows, seconds=15.0):
    return {"trace": {"seconds": seconds}, "table3": list(rows)}


def test_parse_run_reads_the_summary_line_and_the_proxy_line():
    r = demo.parse_run(
        "lifetime run: llama (paper, model:/x/p.so): exit 0, peak RSS 487.0 MiB, wall 4.79 s; "
        "huge pages 95 live\n",
        "proxy_server_v2: 4.80 s, 9499 requests (3 dropped), 4442 cache entries, ...\n")
    assert (r["exit"], r["peak_rss_mib"], r["wall_s"]) == (0, 487.0, 4.79)
    assert (r["requests"], r["dropped"], r["program_seconds"]) == (9499, 3, 4.8)
    assert demo.parse_run("lifetime run: error: no such file\n", "") == {}


@pytest.mark.parametrize("model, oracle, words, verdict", [
    (480, 484, ("LLAMA + model 480.0 MiB, 20.0% above it", "LLAMA + oracle 484.0 MiB, 21.0% above it"),
     "not even perfect predictions make LLAMA win"),
    (420, 360, ("5.0% above it", "10.0% below it"), "perfect predictions would win; the model's do not"),
    (380, 360, ("5.0% below it", "10.0% below it"), "the model gets 50.0% of the oracle's saving"),
])
def test_the_simulation_line_follows_the_numbers(model, oracle, words, verdict):
    line = demo.simulation_line(_simulation(_row("oracle", oracle), _row("model", model)))
    assert line.startswith("the proxy shows: on its simulated heap (15 s full trace of v2, ")
    assert "baseline takes 400.0 MiB (live 350.0 MiB)" in line
    assert all(w in line for w in words), line
    assert verdict in line and "\n" not in line


def test_no_table3_no_simulation_line():
    assert demo.simulation_line({"table3": []}) is None


def _fake_lifetime(tmp_path, monkeypatch):
    """A `lifetime` beside a fake interpreter: `run` prints the summary line the real one
    prints (mimalloc fails as a missing library does), the proxy's line on stdout."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "lifetime"
    script.write_text(f"""#!{sys.executable}
import sys
args = sys.argv[1:]
name = args[args.index("--allocator") + 1]
if name == "mimalloc":
    sys.exit("lifetime run: error: --allocator mimalloc: libmimalloc.so.2 not found")
if "--stats" in args:
    open(args[args.index("--stats") + 1], "w").write(
        '{{"policy": "paper", "predictor": "constant:0", "peak_huge_pages": 7,'
        ' "prediction": {{"lookups": 10, "cache_hits": 9}}}}')
rss = {{"glibc": 200.0, "jemalloc": 250.0, "tcmalloc-gperftools": 190.0}}.get(name, 300.0)
print("proxy_server_v2: 4.80 s, 9498 requests (0 dropped), 1 cache entries")
print(f"lifetime run: {{name}}: exit 0, peak RSS {{rss}} MiB, wall 4.81 s", file=sys.stderr)
""")
    script.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(bindir / "python"))


def test_run_allocators_writes_the_json_the_summary_ends_with(tmp_path, monkeypatch, capsys):
    _fake_lifetime(tmp_path, monkeypatch)
    out = tmp_path / "demo"
    out.mkdir()
    assert demo.main(["--run-allocators", str(out), "--model", "EXPORT", "--",
                      "proxy_server_v2", "--seconds", "5"]) == 0
    said = capsys.readouterr().out
    assert "[glibc] lifetime run: glibc: exit 0, peak RSS 200.0 MiB" in said
    result = json.loads((out / demo.ALLOCATORS_JSON).read_text())
    runs = {r["allocator"]: r for r in result["runs"]}
    assert list(runs) == [name for name, _ in demo.RUNS]
    assert runs["glibc"]["peak_rss_mib"] == 200.0 and runs["glibc"]["requests"] == 9498
    assert "libmimalloc.so.2 not found" in runs["mimalloc"]["error"]
    assert runs["LLAMA + model"]["argv"][:5] == ["run", "--allocator", "llama", "--model", "EXPORT"]
    assert runs["LLAMA + model"]["llama"]["model_cache_hit_rate"] == 0.9

    (out / "simulate").mkdir()
    (out / "simulate" / "report.json").write_text(json.dumps(
        _simulation(_row("oracle", 484), _row("model", 480))))
    assert demo.main([str(out)]) == 1  # a failed run fails the demo, after the table
    last = capsys.readouterr().out.strip().splitlines()
    assert last[-10].startswith("the proxy shows: ")
    assert last[-9] == "real allocators, one run each of `proxy_server_v2 --seconds 5` under `lifetime run`:"
    assert last[-7].split() == ["glibc", "200.0", "MiB", "4.81", "s", "9498", "(0)"]
    assert last[-5].split()[:2] == ["mimalloc", "failed:"]
    assert last[-1].startswith("LLAMA + model peaks at 300.0 MiB RSS, +50.0% against glibc's "
                               "200.0 MiB (smallest: tcmalloc (gperftools), 190.0 MiB); "
                               "wall 4.81-4.81 s")
    assert last[-1].endswith("every allocator kept up (no request dropped)")


def test_the_summary_without_allocator_runs_still_succeeds(tmp_path, capsys):
    assert demo.main([str(tmp_path)]) == 0
    assert "outputs:" in capsys.readouterr().out
