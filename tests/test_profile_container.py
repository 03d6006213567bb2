"""The profile container: round trip, and clear errors for bad files."""

import os

import pytest

from lifetime import cli
from fuzz.seeds import valid_chunks
from profile_format import ProfileFormatError, profile_pb2, read_profile, write_profile


def _chunks():
    """A two-chunk profile: a freed 100-byte sample, then a censored 200-byte one."""
    return valid_chunks(samples=1)


@pytest.fixture
def good_profile(tmp_path):
    path = str(tmp_path / "demo.42.1.ltprof")
    write_profile(path, _chunks())
    return path


def test_round_trip_merges_chunks(good_profile):
    p = read_profile(good_profile)
    assert p.header.program == "demo"
    assert p.chunks == 2
    assert [s.size for s in p.samples] == [100, 200]
    assert list(p.stacks[7].addresses) == [0x1234, 0x2345]
    assert p.trailer.total_allocations == 1000
    assert p.censored_share == 0.5


def test_inspect_prints_header_counts_and_samples(good_profile, capsys):
    assert cli.main(["inspect", good_profile]) == 0
    out = capsys.readouterr().out
    assert "program:         demo" in out
    assert "samples:         2, censored 1 (50.0%)" in out
    assert "lifetime 3.000 ms" in out
    assert "censored, age >= 9.000 ms" in out
    assert "top true+0x234" in out  # the mapping is /bin/true


def _assert_inspect_fails(path, reason, capsys):
    with pytest.raises(ProfileFormatError, match=reason) as e:
        read_profile(path)
    assert str(path) in str(e.value)
    assert cli.main(["inspect", str(path)]) == 1
    err = capsys.readouterr().err
    assert str(path) in err and "error" in err


@pytest.mark.parametrize("cut", [3, 14, 40])
def test_truncated_file_is_a_clear_error(good_profile, cut, capsys):
    data = open(good_profile, "rb").read()
    open(good_profile, "wb").write(data[: len(data) - cut])
    _assert_inspect_fails(good_profile, "truncated", capsys)


def test_corrupt_byte_is_a_clear_error(good_profile, capsys):
    data = bytearray(open(good_profile, "rb").read())
    data[30] ^= 0xFF
    open(good_profile, "wb").write(bytes(data))
    _assert_inspect_fails(good_profile, "corrupt", capsys)


def test_not_a_profile_is_a_clear_error(tmp_path, capsys):
    path = tmp_path / "notes.ltprof"
    path.write_text("this is not a profile at all, just text\n")
    _assert_inspect_fails(path, "corrupt", capsys)


def test_empty_file_is_a_clear_error(tmp_path, capsys):
    path = tmp_path / "empty.ltprof"
    path.write_bytes(b"")
    _assert_inspect_fails(path, "empty", capsys)


def test_missing_file_is_a_clear_error(tmp_path, capsys):
    _assert_inspect_fails(tmp_path / "nope.ltprof", "no such file", capsys)


def test_missing_header_and_unknown_stack(tmp_path, capsys):
    chunks = _chunks()
    path = tmp_path / "noheader.ltprof"
    write_profile(str(path), chunks[1:])
    _assert_inspect_fails(path, "no header", capsys)
    chunks[0].stacks[0].id = 8
    path = tmp_path / "nostack.ltprof"
    write_profile(str(path), chunks)
    _assert_inspect_fails(path, "never defined", capsys)


def test_unsupported_schema_version(tmp_path, capsys):
    chunks = _chunks()
    chunks[0].header.schema_version = 99
    path = tmp_path / "future.ltprof"
    write_profile(str(path), chunks)
    _assert_inspect_fails(path, "unsupported schema version 99", capsys)


def test_container_is_readable_by_beam(good_profile):
    """Beam's own TFRecord reader accepts the container (so jobs can read it in parallel)."""
    import apache_beam as beam
    from apache_beam.testing.test_pipeline import TestPipeline
    from apache_beam.testing.util import assert_that, equal_to

    with TestPipeline() as p:
        programs = (p
                    | beam.io.ReadFromTFRecord(good_profile)
                    | beam.Map(lambda b: profile_pb2.ProfileChunk.FromString(b).header.program))
        assert_that(programs, equal_to(["demo", ""]))


def test_profile_without_command_is_a_usage_error(capsys):
    assert cli.main(["profile", "--out", os.devnull]) == 1
    assert "lifetime profile: error: no command given" in capsys.readouterr().err


def test_lenient_read_keeps_the_good_part_and_reports_the_rest(good_profile):
    data = open(good_profile, "rb").read()
    open(good_profile, "wb").write(data[:-5])  # truncate the last chunk
    errors = []
    p = read_profile(good_profile, errors)
    assert [s.size for s in p.samples] == [100]
    assert p.trailer is None
    assert len(errors) == 1 and "truncated" in str(errors[0]) and good_profile in str(errors[0])


def test_lenient_read_skips_a_record_with_a_bad_checksum(tmp_path):
    chunks = _chunks()
    middle = profile_pb2.ProfileChunk()
    middle.samples.add(stack_id=7, size=300, weight=1.0)
    path = str(tmp_path / "bad-middle.ltprof")
    write_profile(path, [chunks[0], middle, chunks[1]])
    data = bytearray(open(path, "rb").read())
    first_len = int.from_bytes(data[:8], "little")
    data[12 + first_len + 4 + 12 + 2] ^= 0xFF  # a data byte of the middle record
    open(path, "wb").write(bytes(data))
    errors = []
    p = read_profile(path, errors)
    assert [s.size for s in p.samples] == [100, 200]
    assert len(errors) == 1 and "record 1" in str(errors[0]) and "checksum" in str(errors[0])
