"""Parsing token counts such as ``256``, ``1k`` (1024) and ``1m`` (1048576)."""

from __future__ import annotations

import re

from poscli.errors import PoscliError

_LENGTH = re.compile(r"^\s*(\d+)\s*([kKmM]?)\s*$")
_MULTIPLIER = {"": 1, "k": 1024, "m": 1024 * 1024}


def parse_length(text: str, option: str = "--lengths", example: str = "4k") -> int:
    match = _LENGTH.match(text)
    if not match:
        raise PoscliError(
            f"{option}: {text!r} is not a length; use a positive whole number of tokens, "
            f"optionally with k (x1024) or m (x1048576), e.g. {option} {example}"
        )
    value = int(match.group(1)) * _MULTIPLIER[match.group(2).lower()]
    if value < 1:
        raise PoscliError(f"{option}: {text!r} is not a positive length; use e.g. {option} {example}")
    return value


def parse_lengths(text: str, option: str = "--lengths") -> list[int]:
    """A comma-separated list of lengths, in the order given, without repeats."""
    parts = [p for p in text.split(",")]
    if not text.strip() or any(not p.strip() for p in parts):
        raise PoscliError(f"{option}: {text!r} is not a list of lengths; use e.g. {option} 256,1k,4k")
    lengths = []
    for part in parts:
        value = parse_length(part, option, example="256,1k,4k")
        if value not in lengths:
            lengths.append(value)
    return lengths


def format_length(value: int) -> str:
    """1024 -> '1k', 1536 -> '1536', 256 -> '256'."""
    if value >= 1024 * 1024 and value % (1024 * 1024) == 0:
        return f"{value // (1024 * 1024)}m"
    if value >= 1024 and value % 1024 == 0:
        return f"{value // 1024}k"
    return str(value)


def parse_size(text) -> int:
    """A size in bytes: 1000000, 200M, 2G (powers of 1024: K, M, G). Raises ValueError for
    anything else, zero or negative."""
    text = str(text).strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    number = float(text[:-1] if scale > 1 else text)
    if number <= 0:
        raise ValueError(f"{text} is not positive")
    return int(number * scale)
