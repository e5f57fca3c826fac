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

from poscli.data import encode
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


def wilson_interval(correct: int, trials: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval for a binomial proportion (sound at 0 and at 1, unlike +-SE)."""
    if trials == 0:
        return (float("nan"), float("nan"))
    p = correct / trials
    denominator = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denominator
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denominator
    return (max(0.0, centre - half), min(1.0, centre + half))


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


PASSKEY_COLUMNS = ["run", "label", "pe", "train_length", "length", "depth", "trials", "correct", "accuracy", "ci_low", "ci_high", "note"]


def evaluate_passkey(
    run_names: list[str],
    lengths: list[int] | None,
    depths: list[float],
    trials: int = 20,
    results=None,
    device: str = "auto",
    progress=None,
) -> list[dict]:
    """Greedy-decoding passkey accuracy of each run for every (length, depth) cell.

    ``length`` is the whole context: a prompt of ``length - 6`` tokens and 6 generated ones.
    Every run sees the same prompts (keys and depths seeded by cell), so runs are comparable.
    """
    import torch

    from poscli import runs
    from poscli.device import select_device
    from poscli.errors import NotApplicable
    from poscli.evaluate import default_lengths

    device = select_device(device)
    if trials < 1:
        raise PoscliError(f"--trials must be at least 1, got {trials}")
    plans = []
    for name in run_names:
        folder = runs.find_run(name, results)
        config = runs.read_config(folder)
        run_lengths = lengths or default_lengths(config)
        for length in run_lengths:
            make_prompt(length - ANSWER_BUDGET, 0, MAX_KEY)  # too-short lengths fail before any work
        plans.append((folder, run_lengths))

    rows = []
    for folder, run_lengths in plans:
        model, config = runs.load_model(folder, str(device))
        for length in run_lengths:
            task = progress.add_task(f"passkey {runs.run_label(config)} @ {length}", total=len(depths) * trials) if progress else None
            for depth in depths:
                rng = random.Random(f"passkey-{length}-{depth}")
                keys = [rng.randint(1, MAX_KEY) for _ in range(trials)]
                prompts = np.stack([encode(make_prompt(length - ANSWER_BUDGET, depth, key)) for key in keys])
                row = {
                    "run": config["name"], "label": runs.run_label(config), "pe": config["model"]["pe"],
                    "train_length": config["model"]["train_length"], "length": length, "depth": depth, "trials": trials, "note": "",
                }
                try:
                    generated = greedy_generate(model, torch.from_numpy(prompts).to(device=device, dtype=torch.long), ANSWER_BUDGET)
                    correct = sum(is_correct(bytes(g).decode("utf-8", "replace"), key) for g, key in zip(generated.tolist(), keys))
                    low, high = wilson_interval(correct, trials)
                    row.update(correct=correct, accuracy=correct / trials, ci_low=low, ci_high=high)
                except NotApplicable as reason:
                    row.update(correct=0, accuracy=float("nan"), ci_low=float("nan"), ci_high=float("nan"), note=f"n/a: {reason}")
                rows.append(row)
                if progress:
                    progress.advance(task, trials)
    return rows


def greedy_generate(model, prompts, new_tokens: int):
    """Append ``new_tokens`` argmax tokens to each prompt. prompts: (B, T) -> generated (B, new_tokens)."""
    import torch

    tokens = prompts
    with torch.inference_mode():
        for _ in range(new_tokens):
            next_token = model(tokens)[:, -1].argmax(-1, keepdim=True)  # (B, 1)
            tokens = torch.cat([tokens, next_token], dim=1)  # (B, T + 1)
    return tokens[:, prompts.shape[1] :]


def write_passkey_tables(rows: list[dict], results=None, table: str = "passkey") -> list:
    """Merge into RESULTS/TABLE.csv, write the accuracy-versus-length table RESULTS/TABLE.md and
    one heatmap per run, RESULTS/TABLE-RUN.png."""
    from poscli import runs
    from poscli.evaluate import merge_rows
    from poscli.io import atomic_write, locked
    from poscli.plots import draw_plots

    folder = runs.results_dir(results)
    folder.mkdir(parents=True, exist_ok=True)
    with locked(folder / table):  # concurrent evaluations take turns
        combined = merge_rows(folder / f"{table}.csv", rows, PASSKEY_COLUMNS, ["run", "length", "depth"])
        with atomic_write(folder / f"{table}.md") as handle:
            handle.write(passkey_markdown(combined))
        return [folder / f"{table}.csv", folder / f"{table}.md", *draw_plots(folder, table)]


def passkey_markdown(table) -> str:
    """Accuracy versus length per run (all depths pooled), with 95% Wilson intervals."""
    lengths = sorted(table["length"].unique())
    lines = [
        "Passkey retrieval: exact-match accuracy over all depths at each length, with its 95% Wilson interval. "
        "`n/a`: the encoding has no representation at that length.\n",
        "| run | pe | train length | " + " | ".join(str(n) for n in lengths) + " |",
        "|---|---|---|" + "---|" * len(lengths),
    ]
    for run, part in table.groupby("run", sort=True):
        cells = []
        for length in lengths:
            cell = part[part["length"] == length]
            if cell.empty:
                cells.append("")
            elif cell["accuracy"].isna().all():
                cells.append("n/a")
            else:
                correct, trials = int(cell["correct"].sum()), int(cell["trials"].sum())
                low, high = wilson_interval(correct, trials)
                cells.append(f"{correct / trials:.2f} [{low:.2f}, {high:.2f}]")
        first = part.iloc[0]
        lines.append(f"| {first['label']} | {first['pe']} | {first['train_length']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
