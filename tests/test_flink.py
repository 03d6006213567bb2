"""The dataset job on a real Apache Flink (embedded [local] cluster) writes the same
dataset as on DirectRunner, byte for byte."""

import pathlib
import shutil
import subprocess

import pytest

from pipeline import dataset
from pipeline.dataset import DatasetConfig
from tests.dataset_support import assert_same_dataset, write_profiles
from tests.synthetic import build_sites

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def job_server_jar():
    if not shutil.which("java") or not shutil.which("mvn"):
        pytest.fail("the Flink test needs java and mvn (scripts/system-deps.txt installs them)")
    result = subprocess.run([str(ROOT / "runners" / "flink" / "job-server.sh")],
                            capture_output=True, text=True, check=True)
    return result.stdout.strip()


def test_flink_writes_the_same_dataset_as_direct_runner(tmp_path, job_server_jar):
    binary, addresses = build_sites(tmp_path)
    write_profiles(tmp_path, binary, addresses)
    inputs = [(str(tmp_path / "*.ltprof"), "v1")]
    config = DatasetConfig(eval_percent=50, num_shards=2)
    dataset.build_dataset(inputs, str(tmp_path / "direct"), config)
    dataset.build_dataset(inputs, str(tmp_path / "flink"), config, beam_args=[
        "--runner=FlinkRunner", "--flink_master=[local]", "--flink_version=1.19",
        f"--flink_job_server_jar={job_server_jar}", "--environment_type=LOOPBACK"])
    assert_same_dataset(tmp_path / "direct", tmp_path / "flink")
