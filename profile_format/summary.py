"""Human-readable summary of one profile file (`lifetime inspect`).

`summarize_file(path)` streams the file (memory: one chunk plus the stack and mapping
tables) and reports its problems; `summarize(profile)` renders a profile already read
with `read_profile`.  Every string that comes from the file goes through `printable`,
so control characters in a program name, path or argument never reach the terminal.
"""

from __future__ import annotations

import bisect
import collections
import datetime
import os

from core.errors import printable
from profile_format import profile_pb2
from profile_format.container import (
    Profile, ProfileFormatError, ProfileReader, enum_name)

_NS_PER_MS = 1e6


def lifetime_ms(sample: profile_pb2.Sample) -> float:
    """Observed lifetime in ms; for a censored sample, its age at the end (a lower bound)."""
    if sample.censored:
        return sample.observed_age_ns / _NS_PER_MS
    return (sample.free_monotonic_ns - sample.alloc_monotonic_ns) / _NS_PER_MS


def _locate(mappings: list, address: int) -> str:
    """'module+0xoffset' for an address, through the profile's mappings."""
    mappings = sorted(mappings, key=lambda m: m.start)
    i = bisect.bisect_right([m.start for m in mappings], address) - 1
    if i >= 0 and address < mappings[i].limit:
        m = mappings[i]
        return (f"{printable(os.path.basename(m.path))}"
                f"+{address - m.start + m.file_offset:#x}")
    return f"{address:#x} (unmapped)"


def _time(unix_ns: int) -> str:
    try:
        return datetime.datetime.fromtimestamp(unix_ns / 1e9, datetime.timezone.utc).isoformat(
            timespec="milliseconds")
    except (OverflowError, ValueError, OSError):
        return f"{unix_ns} ns after the epoch (out of range)"


def _counts(counter: collections.Counter) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counter.items()))


def _render(path, header, trailer, mappings, stacks, chunks, samples, censored, first,
            dropped, unknown_enums, problems) -> str:
    h, t = header, trailer
    clocks = ", ".join(enum_name(profile_pb2.Clock, c) for c in h.clocks)
    lines = [
        f"file:            {printable(path)}",
        f"program:         {printable(h.program)} ({printable(h.executable_path)})",
        f"version label:   {printable(h.version_label) or '-'}",
        f"command line:    {printable(' '.join(h.argv))}",
        f"host / pid:      {printable(h.hostname)} / {h.pid} (parent {h.parent_pid}"
        + (f", forked from {h.forked_from_pid})" if h.forked_from_pid else ")"),
        f"started:         {_time(h.start_time_unix_ns)}",
        (f"recording:       full trace (every allocation; live table of {h.live_capacity}); "
         f"clocks: {clocks}" if h.full_trace else
         f"interval:        {h.sampling_interval_bytes} bytes; clocks: {clocks}"),
        f"sampler:         {printable(h.sampler_version)}, max {h.max_stack_depth} frames",
    ]
    if h.model_id:
        lines.append(f"model:           {printable(h.model_id)} ({printable(h.model_path)})")
    if t is None:
        lines.append("ended:           no trailer (killed before its final flush?); "
                     "data up to the last periodic flush is kept")
    else:
        elapsed_s = (t.end_monotonic_ns - h.start_monotonic_ns) / 1e9
        lines += [
            f"ended:           {_time(t.end_time_unix_ns)} after {elapsed_s:.2f} s "
            f"({enum_name(profile_pb2.EndReason, t.end_reason)})",
            f"allocations:     {t.total_allocations} ({t.total_allocated_bytes} bytes)",
            f"dropped:         {t.dropped_samples} samples, {t.dropped_stacks} stacks "
            "(bounded tables full)",
        ]
    share = censored / samples if samples else 0.0
    lines += [
        f"chunks:          {chunks}",
        f"mappings:        {len(mappings)} "
        f"({sum(bool(m.build_id) for m in mappings)} with a build id)",
        f"stacks:          {len(stacks)}",
        f"samples:         {samples}, censored {censored} ({share:.1%})",
    ]
    if dropped:
        lines.append(f"samples dropped: {sum(dropped.values())} ({_counts(dropped)})")
    if unknown_enums:
        lines.append("unknown values:  " + ", ".join(
            f"{field} UNKNOWN({value}) x{n}" for (field, value), n in sorted(unknown_enums.items())))
    if problems:
        by = collections.Counter(p.category for p in problems)
        lines.append(f"problems:        {len(problems)} ({_counts(by)})")
    if first:
        lines.append("first samples:")
    for s in first:
        stack = stacks.get(s.stack_id)
        addresses = list(stack.addresses) if stack is not None else []
        top = _locate(mappings, addresses[0]) if addresses else "-"
        state = "censored, age >=" if s.censored else "lifetime"
        lines.append(
            f"  {enum_name(profile_pb2.AllocFunction, s.alloc_function):<14} {s.size:>9} B  "
            f"{state} {lifetime_ms(s):.3f} ms  weight {s.weight:.1f}  "
            f"{len(addresses)} frames, top {top}")
    return "\n".join(lines)


def summarize(profile: Profile, max_samples: int = 5) -> str:
    """The summary of a profile read with read_profile (whole file in memory)."""
    return _render(profile.path, profile.header, profile.trailer, profile.mappings,
                   profile.stacks, profile.chunks, len(profile.samples),
                   sum(s.censored for s in profile.samples),
                   profile.samples[:max(0, max_samples)],
                   getattr(profile, "dropped", None) or collections.Counter(),
                   getattr(profile, "unknown_enums", None) or collections.Counter(), [])


def summarize_file(path: str, max_samples: int = 5
                   ) -> tuple[str | None, list[ProfileFormatError]]:
    """Streams one profile file: (summary text, or None when the file has no usable
    header; every problem found, each naming the file and where).  Whatever the
    bytes, raises nothing but what a closed stdout would."""
    reader = ProfileReader(path)
    first = []
    for s in reader.samples():
        if len(first) < max_samples:
            copy = profile_pb2.Sample()
            copy.CopyFrom(s)  # so the chunk it came from can be freed
            first.append(copy)
    if reader.header is None:
        return None, reader.problems
    text = _render(path, reader.header, reader.trailer, reader.mappings, reader.stacks,
                   reader.chunks, reader.kept, reader.censored, first, reader.dropped,
                   reader.unknown_enums, reader.problems)
    return text, reader.problems
