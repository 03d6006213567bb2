"""`lifetime report`: the cross-version generalization report (llama-paper Table 2
and Fig. 9) as report.md, report.html, report.json and PNG plots.

  1. datasets: contexts, samples, named-frame share per program;
  2. Table-2-style exact stack overlap between versions at several depths;
  3. token and function (frame name) overlap, and vocabulary coverage;
  4. model vs the three baselines on the test versions, overall and on stacks
     unseen in training (model/compare.py): exact and off-by-one accuracy,
     under-prediction, both weighted and unweighted, with confusion matrices; beside
     them TCMalloc's removed online lifetime rule (large objects only, and all sizes),
     replayed over the test datasets' profiles in time order (model/tcmalloc_rule.py),
     and how far the model is ahead of it;
  5. accuracy against sampling fraction: the model retrained (same hyperparameters)
     on x% of the training samples, each context's sample count thinned binomially
     with its label kept (a context left with no samples drops out); a refit model's
     points train for its own best epoch count (no early-stopping pass per point).
"""

from __future__ import annotations

import os

import numpy as np

from core import version_roles
from core.files import write_json
from model import io, plots, tcmalloc_rule
from model.card import metrics_table
from model.compare import PREDICTORS, compare, costliest_table, display_rows
from model.data import DatasetError, Examples, check_compatible, load_dataset
from model.evaluate import select_split, training_data
from model.html_page import markdown_page
from model.metrics import headline
from model.train import Fitter, fit_backoff, predict_classes
from core import tokenizer

DEPTHS = (1, 2, 4, 8, 16, 32)


def _pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def stack_overlap(train: Examples, test: Examples, depth: int) -> dict:
    """Share of test contexts whose top `depth` frames occur (as a prefix) in training."""
    seen = {tuple(f[:depth]) for f in train.frames}
    hit = np.array([tuple(f[:depth]) in seen for f in test.frames], bool)
    return {"contexts": float(hit.mean()) if len(hit) else None,
            "samples": float(test.weight[hit].sum() / test.weight.sum()) if len(hit) else None}


def name_overlap(train: Examples, test: Examples, vocab) -> dict:
    """Distinct tokens / functions of the test contexts also in the training ones,
    by distinct item and by sample-weighted occurrence; plus UNK share under `vocab`."""
    def items(ex, fn):
        return [set(fn(f)) for f in ex.frames]

    out = {}
    for name, fn in (("tokens", lambda fr: tokenizer.tokenize(fr)),
                     ("functions", lambda fr: fr)):
        train_items = set().union(*items(train, fn)) if len(train) else set()
        test_sets = items(test, fn)
        distinct = set().union(*test_sets) if test_sets else set()
        weighted = sum(w * len(s & train_items) for s, w in zip(test_sets, test.weight))
        total = sum(w * len(s) for s, w in zip(test_sets, test.weight))
        out[name] = {"distinct_test": len(distinct),
                     "distinct_share_seen": len(distinct & train_items) / len(distinct) if distinct else None,
                     "weighted_share_seen": float(weighted / total) if total else None}
    ids = [vocab.ids(tokenizer.tokenize(f)) for f in test.frames]
    n = sum(len(i) for i in ids)
    out["unk_token_share"] = sum(i.count(tokenizer.UNK_ID) for i in ids) / n if n else None
    return out


def thin(examples: Examples, fraction: float, rng: np.random.Generator) -> Examples:
    """Keeps each sample with probability `fraction`; contexts left with none drop out."""
    if fraction >= 1:
        return examples
    counts = rng.binomial(np.round(examples.weight).astype(np.int64), fraction)
    thinned = examples.select(counts > 0)
    thinned.weight = counts[counts > 0].astype(np.float32)
    return thinned


def _fraction_run(fitter, hp, context, train_sets, test: Examples, fraction: float, class_names,
                  refit_epochs: int | None = None):
    """The model retrained (and the baselines refit) on `fraction` of the training
    samples, compared on `test`; None when no train or eval context is left.

    Trained as the saved model was: a refit model's points are one fit on the thinned
    train + eval splits for the saved model's epoch count (`refit_epochs`, its
    metrics.json best_epoch), not a second early-stopped fit per point to pick the
    count again; a model without refit is early-stopped on the thinned eval split."""
    rng = np.random.default_rng(hp.seed)
    tr = thin(Examples.concat([d.splits["train"] for d in train_sets]), fraction, rng)
    ev = thin(Examples.concat([d.splits["eval"] for d in train_sets]), fraction, rng)
    if not len(tr) or not len(ev):
        return None
    if hp.refit and refit_epochs:
        tr = Examples.concat([tr, ev])
        model, _, _ = fitter.fit(tr, None, hp.replace(epochs=refit_epochs), None, verbose=0)
    else:
        model, _, best = fitter.fit(tr, ev, hp, None, verbose=0)
        if hp.refit:  # a metrics.json without best_epoch: pick the count here
            tr = Examples.concat([tr, ev])
            model, _, _ = fitter.fit(tr, None, hp.replace(epochs=best), None, verbose=0)
    return {"train_contexts": len(tr), "train_samples": float(tr.weight.sum()),
            **compare(predict_classes(model, test, hp, fit_backoff(tr, hp, context)), tr, test,
                      class_names)}


def _by_version(ex: Examples) -> dict:
    return {v: ex.select(ex.version_label == v) for v in sorted(set(ex.version_label.tolist()))}


def test_roles(mdir, train_ex: Examples, test_labels, model_dir: str) -> tuple[list, list[str]]:
    """(version_roles.Status per test version, the lines to print: at most one saying the
    model records no roles, one naming the versions that are not test data).  The
    model's recorded roles and the report's own training datasets (its tables fit on
    them) count; a reserved test version is refused (ReservedVersionError)."""
    roles, notes = version_roles.roles_of(mdir.config), []
    if roles is None:
        notes.append(f"model {model_dir} records no roles (trained before they were recorded): "
                     "its training datasets' versions count as training, selection unknown")
        roles = {"train": [v for d in mdir.config.get("training_datasets", [])
                           for v in d.get("version_labels", [])], "selection": []}
    roles = {**roles, "train": sorted(set(roles["train"]) | set(train_ex.version_label.tolist()))}
    statuses = version_roles.classify(test_labels, roles, mdir.config,
                                      source=f"model {model_dir} (config.json roles)")
    line = version_roles.seen_line(statuses)
    return statuses, notes + ([line] if line else [])


def write_report(model_dir: str, train_dirs: list[str], test_dirs: list[str], out_dir: str,
                 fractions=(0.1, 0.3, 1.0), depths=DEPTHS) -> dict:
    mdir = io.read_model_dir(model_dir)
    model, config, vocab, hp = mdir.load_keras(), mdir.config, mdir.vocab, mdir.hparams
    class_names = mdir.class_names
    train_sets, train_ex = training_data(config, train_dirs)
    test_sets = [load_dataset(d) for d in test_dirs]
    check_compatible(train_sets + test_sets, vocab=vocab, label_scheme=config["label_scheme"],
                     context=mdir.context)
    training_paths = {d.path for d in train_sets}
    test_ex = Examples.concat([select_split(d, "auto", training_paths)[1] for d in test_sets])
    if not len(test_ex):
        raise DatasetError("report: the test datasets hold no contexts")
    statuses, notes = test_roles(mdir, train_ex, set(test_ex.version_label.tolist()), model_dir)
    for line in notes:
        print(f"lifetime report: {line}", flush=True)
    os.makedirs(out_dir, exist_ok=True)
    rep: dict = {"model_dir": os.path.abspath(model_dir), "class_names": class_names,
                 "version_roles": {s.label: {"role": s.role, "why": s.why} for s in statuses},
                 "roles_notes": notes,
                 "hyperparameters": config["hyperparameters"],
                 "train_datasets": sorted(training_paths), "test_datasets": [d.path for d in test_sets]}

    # 1. datasets
    rep["datasets"] = {d.path: {"role": "train" if d.path in training_paths else ", ".join(sorted(
                                    {rep["version_roles"][v]["role"] for v in
                                     set(d.all().version_label.tolist())} or {"test"})),
                                "contexts": len(d.all()), "samples": float(d.all().weight.sum()),
                                "programs": {p: {"samples": s["samples"],
                                                 "named_frame_share": s["symbolized_frame_share"]}
                                             for p, s in d.manifest["files"]["programs"].items()}}
                       for d in train_sets + test_sets}
    # 2-3. overlap between versions
    train_all = Examples.concat([d.all() for d in train_sets])
    train_versions, test_versions = _by_version(train_all), _by_version(test_ex)
    pairs = [(a, b) for a in train_versions for b in test_versions]
    pairs += [(a, b) for a in train_versions for b in train_versions if a < b]
    rep["stack_overlap"] = [{"from": a, "to": b, "depths": {
        str(d): stack_overlap(train_versions[a], (test_versions.get(b) or train_versions[b]), d)
        for d in depths}} for a, b in pairs]
    if len(train_versions) > 1:
        rep["stack_overlap"] += [{"from": "all training", "to": b, "depths": {
            str(d): stack_overlap(train_all, test_versions[b], d) for d in depths}}
            for b in test_versions]
    rep["name_overlap"] = name_overlap(train_all, test_ex, vocab)

    # 4. model vs baselines (and TCMalloc's rule) on the test versions
    rule, split = tcmalloc_rule.for_comparison(test_sets, test_ex, train_ex,
                                               config["label_scheme"])
    rep["test"] = compare(predict_classes(model, test_ex, hp, mdir.backoff), train_ex, test_ex,
                          class_names, split=split)
    rep["tcmalloc_rule"] = tcmalloc_rule.with_model_ahead(rule, rep["test"])
    metrics = io.read_json(os.path.join(model_dir, io.METRICS_FILE), io.ModelDirError,
                           "missing (not a model directory written by `lifetime train`)")
    held = metrics.get("eval") or {}
    # None: a metrics.json from before the comparison schema (the section says so).
    rep["within_version_held_out"] = held if "overall" in held else None

    # 5. accuracy against sampling fraction
    rep["sampling"] = []
    fitter = Fitter(len(class_names))  # one compiled trainer for every retrained point
    for fr in sorted(fractions):
        if fr >= 1:
            run = {"train_contexts": len(train_ex), "train_samples": float(train_ex.weight.sum()),
                   **rep["test"]}
        else:
            run = _fraction_run(fitter, hp, mdir.context, train_sets, test_ex, fr, class_names,
                                metrics.get("best_epoch") if metrics.get("refit_on_eval") else None)
        rep["sampling"].append({"fraction": fr, **({"skipped": "no train or eval contexts left"}
                                                    if run is None else run)})

    figures = _figures(rep, class_names, out_dir)
    rep["summary"] = _summary(rep)
    md = _markdown(rep, figures, depths)
    with open(os.path.join(out_dir, "report.md"), "w", encoding="utf-8") as f:
        f.write(md)
    with open(os.path.join(out_dir, "report.html"), "w", encoding="utf-8") as f:
        f.write(markdown_page(md, "Cross-version lifetime model report"))
    write_json(os.path.join(out_dir, "report.json"), rep)
    return rep


def _rule_paragraph(rep) -> list:
    """The report's words on TCMalloc's rule."""
    r = rep.get("tcmalloc_rule") or {}
    if "skipped" in r:
        return [f"TCMalloc's lifetime rule: not replayed ({r['skipped']}).", ""]
    if not r:
        return []
    names = rep["class_names"]
    c = r["classes"]
    L = ["TCMalloc's removed lifetime rule (`baseline: tcmalloc_rule`: objects over "
         f"{r['large_bytes'][0] // (1 << 20)} MiB only, the others get the training majority "
         f"class `{names[c['fallback']]}`; `baseline: tcmalloc_rule_all`: every object) is "
         "online: per allocation stack it counts objects that died within "
         f"{r['threshold_s']:g} s (short) and those that lived longer (long), and predicts "
         f"short (`{names[c['short']]}`) only when short > long + {r['margin']}, else long "
         f"(`{names[c['long']]}`). It is replayed here over the test datasets' profiles in "
         f"time order ({_pct(r['samples_replayed_share'])} of the test samples), with no "
         "training data; a context's samples may get different classes, and count where "
         "they went (unweighted: each context split in those proportions)."]
    ahead = r.get("model_ahead") or {}
    for part, title in (("overall", "all test contexts"), ("unseen", "unseen stacks")):
        if part not in ahead:
            continue
        cells = []
        for sizes, label in (("large", "large objects only"), ("all", "all sizes")):
            a = ahead[part].get(sizes)
            if a:
                cells.append(f"{label} {_pts(a['weighted_exact'])} weighted / "
                             f"{_pts(a['unweighted_exact'])} unweighted")
        L[-1] += (f" On {title} the model is ahead of the rule by (points of exact accuracy) "
                  + "; ".join(cells) + ".")
    return L + [""]


def _pts(x) -> str:
    return "n/a" if x is None else f"{100 * x:+.1f}"


def _summary(rep) -> dict:
    out = {}
    for part in ("overall", "unseen"):
        for name in (*PREDICTORS, *(n for n in tcmalloc_rule.NAMES.values()
                                    if n in rep["test"][part])):
            m = rep["test"][part][name]
            if m["contexts"]:
                out[f"{part}/{name}"] = {k: (None if v is None else round(v, 4))
                                         for k, v in headline(m).items()}
    out["unseen_share"] = rep["test"]["unseen_share"]
    if (rep.get("tcmalloc_rule") or {}).get("model_ahead"):
        out["model_ahead_of_tcmalloc_rule"] = rep["tcmalloc_rule"]["model_ahead"]
    return out


def _figures(rep, class_names, out_dir) -> dict:
    figs = {}
    o = rep["test"]["overall"]["model"]
    figs["confusion_weighted"] = plots.confusion_png(
        o["weighted"]["confusion"], class_names, "model on the test versions (sample-weighted)",
        os.path.join(out_dir, "confusion_weighted.png"))
    figs["confusion_unweighted"] = plots.confusion_png(
        o["unweighted"]["confusion"], class_names, "model on the test versions (per context)",
        os.path.join(out_dir, "confusion_unweighted.png"))
    for part in ("overall", "unseen"):
        groups = {name: {"w exact": headline(m)["weighted_exact"],
                         "w off-by-1": headline(m)["weighted_off_by_one"],
                         "u exact": headline(m)["unweighted_exact"],
                         "u off-by-1": headline(m)["unweighted_off_by_one"]}
                  for name, m in rep["test"][part].items() if m["contexts"]}
        if groups:
            figs[f"bars_{part}"] = plots.bars_png(
                groups, f"test versions, {part} contexts", os.path.join(out_dir, f"bars_{part}.png"))
    runs = [r for r in rep["sampling"] if "overall" in r]
    if runs:
        series = {}
        for name in ("model", "baseline_exact", "baseline_site"):
            series[f"{name} weighted"] = [r["overall"][name]["weighted"]["exact"] for r in runs]
            series[f"{name} unweighted"] = [r["overall"][name]["unweighted"]["exact"]
                                            for r in runs]
        figs["sampling"] = plots.lines_png(
            [100 * r["fraction"] for r in runs], series, "% of training samples kept",
            "exact accuracy on the test versions vs sampling", os.path.join(out_dir, "sampling.png"),
            logx=True)
    depth_series = {f"{r['from']} -> {r['to']}": [r["depths"][d]["contexts"] for d in r["depths"]]
                    for r in rep["stack_overlap"]}
    if depth_series:
        figs["overlap"] = plots.lines_png(
            [int(d) for d in rep["stack_overlap"][0]["depths"]], depth_series,
            "stack depth compared (frames from the top)", "exact stack overlap (share of contexts)",
            os.path.join(out_dir, "overlap.png"), logx=True)
    return {k: os.path.basename(v) for k, v in figs.items()}


def _against_majority(am) -> list:
    """Where the served classes lose the weight the majority class (the tables' fallback)
    wins (model/compare.py `against_majority`)."""
    if not am:
        return []
    L = ["## Against the majority class", "",
         "Share of the weight (and of the contexts, unweighted) the majority class (every "
         "table's fallback) gets right and the model does not, and the reverse:", "",
         "| contexts | lost to it: weighted / unweighted | won from it: weighted / unweighted |",
         "|---|---|---|"]
    L += [f"| {scope} | {_pct(am[scope]['lost'])} / {_pct(am[scope].get('lost_contexts'))} | "
          f"{_pct(am[scope]['won'])} / {_pct(am[scope].get('won_contexts'))} |"
          for scope in ("overall", "unseen") if scope in am]
    rows = am.get("unseen", {}).get("costliest")
    if rows:
        L += ["", "The contexts unseen in training that lose the most of it (share of the "
              "unseen weight; the site's classes in the training data):", "",
              *costliest_table(rows)]
    return L + [""]


def _markdown(rep, figs, depths) -> str:
    L = ["# Cross-version lifetime model report", "",
         f"Model `{rep['model_dir']}` ({rep['hyperparameters']['architecture']} architecture). "
         "Training datasets feed the model, the baselines and the overlap statistics.", ""]
    L += [f"**Roles.** {n}." for n in rep.get("roles_notes", [])]
    L += ["", "## Datasets", "",
         "| dataset | role | contexts | samples | program: named-frame share |", "|---|---|---|---|---|"]
    for path, d in rep["datasets"].items():
        progs = "; ".join(f"{p}: {_pct(s['named_frame_share'])}" for p, s in d["programs"].items())
        L.append(f"| `{path}` | {d['role']} | {d['contexts']} | {d['samples']:.0f} | {progs} |")
    L += ["", "## Exact stack overlap (llama-paper Table 2)", "",
          "Share of the later version's contexts (unweighted / sample-weighted) whose top "
          "N frames occur among the earlier version's.", "",
          "| from -> to | " + " | ".join(f"depth {d}" for d in depths) + " |",
          "|---|" + "---|" * len(depths)]
    for r in rep["stack_overlap"]:
        L.append(f"| {r['from']} -> {r['to']} | " + " | ".join(
            f"{_pct(r['depths'][str(d)]['contexts'])} / {_pct(r['depths'][str(d)]['samples'])}"
            for d in depths) + " |")
    if "overlap" in figs:
        L += ["", f"![stack overlap]({figs['overlap']})"]
    n = rep["name_overlap"]
    L += ["", "## Token and function overlap", "",
          "| item | distinct in test | distinct seen in training | sample-weighted seen |",
          "|---|---|---|---|"]
    for k in ("tokens", "functions"):
        L.append(f"| {k} | {n[k]['distinct_test']} | {_pct(n[k]['distinct_share_seen'])} | "
                 f"{_pct(n[k]['weighted_share_seen'])} |")
    L += ["", f"Test token occurrences outside the model's vocabulary (read as `<unk>`): "
              f"{_pct(n['unk_token_share'])}.", ""]
    share = rep["test"]["unseen_share"]
    test = "test" if all(v["role"] == version_roles.TEST for v in rep.get(
        "version_roles", {}).values()) else "compared (not all test: see Roles)"
    for part, title in (("overall", f"all {test} contexts"),
                        ("unseen", f"{test} contexts whose exact stack is unseen in training")):
        rows = display_rows(rep["test"][part])
        count = rows["model"]["contexts"]
        L += [f"## Model vs baselines: {title}", "",
              f"{count} contexts, {rows['model']['samples']:.0f} samples"
              + (f" ({_pct(share['contexts'])} of contexts, {_pct(share['samples'])} of samples)."
                 if part == "unseen" else "."), ""]
        if count:
            L += [metrics_table(rows), ""]
            if f"bars_{part}" in figs:
                L += [f"![model vs baselines]({figs[f'bars_{part}']})", ""]
        if part == "overall":
            L += _rule_paragraph(rep)
    L += _against_majority(rep["test"].get("against_majority"))
    L += ["## Confusion matrices (model, all test contexts)", "",
          "Rows: true class; columns: predicted. Below the diagonal = under-prediction.", "",
          f"![confusion, weighted]({figs['confusion_weighted']})", "",
          f"![confusion, unweighted]({figs['confusion_unweighted']})", ""]
    names = rep["class_names"]
    conf = rep["test"]["overall"]["model"]["weighted"]["confusion"]
    L += ["Sample-weighted counts:", "", "| true \\ predicted | " + " | ".join(names) + " |",
          "|---|" + "---|" * len(names)]
    L += [f"| {names[i]} | " + " | ".join(f"{v:.0f}" for v in row) + " |" for i, row in enumerate(conf)]
    held = rep["within_version_held_out"]
    L += ["", "## Within-version held-out contexts (training datasets' eval split)", "",
          metrics_table(display_rows(held["overall"])) if held else
          "(the model's metrics.json predates this comparison; retrain the model to see it)",
          "", "## Accuracy against sampling fraction", "",
          "Rows below 100% retrain the model (same hyperparameters, same seed) on that share "
          "of the training samples, each context's sample count thinned binomially; "
          + ("as the saved model was refit, each trains on the thinned train + eval splits "
             "for the saved model's best epoch count. "
             if rep["hyperparameters"].get("refit") else
             "each is early-stopped on the thinned eval split. ")
          + "The 100% row is the saved model.", "",
          "| % of samples | train contexts | model w / u exact | exact table w / u | site table w / u |",
          "|---|---|---|---|---|"]
    for r in rep["sampling"]:
        if "overall" not in r:
            L.append(f"| {100 * r['fraction']:g} | skipped: {r['skipped']} | | | |")
            continue
        o = r["overall"]
        cells = [f"{_pct(o[k]['weighted']['exact'])} / {_pct(o[k]['unweighted']['exact'])}"
                 for k in ("model", "baseline_exact", "baseline_site")]
        L.append(f"| {100 * r['fraction']:g} | {r['train_contexts']} | " + " | ".join(cells) + " |")
    if "sampling" in figs:
        L += ["", f"![sampling]({figs['sampling']})"]
    return "\n".join(L) + "\n"
