"""Issue 12, "never lose or invent data": the readers bound their memory, refuse what
is not a regular file, keep unknown enum values, and drop impossible records with a
categorized reason -- for `read_profile`, `ProfileReader`, `inspect` and
`evaluate-online` (the dataset job's read step is in test_dataset.py)."""

from __future__ import annotations

import math
import os
import random
import struct
import subprocess
import sys

import pytest

from lifetime import cli
from core.errors import LifetimeError
from profile_format import ProfileFormatError, profile_pb2, read_profile, write_profile
from profile_format.container import masked_crc32c, write_record


def _chunks(samples=None, stacks=None, **header):
    """Header chunk (with the samples) and a trailer chunk; a valid profile as given."""
    first = profile_pb2.ProfileChunk()
    h = first.header
    h.schema_version = profile_pb2.SCHEMA_VERSION
    h.program, h.pid, h.max_stack_depth = "demo", 42, 128
    h.sampling_interval_bytes = 1024
    h.clocks.extend([profile_pb2.CLOCK_MONOTONIC_NS, profile_pb2.CLOCK_ALLOCATED_BYTES])
    for k, v in header.items():
        setattr(h, k, v)
    first.mappings.add(id=1, start=0x1000, limit=0x9000, path="/bin/demo")
    for sid, addresses in (stacks or {7: [0x1234, 0x2345]}).items():
        first.stacks.add(id=sid, addresses=addresses)
    for kw in samples if samples is not None else [{}]:
        fields = dict(stack_id=7, size=100, alloc_monotonic_ns=1_000_000,
                      free_monotonic_ns=4_000_000, alloc_allocated_bytes=100,
                      free_allocated_bytes=900, alloc_function=profile_pb2.MALLOC,
                      free_function=profile_pb2.FREE, weight=10.5)
        fields.update(kw)
        first.samples.add(**fields)
    last = profile_pb2.ProfileChunk()
    last.trailer.end_reason = profile_pb2.END_EXIT
    return [first, last]


def _write(tmp_path, chunks, name="p.ltprof"):
    path = str(tmp_path / name)
    write_profile(path, chunks)
    return path


def _lenient(path):
    errors = []
    return read_profile(path, errors), errors


def _inspect(path, timeout=60):
    return subprocess.run([sys.executable, "-m", "lifetime.cli", "inspect", str(path)],
                          capture_output=True, text=True, timeout=timeout)


# -- framing: declared lengths, non-regular files ----------------------------------

def _length_header(length: int) -> bytes:
    raw = struct.pack("<Q", length)
    return raw + struct.pack("<I", masked_crc32c(raw))


@pytest.mark.parametrize("length", [2**63, 2**40, 10**9, 5000])
def test_huge_declared_length_is_a_clear_error_not_a_memory_error(tmp_path, length):
    path = tmp_path / "huge.ltprof"
    path.write_bytes(_length_header(length))  # 12 bytes that declare `length`
    with pytest.raises(ProfileFormatError, match="record 0 at byte 0") as e:
        read_profile(str(path))
    assert e.value.reason.split(":")[0] in ("truncated", "too_large")
    assert str(path) in str(e.value)
    proc = _inspect(path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert str(path) in proc.stderr


def test_huge_length_after_good_records_keeps_the_good_part(tmp_path):
    path = _write(tmp_path, _chunks())
    size = os.path.getsize(path)
    with open(path, "ab") as f:
        f.write(_length_header(2**62) + b"x" * 20)
    profile, errors = _lenient(path)
    assert len(profile.samples) == 1 and profile.trailer is not None
    assert [e.category for e in errors] == ["truncated"]
    assert f"record 2 at byte {size}" in str(errors[0])


def test_record_over_the_maximum_is_refused_before_reading(tmp_path):
    from profile_format.container import ProfileReader

    path = _write(tmp_path, _chunks())
    reader = ProfileReader(path, max_record_bytes=16)
    assert list(reader.samples()) == []
    assert [p.category for p in reader.problems] == ["too_large"]


def test_fifo_is_refused_without_hanging(tmp_path):
    fifo = tmp_path / "f.ltprof"
    os.mkfifo(fifo)
    proc = _inspect(fifo, timeout=30)  # before: blocked forever in open()
    assert proc.returncode == 1
    assert str(fifo) in proc.stderr and "fifo" in proc.stderr
    with pytest.raises(ProfileFormatError, match="not_regular: is a fifo"):
        read_profile(str(fifo))


@pytest.mark.parametrize("target,kind", [("dir", "directory"), ("/dev/null", "device")])
def test_directory_and_device_are_refused(tmp_path, target, kind):
    path = str(tmp_path) if target == "dir" else target
    errors = []
    assert read_profile(path, errors) is None
    assert [e.category for e in errors] == ["not_regular"] and kind in str(errors[0])


# -- unknown enum values -------------------------------------------------------------

def test_unknown_enum_values_are_kept_and_printed(tmp_path, capsys):
    chunks = _chunks([{"alloc_function": 17, "free_function": 9}])
    chunks[0].header.clocks.append(5)
    chunks[1].trailer.end_reason = 7
    path = _write(tmp_path, chunks)
    profile = read_profile(path)  # strict: unknown values are not a problem
    assert profile.samples[0].alloc_function == 17
    assert cli.main(["inspect", path]) == 0
    out = capsys.readouterr().out
    assert "UNKNOWN(17)" in out and "UNKNOWN(7)" in out and "UNKNOWN(5)" in out


def test_summarize_file_counts_unknown_values(tmp_path):
    from profile_format.summary import summarize_file

    path = _write(tmp_path, _chunks([{"alloc_function": 17}] * 3))
    text, problems = summarize_file(path)
    assert problems == []
    assert "alloc_function UNKNOWN(17) x3" in text and "samples:         3" in text


# -- impossible records --------------------------------------------------------------

IMPOSSIBLE = {
    "negative_lifetime": [{"free_monotonic_ns": 1}],                       # wall clock
    "negative_lifetime ": [{"free_allocated_bytes": 5}],                   # bytes clock
    "bad_weight": [{"weight": math.nan}],
    "bad_weight ": [{"weight": -2.0}],
    "bad_weight  ": [{"weight": math.inf}],
    "censored_and_freed": [{"censored": True, "observed_age_ns": 5}],  # keeps its free
    "undefined_stack": [{"stack_id": 8}],
}


@pytest.mark.parametrize("category", sorted(IMPOSSIBLE))
def test_impossible_sample_is_dropped_with_a_reason(tmp_path, category, capsys):
    good = {"size": 77}
    path = _write(tmp_path, _chunks([good] + IMPOSSIBLE[category] * 2))
    with pytest.raises(ProfileFormatError, match=category.strip()) as e:
        read_profile(path)
    assert "record 0 at byte 0, sample 1" in str(e.value) and path in str(e.value)
    profile, errors = _lenient(path)
    assert [s.size for s in profile.samples] == [77]
    assert [e.category for e in errors] == [category.strip()]
    assert "2 samples dropped" in errors[0].reason
    assert profile.dropped == {category.strip(): 2}
    assert cli.main(["inspect", path]) == 1
    assert category.strip() in capsys.readouterr().err


def test_censored_sample_without_a_free_is_valid(tmp_path):
    path = _write(tmp_path, _chunks([{"censored": True, "observed_age_ns": 5,
                                      "free_monotonic_ns": 0, "free_allocated_bytes": 0,
                                      "free_function": 0}]))
    assert read_profile(path).samples[0].censored


@pytest.mark.parametrize("depth,max_depth", [(129, 128), (129, 0), (5, 4)])
def test_too_deep_stack_is_rejected_with_its_samples(tmp_path, depth, max_depth):
    stacks = {7: [0x1234, 0x2345], 9: list(range(0x1000, 0x1000 + depth))}
    path = _write(tmp_path, _chunks([{}, {"stack_id": 9}], stacks, max_stack_depth=max_depth))
    with pytest.raises(ProfileFormatError, match="stack_too_deep: .*stack 9 has"):
        read_profile(path)
    profile, errors = _lenient(path)
    assert len(profile.samples) == 1 and 9 not in profile.stacks
    assert sorted(e.category for e in errors) == ["bad_stack", "stack_too_deep"]


def test_interval_zero_is_a_bad_header_and_nothing_is_used(tmp_path, capsys):
    path = _write(tmp_path, _chunks(sampling_interval_bytes=0))
    with pytest.raises(ProfileFormatError, match="bad_header: .*interval 0"):
        read_profile(path)
    assert _lenient(path)[0] is None
    assert cli.main(["inspect", path]) == 1


def test_duplicated_chunk_is_skipped(tmp_path):
    first, last = _chunks()
    more = profile_pb2.ProfileChunk()
    more.samples.add(stack_id=7, size=5, alloc_monotonic_ns=1, free_monotonic_ns=2, weight=1.0)
    path = _write(tmp_path, [first, more, more, last])
    with pytest.raises(ProfileFormatError, match="duplicate_chunk: record 2 at byte"):
        read_profile(path)
    profile, errors = _lenient(path)
    assert [s.size for s in profile.samples] == [100, 5]  # not [100, 5, 5]
    assert [e.category for e in errors] == ["duplicate_chunk"]
    assert profile.trailer is not None


def test_stack_redefined_differently_keeps_the_first(tmp_path):
    first, last = _chunks()
    last.stacks.add(id=7, addresses=[0x9999])
    path = _write(tmp_path, [first, last])
    profile, errors = _lenient(path)
    assert list(profile.stacks[7].addresses) == [0x1234, 0x2345]
    assert [e.category for e in errors] == ["stack_redefined"]


def test_every_problem_is_a_lifetime_error_naming_file_and_place(tmp_path):
    path = _write(tmp_path, _chunks([{"weight": -1.0}]))
    _, errors = _lenient(path)
    assert isinstance(errors[0], LifetimeError) and isinstance(errors[0], ProfileFormatError)
    assert str(errors[0]).startswith(path + ": bad_weight: ")
    assert "record 0 at byte 0, sample 0" in str(errors[0])


# -- terminal safety -----------------------------------------------------------------

def test_control_characters_never_reach_the_terminal(tmp_path, capsys):
    chunks = _chunks(program="ev\x1b[2Jil\r", executable_path="/tmp/a\nb\x07",
                     hostname="h\x9bx", version_label="v\u202e1")
    chunks[0].header.argv.extend(["run", "--x=\x1b]0;title\x07"])
    chunks[0].mappings[0].path = "/lib/li\x1bb.so"
    path = _write(tmp_path, chunks)
    assert cli.main(["inspect", path]) == 0
    out = capsys.readouterr().out
    for raw in ("\x1b", "\x07", "\r", "\x9b", "\u202e"):
        assert raw not in out
    assert "ev\\x1b[2Jil\\x0d" in out and "/tmp/a\\x0ab\\x07" in out and "\\u202e" in out
    assert "li\\x1bb.so+0x" in out


def test_printable():
    from core.errors import printable

    assert printable("plain text/ü") == "plain text/ü"
    assert printable("a\tb\x00\x7f") == "a\\x09b\\x00\\x7f"
    assert printable(b"\xff\x1b") == "\\xff\\x1b"


# -- streaming API -----------------------------------------------------------------

def test_stream_profile_yields_valid_samples_with_counts(tmp_path):
    from profile_format import stream_profile

    path = _write(tmp_path, _chunks([{}, {"weight": math.nan}, {"censored": True,
                                                                   "free_monotonic_ns": 0,
                                                                   "free_allocated_bytes": 0,
                                                                   "free_function": 0}]))
    reader = stream_profile(path)
    sizes = []
    for s in reader.samples():
        assert reader.header.program == "demo" and s.stack_id in reader.stacks
        sizes.append(s.size)
    assert sizes == [100, 100] and reader.kept == 2 and reader.censored == 1
    assert reader.dropped == {"bad_weight": 1} and reader.trailer is not None
    assert [p.category for p in reader.problems] == ["bad_weight"]


def test_summarize_file_streams_and_reports_problems(tmp_path):
    from profile_format.summary import summarize_file

    path = _write(tmp_path, _chunks([{}, {"free_monotonic_ns": 1}]))
    text, problems = summarize_file(path, max_samples=1)
    assert "samples:         1, censored 0" in text
    assert "samples dropped: 1 (negative_lifetime 1)" in text
    assert "problems:        1 (negative_lifetime 1)" in text
    assert [p.category for p in problems] == ["negative_lifetime"]
    text, problems = summarize_file(str(tmp_path / "nope.ltprof"))
    assert text is None and [p.category for p in problems] == ["missing"]


# -- arbitrary bytes -----------------------------------------------------------------

def _mutants(data: bytes, rng: random.Random, n: int):
    for _ in range(n):
        b = bytearray(data)
        op = rng.randrange(5)
        if op == 0:  # flip bytes
            for _ in range(rng.randint(1, 8)):
                b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        elif op == 1:  # truncate
            del b[rng.randrange(len(b)):]
        elif op == 2:  # a record with a valid framing around random or mutated bytes
            body = bytes(rng.randrange(256) for _ in range(rng.randint(0, 64))) \
                if rng.random() < 0.5 else bytes(b[12:12 + rng.randint(1, 200)])
            raw = struct.pack("<Q", len(body))
            rec = raw + struct.pack("<I", masked_crc32c(raw)) + body + \
                struct.pack("<I", masked_crc32c(body))
            at = rng.choice([0, len(b)])
            b[at:at] = rec
        elif op == 3:  # a valid length header declaring anything
            b[:0] = _length_header(rng.choice([0, 1, 2**31, 2**64 - 1, rng.randrange(2**40)]))
        else:  # bytes flipped inside a record, checksums fixed: reaches the parser
            length = int.from_bytes(b[:8], "little")
            body = bytearray(b[12:12 + length])
            for _ in range(rng.randint(1, 4)):
                body[rng.randrange(len(body))] = rng.randrange(256)
            b[12:12 + length] = body
            b[12 + length:16 + length] = struct.pack("<I", masked_crc32c(bytes(body)))
        yield bytes(b)


def test_arbitrary_bytes_only_ever_give_profile_format_errors(tmp_path):
    from profile_format.summary import summarize, summarize_file

    chunks = _chunks([{}, {"censored": True, "free_monotonic_ns": 0, "free_allocated_bytes": 0,
                          "free_function": 0, "stack_id": 8}],
                     {7: [0x1234, 0x2345], 8: [0x1500]})
    base = _write(tmp_path, chunks, "base.ltprof")
    data = open(base, "rb").read()
    rng = random.Random(12)
    path = str(tmp_path / "m.ltprof")
    for mutant in _mutants(data, rng, 400):
        with open(path, "wb") as f:
            f.write(mutant)
        try:
            profile = read_profile(path)
        except ProfileFormatError:
            pass
        else:
            summarize(profile)
        profile = read_profile(path, [])
        if profile is not None:
            summarize(profile)
        summarize_file(path)


def test_write_record_round_trip_of_raw_chunks(tmp_path):
    """A record that is valid framing but an unknown field: read gracefully."""
    path = str(tmp_path / "extra.ltprof")
    first, last = _chunks()
    with open(path, "wb") as f:
        write_record(f, first.SerializeToString() + b"\xa8\x06\x01")  # field 101, varint 1
        write_record(f, last.SerializeToString())
    assert len(read_profile(path).samples) == 1


# -- evaluate-online -----------------------------------------------------------------

def _predicted_profile(tmp_path, name, n=20):
    samples = [{"predicted": True, "predicted_class": i % 2, "prediction_ns": 100 + i,
                "prediction_cache_hit": bool(i % 3), "alloc_monotonic_ns": 1000 * i,
                "free_monotonic_ns": 1000 * i + 5_000_000} for i in range(n)]
    return _write(tmp_path, _chunks(samples, model_id="m1", model_path="/m.so"), name)


def test_evaluate_online_counts_names_and_skips_bad_files(tmp_path):
    from model.online_eval import evaluate_online
    from core.context import ContextDefinition

    good = _predicted_profile(tmp_path, "good.ltprof")
    truncated = tmp_path / "truncated.ltprof"
    truncated.write_bytes(_length_header(2**40))
    fifo = tmp_path / "fifo.ltprof"
    os.mkfifo(fifo)
    partly = _write(tmp_path, _chunks([{"predicted": True, "weight": math.nan},
                                       {"predicted": True, "size": 3}],
                                      model_id="m1"), "partly.ltprof")
    result = evaluate_online([good, str(truncated), str(fifo), partly],
                             ContextDefinition.make())
    assert result["profiles"] == 4 and result["profiles_used"] == 2
    assert [(d["file"], d["category"]) for d in result["skipped_files"]] == [
        (str(truncated), "truncated"), (str(fifo), "not_regular")]
    assert [(d["file"], d["category"]) for d in result["problems"]] == [(partly, "bad_weight")]
    assert result["dropped_samples"] == {"bad_weight": 1}
    assert result["predicted_samples"] == 21


def test_last_chunk_seeks_to_the_last_intact_record(tmp_path):
    from profile_format.container import last_chunk

    path = tmp_path / "p.ltprof"
    write_profile(str(path), _chunks())
    assert last_chunk(str(path)).HasField("trailer")
    data = path.read_bytes()
    (tmp_path / "cut.ltprof").write_bytes(data[:-3])  # the trailer's record is cut
    assert last_chunk(str(tmp_path / "cut.ltprof")).HasField("header")
    flipped = bytearray(data)
    flipped[-6] ^= 0xFF  # the trailer record's data fails its checksum
    (tmp_path / "bad.ltprof").write_bytes(bytes(flipped))
    assert last_chunk(str(tmp_path / "bad.ltprof")) is None
    (tmp_path / "junk.ltprof").write_bytes(b"not a profile at all")
    os.mkfifo(tmp_path / "fifo.ltprof")
    for name in ("junk.ltprof", "fifo.ltprof", "missing.ltprof"):
        assert last_chunk(str(tmp_path / name)) is None
