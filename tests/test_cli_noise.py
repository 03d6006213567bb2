"""Third-party start-up noise stays out of the CLI's output unless --verbose (issue 24,
item 7): TensorFlow's C++ side logs a failed CUDA probe and graph-rewrite notices on a
machine without a GPU, and Beam warns about Google Cloud clients nobody here uses."""

import os
import subprocess
import sys

from tests.model_support import build_tiny_dataset

NOISE = ("cuInit", "NodeDef mentions attribute", "apitools not found", "bigquery client")


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


def test_verbose_is_a_global_option():
    p = _lifetime("--verbose", "inspect", "no-such-file.ltprof")
    assert p.returncode == 1 and "no-such-file.ltprof" in p.stderr.strip().splitlines()[-1]
