"""Algorithmic tasks with an instance size: what the length-generalization studies train a small
model to master at small sizes and then test at larger ones (Kazemnejad et al., 2023: copy,
reverse, addition, sorting, parity, ...; Ruoss et al., 2023: the Chomsky-hierarchy tasks).

A task of this kind is one file in ``poscli/evaluation/tasks/``, a subclass of
:class:`AlgorithmicTask` that defines ``instance(size, rng) -> (question, answer)``: printable
ASCII strings, one byte a token. The prompt is ``question=`` and the answer ``answer.``: the model
reads the question and ``=``, and must write the answer and the full stop. Scoring is
teacher-forced, as passkey's: an instance is *exact* when every answer token (the full stop
included) is the argmax given the true answer before it, which is what greedy decoding would
return; ``token_accuracy`` is the share of answer tokens that are. ``--sizes 1-64`` (or ``1,2,4,8``)
are the sizes evaluated, ``--trials`` the instances per size; the instances are the same for every
run (seeded by task, size and trial). poscli's byte-level runs, and ``hf:`` models in their own
tokenizer (prompt and answer encoded apart, the answer scored in the model's tokens, after the start
token the tokenizer adds; ``poscli.model.pretrained``). Shape legend: B instances, T tokens.
"""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from poscli.errors import PoscliError
from poscli.evaluation.generalization import MASTERY
from poscli.evaluation.tasks.base import Task

PROMPT_END, ANSWER_END = "=", "."
COLUMNS = ["run", "label", "pe", "parameters", "seed", "task", "trained_sizes", "size", "in_distribution", "tokens",
           "trials", "exact", "accuracy", "ci_low", "ci_high", "token_accuracy", "note"]  # fmt: skip
SIZES = re.compile(r"^\s*(\d+)\s*-\s*(\d+)\s*$")
MAX_SIZE = 65536  # the largest instance size: longer than any length poscli scores on a CPU
LETTERS = "abcdefghij"  # the alphabet of the string tasks (copy, reverse, duplicate, sort)


def letters(size: int, rng: random.Random) -> str:
    """A string of ``size`` letters drawn from LETTERS."""
    return "".join(rng.choice(LETTERS) for _ in range(size))


def parse_sizes(text: str, flag: str = "--sizes") -> list[int]:
    """``1-16`` (every size from 1 to 16) or ``1,2,4,8``: positive sizes, ascending, no repeats."""
    text = str(text)
    span = SIZES.match(text)
    try:
        bounds = [int(span[1]), int(span[2])] if span else [int(part) for part in text.split(",")]
    except ValueError:
        bounds = []
    if bounds and max(bounds) > MAX_SIZE:  # checked before a range is built: 1-9999999999 would fill the memory
        raise PoscliError(f"{flag} {text!r}: sizes go up to {MAX_SIZE} (an instance of N symbols needs over N tokens)")
    sizes = list(range(bounds[0], bounds[1] + 1)) if span and bounds else bounds
    if not sizes or min(sizes) < 1 or len(set(sizes)) != len(sizes):
        raise PoscliError(f"{flag} {text!r}: give a range of positive sizes such as 1-16, or a list such as 1,2,4,8")
    return sorted(sizes)


class AlgorithmicTask(Task):
    """Base class. A member sets ``summary``, ``citation`` and ``default_sizes`` and defines
    ``instance``; everything else (evaluation, tables, plots, the done-check) is shared."""

    reads = ("sizes", "trials")
    default_sizes: ClassVar[str] = "1-16"

    @property
    def default_table(self) -> str:  # type: ignore[override]
        return self.name

    def instance(self, size: int, rng: random.Random) -> tuple[str, str]:
        """One instance of ``size``: (question, answer), printable ASCII without ``=``."""
        raise NotImplementedError

    def example(self, size: int, rng: random.Random) -> tuple[str, str]:
        """(prompt, answer) as the model reads and writes them: ``question=`` and ``answer.``."""
        question, answer = self.instance(size, rng)
        return question + PROMPT_END, answer + ANSWER_END

    def examples(self, size: int, trials: int) -> list[tuple[str, str]]:
        """The instances of one cell, the same for every run and every call."""
        return [self.example(size, random.Random(f"{self.name}-{size}-{trial}")) for trial in range(trials)]

    def scored(self, answer: str) -> np.ndarray:
        """Which of the answer's tokens (full stop included) the model must write: all of them,
        unless the task gives some, as multi-query recall gives each query before its value.
        -> (A,) bool."""
        return np.ones(len(answer), bool)

    # ----------------------------------------------------------------------- the Task protocol

    def check(self, options: dict[str, Any]) -> None:
        parse_sizes(options.get("sizes") or self.default_sizes)
        if options["trials"] < 1:
            raise PoscliError(f"--trials must be at least 1 for --task {self.name}, got {options['trials']}")

    def evaluate(self, run_names: list[str], options: dict[str, Any], results, progress, table: str):
        from poscli.core.device import select_device
        from poscli.model import runs

        self.check(options)
        sizes = parse_sizes(options.get("sizes") or self.default_sizes)
        trials = options["trials"]
        device = select_device(options["device"])
        rows = []
        for name in run_names:
            model, config, tokenizer = self.load_scorable(name, results, device)
            train = config.get("train", {})  # an hf: model records no training
            own = train.get("task") == self.name  # trained on this task: its sizes are in distribution
            trained = (train.get("task_sizes") or self.default_sizes) if own else None
            scheme = training_scheme(config)
            bar = progress.add_task(f"{self.name} {name}", total=len(sizes)) if progress else None
            for size in sizes:
                row = {"run": config["name"], "label": runs.run_label(config), "pe": config["model"]["pe"],
                       "parameters": int(config.get("parameters") or 0), "seed": train.get("seed", 0),
                       "task": self.name, "trained_sizes": trained or "",
                       "size": size,
                       "in_distribution": bool(trained) and size in parse_sizes(trained), "trials": trials}  # fmt: skip
                rows.append(row | self.cell(model, size, trials, device, tokenizer, scheme))
                if progress:
                    progress.advance(bar)
        return rows

    def load_scorable(self, name: str, results, device):
        """A byte-level run (``load_byte_run``), or an ``hf:`` model and its tokenizer. -> (model,
        config, tokenizer: None for bytes)."""
        from poscli.model import pretrained

        if not pretrained.is_pretrained(name):
            return (*self.load_byte_run(name, results, device), None)
        tokenizer = pretrained.pretrained_tokenizer(name)
        return (*pretrained.load_pretrained(name, str(device), tokenizer), tokenizer)

    def cell(self, model, size: int, trials: int, device, tokenizer=None, scheme=None) -> dict[str, Any]:
        """One size: exact match with its Wilson interval, token accuracy; n/a where the run has no
        positions that far (a learned table). ``tokenizer``: an hf: model's (None: bytes).
        ``scheme``: the run's training position scheme (None: positions 0..T-1), whose
        ``evaluation_positions`` the cell's instances get, drawn from a generator seeded by the cell."""
        from poscli.errors import NotApplicable
        from poscli.evaluation.stats import wilson_interval

        examples = self.examples(size, trials)
        tokens = max(len(prompt) + len(answer) for prompt, answer in examples)
        try:
            exact, token_accuracy = self.exact_match(model, examples, size, device, tokenizer, scheme)
        except NotApplicable as reason:
            nan = float("nan")
            return {"tokens": tokens, "exact": 0, "accuracy": nan, "ci_low": nan, "ci_high": nan,
                    "token_accuracy": nan, "note": f"n/a: {reason}"}  # fmt: skip
        low, high = wilson_interval(int(exact.sum()), trials)
        return {"tokens": tokens, "exact": int(exact.sum()), "accuracy": round(float(exact.mean()), 4),
                "ci_low": round(low, 4), "ci_high": round(high, 4),
                "token_accuracy": round(float(token_accuracy.mean()), 4), "note": ""}  # fmt: skip

    def exact_match(self, model, examples, size: int, device, tokenizer=None, scheme=None):
        """``score`` of one cell's ``examples`` (``self.examples(size, ...)``): only the answer
        tokens the task scores count, at the positions ``scheme`` gives the cell. -> (B,) bool, (B,) float."""
        masks = [self.scored(answer) for _, answer in examples]
        if tokenizer is not None and not all(mask.all() for mask in masks):
            raise PoscliError(f"--task {self.name} scores some characters of each answer: byte-level models only")
        return score(model, examples, device, masks, tokenizer, self.positions(scheme, size, device))

    def positions(self, scheme, size: int, device):
        """The cell's positions as ``score`` takes them: None (0..T-1) without a scheme, else drawn
        by the scheme from a generator seeded by the task and size (the same for every run)."""
        if scheme is None:
            return None
        import zlib

        import torch

        generator = torch.Generator().manual_seed(zlib.crc32(f"{self.name}-{size}-positions".encode()))
        return lambda batch, length: scheme.evaluation_positions(batch, length, generator, device)

    def write(self, result, options: dict[str, Any], results, table: str):
        return self.write_rows(result, results, table, COLUMNS, ["run", "task", "size"], size_markdown)

    def owns(self, data) -> bool:
        return {"task", "size", "token_accuracy"} <= set(data.columns)

    def evaluated(self, rows, run: str, options: dict[str, Any]) -> bool:
        mine = rows[(rows["run"] == run) & (rows["task"] == self.name)]
        return set(parse_sizes(options.get("sizes") or self.default_sizes)) <= set(mine["size"])

    def seed_summary(self, rows, groups, options: dict[str, Any], folder: Path, table: str, min_runs: int):
        from poscli.evaluation.generalization import seed_markdown, seed_summary

        summary = seed_summary(rows, groups, min_runs)
        return (None, "") if summary is None else (summary, seed_markdown(summary))

    def seed_plots(self, summary, folder: Path, table: str) -> list[Path]:
        from poscli.evaluation.generalization import heatmaps

        return heatmaps(summary, folder, table)

    def plots(self, data, folder: Path, table: str) -> list[Path]:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        figure, axis = plt.subplots(figsize=(6, 4))
        for run, part in data.sort_values("size").groupby("run"):
            axis.errorbar(part["size"], part["accuracy"], yerr=[part["accuracy"] - part["ci_low"],
                          part["ci_high"] - part["accuracy"]], marker="o", capsize=3, label=run)  # fmt: skip
        axis.set(xlabel="instance size", ylabel="exact match (95% Wilson)", ylim=(-0.05, 1.05),
                 title=", ".join(sorted(set(data["task"]))))  # fmt: skip
        axis.legend(fontsize=8)
        path = Path(folder) / f"{table}.png"
        figure.savefig(path, dpi=120, bbox_inches="tight")
        plt.close(figure)
        return [path]


def score(
    model,
    examples: list[tuple[str, str]],
    device,
    scored: list[np.ndarray] | None = None,
    tokenizer=None,
    positions=None,
):
    """Teacher-forced scores of (prompt, answer) pairs in one padded batch: per instance, exact (every
    scored answer token is the argmax given the true tokens before it) and the share of scored
    answer tokens that are. ``scored``: per instance, which answer tokens count ((A,) bool; None:
    all). ``tokenizer``: the model's (prompt and answer encoded apart, so the answer's first token
    starts at the answer); None: bytes. ``positions``: a function (B, T) -> the batch's positions
    ((B, T) int64, or None for 0..T-1: ``evaluation_positions``). Right padding changes nothing
    before it (causal attention). -> (B,) bool, (B,) float."""
    import torch

    from poscli.data.tokens import encode

    encoded = [
        [(encode if tokenizer is None else tokenizer.encode)(part).astype(np.int64) for part in pair]
        for pair in examples
    ]  # per instance: prompt (P,), answer (A,)
    texts = [np.concatenate(pair) for pair in encoded]
    tokens = torch.zeros(len(texts), max(map(len, texts)), dtype=torch.long)  # (B, T), padded with token 0
    for row, text in enumerate(texts):
        tokens[row, : len(text)] = torch.from_numpy(text)
    tokens = tokens.to(device)
    with torch.inference_mode():  # positions only where given: an hf: model takes tokens alone
        logits = model(tokens) if positions is None else model(tokens, positions(*tokens.shape))  # (B, T, V)
        best = logits.argmax(-1).cpu().numpy()  # (B, T): the prediction of each next token
    exact, share = np.zeros(len(texts), bool), np.zeros(len(texts))
    for row, ((prompt, _), text) in enumerate(zip(encoded, texts)):
        hits = best[row, len(prompt) - 1 : len(text) - 1] == text[len(prompt) :]  # (A,)
        hits = hits if scored is None else hits[scored[row]]
        exact[row], share[row] = bool(hits.all()), float(hits.mean())
    return exact, share


def training_scheme(config: dict):
    """The training position scheme of a run's config.json (``poscli.extension.positions``), or None:
    positions 0..T-1 (an hf: model, which records no training, included)."""
    if "train" not in config:
        return None
    from poscli.config import ModelConfig, TrainConfig
    from poscli.extension import positions

    return positions.for_training(ModelConfig.from_dict(config["model"]), TrainConfig.from_dict(config["train"]))


def size_markdown(table) -> str:
    """Exact match by size, one row per run, with each run's in-distribution accuracy (pooled over
    its training sizes) and whether it mastered the task (at least 0.95 there)."""
    from poscli.evaluation.stats import wilson_interval

    sizes = sorted(set(table["size"]))
    lines = ["Exact match [95% Wilson] by instance size (`--task`); in distribution: pooled over the run's "
             f"training sizes, 'not mastered' under {MASTERY}.", "",
             "| run | task | in distribution | " + " | ".join(map(str, sizes)) + " |",
             "|---|---|---|" + "---|" * len(sizes)]  # fmt: skip
    for (run, task), part in table.groupby(["run", "task"], sort=True):
        inside = part[part["in_distribution"].astype(bool)]
        if len(inside):
            accuracy = inside["exact"].sum() / inside["trials"].sum()
            low, high = wilson_interval(int(inside["exact"].sum()), int(inside["trials"].sum()))
            mastered = "" if accuracy >= MASTERY else ", not mastered"
            pooled = f"{accuracy:.2f} [{low:.2f}, {high:.2f}]{mastered}"
        else:
            pooled = "not trained on it"
        by_size = part.set_index("size")
        cells = [_cell(by_size.loc[size]) if size in by_size.index else "" for size in sizes]
        lines.append(f"| {run} | {task} | {pooled} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _cell(row) -> str:
    if row["note"]:
        return "n/a"
    return f"{row['accuracy']:.2f} [{row['ci_low']:.2f}, {row['ci_high']:.2f}]"
