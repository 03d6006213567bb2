"""Shared fixtures: the proxy workload profiled once per test session."""

from __future__ import annotations

import glob
import os

import pytest

from tests.proxy_support import proxy_binary

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's start-up chatter
# gRPC (loaded by Beam) otherwise restarts its poller in every fork()ed child; when
# subprocess then closes the child's descriptors before exec, the poller aborts it
# (seen once in a sampler test: "epoll_wait error: Bad file descriptor", exit -6).
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

PROXY_SECONDS = 8
PROXY_INTERVAL = 512 * 1024

# ------------------------------------------------------------------ slow tests
# `make test-fast` (pytest -m "not slow") runs everything else.  A test is slow when it
# uses one of these fixtures, lives in one of these modules or has one of these names
# (each with the reason); in the sampler, server and fuzz tests single slow cases carry
# @pytest.mark.slow themselves (sanitizer builds, a real server, fuzz campaigns).
SLOW_FIXTURES = {
    "exported_model": "trains a model and compiles it with XLA AOT",
    "proxy_profile": "profiles the proxy workload for 8 s per version",
}
SLOW_MODULES = {
    "test_real_redis.py": "fetches, builds and runs a real Redis server",
    "test_export.py": "XLA AOT export and C++ builds against it",
    "test_model_training.py": "trains Keras models",
    "test_flink.py": "a Beam job on the Flink runner",
}
SLOW_TESTS = {
    "test_invariants_random_trace": "100k random objects, heap invariants checked throughout",
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if (item.path.name in SLOW_MODULES or item.originalname in SLOW_TESTS
                or SLOW_FIXTURES.keys() & set(item.fixturenames)):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def sites(tmp_path_factory):
    """(binary, {function: address}) of tests/native/sites.c (tests/synthetic.py)."""
    from tests.synthetic import build_sites

    return build_sites(tmp_path_factory.mktemp("sites-bin"))


@pytest.fixture(scope="session")
def proxy_profile(tmp_path_factory):
    """proxy_profile(version) -> path of one profile of proxy_server_<version> (run once)."""
    from profiler import launch

    paths: dict[str, str] = {}

    def get(version: str) -> str:
        if version not in paths:
            out = tmp_path_factory.mktemp(f"proxy-{version}")
            rc = launch.run_profiled([str(proxy_binary(version)), "--seconds", str(PROXY_SECONDS)],
                                     out_dir=str(out), interval=PROXY_INTERVAL,
                                     version_label=version)
            assert rc == 0, f"proxy_server_{version} exited with {rc}"
            files = glob.glob(str(out / "*.ltprof"))
            assert len(files) == 1, files
            paths[version] = files[0]
        return paths[version]

    return get


@pytest.fixture(scope="session")
def exported_model(tmp_path_factory):
    """A small synthetic model (tests/export_support.py), exported once per session with
    the real XLA AOT toolchain: (model dir, export dir)."""
    from export.exporter import export_model
    from tests.export_support import make_model_dir

    root = tmp_path_factory.mktemp("exported-model")
    model_dir = make_model_dir(root / "model")
    export_model(model_dir, root / "export")
    return root / "model", root / "export"


@pytest.fixture(scope="session")
def exported_size_model(tmp_path_factory):
    """A small synthetic model keyed on size (contexts with a size frame: objects of 64
    and 4096 bytes, the larger 3 classes longer-lived), exported once per session:
    (model dir, export dir)."""
    from export.exporter import export_model
    from tests.export_support import TRAIN_SCHEDULE, make_dataset, train_model_dir

    root = tmp_path_factory.mktemp("exported-size-model")
    ds = make_dataset(root / "dataset", contexts=1500, sized=True)
    train_model_dir(ds, root / "model", **TRAIN_SCHEDULE)
    export_model(root / "model", root / "export")
    return root / "model", root / "export"


# ------------------------------------------------------------------ the sampler

@pytest.fixture(scope="session")
def lib():
    """The built liblifetime_sampler.so (built like `make native` when missing)."""
    from tests.sampler_support import sampler_library

    return sampler_library()


@pytest.fixture(scope="session")
def bins(tmp_path_factory, lib):
    """bins[name]: tests/native/<name>.c compiled once per session, on first use."""
    from tests.sampler_support import NativeBinaries

    return NativeBinaries(tmp_path_factory.mktemp("native"))


@pytest.fixture(scope="session")
def simulator_engine():
    """The built engine binary; a missing one fails the simulator tests (never skips
    them).  Modules use it with pytestmark = pytest.mark.usefixtures(...)."""
    import simulator

    try:
        return simulator.engine_path()
    except FileNotFoundError as e:
        pytest.fail(str(e))
