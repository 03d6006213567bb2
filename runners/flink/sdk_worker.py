"""Beam's PROCESS environment entry point for the Python SDK harness: what the SDK
container's Go `boot` does, in Python, without a container.  A Flink TaskManager runs it
once per SDK worker as

    runners/flink/sdk-worker --id=ID --provision_endpoint=HOST:PORT \
        --logging_endpoint=... --artifact_endpoint=... --control_endpoint=...

It asks the provision service for the pipeline options and endpoints, then runs the SDK
harness (apache_beam.runners.worker.sdk_worker_main) in this process.  The job's code
and its dependencies must already be importable by this Python (the TaskManager host
has the project installed); staged artifacts are not installed.

Why not LOOPBACK on a cluster: with LOOPBACK every TaskManager asks the one worker pool
inside the submitting Python process for SDK workers, and the worker ids it sends
("<factory>-<n>", counted per TaskManager JVM) repeat across TaskManagers; the pool keys
its workers by id, so one TaskManager's StopWorker ends another TaskManager's worker
mid-bundle ("SDK harness closed connection").  A process per worker has no shared table.
"""

from __future__ import annotations

import argparse
import os
import sys


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--id", required=True)
    parser.add_argument("--provision_endpoint", required=True)
    parser.add_argument("--logging_endpoint", default="")
    parser.add_argument("--artifact_endpoint", default="")
    parser.add_argument("--control_endpoint", default="")
    parser.add_argument("--semi_persist_dir", default="")
    args, _ = parser.parse_known_args(argv)

    import grpc
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.portability.api import beam_provision_api_pb2_grpc
    from apache_beam.portability.api import endpoints_pb2
    from google.protobuf import json_format
    from google.protobuf import text_format

    with grpc.insecure_channel(args.provision_endpoint) as channel:
        stub = beam_provision_api_pb2_grpc.ProvisionServiceStub(channel)
        info = stub.GetProvisionInfo(beam_provision_api_pb2.GetProvisionInfoRequest(),
                                     metadata=[("worker_id", args.id)]).info

    def descriptor(field: str, url: str) -> str | None:
        if info.HasField(field):
            return text_format.MessageToString(getattr(info, field))
        if url:
            return text_format.MessageToString(endpoints_pb2.ApiServiceDescriptor(url=url))
        return None

    env = {
        "WORKER_ID": args.id,
        "PIPELINE_OPTIONS": json_format.MessageToJson(info.pipeline_options),
        "RUNNER_CAPABILITIES": " ".join(info.runner_capabilities),
    }
    if args.semi_persist_dir:  # only where staged files would be (we install none)
        env["SEMI_PERSISTENT_DIRECTORY"] = args.semi_persist_dir
    for name, field, url in (("CONTROL_API_SERVICE_DESCRIPTOR", "control_endpoint",
                              args.control_endpoint),
                             ("LOGGING_API_SERVICE_DESCRIPTOR", "logging_endpoint",
                              args.logging_endpoint),
                             ("STATUS_API_SERVICE_DESCRIPTOR", "status_endpoint", "")):
        value = descriptor(field, url)
        if value is not None:
            env[name] = value
    if "CONTROL_API_SERVICE_DESCRIPTOR" not in env:
        sys.exit("sdk_worker: the provision service gave no control endpoint")
    os.environ.update(env)

    from apache_beam.runners.worker import sdk_worker_main

    sdk_worker_main.main(sys.argv)


if __name__ == "__main__":
    main(sys.argv[1:])
