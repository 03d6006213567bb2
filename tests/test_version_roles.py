"""Roles per family (issue 33 item 1): the table in core/version_roles.json, the roles a
dataset's manifest and a model's config.json record, `lifetime report` refusing to call
a training or selection version test, reserved versions refused everywhere."""

import json

import pytest

from benchmarks.servers import postgres, redis
from core import version_roles as vr
from lifetime import cli
from model.hparams import HParams
from tests.synthetic import make_profile

SAMPLES = [("parse_request", 3.0, False)] * 10 + [("cache_insert", 300.0, False)] * 10
# The defaults before issue 33 item 2 (swept on the test versions); models trained with
# them keep calling those versions seen.
DEFAULTS = {"hyperparameters": {"weight_power": 0.5, "unk_dropout": 0.0, "min_delta": 0.003,
                                "patience": 5}}


def test_the_table_gives_each_version_one_role_and_no_reserved_version_a_role():
    fams = vr.table()["families"]
    assert {"redis", "postgres", "cpython", "clang", "proxy"} <= set(fams)
    for name, fam in fams.items():
        versions = fam["train"] + fam["selection"] + fam["test"]
        assert len(versions) == len(set(versions)), name
        assert fam["train"] and fam["test"], name
        for v in versions:
            assert vr.reserved_reason(vr.label(name, v)) is None, (name, v)
            assert vr.family_role(vr.label(name, v)) in ("train", "selection", "test")
    # The same bounds as the server scripts' own refusal.
    assert vr.table()["families"]["redis"]["reserved_from"] == ".".join(map(str, redis.RESERVED_FROM))
    assert vr.table()["families"]["postgres"]["reserved_from"] == ".".join(
        map(str, postgres.RESERVED_FROM))
    for lbl in ("redis-7.0", "redis-7.2.4", "postgres-17.0", "cpython-3.13.0", "syslog-ng",
                "syslog-ng-4.3.1"):
        assert vr.family_role(lbl) == "reserved", lbl
    assert vr.family_role("redis-6.2.14") == "test" and vr.family_role("v2") is None
    assert "| Redis | 5.0.6, 6.0.16 | 6.2.7, 6.2.9 | 6.2.14 | 7.0+ |" in vr.roles_table()


def test_classify_relabels_training_and_selection_versions_in_one_line():
    roles = {"train": ["redis-5.0.6", "redis-6.0.16"], "selection": ["proxy-v2"]}
    out = {s.label: s for s in vr.classify(
        ["redis-6.0.16", "proxy-v2", "redis-6.2.7", "redis-6.2.14", "v2"], roles,
        {"hyperparameters": {"weight_power": 1.0}}, source="model M")}
    assert out["redis-6.0.16"].role == vr.SEEN_TRAINING and "model M" in out["redis-6.0.16"].why
    assert out["proxy-v2"].role == vr.SEEN_SELECTION and "model M" in out["proxy-v2"].why
    assert out["redis-6.2.7"].role == vr.SEEN_SELECTION  # the family's selection version
    assert out["redis-6.2.14"].role == out["v2"].role == vr.TEST
    line = vr.seen_line(list(out.values()))
    assert "\n" not in line and "proxy-v2 is seen (selection)" in line
    assert "redis-6.2.14" not in line
    assert vr.seen_line([out["v2"]]) is None


def test_a_test_version_a_recorded_choice_was_made_on_is_not_test():
    # The training defaults were swept on the families' test versions: a model trained
    # with them may not call those versions test; one with other values may.
    (s,) = vr.classify(["redis-6.2.14"], {"train": [], "selection": []}, DEFAULTS)
    assert s.role == vr.SEEN_SELECTION and "training defaults" in s.why
    (s,) = vr.classify(["redis-6.2.14"], {"train": [], "selection": []},
                       {"hyperparameters": {**DEFAULTS["hyperparameters"], "patience": 8}})
    assert s.role == vr.TEST
    # The defaults chosen since on selection data leave the test versions test, and
    # call the selection data they were chosen on seen.
    now = {"hyperparameters": {k: getattr(HParams(), k)
                               for k in ("weight_power", "unk_dropout", "min_delta", "patience")}}
    assert now["hyperparameters"]["weight_power"] == 0.75
    (s,) = vr.classify(["redis-6.2.14"], {"train": [], "selection": []}, now)
    assert s.role == vr.TEST
    (s,) = vr.classify(["clang-16"], {"train": [], "selection": []}, now)
    assert s.role == vr.SEEN_SELECTION
    # The hand-given Redis wrappers were chosen on 6.2.14's failures.
    (s,) = vr.classify(["redis-6.2.14"], None, {"context": {"configured_wrappers": ["sdsnewlen"]}})
    assert s.role == vr.SEEN_SELECTION and "sdsnewlen" in s.why


def test_reserved_versions_are_refused_in_one_line():
    with pytest.raises(vr.ReservedVersionError) as e:
        vr.classify(["redis-6.2.14", "redis-7.2.4"], None)
    assert "Redis 7.2.4 is reserved" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(vr.ReservedVersionError, match="syslog-ng"):
        vr.refuse_reserved(["syslog-ng-4.3"], "training")


def test_old_manifests_without_roles_read_as_unknown():
    assert vr.roles_of({"format": "lifetime-dataset-v1"}) is None
    assert vr.roles_of({"roles": "garbage"}) is None
    assert vr.roles_of({"roles": {"train": ["a"]}}) == {"train": ["a"], "selection": []}


def _profiles(tmp_path, sites, label):
    binary, addresses = sites
    d = tmp_path / f"profiles-{label}"
    d.mkdir()
    for name in ("a", "b", "c", "d", "e", "f"):  # a program each: 12 contexts
        make_profile(str(d / f"{name}.ltprof"), binary, addresses, SAMPLES, program=name,
                     version_label=label)
    return str(d)


def test_build_dataset_records_roles_and_refuses_reserved_labels(tmp_path, sites, capsys):
    train_dir, test_dir = tmp_path / "train", tmp_path / "test"
    assert cli.main(["build-dataset", "--eval-percent", "0", "--profiles",
                     _profiles(tmp_path, sites, "redis-5.0.6"), "--out", str(train_dir),
                     "--selection-version", "redis-6.2.7"]) == 0
    roles = json.loads((train_dir / "manifest.json").read_text())["roles"]
    assert roles == {"train": ["redis-5.0.6"], "selection": ["redis-6.2.7"]}
    # A test version cut like the training data: nothing was fit on it.
    assert cli.main(["build-dataset", "--profiles", _profiles(tmp_path, sites, "redis-6.2.14"),
                     "--like", str(train_dir), "--out", str(test_dir)]) == 0
    assert json.loads((test_dir / "manifest.json").read_text())["roles"] == {
        "train": [], "selection": []}
    capsys.readouterr()
    assert cli.main(["build-dataset", "--profiles", str(tmp_path / "profiles-redis-5.0.6"),
                     "--version-label", "redis-7.0.0", "--out", str(tmp_path / "r")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Redis 7.0.0 is reserved" in err
    assert not (tmp_path / "r" / "manifest.json").exists()


class _Model:
    def __init__(self, config):
        self.config = config


def test_report_roles_with_and_without_recorded_roles():
    """model/report.py's test_roles: the model's roles and the report's own training
    data count; a model from before roles says so once and falls back on its datasets."""
    from model.data import Examples
    from model.report import test_roles

    train_ex = Examples.empty()
    new = _Model({"roles": {"train": ["redis-5.0.6"], "selection": ["redis-6.2.9"]}})
    statuses, notes = test_roles(new, train_ex, {"redis-6.2.9", "redis-6.2.14"}, "M")
    assert [s.role for s in statuses] == [vr.TEST, vr.SEEN_SELECTION]
    assert len(notes) == 1 and "redis-6.2.9 is seen (selection) (model M (config.json roles)" \
        in notes[0]
    old = _Model({"training_datasets": [{"version_labels": ["v1"]}]})
    statuses, notes = test_roles(old, train_ex, {"v1", "v2"}, "OLD")
    assert [s.role for s in statuses] == [vr.SEEN_TRAINING, vr.TEST]
    assert len(notes) == 2 and "records no roles" in notes[0] and "v1 is seen (training)" in notes[1]
    with pytest.raises(vr.ReservedVersionError):
        test_roles(new, train_ex, {"postgres-17.2"}, "M")


@pytest.mark.slow  # trains a (tiny) Keras model
def test_train_records_roles_and_report_relabels_a_selection_version(tmp_path, sites, capsys):
    """End to end on a tiny model: config.json's roles, and `lifetime report` showing a
    version the model was selected on as "seen (selection)" with one line saying so."""
    from model.hparams import HParams
    from model.report import write_report
    from model.train import train

    train_dir, test_dir, model = tmp_path / "train", tmp_path / "test", tmp_path / "m"
    assert cli.main(["build-dataset", "--eval-percent", "50", "--profiles",
                     _profiles(tmp_path, sites, "proxy-v1"), "--out", str(train_dir)]) == 0
    assert cli.main(["build-dataset", "--profiles", _profiles(tmp_path, sites, "proxy-v7"),
                     "--like", str(train_dir), "--out", str(test_dir)]) == 0
    hp = HParams(tokens_per_frame=4, embedding_dim=8, lstm_units=8, epochs=2, min_epochs=1,
                 patience=1, batch_size=8, seed=1)
    train([str(train_dir)], str(model), hp, verbose=0, selection_versions=["proxy-v7"])
    config = json.loads((model / "config.json").read_text())
    assert config["roles"]["train"] == ["proxy-v1"]
    assert config["roles"]["selection"] == ["proxy-v7"]
    capsys.readouterr()
    rep = write_report(str(model), [str(train_dir)], [str(test_dir)], str(tmp_path / "r"),
                       fractions=(1.0,))
    out = [line for line in capsys.readouterr().out.splitlines() if "seen (" in line]
    assert len(out) == 1 and "proxy-v7 is seen (selection)" in out[0] and str(model) in out[0]
    assert rep["version_roles"]["proxy-v7"]["role"] == vr.SEEN_SELECTION
    assert rep["datasets"][str(test_dir)]["role"] == vr.SEEN_SELECTION
    md = (tmp_path / "r" / "report.md").read_text()
    assert "## Model vs baselines: all test contexts" not in md
    assert "| seen (selection) |" in md


def test_benchmarks_say_in_one_line_which_test_versions_are_not_test_data(tmp_path, capsys):
    from benchmarks import roles_note

    # Run to run within a training version (cross_version.py's redis-within).
    got = roles_note.statuses("redis", ["6.0.16/run2"], None, "cross_version",
                              train_versions=["6.0.16/run1"])
    assert got["redis-6.0.16"]["role"] == vr.SEEN_TRAINING
    out = capsys.readouterr().out.strip()
    assert out.count("\n") == 0 and out.startswith("cross_version: not test data: redis-6.0.16")
    # The simulators' segregated policy and cost-rule row were chosen on 6.2.14's traces.
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"roles": {"train": ["redis-5.0.6"],
                                                             "selection": []}}))
    got = roles_note.statuses("redis", ["6.2.14"], str(model), "simulate_redis",
                              roles_note.simulation_uses("segregated"), ["5.0.6"])
    assert got["redis-6.2.14"]["role"] == vr.SEEN_SELECTION
    assert "segregated" in got["redis-6.2.14"]["why"]
    assert roles_note.markdown_line(got)[0].startswith("**Not test data**: redis-6.2.14")
    capsys.readouterr()
    assert roles_note.statuses("postgres", ["16.2"], str(model), "x")["postgres-16.2"][
        "role"] == vr.TEST
    assert capsys.readouterr().out == "" and roles_note.markdown_line({}) == []
    with pytest.raises(vr.ReservedVersionError):
        roles_note.refuse_reserved("cpython", ["3.13.1"], "test", "cross_version --test")
