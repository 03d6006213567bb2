"""TCMalloc's removed lifetime rule as a baseline predictor (issue 34, item 4): its
counters on hand-written traces (model/tcmalloc_rule.py), the simulator's twin
(simulator/src/tcmalloc_rule.h) giving the same classes, and its Table 3 rows."""

from __future__ import annotations

import collections
import random

import pytest

import simulator
from model import tcmalloc_rule as R
from model.metrics import split_classification_metrics
from simulator import model_input
from simulator.trace import write_trace

MS = 1_000_000
S = 1000 * MS
MIB = 1 << 20
BIG = 2 * MIB


def _short_lived(n, key="a", size=BIG, start=0, every=S, life=100 * MS):
    """n objects of `key`, one per `every`, each freed after `life`."""
    return [(start + i * every, start + i * every + life, size, key) for i in range(n)]


def test_short_only_once_short_exceeds_long_by_more_than_ten():
    got = R.LifetimeRule("large").replay(_short_lived(14))
    # object i is predicted with i short objects counted: short > 0 + 10 first at i = 11
    assert got == [False] * 11 + [True] * 3


def test_long_objects_hold_it_back_and_count_once_past_half_a_second():
    rule = R.LifetimeRule("large")
    # one object never freed, then shorts one a second: the first is long once it is
    # 0.5 s old, so the shorts need 12 (> 1 + 10)
    objs = [(0, None, BIG, "a")] + _short_lived(14, start=S)
    got = rule.replay(objs)
    assert got[0] is False and got[1:] == [False] * 12 + [True] * 2
    assert rule.counts("a") == (13, 1)


def test_half_a_second_exactly_is_short_a_nanosecond_more_is_long():
    rule = R.LifetimeRule("all")
    rule.replay([(0, 500 * MS, 64, "a"), (10 * MS, 10 * MS + 500 * MS + 1, 64, "b"),
                 (2 * S, None, 64, "c")])
    assert rule.counts("a") == (1, 0) and rule.counts("b") == (0, 1)


def test_expiry_is_counted_at_the_next_tracker_event_only():
    rule = R.LifetimeRule("large")
    # "a" lives on; the next tracker event (an allocation of a covered object) comes at
    # 10 s: small objects in between are no tracker events for the large-only rule
    rule.replay([(0, None, BIG, "a"), (S, None, 64, "x"), (2 * S, 2 * S + 1, 64, "x")])
    assert rule.counts("a") == (0, 0)
    rule.step(10 * S, None, BIG, "b")
    assert rule.counts("a") == (0, 1)
    # a free is a tracker event too: "b" (10 s) is not expired at the allocation of "c"
    # (10.2 s), and expires at c's free at 11 s, as c does (0.8 s old: long, not short)
    rule.step(10 * S + 200 * MS, 11 * S, BIG, "c")
    assert rule.counts("b") == (0, 0)
    rule.step(12 * S, None, 64, "y")  # not covered, but it brings the frees up to 12 s
    assert rule.counts("b") == (0, 1) and rule.counts("c") == (0, 1)


def test_size_cutoff_is_over_half_a_huge_page():
    assert not R.covered(MIB, "large") and R.covered(MIB + 1, "large")
    assert R.covered(1 << 30, "large") and not R.covered((1 << 30) + 1, "large")
    assert R.covered(1, "all") and R.covered(MIB, "all")
    # exactly 1 MiB objects: not the large rule's; the all-sizes rule learns them
    objs = _short_lived(14, size=MIB)
    assert R.LifetimeRule("large").replay(objs) == [None] * 14
    assert R.LifetimeRule("all").replay(objs) == [False] * 11 + [True] * 3


def test_database_evicts_the_least_recently_looked_up_stack():
    rule = R.LifetimeRule("all", database_size=2)
    rule.replay([(0, 1, 64, "a"), (10, 11, 64, "b"), (20, 21, 64, "a"), (30, 31, 64, "c")])
    assert rule.evictions == 1 and rule.counts("b") is None
    assert rule.counts("a") == (2, 0) and rule.counts("c") == (0, 0)


def test_classes_short_is_the_class_holding_half_a_second_long_is_inf():
    assert R.short_class((10.0, 100.0, 1000.0, 10000.0)) == 2
    assert R.short_class((500.0, 1000.0)) == 1  # a lifetime of 0.5 s is not < 500 ms
    got = R.predict_classes([None, True, False], short_cls=2, long_cls=7, fallback=0)
    assert got.tolist() == [0, 2, 7]


def test_split_metrics_count_samples_where_they_went():
    names = ["a", "b", "c"]
    m = split_classification_metrics([0, 2, 1], [{0: 3, 2: 1}, {2: 4}, {}], names)
    assert m["contexts"] == 2 and m["samples"] == 8
    assert m["weighted"]["exact"] == pytest.approx(7 / 8)
    assert m["unweighted"]["exact"] == pytest.approx((0.75 + 1) / 2)
    assert m["weighted"]["over_prediction"] == pytest.approx(1 / 8)


def _random_trace(n=6000, seed=3):
    rng = random.Random(seed)
    t, out = 0, []
    for _ in range(n):
        t += rng.randint(0, 40 * MS)
        r = rng.random()
        life = None if r < 0.1 else (500 * MS if r < 0.15 else rng.randint(0, 900 * MS))
        out.append((t, None if life is None else t + life,
                    rng.choice([64, 5000, MIB, MIB + 1, 3 * MIB]), rng.randint(1, 5)))
    return out


def test_simulator_twin_gives_the_python_rules_classes(tmp_path):
    objs = _random_trace()
    trace = write_trace(tmp_path / "t.lttrace", [(a, f, s, k, 1, 0) for a, f, s, k in objs],
                        end_ns=objs[-1][0] + 2 * S)
    served = tmp_path / "served.txt"
    rep = simulator.simulate(trace, ["large=tcmalloc-rule:large", "all=tcmalloc-rule:all"],
                             baseline=False, table_default=0, model_served=served)
    got = model_input.read_served(str(served))
    for label in ("large", "all"):
        shorts = R.LifetimeRule(label).replay(objs)
        classes = R.predict_classes(shorts, short_cls=2, long_cls=7, fallback=0)
        want: dict = collections.defaultdict(collections.Counter)
        for (_, _, _, k), c in zip(objs, classes.tolist()):
            want[k][c] += 1
        assert {k: dict(v) for k, v in want.items()} == got[label], label
        p = next(a for a in rep["allocators"] if a["name"] == f"llama:{label}")["predictor"]
        assert p["kind"] == "tcmalloc_rule" and p["sizes"] == label
        assert p["short_class"] == 2 and p["long_class"] == 7 and p["fallback_class"] == 0
        assert p["predicted_short"] == sum(1 for s in shorts if s)
        assert p["eligible_objects"] == sum(1 for s in shorts if s is not None)
        assert 0 < p["predicted_short"] < p["eligible_objects"]
    # same inputs, same outputs
    again = simulator.simulate(trace, ["large=tcmalloc-rule:large", "all=tcmalloc-rule:all"],
                               baseline=False, table_default=0)
    assert again["allocators"] == rep["allocators"]


def test_bad_rule_spec_is_refused(tmp_path):
    trace = write_trace(tmp_path / "t.lttrace", [(0, 10, 64, 1, 1, 0)])
    with pytest.raises(simulator.SimulationError, match="tcmalloc-rule:large|all"):
        simulator.simulate(trace, ["tcmalloc-rule:huge"])


def _rule_profile(path, binary, addresses):
    """15 objects a second from each of three sites: parse_request 64 B living 100 ms,
    cache_insert 2 MiB living 100 ms, registry_add 2 MiB never freed (weight 1 each)."""
    from profile_format import profile_pb2, write_profile
    from tests.synthetic import LOAD

    chunk = profile_pb2.ProfileChunk()
    h = chunk.header
    h.schema_version = profile_pb2.SCHEMA_VERSION
    h.program, h.version_label, h.pid, h.full_trace = "rule", "v2", 1, True
    h.sampling_interval_bytes = 1
    chunk.mappings.add(id=1, start=LOAD, limit=LOAD + 0x100000, file_offset=0, path=binary,
                       build_id=bytes.fromhex("1234abcd"))
    sites = {"parse_request": (64, 100 * MS), "cache_insert": (BIG, 100 * MS),
             "registry_add": (BIG, None)}
    for sid, site in enumerate(sites, 1):
        chunk.stacks.add(id=sid, addresses=[addresses[site] + 4, addresses["main"] + 8])
    end = 20 * S
    for i in range(15):
        for sid, (size, life) in enumerate(sites.values(), 1):
            t = i * S + sid * MS
            s = chunk.samples.add(stack_id=sid, size=size, weight=1.0, alloc_monotonic_ns=t,
                                  alloc_function=profile_pb2.MALLOC)
            if life is None:
                s.censored, s.observed_age_ns = True, end - t
            else:
                s.free_monotonic_ns, s.free_function = t + life, profile_pb2.FREE
    tail = profile_pb2.ProfileChunk()
    tail.trailer.end_reason, tail.trailer.end_monotonic_ns = profile_pb2.END_EXIT, end
    write_profile(str(path), [chunk, tail])
    return list(sites)


def test_report_replays_the_rule_over_the_test_datasets_profiles(tmp_path):
    """What `lifetime report` runs: the rule over a dataset's input profiles, in time
    order, per context of the dataset's definition, then scored like the tables."""
    import json
    import types

    import numpy as np

    from core.context import ContextDefinition
    from core.lifetimes import LabelScheme
    from model.compare import compare
    from model.data import Examples
    from pipeline import dataset
    from pipeline.dataset import DatasetConfig
    from tests.synthetic import build_sites

    binary, addresses = build_sites(tmp_path)
    (tmp_path / "p").mkdir()
    sites = _rule_profile(tmp_path / "p" / "rule.ltprof", binary, addresses)
    out = tmp_path / "ds"
    dataset.build_dataset([(str(tmp_path / "p" / "rule.ltprof"), "v2")], str(out),
                          DatasetConfig(context=ContextDefinition.make(max_frames=4)))
    manifest = json.loads((out / "manifest.json").read_text())
    test_set = types.SimpleNamespace(manifest=manifest,
                                     context=ContextDefinition.from_json(manifest["context"]))
    scheme, fallback = LabelScheme(), 4
    got = R.replay_datasets([test_set], scheme, fallback)
    keys = {site: k for k in got["all"] for site in sites if k[2][0] == site}
    assert set(keys) == set(sites) and keys["cache_insert"][:2] == ("rule", "v2")
    short, inf = 2, scheme.inf_class
    # the first 11 of a site learn (long), then short > long + 10
    assert got["all"][keys["parse_request"]] == {inf: 11, short: 4}
    assert got["large"][keys["parse_request"]] == {fallback: 15}  # 64 B: not the large rule's
    for variant in ("large", "all"):
        assert got[variant][keys["cache_insert"]] == {inf: 11, short: 4}
        assert got[variant][keys["registry_add"]] == {inf: 15}
    # scored against the context labels like the tables (compare's split predictors)
    frames = [keys[s][2] for s in sites]
    test = Examples([[]] * 3, frames, np.array([1, 1, inf], np.int32), np.full(3, 15, np.float32),
                    np.array(["a", "b", "c"], object), np.array(["rule"] * 3, object),
                    np.array(["v2"] * 3, object))
    given = R.aligned(got["all"], test)
    assert R.coverage(given, test) == 1.0
    train = test
    names = scheme.class_names
    res = compare(np.array([1, 1, inf]), train, test, names,
                  split={R.NAMES["all"]: given})
    rule = res["overall"][R.NAMES["all"]]
    assert rule["contexts"] == 3 and rule["samples"] == 45
    assert rule["weighted"]["exact"] == pytest.approx(15 / 45)
    assert rule["unweighted"]["exact"] == pytest.approx(1 / 3)
    assert res["overall"]["model"]["weighted"]["exact"] == 1.0
