"""Byte-level tokens: one token per UTF-8 byte, ids 0..255."""

from __future__ import annotations

import numpy as np

VOCAB_SIZE = 256


def encode(text: str) -> np.ndarray:
    """UTF-8 bytes as token ids 0..255. (N,) uint8."""
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).copy()  # writable, so torch can share it


def decode(tokens) -> str:
    return bytes(bytearray(int(t) for t in tokens)).decode("utf-8", errors="replace")
