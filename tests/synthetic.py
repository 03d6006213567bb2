"""Synthetic profiles over a real ELF binary, for dataset tests that need known lifetimes.

The stacks point into functions of tests/native/sites.c, compiled by the caller, so
symbolization is real; only the samples' times are chosen by the test.
"""

from __future__ import annotations

import pathlib
import subprocess

from elftools.elf.elffile import ELFFile

from profile_format import profile_pb2, write_profile

SITES_C = pathlib.Path(__file__).parent / "native" / "sites.c"
LOAD = 0x400000  # where the synthetic process "mapped" the binary


def build_sites(out_dir: pathlib.Path) -> tuple[str, dict[str, int]]:
    """Compiles sites.c (non-PIE); returns its path and {function: runtime address}."""
    binary = str(out_dir / "sites")
    subprocess.run(["gcc", "-O1", "-g", "-no-pie", "-Wl,--build-id=0x1234abcd", "-o", binary,
                    str(SITES_C)], check=True)
    with open(binary, "rb") as f:
        elf = ELFFile(f)
        symbols = {s.name: s["st_value"] for s in elf.get_section_by_name(".symtab").iter_symbols()
                   if s["st_info"]["type"] == "STT_FUNC" and s["st_size"] > 0}
        load = next(seg for seg in elf.iter_segments()
                    if seg["p_type"] == "PT_LOAD" and seg["p_offset"] == 0)
        base = load["p_vaddr"]
    return binary, {name: LOAD + value - base for name, value in symbols.items()}


def make_profile(path: str, binary: str, addresses: dict[str, int],
                 samples: list[tuple[str, float, bool]], program: str = "sites",
                 version_label: str = "", build_id: bytes = bytes.fromhex("1234abcd"),
                 interval: int = 1024, **header) -> None:
    """samples: (site function, lifetime ms (age if censored), censored); `header`:
    other Header fields (imported_from=..., lifetimes_derived=...)."""
    chunk = profile_pb2.ProfileChunk()
    h = chunk.header
    h.schema_version = profile_pb2.SCHEMA_VERSION
    h.program, h.version_label, h.pid = program, version_label, 1
    h.sampling_interval_bytes = interval
    for field, value in header.items():
        setattr(h, field, value)
    chunk.mappings.add(id=1, start=LOAD, limit=LOAD + 0x100000, file_offset=0, path=binary,
                       build_id=build_id)
    stack_ids = {}
    for site in sorted({s for s, _, _ in samples}):
        stack_ids[site] = len(stack_ids) + 1
        # leaf first: a return address inside the site, then main
        chunk.stacks.add(id=stack_ids[site], addresses=[addresses[site] + 4, addresses["main"] + 8])
    t = 1_000_000
    for site, ms, censored in samples:
        s = chunk.samples.add(stack_id=stack_ids[site], size=64, weight=17.0,
                              alloc_monotonic_ns=t, alloc_function=profile_pb2.MALLOC)
        if censored:
            s.censored, s.observed_age_ns = True, int(ms * 1e6)
        else:
            s.free_monotonic_ns = t + int(ms * 1e6)
            s.free_function = profile_pb2.FREE
        t += 1000
    end = profile_pb2.ProfileChunk()
    end.trailer.end_reason = profile_pb2.END_EXIT
    write_profile(path, [chunk, end])
