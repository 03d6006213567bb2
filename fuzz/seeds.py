"""Seed inputs for the profile fuzzers: small valid profiles, the mutants that once
broke the readers, and, when the sampler is built, a real profile of a real program."""

from __future__ import annotations

import io
import os
import pathlib
import struct
import subprocess

from profiler_proto import container, profile_pb2

REPO = pathlib.Path(__file__).resolve().parent.parent
SAMPLER = REPO / "build" / "profiler" / "liblifetime_sampler.so"


def valid_chunks(samples: int = 3) -> list[profile_pb2.ProfileChunk]:
    """A small valid profile of program "demo" (one mapping, /bin/true; stack 7): a
    first chunk with the header and `samples` freed samples of 100, 101, ... bytes
    (lifetime 3 ms), a last chunk with a censored 200-byte sample and the trailer.  The
    fuzzers' seed, and the profile tests/test_profile_container.py reads back."""
    first = profile_pb2.ProfileChunk()
    h = first.header
    h.schema_version = profile_pb2.SCHEMA_VERSION
    h.program, h.pid, h.sampling_interval_bytes, h.max_stack_depth = "demo", 42, 1024, 128
    h.clocks.extend([profile_pb2.CLOCK_MONOTONIC_NS, profile_pb2.CLOCK_ALLOCATED_BYTES])
    first.mappings.add(id=1, start=0x1000, limit=0x9000, path="/bin/true", build_id=b"\x01\x02")
    first.stacks.add(id=7, addresses=[0x1234, 0x2345])
    for i in range(samples):
        first.samples.add(stack_id=7, size=100 + i, alloc_monotonic_ns=1_000_000 + i,
                          free_monotonic_ns=4_000_000 + i, alloc_allocated_bytes=10 * i,
                          free_allocated_bytes=10 * i + 5, alloc_function=profile_pb2.MALLOC,
                          free_function=profile_pb2.FREE, weight=10.5)
    last = profile_pb2.ProfileChunk()
    last.samples.add(stack_id=7, size=200, alloc_monotonic_ns=2_000_000, censored=True,
                     observed_age_ns=9_000_000, weight=5.0)
    last.trailer.end_reason = profile_pb2.END_EXIT
    last.trailer.total_allocations = 1000
    return [first, last]


def _file(chunks: list[profile_pb2.ProfileChunk]) -> bytes:
    buf = io.BytesIO()
    for c in chunks:
        container.write_record(buf, c.SerializeToString(deterministic=True))
    return buf.getvalue()


def mutants() -> dict[str, bytes]:
    """The inputs of issue 12's report, and a few of their neighbours."""
    good = valid_chunks()
    out = {"valid": _file(good), "valid-one-chunk": _file(good[:1])}
    huge = struct.pack("<Q", 1 << 62)
    out["huge-length"] = huge + struct.pack("<I", container.masked_crc32c(huge))
    enum = valid_chunks()
    enum[0].samples[0].alloc_function = 77  # proto3 keeps unknown enum values
    enum[1].trailer.end_reason = 99
    out["unknown-enums"] = _file(enum)
    neg = valid_chunks()
    neg[0].samples[0].free_monotonic_ns = 1  # freed before its allocation
    out["negative-lifetime"] = _file(neg)
    nan = valid_chunks()
    nan[0].samples[0].weight = float("nan")
    nan[0].samples[1].weight = -3.0
    out["bad-weights"] = _file(nan)
    both = valid_chunks()
    both[0].samples[0].censored = True
    out["censored-and-freed"] = _file(both)
    deep = valid_chunks()
    deep[0].stacks[0].addresses.extend(range(0x3000, 0x3000 + 200))
    out["deep-stack"] = _file(deep)
    zero = valid_chunks()
    zero[0].header.sampling_interval_bytes = 0
    out["zero-interval"] = _file(zero)
    dup = valid_chunks()
    out["duplicated-chunk"] = _file([dup[0], dup[0], dup[1]])
    out["truncated"] = out["valid"][:-7]
    out["empty"] = b""
    return out


def real_profile(out_dir: pathlib.Path) -> bytes | None:
    """A profile of `sh -c 'ls -R /usr/share/doc'` from the real sampler, if built."""
    if not SAMPLER.is_file():
        return None
    env = dict(os.environ, LD_PRELOAD=str(SAMPLER), LIFETIME_OUT_DIR=str(out_dir),
               LIFETIME_INTERVAL_BYTES="4096", LIFETIME_SEED="1")
    subprocess.run(["ls", "-R", "/usr/share/doc"], env=env, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=False, timeout=60)
    files = sorted(out_dir.glob("*" + container.SUFFIX), key=lambda p: p.stat().st_size)
    return files[-1].read_bytes() if files else None


def write_seeds(corpus: pathlib.Path, real: bool = True) -> int:
    """Writes the seed corpus; returns the number of seeds."""
    corpus.mkdir(parents=True, exist_ok=True)
    seeds = mutants()
    if real:
        scratch = corpus.parent / (corpus.name + ".real")
        scratch.mkdir(exist_ok=True)
        data = real_profile(scratch)
        if data:
            seeds["real-ls"] = data
    for name, data in seeds.items():
        (corpus / name).write_bytes(data)
    return len(seeds)
