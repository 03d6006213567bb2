"""Helpers shared by the symbolizer tests (test_symbolize, test_dwarf_inline,
test_debug_files): reading what a test program prints, rewriting mappings."""

from profile_format import profile_pb2


def parse_run(output, build_ids):
    """(name -> address, executable mappings) from a test program's output: its
    "name 0xADDR" lines and its /proc/self/maps as "map ..." lines."""
    addresses, mappings = {}, []
    for line in output.splitlines():
        if line.startswith("map "):
            fields = line[4:].split(maxsplit=5)
            if len(fields) < 6 or "x" not in fields[1]:
                continue
            start, limit = (int(x, 16) for x in fields[0].split("-"))
            path = fields[5].strip()
            mappings.append(profile_pb2.Mapping(
                id=len(mappings) + 1, start=start, limit=limit, file_offset=int(fields[2], 16),
                path=path, build_id=build_ids.get(path, b"")))
        else:
            name, value = line.split()
            addresses[name] = int(value, 16)
    return addresses, mappings


def with_path(mappings, old, new, build_id=None):
    """The mappings with old's path (and build id, if given) replaced."""
    out = []
    for m in mappings:
        m2 = profile_pb2.Mapping()
        m2.CopyFrom(m)
        if m.path == old:
            m2.path = new
            if build_id is not None:
                m2.build_id = build_id
        out.append(m2)
    return out


def name_at(symbolizer, address, is_return_address=False):
    """The one frame's function name at address."""
    [frame] = symbolizer.symbolize_address(address, is_return_address)
    return frame.function
