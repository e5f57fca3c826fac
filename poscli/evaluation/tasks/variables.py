"""``--task variables``: RULER's variable tracking in the filler (Hsieh et al., 2024, vt): a chain of
K assignments, ``VAR QKXWT = 31415.`` then ``VAR BHLRZ = VAR QKXWT.`` and so on, hidden at depths
drawn from ``--depths`` (in chain order, each after the one it copies), beside a distractor chain
of K assignments from another value; the question ``Which variables hold 31415? They are`` asks
for the chain's names, in chain order, ``QKXWT BHLRZ ... .``.

It is scored as ``multiquery`` is (``poscli.evaluation.tasks.multiquery``): teacher-forced over the
whole context, a variable counts as recalled when each of its letters (and, for the last, the
stop) is the argmax given the true text before it, at its assignment's depth; a prompt is exact
when every variable is. ``--keys K`` sets the chain's length (default 4, RULER's hops plus one),
``length`` is the whole context. The algorithmic ``variable-tracking`` task is the same idea
without filler, by instance size, for training.
"""

from __future__ import annotations

import random
import string

import numpy as np

from poscli.data.passkey import MAX_KEY, fill
from poscli.errors import PoscliError
from poscli.evaluation.tasks import register
from poscli.evaluation.tasks.multiquery import MultiQuery

QUESTION = "Which variables hold {value}? They are "
NAME_LETTERS = 5


def variables_context(length: int, keys: int, depths: list[float], rng: random.Random):
    """A context of exactly ``length`` bytes: the chain and a distractor chain in the filler, the
    question, and the chain's names as the answer. -> (prompt, answer, mask, depths): the answer's
    scored tokens ((A,) bool: each name's letters, the last with the stop) and each name's depth."""
    names = set()
    while len(names) < 2 * keys:
        names.add("".join(rng.choice(string.ascii_uppercase) for _ in range(NAME_LETTERS)))
    shuffled = rng.sample(sorted(names), 2 * keys)
    chain, distractor = shuffled[:keys], shuffled[keys:]
    value, other = rng.sample(range(1, MAX_KEY + 1), 2)
    sentences, placed = [], []
    for names_, start in ((chain, value), (distractor, other)):
        at = sorted(rng.choice(depths) for _ in names_)  # in chain order: each after the one it copies
        for index, name in enumerate(names_):
            source = str(start) if index == 0 else f"VAR {names_[index - 1]}"
            sentences.append((at[index], f"VAR {name} = {source}. "))
        placed.append(at)
    question = QUESTION.format(value=value)
    answer = " ".join(chain) + "."
    mask = np.array([c != " " for c in answer])  # (A,): the letters and the stop; the spaces are given
    if length - len(question) - len(answer) < sum(len(text) for _, text in sentences):
        raise PoscliError(
            f"a variable-tracking context with chains of {keys} needs more than {length} tokens; use longer "
            "--lengths or fewer --keys"
        )
    return fill(length - len(answer), sentences, question=question), answer, mask, placed[0]


@register("variables")
class Variables(MultiQuery):
    summary = "RULER's variable tracking in the filler: the names a value was passed along, by depth and length"
    citation = "Hsieh et al., 2024"
    default_table = "variables"
    scored = "each variable of the chain"

    def context(self, length: int, keys: int, depths: list[float], rng: random.Random):
        return variables_context(length, keys, depths, rng)
