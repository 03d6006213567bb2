"""ProfileChunk.compact_samples (issue 23): a full trace's freed samples as rows of 11
delta-coded varints (profile.proto, CompactSamples).  The reader must yield exactly
the Sample messages they stand for, so every consumer sees the same samples whether
a file holds them as `Sample` messages or as compact rows."""

from __future__ import annotations

import random

import pytest

from profile_format import ProfileReader, container, profile_pb2, read_profile

M64 = (1 << 64) - 1


def _random_samples(rnd: random.Random, n: int) -> list[profile_pb2.Sample]:
    """Freed weight-1 samples with edge values everywhere (0, 2^64-1, a free before its
    allocation, thread ids at both ends), in an order no clock follows."""
    out = []
    for _ in range(n):
        out.append(profile_pb2.Sample(
            stack_id=rnd.choice([1, 2, 300, 1 << 33, M64]),
            size=rnd.choice([0, 1, 100, 1 << 63, M64]),
            alignment=rnd.choice([0, 0, 64, M64]),
            alloc_function=rnd.randint(0, 15), free_function=rnd.randint(0, 3),
            address=rnd.choice([0, M64, rnd.getrandbits(64)]),
            alloc_monotonic_ns=rnd.choice([0, M64, rnd.getrandbits(64)]),
            alloc_allocated_bytes=rnd.choice([0, rnd.getrandbits(64)]),
            alloc_thread=rnd.choice([0, 1234, 2**32 - 1]),
            free_monotonic_ns=rnd.choice([0, M64, rnd.getrandbits(64)]),
            free_allocated_bytes=rnd.getrandbits(40),
            free_thread=rnd.choice([0, 1234, 2**32 - 1]), weight=1.0))
    return out


@pytest.mark.parametrize("n", [1, 2, 3, 4096, 5000])
def test_rows_round_trip_to_the_same_samples(n):
    samples = _random_samples(random.Random(n), n)
    compact = container.compact_rows(samples)
    chunk = profile_pb2.ProfileChunk.FromString(container.expand_compact(compact))
    assert list(chunk.samples) == samples
    # the same message, field for field: serialized again it is byte-identical
    assert chunk.SerializeToString() == profile_pb2.ProfileChunk(samples=samples).SerializeToString()


def test_a_realistic_trace_takes_a_third_of_the_bytes():
    rnd, ns, clock, samples = random.Random(7), 10**14, 10**9, []
    for _ in range(4096):
        ns += rnd.randint(100, 3000)
        clock += rnd.randint(8, 512)
        life = rnd.randint(50, 100_000)
        samples.append(profile_pb2.Sample(
            stack_id=rnd.randint(1, 3000), size=rnd.randint(8, 512), alloc_function=1,
            address=0x5555_0000_0000 + rnd.randint(0, 10**6) * 16,
            alloc_monotonic_ns=ns - life, alloc_allocated_bytes=clock - life // 3,
            alloc_thread=4242, free_monotonic_ns=ns, free_allocated_bytes=clock,
            free_thread=4242, free_function=1, weight=1.0))
    rows = container.compact_rows(samples)
    full = profile_pb2.ProfileChunk(samples=samples).ByteSize()
    assert profile_pb2.ProfileChunk(compact_samples=rows).ByteSize() < full / 2.5


def _header():
    h = profile_pb2.Header(schema_version=profile_pb2.SCHEMA_VERSION, program="p",
                           sampling_interval_bytes=1, full_trace=True, max_stack_depth=128)
    return h


def _files(tmp_path, samples, censored):
    stacks = [profile_pb2.Stack(id=i, addresses=[0x1000 + i, 0x2000]) for i in (1, 2, 300)]
    trailer = profile_pb2.Trailer(end_reason=1, samples=len(samples) + len(censored))
    plain = [profile_pb2.ProfileChunk(header=_header(), stacks=stacks, samples=samples[:7]),
             profile_pb2.ProfileChunk(samples=samples[7:] + censored, trailer=trailer)]
    compact = [profile_pb2.ProfileChunk(header=_header(), stacks=stacks,
                                        compact_samples=container.compact_rows(samples[:7])),
               profile_pb2.ProfileChunk(compact_samples=container.compact_rows(samples[7:]),
                                        samples=censored, trailer=trailer)]
    a, b = tmp_path / "plain.ltprof", tmp_path / "compact.ltprof"
    container.write_profile(str(a), plain)
    container.write_profile(str(b), compact)
    return str(a), str(b)


def test_the_reader_yields_the_same_samples_in_the_same_order(tmp_path):
    rnd = random.Random(3)
    samples = _random_samples(rnd, 40)
    for s in samples:
        s.stack_id = rnd.choice([1, 2, 300, 999])  # 999: never defined, dropped alike
    censored = [profile_pb2.Sample(stack_id=2, size=5, alloc_function=1, address=77,
                                   alloc_monotonic_ns=9, censored=True, observed_age_ns=4,
                                   weight=1.0)]
    a, b = _files(tmp_path, samples, censored)
    ra, rb = ProfileReader(a), ProfileReader(b)
    got_a, got_b = list(ra.samples()), list(rb.samples())
    assert got_a == got_b and got_b[-1] == censored[0]
    assert ra.kept == rb.kept and ra.censored == rb.censored == 1
    assert ra.dropped == rb.dropped and rb.dropped  # undefined stacks, negative lifetimes
    assert [p.reason for p in ra.problems] == [p.reason for p in rb.problems]
    assert ra.unknown_enums == rb.unknown_enums


@pytest.mark.parametrize("damage", ["count", "cut", "long"])
def test_undecodable_rows_are_a_corrupt_record(tmp_path, damage):
    samples = _random_samples(random.Random(5), 4)
    for s in samples:
        s.stack_id = 1
    rows = container.compact_rows(samples)
    if damage == "count":
        rows.count += 1
    elif damage == "cut":
        rows.rows = rows.rows[:-1] + bytes([rows.rows[-1] | 0x80])
    else:
        rows.rows = b"\xff" * 11 + b"\x01" + rows.rows
    chunk = profile_pb2.ProfileChunk(
        header=_header(), stacks=[profile_pb2.Stack(id=1, addresses=[1])],
        compact_samples=rows, trailer=profile_pb2.Trailer(end_reason=1))
    path = str(tmp_path / "bad.ltprof")
    container.write_profile(path, [chunk])
    errors = []
    prof = read_profile(path, errors)
    assert prof.samples == [] and prof.trailer is not None
    assert [e.category for e in errors] == ["corrupt"]
    with pytest.raises(container.ProfileFormatError, match="compact samples"):
        read_profile(path)
