"""Seed inputs for the fuzzers: small valid profiles, the mutants that once broke the
readers, and, when the sampler is built, a real profile of a real program; for the
importers and the pprof converter (`target_seeds`), the real recordings committed
under tests/data and the inputs that once broke them (issue 20)."""

from __future__ import annotations

import gzip
import io
import os
import pathlib
import struct
import subprocess

from profile_format import container, profile_pb2

REPO = pathlib.Path(__file__).resolve().parent.parent
SAMPLER = REPO / "build" / "profiler" / "liblifetime_sampler.so"
DATA = REPO / "tests" / "data"
# `heaptrack --raw ls -l /usr/share/doc/heaptrack` (heaptrack 1.4.0), and the same
# recording through heaptrack_interpret (the format the importer refuses).
HEAPTRACK_RAW = DATA / "heaptrack.ls.4242.raw.zst"
HEAPTRACK_INTERPRETED = DATA / "heaptrack.ls.4242.zst"
TCMALLOC = DATA / "tcmalloc_lifetimes.pb.gz"  # TCMalloc's own lifetime profile


def valid_chunks(samples: int = 3) -> list[profile_pb2.ProfileChunk]:
    """A small valid profile of program "demo" (one mapping, /bin/true; stack 7): a
    first chunk with the header and `samples` freed samples of 100, 101, ... bytes
    (lifetime 3 ms), a last chunk with a censored 200-byte sample and the trailer.  The
    fuzzers' seed, and the profile tests/test_profile_container.py reads back."""
    first = profile_pb2.ProfileChunk()
    h = first.header
    h.schema_version = profile_pb2.SCHEMA_VERSION
    h.program, h.pid, h.sampling_interval_bytes, h.max_stack_depth = "demo", 42, 1024, 128
    h.clocks.extend([profile_pb2.CLOCK_MONOTONIC_NS, profile_pb2.CLOCK_ALLOCATED_BYTES])
    first.mappings.add(id=1, start=0x1000, limit=0x9000, path="/bin/true", build_id=b"\x01\x02")
    first.stacks.add(id=7, addresses=[0x1234, 0x2345])
    for i in range(samples):
        first.samples.add(stack_id=7, size=100 + i, alloc_monotonic_ns=1_000_000 + i,
                          free_monotonic_ns=4_000_000 + i, alloc_allocated_bytes=10 * i,
                          free_allocated_bytes=10 * i + 5, alloc_function=profile_pb2.MALLOC,
                          free_function=profile_pb2.FREE, weight=10.5)
    last = profile_pb2.ProfileChunk()
    last.samples.add(stack_id=7, size=200, alloc_monotonic_ns=2_000_000, censored=True,
                     observed_age_ns=9_000_000, weight=5.0)
    last.trailer.end_reason = profile_pb2.END_EXIT
    last.trailer.total_allocations = 1000
    return [first, last]


def _file(chunks: list[profile_pb2.ProfileChunk]) -> bytes:
    buf = io.BytesIO()
    for c in chunks:
        container.write_record(buf, c.SerializeToString(deterministic=True))
    return buf.getvalue()


def mutants() -> dict[str, bytes]:
    """The inputs of issue 12's report, and a few of their neighbours."""
    good = valid_chunks()
    out = {"valid": _file(good), "valid-one-chunk": _file(good[:1])}
    huge = struct.pack("<Q", 1 << 62)
    out["huge-length"] = huge + struct.pack("<I", container.masked_crc32c(huge))
    enum = valid_chunks()
    enum[0].samples[0].alloc_function = 77  # proto3 keeps unknown enum values
    enum[1].trailer.end_reason = 99
    out["unknown-enums"] = _file(enum)
    neg = valid_chunks()
    neg[0].samples[0].free_monotonic_ns = 1  # freed before its allocation
    out["negative-lifetime"] = _file(neg)
    nan = valid_chunks()
    nan[0].samples[0].weight = float("nan")
    nan[0].samples[1].weight = -3.0
    out["bad-weights"] = _file(nan)
    both = valid_chunks()
    both[0].samples[0].censored = True
    out["censored-and-freed"] = _file(both)
    deep = valid_chunks()
    deep[0].stacks[0].addresses.extend(range(0x3000, 0x3000 + 200))
    out["deep-stack"] = _file(deep)
    zero = valid_chunks()
    zero[0].header.sampling_interval_bytes = 0
    out["zero-interval"] = _file(zero)
    dup = valid_chunks()
    out["duplicated-chunk"] = _file([dup[0], dup[0], dup[1]])
    out["truncated"] = out["valid"][:-7]
    out["empty"] = b""
    return out


def real_profile(out_dir: pathlib.Path) -> bytes | None:
    """A profile of `sh -c 'ls -R /usr/share/doc'` from the real sampler, if built."""
    if not SAMPLER.is_file():
        return None
    env = dict(os.environ, LD_PRELOAD=str(SAMPLER), LIFETIME_OUT_DIR=str(out_dir),
               LIFETIME_INTERVAL_BYTES="4096", LIFETIME_SEED="1")
    subprocess.run(["ls", "-R", "/usr/share/doc"], env=env, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=False, timeout=60)
    files = sorted(out_dir.glob("*" + container.SUFFIX), key=lambda p: p.stat().st_size)
    return files[-1].read_bytes() if files else None


def _heaptrack_text() -> bytes:
    import zstandard

    return zstandard.ZstdDecompressor().decompressobj().decompress(HEAPTRACK_RAW.read_bytes())


def _first_lines(text: bytes, limit: int) -> bytes:
    """The whole lines of text within its first `limit` bytes."""
    return text[: text.rindex(b"\n", 0, limit) + 1]


def heaptrack_seeds() -> dict[str, bytes]:
    """The real raw recording (zstd as written, plain, gzip as heaptrack writes it
    without zstd), its interpreted form, a short head of it, and issue 20's lines."""
    text = _heaptrack_text()
    head = _first_lines(text, 2048)
    out = {"raw-zst": HEAPTRACK_RAW.read_bytes(), "raw-plain": text,
           "raw-gz": gzip.compress(text, mtime=0), "raw-head": head,
           "interpreted-zst": HEAPTRACK_INTERPRETED.read_bytes(),
           "cut-zst": HEAPTRACK_RAW.read_bytes()[:1500]}
    # Numbers past what the fields hold (issue 20, item 1), signs int() would take.
    out["out-of-range"] = head + b"+ 10000000000000000 1 aa\nc ffffffffffffffff\n" \
        b"t ffffffffffffffff 1\n+ 8000000000000000 1 bb\nc -5\n- -aa\n"
    out["format-2"] = b"v 10400 2\nx /bin/ls\nm /bin/ls 1000 0 100\nt 1010 0\n+ 10 1 aa\nc 5\n"
    return out


def heaptrack_zst_seeds() -> dict[str, bytes]:
    """Inputs of `heaptrack_zst`: a frame-layout byte, then plain text (heads of the
    recording: small inputs keep the campaign fast; `heaptrack` has the whole one)."""
    text = _heaptrack_text()
    head, longer = _first_lines(text, 2048), _first_lines(text, 4096)
    return {"one-frame": b"\x01" + head, "two-frames": b"\x80" + longer,
            "out-of-range": b"\x01" + heaptrack_seeds()["out-of-range"]}


def tcmalloc_seeds() -> dict[str, bytes]:
    """The real TCMalloc lifetime profile (gzipped as written, and plain), and copies
    with numbers at their fields' limits."""
    from interop.pprof import profile_pb2 as pprof_pb2

    packed = TCMALLOC.read_bytes()
    plain = gzip.decompress(packed)
    out = {"real-gz": packed, "real-plain": plain}
    p = pprof_pb2.Profile.FromString(plain)
    p.location[0].address = (1 << 64) - 1  # its return address would pass 2^64
    p.time_nanos, p.duration_nanos = (1 << 63) - 1, (1 << 63) - 1
    for sample in p.sample:
        sample.value[:] = [(1 << 63) - 1 if v else 0 for v in sample.value]
    p.sample[-1].label[0].key = 10_000  # a string the table does not hold
    out["limits"] = p.SerializeToString(deterministic=True)
    return out


def _one_chunk(chunks: list[profile_pb2.ProfileChunk]) -> bytes:
    """A profile's chunks merged into one, as the payload the `pprof` target frames."""
    merged = profile_pb2.ProfileChunk()
    for c in chunks:
        merged.MergeFrom(c)
    return merged.SerializeToString(deterministic=True)


def pprof_seeds() -> dict[str, bytes]:
    """Profiles for `lifetime pprof`, each as one chunk's payload: the valid one, issue
    20's overflows (a weight of 1e30, sizes of 2^63 and 2^64 - 1, a weight of 1e308 on
    a huge size), and the real heaptrack and TCMalloc recordings of tests/data imported."""
    import tempfile

    from interop import heaptrack, tcmalloc

    out = {"valid": _one_chunk(valid_chunks())}
    huge = valid_chunks()
    huge[0].samples[0].weight = 1e30
    huge[0].samples[1].size = 1 << 63
    huge[0].samples[2].size, huge[0].samples[2].weight = (1 << 64) - 1, 1e308
    huge[0].header.sampling_interval_bytes = 1 << 63
    huge[1].samples[0].observed_age_ns = (1 << 64) - 1
    out["overflow"] = _one_chunk(huge)
    with tempfile.TemporaryDirectory() as tmp:
        for name, importer, source in (("heaptrack", heaptrack, HEAPTRACK_RAW),
                                       ("tcmalloc", tcmalloc, TCMALLOC)):
            converted = os.path.join(tmp, name + container.SUFFIX)
            importer.convert(str(source), converted)
            chunks = [container.parse_chunk(converted, i, r)
                      for i, r in enumerate(container.iter_records(converted))]
            # The executable's mappings only: symbolizing libc and libstdc++ would
            # take the first seconds of every campaign (their frames become tokens).
            exe = chunks[0].header.executable_path
            for c in chunks:
                kept = [m for m in c.mappings if m.path == exe]
                del c.mappings[:]
                c.mappings.extend(kept)
            out["imported-" + name] = _one_chunk(chunks)
    return out


def trace_seeds() -> dict[str, bytes]:
    """Small traces: a valid one, issue 20's huge records (8 TiB, 16 TiB - 1, past the
    format's 16 TiB), a non-zero reserved field, and a cut one."""
    import tempfile

    from simulator import trace as tr

    def write(records, patch=None) -> bytes:
        with tempfile.NamedTemporaryFile(suffix=".lttrace") as f:
            with tr.TraceWriter(f.name) as w:
                for r in records:
                    w.write_record(r)
            blob = bytearray(pathlib.Path(f.name).read_bytes())
        if patch:
            patch(blob)
        return bytes(blob)

    ms = tr.MS
    small = [tr.ObjectRecord(i * ms, i * ms + (5 << i) * ms if i % 3 else None, 16 << i,
                             stack_id=i % 3, thread_id=i % 2, align=16 << (i % 4))
             for i in range(6)]
    out = {"valid": write(small), "size-8TiB": write([tr.ObjectRecord(0, ms, 8 << 40)]),
           "size-16TiB-1": write([tr.ObjectRecord(0, None, (16 << 40) - 1)]),
           "size-16TiB": write([tr.ObjectRecord(0, ms, 16 << 40)]),
           "reserved": write(small, lambda b: struct.pack_into("<Q", b, 40, 7))}
    out["cut"] = out["valid"][:-13]
    return out


def options_seeds() -> dict[str, bytes]:
    """Command lines of every subcommand (NUL-separated), with and without the
    values issue 20 found accepted."""
    lines = [
        ["inspect", "--samples", "5", "p.ltprof"], ["inspect", "--samples", "-1", "p.ltprof"],
        ["build-dataset", "--profiles", "d", "--out", "o", "--max-frames", "16",
         "--boundaries", "10,100,1000", "--vocab-size", "5000", "--shards", "2",
         "--eval-percent", "20", "--clock", "wall"],
        ["build-dataset", "--profiles", "d", "--out", "o", "--max-frames", "1000000000",
         "--boundaries", "nan,inf"],
        ["characterize", "--profiles", "d", "--out", "o", "--boundaries", "1,2"],
        ["train", "--dataset", "d", "--out", "m", "--learning-rate", "3e-3", "--epochs", "60",
         "--batch-size", "256", "--unk-dropout", "0.1", "--weight-power", "0.5"],
        ["train", "--dataset", "d", "--out", "m", "--learning-rate", "nan"],
        ["evaluate", "--model", "m", "--dataset", "d", "--split", "all"],
        ["report", "--model", "m", "--train", "d", "--test", "t", "--out", "r",
         "--fractions", "0,2"],
        ["evaluate-online", "p", "--model", "m", "--boundaries", "1,10", "--json", "x.json"],
        ["simulate", "t.lttrace", "--train", "d", "--out", "o", "--deadline-k", "2",
         "--series-interval-ms", "100", "--run-records", "1000", "--model-revalidate-every", "5"],
        ["pprof", "p", "-o", "x.pb.gz", "--view", "allocations", "--group-by-class"],
        ["import", "--format", "heaptrack", "f", "-o", "o", "--version-label", "v"],
        ["profile", "--interval", "99999999999999999999999", "--out", "o", "--", "true"],
        ["export", "m", "--out", "e", "--graph", "folded"],
    ]
    return {f"{i:02d}-{argv[0]}": "\0".join(argv).encode() for i, argv in enumerate(lines)}


# Seeds of the targets that read something other than our profiles.
TARGET_SEEDS = {"heaptrack": heaptrack_seeds, "heaptrack_zst": heaptrack_zst_seeds,
                "tcmalloc": tcmalloc_seeds, "pprof": pprof_seeds, "trace": trace_seeds,
                "options": options_seeds}


def target_seeds(target: str) -> dict[str, bytes]:
    """The seeds of one fuzz target (the profile mutants for the profile readers)."""
    return TARGET_SEEDS[target]() if target in TARGET_SEEDS else mutants()


def write_seeds(corpus: pathlib.Path, real: bool = True, target: str | None = None) -> int:
    """Writes the seed corpus of `target` (default: the profile readers'); returns
    the number of seeds."""
    corpus.mkdir(parents=True, exist_ok=True)
    seeds = target_seeds(target) if target else mutants()
    if real and target not in TARGET_SEEDS:
        scratch = corpus.parent / (corpus.name + ".real")
        scratch.mkdir(exist_ok=True)
        data = real_profile(scratch)
        if data:
            seeds["real-ls"] = data
    for name, data in seeds.items():
        (corpus / name).write_bytes(data)
    return len(seeds)
