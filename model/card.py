"""model_card.md: what the model is, what it was trained on, how well it does."""

from __future__ import annotations

from model import architectures
from model.compare import display_rows
from model.hparams import HParams
from model.metrics import headline


def _pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def metrics_table(rows: dict) -> str:
    """rows: name -> classification_metrics dict -> Markdown table of headline figures."""
    lines = ["| predictor | weighted exact | weighted off-by-one | weighted under-pred. "
             "| unweighted exact | unweighted off-by-one | unweighted under-pred. |",
             "|---|---|---|---|---|---|---|"]
    for name, m in rows.items():
        h = headline(m)
        lines.append(f"| {name} | " + " | ".join(_pct(h[f"{w}_{k}"]) for w in ("weighted", "unweighted")
                                              for k in ("exact", "off_by_one", "under_prediction"))
                     + " |")
    return "\n".join(lines)


def model_card(config: dict, metrics: dict) -> str:
    hp = config["hyperparameters"]
    ds = "\n".join(f"- `{d['path']}`: {d['train_contexts']} train / {d['eval_contexts']} eval "
                   f"contexts, versions {', '.join(d['version_labels'])}"
                   for d in config["training_datasets"])
    ev = metrics["eval"]
    layers = architectures.get(hp["architecture"]).describe(HParams.from_json(hp))
    size_note = ("; frame 0 is the object's size frame (`<size$FLOOR>`, the context keyed on "
                 "size: core/context.py `size_feature`)"
                 if (config.get("context") or {}).get("size_feature") else "")
    backoff = config.get("backoff")
    backoff_note = "Served class: the argmax (no back-off)."
    if backoff:
        pure = (f"; and wherever the site's training weight is at least {backoff['pure']} in "
                "its class, that class" if backoff.get("pure") else "")
        backoff_note = (f"Served class: the argmax, or where the top probability is below "
                        f"{backoff['below']} the class of the allocation site in the training "
                        f"data ({backoff['sites']} sites; an unseen site: class "
                        f"{backoff['fallback']}, the training majority){pure} "
                        "(model/backoff.py).  The eval metrics below are of the served class.")
    return f"""# Lifetime model card

Predicts the lifetime class of an allocation from its symbolized stack (llama-paper
§2.2): embedding over stack tokens -> LSTM -> softmax over {len(config['class_names'])} classes
({', '.join(config['class_names'])}; {config['label_scheme']['rule']}, clock
{config['label_scheme']['clock']}).

## Architecture

`{hp['architecture']}`: {layers} -> Dense softmax.
Input `token_ids` int32[{hp['max_tokens']}] = {hp['max_frames']} frames (the dataset's context
definition) x {hp['tokens_per_frame']} tokens, top of the stack first (model/features.py;
tokenizer `{config['tokenizer_version']}`){size_note}.

Hyperparameters: {', '.join(f'{k}={v}' for k, v in sorted(hp.items()))}.

{backoff_note}

## Training data

{ds}

Examples are weighted by sample count ** {hp['weight_power']}; Adam, early stopping on the
eval split's loss (patience {hp['patience']}, min_delta {hp.get('min_delta', 0.0)}), stopped
after {metrics['epochs_run']} epochs (best: {metrics['best_epoch']}).

## Held-out contexts (the datasets' eval split)

{ev['overall']['model']['contexts']} contexts, {ev['overall']['model']['samples']:.0f} samples;
{_pct(ev['unseen_share']['contexts'])} of them ({_pct(ev['unseen_share']['samples'])} of the
samples) with an exact stack not in the train split.

{metrics_table(display_rows(ev['overall']))}

## Limitations

- The eval split holds contexts of the training versions; across versions see
  `lifetime report`. Tokens missing from the vocabulary read as `<unk>`.
- Labels come from T95 of sampled lifetimes; rare contexts have noisy labels.
"""
