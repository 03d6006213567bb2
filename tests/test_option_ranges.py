"""Every numeric option of every subcommand has a range, checked as the command line is
parsed (core/options.py): an impossible or unbounded value is one line and status
1, before any work (issue 20, item 5)."""

import subprocess
import sys

import pytest

from lifetime import cli

# (arguments, what the one line says); --out names a directory that must not appear.
BAD = [
    # the reproducers
    (["build-dataset", "--profiles", "p", "--max-frames", "1000000000"],
     "argument --max-frames: '1000000000': must be an integer in 1..128"),
    (["build-dataset", "--profiles", "p", "--boundaries", "nan,inf"],
     "argument --boundaries: 'nan,inf': not a comma-separated list of finite numbers"),
    (["train", "--dataset", "d", "--learning-rate", "nan"],
     "argument --learning-rate: 'nan': must be a finite number"),
    (["report", "--model", "m", "--train", "t", "--test", "t", "--fractions", "0,2"],
     "argument --fractions: '0,2': every fraction must be in (0, 1]"),
    (["inspect", "f.ltprof", "--samples", "-1"],
     "argument --samples: '-1': must be an integer in 0..1000000"),
    # the rest of build-dataset and characterize
    (["build-dataset", "--profiles", "p", "--max-frames", "0"], "--max-frames: '0'"),
    (["build-dataset", "--profiles", "p", "--boundaries", "0,10"], "outside [0.001, 1e+12]"),
    (["build-dataset", "--profiles", "p", "--boundaries", "10,1e13"], "outside"),
    (["build-dataset", "--profiles", "p", "--boundaries", ",".join(map(str, range(1, 33)))],
     "1 to 30 class boundaries"),
    (["build-dataset", "--profiles", "p", "--vocab-size", "0"], "--vocab-size: '0'"),
    (["build-dataset", "--profiles", "p", "--vocab-size", "10000000"], "1..1000000"),
    (["build-dataset", "--profiles", "p", "--eval-percent", "101"], "0..100"),
    (["build-dataset", "--profiles", "p", "--eval-percent", "-1"], "0..100"),
    (["build-dataset", "--profiles", "p", "--shards", "100000"], "1..1024"),
    (["characterize", "--profiles", "p", "--max-frames", "129"], "1..128"),
    (["characterize", "--profiles", "p", "--boundaries", "1,inf"], "finite"),
    (["evaluate-online", "x.ltprof", "--model", "m", "--boundaries", "1,1"], "increasing"),
    # every train hyperparameter
    (["train", "--dataset", "d", "--learning-rate", "0"], "(0, 1]"),
    (["train", "--dataset", "d", "--learning-rate", "2"], "(0, 1]"),
    (["train", "--dataset", "d", "--tokens-per-frame", "0"], "1..256"),
    (["train", "--dataset", "d", "--embedding-dim", "100000"], "1..4096"),
    (["train", "--dataset", "d", "--lstm-units", "-3"], "1..4096"),
    (["train", "--dataset", "d", "--batch-size", "1.5"], "not an integer"),
    (["train", "--dataset", "d", "--epochs", "0"], "1..10000"),
    (["train", "--dataset", "d", "--patience", "-1"], "0..10000"),
    (["train", "--dataset", "d", "--min-epochs", "99999"], "0..10000"),
    (["train", "--dataset", "d", "--seed", "4294967296"], "0..4294967295"),
    (["train", "--dataset", "d", "--unk-dropout", "1"], "[0, 1)"),
    (["train", "--dataset", "d", "--weight-power=-inf"], "finite"),
    (["train", "--dataset", "d", "--weight-power", "3"], "[0, 2]"),
    (["train", "--dataset", "d", "--backoff-below", "1.5"], "[0, 1]"),
    (["train", "--dataset", "d", "--backoff-pure=-0.1"], "[0, 1]"),
    (["train", "--dataset", "d", "--architecture", "nope"], "invalid choice"),
    # simulate (its ranges: simulator/cli.py, the same types)
    (["simulate", "t.lttrace", "--train", "d", "--deadline-k", "0"], "1..100"),
    (["simulate", "t.lttrace", "--train", "d", "--series-interval-ms", "-5"], "1..1000000000"),
    (["simulate", "t.lttrace", "--train", "d", "--model-revalidate-every", "-1"],
     "0..4294967295"),
    (["simulate", "t.lttrace", "--train", "d", "--run-records", "0"], "1..67108864"),
    # fragmentation (simulator/fragmentation.py)
    (["fragmentation", "t.lttrace", "--out", "o", "--steady-samples", "0"], "1..1000"),
    (["fragmentation", "t.lttrace", "--out", "o", "--rerun", "65"], "0..64"),
    (["fragmentation", "t.lttrace", "--out", "o", "--at", "-1"], "[0, 1e+09]"),
]


@pytest.mark.parametrize("argv,said", BAD, ids=[" ".join(a[:1] + a[-2:]) for a, _ in BAD])
def test_bad_numeric_option_is_one_line_before_any_work(argv, said, tmp_path, capsys):
    out = tmp_path / "out"
    argv = argv[:1] + ["--out", str(out)] + argv[1:] if argv[0] != "inspect" else argv
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"lifetime {argv[0]}: error: ") and err.count("\n") == 1, err
    assert said in err, err
    assert not out.exists()  # refused while parsing: nothing was made


def test_good_values_at_the_limits_parse():
    parser = cli.build_parser()
    args, _ = parser.parse_known_args(["build-dataset", "--profiles", "p", "--out", "o",
                                       "--max-frames", "128", "--boundaries", "0.001,1e12",
                                       "--eval-percent", "0", "--shards", "1024"])
    assert (args.max_frames, args.boundaries, args.eval_percent) == (128, (0.001, 1e12), 0)
    args, _ = parser.parse_known_args(["report", "--model", "m", "--train", "t", "--test", "t",
                                       "--out", "o", "--fractions", "1,0.5,0.5"])
    assert args.fractions == [0.5, 1.0]
    args, _ = parser.parse_known_args(["train", "--dataset", "d", "--out", "o",
                                       "--learning-rate", "1", "--unk-dropout", "0"])
    assert (args.learning_rate, args.unk_dropout) == (1.0, 0.0)


def test_the_installed_command_says_one_line():
    p = subprocess.run([sys.executable, "-m", "lifetime.cli", "inspect", "x", "--samples", "-1"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and p.stdout == ""
    assert p.stderr.strip().splitlines()[-1] == (
        "lifetime inspect: error: argument --samples: '-1': must be an integer in 0..1000000")


def test_recorded_hyperparameters_are_checked_against_the_same_ranges():
    from core.errors import UsageError
    from model.hparams import HParams

    with pytest.raises(UsageError, match="learning_rate nan"):
        HParams(learning_rate=float("nan"))
    with pytest.raises(UsageError, match="max_frames 1000000000"):
        HParams(max_frames=1_000_000_000)
