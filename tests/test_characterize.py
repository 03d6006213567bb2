"""`lifetime characterize` renders a report with its plots and tables."""

import pytest

from lifetime import cli
from tests.dataset_support import write_profiles
from tests.synthetic import build_sites


@pytest.fixture
def profiles(tmp_path):
    binary, addresses = build_sites(tmp_path)
    write_profiles(tmp_path, binary, addresses)
    return tmp_path


def test_report_has_plots_and_top_contexts(profiles, tmp_path, capsys):
    out = tmp_path / "report"
    assert cli.main(["characterize", "--profiles", str(profiles / "*.ltprof"),
                     "--out", str(out)]) == 0
    report = (out / "report.md").read_text()
    assert "## sites v1" in report
    assert "4 contexts, 70 samples; 15.7% of sampled objects still live at exit." in report
    assert "![sites v1](w0.png)" in report and (out / "w0.png").stat().st_size > 10_000
    assert "Top contexts by sampled bytes:" in report and "Top contexts by sample count:" in report
    assert "| 2 | `parse_request ← main` | 20 | 1280 | 10ms |" in report
    assert "`registry_add ← main` | 10 | 640 | inf |" in report


def test_no_matching_profiles_is_a_clear_error(tmp_path, capsys):
    assert cli.main(["characterize", "--profiles", str(tmp_path / "none*.ltprof"),
                     "--out", str(tmp_path / "r")]) == 1
    assert "matches no files" in capsys.readouterr().err
