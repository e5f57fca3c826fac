"""``poscli train --task NAME --sizes 1-16``: training on an algorithmic task instead of text
(``poscli.evaluation.algorithmic``), as the length-generalization studies train (Kazemnejad et
al., 2023; Ruoss et al., 2023): every sequence of a batch is one instance, its size drawn
uniformly from the training sizes, padded on the right, with the loss on the answer's tokens (the
default) or on all of them. The instances a run trains on come from its seeded generator, so a
resumed run draws the same ones. Shape legend: B batch, T train length.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import torch

from poscli.data.passkey import PasskeyTraining, parse_mix
from poscli.data.tokens import encode
from poscli.errors import PoscliError
from poscli.evaluation import tasks
from poscli.evaluation.algorithmic import AlgorithmicTask, parse_sizes
from poscli.evaluation.stats import wilson_interval

LONGEST_SAMPLE = 256  # instances drawn at the largest size to find the longest one


@dataclass
class TaskTraining:
    task: AlgorithmicTask
    sizes: list[int]
    answer_only: bool = True

    @classmethod
    def plan(cls, train_config, model_config) -> TaskTraining | None:
        """How a run trains on its task (None: it trains on text), after checking that the task can
        be trained on, that it is not mixed with passkey examples and that its longest instance fits
        the train length."""
        if not train_config.task:
            return None
        name = tasks.check_name(train_config.task)
        task = tasks.get(name)
        if not isinstance(task, AlgorithmicTask):
            raise PoscliError(
                f"--task {name} is evaluated, not trained on; train on an algorithmic task ("
                f"{', '.join(trainable())}), or add passkey examples to text with --mix passkey:F"
            )
        if train_config.mix or train_config.data == "passkey" or train_config.tokenizer != "bytes":
            raise PoscliError(
                "--task trains on the task's instances alone, in bytes; drop --mix, --data passkey and --tokenizer"
            )
        plan = cls(task, parse_sizes(train_config.task_sizes or task.default_sizes), train_config.task_loss == "answer")
        check_fits(task, plan.sizes, model_config.train_length, "--task")
        return plan

    def batch(self, batch_size: int, length: int, generator: torch.Generator, device):
        """One step's instances: tokens and targets (B, T), padded on the right with byte 0, and
        the targets' weights (B, T): the answer's (or every instance token's), scaled to mean 1."""
        window = torch.zeros(batch_size, length + 1, dtype=torch.long)  # (B, T + 1)
        scored = torch.zeros(batch_size, length, dtype=torch.bool)  # (B, T): targets in the loss
        for row in range(batch_size):
            size = self.sizes[int(torch.randint(len(self.sizes), (1,), generator=generator))]
            seed = int(torch.randint(0, 2**62, (1,), generator=generator))
            prompt, answer = self.task.example(size, random.Random(seed))
            text = torch.from_numpy(encode(prompt + answer).astype(np.int64))
            if len(text) > length + 1:
                raise PoscliError(
                    f"--task {self.task.name}: an instance of {len(text)} tokens is longer than the train length"
                )
            window[row, : len(text)] = text
            if self.answer_only:  # the targets predicted from len(prompt) - 1 on: the answer, where scored
                scored[row, len(prompt) - 1 : len(text) - 1] = torch.from_numpy(self.task.scored(answer))
            else:
                scored[row, : len(text) - 1] = True
        weights = scored * (scored.numel() / scored.sum())  # (B, T)
        return window[:, :-1].to(device), window[:, 1:].to(device), weights.to(device)


@dataclass(frozen=True)
class TaskMix:
    """``--mix TASK:F``: a fraction F of the text training sequences end in one instance of an
    algorithmic task (its size drawn from ``--sizes``), after corpus text, as ``--mix passkey:F``
    adds passkey examples; ``--answer-loss W`` adds W times the answers' mean loss. The same
    interface as ``poscli.data.passkey.PasskeyTraining`` (``fraction``, ``answer_weight``,
    ``example``), so ``sample_batch`` places either."""

    task: AlgorithmicTask
    sizes: tuple[int, ...]
    fraction: float
    answer_weight: float = 0.0

    @classmethod
    def plan(cls, train_config, model_config) -> TaskMix | None:
        """The task mixed into a text run (None: passkey or nothing is), after checking that it is a
        trainable task, the run is byte-level, and its largest instance fits the train length."""
        name, fraction = parse_mix(train_config.mix)
        if name in ("", "passkey") or train_config.data == "passkey":
            return None
        if name not in trainable():
            raise PoscliError(
                f"--mix {train_config.mix!r}: mix in passkey or an algorithmic task ({', '.join(trainable())}), "
                "e.g. --mix passkey:0.2 or --mix copy:0.2"
            )
        if train_config.tokenizer != "bytes":
            raise PoscliError(f"--mix {name}:F adds byte-level instances; drop --tokenizer {train_config.tokenizer}")
        task = tasks.get(name)
        sizes = tuple(parse_sizes(train_config.task_sizes or task.default_sizes))
        check_fits(task, list(sizes), model_config.train_length, "--mix")
        return cls(task, sizes, fraction, train_config.answer_loss)

    def example(self, length: int, rng: random.Random) -> tuple[np.ndarray, int]:
        """One instance (at most ``length`` tokens: ``check_fits``) and the index of its answer's first token."""
        prompt, answer = self.task.example(rng.choice(self.sizes), rng)
        return encode(prompt + answer), len(prompt)


def training_mix(train_config, model_config, tokenizer=None) -> TaskTraining | TaskMix | PasskeyTraining:
    """What a run trains on besides (or instead of) corpus text, checked: a task's instances alone
    (``--task``), a task's instances mixed into text (``--mix TASK:F``), or passkey examples
    (``--mix passkey:F``, ``--data passkey``; fraction 0: plain text)."""
    return (
        TaskTraining.plan(train_config, model_config)
        or TaskMix.plan(train_config, model_config)
        or PasskeyTraining.plan(train_config, model_config, tokenizer)
    )


def check_fits(task: AlgorithmicTask, sizes: list[int], train_length: int, flag: str) -> None:
    """An instance of the largest size must fit a training sequence (train length + 1 tokens)."""
    rng = random.Random(f"{task.name}-longest")
    longest = max(sum(map(len, task.example(max(sizes), rng))) for _ in range(LONGEST_SAMPLE))
    if longest > train_length + 1:
        raise PoscliError(
            f"{flag} {task.name} at size {max(sizes)} makes instances of up to {longest} tokens; use --train-length "
            f"{longest - 1} or more, or smaller --sizes"
        )


def task_accuracy(task: AlgorithmicTask, sizes, model, device, trials: int = 50, scheme=None) -> dict:
    """Exact match pooled over ``sizes`` (``trials`` instances each, the evaluation's, at the
    evaluation's positions: ``scheme``, the run's training position scheme), with its Wilson
    interval: what a run that trained on the task records as ``task_accuracy``."""
    exact = np.concatenate(
        [task.exact_match(model, task.examples(size, trials), size, device, scheme=scheme)[0] for size in sizes]
    )
    low, high = wilson_interval(int(exact.sum()), len(exact))
    return {"task": task.name, "sizes": ",".join(map(str, sizes)), "instances": len(exact),
            "exact": round(float(exact.mean()), 4), "ci_low": round(low, 4), "ci_high": round(high, 4)}  # fmt: skip


def trainable() -> list[str]:
    """The tasks a run can train on: the algorithmic ones."""
    return [name for name in tasks.REGISTRY.builtin_names() if isinstance(tasks.get(name), AlgorithmicTask)]
