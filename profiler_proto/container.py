"""Reading and writing profile files.

A profile file is a TFRecord file whose records are serialized
`ProfileChunk` messages (see README.md beside this file).  TFRecord framing,
per record:

    uint64  length            (little endian)
    uint32  masked_crc32c(length bytes)
    bytes   data[length]
    uint32  masked_crc32c(data)

Beam's `ReadFromTFRecord` and `tf.data.TFRecordDataset` read the same files.
"""

from __future__ import annotations

import dataclasses
import os
import struct
from typing import BinaryIO, Iterator

import google_crc32c

from profiler_proto import profile_pb2
from lifetime.errors import LifetimeError

SUFFIX = ".ltprof"
_MASK_DELTA = 0xA282EAD8
_HEADER = struct.Struct("<QI")
_FOOTER = struct.Struct("<I")


class ProfileFormatError(LifetimeError):
    """A profile file that cannot be read; the message names the file."""

    def __init__(self, path: str, reason: str):
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


def masked_crc32c(data: bytes) -> int:
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def iter_records(path: str) -> Iterator[bytes]:
    """Yields each record's data; raises ProfileFormatError at the first bad one."""
    with open(path, "rb") as f:
        for data, bad in _records(f, path):
            if bad:
                raise bad
            yield data


def _records(f: BinaryIO, path: str) -> Iterator[tuple[bytes, ProfileFormatError | None]]:
    """Yields (data, None), or (b"", error) for a record whose data checksum fails:
    its framing is intact, so reading goes on.  A broken framing raises."""
    index = 0
    while True:
        offset = f.tell()
        head = f.read(_HEADER.size)
        if not head:
            return
        if len(head) < _HEADER.size:
            raise ProfileFormatError(
                path, f"truncated: record {index} at byte {offset} has a partial header")
        length, length_crc = _HEADER.unpack(head)
        if masked_crc32c(head[:8]) != length_crc:
            raise ProfileFormatError(
                path, f"corrupt: record {index} at byte {offset} has a bad length checksum "
                "(not a profile file, or damaged)")
        data = f.read(length)
        foot = f.read(_FOOTER.size)
        if len(data) < length or len(foot) < _FOOTER.size:
            raise ProfileFormatError(
                path, f"truncated: record {index} at byte {offset} needs {length} bytes, "
                "file ends first")
        if masked_crc32c(data) != _FOOTER.unpack(foot)[0]:
            yield b"", ProfileFormatError(
                path, f"corrupt: record {index} at byte {offset} fails its data checksum")
        else:
            yield data, None
        index += 1


def write_record(f: BinaryIO, data: bytes) -> None:
    length = struct.pack("<Q", len(data))
    f.write(length + struct.pack("<I", masked_crc32c(length)))
    f.write(data + _FOOTER.pack(masked_crc32c(data)))


def write_profile(path: str, chunks: list[profile_pb2.ProfileChunk]) -> None:
    """Writes chunks as a profile file (tests and tools; the sampler writes its own)."""
    with open(path, "wb") as f:
        for chunk in chunks:
            write_record(f, chunk.SerializeToString(deterministic=True))


@dataclasses.dataclass
class Profile:
    """One process's profile, with its chunks merged."""

    path: str
    header: profile_pb2.Header
    mappings: list[profile_pb2.Mapping]
    stacks: dict[int, profile_pb2.Stack]
    samples: list[profile_pb2.Sample]
    trailer: profile_pb2.Trailer | None
    chunks: int

    @property
    def censored_share(self) -> float:
        if not self.samples:
            return 0.0
        return sum(s.censored for s in self.samples) / len(self.samples)


def parse_chunk(path: str, index: int, data: bytes) -> profile_pb2.ProfileChunk:
    chunk = profile_pb2.ProfileChunk()
    try:
        chunk.ParseFromString(data)
    except Exception as e:  # protobuf raises DecodeError, sometimes others
        raise ProfileFormatError(path, f"corrupt: record {index} is not a ProfileChunk ({e})")
    return chunk


def read_profile(path: str,
                 errors: list[ProfileFormatError] | None = None) -> Profile | None:
    """Reads and checks a whole profile file.

    Strict by default: the first problem raises ProfileFormatError.  With an
    `errors` list, problems are appended there instead and the good part is kept:
    every chunk before an unreadable record, and every sample whose stack is known.
    Returns None only if nothing usable (no header) was found.
    """
    def fail(reason: str) -> None:
        error = ProfileFormatError(path, reason)
        if errors is None:
            raise error
        errors.append(error)

    if not os.path.exists(path):
        fail("no such file")
        return None
    if os.path.isdir(path):
        fail("is a directory, not a profile file")
        return None
    profile = None
    index = 0
    with open(path, "rb") as f:
        records = _records(f, path)
        while True:
            try:
                data, bad = next(records)
            except StopIteration:
                break
            except ProfileFormatError as e:  # the framing is lost: nothing after is readable
                fail(e.reason)
                break
            if bad:
                fail(bad.reason)
                index += 1
                continue
            profile = _add_chunk(path, index, data, profile, fail)
            index += 1
    if profile is None:
        if index == 0 and os.path.getsize(path) == 0:
            fail("empty: the file holds no records")
        return None
    missing = {s.stack_id for s in profile.samples} - profile.stacks.keys()
    if missing:
        fail(f"corrupt: {len(missing)} stack ids used by samples are never defined "
             f"(e.g. {min(missing)}); those samples are dropped")
        profile.samples = [s for s in profile.samples if s.stack_id not in missing]
    return profile


def _add_chunk(path, index, data, profile, fail):
    """Merges one record into the profile (started by the first); returns the profile."""
    try:
        chunk = parse_chunk(path, index, data)
        if profile is None:
            profile = _start_profile(path, chunk)
        elif chunk.HasField("header"):
            raise ProfileFormatError(path, f"corrupt: record {index} repeats the header")
        if profile.trailer is not None:
            raise ProfileFormatError(path, f"corrupt: record {index} follows the trailer")
    except ProfileFormatError as e:
        fail(e.reason)
        return profile
    profile.mappings.extend(chunk.mappings)
    for stack in chunk.stacks:
        profile.stacks[stack.id] = stack
    profile.samples.extend(chunk.samples)
    if chunk.HasField("trailer"):
        profile.trailer = chunk.trailer
    profile.chunks += 1
    return profile


def _start_profile(path: str, chunk: profile_pb2.ProfileChunk) -> Profile:
    if not chunk.HasField("header"):
        raise ProfileFormatError(path, "corrupt: the first record has no header")
    version = chunk.header.schema_version
    if version != profile_pb2.SCHEMA_VERSION:
        raise ProfileFormatError(
            path, f"unsupported schema version {version} (this reader knows "
            f"{profile_pb2.SCHEMA_VERSION})")
    return Profile(path=path, header=chunk.header, mappings=[], stacks={}, samples=[],
                   trailer=None, chunks=0)
