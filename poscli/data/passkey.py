"""Passkey retrieval prompts (Mohtashami & Jaggi, 2023, "Landmark Attention"; reused by PI and
YaRN), with RULER's multi-key needles (Hsieh et al., 2024), sized for tiny byte-level models.

A prompt hides a random key (1..50000) in filler text at a chosen depth and asks for it at the
end; the answer is right when the model continues the prompt with exactly the key's digits.
A *format* is a template and a number of keys, and is the same at every length: a run records
the format it was trained on (``train.passkey_template``, ``train.passkey_keys``) and is
evaluated on it.

- ``compact`` (default): ``The <name> pass key is <key>.`` and the question ``What is the <name>
  pass key? The <name> pass key is``, where the name is a colour word. With ``keys`` = K > 1
  the filler holds K named keys at different depths and one is asked for (RULER's
  niah_multikey), so a model that copies the first number it sees fails.
- ``paper``: the paper's wording (introduction, ``The pass key is <key>. Remember it. <key> is
  the pass key.``, ``What is the pass key? The pass key is``), one key; it needs 280 tokens.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass

import numpy as np

from poscli.data.tokens import encode
from poscli.errors import PoscliError

FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
# Key names: colour words, none of them in the filler, none a prefix of another.
NAMES = ("red", "gold", "pink", "gray", "teal", "navy", "plum", "jade", "ruby", "mint", "sand", "rust")
MAX_KEY = 50000
ANSWER_BUDGET = 6  # tokens kept free after the prompt for the answer (5 digits and a stop)


@dataclass(frozen=True)
class Template:
    """A prompt format: ``{name}`` is the key's name, ``{key}`` the number."""

    introduction: str
    key_sentence: str
    question: str
    max_keys: int


TEMPLATES = {
    "compact": Template(
        "", "The {name} pass key is {key}. ", "What is the {name} pass key? The {name} pass key is ", len(NAMES)
    ),
    "paper": Template(
        "There is an important info hidden inside a lot of irrelevant text. Find it and memorize them. "
        "I will quiz you about the important information there.\n",
        "The pass key is {key}. Remember it. {key} is the pass key. ",
        "What is the pass key? The pass key is ",
        1,
    ),
}


@dataclass(frozen=True)
class Needle:
    """One key hidden in the filler: its name, its number and its depth in percent."""

    name: str
    key: int
    depth: float


def check_format(template: str, keys: int) -> Template:
    """The template called ``template``, after checking it can hold ``keys`` keys."""
    if template not in TEMPLATES:
        raise PoscliError(f"passkey template {template!r} is unknown; choose {' or '.join(TEMPLATES)}")
    chosen = TEMPLATES[template]
    if not isinstance(keys, int) or not 1 <= keys <= chosen.max_keys:
        hint = (
            "use --passkey-template compact for several keys"
            if chosen.max_keys == 1
            else f"choose 1 to {chosen.max_keys}"
        )
        raise PoscliError(f"the {template} passkey template holds 1 to {chosen.max_keys} keys, got {keys}; {hint}")
    return chosen


def shortest_prompt(template: str = "compact", keys: int = 1) -> int:
    """The fewest tokens a prompt of this format takes (keys of 5 digits, no filler)."""
    chosen = check_format(template, keys)
    longest_name = max(NAMES, key=len)
    sentence = len(chosen.key_sentence.format(name=longest_name, key=MAX_KEY))
    return len(chosen.introduction) + keys * sentence + len(chosen.question.format(name=longest_name))


def draw_needles(rng: random.Random, depth: float, keys: int = 1) -> list[Needle]:
    """The asked needle first (a random name and key at ``depth``), then ``keys - 1`` distractors
    with other names and keys at uniformly random depths."""
    names = rng.sample(NAMES, keys)
    return [
        Needle(name, rng.randint(1, MAX_KEY), depth if index == 0 else rng.uniform(0, 100))
        for index, name in enumerate(names)
    ]


def make_prompt(length: int, needles: list[Needle], template: str = "compact", asked: bool = True) -> str:
    """A prompt of exactly ``length`` bytes ending in the question for ``needles[0]`` (``asked``
    False: in the filler, the questions are the caller's), each needle's sentence at its depth (0:
    right after the introduction, 100: just before the question) of the filler, moved back to the
    nearest sentence boundary."""
    chosen = check_format(template, len(needles))
    sentences = [(n.depth, chosen.key_sentence.format(name=n.name, key=n.key)) for n in needles]
    question = chosen.question.format(name=needles[0].name) if asked else ""
    if length - len(chosen.introduction) - sum(len(text) for _, text in sentences) - len(question) < 0:
        raise PoscliError(
            f"a {template} passkey prompt with {len(needles)} key(s) needs at least "
            f"{shortest_prompt(template, len(needles)) + ANSWER_BUDGET} "
            f"tokens; got length {length + ANSWER_BUDGET}"
        )
    return fill(length, sentences, chosen.introduction, question)


def fill(length: int, sentences: list[tuple[float, str]], introduction: str = "", question: str = "") -> str:
    """Exactly ``length`` bytes: the introduction, the filler with each (depth, sentence) at its depth
    (percent of the filler, moved back to the nearest sentence boundary; at a tie, in the order
    given), then the question."""
    for depth, _ in sentences:
        if not 0 <= depth <= 100:
            raise PoscliError(f"passkey depth must be between 0 and 100, got {depth:g}")
    filler_length = length - len(introduction) - sum(len(text) for _, text in sentences) - len(question)
    filler = (FILLER * (filler_length // len(FILLER) + 1))[:filler_length]
    cuts = []
    for depth, _ in sentences:
        cut = round(filler_length * depth / 100)
        boundary = filler.rfind(". ", 0, cut + 1)
        cuts.append(0 if boundary < 0 or cut == 0 else boundary + 2)
    prompt, previous = introduction, 0
    for index in sorted(range(len(sentences)), key=lambda i: (cuts[i], i)):  # the first given first at a tie
        prompt += filler[previous : cuts[index]] + sentences[index][1]
        previous = cuts[index]
    prompt += filler[previous:] + question
    assert len(prompt) == length, (len(prompt), length)
    return prompt


def is_bytes(tokenizer) -> bool:
    return tokenizer is None or tokenizer.spec == "bytes"


def check_tokenizer(tokenizer) -> None:
    """A passkey is scored digit by digit: every digit must be one token, and so must the stop."""
    if is_bytes(tokenizer):
        return
    if any(len(tokenizer.encode(text)) != len(text) for text in ("0123456789", "12345", ".")):
        raise PoscliError(
            f"the tokenizer {tokenizer.spec} merges digits, so a passkey cannot be scored digit by digit; "
            "use --tokenizer bpe:N (digits stay single tokens) or a tokenizer.json that splits digits"
        )


_FILLER_SENTENCES = [sentence + ". " for sentence in FILLER.strip().rstrip(".").split(". ")]
_ENCODED: dict = {}  # (tokenizer fingerprint, text) -> tokens


def _encode(tokenizer, text: str) -> np.ndarray:
    key = (tokenizer.fingerprint(), text)
    if key not in _ENCODED:
        _ENCODED[key] = tokenizer.encode(text).astype(np.int64)
    return _ENCODED[key]


def shortest_prompt_tokens(template: str, keys: int, tokenizer) -> int:
    """The fewest tokens a prompt of this format takes in ``tokenizer``'s tokens (no filler; the
    longest-encoding name and a five-digit key)."""
    if is_bytes(tokenizer):
        return shortest_prompt(template, keys)
    chosen = check_format(template, keys)
    sentence = max(len(_encode(tokenizer, chosen.key_sentence.format(name=name, key=MAX_KEY))) for name in NAMES)
    question = max(len(_encode(tokenizer, chosen.question.format(name=name))) for name in NAMES)
    return len(_encode(tokenizer, chosen.introduction)) + keys * sentence + question


def make_prompt_tokens(length: int, needles: list[Needle], template: str, tokenizer) -> np.ndarray:
    """``make_prompt`` in ``tokenizer``'s tokens, exactly ``length`` of them: the introduction, each
    key sentence, the filler's sentences and the question encoded on their own (so a key sentence
    reads the same wherever it sits), the filler cut to fit, each needle at the sentence boundary
    at or before its depth. For bytes it is ``make_prompt``'s text. -> (length,) int64."""
    if is_bytes(tokenizer):
        return encode(make_prompt(length, needles, template)).astype(np.int64)
    chosen = check_format(template, len(needles))
    for needle in needles:
        if not 0 <= needle.depth <= 100:
            raise PoscliError(f"passkey depth must be between 0 and 100, got {needle.depth:g}")
    introduction = _encode(tokenizer, chosen.introduction)
    sentences = [_encode(tokenizer, chosen.key_sentence.format(name=n.name, key=n.key)) for n in needles]
    question = _encode(tokenizer, chosen.question.format(name=needles[0].name))
    filler_length = length - len(introduction) - sum(map(len, sentences)) - len(question)
    if filler_length < 0:
        raise PoscliError(
            f"a {template} passkey prompt with {len(needles)} key(s) needs at least "
            f"{shortest_prompt_tokens(template, len(needles), tokenizer) + ANSWER_BUDGET} tokens; got length "
            f"{length + ANSWER_BUDGET}"
        )
    pieces, boundaries, size = [], [0], 0
    while size < filler_length:
        for sentence in _FILLER_SENTENCES:
            piece = _encode(tokenizer, sentence)
            pieces.append(piece)
            size += len(piece)
            boundaries.append(size)
    filler = np.concatenate(pieces)[:filler_length] if pieces else np.zeros(0, dtype=np.int64)
    boundaries = np.array([b for b in boundaries if b <= filler_length])
    cuts = [int(boundaries[boundaries <= round(filler_length * n.depth / 100)].max()) for n in needles]
    parts, previous = [introduction], 0
    for index in sorted(range(len(needles)), key=lambda i: (cuts[i], i)):  # the asked needle first at a tie
        parts += [filler[previous : cuts[index]], sentences[index]]
        previous = cuts[index]
    parts += [filler[previous:], question]
    prompt = np.concatenate(parts)
    assert len(prompt) == length, (len(prompt), length)
    return prompt


def training_sequence(
    length: int, rng: random.Random, template: str = "compact", keys: int = 1, tokenizer=None
) -> tuple[np.ndarray, int]:
    """A passkey example of exactly ``length`` tokens with a random depth and key(s), ending in
    the answer and a full stop, and the index of the answer's first token: what ``--data
    passkey`` and ``--mix passkey:F`` train on. Byte tokens (uint8) unless ``tokenizer``."""
    needles = draw_needles(rng, rng.uniform(0, 100), keys)
    answer = f"{needles[0].key}."
    if is_bytes(tokenizer):
        prompt = make_prompt(length - len(answer), needles, template)
        return encode(prompt + answer), len(prompt)
    prompt = make_prompt_tokens(length - len(answer), needles, template, tokenizer)  # one token per digit and the stop
    return np.concatenate([prompt, _encode(tokenizer, str(needles[0].key)), _encode(tokenizer, ".")]), len(prompt)


PASSKEY_LENGTHS = ("random", "full")


@dataclass(frozen=True)
class PasskeyTraining:
    """How training sequences carry passkey examples: a ``fraction`` of them end in one, of the
    format (``template``, ``keys``), filling the sequence (``lengths`` "full") or of a length drawn
    uniformly from the shortest the format allows to the sequence's, after corpus text ("random":
    keys at every distance, the near ones easy to learn first); ``answer_weight`` W adds W times
    the answers' mean loss to the loss."""

    fraction: float = 0.0
    template: str = "compact"
    keys: int = 1
    lengths: str = "random"
    answer_weight: float = 0.0
    tokenizer: object = None  # None: bytes

    @classmethod
    def plan(cls, train_config, model_config, tokenizer=None) -> PasskeyTraining:
        """How a run (its TrainConfig and ModelConfig) trains on passkey examples (fraction 0: not
        at all), after checking that the format fits the train length and that --answer-loss has
        answers to weigh."""
        name, fraction = ("passkey", 1.0) if train_config.data == "passkey" else parse_mix(train_config.mix)
        fraction = fraction if name == "passkey" else 0.0  # a task mixed in: poscli.training.tasks.TaskMix
        if train_config.answer_loss and not fraction:
            raise PoscliError(
                "--answer-loss weighs the answers of mixed-in examples; add them with --mix passkey:F (or a task: "
                "--mix copy:F) or --data passkey"
            )
        if fraction:
            check_tokenizer(tokenizer)
        plan = cls(
            fraction,
            train_config.passkey_template,
            train_config.passkey_keys,
            train_config.passkey_lengths,
            train_config.answer_loss,
            None if is_bytes(tokenizer) else tokenizer,
        )
        if fraction and model_config.train_length + 1 < plan.shortest:
            raise PoscliError(
                f"a {plan.template} passkey example with {plan.keys} key(s) needs a train length of at least "
                f"{plan.shortest - 1}, got {model_config.train_length}; use a longer --train-length or fewer "
                "--passkey-keys"
            )
        return plan

    @property
    def shortest(self) -> int:
        """The shortest example: the shortest prompt and a five-digit answer with its stop."""
        return shortest_prompt_tokens(self.template, self.keys, self.tokenizer) + len(f"{MAX_KEY}.")

    def example(self, length: int, rng: random.Random) -> tuple[np.ndarray, int]:
        """An example of at most ``length`` tokens and the index of its answer's first token."""
        size = length if self.lengths == "full" else rng.randint(min(self.shortest, length), length)
        return training_sequence(size, rng, self.template, self.keys, self.tokenizer)


def synthetic_documents(count: int = 300, seed: int = 1234, template: str = "compact", keys: int = 1) -> list[str]:
    """Documents for ``--data passkey`` held-out perplexity: lengths log-uniform in 128..64k."""
    rng = random.Random(seed)
    documents = []
    for _ in range(count):
        length = int(math.exp(rng.uniform(math.log(128), math.log(65536))))
        needles = draw_needles(rng, rng.uniform(0, 100), keys)
        documents.append(make_prompt(length, needles, template) + f"{needles[0].key}.\n")
    return documents


def first_number(text: str) -> str | None:
    match = re.match(r"(\d+)", text)
    return match.group(1) if match else None


def is_correct(generated: str, key: int) -> bool:
    """Exact match: the continuation starts with the key's digits, and no further digit."""
    return first_number(generated) == str(key)


def parse_mix(text: str | None) -> tuple[str, float]:
    """``NAME:F`` -> (NAME, F): what ``--mix`` adds to the text (``passkey``, or an algorithmic task,
    ``poscli.training.tasks.TaskMix``) and the fraction of training sequences that end in one.
    None -> ("", 0.0)."""
    if text is None:
        return "", 0.0
    name, _, fraction = text.partition(":")
    try:
        value = float(fraction)
    except ValueError:
        raise PoscliError(f"--mix {text!r}: give NAME:F with F a number in (0, 1], e.g. --mix passkey:0.2") from None
    if not name or not 0 < value <= 1:
        raise PoscliError(f"--mix {text!r}: give NAME:F with F in (0, 1], e.g. --mix passkey:0.2")
    return name, value
