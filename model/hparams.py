"""Hyperparameters: the one place they are defined, and how they are recorded.

Every knob that changes the trained model lives in `HParams`; `config.json` in a
model directory stores them all (`to_json`), so a model can be rebuilt exactly.
Two are not choices but facts of the training data, filled in by `lifetime train`:
`vocab_size` (the datasets' vocabulary) and `max_frames` (the frame limit of the
datasets' context definition, core/context.py: the model reads every frame the
dataset kept, so there is one frame limit, not a second default that could disagree).
"""

from __future__ import annotations

import dataclasses

from core.errors import UsageError
from model import architectures
from core import context


@dataclasses.dataclass(frozen=True)
class HParams:
    architecture: str = "frames"  # a name in model/architectures/
    max_frames: int | None = None  # set from the training datasets' context definition
    tokens_per_frame: int = 16    # tokens kept from the start of each frame
    vocab_size: int = 0           # set from the training datasets' vocab.txt
    # The LSTM reads the frames from the bottom of the stack up, so the allocation
    # site is its last input rather than its first (go_backwards).
    site_last: bool = True
    embedding_dim: int = 32
    lstm_units: int = 32
    learning_rate: float = 3e-3
    batch_size: int = 256
    epochs: int = 60              # upper bound; early stopping usually ends sooner
    patience: int = 5             # epochs without eval-loss improvement before stopping
    min_epochs: int = 5           # early stopping watches (and restores) from this epoch on:
                                  # a small eval split of unseen contexts can look best at 1
    # The smallest eval-loss decrease (nats per weighted example) that counts as an
    # improvement: on an eval split the model already classifies perfectly the loss
    # keeps shrinking by ever smaller amounts, and with no threshold early stopping
    # never stopped (the demo ran its 60 epochs twice). 0.003 with patience 5 restores
    # the epoch 0.003 with patience 8 would on PostgreSQL, Redis, clang and CPython
    # (their eval-loss curves); PostgreSQL 15.5 -> 16.2 stays within noise of min_delta
    # 0 (benchmarks/cross_version.py), 0.01 cost it 0.9 points unweighted on unseen
    # contexts.  Re-checked on selection data (defaults_sweep.py --on selection, with
    # weight_power 0.75): 0.003 91.83%, 0.001 91.82%, 0.01 91.61% (clang -0.8).
    min_delta: float = 0.003
    seed: int = 0
    # Refit: once early stopping has picked the epoch count on the eval split, train a
    # fresh model on train + eval for that many epochs and save that one. For models
    # meant for other versions (every context of the training version helps); the
    # held-out figures in metrics.json are then those of the first, train-only fit.
    refit: bool = False
    # Word dropout: during training each token is replaced by <unk> with this
    # probability, so the model learns what to do with names it has never seen.
    # Inference is unaffected. Off by default: on real servers it kept the model from
    # fitting its own training contexts (benchmarks/ablation.py; README, "Real servers").
    unk_dropout: float = 0.0
    # Example weight = samples ** weight_power (1: by sample count, as in the paper;
    # 0: every context counts once), normalized to mean 1 over the training split.
    # Large contexts still count more, small ones are not ignored.  0.75 was chosen on
    # selection data (issue 33 item 2: benchmarks/defaults_sweep.py --on selection, Redis
    # 6.2.9, PostgreSQL 15.5 run 2, CPython 3.10 -> 3.11, clang 14 -> 16: best mean
    # weighted exact, 91.83% against 0.5's 91.66%, no family a point behind its best);
    # 0.5 before, chosen on the test versions.
    weight_power: float = 0.75
    # Back-off (model/backoff.py, issue 33 item 6): where the model's top probability is
    # below backoff_below, the served class is its site's in the training data (the
    # training majority for an unseen site); and a site whose training weight is at least
    # backoff_pure in one class is served that class whatever the model says.  0: never.
    # Both chosen on selection data (benchmarks/backoff_selection.py on the selection
    # sweep's models: Redis 6.2.9, PostgreSQL 15.5 run 2, CPython 3.11, clang 16): of the
    # rules that lower neither weighting of any family, overall or on unseen contexts, the
    # one that gains the most (0.4 and 1.0, i.e. sites of one class only).  Chosen first
    # with sites keyed by the ids the model reads (+10.7 points summed); again with the
    # frame-text key on a new selection sweep (out/defaults_sweep_selection/backoff.md:
    # +16.5 summed, against +7.8 for 0.4 alone; any backoff_pure below 0.99 costs a
    # family up to 1.5 points): the same rule.
    backoff_below: float = 0.4
    backoff_pure: float = 1.0

    def __post_init__(self):
        architectures.get(self.architecture)  # UsageError naming the known ones
        for name, (lo, hi) in RANGES.items():
            value = getattr(self, name)
            if name == "max_frames" and value is None:
                continue
            kind = float if isinstance(lo, float) else int
            if (isinstance(value, bool) or not isinstance(value, (int, float))
                    or (kind is int and not isinstance(value, int))
                    or not (lo <= value <= hi) or (name in OPEN_ABOVE and value == hi)
                    or (name in OPEN_BELOW and value == lo)):
                raise UsageError(f"hyperparameter {name} {value!r}: must be "
                                 f"{range_text(name)}")

    @property
    def backs_off(self) -> bool:
        """Either back-off rule is on (model/backoff.py)."""
        return self.backoff_below > 0 or self.backoff_pure > 0

    @property
    def max_tokens(self) -> int:
        if self.max_frames is None:
            raise UsageError("max_frames is not known yet: it comes from the training "
                             "datasets' context definition")
        return self.max_frames * self.tokens_per_frame

    def for_context(self, context, where: str) -> "HParams":
        """These hyperparameters with the frame limit of `context` (the training datasets'
        ContextDefinition); a different max_frames given by the user is an error."""
        if self.max_frames is not None and self.max_frames != context.max_frames:
            raise UsageError(
                f"max_frames {self.max_frames}: {where} keeps {context.max_frames} frames per "
                "context (its context definition) and the model reads exactly those; leave "
                "max_frames out, or rebuild the dataset with `lifetime build-dataset "
                "--max-frames N`")
        return self.replace(max_frames=context.max_frames)

    def replace(self, **changes) -> "HParams":
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        d["max_tokens"] = None if self.max_frames is None else self.max_tokens
        return d

    @classmethod
    def from_json(cls, d: dict) -> "HParams":
        names = {f.name for f in dataclasses.fields(cls)}
        # A model trained before min_delta existed stopped on any decrease.
        # One trained before the back-off existed serves the model alone.
        return cls(**{"min_delta": 0.0, "backoff_below": 0.0, "backoff_pure": 0.0,
                      **{k: v for k, v in d.items() if k in names}})


# The range of every numeric hyperparameter: checked by HParams (a config.json read
# back) and, through core/options.py, by `lifetime train`'s flags as they are
# parsed.  Integers: sizes a 2-core machine trains in hours, not a typo's years;
# floats: finite, where the optimiser and the weights stay meaningful.
RANGES = {
    "max_frames": (1, context.MAX_FRAMES_LIMIT),  # the context definition's limit
    "tokens_per_frame": (1, 256),
    "vocab_size": (0, 2**31 - 1),       # token ids are int32
    "embedding_dim": (1, 4096),
    "lstm_units": (1, 4096),
    "learning_rate": (0.0, 1.0),        # Adam; (0, 1]
    "batch_size": (1, 1 << 20),
    "epochs": (1, 10_000),
    "patience": (0, 10_000),
    "min_epochs": (0, 10_000),
    "min_delta": (0.0, 10.0),           # nats; 0: any decrease is an improvement
    "seed": (0, 2**32 - 1),             # numpy's (keras.utils.set_random_seed)
    "unk_dropout": (0.0, 1.0),          # a probability; [0, 1): 1 would drop every token
    "weight_power": (0.0, 2.0),         # samples ** 2 still fits float32 for 1e9 samples
    "backoff_below": (0.0, 1.0),        # a probability; 1: back off unless the model is sure
    "backoff_pure": (0.0, 1.0),         # a share of a site's weight; 0: off
}
OPEN_BELOW = {"learning_rate"}
OPEN_ABOVE = {"unk_dropout"}


def range_text(name: str) -> str:
    lo, hi = RANGES[name]
    if isinstance(lo, int):
        return f"an integer in {lo}..{hi}"
    return (f"a finite number in {'(' if name in OPEN_BELOW else '['}{lo:g}, "
            f"{hi:g}{')' if name in OPEN_ABOVE else ']'}")
