"""A tiny real dataset for model tests: synthetic profiles over tests/native/sites.c
(real ELF symbolization), two programs with opposite lifetimes per site, built by
the real Beam job once per session."""

from __future__ import annotations

from pipeline import dataset
from core.context import ContextDefinition
from pipeline.dataset import DatasetConfig
from tests.synthetic import build_sites, make_profile

SITES = ("parse_request", "cache_insert", "registry_add", "session_open")
# program -> site -> (lifetime ms, censored): class = lifetime's decade (censored = inf)
LIFETIMES = {
    "sites_a": {"parse_request": (3, False), "cache_insert": (300, False),
                "registry_add": (5000, True), "session_open": (3000, False)},
    "sites_b": {"parse_request": (50, False), "cache_insert": (5, False),
                "registry_add": (600, False), "session_open": (40, False)},
    "sites_c": {"parse_request": (3, False), "cache_insert": (300, False),
                "registry_add": (5000, True), "session_open": (3000, False)},
}


def build_tiny_dataset(tmp, eval_percent: int = 50, vocab_path: str | None = None,
                       programs=("sites_a", "sites_b", "sites_c")) -> str:
    binary, addresses = build_sites(tmp)
    profiles = tmp / "profiles"
    profiles.mkdir(exist_ok=True)
    for i, program in enumerate(programs):
        samples = [(site, float(ms), censored)
                   for site, (ms, censored) in LIFETIMES[program].items()
                   for _ in range(5 + 3 * SITES.index(site) + i)]
        make_profile(str(profiles / f"{program}.ltprof"), binary, addresses, samples,
                     program=program, version_label="v1")
    out = tmp / "dataset"
    # 4 frames per context: the model reads them all (max_frames comes from the dataset).
    dataset.build_dataset([(str(profiles / "*.ltprof"), "v1")], str(out),
                          DatasetConfig(eval_percent=eval_percent,
                                        context=ContextDefinition.make(max_frames=4)),
                          vocab_path=vocab_path)
    return str(out)
