"""The model's back-off (model/backoff.py): fitted, applied, stored, keyed as the export."""

import json

import numpy as np
import pytest

from core import byte_hash
from export import codegen
from model import backoff as B
from model.hparams import HParams


def _layouts(sites, tpf=4, frames=3):
    """One layout row per site id: slot 0 holds [site, site + 1, 0, 0], the rest a filler."""
    out = np.zeros((len(sites), frames * tpf), np.int32)
    for i, s in enumerate(sites):
        out[i, 0:2] = [s, s + 1]
        out[i, tpf] = 7  # frame 1: never part of the key
    return out


def test_fit_takes_each_sites_weighted_majority_and_the_training_majority_as_fallback():
    layouts = _layouts([10, 10, 10, 20, 20])
    b = B.fit(layouts, labels=[1, 1, 3, 2, 5], weights=[1, 1, 5, 2, 2], below=0.5,
              fallback=0, site_slots=1, tokens_per_frame=4)
    assert len(b.keys) == 2 and np.all(np.diff(b.keys.astype(np.float64)) > 0)
    # site 10: class 3 (weight 5 against 2); site 20: a tie, the smaller class wins
    assert b.site_classes(_layouts([10, 20, 30])).tolist() == [3, 2, 0]


def test_apply_backs_off_only_where_the_model_is_unsure():
    b = B.fit(_layouts([10]), [4], [1.0], below=0.5, fallback=6, site_slots=1, tokens_per_frame=4)
    probs = np.array([[0.6, 0.4, 0, 0, 0, 0, 0],    # sure: argmax 0
                      [0.45, 0.35, 0.2, 0, 0, 0, 0],  # unsure, seen site: 4
                      [0.45, 0.35, 0.2, 0, 0, 0, 0],  # unsure, unseen site: the fallback 6
                      [0.5, 0.5, 0, 0, 0, 0, 0]], np.float32)  # 0.5 is not below 0.5
    got = b.apply(probs, _layouts([10, 10, 99, 10]))
    assert got.tolist() == [0, 4, 6, 0]
    off = B.Backoff(0.0, 6, 1, 4, b.keys, b.classes, b.purity)
    assert off.apply(probs, _layouts([10, 10, 99, 10])).tolist() == [0, 0, 0, 0]


def test_a_pure_site_is_served_its_class_even_where_the_model_is_sure():
    layouts = _layouts([10, 10, 20, 20])
    b = B.fit(layouts, [4, 4, 2, 3], [3.0, 1.0, 3.0, 1.0], below=0.4, fallback=6, site_slots=1,
              tokens_per_frame=4, pure=0.9)
    assert sorted(b.purity.tolist()) == [0.75, 1.0]  # site 10 all class 4; site 20 3/4 in class 2
    sure = np.array([[0.9, 0.1, 0, 0, 0, 0, 0]] * 3, np.float32)
    # site 10 is pure: its class; site 20 is not: the model's; an unseen site: the model's
    assert b.apply(sure, _layouts([10, 20, 99])).tolist() == [4, 0, 0]


def test_the_key_is_the_site_slots_ids_hashed_as_the_exported_library_hashes():
    layouts = _layouts([10, 11])
    keys = B.site_keys(layouts, site_slots=1, tokens_per_frame=4)
    want = [codegen.token_hash(np.array(r[:4], "<i4").tobytes()) for r in layouts]
    assert keys.tolist() == want
    assert byte_hash.hash_bytes is codegen.token_hash
    # two slots (a size frame, then the site): frame 1 is part of the key
    two = _layouts([10, 10])
    two[1, 4] = 8
    k2 = B.site_keys(two, site_slots=2, tokens_per_frame=4)
    assert k2[0] != k2[1] and B.site_keys(two, 1, 4)[0] == B.site_keys(two, 1, 4)[1]


def test_json_round_trip_and_bad_tables():
    b = B.fit(_layouts([1, 2, 3]), [0, 1, 2], [1, 1, 1], 0.4, 1, 1, 4)
    d = json.loads(json.dumps(b.to_json()))
    c = B.Backoff.from_json(d)
    assert c.keys.tolist() == b.keys.tolist() and c.classes.tolist() == b.classes.tolist()
    assert (c.below, c.fallback, c.site_slots, c.tokens_per_frame, c.pure) == (0.4, 1, 1, 4, 0.0)
    assert c.purity.tolist() == b.purity.tolist()
    with pytest.raises(ValueError):
        B.Backoff.from_json({**d, "keys": d["keys"][::-1]})
    with pytest.raises(ValueError):
        B.Backoff.from_json({**d, "classes": d["classes"][:1]})


def test_the_default_threshold_and_older_models():
    assert HParams().backoff_below == 0.4
    # a config.json from before the back-off: the model alone
    old = HParams.from_json({"weight_power": 0.5})
    assert (old.backoff_below, old.backoff_pure) == (0.0, 0.0)


def test_generated_source_carries_the_table():
    b = B.fit(_layouts([1, 2]), [3, 5], [1, 1], 0.4, 3, 1, 4)
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

    b = B.fit(_layouts([1, 2, 3]), [0, 1, 2], [1, 1, 1], 0.4, 1, 1, 4, pure=1.0)
    hp = HParams(tokens_per_frame=4, backoff_below=0.4, backoff_pure=1.0)
    good = b.to_json()
    assert backoff_of({"backoff": good}, hp, "m/config.json").keys.tolist() == b.keys.tolist()
    assert backoff_of({}, hp, "m/config.json") is None  # trained before the back-off
    bad = {"truncated": {k: v for k, v in good.items() if k != "purity"},
           "unsorted": {**good, "keys": good["keys"][::-1]},
           "not hex": {**good, "keys": ["zz"] * len(good["keys"])},
           "other threshold": {**good, "below": 0.5}}
    for why, d in bad.items():
        with pytest.raises(ModelDirError) as e:
            backoff_of({"backoff": d}, hp, "m/config.json")
        msg = str(e.value)
        assert msg.startswith("m/config.json: backoff") and "\n" not in msg, (why, msg)
