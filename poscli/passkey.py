"""Passkey retrieval (Mohtashami & Jaggi, 2023, "Landmark Attention"; reused by PI and YaRN),
sized for tiny byte-level models.

A prompt hides a random key (1..50000) once in filler text at a chosen depth and asks for it
at the end; the answer is right when the first number the model generates equals the key.
Below 1024 tokens a compact template (no introduction, a one-sentence key) leaves room for
filler; from 1024 on, the template is the paper's.
"""

from __future__ import annotations

import math
import random
import re

import numpy as np

from poscli.tokens import encode
from poscli.errors import PoscliError

FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
INTRODUCTION = (
    "There is an important info hidden inside a lot of irrelevant text. Find it and memorize them. "
    "I will quiz you about the important information there.\n"
)
KEY_SENTENCE = "The pass key is {key}. Remember it. {key} is the pass key. "
COMPACT_KEY_SENTENCE = "The pass key is {key}. "
QUESTION = "What is the pass key? The pass key is "
FULL_TEMPLATE_FROM = 1024  # shorter prompts use the compact template
MAX_KEY = 50000
ANSWER_BUDGET = 6  # tokens kept free after the prompt for the answer (5 digits and a stop)


def make_prompt(length: int, depth: float, key: int) -> str:
    """A prompt of exactly ``length`` bytes ending in the question, with the key sentence at
    ``depth`` percent (0: right after the introduction, 100: just before the question) of the
    filler, moved back to the nearest sentence boundary."""
    if not 0 <= depth <= 100:
        raise PoscliError(f"passkey depth must be between 0 and 100, got {depth:g}")
    compact = length < FULL_TEMPLATE_FROM
    intro = "" if compact else INTRODUCTION
    key_text = (COMPACT_KEY_SENTENCE if compact else KEY_SENTENCE).format(key=key)
    filler_length = length - len(intro) - len(key_text) - len(QUESTION)
    if filler_length < 0:
        shortest = len(COMPACT_KEY_SENTENCE.format(key=MAX_KEY)) + len(QUESTION) + ANSWER_BUDGET
        raise PoscliError(f"a passkey prompt needs at least {shortest} tokens; got length {length}")
    filler = (FILLER * (filler_length // len(FILLER) + 1))[:filler_length]
    cut = round(filler_length * depth / 100)
    boundary = filler.rfind(". ", 0, cut + 1)
    cut = 0 if boundary < 0 or cut == 0 else boundary + 2
    prompt = intro + filler[:cut] + key_text + filler[cut:] + QUESTION
    assert len(prompt) == length, (len(prompt), length)
    return prompt


def key_position(prompt: str, key: int) -> float:
    """Where the key sentence starts, as a fraction of the prompt (for checking depths)."""
    return prompt.index(f"The pass key is {key}.") / len(prompt)


def training_sequence(length: int, rng: random.Random) -> np.ndarray:
    """A passkey example of exactly ``length`` tokens, the answer and a full stop at the end,
    with a random key and depth: what ``--data passkey`` and ``--mix passkey:F`` train on."""
    key = rng.randint(1, MAX_KEY)
    answer = f"{key}."
    prompt = make_prompt(length - len(answer), rng.uniform(0, 100), key)
    return encode(prompt + answer)


def synthetic_documents(count: int = 300, seed: int = 1234) -> list[str]:
    """Documents for ``--data passkey`` held-out perplexity: lengths log-uniform in 128..64k."""
    rng = random.Random(seed)
    documents = []
    for _ in range(count):
        length = int(math.exp(rng.uniform(math.log(128), math.log(65536))))
        key = rng.randint(1, MAX_KEY)
        documents.append(make_prompt(length, rng.uniform(0, 100), key) + f"{key}.\n")
    return documents


def first_number(text: str) -> str | None:
    match = re.match(r"\s*(\d+)", text)
    return match.group(1) if match else None


def is_correct(generated: str, key: int) -> bool:
    """Exact match: the first number generated equals the key."""
    return first_number(generated) == str(key)


def parse_mix(text: str | None) -> float:
    """``passkey:F`` -> F, the fraction of training sequences that are passkey examples."""
    if text is None:
        return 0.0
    name, _, fraction = text.partition(":")
    if name != "passkey":
        raise PoscliError(f"--mix {text!r}: only passkey can be mixed in; use e.g. --mix passkey:0.2")
    try:
        value = float(fraction)
    except ValueError:
        raise PoscliError(f"--mix {text!r}: the fraction must be a number in (0, 1], e.g. --mix passkey:0.2") from None
    if not 0 < value <= 1:
        raise PoscliError(f"--mix {text!r}: the fraction must be in (0, 1], e.g. --mix passkey:0.2")
    return value
