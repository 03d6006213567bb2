"""Labels and T95 under censoring, against hand-computed cases."""

import json

import pytest

from core.lifetimes import INF, LabelScheme, t95

WALL = LabelScheme()


def test_default_classes_are_the_papers():
    assert WALL.class_names == ["10ms", "100ms", "1s", "10s", "100s", "1000s", ">=1000s", "inf"]
    assert WALL.num_classes == 8 and WALL.inf_class == 7


@pytest.mark.parametrize("t95_ms, label", [
    (0.0, 0), (9.999, 0), (10.0, 1),  # exactly on a boundary goes up: T95 < 10 ms is false
    (99.99, 1), (100.0, 2), (999.0, 2), (1000.0, 3), (1e4, 4), (1e5, 5), (999_999, 5),
    (1e6, 6), (5e9, 6), (INF, 7)])
def test_label_boundaries(t95_ms, label):
    assert WALL.label(t95_ms) == label


def test_custom_scheme_and_bad_schemes():
    scheme = LabelScheme(clock="bytes", boundaries=(1e3, 1e6))
    assert scheme.class_names == ["1000B", "1e+06B", ">=1e+06B", "inf"]
    assert [scheme.label(x) for x in (999, 1000, 1e6, INF)] == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="increasing"):
        LabelScheme(boundaries=(10, 10))
    with pytest.raises(ValueError, match="unknown clock"):
        LabelScheme(clock="cpu")


def test_from_json_reads_what_to_json_wrote():
    """A dataset manifest's config.labels back to its scheme (simulate and the context
    tables read it this way), through JSON's lists and floats."""
    for scheme in (WALL, LabelScheme(clock="bytes", boundaries=(1e3, 1e6))):
        assert LabelScheme.from_json(json.loads(json.dumps(scheme.to_json()))) == scheme
    with pytest.raises(KeyError):
        LabelScheme.from_json({"clock": "wall"})
    with pytest.raises(ValueError, match="increasing"):
        LabelScheme.from_json({"clock": "wall", "boundaries": [10, 10]})


def test_t95_without_censoring_is_the_inverse_cdf():
    values = list(range(1, 101))  # 1..100
    assert t95(values, [False] * 100, [1.0] * 100) == 95
    assert t95([5.0], [False], [1.0]) == 5.0


def test_t95_is_weighted():
    # 90% of the weight at 1 ms, 10% at 50 ms: the 95th percentile is 50 ms.
    assert t95([1.0, 50.0], [False, False], [9.0, 1.0]) == 50.0
    assert t95([1.0, 50.0], [False, False], [99.0, 1.0]) == 1.0


def test_censored_young_objects_only_leave_the_risk_set():
    # Freed at 3 ms (x18); two objects still live at exit, aged 1 ms and 2 ms.
    # Kaplan-Meier: at 3 ms all 18 at risk are freed -> F = 1, so T95 = 3 ms.
    values = [3.0] * 18 + [1.0, 2.0]
    censored = [False] * 18 + [True, True]
    assert t95(values, censored, [1.0] * 20) == 3.0


def test_all_censored_is_never_freed():
    assert t95([100.0, 2000.0], [True, True], [1.0, 1.0]) == INF


def test_censored_tail_beyond_every_free_is_undetermined():
    # Half freed at 3 ms, half still live at 10 s: F stays at 0.5 -> inf.
    values = [3.0] * 10 + [10_000.0] * 10
    assert t95(values, [False] * 10 + [True] * 10, [1.0] * 20) == INF
    # One live object in forty is under 5%: T95 is the last free.
    values = [3.0] * 39 + [10_000.0]
    assert t95(values, [False] * 39 + [True], [1.0] * 40) == 3.0


def test_ties_count_frees_before_censorings():
    # At t=5 one free and one censoring: the free is counted with both at risk.
    assert t95([5.0, 5.0], [False, True], [1.0, 1.0]) == INF
    assert t95([5.0, 5.0, 5.0], [False, False, True], [1.0, 1.0, 0.05]) == 5.0


def test_t95_of_nothing_is_an_error():
    with pytest.raises(ValueError):
        t95([], [], [])
