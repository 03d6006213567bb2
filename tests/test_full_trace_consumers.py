"""A recorded full trace (compact rows, issue 23) and the same trace written as Sample
messages give the consumers the same results: `lifetime inspect`, the simulator's
converter (trace bytes and side file) and the dataset job's per-stack statistics."""

from __future__ import annotations

import json
import os

from profile_format import ProfileReader, container, profile_pb2
from tests.sampler_support import profile_files, run_sampled

FULL = {"LIFETIME_FULL_TRACE": "1"}


def _as_sample_messages(path: str, out: str) -> None:
    """The file's records again, each chunk's compact rows as its Sample messages."""
    chunks = []
    for data in container.iter_records(path):
        chunk = profile_pb2.ProfileChunk.FromString(data)
        if chunk.HasField("compact_samples"):
            expanded = profile_pb2.ProfileChunk.FromString(
                container.expand_compact(chunk.compact_samples))
            censored = list(chunk.samples)
            chunk.ClearField("compact_samples")
            del chunk.samples[:]
            chunk.samples.extend(list(expanded.samples) + censored)
        chunks.append(chunk)
    container.write_profile(out, chunks)


def test_consumers_see_the_same_trace(bins, tmp_path):
    run_sampled([bins["full_trace"], "seq", "3000"], tmp_path / "p", extra_env=FULL)
    compact, = profile_files(tmp_path / "p")
    plain = str(tmp_path / "plain.ltprof")
    _as_sample_messages(compact, plain)
    assert any(profile_pb2.ProfileChunk.FromString(d).HasField("compact_samples")
               for d in container.iter_records(compact))
    assert os.path.getsize(plain) > 2 * os.path.getsize(compact)

    a, b = ProfileReader(compact), ProfileReader(plain)
    sa, sb = list(a.samples()), list(b.samples())
    assert len(sa) > 3000 and sa == sb and a.problems == b.problems == []

    from profile_format.summary import summarize_file
    ta, _ = summarize_file(compact, 20)
    tb, _ = summarize_file(plain, 20)
    assert ta.replace(compact, "F") == tb.replace(plain, "F")

    from simulator.convert import convert_profile, stacks_path
    ra = convert_profile(compact, tmp_path / "a.lttrace")
    rb = convert_profile(plain, tmp_path / "b.lttrace")
    assert (tmp_path / "a.lttrace").read_bytes() == (tmp_path / "b.lttrace").read_bytes()
    ja = json.loads(open(stacks_path(tmp_path / "a.lttrace")).read())
    jb = json.loads(open(stacks_path(tmp_path / "b.lttrace")).read())
    for j in (ja, jb):
        j.pop("trace")
        j["source"].pop("profile")
        j["counts"].pop("seconds")  # how long converting took
    assert ja == jb and ra.__class__ is rb.__class__

    from pipeline.context_stats import stack_stats
    for clock in ("wall", "bytes"):
        pa = stack_stats(ProfileReader(compact).samples(), clock)
        pb_ = stack_stats(ProfileReader(plain).samples(), clock)
        assert pa.keys() == pb_.keys()
        assert all(pa[k].summary() == pb_[k].summary() for k in pa)
