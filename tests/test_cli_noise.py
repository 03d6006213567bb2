"""Third-party start-up noise stays out of the CLI's output unless --verbose (issue 24,
item 7): TensorFlow's C++ side logs a failed CUDA probe and graph-rewrite notices on a
machine without a GPU, and Beam warns about Google Cloud clients nobody here uses.
Issue 31: no library's INFO lines either (Beam's BigQuery-client notice and type-hint
conversions, matplotlib's categorical units: `make demo` printed dozens)."""

import logging
import os
import pathlib
import re
import subprocess
import sys
import textwrap

from lifetime import cli
from tests.model_support import build_tiny_dataset

NOISE = ("cuInit", "NodeDef mentions attribute", "apitools not found", "bigquery client",
         "bigquery_storage", "Using categorical units", "Converting string literal type hint")
ROOT = pathlib.Path(__file__).resolve().parents[1]


def _third_party_info(said: str) -> list[str]:
    """Lines in the CLI's log format from a logger that is not the project's."""
    return [line for line in said.splitlines()
            if (m := re.match(r"(DEBUG|INFO) ([\w.]+): ", line))
            and m[2].split(".")[0] not in cli.OWN_LOGGERS]


def _lifetime(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}  # conftest's
    return subprocess.run([sys.executable, "-m", "lifetime.cli", *args], capture_output=True,
                          text=True, timeout=600, env=env)


def test_a_beam_job_and_training_print_no_third_party_noise(tmp_path):
    dataset = build_tiny_dataset(tmp_path)  # its profiles: tmp_path/profiles
    out = tmp_path / "again"
    p = _lifetime("build-dataset", "--profiles", str(tmp_path / "profiles" / "*.ltprof"),
                  "--out", str(out), "--max-frames", "4")
    assert p.returncode == 0, p.stderr
    p2 = _lifetime("train", "--dataset", dataset, "--out", str(tmp_path / "model"),
                   "--epochs", "1", "--min-epochs", "1", "--lstm-units", "4",
                   "--embedding-dim", "4", "--batch-size", "8")
    assert p2.returncode == 0, p2.stderr
    for proc in (p, p2):
        said = proc.stdout + proc.stderr
        assert not [n for n in NOISE if n in said], said
        assert not _third_party_info(said), said


# The real sources, after main() has set up logging: importing Beam's BigQuery module logs
# its missing storage client at INFO, a bar chart of numeric strings matplotlib's
# categorical units; the project's own INFO lines stay.
_SOURCES = textwrap.dedent("""
    import logging, sys
    from lifetime import cli
    assert cli.main([*sys.argv[1:], "inspect", "/nonexistent.ltprof"]) == 1
    import apache_beam.io.gcp.bigquery
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    plt.bar(["10", "100"], [1, 2])
    logging.getLogger("pipeline.dataset").info("ours stays")
    logging.getLogger("apache_beam.io.fileio").warning("a library's warning stays")
""")


def _sources(*flags: str) -> str:
    p = subprocess.run([sys.executable, "-c", _SOURCES, *flags], capture_output=True,
                       text=True, timeout=120, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    return p.stdout + p.stderr


def test_library_info_lines_are_hidden_and_ours_and_warnings_stay():
    said = _sources()
    assert not [n for n in NOISE if n in said], said
    assert not _third_party_info(said), said
    assert "INFO pipeline.dataset: ours stays" in said
    assert "WARNING apache_beam.io.fileio: a library's warning stays" in said


def test_verbose_shows_library_info_lines():
    said = _sources("--verbose")
    assert "INFO apache_beam.io.gcp.bigquery: No module named google.cloud.bigquery_storage" in said
    assert "INFO matplotlib.category: Using categorical units" in said


def test_drop_noise_by_logger_and_level():
    def kept(name, level, msg):
        return cli._DropNoise().filter(logging.LogRecord(name, level, __file__, 1, msg, None, None))

    assert not kept("matplotlib.category", logging.INFO, "Using categorical units to plot ...")
    assert not kept("apache_beam.typehints.native_type_compatibility", logging.INFO, "Converting")
    assert not kept("tensorflow", logging.INFO, "Assets written to: /tmp/x")
    assert not kept("root", logging.WARNING, "apitools not found, and bigquery client ...")
    assert kept("apache_beam.runners.portability", logging.WARNING, "job failed")
    assert kept("export.runtime", logging.INFO, "$ cmake --build ...")
    assert kept("pipeline.dataset", logging.DEBUG, "detail")


def test_every_package_of_the_tree_logs_as_its_own():
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests", "fuzz"}
    assert packages <= set(cli.OWN_LOGGERS)


def test_verbose_is_a_global_option():
    p = _lifetime("--verbose", "inspect", "no-such-file.ltprof")
    assert p.returncode == 1 and "no-such-file.ltprof" in p.stderr.strip().splitlines()[-1]
