"""Stack tokenizer (llama-paper §2.2): the one definition every component follows.

A stack is a list of symbolized frames ordered from the top of the trace (the
allocation site first, allocator wrappers already stripped).  Each frame is split
into tokens at delimiter characters, and a separator token goes between frames:

    ["proxy::http::Parse(char const*)", "main"]
      -> ["proxy", "http", "Parse", "char", "const", "<sep>", "main"]

A token is a maximal run of characters that are not delimiters.  The delimiters
are ASCII whitespace and the characters in `DELIMITERS`; everything else
(letters, digits, '_', '$', non-ASCII bytes) is part of a token.  Splitting on
':' covers '::'.  Case is kept: CamelCase names carry meaning.

Ids: 0 = PAD, 1 = UNK, 2 = SEP, then the vocabulary's tokens by rank.  The C++
mirror (export/) follows the same rules; tests/data/tokenizer_vectors.json pins both.
"""

from __future__ import annotations

import re
from typing import Iterable, Sequence

from core.errors import LifetimeError
from core.files import read_text

#: v2: the same splitting rules as v1, over frames whose unnamed-module stand-ins are
#: version-free (``<libglib+?>``, not ``<libglib-2.0.so.0.7400.6+?>``; see
#: symbolize.module_name), so v1 datasets and models do not mix with v2 ones.
TOKENIZER_VERSION = "lifetime-tokenizer-v2"
PAD, UNK, SEP = "<pad>", "<unk>", "<sep>"
RESERVED = (PAD, UNK, SEP)
PAD_ID, UNK_ID, SEP_ID = 0, 1, 2
DELIMITERS = ":()<>[]{},*&.;=+-~!%^|/\\'\"`?@#"
_SPLIT = re.compile("[" + re.escape(DELIMITERS) + " \t\n\r\f\v]+")


def frame_tokens(frame: str) -> list[str]:
    return [t for t in _SPLIT.split(frame) if t]


def tokenize(frames: Sequence[str]) -> list[str]:
    """Tokens of a stack, frames in the given order, SEP between frames."""
    tokens: list[str] = []
    for i, frame in enumerate(frames):
        if i:
            tokens.append(SEP)
        tokens.extend(frame_tokens(frame))
    return tokens


class VocabularyError(LifetimeError, ValueError):
    """A vocabulary file that cannot be read or is not a vocabulary."""


class Vocabulary:
    """Token <-> id table: the reserved tokens, then the most common tokens."""

    def __init__(self, tokens: Iterable[str]):
        tokens = list(tokens)
        if tuple(tokens[: len(RESERVED)]) != RESERVED:
            raise ValueError(f"a vocabulary must start with {', '.join(RESERVED)}")
        if len(set(tokens)) != len(tokens):
            raise ValueError("a vocabulary must not repeat a token")
        self.tokens = tokens
        self._ids = {t: i for i, t in enumerate(tokens)}

    @classmethod
    def from_ranked(cls, ranked_tokens: Iterable[str]) -> "Vocabulary":
        return cls(list(RESERVED) + [t for t in ranked_tokens if t not in RESERVED])

    @classmethod
    def load(cls, path: str) -> "Vocabulary":
        """Reads a vocabulary file: one token per line, the line number is the id."""

        try:  # a fifo or device is refused, not waited on
            tokens = read_text(path).split("\n")
        except OSError as e:
            raise VocabularyError(f"{path}: cannot read vocabulary ({e.strerror})") from e
        except ValueError as e:
            raise VocabularyError(f"{path}: not a vocabulary file: not UTF-8 text ({e})") from e
        if tokens and tokens[-1] == "":
            tokens.pop()
        try:
            return cls(tokens)
        except ValueError as e:
            raise VocabularyError(f"{path}: not a vocabulary file: {e}") from e

    def save(self, path: str) -> None:
        with open(path, "w", encoding="utf-8") as f:
            f.write("".join(t + "\n" for t in self.tokens))

    def __len__(self) -> int:
        return len(self.tokens)

    def ids(self, tokens: Iterable[str]) -> list[int]:
        return [self._ids.get(t, UNK_ID) for t in tokens]
