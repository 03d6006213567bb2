"""One definition of the label scheme (issue 31, item 2): core/lifetimes.py holds the
limit (MAX_BOUNDARIES) and the defaults; the native copies in heap/src/classes.h
(kMaxBoundaries, kDefaultBoundsNs), the trace module (simulator/trace.py), the help text
and the exported library's label section (export/codegen.py, read by
allocator/src/predictor.cc) are pinned to them here.  The engine's trace reader takes
MAX_BOUNDARIES boundaries and refuses one more, as the Python mirror does, and nothing
that writes a trace can write more."""

from __future__ import annotations

import argparse
import pathlib
import re
import struct
import subprocess

import pytest

import simulator
from core import label_options, lifetimes
from core.errors import UsageError
from core.lifetimes import LabelScheme
from export import codegen
from simulator import trace as tr

ROOT = pathlib.Path(__file__).resolve().parents[1]
CLASSES_H = ROOT / "heap" / "src" / "classes.h"
ALLOC_PREDICTOR = ROOT / "allocator" / "src" / "predictor.cc"


def _cxx_constant(text: str, name: str) -> str:
    m = re.search(rf"constexpr\s+[\w:]+\s+{name}(\[\])?\s*=\s*([^;]+);", text)
    assert m, f"{name} not found"
    return m.group(2)


def _cxx_ints(expr: str) -> list[int]:
    return [int(x) for x in re.findall(r"(\d+)(?:ull|u|ll)?", expr)]


def test_the_native_limit_and_defaults_are_core_lifetimes():
    text = CLASSES_H.read_text()
    assert _cxx_ints(_cxx_constant(text, "kMaxBoundaries")) == [lifetimes.MAX_BOUNDARIES]
    assert _cxx_ints(_cxx_constant(text, "kDefaultBoundsNs")) == \
        list(lifetimes.boundaries_ns(lifetimes.DEFAULT_BOUNDARIES["wall"]))
    # The engine's reader uses that constant (no other limit of its own).
    trace_cc = (ROOT / "simulator" / "src" / "trace.cc").read_text()
    assert "nb > uint32_t(kMaxBoundaries)" in trace_cc
    assert not re.search(r"constexpr\s+\w+\s+kMax\w*Boundaries", trace_cc)


def test_the_trace_module_and_help_derive_from_core():
    assert tr.MAX_BOUNDARIES == lifetimes.MAX_BOUNDARIES
    assert tr.DEFAULT_BOUNDARIES_NS == lifetimes.boundaries_ns(LabelScheme().boundaries)
    assert LabelScheme().boundaries == lifetimes.DEFAULT_BOUNDARIES["wall"]
    assert LabelScheme.default("bytes").boundaries == lifetimes.DEFAULT_BOUNDARIES["bytes"]
    p = argparse.ArgumentParser()
    label_options.add_boundaries(p)
    help_text = " ".join(p.format_help().split())
    assert f"at most {lifetimes.MAX_BOUNDARIES}" in help_text
    assert "10,...,1e6 ms" in help_text and "10000,...,1e9 bytes" in help_text
    for clock in ("wall", "bytes"):
        args = p.parse_args([])
        args.clock = clock
        assert label_options.label_scheme(args) == LabelScheme.default(clock)


def test_nothing_writes_more_boundaries_than_the_limit(tmp_path):
    many = [1 + i for i in range(lifetimes.MAX_BOUNDARIES + 1)]
    with pytest.raises(UsageError, match=f"1 to {lifetimes.MAX_BOUNDARIES} class boundaries"):
        LabelScheme(boundaries=many)
    with pytest.raises(ValueError, match=f"1 to {lifetimes.MAX_BOUNDARIES} class boundaries"):
        tr.TraceWriter(tmp_path / "w.lttrace", [x * tr.MS for x in many])
    with pytest.raises(ValueError):
        tr.encode_header(many, 0, 0)
    with pytest.raises(ValueError, match="increasing"):
        tr.encode_header([5, 5], 0, 0)
    assert tr.encode_header(many[:-1], 0, 0)[:8] == tr.MAGIC


def _trace_with(path: pathlib.Path, nb: int) -> pathlib.Path:
    """A one-record trace whose header carries nb boundaries (built by hand: the writer
    refuses more than MAX_BOUNDARIES)."""
    bounds = [(i + 1) * tr.MS for i in range(nb)]
    path.write_bytes(tr.FIXED.pack(tr.MAGIC, tr.VERSION, tr.FIXED.size + 8 * nb, tr.RECORD.size,
                                   nb, 1, 100, 0) + struct.pack(f"<{nb}Q", *bounds)
                     + tr.RECORD.pack(0, 10, 100, 0, 0, 16))
    return path


def test_the_engine_takes_the_limit_and_refuses_one_more(tmp_path, simulator_engine):
    """`lifetime_simulate --check`, and the Python mirror, with the same line."""
    n = lifetimes.MAX_BOUNDARIES
    ok = _trace_with(tmp_path / "max.lttrace", n)
    p = subprocess.run([str(simulator_engine), str(ok), "--check"], capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 0 and p.stdout == f"{ok}: 1 records, valid\n", p.stderr
    assert tr.check_trace(ok).boundaries_ns == tuple((i + 1) * tr.MS for i in range(n))
    assert tr.check_trace(ok).header_bytes == tr.FIXED.size + 8 * n
    bad = _trace_with(tmp_path / "over.lttrace", n + 1)
    p = subprocess.run([str(simulator_engine), str(bad), "--check"], capture_output=True,
                       text=True, timeout=30)
    line = f"{bad}: bad number of class boundaries {n + 1} (1..{n})"
    assert p.returncode == 2 and p.stderr == f"lifetime_simulate: error: {line}\n", p.stderr
    with pytest.raises(tr.TraceError) as e:
        tr.check_trace(bad)
    assert str(e.value) == line


def test_the_label_section_is_what_the_allocator_reads():
    """export/codegen.py's section (name, magic, layout) and allocator/src/predictor.cc's
    reader agree."""
    text = ALLOC_PREDICTOR.read_text()
    assert f'kLabelsSection[] = "{codegen.LABELS_SECTION}"' in text
    magic = int(_cxx_constant(text, "kLabelsMagic").split("ull")[0], 16)
    assert magic == codegen.LABELS_MAGIC
    words = codegen.labels_words(LabelScheme(boundaries=(5, 50, 500)))
    head = int(_cxx_constant(text, "kLabelsHead"))
    assert words[:head] == [codegen.LABELS_MAGIC, codegen.LABELS_VERSION, 5, 3, 0]
    assert words[head:] == [5 * tr.MS, 50 * tr.MS, 500 * tr.MS]
    assert codegen.labels_words(LabelScheme(clock="bytes", boundaries=(1e3,)))[2:] == [3, 1, 1]
    with pytest.raises(ValueError, match="8 class names but 5 classes"):
        codegen.data_source(["a"], ["c"] * 8, 4, 2, "id", "folded", "v", [],
                            labels=LabelScheme(boundaries=(1, 2, 3)))


def _fake_plugin(tmp_path: pathlib.Path, words: list[int]) -> pathlib.Path:
    """A shared library with only a label section (no model API)."""
    src = tmp_path / "fake.c"
    init = ", ".join(f"{w}ull" for w in words)
    src.write_text(f'__attribute__((used, section("{codegen.LABELS_SECTION}"))) '
                   f"static const unsigned long long words[] = {{{init}}};\n")
    lib = tmp_path / "fake.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    return lib


def _preloaded_line(plugin: pathlib.Path) -> str:
    from tests.test_allocator import preload_env

    proc = subprocess.run(["/bin/echo", "hi"], env=preload_env(model_plugin=plugin),
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == -6 and proc.stdout == "", proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_the_allocator_refuses_a_model_whose_classes_are_not_its_boundaries(tmp_path):
    words = codegen.labels_words(LabelScheme())
    words[2] += 1  # 9 classes, 6 boundaries
    plugin = _fake_plugin(tmp_path, words)
    assert _preloaded_line(plugin) == (
        f"lifetime_alloc: LIFETIME_MODEL_PLUGIN: {plugin}: the model has 9 lifetime classes "
        "but 6 class boundaries (classes = boundaries + 2)")


def test_the_allocator_reads_a_good_section_then_loads_the_model(tmp_path):
    """A valid section passes the heap's init; the model's load is what refuses this
    library (it has no model API)."""
    plugin = _fake_plugin(tmp_path, codegen.labels_words(LabelScheme(boundaries=(3, 30, 300))))
    assert _preloaded_line(plugin) == (
        f"lifetime_alloc: LIFETIME_MODEL_PLUGIN: {plugin}: lifetime_model_get_info not found")
