"""Two small synthetic profiles over tests/native/sites.c (tests/synthetic.py) whose
lifetimes are known: the input of the dataset, characterize and Flink tests."""

from __future__ import annotations

import filecmp
import pathlib

from tests.synthetic import make_profile

# (site function, lifetime ms (age if censored), censored) per sample
SAMPLES_A = ([("parse_request", 3.0, False)] * 20 + [("cache_insert", 300.0, False)] * 20
             + [("registry_add", 5000.0, True)] * 10)
SAMPLES_B = [("session_open", 3000.0, False)] * 19 + [("session_open", 10.0, True)]
# the lifetime class the dataset job gives each site's context
EXPECTED_LABELS = {"parse_request": 0, "cache_insert": 2, "session_open": 3, "registry_add": 7}


def write_profiles(directory: pathlib.Path, binary: str, addresses: dict[str, int]) -> None:
    """Writes a.ltprof (SAMPLES_A) and b.ltprof (SAMPLES_B), version v1, into directory."""
    for name, samples in (("a", SAMPLES_A), ("b", SAMPLES_B)):
        make_profile(str(directory / f"{name}.ltprof"), binary, addresses, samples,
                     version_label="v1")


def assert_same_dataset(want: pathlib.Path, got: pathlib.Path) -> None:
    """Two `build-dataset` outputs hold the same files, byte for byte (TFRecords included)."""
    names = sorted(p.name for p in want.iterdir())
    assert [n for n in names if n.endswith(".tfrecord")], names
    _, mismatch, errors = filecmp.cmpfiles(want, got, names, shallow=False)
    assert (mismatch, errors) == ([], [])
    assert sorted(p.name for p in got.iterdir()) == names
