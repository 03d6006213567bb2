"""The Beam dataset job on synthetic profiles over a real binary (known lifetimes)."""

import filecmp

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from core.errors import LifetimeError
from pipeline import dataset
from pipeline.dataset import DatasetConfig, LabelContexts, ReadProfiles
from pipeline.manifest import dataset_context
from core.tokenizer import Vocabulary
from profile_format import CATEGORIES
from tests.dataset_support import EXPECTED_LABELS, SAMPLES_B, write_profiles
from tests.synthetic import make_profile

CONFIG = DatasetConfig(eval_percent=0)


@pytest.fixture
def profiles(tmp_path, sites):
    binary, addresses = sites
    d = tmp_path / "profiles"
    d.mkdir()
    write_profiles(d, binary, addresses)
    return d


def test_contexts_are_symbolized_aggregated_and_labeled(profiles):
    files = [(str(profiles / "a.ltprof"), ""), (str(profiles / "b.ltprof"), "")]
    with TestPipeline() as p:
        read = p | beam.Create(files) | ReadProfiles(CONFIG)
        labeled = read.contexts | LabelContexts(CONFIG)
        sites = labeled | beam.Map(lambda c: (c["frames"][0], c["label"], c["stats"]["samples"],
                                               c["frames"][1:]))
        assert_that(sites, equal_to([
            ("parse_request", 0, 20, ["main"]), ("cache_insert", 2, 20, ["main"]),
            ("session_open", 3, 20, ["main"]), ("registry_add", 7, 10, ["main"])]))
        assert_that(read["dead_letter"], equal_to([]), label="no dead letters")


def test_bad_files_go_to_dead_letters_and_the_rest_is_kept(profiles):
    good = profiles / "a.ltprof"
    data = good.read_bytes()
    (profiles / "truncated.ltprof").write_bytes(data[:-7])
    (profiles / "garbage.ltprof").write_bytes(b"not a profile" * 10)
    (profiles / "zero.ltprof").write_bytes(b"")
    files = [(str(profiles / n), "") for n in
             ("a.ltprof", "truncated.ltprof", "garbage.ltprof", "zero.ltprof")]
    with TestPipeline() as p:
        read = p | beam.Create(files) | ReadProfiles(CONFIG)
        reasons = read["dead_letter"] | beam.Map(
            lambda d: (d["file"].rsplit("/", 1)[1], d["reason"].split(":")[0]))
        assert_that(reasons, equal_to([("truncated.ltprof", "truncated"),
                                       ("garbage.ltprof", "corrupt"), ("zero.ltprof", "empty")]))
        counts = (read.contexts | beam.Map(lambda kv: (kv[0][2][0], kv[1].samples))
                  | beam.CombinePerKey(sum))
        # a.ltprof in full; truncated.ltprof lost its last chunk (the trailer) only.
        assert_that(counts, equal_to([("parse_request", 40), ("cache_insert", 40),
                                      ("registry_add", 20)]), label="good samples kept")


def _build(profiles, out, **kw):
    config = DatasetConfig(eval_percent=kw.pop("eval_percent", 50))
    return dataset.build_dataset([(str(profiles / "*.ltprof"), "v1")], str(out), config, **kw)


def test_build_dataset_writes_examples_vocab_and_manifest(profiles, tmp_path):
    import tensorflow as tf

    manifest = _build(profiles, tmp_path / "ds")
    splits = manifest["splits"]
    assert splits["train"]["contexts"] + splits["eval"]["contexts"] == 4
    assert sum(splits["train"]["class_histogram_samples"]) + \
        sum(splits["eval"]["class_histogram_samples"]) == 70
    assert manifest["dropped"]["bad_records_or_files"] == 0
    program = manifest["files"]["programs"]["sites (v1)"]
    assert program["files"] == 2 and program["symbolized_frame_share"] == 1.0
    assert manifest["config"]["labels"]["class_names"][-1] == "inf"
    vocab = Vocabulary.load(str(tmp_path / "ds" / "vocab.txt"))
    examples = []
    for split in ("train", "eval"):
        for path in (tmp_path / "ds").glob(f"{split}-*.tfrecord"):
            for raw in tf.data.TFRecordDataset(str(path)).as_numpy_iterator():
                examples.append(tf.train.Example.FromString(raw).features.feature)
    assert len(examples) == 4
    for f in examples:
        tokens = [t.decode() for t in f["tokens"].bytes_list.value]
        site = tokens[0]
        assert f["label"].int64_list.value == [EXPECTED_LABELS[site]]
        assert list(f["token_ids"].int64_list.value) == vocab.ids(tokens)
        assert tokens[1:] == ["<sep>", "main"]
        assert f["version_label"].bytes_list.value == [b"v1"]
        assert f["weight"].float_list.value[0] in (10.0, 20.0)


def test_two_runs_are_byte_identical(profiles, tmp_path):
    _build(profiles, tmp_path / "one")
    _build(profiles, tmp_path / "two", beam_args=["--direct_num_workers=2"])
    names = sorted(p.name for p in (tmp_path / "one").iterdir())
    assert "vocab.txt" in names and "manifest.json" in names
    match, mismatch, errors = filecmp.cmpfiles(tmp_path / "one", tmp_path / "two", names,
                                               shallow=False)
    assert mismatch == [] and errors == [] and sorted(match) == names


def test_given_vocabulary_is_used_unchanged(profiles, tmp_path):
    given = tmp_path / "given.txt"
    Vocabulary.from_ranked(["main", "cache_insert"]).save(str(given))
    manifest = _build(profiles, tmp_path / "ds", vocab_path=str(given))
    assert (tmp_path / "ds" / "vocab.txt").read_text() == given.read_text()
    assert manifest["vocabulary"]["size"] == 5


def test_empty_glob_and_bad_vocabulary_are_clear_errors(profiles, tmp_path):
    with pytest.raises(LifetimeError, match="nothing-here.*matches no files"):
        dataset.build_dataset([(str(tmp_path / "nothing-here*.ltprof"), "")],
                              str(tmp_path / "ds"), CONFIG)
    bad = tmp_path / "bad-vocab.txt"
    bad.write_text("hello\n")
    with pytest.raises(LifetimeError, match="bad-vocab.txt"):
        _build(profiles, tmp_path / "ds", vocab_path=str(bad))


def test_build_id_mismatch_is_reported_per_module(profiles, tmp_path, sites):
    binary, addresses = sites
    make_profile(str(profiles / "c.ltprof"), binary, addresses, SAMPLES_B,
                 build_id=bytes.fromhex("deadbeef"))
    manifest = _build(profiles, tmp_path / "ds")
    assert manifest["files"]["modules"][binary].startswith("build_id_mismatch")
    assert manifest["files"]["programs"]["sites (v1)"]["symbolized_frame_share"] < 1.0


def test_context_definition_wrappers_purity_and_like(profiles, tmp_path):
    from core.context import ContextDefinition

    # "cache_insert" made a wrapper: its samples' context is what lies below it (main).
    config = DatasetConfig(eval_percent=0, context=ContextDefinition.make(
        configured=["cache_insert"]))
    manifest = dataset.build_dataset([(str(profiles / "*.ltprof"), "")], str(tmp_path / "a"),
                                     config)
    ctx = manifest["context"]
    assert ctx["version"] == "lifetime-context-v2" and ctx["inline_frames"] is False
    assert ctx["configured_wrappers"] == ["cache_insert"] and "zmalloc" in ctx["wrappers"]
    assert ctx["max_frames"] == 16 and manifest["config"]["context"]["detected_wrappers"] == []
    assert manifest["context_cuts"]["samples_by_wrapper"] == {"cache_insert": 20}
    assert manifest["context_cuts"]["samples"] == 70
    assert manifest["splits"]["train"]["contexts"] == 4  # parse, session, registry, [main]
    purity = manifest["splits"]["train"]["label_purity"]
    assert 0.5 < purity < 1.0  # session_open has one sample outside its class
    # A test set cut like it: the same definition, nothing detected anew.
    like = dataset_context(str(tmp_path / "a"))
    again = dataset.build_dataset(
        [(str(profiles / "a.ltprof"), "")], str(tmp_path / "b"),
        DatasetConfig(eval_percent=0, context=like, detect_wrappers=False),
        vocab_path=str(tmp_path / "a" / "vocab.txt"))
    assert again["context"] == ctx
    with pytest.raises(LifetimeError, match="manifest"):
        dataset_context(str(tmp_path / "nope"))


def _mutate_samples(path, **fields):
    """Rewrites a synthetic profile with `fields` set on its first sample."""
    from profile_format import profile_pb2, write_profile
    from profile_format.container import iter_records

    chunks = [profile_pb2.ProfileChunk.FromString(r) for r in iter_records(str(path))]
    for k, v in fields.items():
        setattr(chunks[0].samples[0], k, v)
    write_profile(str(path), chunks)
    return chunks


def test_read_step_dead_letters_impossible_records_and_never_dies(profiles):
    import math
    import os
    import struct

    from profile_format.container import masked_crc32c

    d = profiles
    (d / "b.ltprof").unlink()
    data = (d / "a.ltprof").read_bytes()
    raw = struct.pack("<Q", 2**62)
    (d / "huge.ltprof").write_bytes(raw + struct.pack("<I", masked_crc32c(raw)))
    os.mkfifo(d / "fifo.ltprof")
    for name, fields in (("neg.ltprof", {"free_monotonic_ns": 1}),
                         ("nan.ltprof", {"weight": math.nan}),
                         ("enum.ltprof", {"alloc_function": 17})):
        (d / name).write_bytes(data)
        _mutate_samples(d / name, **fields)
    # a.ltprof with its first record twice
    first_len = int.from_bytes(data[:8], "little")
    (d / "dup.ltprof").write_bytes(data[:16 + first_len] + data)
    (d / "zero.ltprof").write_bytes(data)
    chunks = _mutate_samples(d / "zero.ltprof")
    chunks[0].header.sampling_interval_bytes = 0
    from profile_format import write_profile
    write_profile(str(d / "zero.ltprof"), chunks)
    files = [(str(p), "") for p in sorted(d.iterdir())]
    with TestPipeline() as p:
        read = p | beam.Create(files) | ReadProfiles(CONFIG)
        reasons = read["dead_letter"] | beam.Map(
            lambda x: (x["file"].rsplit("/", 1)[1], x["category"],
                       x["reason"].split(":")[0] == x["category"]))
        assert_that(reasons, equal_to([
            ("huge.ltprof", "truncated", True), ("fifo.ltprof", "not_regular", True),
            ("neg.ltprof", "negative_lifetime", True), ("nan.ltprof", "bad_weight", True),
            ("dup.ltprof", "duplicate_chunk", True), ("zero.ltprof", "bad_header", True)]))
        undocumented = read["dead_letter"] | beam.Filter(lambda x: x["category"] not in CATEGORIES)
        assert_that(undocumented, equal_to([]), label="every category documented")
        counts = (read.contexts | beam.Map(lambda kv: (kv[0][2][0], kv[1].samples))
                  | beam.CombinePerKey(sum))
        # a, enum (unknown values are kept), dup (counted once) in full; neg and nan
        # without their first sample (a parse_request one); zero not at all.
        assert_that(counts, equal_to([("parse_request", 3 * 20 + 2 * 19),
                                      ("cache_insert", 5 * 20), ("registry_add", 5 * 10)]),
                    label="only valid samples kept")
        stats = read["file_stats"] | beam.Map(
            lambda s: (s["file"].rsplit("/", 1)[1], s["samples"], s["dropped_samples"]))
        assert_that(stats, equal_to([
            ("a.ltprof", 50, {}), ("enum.ltprof", 50, {}), ("dup.ltprof", 50, {}),
            ("neg.ltprof", 49, {"negative_lifetime": 1}),
            ("nan.ltprof", 49, {"bad_weight": 1})]), label="file stats")


def test_build_dataset_survives_a_huge_declared_length(profiles, tmp_path):
    import json
    import struct

    from profile_format.container import masked_crc32c

    raw = struct.pack("<Q", 2**63)
    (profiles / "huge.ltprof").write_bytes(raw + struct.pack("<I", masked_crc32c(raw)))
    manifest = _build(profiles, tmp_path / "ds")
    assert manifest["dropped"]["files_with_problems"] == [str(profiles / "huge.ltprof")]
    dead = [json.loads(line) for line in (tmp_path / "ds" / "dead_letters.jsonl").open()]
    assert [d["category"] for d in dead] == ["truncated"]
    assert "record 0 at byte 0" in dead[0]["reason"]


# -- BuildDataset on in-memory inputs (no files) -------------------------------------


def _stats(freed_ms=(), censored_ms=()):
    from pipeline.context_stats import ContextStats

    st = ContextStats()
    for ms in freed_ms:
        st.add(ms, False, 2.0, 64)
    for ms in censored_ms:
        st.add(ms, True, 2.0, 64)
    return st


# (program, version label, machinery-free stack) -> partial stats, as ReadProfiles makes
# them; parse_request comes from two files and is merged.
PARTIALS = [
    (("prog", "v1", ("parse_request", "main")), [3.0] * 4, []),
    (("prog", "v1", ("parse_request", "main")), [3.0] * 2, []),
    (("prog", "v1", ("cache_insert", "Cache::Put(int)", "main")), [300.0] * 3, []),
    (("prog", "v1", ("registry_add", "main")), [], [5000.0] * 2),
]
FILE_STATS = [
    {"file": "a.ltprof", "program": "prog", "version_label": "v1", "samples": 9, "frames": 20,
     "named_frames": 20, "modules": {"/bin/prog": "ok"}, "complete": True,
     "dropped_samples": {}, "imported_from": "", "lifetimes_derived": False},
    {"file": "b.heaptrack", "program": "prog", "version_label": "v1", "samples": 2,
     "frames": 4, "named_frames": 2, "modules": {"/bin/prog": "ok"}, "complete": False,
     "dropped_samples": {}, "imported_from": "heaptrack", "lifetimes_derived": True},
]
DEAD = [{"file": "c.ltprof", "category": "corrupt", "reason": "corrupt: record 0"},
        {"file": "a.ltprof", "category": "bad_weight", "reason": "bad_weight: 1 sample"}]
INPUTS = [("a.ltprof", "v1"), ("b.heaptrack", "v1"), ("c.ltprof", "v1")]


def _build_in_memory(p, config, vocab=None, vocab_path=None):
    contexts = p | "Partials" >> beam.Create(PARTIALS) | beam.MapTuple(
        lambda key, freed, censored: (key, _stats(freed, censored)))
    return ({"contexts": contexts,
             "dead_letters": p | "Dead" >> beam.Create(DEAD),
             "file_stats": p | "Stats" >> beam.Create(FILE_STATS)}
            | dataset.BuildDataset(config, INPUTS, vocab, vocab_path))


def _decode_shard(shard):
    import tensorflow as tf

    name, records = shard
    rows = []
    for raw in records:
        f = tf.train.Example.FromString(raw).features.feature
        rows.append((f["context_id"].bytes_list.value[0].decode(),
                     f["frames"].bytes_list.value[0].decode(), f["label"].int64_list.value[0],
                     f["weight"].float_list.value[0]))
    return name, rows


def test_build_dataset_transform_labels_shards_vocabulary_and_manifest():
    from pipeline.context_stats import context_id

    config = DatasetConfig(eval_percent=0, vocab_size=5, num_shards=2)
    ids = {site: context_id("prog", "v1", stack) for (_, _, stack), _, _ in PARTIALS
           for site in stack[:1]}
    # A context's shard is its id mod 2; a shard's records are sorted by id.
    expected = {}
    for site, label, samples in (("parse_request", 0, 6.0), ("cache_insert", 2, 3.0),
                                 ("registry_add", 7, 2.0)):
        cid = ids[site]
        expected.setdefault(f"train-{int(cid, 16) % 2:05d}-of-00002", []).append(
            (cid, site, label, samples))
    expected = [(name, sorted(rows)) for name, rows in expected.items()]

    def check_manifest(manifests):
        [m] = manifests
        train = m["splits"]["train"]
        assert (train["contexts"], m["splits"]["eval"]["contexts"]) == (3, 0)
        assert train["class_histogram_samples"] == [6, 0, 3, 0, 0, 0, 0, 2]
        assert train["class_histogram_contexts"] == [1, 0, 1, 0, 0, 0, 0, 1]
        assert m["dropped"]["bad_records_or_files"] == 2
        assert m["dropped"]["by_category"] == {"bad_weight": 1, "corrupt": 1}
        assert m["dropped"]["files_with_problems"] == ["a.ltprof", "c.ltprof"]
        assert m["inputs"][1] == {"file": "b.heaptrack", "version_label": "v1"}
        assert m["vocabulary"] == {"file": "vocab.txt", "size": 8, "given": None}
        assert m["context"]["max_frames"] == 16 == m["config"]["context"]["max_frames"]
        assert m["lifetimes_derived"] == {"files": 1}
        assert m["files"]["imported_from"] == {"b.heaptrack": "heaptrack"}
        program = m["files"]["programs"]["prog (v1)"]
        assert (program["files"], program["samples"], program["incomplete_files"]) == (2, 11, 1)

    with TestPipeline() as p:
        out = _build_in_memory(p, config)
        # By the number of training contexts holding a token, then alphabetically
        # (byte order); 5 of them after the reserved three.
        assert_that(out["vocabulary"], equal_to([[
            "<pad>", "<unk>", "<sep>", "main", "Cache", "Put", "cache_insert", "int"]]),
            label="vocabulary")
        assert_that(out["shards"] | beam.Map(_decode_shard), equal_to(expected), label="shards")
        assert_that(out["dead_letters"], equal_to([[
            '{"category": "bad_weight", "file": "a.ltprof", "reason": "bad_weight: 1 sample"}',
            '{"category": "corrupt", "file": "c.ltprof", "reason": "corrupt: record 0"}']]),
            label="dead letters sorted")
        assert_that(out["manifest"], check_manifest, label="manifest")


def test_build_dataset_transform_uses_a_given_vocabulary_and_split():
    given = Vocabulary.from_ranked(["registry_add", "main"])

    def check(manifests):
        [m] = manifests
        assert m["vocabulary"] == {"file": "vocab.txt", "size": 5, "given": "given.txt"}
        assert m["splits"]["train"]["contexts"] + m["splits"]["eval"]["contexts"] == 3
        assert "lifetimes_derived" in m  # b.heaptrack's header says so

    with TestPipeline() as p:
        out = _build_in_memory(p, DatasetConfig(eval_percent=100), given, "given.txt")
        assert_that(out["vocabulary"], equal_to([given.tokens]), label="given vocabulary")
        assert_that(out["shards"] | beam.Map(lambda s: (s[0], len(s[1]))),
                    equal_to([("eval-00000-of-00001", 3)]), label="all in eval")
        assert_that(out["manifest"], check, label="manifest")


# -- profile sources --------------------------------------------------------------


class ToyImporter:
    """A test-only importer (interop's contract: sniff, convert) of a text format:
    a "toy-profile" line, then "site ms censored" lines."""

    converted: list = []

    def __init__(self, binary, addresses):
        self.binary, self.addresses = binary, addresses

    def sniff(self, path):
        with open(path, "rb") as f:
            return f.read(12) == b"toy-profile\n"

    def convert(self, path, out_path):
        from core.errors import InputError

        ToyImporter.converted.append(out_path)
        samples = []
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f.read().splitlines()[1:], 2):
                try:
                    site, ms, censored = line.split()
                    samples.append((site, float(ms), censored == "1"))
                except ValueError:
                    raise InputError(f"{path}: line {n}: not 'site ms censored'") from None
        make_profile(out_path, self.binary, self.addresses, samples, version_label="v1",
                     imported_from="toy", lifetimes_derived=True)


@pytest.fixture
def toy_source(sites):
    from pipeline import sources

    toy = ToyImporter(*sites)
    source = sources.register(sources.importer_source("toy", load=lambda: toy))
    yield source
    sources.unregister("toy")


def test_profile_sources_auto_detects_converts_and_dead_letters_the_rest(
        profiles, tmp_path, toy_source):
    import json
    import os

    (profiles / "c.toy").write_text("toy-profile\n" + "cache_insert 2 0\n" * 5
                                    + "session_open 9000 0\n" * 3)
    (profiles / "bad.toy").write_text("toy-profile\nnot a sample line\n")
    (profiles / "notes.txt").write_text("nothing anyone recognises\n")
    ToyImporter.converted.clear()
    manifest = dataset.build_dataset([(str(profiles / "*"), "v1")], str(tmp_path / "ds"),
                                     DatasetConfig(eval_percent=0))
    # The imported file's samples are in the contexts with ours; its temporary
    # .ltprof is gone.
    assert manifest["files"]["programs"]["sites (v1)"]["files"] == 3
    assert manifest["files"]["programs"]["sites (v1)"]["samples"] == 50 + 20 + 8
    assert manifest["files"]["imported_from"] == {str(profiles / "c.toy"): "toy"}
    assert manifest["lifetimes_derived"] == {"files": 1}
    assert len(ToyImporter.converted) == 2
    assert not any(os.path.exists(os.path.dirname(p)) for p in ToyImporter.converted)
    dead = {d["file"].rsplit("/", 1)[1]: d for d in
            map(json.loads, (tmp_path / "ds" / "dead_letters.jsonl").open())}
    assert sorted(dead) == ["bad.toy", "notes.txt"]
    assert dead["notes.txt"]["category"] == "unsupported"
    assert "ltprof, heaptrack, tcmalloc, toy" in dead["notes.txt"]["reason"]
    assert dead["bad.toy"]["category"] == "import_failed"
    assert {d["category"] for d in dead.values()} <= CATEGORIES.keys()
    assert "line 2" in dead["bad.toy"]["reason"]
    # A named format reads every file as that format: ours are then bad toy files.
    named = dataset.build_dataset([(str(profiles / "c.toy"), "v1")], str(tmp_path / "toy"),
                                  DatasetConfig(eval_percent=0), profile_format="toy")
    assert named["splits"]["train"]["samples"] == 8


def test_profile_formats_are_checked_before_the_job(profiles, tmp_path, capsys):
    from lifetime.cli import main
    from pipeline import sources

    assert main(["build-dataset", "--profiles", str(profiles), "--format", "nope",
                 "--out", str(tmp_path / "ds")]) == 1
    assert "build-dataset: error: unknown profile format 'nope' (known: auto, ltprof" \
        in capsys.readouterr().err
    sources.register(sources.importer_source(
        "broken", load=lambda: __import__("interop.no_such_importer")))
    try:
        with pytest.raises(LifetimeError, match="'broken'.*not available"):
            sources.check_format("broken")
        # Under auto, an importer that does not load recognises nothing; the rest read on.
        assert sources.detect(str(profiles / "a.ltprof")) is sources.LTPROF
        assert sources.detect(str(profiles / "nothing.bin")) is None
    finally:
        sources.unregister("broken")


def test_detect_only_profiles_join_detection_and_nothing_else(profiles, tmp_path, monkeypatch):
    from core import context as context_def

    seen = []
    real = context_def.detect_wrappers

    def spy(stacks, definition, **kw):
        stacks = list(stacks)
        seen.extend(sorted({s[0] for s, _, _ in stacks if s}))
        return real(stacks, definition, **kw)

    monkeypatch.setattr(context_def, "detect_wrappers", spy)
    config = DatasetConfig(eval_percent=0, detect_inputs=((str(profiles / "b.ltprof"), "v2"),))
    manifest = dataset.build_dataset([(str(profiles / "a.ltprof"), "v1")], str(tmp_path / "ds"),
                                     config)
    assert "session_open" in seen and "parse_request" in seen  # b's stacks were detected on
    assert [i["file"] for i in manifest["inputs"]] == [str(profiles / "a.ltprof")]
    assert manifest["splits"]["train"]["contexts"] == 3  # a's sites only, not b's
    assert manifest["roles"] == {"train": ["v1"], "selection": ["v2"]}
    assert manifest["config"]["detect_inputs"] == [[str(profiles / "b.ltprof"), "v2"]]


def test_size_feature_splits_a_stack_into_one_context_per_size_frame():
    """--size-feature (issue 34 item 3): a stack's samples go to one context per size
    frame, each labeled from its own samples; without it, one context for all."""
    from core.context import ContextDefinition
    from pipeline.context_stats import ContextStats

    st = ContextStats()
    for ms, size in [(3.0, 64), (3.0, 70), (3.0, 64), (5000.0, 4096), (5000.0, 5000)]:
        st.add(ms, False, 2.0, size)
    key = ("prog", "v1", ("parse_request", "main"))

    def check(size_feature, expected):
        config = DatasetConfig(context=ContextDefinition.make(size_feature=size_feature),
                               detect_wrappers=False)
        with TestPipeline() as p:
            contexts, _, _ = (p | beam.Create([(key, st)]) | dataset.ToContexts(config))
            labeled = contexts | LabelContexts(config) | beam.Map(
                lambda c: (tuple(c["frames"]), c["label"], c["stats"]["samples"]))
            assert_that(labeled, equal_to(expected))

    check(True, [(("<size$4096>", "parse_request", "main"), 3, 2),
                 (("<size$64>", "parse_request", "main"), 0, 3)])
    check(False, [(("parse_request", "main"), 3, 5)])  # T95 of all five: the long ones
