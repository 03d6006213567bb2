"""The 64-bit hash of a byte string that the exported C++ library computes
(export/cc/lifetime_model.cc `HashBytes`): its vocabulary table is probed by it
(export/codegen.py) and the model's back-off table is keyed by it (model/backoff.py)."""

from __future__ import annotations

MASK64 = (1 << 64) - 1
HASH_MUL = 0x9E3779B97F4A7C15
HASH_FINAL = 0xBF58476D1CE4E5B9


def hash_bytes(data: bytes) -> int:
    """8-byte little-endian words, the last one zero-padded, the length mixed in first."""
    h = (len(data) * HASH_MUL) & MASK64
    for i in range(0, len(data), 8):
        h = ((h ^ int.from_bytes(data[i:i + 8], "little")) * HASH_MUL) & MASK64
        h ^= h >> 29
    h = (h * HASH_FINAL) & MASK64
    return h ^ (h >> 32)
