"""``--task multivalue``: RULER's multi-value needle (Hsieh et al., 2024, niah_multivalue): one key
name holds V values hidden at random depths of the filler, and the model must return all of them.

The prompt is the compact passkey format (``poscli.data.passkey``) with V sentences ``The <name>
pass key is <value>.`` under one name and the question ``What are all the <name> pass keys? The
<name> pass keys are``; the answer is ``v1, v2, ..., vV.`` in the order the values appear. Scoring
is teacher-forced, as passkey's (one forward pass over the prompt and the answer): a value is
*recalled* when each of its digits is the argmax given the true answer before it, and a prompt is
*exact* when every answer token is (digits, separators, the stop), which is what greedy decoding
would return. RULER scores recall as the share of values present in free generation, in any order;
the order here is fixed so one forward pass scores it. ``--keys V`` sets the values per prompt
(default 4, RULER's), ``--trials`` the prompts per length; the prompts are the same for every run
(seeded by length and V). Byte-level runs only (a BPE may merge a value's digits).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np

from poscli.data.passkey import FILLER, MAX_KEY, NAMES
from poscli.errors import PoscliError
from poscli.evaluation.tasks import register
from poscli.evaluation.tasks.base import Task, lengths_done

DEFAULT_VALUES = 4  # RULER's num_values for niah_multivalue
COLUMNS = ["run", "label", "pe", "train_length", "values", "length", "trials", "exact", "accuracy", "ci_low",
           "ci_high", "recall", "note"]  # fmt: skip
KEY_SENTENCE, QUESTION = (
    "The {name} pass key is {value}. ",
    "What are all the {name} pass keys? The {name} pass keys are ",
)


def multivalue_prompt(length: int, values: int, rng: random.Random) -> tuple[str, str]:
    """A prompt of exactly ``length`` bytes (the answer excluded) with ``values`` distinct values under
    one random name, each at a random depth of the filler moved back to a sentence boundary; and
    its answer, the values in the order they appear, comma-separated, ending in a full stop."""
    name = rng.choice(NAMES)
    drawn = rng.sample(range(1, MAX_KEY + 1), values)
    depths = sorted(rng.uniform(0, 100) for _ in drawn)
    sentences = [KEY_SENTENCE.format(name=name, value=value) for value in drawn]
    question = QUESTION.format(name=name)
    filler_length = length - sum(map(len, sentences)) - len(question)
    if filler_length < 0:
        raise PoscliError(f"a multi-value prompt with {values} values needs at least {length - filler_length} tokens")
    filler = (FILLER * (filler_length // len(FILLER) + 1))[:filler_length]
    prompt, previous = "", 0
    for depth, sentence in zip(depths, sentences):
        cut = round(filler_length * depth / 100)
        boundary = filler.rfind(". ", previous, cut + 1)
        cut = previous if boundary < 0 or cut == 0 else boundary + 2
        prompt += filler[previous:cut] + sentence
        previous = cut
    prompt += filler[previous:] + question
    assert len(prompt) == length, (len(prompt), length)
    return prompt, ", ".join(map(str, drawn)) + "."


def score(model, prompts: list[str], answers: list[str], device) -> tuple[np.ndarray, np.ndarray]:
    """Teacher-forced scores: per prompt, exact (every answer token is the argmax given the true
    ones before it) and recall (the share of values whose every digit is). -> (B,) bool, (B,) float."""
    import torch

    from poscli.data.tokens import encode

    exact, recall = np.zeros(len(prompts), bool), np.zeros(len(prompts))
    for row, (prompt, answer) in enumerate(zip(prompts, answers)):
        tokens = torch.from_numpy(encode(prompt + answer).astype(np.int64))[None]  # (1, P + A)
        with torch.inference_mode():
            best = model(tokens.to(device))[0, len(prompt) - 1 : -1].argmax(-1).cpu().numpy()  # (A,) predictions
        hits = best == encode(answer)  # (A,)
        exact[row] = bool(hits.all())
        starts = [0] + [i + 2 for i, c in enumerate(answer) if c == ","]  # each value's first digit
        recall[row] = np.mean([hits[s : s + len(v)].all() for s, v in zip(starts, answer.rstrip(".").split(", "))])
    return exact, recall


def multivalue_markdown(table) -> str:
    """Per run and V, at each length: exact match [95% Wilson] and recall."""
    from poscli.evaluation.tables import pivot_markdown

    lines = pivot_markdown(table, "run", {"run": lambda r: r["run"], "values": lambda r: r["values"]}, _cell)
    return "Exact match [95% Wilson], recall: share of values (`--task multivalue`).\n\n" + "\n".join(lines) + "\n"


def _cell(part) -> str:
    """A markdown cell: exact match [95% Wilson], recall."""
    row = part.iloc[0]
    return f"{row['accuracy']:.2f} [{row['ci_low']:.2f}, {row['ci_high']:.2f}], recall {row['recall']:.2f}"


@register("multivalue")
class MultiValue(Task):
    summary = "RULER's multi-value needle: every value hidden under one key, exact match and recall by length"
    citation = "Hsieh et al., 2024"
    default_table = "multivalue"
    reads = ("trials", "keys")

    def check(self, options: dict[str, Any]) -> None:
        values = DEFAULT_VALUES if options["keys"] is None else options["keys"]
        if values < 1 or options["trials"] < 1:
            flag, given = ("--keys", values) if values < 1 else ("--trials", options["trials"])
            raise PoscliError(f"{flag} must be at least 1 for --task multivalue, got {given}")

    def evaluate(self, run_names: list[str], options: dict[str, Any], results, progress, table: str):
        from poscli.core.device import select_device
        from poscli.model import runs

        self.check(options)
        values = DEFAULT_VALUES if options["keys"] is None else options["keys"]
        trials = options["trials"]
        device = select_device(options["device"])
        rows = []
        for name in run_names:
            model, config = self.load_byte_run(name, results, device)
            train_length = config["model"]["train_length"]
            lengths = options["lengths"] or [train_length, 4 * train_length]
            task = progress.add_task(f"multivalue {name}", total=len(lengths)) if progress else None
            for length in lengths:
                row = {"run": config["name"], "label": runs.run_label(config), "pe": config["model"]["pe"],
                       "train_length": train_length, "values": values, "length": length, "trials": trials}  # fmt: skip
                rows.append(row | self.cell(model, length, values, trials, device))
                if progress:
                    progress.advance(task)
        return rows

    @staticmethod
    def cell(model, length: int, values: int, trials: int, device) -> dict[str, Any]:
        """One (length, V) cell: ``trials`` prompts (the same for every run), exact match with its Wilson
        interval and recall; n/a where the run has no positions that far (a learned table)."""
        from poscli.errors import NotApplicable
        from poscli.evaluation.stats import wilson_interval

        rng = random.Random(f"multivalue-{values}-{length}")
        prompts = [multivalue_prompt(length - len(f"{MAX_KEY}, ") * values, values, rng) for _ in range(trials)]
        try:
            exact, recall = score(model, [p for p, _ in prompts], [a for _, a in prompts], device)
        except NotApplicable as reason:
            nan = float("nan")
            return {"exact": 0, "accuracy": nan, "ci_low": nan, "ci_high": nan, "recall": nan, "note": f"n/a: {reason}"}
        low, high = wilson_interval(int(exact.sum()), trials)
        return {"exact": int(exact.sum()), "accuracy": round(float(exact.mean()), 4), "ci_low": round(low, 4),
                "ci_high": round(high, 4), "recall": round(float(recall.mean()), 4), "note": ""}  # fmt: skip

    def write(self, result, options: dict[str, Any], results, table: str):
        return self.write_rows(result, results, table, COLUMNS, ["run", "values", "length"], multivalue_markdown)

    def owns(self, data) -> bool:
        return {"values", "recall"} <= set(data.columns)

    def evaluated(self, rows, run: str, options: dict[str, Any]) -> bool:
        values = DEFAULT_VALUES if options.get("keys") is None else options["keys"]
        return lengths_done(rows[(rows["run"] == run) & (rows["values"] == values)], options)

    def seed_summary(self, rows, groups, options: dict[str, Any], folder: Path, table: str, min_runs: int):
        return None, ""  # one table per run; a summary over seeds is not written yet

    def plots(self, data, folder: Path, table: str) -> list[Path]:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        figure, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
        for run, part in data.sort_values("length").groupby("run"):
            axes[0].errorbar(part["length"], part["accuracy"], yerr=[part["accuracy"] - part["ci_low"],
                             part["ci_high"] - part["accuracy"]], marker="o", capsize=3, label=run)  # fmt: skip
            axes[1].plot(part["length"], part["recall"], marker="o", label=run)
        for axis, title in zip(axes, ("exact match (95% Wilson)", "recall (share of values)")):
            axis.set(xscale="log", xlabel="length (tokens)", title=title, ylim=(-0.05, 1.05))
        axes[0].legend(fontsize=8)
        path = Path(folder) / f"{table}.png"
        figure.savefig(path, dpi=120, bbox_inches="tight")
        plt.close(figure)
        return [path]
