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

from poscli.data.tokens import encode
from poscli.errors import PoscliError
from poscli.evaluation import tasks
from poscli.evaluation.algorithmic import AlgorithmicTask, parse_sizes

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
        longest = plan.longest()
        if longest > model_config.train_length + 1:
            raise PoscliError(
                f"--task {name} at size {plan.sizes[-1]} makes instances of up to {longest} tokens; use --train-length "
                f"{longest - 1} or more, or smaller --sizes"
            )
        return plan

    def longest(self) -> int:
        """The most tokens an instance of the largest training size takes (prompt and answer)."""
        rng = random.Random(f"{self.task.name}-longest")
        return max(sum(map(len, self.task.example(self.sizes[-1], rng))) for _ in range(LONGEST_SAMPLE))

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
            scored[row, (len(prompt) - 1 if self.answer_only else 0) : len(text) - 1] = True
        weights = scored * (scored.numel() / scored.sum())  # (B, T)
        return window[:, :-1].to(device), window[:, 1:].to(device), weights.to(device)

    def accuracy(self, model, device, trials: int = 50) -> dict:
        """Exact match pooled over the training sizes (``trials`` instances each, the evaluation's)."""
        from poscli.evaluation.algorithmic import score
        from poscli.evaluation.stats import wilson_interval

        exact = np.concatenate([score(model, self.task.examples(size, trials), device)[0] for size in self.sizes])
        low, high = wilson_interval(int(exact.sum()), len(exact))
        return {"task": self.task.name, "sizes": ",".join(map(str, self.sizes)), "instances": len(exact),
                "exact": round(float(exact.mean()), 4), "ci_low": round(low, 4), "ci_high": round(high, 4)}  # fmt: skip


def trainable() -> list[str]:
    """The tasks a run can train on: the algorithmic ones."""
    return [name for name in tasks.REGISTRY.builtin_names() if isinstance(tasks.get(name), AlgorithmicTask)]
