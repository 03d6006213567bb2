"""The dataset job's fast paths give exactly what the plain definitions give (issue 23:
no output byte may change): hand-written tf.train.Example bytes vs TensorFlow's,
vectorized T95 / purity / per-stack aggregation vs the sample-by-sample loops."""

from __future__ import annotations

import dataclasses
import math
import random

import numpy as np
import pytest

from core import lifetimes, tokenizer
from pipeline import context_stats, examples


def _tf_example(context: dict, vocab: tokenizer.Vocabulary) -> bytes:
    tf = pytest.importorskip("tensorflow")

    def feature(values, kind):
        if kind == "bytes":
            return tf.train.Feature(bytes_list=tf.train.BytesList(
                value=[v.encode("utf-8") for v in values]))
        if kind == "int":
            return tf.train.Feature(int64_list=tf.train.Int64List(value=values))
        return tf.train.Feature(float_list=tf.train.FloatList(value=values))

    features = {
        "tokens": feature(context["tokens"], "bytes"),
        "token_ids": feature(vocab.ids(context["tokens"]), "int"),
        "frames": feature(context["frames"], "bytes"),
        "label": feature([context["label"]], "int"),
        "weight": feature([float(context["stats"]["samples"])], "float"),
        "context_id": feature([context["context_id"]], "bytes"),
        "program": feature([context["program"]], "bytes"),
        "version_label": feature([context["version_label"]], "bytes"),
    }
    example = tf.train.Example(features=tf.train.Features(feature=features))
    return example.SerializeToString(deterministic=True)


def test_examples_are_tensorflows_bytes():
    rng = random.Random(1)
    parts = ["a", "Zz", "é", "日本", "x" * 200, "", "<sep>", "::", "f(int, char*)"]
    vocab = tokenizer.Vocabulary.from_ranked(["a", "Zz", "é"] + [f"t{i}" for i in range(300)])
    for _ in range(500):
        frames = ["".join(rng.choice(parts) for _ in range(rng.randint(0, 5)))
                  for _ in range(rng.randint(0, 40))]
        context = {
            "tokens": tokenizer.tokenize(frames)
            + [f"t{rng.randint(0, 400)}" for _ in range(rng.randint(0, 300))],
            "frames": frames, "label": rng.choice([-1, 0, 1, 7, 127, 128, 300, 2 ** 40]),
            "stats": {"samples": rng.choice([0, 1, 3, 2 ** 24 + 1, 10 ** 12, 10 ** 40])},
            "context_id": "%016x" % rng.getrandbits(64),
            "program": rng.choice(["", "p", "é" * 100]), "version_label": rng.choice(["", "v1"])}
        assert examples.make_example(context, vocab) == _tf_example(context, vocab)


def _stats(values, censored, weights, sizes) -> context_stats.ContextStats:
    stats = context_stats.ContextStats()
    for v, c, w, s in zip(values, censored, weights, sizes):
        stats.add(float(v), bool(c), float(w), int(s))
    return stats


def _reference_t95(stats: context_stats.ContextStats):
    order = sorted(range(stats.samples), key=lambda i: (
        stats.obs_lifetime[i], stats.obs_censored[i], stats.obs_weight[i], stats.obs_size[i]))
    try:
        return lifetimes.t95([stats.obs_lifetime[i] for i in order],
                             [bool(stats.obs_censored[i]) for i in order],
                             [stats.obs_weight[i] for i in order])
    except ZeroDivisionError:
        return ZeroDivisionError


def test_vectorized_t95_and_purity_match_the_loops():
    rng = np.random.default_rng(3)
    scheme = lifetimes.LabelScheme()
    for trial in range(600):
        n = int(rng.integers(1, 300))
        values = [rng.integers(0, 20, n) * 1.0, rng.exponential(100, n),
                  rng.integers(0, 3, n * 5) * 1.0,  # tie groups longer than the short path
                  rng.choice([0.0, 5.0, 1e1, 1e2, 1e6, 3e6, math.inf], n)][trial % 4]
        n = len(values)
        censored = rng.random(n) < rng.choice([0, 0.05, 0.5, 0.99, 1.0])
        weights = (rng.choice([1.0, 0.0, 2.5, 1 / 3, 1e300], n) if trial % 7 == 0
                   else 1 / (1 - np.exp(-rng.integers(1, 5000, n) / 2048)))
        stats = _stats(values, censored, weights, rng.integers(0, 100, n))
        try:
            got = stats.t95()
        except ZeroDivisionError:
            got = ZeroDivisionError
        assert got == _reference_t95(stats), trial
        for label in range(scheme.num_classes):
            own = [scheme.inf_class if c else scheme.label(v)
                   for v, c in zip(stats.obs_lifetime, stats.obs_censored)]
            assert stats.pure_samples(label, scheme) == own.count(label)


class _Sample:
    def __init__(self, **fields):
        self.__dict__.update(fields)


def _reference_stack_stats(samples, clock):
    per_stack = {}
    for s in samples:
        stats = per_stack.setdefault(s.stack_id, context_stats.ContextStats())
        stats.add(lifetimes.lifetime_on_clock(s, clock), s.censored, s.weight, s.size)
    return per_stack


@pytest.mark.parametrize("clock", ["wall", "bytes"])
def test_stack_stats_match_adding_sample_by_sample(clock):
    rng = np.random.default_rng(5)
    for _ in range(100):
        samples = []
        for _ in range(int(rng.integers(0, 400))):
            censored = bool(rng.random() < 0.3)
            alloc = int(rng.integers(0, 10 ** 12))
            free = 0 if censored else alloc + int(rng.integers(0, 10 ** 10))
            samples.append(_Sample(
                stack_id=int(rng.integers(0, 4)), censored=censored,
                weight=float(1 / (1 - np.exp(-rng.integers(1, 9000) / 2048))),
                size=int(rng.integers(0, 2 ** 40)), alloc_monotonic_ns=alloc,
                free_monotonic_ns=free, alloc_allocated_bytes=alloc, free_allocated_bytes=free,
                observed_age_ns=int(rng.integers(0, 10 ** 10)) if censored else 0,
                observed_age_bytes=int(rng.integers(0, 10 ** 9)) if censored else 0))
        want = _reference_stack_stats(samples, clock)
        got = context_stats.stack_stats(iter(samples), clock)
        assert list(got) == list(want)
        for stack_id, stats in want.items():
            for field in dataclasses.fields(context_stats.ContextStats):
                a, b = getattr(got[stack_id], field.name), getattr(stats, field.name)
                assert (a.hex() == b.hex()) if isinstance(a, float) else a == b, field.name
