"""The tokenizer reproduces the shared test vectors (the C++ mirror reads the same file)."""

import json
import pathlib

import pytest

from core import tokenizer
from core.tokenizer import Vocabulary

VECTORS = json.loads(
    (pathlib.Path(__file__).parent / "data" / "tokenizer_vectors.json").read_text("utf-8"))


def test_vectors_are_for_this_tokenizer_version():
    assert VECTORS["tokenizer_version"] == tokenizer.TOKENIZER_VERSION


@pytest.mark.parametrize("case", VECTORS["cases"], ids=lambda c: repr(c["frames"])[:40])
def test_shared_vectors(case):
    vocab = Vocabulary(VECTORS["vocabulary"])
    tokens = tokenizer.tokenize(case["frames"])
    assert tokens == case["tokens"]
    assert vocab.ids(tokens) == case["ids"]


def test_separator_between_frames_and_reserved_ids():
    tokens = tokenizer.tokenize(["a::B(int)", "main"])
    assert tokens == ["a", "B", "int", "<sep>", "main"]
    vocab = Vocabulary.from_ranked(["main", "a"])
    assert vocab.tokens[:3] == ["<pad>", "<unk>", "<sep>"]
    assert vocab.ids(tokens) == [4, tokenizer.UNK_ID, tokenizer.UNK_ID, tokenizer.SEP_ID, 3]


def test_vocabulary_file_round_trip(tmp_path):
    vocab = Vocabulary.from_ranked(["x", "y"])
    path = tmp_path / "vocab.txt"
    vocab.save(str(path))
    assert Vocabulary.load(str(path)).tokens == vocab.tokens


def test_bad_vocabulary_files_name_the_file(tmp_path):
    with pytest.raises(ValueError, match="missing.txt.*cannot read"):
        Vocabulary.load(str(tmp_path / "missing.txt"))
    bad = tmp_path / "bad.txt"
    bad.write_text("foo\nbar\n")
    with pytest.raises(ValueError, match="bad.txt.*must start with"):
        Vocabulary.load(str(bad))
    dup = tmp_path / "dup.txt"
    dup.write_text("<pad>\n<unk>\n<sep>\nfoo\nfoo\n")
    with pytest.raises(ValueError, match="dup.txt.*repeat"):
        Vocabulary.load(str(dup))
