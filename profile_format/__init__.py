"""The profile schema (profile.proto) and its file container.

`profile_pb2` is generated from profile.proto at build time (`make setup`).
"""

try:
    from profile_format import profile_pb2
except ImportError as e:  # pragma: no cover - only before the build step
    raise ImportError(
        "profile_format/profile_pb2.py is generated at build time; run `make setup`") from e

from profile_format.container import (  # noqa: E402
    CATEGORIES, SUFFIX, Profile, ProfileFormatError, ProfileReader, enum_name, iter_records,
    read_profile, stream_profile, write_profile)

__all__ = ["CATEGORIES", "SUFFIX", "Profile", "ProfileFormatError", "ProfileReader",
           "enum_name", "iter_records", "profile_pb2", "read_profile", "stream_profile",
           "write_profile"]
