"""A real Apache Flink session cluster (runners/flink/cluster.sh: a JobManager and two
TaskManagers, each its own JVM, on loopback) starts, reports both TaskManagers, starts
idempotently and stops leaving no JVM behind.

With LIFETIME_TEST_FLINK_CLUSTER=1 the dataset job also runs on it and writes the same
dataset as on DirectRunner, byte for byte, and ran there: the cluster's REST API lists
the job as finished, with subtasks on both TaskManagers.  That part is opt-in: it adds
50-75 s (job server, 150 MB of jars shipped to the cluster, an SDK worker process per
stage) to the 20-30 s of the cluster; runners/flink/compare_runners.py runs the same
comparison on the demo's profiles.  The SDK workers run in Beam's PROCESS environment
(runners/flink/sdk-worker): LOOPBACK fails on more than one TaskManager
(runners/flink/README.md)."""

import json
import os
import pathlib
import shutil
import socket
import subprocess
import urllib.request

import pytest

from pipeline import dataset
from pipeline.dataset import DatasetConfig
from tests.dataset_support import assert_same_dataset, write_profiles
from tests.synthetic import build_sites

ROOT = pathlib.Path(__file__).resolve().parents[1]
FLINK = ROOT / "runners" / "flink"

pytestmark = pytest.mark.slow  # a Flink cluster: three JVMs and a job server


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rest(master, path):
    with urllib.request.urlopen(f"http://{master}{path}", timeout=10) as r:
        return json.load(r)


def _alive(pid):
    return pathlib.Path(f"/proc/{pid}").exists()


@pytest.fixture(scope="module")
def job_server_jar():
    if not shutil.which("java") or not shutil.which("mvn"):
        pytest.fail("the Flink test needs java and mvn (scripts/system-deps.txt installs them)")
    result = subprocess.run([str(FLINK / "job-server.sh")],
                            capture_output=True, text=True, check=True)
    return result.stdout.strip()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """(master host:port, state dir) of a session cluster of our own, stopped after."""
    if not shutil.which("java") or not shutil.which("mvn"):
        pytest.fail("the Flink cluster test needs java and mvn "
                    "(scripts/system-deps.txt installs them)")
    state = tmp_path_factory.mktemp("flink-cluster")
    env = {**os.environ, "FLINK_CLUSTER_DIR": str(state), "FLINK_REST_PORT": str(_free_port())}
    script = str(FLINK / "cluster.sh")
    pids = []
    try:
        start = subprocess.run([script, "start"], env=env, capture_output=True, text=True,
                               timeout=300)
        pids = [int(p.read_text()) for p in (state / "run").glob("*.pid")]
        assert start.returncode == 0, start.stderr
        yield start.stdout.strip(), state
    finally:
        subprocess.run([script, "stop"], env=env, check=True, timeout=120)
        assert [p for p in pids if _alive(p)] == [], "cluster.sh stop left JVMs running"


def test_cluster_status_and_idempotent_start(cluster):
    master, state = cluster
    env = {**os.environ, "FLINK_CLUSTER_DIR": str(state)}
    status = subprocess.run([str(FLINK / "cluster.sh"), "status"], env=env,
                            capture_output=True, text=True)
    assert status.returncode == 0 and f"master {master}, 2 TaskManagers" in status.stdout
    again = subprocess.run([str(FLINK / "cluster.sh"), "start"], env=env,
                           capture_output=True, text=True, timeout=60)
    assert (again.returncode, again.stdout.strip()) == (0, master)
    tms = _rest(master, "/taskmanagers")["taskmanagers"]
    assert sorted(tm["id"] for tm in tms) == ["taskmanager1", "taskmanager2"]


@pytest.mark.skipif(os.environ.get("LIFETIME_TEST_FLINK_CLUSTER") != "1",
                    reason="opt-in (50-75 s): LIFETIME_TEST_FLINK_CLUSTER=1; "
                           "or runners/flink/compare_runners.py")
def test_session_cluster_writes_the_same_dataset_as_direct_runner(tmp_path, cluster,
                                                                  job_server_jar):
    master, _ = cluster
    binary, addresses = build_sites(tmp_path)
    write_profiles(tmp_path, binary, addresses)
    inputs = [(str(tmp_path / "*.ltprof"), "v1")]
    config = DatasetConfig(eval_percent=50, num_shards=2)
    dataset.build_dataset(inputs, str(tmp_path / "direct"), config)
    worker = json.dumps({"command": str(FLINK / "sdk-worker")})
    dataset.build_dataset(inputs, str(tmp_path / "flink"), config, beam_args=[
        "--runner=FlinkRunner", f"--flink_master={master}", "--flink_version=1.19",
        f"--flink_job_server_jar={job_server_jar}", "--parallelism=2",
        "--environment_type=PROCESS", f"--environment_config={worker}"])
    assert_same_dataset(tmp_path / "direct", tmp_path / "flink")

    # It ran on this cluster (not an embedded [local] one), spread over both TaskManagers.
    jobs = _rest(master, "/jobs/overview")["jobs"]
    assert [j["state"] for j in jobs] == ["FINISHED"], jobs
    jid = jobs[0]["jid"]
    where = set()
    for vertex in _rest(master, f"/jobs/{jid}")["vertices"]:
        for tm in _rest(master, f"/jobs/{jid}/vertices/{vertex['id']}/taskmanagers")["taskmanagers"]:
            where.add(tm["taskmanager-id"])
    assert where == {"taskmanager1", "taskmanager2"}
