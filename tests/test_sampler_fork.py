"""Forked children are independent Poisson samples (issue 20, item 8).

A child copies its parent's random state and distance to the next sample point; the
sampler gave every child of one parent the same stream, so 200 children doing the
same work sampled the same allocations.  tests/native/fork_many.c forks 200 children
that each make the same 400 allocations, allocation i of size BASE + i (a sample's
size names its index).  Independent children: sample counts spread like a
Poisson-binomial, and two children share sampled allocations only by chance:
E|A & B| = sum p_i^2, with p_i = 1 - exp(-size_i / interval).  With LIFETIME_SEED the
children stay independent of each other and the whole run is reproducible.
"""

from __future__ import annotations

import math
from collections import Counter

import pytest

from tests.sampler_support import pb, read_all, run_sampled

CHILDREN, ALLOCS, BASE, INTERVAL = 200, 400, 1000, 8192
P = [1 - math.exp(-(BASE + i) / INTERVAL) for i in range(ALLOCS)]


def _children(bins, out_dir, extra_env=None, where="main") -> list[frozenset[int]]:
    """Runs fork_many; the sampled allocation indices of each child."""
    proc = run_sampled([bins["fork_many"], str(CHILDREN), str(ALLOCS), str(BASE), where],
                       out_dir, interval=INTERVAL, extra_env=extra_env)
    parent = int(proc.stdout.split()[1])
    children = []
    for prof in read_all(out_dir):
        if prof.header.forked_from_pid != parent:
            continue
        assert prof.trailer.end_reason == pb.END_EXIT
        children.append(frozenset(s.size - BASE for s in prof.samples
                                  if BASE <= s.size < BASE + ALLOCS
                                  and s.alloc_function == pb.MALLOC))
    assert len(children) == CHILDREN
    return children


def _check_independent(children: list[frozenset[int]]) -> None:
    counts = [len(c) for c in children]
    mean = sum(counts) / len(counts)
    var = sum((c - mean) ** 2 for c in counts) / (len(counts) - 1)
    expected_mean = sum(P)                        # ~54.6
    expected_var = sum(p * (1 - p) for p in P)    # ~47.1
    assert len(set(counts)) > 1, f"every child sampled {counts[0]} allocations"
    # 200 children: the mean's standard error is ~0.5, the variance's ~10%
    assert abs(mean - expected_mean) < 0.15 * expected_mean, (mean, expected_mean)
    assert 0.5 < var / expected_var < 2, (var, expected_var)
    # mean overlap over all pairs = sum_i C(k_i, 2) / C(n, 2), k_i = children that
    # sampled allocation i: unbiased for sum p_i^2 (~7.7; identical children: ~54.6),
    # its standard error ~2%
    k = Counter(i for c in children for i in c)
    pairs = math.comb(len(children), 2)
    overlap = sum(math.comb(v, 2) for v in k.values()) / pairs
    chance = sum(p * p for p in P)
    assert overlap < 1.3 * chance, (overlap, chance)
    jaccard = sum(len(a & b) / max(1, len(a | b))
                  for a, b in zip(children, children[1:])) / (len(children) - 1)
    assert jaccard < 0.2, jaccard  # chance ~0.08; identical children: 1


def test_forked_children_sample_independently(bins, tmp_path):
    _check_independent(_children(bins, tmp_path))


@pytest.mark.parametrize("where", ["main", "thread"])
def test_seeded_children_are_independent_and_reproducible(bins, tmp_path, where):
    """"thread": each child allocates on a thread it creates, whose seed derives from
    the child's own seed, not from the parent's (which every sibling shares)."""
    runs = [_children(bins, tmp_path / name, {"LIFETIME_SEED": "20"}, where) for name in "ab"]
    for children in runs:
        _check_independent(children)
    # the same children, whatever order they ran and were read in
    assert sorted(map(sorted, runs[0])) == sorted(map(sorted, runs[1]))
