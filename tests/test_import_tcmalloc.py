"""`lifetime import --format tcmalloc`: TCMalloc lifetime profiles -> .ltprof.

tests/data/tcmalloc_lifetimes.pb.gz is a real profile: TCMalloc (from the crates.io
crate libtcmalloc-sys 0.1.14) profiling interop/tools/tcmalloc_lifetime_driver.cc,
written by TCMalloc's own profile builder (interop/tools/tcmalloc_lifetime_profile.sh
made it; its driver is not on this machine, so its frames stay unnamed here).  The
label rule is checked on profiles built in TCMalloc's layout (interop/tcmalloc.py's
docstring) over tests/native/sites.c, so symbolization is real there.
"""

import gzip
import json
import math
import os

import pytest

from interop import importing, tcmalloc
from interop.pprof import profile_pb2 as pprof
from lifetime import cli
from core.errors import InputError
from core import context, lifetimes
from profile_format import profile_pb2, read_profile
from tests.synthetic import LOAD

REAL = os.path.join(os.path.dirname(__file__), "data", "tcmalloc_lifetimes.pb.gz")
MS = 1_000_000
TYPES = [("allocated_objects", "count"), ("allocated_space", "bytes"),
         ("deallocated_objects", "count"), ("deallocated_space", "bytes"),
         ("censored_allocated_objects", "count"), ("censored_allocated_space", "bytes")]


class Builder:
    """A pprof Profile laid out as TCMalloc's MakeLifetimeProfileProto writes one."""

    def __init__(self, binary: str, build_id: str = "1234abcd", types=TYPES):
        self.p = pprof.Profile(string_table=[""])
        self.p.sample_type.extend(pprof.ValueType(type=self.s(t), unit=self.s(u))
                                  for t, u in types)
        self.p.mapping.add(id=1, memory_start=LOAD, memory_limit=LOAD + 0x100000,
                           filename=self.s(binary), build_id=self.s(build_id))
        self.p.duration_nanos, self.p.time_nanos = 2_000 * MS, 1_700_000_000 * 10**9
        self.pair = 0

    def s(self, text: str) -> int:
        if text not in self.p.string_table:
            self.p.string_table.append(text)
        return list(self.p.string_table).index(text)

    def stack(self, return_addresses) -> list[int]:
        ids = []
        for a in return_addresses:  # TCMalloc writes return address - 1
            ids.append(len(self.p.location) + 1)
            self.p.location.add(id=ids[-1], mapping_id=1, address=a - 1)
        return ids

    def _sample(self, stack, values, n, lifetimes_ns, size):
        lo, mean, hi, sd = lifetimes_ns
        sample = self.p.sample.add(location_id=stack, value=values)
        for key, num, unit in [("bytes", size, "bytes"), ("request", size, "bytes"),
                               ("callstack-pair-id", self.pair, "count"),
                               ("avg_lifetime", mean, "nanoseconds"),
                               ("stddev_lifetime", sd, "nanoseconds"),
                               ("min_lifetime", lo, "nanoseconds"),
                               ("max_lifetime", hi, "nanoseconds")]:
            sample.label.add(key=self.s(key), num=num, num_unit=self.s(unit))
        sample.label.add(key=self.s("active thread"), str=self.s("same"))

    def freed(self, alloc_stack, free_stack, n, lifetimes_ns, size=64, dealloc=True):
        """One aggregate: (min, mean, max, stddev) ns over n objects."""
        self.pair += 1
        self._sample(alloc_stack, [n, n * size, 0, 0, 0, 0], n, lifetimes_ns, size)
        if dealloc:
            self._sample(free_stack, [0, 0, n, n * size, 0, 0], n, lifetimes_ns, size)

    def censored(self, alloc_stack, n, ages_ns, size=64):
        self.pair += 1
        self._sample(alloc_stack, [0, 0, 0, 0, n, n * size], n, ages_ns, size)

    def write(self, path, compress=True) -> str:
        data = self.p.SerializeToString()
        with open(path, "wb") as f:
            f.write(gzip.compress(data, mtime=0) if compress else data)
        return str(path)


@pytest.fixture
def sites_profile(sites, tmp_path):
    """parse_request: short, cache_insert: 5 ms mean with a 20 ms tail, registry_add:
    never freed, session_open: freed at ~300 ms."""
    binary, addr = sites
    b = Builder(binary)
    stack = {f: b.stack([addr[f] + 4, addr["main"] + 8])
             for f in ("parse_request", "cache_insert", "registry_add", "session_open")}
    free_site = b.stack([addr["main"] + 12])
    b.freed(stack["parse_request"], free_site, 500, (100, 1000, 10_000, 1000))
    b.freed(stack["cache_insert"], free_site, 100, (1 * MS, 5 * MS, 20 * MS, 4 * MS))
    b.freed(stack["session_open"], free_site, 40, (290 * MS, 300 * MS, 330 * MS, 9 * MS))
    b.censored(stack["registry_add"], 30, (200 * MS, 900 * MS, 1_800 * MS, 400 * MS))
    return b.write(tmp_path / "sites.pb.gz"), addr


def _lifetime_ms(s) -> float:
    return (s.observed_age_ns if s.censored else s.free_monotonic_ns - s.alloc_monotonic_ns) / MS


def _moments(points):
    n = sum(w for _, w in points)
    mean = sum(t * w for t, w in points) / n
    var = sum(w * (t - mean) ** 2 for t, w in points) / n
    return n, mean, math.sqrt(var)


@pytest.mark.parametrize("n,lo,mean,hi,sd", [
    (100, 1.0, 5.0, 20.0, 4.0), (7, 10.0, 11.0, 50.0, 0.5), (3, 2.0, 2.0, 2.0, 0.0),
    (1000, 0.0, 999.0, 1000.0, 30.0), (12, 1.0, 4.0, 9.0, 1e-3)])
def test_derived_distribution_reproduces_the_aggregate(n, lo, mean, hi, sd):
    points, clamped = tcmalloc.derive(n, mean, sd, lo, hi)
    assert not clamped and len(points) <= 3
    got_n, got_mean, got_sd = _moments(points)
    assert got_n == pytest.approx(n) and got_mean == pytest.approx(mean)
    assert got_sd == pytest.approx(sd, rel=1e-9, abs=1e-12)
    assert min(t for t, _ in points) == lo and max(t for t, _ in points) == hi


def test_impossible_stddev_is_clamped_to_the_largest_possible():
    points, clamped = tcmalloc.derive(10, 5.0, 9.0, 1.0, 10.0)  # (5-1)(10-5) = 20 < 81
    assert clamped and [t for t, _ in points] == [1.0, 10.0]
    n, mean, sd = _moments(points)
    assert (n, mean) == (pytest.approx(10), pytest.approx(5.0))
    assert sd == pytest.approx(math.sqrt(20.0))


def test_constructed_profile_converts_and_labels_match_hand_computation(sites_profile,
                                                                        tmp_path):
    path, addr = sites_profile
    assert tcmalloc.sniff(path)
    out = str(tmp_path / "sites.ltprof")
    summary = tcmalloc.convert(path, out, version_label="v1")
    p = read_profile(out)  # strict: any problem raises
    h = p.header
    assert (h.imported_from, h.lifetimes_derived, h.program, h.version_label) == \
        ("tcmalloc", True, "sites", "v1")
    assert list(h.clocks) == [profile_pb2.CLOCK_MONOTONIC_NS]
    assert p.mappings[0].build_id == bytes.fromhex("1234abcd") and not summary.modules
    assert (summary.aggregates, summary.objects, summary.censored_objects) == (4, 670, 30)
    assert summary.deallocation_stacks_not_kept == 3 and summary.dropped == {}
    # Stacks are the return addresses again, and symbolize to the sites.
    sym = context.make_symbolizer(p.mappings)
    by_site = {}
    for s in p.samples:
        site = context.machinery_free(sym, p.stacks[s.stack_id].addresses)[0]
        by_site.setdefault(site, []).append(s)
    assert sorted(by_site) == ["cache_insert", "parse_request", "registry_add", "session_open"]
    assert p.stacks[by_site["cache_insert"][0].stack_id].addresses[0] == addr["cache_insert"] + 4
    # Weights: each aggregate's count, all of them together the profile's.
    assert sum(s.weight for s in p.samples) == pytest.approx(670)
    assert sum(s.weight for s in by_site["cache_insert"]) == pytest.approx(100)
    assert all(s.censored for s in by_site["registry_add"])

    def label(site):
        ss = by_site[site]
        t95 = lifetimes.t95([_lifetime_ms(s) for s in ss], [s.censored for s in ss],
                            [s.weight for s in ss])
        return t95, lifetimes.LabelScheme().label(t95)

    # cache_insert: V = (5-1)(20-5) = 60 ms^2, q = 16/60; weights 100 q 15/19 = 21.05 at
    # 1 ms, 100 (1 - q) = 73.33 at 5 ms, 100 q 4/19 = 5.61 at 20 ms.  By 5 ms 94.4 %
    # have died (< 95 %), so T95 = 20 ms: class 1 (< 100 ms).
    weights = {_lifetime_ms(s): s.weight for s in by_site["cache_insert"]}
    assert weights == pytest.approx({1.0: 100 * 16 / 60 * 15 / 19, 5.0: 100 * 44 / 60,
                                     20.0: 100 * 16 / 60 * 4 / 19})
    assert label("cache_insert") == (20.0, 1)
    # parse_request: V = 900 * 9000 ns^2, q = 1e6 / 8.1e6, at 10 us 500 q 900/9900 = 5.6
    # objects (1.1 %): T95 = the mean, 1 us: class 0.  session_open: V = 10 * 20 = 200 ms^2,
    # q = 81/200, at 330 ms 40 q 10/40 = 4.05 objects (10.1 %): T95 = 330 ms, class 2.
    assert label("parse_request") == (0.001, 0)
    assert label("session_open") == (330.0, 2)
    # registry_add: never freed (all censored): inf.
    assert label("registry_add") == (math.inf, lifetimes.LabelScheme().inf_class)


def test_build_dataset_on_the_import_marks_derived_lifetimes(sites_profile, tmp_path):
    path, _ = sites_profile
    out = tmp_path / "imported"
    assert cli.main(["import", "--format", "tcmalloc", path, "-o", str(out)]) == 0
    ltprof = out / "sites.pb.ltprof"
    assert ltprof.is_file()
    summary = json.loads((out / "import_summary.json").read_text())
    assert summary["imported"][0]["format"] == "tcmalloc"
    ds = tmp_path / "ds"
    assert cli.main(["build-dataset", "--profiles", str(ltprof), "--out", str(ds),
                     "--eval-percent", "0", "--no-detect-wrappers"]) == 0
    manifest = json.loads((ds / "manifest.json").read_text())
    assert manifest["lifetimes_derived"] == {"files": 1}
    assert manifest["files"]["imported_from"] == {str(ltprof): "tcmalloc"}
    train = manifest["splits"]["train"]
    assert train["contexts"] == 4
    # one context in each of classes 0 (<10ms), 1 (<100ms), 2 (<1s) and inf
    assert [i for i, c in enumerate(train["class_histogram_contexts"]) if c] == [0, 1, 2, 7]

    # TCMalloc records no allocated-bytes clock: labels on that clock refuse the file
    # (its bytes readings would all read as lifetime 0) instead of labelling it.
    assert cli.main(["build-dataset", "--profiles", str(ltprof), "--out", str(tmp_path / "ds-bytes"),
                     "--clock", "bytes", "--no-detect-wrappers"]) == 1
    dead = (tmp_path / "ds-bytes" / "dead_letters.jsonl").read_text()
    assert "clock_not_recorded" in dead and str(ltprof) in dead


def test_real_tcmalloc_profile(tmp_path):
    """The committed real profile: counts carried over, designed lifetimes recovered."""
    with gzip.open(REAL) as f:
        raw = pprof.Profile.FromString(f.read())
    names = [raw.string_table[t.type] for t in raw.sample_type]
    col = {n: names.index(n) for n in tcmalloc.LIFETIME_TYPES}
    allocated = sum(s.value[col["allocated_objects"]] for s in raw.sample)
    censored = sum(s.value[col["censored_allocated_objects"]] for s in raw.sample)
    deallocated = sum(s.value[col["deallocated_objects"]] for s in raw.sample)
    assert allocated == deallocated > 0 and censored > 0
    assert tcmalloc.sniff(REAL)
    out = str(tmp_path / "real.ltprof")
    summary = tcmalloc.convert(REAL, out)
    p = read_profile(out)
    assert p.header.program == "tcmalloc_lifetime_driver" and p.header.lifetimes_derived
    assert summary.objects == allocated + censored and summary.censored_objects == censored
    assert summary.dropped == {} and summary.unpaired_allocations == 0
    assert sum(s.weight for s in p.samples) == pytest.approx(allocated + censored)
    assert p.trailer.total_allocations == allocated + censored
    space = [names.index(n) for n in ("allocated_space", "censored_allocated_space")]
    assert p.trailer.total_allocated_bytes == sum(s.value[i] for s in raw.sample for i in space)
    # Stacks are the locations' addresses + 1, leaf first, under the executable's mappings.
    addresses = {loc.address + 1 for loc in raw.location}
    assert {a for st in p.stacks.values() for a in st.addresses} <= addresses
    exe = [m for m in p.mappings if m.path == p.header.executable_path]
    assert exe and all(len(m.build_id) == 20 for m in exe)
    # Per allocation stack, the driver's designed lifetimes: under 1 us (short_lived),
    # about 20 ms (medium_lived), about 300 ms (long_lived), and live at the end.
    scheme = lifetimes.LabelScheme()
    labels = set()
    for sid in p.stacks:
        ss = [s for s in p.samples if s.stack_id == sid]
        labels.add(scheme.label(lifetimes.t95([_lifetime_ms(s) for s in ss],
                                              [s.censored for s in ss],
                                              [s.weight for s in ss])))
    assert {0, 1, 2, scheme.inf_class} <= labels


def test_missing_binaries_are_named_and_frames_become_module_tokens(sites, tmp_path):
    binary, addr = sites
    b = Builder("/gone/bin/sites")
    b.freed(b.stack([addr["parse_request"] + 4]), b.stack([addr["main"] + 8]), 5,
            (MS, MS, MS, 1))
    path = b.write(tmp_path / "moved.pb.gz")
    summary = tcmalloc.convert(path, str(tmp_path / "moved.ltprof"))
    assert summary.modules == {"missing": ["/gone/bin/sites"]}
    p = read_profile(str(tmp_path / "moved.ltprof"))
    sym = context.make_symbolizer(p.mappings)
    frames = {f for st in p.stacks.values() for f in context.machinery_free(sym, st.addresses)}
    assert frames == {"<sites+?>"}
    # Under --sysroot the same file is found; another build is named as such.
    root = tmp_path / "root"
    (root / "gone" / "bin").mkdir(parents=True)
    os.symlink(binary, root / "gone" / "bin" / "sites")
    assert tcmalloc.convert(path, str(tmp_path / "m2.ltprof"), sysroot=str(root)).modules == {}
    other = Builder(binary, build_id="ffff")
    other.freed(other.stack([addr["parse_request"] + 4]), [], 1, (MS, MS, MS, 1),
                dealloc=False)
    s = tcmalloc.convert(other.write(tmp_path / "other.pb"), str(tmp_path / "o.ltprof"))
    assert s.modules == {"build_id_differs": [binary]} and s.unpaired_allocations == 1


def test_unusable_samples_are_dropped_counted_and_named(sites, tmp_path):
    binary, addr = sites
    b = Builder(binary)
    site = b.stack([addr["parse_request"] + 4])
    b.freed(site, site, 5, (MS, 2 * MS, 3 * MS, 1))                  # good
    b.freed(site, site, 5, (3 * MS, 2 * MS, MS, 1))                  # min > max
    b.pair += 1
    b._sample(site, [0, 0, 4, 256, 0, 0], 4, (MS, MS, MS, 1), 64)    # no allocation side
    b.p.sample.add(location_id=[999], value=[1, 64, 0, 0, 0, 0]).label.extend(
        b.p.sample[0].label)                                         # undefined location
    summary = tcmalloc.convert(b.write(tmp_path / "bad.pb.gz"), str(tmp_path / "b.ltprof"))
    assert summary.dropped == {"inconsistent_lifetimes": 1, "deallocation_without_allocation": 1,
                               "undefined_location": 1}
    assert len(summary.problems) == 3 and summary.aggregates == 1
    assert summary.objects == 5
    # Nothing usable at all: an error, and no output file.
    only = Builder(binary)
    only.freed(only.stack([addr["main"] + 8]), [999], 2, (MS, MS, MS, 1))
    only.p.sample[0].location_id[:] = [999]
    with pytest.raises(InputError, match=r"only\.pb: no usable lifetime samples .*"
                                         r"undefined_location"):
        tcmalloc.convert(only.write(tmp_path / "only.pb"), str(tmp_path / "only.ltprof"))
    assert not os.path.exists(tmp_path / "only.ltprof")


def test_bad_input_is_refused_naming_the_file(sites, sites_profile, tmp_path):
    path, _ = sites_profile
    data = open(path, "rb").read()
    cut = tmp_path / "cut.pb.gz"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match=r"cut\.pb\.gz: truncated: the gzip stream ends"):
        tcmalloc.convert(str(cut), str(tmp_path / "x.ltprof"))
    # A CPU profile is a pprof profile, but not a lifetime profile.
    cpu = Builder(sites[0], types=[("samples", "count"), ("cpu", "nanoseconds")])
    cpu_path = cpu.write(tmp_path / "cpu.pb.gz")
    with pytest.raises(InputError, match=r"cpu\.pb\.gz: a pprof profile, but not a TCMalloc "
                                         r"lifetime profile \(sample types: samples/count, "
                                         r"cpu/nanoseconds"):
        tcmalloc.convert(cpu_path, str(tmp_path / "x.ltprof"))
    assert not tcmalloc.sniff(cpu_path) and not tcmalloc.sniff(str(cut))
    junk = tmp_path / "junk.txt"
    junk.write_bytes(b"v 10400 3\nx 4 /bin/ls\n")  # a heaptrack file
    with pytest.raises(InputError, match=r"junk\.txt: not a pprof profile"):
        tcmalloc.convert(str(junk), str(tmp_path / "x.ltprof"))
    assert not tcmalloc.sniff(str(junk))
    empty = tmp_path / "empty.pb"
    empty.write_bytes(b"")
    with pytest.raises(InputError, match="empty file"):
        tcmalloc.convert(str(empty), str(tmp_path / "x.ltprof"))
    with pytest.raises(InputError, match="nowhere.pb.gz"):
        tcmalloc.convert(str(tmp_path / "nowhere.pb.gz"), str(tmp_path / "x.ltprof"))
    assert not os.path.exists(tmp_path / "x.ltprof")


def test_import_command_reports_bad_files_and_detects_the_format(sites_profile, tmp_path,
                                                                 capsys):
    path, _ = sites_profile
    plain = tmp_path / "plain.pb"
    plain.write_bytes(gzip.decompress(open(path, "rb").read()))
    junk = tmp_path / "junk.pb.gz"
    junk.write_bytes(b"\x1f\x8b\x08\x00junk")
    out = tmp_path / "out"
    assert importing.detect(str(plain)) == "tcmalloc"
    assert cli.main(["import", str(plain), str(junk), "-o", str(out)]) == 0
    assert (out / "plain.pb.ltprof").is_file()
    assert "junk.pb.gz" in capsys.readouterr().err
    assert cli.main(["import", "--format", "tcmalloc", str(junk), "-o", str(out)]) == 1
    assert f"lifetime import: error: none of 1 file(s) could be imported; first: {junk}" \
        in capsys.readouterr().err


def test_numbers_at_their_limits_are_bounded_not_crashes(tmp_path):
    """The committed real profile with numbers protobuf accepts but our fields cannot
    take as they are (issue 20, item 1): a location at 2^64 - 1 (its return address
    would pass 2^64), a label naming a string that does not exist, counts of 2^63 - 1
    whose sums pass 2^64, a start time plus duration past int64.  Samples that cannot
    be used are dropped and counted; sums saturate, noted; the rest is imported."""
    with gzip.open(REAL) as f:
        p = pprof.Profile.FromString(f.read())
    import collections

    kept = p.sample[:-1]  # the last one gets the bad label
    uses = collections.Counter(lid for s in kept if not s.value[2]  # not deallocations
                               for lid in set(s.location_id))
    rare = min(uses, key=lambda lid: (uses[lid], lid))  # in the fewest allocation stacks
    next(loc for loc in p.location if loc.id == rare).address = (1 << 64) - 1
    p.time_nanos, p.duration_nanos = (1 << 63) - 1, (1 << 63) - 1
    for sample in p.sample:
        sample.value[:] = [(1 << 63) - 1 if v else 0 for v in sample.value]
    p.sample[-1].label[0].key = 10_000
    path = tmp_path / "limits.pb"
    path.write_bytes(p.SerializeToString())
    out = tmp_path / "limits.ltprof"
    summary = tcmalloc.convert(str(path), str(out))
    assert summary.dropped["address_out_of_range"] == uses[rare]
    assert summary.dropped["bad_label"] == 1
    assert any(pr.startswith("address_out_of_range: sample ") for pr in summary.problems)
    saturated = [n for n in summary.notes if "saturated" in n]
    assert len(saturated) == 3  # total_allocations, total_allocated_bytes, end time
    profile = read_profile(str(out))  # strict: any problem raises
    assert profile.trailer.total_allocations == (1 << 64) - 1
    assert profile.trailer.end_time_unix_ns == (1 << 63) - 1
    assert summary.samples == len(profile.samples) > 0
    assert not os.path.exists(str(out) + ".partial")
