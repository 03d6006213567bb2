"""The `lifetime` command line: arguments, errors and runners (issue: hardened CLI)."""

import json
import logging

import pytest

from lifetime import cli
from core.errors import LifetimeError, UsageError, printable
from tests.synthetic import make_profile

SAMPLES = [("parse_request", 3.0, False)] * 10 + [("cache_insert", 300.0, False)] * 10


@pytest.fixture
def profiles(tmp_path, sites):
    binary, addresses = sites
    d = tmp_path / "profiles"
    d.mkdir()
    for name in ("a", "b", "c"):
        make_profile(str(d / f"{name}.ltprof"), binary, addresses, SAMPLES, version_label="v1")
    return d


def _build(*args):
    return cli.main(["build-dataset", "--eval-percent", "0", "--no-detect-wrappers", *args])


def test_unquoted_glob_builds_from_every_file(profiles, tmp_path):
    # What a shell makes of `--profiles P/*.ltprof`: one option, three files.
    files = sorted(str(p) for p in profiles.glob("*.ltprof"))
    assert _build("--profiles", *files, "--out", str(tmp_path / "ds")) == 0
    manifest = json.loads((tmp_path / "ds" / "manifest.json").read_text())
    assert [i["file"] for i in manifest["inputs"]] == files
    assert manifest["splits"]["train"]["samples"] == 3 * len(SAMPLES)


def test_labels_pair_with_each_profiles_option(profiles, tmp_path):
    a, b, c = (str(profiles / f"{n}.ltprof") for n in "abc")
    assert _build("--profiles", a, b, "--version-label", "old", "--profiles", c,
                  "--version-label", "new", "--out", str(tmp_path / "ds")) == 0
    manifest = json.loads((tmp_path / "ds" / "manifest.json").read_text())
    assert [(i["file"], i["version_label"]) for i in manifest["inputs"]] == [
        (a, "old"), (b, "old"), (c, "new")]


def test_detect_profiles_errors_name_their_own_options(profiles, tmp_path, capsys):
    """--detect-profiles: a missing path, a label too many, or with --like / no detection:
    one line naming --detect-profiles (not --profiles)."""
    def build(*args):
        return cli.main(["build-dataset", "--eval-percent", "0", "--profiles", str(profiles),
                         "--out", str(tmp_path / "ds"), *args])

    assert build("--detect-profiles", str(tmp_path / "missing")) == 1
    assert f"--detect-profiles {tmp_path / 'missing'}: matches no files" in capsys.readouterr().err
    assert build("--detect-profiles", str(profiles), "--detect-version-label", "a",
                 "--detect-version-label", "b") == 1
    assert "more --detect-version-label than --detect-profiles" in capsys.readouterr().err
    assert build("--detect-profiles", str(profiles), "--no-detect-wrappers") == 1
    assert "--detect-profiles are read only to detect wrappers" in capsys.readouterr().err


def test_a_directory_stands_for_its_profiles(profiles, tmp_path):
    assert _build("--profiles", str(profiles), "--out", str(tmp_path / "ds")) == 0
    manifest = json.loads((tmp_path / "ds" / "manifest.json").read_text())
    assert len(manifest["inputs"]) == 3


def test_empty_directory_and_no_usable_sample_are_errors(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _build("--profiles", str(empty), "--out", str(tmp_path / "ds")) == 1
    assert f"--profiles {empty}/*.ltprof: matches no files" in capsys.readouterr().err
    (empty / "bad.ltprof").write_bytes(b"not a profile at all")
    assert _build("--profiles", str(empty), "--out", str(tmp_path / "ds")) == 1
    err = capsys.readouterr().err
    assert "lifetime build-dataset: error: no usable samples in 1 profile file(s)" in err
    assert "dead_letters.jsonl" in err
    manifest = json.loads((tmp_path / "ds" / "manifest.json").read_text())
    assert manifest["dropped"]["by_category"] == {"corrupt": 1}


def test_one_file_with_two_labels_is_an_error(profiles, tmp_path, capsys):
    a = str(profiles / "a.ltprof")
    assert _build("--profiles", a, "--version-label", "x", "--profiles", a,
                  "--version-label", "y", "--out", str(tmp_path / "ds")) == 1
    assert "given with two version labels" in capsys.readouterr().err


def test_unknown_arguments_are_errors_not_dropped(profiles, tmp_path, capsys):
    a = str(profiles / "a.ltprof")
    with pytest.raises(SystemExit):  # argparse: not a Beam command
        cli.main(["inspect", a, "--bogus"])
    assert _build("--profiles", a, "--out", str(tmp_path / "ds"), "--no_such_beam_option=1") == 1
    assert "unrecognized arguments: --no_such_beam_option=1" in capsys.readouterr().err
    assert not (tmp_path / "ds" / "manifest.json").exists()


def test_direct_runner_is_chosen_without_trying_prism(profiles, tmp_path, caplog, monkeypatch):
    from apache_beam.runners.portability import prism_runner

    def no_prism(*args, **kwargs):
        raise AssertionError("the Prism runner was started")

    monkeypatch.setattr(prism_runner.PrismRunner, "run_pipeline", no_prism)
    with caplog.at_level(logging.INFO):
        assert _build("--profiles", str(profiles / "a.ltprof"), "--out",
                      str(tmp_path / "ds")) == 0
        assert _build("--profiles", str(profiles / "a.ltprof"), "--out", str(tmp_path / "d2"),
                      "--runner=DirectRunner", "--direct_num_workers=1") == 0
    assert "Prism" not in caplog.text


def test_unwritable_out_fails_before_any_work(profiles, tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    out = blocker / "ds"
    assert _build("--profiles", str(profiles), "--out", str(out)) == 1
    assert f"--out {out}: cannot write there (Not a directory)" in capsys.readouterr().err
    assert cli.main(["train", "--dataset", str(tmp_path), "--out", str(out)]) == 1
    assert f"--out {out}: cannot write there" in capsys.readouterr().err


def test_user_errors_are_one_line_and_bugs_keep_their_traceback(monkeypatch, capsys, tmp_path):
    from pipeline import dataset

    def user_error(*args, **kwargs):
        raise LifetimeError("evil\x1b[2Jname.ltprof: corrupt")

    monkeypatch.setattr(dataset, "build_dataset", user_error)
    assert _build("--profiles", "x", "--out", str(tmp_path / "a")) == 1
    err = capsys.readouterr().err
    assert err == "lifetime build-dataset: error: evil\\x1b[2Jname.ltprof: corrupt\n"

    def bug(*args, **kwargs):
        raise ValueError("a programming error")

    monkeypatch.setattr(dataset, "build_dataset", bug)
    with pytest.raises(ValueError, match="a programming error"):
        _build("--profiles", "x", "--out", str(tmp_path / "b"))


def test_bad_option_values_are_usage_errors(tmp_path, capsys):
    assert cli.main(["build-dataset", "--profiles", "x", "--out", str(tmp_path),
                     "--boundaries", "1,a"]) == 1
    assert "--boundaries: '1,a': not a comma-separated list" in capsys.readouterr().err
    assert cli.main(["build-dataset", "--profiles", "x", "--out", str(tmp_path),
                     "--boundaries", "5,1"]) == 1
    assert "increasing" in capsys.readouterr().err
    assert issubclass(UsageError, LifetimeError)


def test_printable_escapes_control_characters():
    assert printable("ok é\t\n\x7f\x1b\u202e") == "ok é\\x09\\x0a\\x7f\\x1b\\u202e"


def test_characterize_counts_and_names_bad_files(profiles, tmp_path, capsys):
    (profiles / "broken.ltprof").write_bytes(b"\x00" * 40)
    assert cli.main(["characterize", "--profiles", str(profiles), "--out",
                     str(tmp_path / "r")]) == 0
    assert "1 bad records or files in 1 files (see dead_letters.jsonl)" in capsys.readouterr().out
    dead = (tmp_path / "r" / "dead_letters.jsonl").read_text()
    assert "broken.ltprof" in dead


def test_every_public_exception_class_is_a_lifetime_error():
    """One base for user-facing errors: the CLI catches LifetimeError once, so an error
    class outside it would surface as a traceback (private helpers excepted)."""
    import importlib
    import inspect
    import pkgutil

    found = {}
    for package in ("core", "lifetime", "pipeline", "model", "export", "profiler", "profile_format",
                    "simulator"):
        pkg = importlib.import_module(package)
        for info in pkgutil.iter_modules(pkg.__path__, package + "."):
            module = importlib.import_module(info.name)
            for name, obj in vars(module).items():
                if (inspect.isclass(obj) and issubclass(obj, Exception)
                        and obj.__module__ == info.name and not name.startswith("_")):
                    found[f"{info.name}.{name}"] = obj
    assert len(found) >= 10
    outside = sorted(name for name, cls in found.items() if not issubclass(cls, LifetimeError))
    assert outside == []


def test_output_path_errors_name_the_option_given(tmp_path, capsys):
    """evaluate-online --json names --json, not --out (issue 20, item 9), before any work."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert cli.main(["evaluate-online", "x.ltprof", "--model", str(tmp_path / "no-model"),
                     "--json", str(blocker / "x.json")]) == 1
    assert capsys.readouterr().err == (f"lifetime evaluate-online: error: --json {blocker}/x.json: "
                                       "cannot write there (File exists)\n")


def test_log_arguments_are_escaped():
    """Values a log line carries (a file or program name from a profile) are escaped
    like every printed line (issue 20, item 9)."""
    import logging as log

    record = log.LogRecord("x", log.INFO, __file__, 1, "%s: read", ("evil\x1b[2J\r.ltprof",), None)
    assert cli._EscapeArguments().filter(record)
    assert record.getMessage() == "evil\\x1b[2J\\x0d.ltprof: read"


def test_evaluate_with_a_missing_model_creates_nothing(tmp_path, capsys):
    """The default output goes inside --model: a missing model directory is the error,
    and no evaluations/ directory is made where it should have been (issue 20's rerun
    found /nonexistent/evaluations/ left by `evaluate --model /nonexistent`)."""
    missing = tmp_path / "no-model"
    assert cli.main(["evaluate", "--model", str(missing), "--dataset", str(tmp_path)]) == 1
    assert "model directory does not exist" in capsys.readouterr().err
    assert not missing.exists()
