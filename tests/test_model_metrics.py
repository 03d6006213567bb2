"""Metrics, baselines and the input layout, on hand-built cases (no training)."""

import numpy as np
import pytest

from model import baselines, features, metrics
from model.hparams import HParams
from core import tokenizer
from core.tokenizer import Vocabulary

NAMES = ["10ms", "100ms", "1s", "10s", "100s", "1000s", ">=1000s", "inf"]


def test_metrics_match_hand_computed_values():
    y_true, y_pred, w = [0, 1, 2, 7], [0, 2, 1, 7], [10, 1, 1, 2]
    m = metrics.classification_metrics(y_true, y_pred, w, NAMES)
    assert m["contexts"] == 4 and m["samples"] == 14
    assert m["weighted"]["exact"] == pytest.approx(12 / 14)
    assert m["unweighted"]["exact"] == pytest.approx(2 / 4)
    assert m["weighted"]["off_by_one"] == pytest.approx(1.0)
    assert m["weighted"]["under_prediction"] == pytest.approx(1 / 14)   # 2 -> 1
    assert m["weighted"]["over_prediction"] == pytest.approx(1 / 14)    # 1 -> 2
    assert m["unweighted"]["under_prediction"] == pytest.approx(1 / 4)
    pc = m["weighted"]["per_class"]
    assert pc["10ms"] == {"precision": 1.0, "recall": 1.0, "support": 10.0}
    assert pc["100ms"]["precision"] == 0.0 and pc["100ms"]["recall"] == 0.0
    assert pc["10s"]["precision"] is None  # never predicted: undefined, not 0
    conf = np.array(m["weighted"]["confusion"])
    assert conf[0, 0] == 10 and conf[1, 2] == 1 and conf[2, 1] == 1 and conf[7, 7] == 2
    assert conf.sum() == 14
    assert np.array(m["unweighted"]["confusion"]).sum() == 4


def test_off_by_one_and_under_prediction_count_class_distance():
    # 0 -> 2 is over by two; 7 (inf) -> 6 (>=1000s) is under by one.
    m = metrics.classification_metrics([0, 7], [2, 6], [1, 3], NAMES)
    assert m["weighted"]["exact"] == 0.0
    assert m["weighted"]["off_by_one"] == pytest.approx(3 / 4)
    assert m["weighted"]["under_prediction"] == pytest.approx(3 / 4)


def test_metrics_of_no_contexts_are_undefined():
    m = metrics.classification_metrics([], [], [], NAMES)
    assert m["contexts"] == 0 and m["weighted"]["exact"] is None


def test_baselines_on_hand_built_examples():
    frames = [("f", "main"), ("f", "main"), ("g", "main"), ("g", "other")]
    labels = [0, 2, 3, 7]
    weights = [5, 1, 2, 3]
    fitted = baselines.fit_baselines(frames, labels, weights)
    test = [("f", "main"), ("g", "main"), ("h", "main"), ("g", "x"), ()]
    assert fitted["majority"](test).tolist() == [0] * 5            # 0 has the most samples
    assert fitted["exact"](test).tolist() == [0, 3, 0, 0, 0]       # unseen stacks -> majority
    assert fitted["site"](test).tolist() == [0, 7, 0, 7, 0]        # site g: 3 samples of 7 > 2 of 3
    assert baselines.seen_mask(frames, test).tolist() == [True, True, False, False, False]


def test_baseline_ties_go_to_the_shorter_class():
    fitted = baselines.fit_baselines([("a",), ("a",)], [5, 2], [1, 1])
    assert fitted["exact"]([("a",)]).tolist() == [2]
    assert fitted["majority"]([("b",)]).tolist() == [2]


def test_frame_slot_layout_and_truncation():
    hp = HParams(max_frames=2, tokens_per_frame=3)
    vocab = Vocabulary.from_ranked(["a", "b", "c", "d", "main"])
    frames = ["a::b(c, d)", "main", "start_thread"]  # 4 tokens, 1, and a third frame
    layout = features.encode_frames(frames, vocab, hp)
    ids = vocab.ids(["a", "b", "c"]) + vocab.ids(["main"]) + [0, 0]
    assert layout.dtype == np.int32 and layout.tolist() == ids  # "d" and frame 3 dropped
    flat = vocab.ids(tokenizer.tokenize(frames))
    assert features.layout_from_token_ids(flat, hp).tolist() == ids
    assert features.frame_mask(layout, hp).tolist() == [True, True]
    unknown = features.encode_frames(["zz"], vocab, hp)
    assert unknown.tolist() == [tokenizer.UNK_ID, 0, 0, 0, 0, 0]
    assert features.frame_mask(unknown, hp).tolist() == [True, False]
    assert features.layout_from_token_ids([], hp).tolist() == [0] * 6


def examples(frames, labels, weights):
    """Examples of these contexts (no token ids: compare reads frames, labels, weights)."""
    from model.data import Examples

    n = len(frames)
    return Examples([np.zeros(0, np.int64)] * n, frames, np.array(labels, np.int32),
                    np.array(weights, np.float32), *(np.array(["x"] * n, dtype=object)
                                                      for _ in range(3)))


def test_compare_scores_model_and_baselines_overall_and_unseen():
    from model.compare import PREDICTORS, compare

    train = examples([("f", "main"), ("g", "main")], [0, 3], [5, 2])
    test = examples([("f", "main"), ("g", "other"), ("h", "main")], [0, 3, 7], [1, 1, 2])
    out = compare(np.array([0, 3, 0]), train, test, NAMES)
    assert set(out) == {"overall", "unseen", "unseen_share", "against_majority"}
    assert all(set(out[s]) == set(PREDICTORS) for s in ("overall", "unseen"))
    assert out["overall"]["model"]["weighted"]["exact"] == pytest.approx(2 / 4)
    assert out["overall"]["baseline_exact"]["weighted"]["exact"] == pytest.approx(1 / 4)
    assert out["overall"]["baseline_site"]["weighted"]["exact"] == pytest.approx(2 / 4)
    # ("g", "other") and ("h", "main") are unseen: 2 of 3 contexts, 3 of 4 samples.
    assert out["unseen_share"] == {"contexts": pytest.approx(2 / 3), "samples": 0.75}
    assert out["unseen"]["model"]["contexts"] == 2
    assert out["unseen"]["model"]["weighted"]["exact"] == pytest.approx(1 / 3)
    # The majority class (0: 5 of 7 training samples) is right for ("f", "main") only, which
    # the model serves right too: it loses no weight to it, and wins ("g", "other")'s.
    assert out["against_majority"]["overall"] == {"lost": 0.0, "won": 0.25, "lost_contexts": 0.0,
                                                  "won_contexts": pytest.approx(1 / 3),
                                                  "costliest": []}


def test_against_majority_names_the_contexts_that_lose_its_weight():
    from model.compare import against_majority

    # A site always never-freed (7) in training, 1 s (2, the majority) in the test version:
    # the model follows training and loses 6 of 10 samples' weight the majority wins.
    train = examples([("set", "cmd"), ("set", "cmd2"), ("read", "loop")], [7, 7, 2], [3, 1, 5])
    test = examples([("set", "cmd"), ("read", "loop"), ("new", "x"), ("odd", "y")],
                    [2, 2, 2, 0], [6, 1, 2, 1])
    served = np.array([7, 2, 0, 0])
    votes = baselines.votes_by(baselines.site_key, train.frames, train.label, train.weight)
    out = against_majority(served, np.full(4, 2), votes, test, NAMES)
    assert out["lost"] == pytest.approx(8 / 10) and out["won"] == pytest.approx(1 / 10)
    assert out["lost_contexts"] == 0.5 and out["won_contexts"] == 0.25
    first, second = out["costliest"]
    assert first == {"frames": ["set", "cmd"], "share": pytest.approx(0.6), "label": NAMES[2],
                     "served": NAMES[7], "site_in_training": {NAMES[7]: 1.0}}
    assert second["frames"] == ["new", "x"] and second["site_in_training"] is None
    assert against_majority(served, np.full(4, 2), votes, test, NAMES, top=1)["costliest"] == [first]


def test_architecture_registry_is_what_hparams_accept():
    from core.errors import UsageError
    from model import architectures

    assert architectures.names() == ("frames", "tokens")
    assert architectures.get("frames").folded_steps(16, 4) == (16, 4)
    assert architectures.get("tokens").folded_steps(16, 4) == (64, 1)
    with pytest.raises(UsageError, match="unknown architecture 'gru'.*frames, tokens"):
        HParams(architecture="gru")


def test_report_html_keeps_profile_text_as_text():
    from model.html_page import markdown_page

    page = markdown_page("# v1 -> <v2>\n\n| a | b |\n|---|---|\n| <script>x</script> | 1 |\n",
                         "t <1>")
    assert "<title>t &lt;1&gt;</title>" in page and "<h1>v1 -&gt; &lt;v2&gt;</h1>" in page
    assert "<td>&lt;script&gt;x&lt;/script&gt;</td>" in page and "<script>" not in page
