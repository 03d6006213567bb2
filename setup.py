"""Installable package for the lifetime-model pipeline (`pip install -e .`)."""

import pathlib
import subprocess
import sys

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

ROOT = pathlib.Path(__file__).parent


def generate_proto() -> None:
    """Generates profile_format/profile_pb2.py and interop/pprof/profile_pb2.py (pprof's
    schema) with the pinned grpcio-tools protoc."""
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", "-I.", "--python_out=.", "--pyi_out=.",
         "profile_format/profile.proto", "interop/pprof/profile.proto"],
        cwd=ROOT, check=True)


class BuildPyWithProto(build_py):
    def run(self):
        generate_proto()
        super().run()


def requirements() -> list[str]:
    lines = (ROOT / "requirements.txt").read_text().splitlines()
    return [line for line in lines if line and not line.startswith("#")]


TOP_PACKAGES = ("core", "lifetime", "pipeline", "model", "profiler", "profile_format", "export",
                "simulator", "interop", "allocator")

setup(
    name="lifetime-models",
    version="0.1.0",
    description="Offline training pipeline for learned memory-allocation lifetime models "
                "(after LLAMA, Maas et al.)",
    python_requires=">=3.11",
    # Every package and sub-package of the project's folders (a new sub-package needs no edit).
    packages=find_packages(include=[f"{top}{sub}" for top in TOP_PACKAGES for sub in ("", ".*")]),
    package_data={"core": ["version_roles.json"],
                  "profile_format": ["profile.proto", "README.md"],
                  "interop.pprof": ["profile.proto"]},
    install_requires=requirements(),
    entry_points={"console_scripts": ["lifetime=lifetime.cli:main"]},
    cmdclass={"build_py": BuildPyWithProto},
)
