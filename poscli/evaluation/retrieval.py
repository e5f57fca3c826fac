"""Passkey retrieval as an evaluation: exact match, per-digit accuracy and the answer's mean
log-probability for prompts made by :mod:`poscli.data.passkey`, per (length, depth) cell, with
Wilson intervals, the effective length of each run (RULER, Hsieh et al., 2024), and tables.

Scoring is one teacher-forced forward pass over the prompt and the key's digits. Exact match
is what greedy decoding would give: greedy decoding continues a prompt with the key's digits and
then a non-digit exactly when, given the true prefix, each digit is the argmax and the token
after the last digit is not a digit (``tests/evaluation/test_retrieval.py`` checks the two agree).
"""

from __future__ import annotations

import random

import numpy as np

from poscli.config import DEFAULT_DEPTHS  # noqa: F401 (re-exported)
from poscli.data.passkey import (
    ANSWER_BUDGET,
    check_format,
    check_tokenizer,
    draw_needles,
    make_prompt,
    make_prompt_tokens,
    shortest_prompt_tokens,
)
from poscli.data.tokens import encode
from poscli.errors import PoscliError
from poscli.evaluation.stats import wilson_interval

EFFECTIVE_THRESHOLD = 0.85  # RULER's effective length: the longest length whose accuracy stays at or above this
KEY_DIGITS = 5  # keys are 1..50000: at most five digits


def run_format(config: dict) -> tuple[str, int]:
    """The passkey format a run was trained on (compact with one key for runs that saw no passkey
    examples, or were made before formats were recorded)."""
    train = config.get("train", {})
    return train.get("passkey_template", "compact"), int(train.get("passkey_keys", 1))


def cell_prompts(
    length: int, depth: float, trials: int, template: str = "compact", keys: int = 1, tokenizer=None
) -> tuple[np.ndarray, list[int]]:
    """The prompts of one (length, depth) cell, the same for every run (seeded by the cell and the
    format; the same keys and names in any tokenizer): ``trials`` prompts of ``length - 6`` tokens
    and their keys. -> (trials, length - 6) uint8 (bytes) or int64."""
    rng = random.Random(f"passkey-{template}-{keys}-{length}-{depth}")
    prompts, answers = [], []
    for _ in range(trials):
        needles = draw_needles(rng, depth, keys)
        if tokenizer is None or tokenizer.spec == "bytes":
            prompts.append(encode(make_prompt(length - ANSWER_BUDGET, needles, template)))
        else:
            prompts.append(make_prompt_tokens(length - ANSWER_BUDGET, needles, template, tokenizer))
        answers.append(needles[0].key)
    return np.stack(prompts), answers


def key_starts(prompts, answers: list[int], tokenizer=None) -> np.ndarray:
    """Where the asked key's digits start in each prompt (their last occurrence). -> (B,) int."""
    encoder = encode if tokenizer is None or tokenizer.spec == "bytes" else tokenizer.encode
    starts = []
    for prompt, key in zip(np.asarray(prompts), answers):
        digits = np.asarray(encoder(str(key)), dtype=np.int64)
        matches = np.flatnonzero(
            np.all(np.lib.stride_tricks.sliding_window_view(prompt.astype(np.int64), len(digits)) == digits, axis=1)
        )
        starts.append(int(matches[-1]) if len(matches) else -1)
    return np.array(starts)


def window_floor(prompts, answers: list[int], window: int, tokenizer=None) -> float:
    """The chance floor of a cell: the share of its prompts whose key lies wholly within the last
    ``window`` tokens before the answer, which a model attending only to a local window of that
    size (e.g. its train length) can copy without retrieving from far away."""
    length = np.asarray(prompts).shape[1]
    starts = key_starts(prompts, answers, tokenizer)
    return float(np.mean((starts >= 0) & (starts >= length - window)))


def score_answers(model, prompts, answers: list[int], device=None, tokenizer=None) -> dict[str, np.ndarray]:
    """Teacher-forced scores of each prompt's answer. prompts: (B, P) tokens; answers: B keys.

    Returns per prompt: ``exact`` (greedy decoding would give the key's digits, then a non-digit),
    ``digit_accuracy`` (the fraction of the key's digits that are the argmax given the true digits
    before them) and ``logprob`` (the digits' mean log-probability in nats).
    """
    import torch

    prompts = torch.as_tensor(np.asarray(prompts), dtype=torch.long)  # (B, P)
    B, P = prompts.shape
    device = device or next(model.parameters()).device
    encoder = (
        encode if tokenizer is None or tokenizer.spec == "bytes" else tokenizer.encode
    )  # one token per digit (checked)
    digits = [encoder(str(key)) for key in answers]
    digit_ids = encoder("0123456789")
    tail = torch.full(
        (B, KEY_DIGITS), int(encoder(".")[0]), dtype=torch.long
    )  # (B, 5): digits, then padding never scored
    for row, key in enumerate(digits):
        tail[row, : len(key)] = torch.from_numpy(key.astype(np.int64))
    with torch.inference_mode():
        logits = model(torch.cat([prompts, tail], dim=1).to(device))[
            :, P - 1 :
        ].float()  # (B, 6, V): predictions of answer tokens 0..5
        logprobs = torch.log_softmax(logits, dim=-1).cpu()  # (B, 6, V)
    best = logprobs.argmax(-1).numpy()  # (B, 6)
    exact, digit_accuracy, logprob = np.zeros(B, bool), np.zeros(B), np.zeros(B)
    for row, key in enumerate(digits):
        n = len(key)
        hits = best[row, :n] == key
        exact[row] = hits.all() and best[row, n] not in digit_ids
        digit_accuracy[row] = hits.mean()
        logprob[row] = logprobs[row, torch.arange(n), torch.from_numpy(key.astype(np.int64))].mean().item()
    return {"exact": exact, "digit_accuracy": digit_accuracy, "logprob": logprob}


def score_cell(
    model, length: int, depth: float, trials: int, template: str = "compact", keys: int = 1, device=None, tokenizer=None
) -> dict[str, np.ndarray]:
    """``score_answers`` of one (length, depth) cell's prompts, in batches of at most 32k tokens."""
    prompts, answers = cell_prompts(length, depth, trials, template, keys, tokenizer)
    batch = max(1, 32768 // length)  # prompts per forward pass: bounded memory at any length
    parts = [
        score_answers(model, prompts[i : i + batch], answers[i : i + batch], device, tokenizer)
        for i in range(0, trials, batch)
    ]
    scores = {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}
    scores["prompts"], scores["answers"] = prompts, answers
    return scores


def evaluate_passkey(
    run_names: list[str],
    lengths: list[int] | None,
    depths: list[float],
    trials: int = 50,
    results=None,
    device: str = "auto",
    progress=None,
    keys: int | None = None,
    save=None,
) -> list[dict]:
    """Passkey scores of each run for every (length, depth) cell, on the format the run was trained
    on (``keys`` overrides its number of keys, e.g. to add distractors).

    ``length`` is the whole context: a prompt of ``length - 6`` tokens and room for the answer.
    Every run with the same format sees the same prompts, so runs are comparable. ``save``, if
    given, is called with each run's rows as soon as they are scored (so an interrupted
    evaluation of many runs keeps the runs it finished).
    """
    from poscli.core.device import select_device
    from poscli.model import runs

    device = select_device(device)
    check_passkey_counts(trials, keys)
    from poscli.evaluation.evaluate import load_any

    plans = [_passkey_plan(name, results, lengths, keys) for name in run_names]
    rows = []
    for name, run_lengths, template, run_keys, tokenizer in plans:
        done_before = len(rows)
        model, config = load_any(name, results, str(device), tokenizer)
        for length in run_lengths:
            label = f"passkey {runs.run_label(config)} @ {length}"
            task = progress.add_task(label, total=len(depths) * trials) if progress else None
            for depth in depths:
                cell = (length, depth, trials, template, run_keys)
                rows.append(_passkey_row(model, config, cell, device, tokenizer))
                if progress:
                    progress.advance(task, trials)
        if save is not None:
            save(rows[done_before:])
    return rows


def _passkey_plan(name: str, results, lengths: list[int] | None, keys: int | None) -> tuple:
    """(name, lengths, template, keys, tokenizer) of one run (or ``hf:`` model, in its own tokenizer),
    checked before any model loads."""
    from poscli.evaluation.evalset import default_lengths
    from poscli.evaluation.evaluate import run_parts

    _, config, tokenizer, _ = run_parts(name, results)
    template, run_keys = run_format(config)
    run_keys = keys or run_keys
    check_format(template, run_keys)
    check_tokenizer(tokenizer)
    run_lengths = lengths or default_lengths(config)
    shortest = shortest_prompt_tokens(template, run_keys, tokenizer) + ANSWER_BUDGET
    if min(run_lengths) < shortest:
        raise PoscliError(
            f"a {template} passkey prompt with {run_keys} key(s) needs at least {shortest} tokens; "
            f"got length {min(run_lengths)} (run {config['name']}); choose longer --lengths"
        )
    return name, run_lengths, template, run_keys, tokenizer


def _passkey_row(model, config: dict, cell: tuple, device, tokenizer) -> dict:
    """One (length, depth) cell of one run: accuracy with its Wilson interval, graded scores and the
    floor a local window reaches; n/a with the reason where the model cannot run that length."""
    from poscli.errors import NotApplicable
    from poscli.evaluation.evaluate import null_context
    from poscli.model import runs

    length, depth, trials, template, run_keys = cell
    row = {
        "run": config["name"],
        "label": runs.run_label(config),
        "pe": config["model"]["pe"],
        "train_length": config["model"]["train_length"],
        "parameters": int(config.get("parameters") or 0),
        "template": template,
        "keys": run_keys,
        "length": length,
        "depth": depth,
        "trials": trials,
        "note": "",
    }
    try:
        scores = score_cell(model, length, depth, trials, template, run_keys, device, tokenizer)
    except NotApplicable as reason:
        nan = float("nan")
        row.update(correct=0, accuracy=nan, ci_low=nan, ci_high=nan, digit_accuracy=nan, answer_logprob=nan)
        row["note"] = f"n/a: {reason}"
        return row
    correct = int(scores["exact"].sum())
    low, high = wilson_interval(correct, trials)
    window = null_context(config)
    row.update(
        correct=correct,
        accuracy=correct / trials,
        ci_low=low,
        ci_high=high,
        digit_accuracy=float(scores["digit_accuracy"].mean()),
        answer_logprob=float(scores["logprob"].mean()),
        floor=window_floor(scores["prompts"], scores["answers"], window, tokenizer),
        floor_window=window,
    )
    return row


def greedy_generate(model, prompts, new_tokens: int):
    """Append ``new_tokens`` argmax tokens to each prompt. prompts: (B, T) -> generated (B, new_tokens)."""
    import torch

    tokens = prompts
    with torch.inference_mode():
        for _ in range(new_tokens):
            next_token = model(tokens)[:, -1].argmax(-1, keepdim=True)  # (B, 1)
            tokens = torch.cat([tokens, next_token], dim=1)  # (B, T + 1)
    return tokens[:, prompts.shape[1] :]


def effective_length(accuracy_by_length: dict[int, float], threshold: float = EFFECTIVE_THRESHOLD) -> int:
    """The longest length up to which accuracy stays at or above ``threshold`` at every evaluated
    length (RULER, Hsieh et al., 2024); 0 when the shortest length is already below it."""
    longest = 0
    for length in sorted(accuracy_by_length):
        if not accuracy_by_length[length] >= threshold:  # NaN (no representation) ends it too
            break
        longest = length
    return longest


def pooled_accuracy(cell) -> tuple[int, int]:
    """(correct, trials) over the rows of a table cell (e.g. every depth of one length)."""
    scored = cell[cell["accuracy"].notna()]
    return int(scored["correct"].sum()), int(scored["trials"].sum())


def run_effective_lengths(table, threshold: float = EFFECTIVE_THRESHOLD) -> dict[str, int]:
    """Each run's effective length from its accuracy pooled over depths."""
    lengths = {}
    for run, part in table.groupby("run", sort=False):
        by_length = {}
        for length, cell in part.groupby("length"):
            correct, trials = pooled_accuracy(cell)
            by_length[int(length)] = correct / trials if trials else float("nan")
        lengths[run] = effective_length(by_length, threshold)
    return lengths


def check_passkey_counts(trials: int, keys: int | None) -> None:
    """Prompts per cell and keys per prompt (None: the run's own number) of a passkey evaluation."""
    if trials < 1:
        raise PoscliError(f"--trials must be at least 1, got {trials}")
    if keys is not None and keys < 1:  # was read as "the run's own number of keys"
        raise PoscliError(f"--keys must be at least 1 for --task passkey, got {keys}")


def parse_depths(text: str) -> list[float]:
    """``--depths 0,25,50`` -> [0.0, 25.0, 50.0], each a percentage of the filler."""
    try:
        values = [float(part) for part in text.split(",")]
    except ValueError:
        raise PoscliError(f"--depths {text!r}: use percentages from 0 to 100, e.g. --depths 0,25,50,75,100") from None
    if any(not 0 <= v <= 100 for v in values):
        raise PoscliError(f"--depths {text!r}: every depth must be between 0 and 100, e.g. --depths 0,25,50,75,100")
    return values


# --------------------------------------------------------------------------- over seeds
