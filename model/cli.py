"""`lifetime evaluate-online`, `lifetime train`, `lifetime evaluate`, `lifetime report`
(registered by lifetime/cli.py through `add_parser`).

matplotlib (model.report) and Apache Beam (model.online_eval) are imported inside
functions: `lifetime --help` must not pay for them (TensorFlow is deferred by model.train).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

from core import options
from core.errors import UsageError, printable
from core.files import writable_dir, writable_parent, write_json
from core.label_options import add_boundaries, label_scheme
from core.symbol_options import add_symbol_options, symbol_options
from model import architectures
from model.card import metrics_table
from model.compare import SCOPES, display_rows
from model.evaluate import SPLIT_CHOICES, evaluate
from model.hparams import OPEN_ABOVE, OPEN_BELOW, RANGES, HParams, range_text
from model.io import read_model_dir
from model.train import train

# hyperparameter -> help; the defaults and ranges come from HParams, the one place they live.
_HP_FLAGS = {
    "architecture": "; ".join(f"{a}: {architectures.get(a).help}"
                              for a in architectures.names()),
    "tokens_per_frame": "tokens kept from the start of each frame",
    "site_last": "true: the LSTM reads the frames bottom-up, the site last",
    "embedding_dim": "token embedding size",
    "lstm_units": "LSTM units",
    "learning_rate": "Adam learning rate",
    "batch_size": "examples per step",
    "epochs": "maximum epochs",
    "patience": "early-stopping patience (epochs)",
    "min_epochs": "epochs before early stopping watches",
    "min_delta": "smallest eval-loss decrease early stopping counts as an improvement",
    "seed": "random seed (training is deterministic)",
    "unk_dropout": "training-time probability of replacing a token by <unk>",
    "weight_power": "example weight = samples ** this (1: by samples, 0: by context)",
    "backoff_below": "serve the site table's class where the model's top probability is "
                     "below this (0: never)",
    "backoff_pure": "serve the site table's class wherever the site's training weight is at "
                    "least this share in its class (0: never)",
}


def parse_hparams(values: dict, **overrides) -> HParams:
    """HParams from a dict of overrides (unknown names are an error)."""
    names = {f.name for f in dataclasses.fields(HParams)}
    unknown = set(values) - names
    if unknown:
        raise UsageError(f"unknown hyperparameters: {', '.join(sorted(unknown))}")
    return HParams(**{**values, **overrides})


def _cmd_train(args: argparse.Namespace) -> int:
    values = {k: getattr(args, k) for k in _HP_FLAGS if getattr(args, k) is not None}
    if "site_last" in values:
        values["site_last"] = values["site_last"] == "true"
    hp = parse_hparams(values, refit=args.refit)
    writable_dir(args.out)
    metrics = train(args.dataset, args.out, hp, verbose=1 if sys.stdout.isatty() else 2,
                    selection_versions=args.selection_version)
    m = metrics["eval"]["overall"]["model"]
    print(f"model: {printable(args.out)}: {metrics['epochs_run']} epochs "
          f"(best {metrics['best_epoch']}); "
          f"held-out eval split: {m['contexts']} contexts, weighted exact "
          f"{m['weighted']['exact']:.1%}, unweighted exact {m['unweighted']['exact']:.1%}")
    return 0


def _print_table(result: dict) -> None:
    for part in SCOPES:
        rows = display_rows(result[part])
        print(f"\n{part}: {rows['model']['contexts']} contexts, {rows['model']['samples']:.0f} samples")
        if rows["model"]["contexts"]:
            print(metrics_table(rows))


def _cmd_evaluate(args: argparse.Namespace) -> int:
    if not args.out:
        read_model_dir(args.model)  # the default output goes inside it: check it first
    out = args.out or os.path.join(args.model, "evaluations", "_".join(
        os.path.basename(os.path.normpath(d)) for d in args.dataset) + ".json")
    writable_parent(out, "--out" if args.out else "--model")  # before the work
    result = evaluate(args.model, args.dataset, split=args.split, train_dirs=args.train,
                      tcmalloc_rule_rows=True)
    write_json(out, result)
    _print_table(result)
    print(f"\nevaluation: {printable(out)}")
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from model.report import write_report

    writable_dir(args.out)
    write_report(args.model, args.train, args.test, args.out, fractions=args.fractions)
    print(f"report: {printable(os.path.join(args.out, 'report.md'))} "
          "(also report.html, report.json)")
    return 0


def _cmd_evaluate_online(args: argparse.Namespace) -> int:
    from model.online_eval import evaluate_online, model_context

    if args.json:
        writable_parent(args.json, "--json")  # before the work
    result = evaluate_online(args.profiles, model_context(args.model), label_scheme(args),
                             **symbol_options(args))
    _print_online(result)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1, sort_keys=True)
        print(f"wrote {printable(args.json)}")
    return 0


def _print_online(result: dict) -> None:
    """evaluate-online's figures (model/online_eval.py), a few lines."""
    h, cache, cost = result["headline"], result["cache"], result["cost_ns_per_sampled_allocation"]
    pct = lambda x: "n/a" if x is None else f"{100 * x:.1f}%"  # noqa: E731
    print(f"{result['profiles']} profiles, {result['contexts']} contexts, "
          f"{result['predicted_samples']} predicted samples")
    skipped, problems = result["skipped_files"], result["problems"]
    if skipped or problems:
        print(f"skipped      {len(skipped)} unusable files; {len(problems)} problems in the "
              "files used (--json lists them all)")
        for d in (skipped + problems)[:5]:
            print(f"  {printable(d['file'])}: {printable(d['reason'])}")
    print(f"per context  weighted exact {pct(h['weighted_exact'])}, off-by-one "
          f"{pct(h['weighted_off_by_one'])}, under-prediction {pct(h['weighted_under_prediction'])}"
          f"; unweighted exact {pct(h['unweighted_exact'])}, off-by-one "
          f"{pct(h['unweighted_off_by_one'])}")
    print(f"per sample   exact {pct(h['per_sample_exact'])}, off-by-one "
          f"{pct(h['per_sample_off_by_one'])}, under-prediction "
          f"{pct(h['per_sample_under_prediction'])}")
    print(f"cache        hit rate {pct(cache['hit_rate'])} ({cache['cache_hits']} hits, "
          f"{cache['cache_misses']} misses, {cache['revalidations']} revalidations, "
          f"{cache['disagreements']} disagreements)")
    print(f"added cost   per sampled allocation: mean {cost['mean'] / 1e3:.2f} us, p50 "
          f"{cost['p50'] / 1e3:.2f} us (hits {(cost['hit_p50'] or 0) / 1e3:.2f} us, misses "
          f"{(cost['miss_p50'] or 0) / 1e3:.2f} us), p99 {cost['p99'] / 1e3:.2f} us")


def _hp_type(name: str):
    """The flag's type: HParams' own range for the hyperparameter (model/hparams.py)."""
    lo, hi = RANGES[name]
    if isinstance(lo, int):
        return options.int_range(lo, hi)
    return options.finite_float(lo, hi, lo_open=name in OPEN_BELOW, hi_open=name in OPEN_ABOVE)


def add_parser(sub) -> None:
    """Adds evaluate-online, train, evaluate and report to the `lifetime` subparsers."""
    p = sub.add_parser("evaluate-online",
                       help="online predictions in profiles against the actual lifetimes")
    p.add_argument("profiles", nargs="+", metavar="PROFILE")
    p.add_argument("--model", required=True, metavar="DIR",
                   help="the model (or its export) the profiles were taken with: its context "
                        "definition cuts the stacks into contexts")
    p.add_argument("--clock", choices=("wall", "bytes"), default="wall")
    add_boundaries(p)
    p.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    add_symbol_options(p)
    p.set_defaults(func=_cmd_evaluate_online)

    p = sub.add_parser("train", help="train the LSTM lifetime model on datasets",
                       description="Hyperparameter defaults: " + ", ".join(
                           f"{k}={'(from the datasets)' if v is None else v}"
                           for k, v in dataclasses.asdict(HParams()).items()))
    p.add_argument("--dataset", action="append", required=True, metavar="DIR",
                   help="dataset from `lifetime build-dataset`; repeat for several (one vocabulary)")
    p.add_argument("--out", required=True, metavar="MODEL_DIR")
    for name, help_text in _HP_FLAGS.items():
        flag = "--" + name.replace("_", "-")
        if name == "architecture":
            p.add_argument(flag, choices=architectures.names(), default=None, help=help_text)
        elif name == "site_last":
            p.add_argument(flag, choices=("true", "false"), default=None, help=help_text)
        else:
            p.add_argument(flag, type=_hp_type(name), default=None,
                           help=f"{help_text} ({range_text(name)})")
    p.add_argument("--refit", action="store_true",
                   help="after early stopping, retrain on train + eval splits for the best "
                        "epoch count (for models used on other versions)")
    p.add_argument("--selection-version", action="append", default=[], metavar="LABEL",
                   help="a version label choices for this model were made on (hyperparameters, "
                        "wrappers, ...): config.json's roles.selection, never called test by "
                        "`lifetime report` (core/version_roles.py); repeatable")
    p.set_defaults(func=_cmd_train)

    p = sub.add_parser("evaluate", help="model vs baselines on datasets (JSON + table)")
    p.add_argument("--model", required=True, metavar="MODEL_DIR")
    p.add_argument("--dataset", action="append", required=True, metavar="DIR")
    p.add_argument("--split", choices=SPLIT_CHOICES, default="auto",
                   help="auto: eval split of the model's training datasets, all of any other")
    p.add_argument("--train", action="append", metavar="DIR",
                   help="training datasets for the baselines (default: the model's own)")
    p.add_argument("--out", metavar="FILE.json",
                   help="default: MODEL_DIR/evaluations/<dataset names>.json")
    p.set_defaults(func=_cmd_evaluate)

    p = sub.add_parser("report", help="cross-version generalization report (Markdown, HTML, "
                                      "JSON, PNG)")
    p.add_argument("--model", required=True, metavar="MODEL_DIR")
    p.add_argument("--train", action="append", required=True, metavar="DIR",
                   help="the model's training datasets (baselines, overlap statistics)")
    p.add_argument("--test", action="append", required=True, metavar="DIR")
    p.add_argument("--out", required=True, metavar="REPORT_DIR")
    p.add_argument("--fractions", type=options.fractions, default=[0.1, 0.3, 1.0],
                   metavar="F1,F2,...",
                   help="training-sample fractions for the accuracy-vs-sampling plot, each "
                        f"in (0, 1], at most {options.MAX_FRACTIONS} (each trains a model; "
                        "default: 0.1,0.3,1)")
    p.set_defaults(func=_cmd_report)
