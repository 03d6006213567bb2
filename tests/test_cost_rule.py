"""The decision rule (core.lifetimes.cost_rule): the class of least expected memory
cost for a context's class distribution, checked against costs computed by hand.

Default scheme: bounds 10 ms .. 1000 s, so with deadline factor K = 2 and the default
horizon H = 10 x 1000 s = 1e7 ms:

    life(c) = [10, 100, 1e3, 1e4, 1e5, 1e6, 1e7, 1e7]          (ms; open-ended and inf = H)
    hold(k) = [20, 200, 2e3, 2e4, 2e5, 2e6, 1e7, 1e7]          (K x bound; H)
    cost(k | c) = hold(k) - life(c) (c < k);  life(c) - hold(k), at least 0 (c > k)
"""

from __future__ import annotations

import pytest

from core.lifetimes import LabelScheme, class_costs, cost_horizon, cost_rule, default_horizon

B = LabelScheme().boundaries  # (10, 100, 1e3, 1e4, 1e5, 1e6) ms
INF = 7
A1 = {"under_weight": 1.0}  # the costs below are worked by hand with A = 1


def dist(**mass) -> list[float]:
    p = [0.0] * 8
    for k, v in mass.items():
        p[int(k[1:])] = v
    return p


def test_default_horizon_is_the_decade_after_the_last_bound():
    assert default_horizon(B) == 1e7


def test_mostly_short_context_with_a_never_freed_tail_is_placed_short():
    """90% die within 10 ms, 10% never freed: T95 says inf; the cost rule says <10ms."""
    p = dist(c0=0.9, c7=0.1)
    costs = class_costs(p, B, **A1)
    assert costs[0] == pytest.approx(0.1 * (1e7 - 20))            # the tail outlives hold(0)
    assert costs[1] == pytest.approx(0.9 * (200 - 10) + 0.1 * (1e7 - 200))
    assert costs[INF] == pytest.approx(0.9 * (1e7 - 10))           # holes never reused
    assert costs[6] == costs[INF]                                  # no deadline either
    assert cost_rule(p, B, **A1) == 0
    # T95 of this context is inf (10% > 5% never freed).
    assert min(range(8), key=lambda k: costs[k]) == 0


def test_short_and_ten_second_mix_turns_at_two_thirds():
    """<10ms vs <10s: the longer class wins once it holds more than K/(1+K) = 2/3."""
    half = dist(c0=0.5, c3=0.5)
    costs = class_costs(half, B, **A1)
    assert costs[:4] == pytest.approx([0.5 * (1e4 - 20),                      # 4990
                                       0.5 * (200 - 10) + 0.5 * (1e4 - 200),   # 4995
                                       0.5 * (2000 - 10) + 0.5 * (1e4 - 2000),  # 4995
                                       0.5 * (2e4 - 10)])                      # 9995
    assert cost_rule(half, B, **A1) == 0

    p = dist(c0=0.3, c3=0.7)
    costs = class_costs(p, B, **A1)
    assert costs[:5] == pytest.approx([0.7 * (1e4 - 20),                      # 6986
                                       0.3 * 190 + 0.7 * (1e4 - 200),          # 6917
                                       0.3 * 1990 + 0.7 * (1e4 - 2000),        # 6197
                                       0.3 * (2e4 - 10),                       # 5997
                                       0.3 * (2e5 - 10) + 0.7 * (2e5 - 1e4)])  # 192997
    assert cost_rule(p, B, **A1) == 3


def test_inf_majority_ties_the_open_ended_class_and_takes_the_longest():
    p = dist(c0=0.4, c7=0.6)
    costs = class_costs(p, B, **A1)
    assert costs[0] == pytest.approx(0.6 * (1e7 - 20))
    assert costs[6] == costs[INF] == pytest.approx(0.4 * (1e7 - 10))
    assert cost_rule(p, B, **A1) == INF  # ties: the longest class
    assert cost_rule(dist(c7=1.0), B, **A1) == INF
    assert cost_rule(dist(c6=1.0), B, **A1) == INF  # >=1000s and inf cost the same: never reused


def test_pure_context_is_its_own_class_and_ties_go_long():
    for c in range(6):
        p = [0.0] * 8
        p[c] = 3.0  # weights need not sum to 1
        assert cost_rule(p, B, **A1) == c
        assert class_costs(p, B, **A1)[c] == 0
    # K = 20: hold(0) = 200 ms >= life(1) = 100 ms, so <10ms costs nothing for <100ms
    # objects either; the tie goes to the longer (the object's own) class.
    assert class_costs(dist(c1=1.0), B, deadline_k=20, **A1)[0] == 0
    assert cost_rule(dist(c1=1.0), B, deadline_k=20, **A1) == 1


def test_horizon_is_never_reused_and_at_least_the_longest_deadline():
    """H only prices the classes without a deadline; a shorter one is raised to K x the
    last bound, so a run's length cannot make <100s cost what inf costs."""
    assert cost_horizon(B) == 1e7
    assert cost_horizon(B, horizon=6e4) == 2e6       # raised to 2 x 1000 s
    assert cost_horizon(B, deadline_k=20) == 2e7     # 20 x 1000 s > 10 x 1000 s
    p = dist(c0=0.5, c4=0.5)
    costs = class_costs(p, B, horizon=6e4, **A1)
    assert costs[4] == pytest.approx(0.5 * (2e5 - 10))
    assert costs[6] == costs[INF] == pytest.approx(0.5 * (2e6 - 10) + 0.5 * (2e6 - 1e5))
    assert costs[0] == pytest.approx(0.5 * (1e5 - 20))
    assert cost_rule(p, B, horizon=6e4, **A1) == 0
    # A context of 72% <100s, the rest shorter, nothing never freed (Redis's session
    # values): <100s, never inf (a horizon of the run's 60 s made them tie).
    sessions = dist(c0=0.055, c1=0.004, c2=0.124, c3=0.099, c4=0.718)
    assert cost_rule(sessions, B, **A1) == 4
    assert cost_rule(sessions, B, horizon=6e4, **A1) == 4


def test_under_weight_19_leans_to_the_tail_like_t95():
    """Under-prediction 19x as costly (the pinball loss T95 minimises) keeps the tail's
    class for a 90/10 mix, as T95 does."""
    assert cost_rule(dist(c0=0.9, c7=0.1), B, under_weight=19) == INF
    # 10% living 10 s: <1s costs 0.9 x 1990 + 0.1 x 19 x (1e4 - 2000) = 16991, <10s
    # 0.9 x (2e4 - 10) = 17991: close to the tail, short of it (hold(3) is 2 x its bound).
    costs = class_costs(dist(c0=0.9, c3=0.1), B, under_weight=19)
    assert costs[2:4] == pytest.approx([16991, 17991])
    assert cost_rule(dist(c0=0.9, c3=0.1), B, under_weight=19) == 2
    assert cost_rule(dist(c0=0.9, c3=0.1), B, **A1) == 0
    assert cost_rule(dist(c0=0.99, c3=0.01), B, under_weight=19) == 0


def test_the_projects_weight_wants_four_fifths_for_inf():
    """The default A = 0.25 (chosen on selection data: benchmarks/cost_rule_selection.py):
    against <10ms, inf needs more than A / (1 + A) = 1/5 short, i.e. over 4/5 never freed."""
    assert cost_rule(dist(c0=0.4, c7=0.6), B) == 0       # inf wins this with A = 1
    assert cost_rule(dist(c0=0.4, c7=0.6), B, **A1) == INF
    assert cost_rule(dist(c0=0.15, c7=0.85), B) == INF


@pytest.mark.parametrize("p", [[1.0] * 7, [0.0] * 8, [1.0, -1.0] + [0.0] * 6,
                               [float("nan")] + [0.0] * 7, [float("inf")] + [0.0] * 7])
def test_bad_distributions_are_refused(p):
    with pytest.raises(ValueError):
        cost_rule(p, B)
