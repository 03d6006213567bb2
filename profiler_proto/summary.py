"""Human-readable summary of one profile file (`lifetime inspect`)."""

from __future__ import annotations

import bisect
import datetime
import os

from profiler_proto import profile_pb2
from profiler_proto.container import Profile

_NS_PER_MS = 1e6


def lifetime_ms(sample: profile_pb2.Sample) -> float:
    """Observed lifetime in ms; for a censored sample, its age at the end (a lower bound)."""
    if sample.censored:
        return sample.observed_age_ns / _NS_PER_MS
    return (sample.free_monotonic_ns - sample.alloc_monotonic_ns) / _NS_PER_MS


def _locate(profile: Profile, address: int) -> str:
    """'module+0xoffset' for an address, through the profile's mappings."""
    mappings = sorted(profile.mappings, key=lambda m: m.start)
    i = bisect.bisect_right([m.start for m in mappings], address) - 1
    if i >= 0 and address < mappings[i].limit:
        m = mappings[i]
        return f"{os.path.basename(m.path)}+{address - m.start + m.file_offset:#x}"
    return f"{address:#x} (unmapped)"


def _time(unix_ns: int) -> str:
    return datetime.datetime.fromtimestamp(unix_ns / 1e9, datetime.timezone.utc).isoformat(
        timespec="milliseconds")


def summarize(profile: Profile, max_samples: int = 5) -> str:
    h, t = profile.header, profile.trailer
    clocks = ", ".join(profile_pb2.Clock.Name(c) for c in h.clocks)
    lines = [
        f"file:            {profile.path}",
        f"program:         {h.program} ({h.executable_path})",
        f"version label:   {h.version_label or '-'}",
        f"command line:    {' '.join(h.argv)}",
        f"host / pid:      {h.hostname} / {h.pid} (parent {h.parent_pid}"
        + (f", forked from {h.forked_from_pid})" if h.forked_from_pid else ")"),
        f"started:         {_time(h.start_time_unix_ns)}",
        f"interval:        {h.sampling_interval_bytes} bytes; clocks: {clocks}",
        f"sampler:         {h.sampler_version}, max {h.max_stack_depth} frames",
    ]
    if t is None:
        lines.append("ended:           no trailer (killed before its final flush?); "
                     "data up to the last periodic flush is kept")
    else:
        elapsed_s = (t.end_monotonic_ns - h.start_monotonic_ns) / 1e9
        lines += [
            f"ended:           {_time(t.end_time_unix_ns)} after {elapsed_s:.2f} s "
            f"({profile_pb2.EndReason.Name(t.end_reason)})",
            f"allocations:     {t.total_allocations} ({t.total_allocated_bytes} bytes)",
            f"dropped:         {t.dropped_samples} samples, {t.dropped_stacks} stacks "
            "(bounded tables full)",
        ]
    censored = sum(s.censored for s in profile.samples)
    lines += [
        f"chunks:          {profile.chunks}",
        f"mappings:        {len(profile.mappings)} "
        f"({sum(bool(m.build_id) for m in profile.mappings)} with a build id)",
        f"stacks:          {len(profile.stacks)}",
        f"samples:         {len(profile.samples)}, censored {censored} "
        f"({profile.censored_share:.1%})",
    ]
    if profile.samples:
        lines.append("first samples:")
    for s in profile.samples[:max_samples]:
        stack = profile.stacks[s.stack_id]
        top = _locate(profile, stack.addresses[0]) if stack.addresses else "-"
        state = "censored, age >=" if s.censored else "lifetime"
        lines.append(
            f"  {profile_pb2.AllocFunction.Name(s.alloc_function):<14} {s.size:>9} B  "
            f"{state} {lifetime_ms(s):.3f} ms  weight {s.weight:.1f}  "
            f"{len(stack.addresses)} frames, top {top}")
    return "\n".join(lines)
