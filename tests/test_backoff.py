"""The model's back-off (model/backoff.py): fitted, applied, stored, keyed as the export."""

import json

import numpy as np
import pytest

from core import byte_hash
from export import codegen
from model import backoff as B
from model.hparams import HParams


def _contexts(sites):
    """One context per site name: the site frame, then a caller (never part of the key)."""
    return [(site, "main") for site in sites]


def test_fit_takes_each_sites_weighted_majority_and_the_training_majority_as_fallback():
    b = B.fit(_contexts(['a', 'a', 'a', 'b', 'b']), labels=[1, 1, 3, 2, 5],
              weights=[1, 1, 5, 2, 2], below=0.5, fallback=0, site_slots=1)
    assert len(b.keys) == 2 and np.all(np.diff(b.keys.astype(np.float64)) > 0)
    # site a: class 3 (weight 5 against 2); site b: a tie, the smaller class wins
    assert b.site_classes(_contexts(['a', 'b', 'c'])).tolist() == [3, 2, 0]


def test_apply_backs_off_only_where_the_model_is_unsure():
    b = B.fit(_contexts(['a']), [4], [1.0], below=0.5, fallback=6, site_slots=1)
    probs = np.array([[0.6, 0.4, 0, 0, 0, 0, 0],    # sure: argmax 0
                      [0.45, 0.35, 0.2, 0, 0, 0, 0],  # unsure, seen site: 4
                      [0.45, 0.35, 0.2, 0, 0, 0, 0],  # unsure, unseen site: the fallback 6
                      [0.5, 0.5, 0, 0, 0, 0, 0]], np.float32)  # 0.5 is not below 0.5
    got = b.apply(probs, _contexts(['a', 'a', 'z', 'a']))
    assert got.tolist() == [0, 4, 6, 0]
    off = B.Backoff(0.0, 6, 1, b.keys, b.classes, b.purity)
    assert off.apply(probs, _contexts(['a', 'a', 'z', 'a'])).tolist() == [0, 0, 0, 0]


def test_a_pure_site_is_served_its_class_even_where_the_model_is_sure():
    contexts = _contexts(['a', 'a', 'b', 'b'])
    b = B.fit(contexts, [4, 4, 2, 3], [3.0, 1.0, 3.0, 1.0], below=0.4, fallback=6, site_slots=1,
              pure=0.9)
    assert sorted(b.purity.tolist()) == [0.75, 1.0]  # site a all class 4; site b 3/4 in class 2
    sure = np.array([[0.9, 0.1, 0, 0, 0, 0, 0]] * 3, np.float32)
    # site a is pure: its class; site b is not: the model's; an unseen site: the model's
    assert b.apply(sure, _contexts(['a', 'b', 'z'])).tolist() == [4, 0, 0]


def test_the_key_is_the_site_frames_text_hashed_as_the_exported_library_hashes():
    keys = B.site_keys(_contexts(["lookupKey", "_sdsnewlen"]), site_slots=1)
    assert keys.tolist() == [codegen.token_hash(b"lookupKey"), codegen.token_hash(b"_sdsnewlen")]
    assert byte_hash.hash_bytes is codegen.token_hash
    # Frames that tokenize alike are still two sites (keyed on the ids they were one, and
    # `_sdsnewlen` was served `sdsnewlen`'s class).
    assert B.site_keys(_contexts(["_sdsnewlen", "sdsnewlen"]), 1).tolist() == [
        codegen.token_hash(b"_sdsnewlen"), codegen.token_hash(b"sdsnewlen")]
    # Two slots (a size frame, then the site): the hash of the two frames' hashes.
    two = [("<size$64>", "zmalloc"), ("<size$64>", "sdsnewlen"), ("<size$64>",), ()]
    k2 = B.site_keys(two, site_slots=2).tolist()
    h = [codegen.token_hash(f.encode()) for f in ("<size$64>", "zmalloc")]
    assert k2[0] == codegen.token_hash(h[0].to_bytes(8, "little") + h[1].to_bytes(8, "little"))
    assert k2[0] != k2[1] and k2[2] == h[0] and k2[3] == 0
    assert B.site_keys(two[:2], 1).tolist() == [h[0], h[0]]


def test_json_round_trip_and_bad_tables():
    b = B.fit(_contexts(['a', 'b', 'c']), [0, 1, 2], [1, 1, 1], 0.4, 1, 1)
    d = json.loads(json.dumps(b.to_json()))
    c = B.Backoff.from_json(d)
    assert c.keys.tolist() == b.keys.tolist() and c.classes.tolist() == b.classes.tolist()
    assert (c.below, c.fallback, c.site_slots, c.pure) == (0.4, 1, 1, 0.0)
    assert c.purity.tolist() == b.purity.tolist()
    with pytest.raises(ValueError):
        B.Backoff.from_json({**d, "keys": d["keys"][::-1]})
    with pytest.raises(ValueError):
        B.Backoff.from_json({**d, "classes": d["classes"][:1]})
    # a table keyed by token ids (trained before the frame-text key): refused, not misread
    old = {**d, "key": "core/byte_hash.py of the site slots' int32 ids, little-endian"}
    with pytest.raises(ValueError, match="train it again"):
        B.Backoff.from_json(old)


def test_the_default_threshold_and_older_models():
    assert HParams().backoff_below == 0.4
    # a config.json from before the back-off: the model alone
    old = HParams.from_json({"weight_power": 0.5})
    assert (old.backoff_below, old.backoff_pure) == (0.0, 0.0)


def test_generated_source_carries_the_table():
    b = B.fit(_contexts(['a', 'b']), [3, 5], [1, 1], 0.4, 3, 1)
    head = codegen.data_header(3, 4, 8, 100, backoff=b)
    assert "kBackoffBelow = 0.4f" in head and "kBackoffSlots = 1" in head
    src = codegen.data_source(["a"], [str(i) for i in range(8)], 3, 4, "m", "folded", "v", [],
                              backoff=b)
    assert "kBackoffCount = 2u" in src and "kBackoffFallback = 3" in src
    for k in b.keys:
        assert f"0x{int(k):016x}ull" in src
    assert "kBackoffPure = 0.0f" in head and "kBackoffPurity[2]" in src
    none = codegen.data_header(3, 4, 8, 100)
    assert "kBackoffBelow = 0.0f" in none


def test_a_model_directorys_bad_back_off_is_one_line_naming_its_config():
    """model/io.py backoff_of (read_model_dir checks it with the rest of config.json)."""
    from model.io import ModelDirError, backoff_of

    b = B.fit(_contexts(['a', 'b', 'c']), [0, 1, 2], [1, 1, 1], 0.4, 1, 1, pure=1.0)
    hp = HParams(tokens_per_frame=4, backoff_below=0.4, backoff_pure=1.0)
    good = b.to_json()
    assert backoff_of({"backoff": good}, hp, "m/config.json").keys.tolist() == b.keys.tolist()
    assert backoff_of({}, hp, "m/config.json") is None  # trained before the back-off
    bad = {"truncated": {k: v for k, v in good.items() if k != "purity"},
           "unsorted": {**good, "keys": good["keys"][::-1]},
           "not hex": {**good, "keys": ["zz"] * len(good["keys"])},
           "other threshold": {**good, "below": 0.5},
           "keyed by ids": {**good, "key": "core/byte_hash.py of the site slots' int32 ids"}}
    for why, d in bad.items():
        with pytest.raises(ModelDirError) as e:
            backoff_of({"backoff": d}, hp, "m/config.json")
        msg = str(e.value)
        assert msg.startswith("m/config.json: backoff") and "\n" not in msg, (why, msg)
