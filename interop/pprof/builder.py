"""A pprof `Profile` message built up piece by piece, every table deduplicated.

pprof's profile.proto refers to everything by index or id: strings by their index in
`string_table` (index 0 is ""), functions and locations and mappings by nonzero ids.
`ProfileBuilder` interns each string, function (name, system name, file), location
(process, address) and mapping once, and numbers them in order of first use, so the
same input always gives the same message.  `serialize` gzips it as pprof reads it
(mtime 0, no file name in the gzip header: same bytes every time).
"""

from __future__ import annotations

import gzip

try:
    from interop.pprof import profile_pb2
except ImportError as e:  # pragma: no cover - only before the build step
    raise ImportError(
        "interop/pprof/profile_pb2.py is generated at build time; run `make setup`") from e


class ProfileBuilder:
    def __init__(self) -> None:
        self.profile = profile_pb2.Profile()
        self.profile.string_table.append("")
        self._strings: dict[str, int] = {"": 0}
        self._functions: dict[tuple[str, str, str], int] = {}
        self._locations: dict[tuple, int] = {}
        self._mappings: dict[tuple, int] = {}

    def string(self, s: str) -> int:
        """The string's index in the string table."""
        index = self._strings.get(s)
        if index is None:
            index = self._strings[s] = len(self.profile.string_table)
            self.profile.string_table.append(s)
        return index

    def value_type(self, message, type_: str, unit: str) -> None:
        message.type = self.string(type_)
        message.unit = self.string(unit)

    def mapping_id(self, key) -> int:
        """The id of a mapping added before under this key."""
        return self._mappings[key]

    def mapping(self, key, start: int, limit: int, file_offset: int, path: str,
                build_id_hex: str, has_inline_frames: bool) -> int:
        """The id of a mapping, added the first time its key is seen.  Every location
        we write carries its function names (ours), so pprof has nothing to look up:
        has_functions; we know no source files or lines."""
        mid = self._mappings.get(key)
        if mid is None:
            m = self.profile.mapping.add(
                id=len(self.profile.mapping) + 1, memory_start=start, memory_limit=limit,
                file_offset=file_offset, filename=self.string(path),
                build_id=self.string(build_id_hex), has_functions=True,
                has_inline_frames=has_inline_frames)
            mid = self._mappings[key] = m.id
        return mid

    def function(self, name: str, system_name: str, filename: str = "") -> int:
        key = (name, system_name, filename)
        fid = self._functions.get(key)
        if fid is None:
            fid = self._functions[key] = len(self.profile.function) + 1
            self.profile.function.add(id=fid, name=self.string(name),
                                      system_name=self.string(system_name),
                                      filename=self.string(filename))
        return fid

    def location_id(self, key) -> int | None:
        """The id of a location added before under this key, or None."""
        return self._locations.get(key)

    def add_location(self, key, address: int, mapping_id: int,
                     functions: list[tuple[str, str]]) -> int:
        """Adds a location; `functions` (name, system name) innermost first: the inlined
        functions, then the physical one (one pprof Line each, as pprof wants)."""
        lid = self._locations[key] = len(self.profile.location) + 1
        loc = self.profile.location.add(id=lid, mapping_id=mapping_id, address=address)
        for name, system_name in functions:
            loc.line.add(function_id=self.function(name, system_name))
        return lid

    def serialize(self) -> bytes:
        """The gzipped message, byte-identical for an identical message."""
        return gzip.compress(self.profile.SerializeToString(deterministic=True), mtime=0)
