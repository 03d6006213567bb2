"""Short fuzz campaigns of the profile readers (the long ones: python -m fuzz.campaign)."""

import pytest

from fuzz import campaign, seeds, targets


@pytest.mark.parametrize("name", sorted(targets.TARGETS))
def test_every_seed_and_mutant_is_read_or_refused_cleanly(name):
    for seed, data in seeds.mutants().items():
        try:
            targets.TARGETS[name](data)
        except targets.EXPECTED:
            pass  # a clear error naming the file; anything else fails the test
        except Exception as e:  # noqa: BLE001 -- the finding, with the seed named
            pytest.fail(f"{name} on seed {seed!r}: {type(e).__name__}: {e}")


@pytest.mark.slow  # a 3 s libFuzzer campaign per target
@pytest.mark.parametrize("name", sorted(targets.TARGETS))
def test_short_campaign_finds_no_crash_or_hang(name, tmp_path):
    corpus = tmp_path / "corpus"
    seeds.write_seeds(corpus, real=True)
    result = campaign.run_target(name, corpus, tmp_path / "artifacts", seconds=3, runs=None,
                                 timeout_s=10, rss_mb=2048)
    log = (tmp_path / "artifacts" / "log.txt").read_text()
    assert result["exit_code"] == 0 and result["crashes"] == 0 and result["hangs"] == 0, log[-3000:]
    assert result["inputs"] > 1000, log[-3000:]
