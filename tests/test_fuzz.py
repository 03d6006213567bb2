"""Short fuzz campaigns of the profile readers, the importers and the pprof converter
(the long ones: python -m fuzz.campaign)."""

import pytest

from fuzz import campaign, seeds, targets


@pytest.mark.parametrize("name", sorted(targets.TARGETS))
def test_every_seed_and_mutant_is_read_or_refused_cleanly(name):
    for seed, data in seeds.target_seeds(name).items():
        try:
            targets.TARGETS[name](data)
        except targets.expected(name):
            pass  # a clear error naming the file; anything else fails the test
        except Exception as e:  # noqa: BLE001 -- the finding, with the seed named
            pytest.fail(f"{name} on seed {seed!r}: {type(e).__name__}: {e}")


def test_importer_seeds_hold_the_issue_20_inputs():
    """The seeds that once crashed the importers and the converter are in the corpus,
    and are now read (their bad lines and values counted), not refused."""
    assert b"+ 10000000000000000 1 aa" in seeds.heaptrack_seeds()["out-of-range"]
    for name in ("heaptrack", "tcmalloc", "pprof"):
        for seed in ("out-of-range", "limits", "overflow"):
            data = seeds.target_seeds(name).get(seed)
            if data is not None:
                targets.TARGETS[name](data)  # no exception at all


@pytest.mark.slow  # a 3 s libFuzzer campaign per target
@pytest.mark.parametrize("name", sorted(targets.TARGETS))
def test_short_campaign_finds_no_crash_or_hang(name, tmp_path):
    corpus = tmp_path / "corpus"
    seeds.write_seeds(corpus, real=True, target=name)
    result = campaign.run_target(name, corpus, tmp_path / "artifacts", seconds=3, runs=None,
                                 timeout_s=10, rss_mb=2048)
    log = (tmp_path / "artifacts" / "log.txt").read_text()
    assert result["exit_code"] == 0 and result["crashes"] == 0 and result["hangs"] == 0, log[-3000:]
    # It ran, past its seeds: ~4,000 inputs here on a quiet machine, 607 for heaptrack_zst
    # in a CI run with the other core busy (a count, not a speed figure).
    assert result["inputs"] > 100, log[-3000:]


def test_trace_and_option_seeds_hold_the_issue_20_inputs():
    """The trace reader takes the 8 TiB record the format allows and refuses what it
    does not (16 TiB, a set reserved field); the parser refuses issue 20's values."""
    from core.errors import UsageError

    trace = seeds.trace_seeds()
    targets.trace(trace["size-8TiB"])
    for bad in ("size-16TiB", "reserved", "cut"):
        with pytest.raises(targets.expected("trace")):
            targets.trace(trace[bad])
    options = seeds.options_seeds()
    for name, data in options.items():
        refused = any(bad in data for bad in (b"-1", b"1000000000\0", b"nan", b"0,2"))
        if refused:
            with pytest.raises(UsageError):
                targets.options(data)
        else:
            targets.options(data)
