"""Time to quality: the minutes a recipe needs before its model beats the 3-gram by a margin.

``make bench`` (``python -m benchmarks.bench``) trains the default-size model (RoPE, 4 x 128) at the
reference studies' train length, 128, on the built-in corpus twice, side by side:

- **poscli's recipe** (``poscli train``'s default: Muon for the blocks' matrices, AdamW for the rest,
  peak lr 8e-3, 100 warmup steps, cosine to lr/10 over the budget; ``recipes/recipe-sweep.toml``);
- **nanoGPT's AdamW recipe for this model size**, its ``config/train_shakespeare_char.py`` on its own
  ``train.py`` (github.com/karpathy/nanoGPT): AdamW with betas (0.9, 0.99), weight decay 0.1 on the
  matrices only (``configure_optimizers``), peak lr 1e-3, 100 warmup steps as ``get_lr`` ramps them
  (``(it + 1) / (warmup + 1)``), cosine to 1e-4 at the last step, gradients clipped at 1.0. Its
  dropout (0.2) is left out: the model is the same for both.

The two train in alternating chunks of steps on the same batches (one generator seed each), so a VM
whose speed drifts slows both alike. Every ``check_every`` steps each model's held-out perplexity at
128 is set beside the context-free 3-gram's on the same tokens; the row gives the training minutes
(evaluation time excluded) and steps at which the ratio first falls to 0.75 and to 0.6.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from poscli.config import ModelConfig, TrainConfig

THRESHOLDS = (0.75, 0.6)


@dataclass(frozen=True)
class NanoGPTRecipe:
    """nanoGPT's ``train_shakespeare_char`` optimisation, as its ``train.py`` runs it."""

    lr: float = 1e-3
    min_lr: float = 1e-4
    warmup: int = 100
    betas: tuple[float, float] = (0.9, 0.99)
    weight_decay: float = 0.1

    def optimizer(self, model: torch.nn.Module) -> torch.optim.AdamW:
        """nanoGPT's ``configure_optimizers``: decay on the parameters of 2 or more dimensions only."""
        parameters = [p for p in model.parameters() if p.requires_grad]
        groups = [
            {"params": [p for p in parameters if p.dim() >= 2], "weight_decay": self.weight_decay},
            {"params": [p for p in parameters if p.dim() < 2], "weight_decay": 0.0},
        ]
        return torch.optim.AdamW(groups, lr=self.lr, betas=self.betas)

    def rate(self, step: int, steps: int) -> float:
        """nanoGPT's ``get_lr`` with ``lr_decay_iters`` = the budget of steps."""
        if step < self.warmup:
            return self.lr * (step + 1) / (self.warmup + 1)
        if step > steps:
            return self.min_lr
        coefficient = 0.5 * (1.0 + math.cos(math.pi * (step - self.warmup) / (steps - self.warmup)))
        return self.min_lr + coefficient * (self.lr - self.min_lr)


@dataclass(frozen=True)
class PoscliRecipe:
    """``poscli train``'s own optimizer and schedule (``poscli.training.optim``) for a ``TrainConfig``."""

    config: TrainConfig

    def optimizer(self, model: torch.nn.Module):
        from poscli.training.optim import make_optimizer

        return make_optimizer(model, self.config)

    def rate(self, step: int, steps: int) -> float:
        from poscli.training.optim import learning_rate

        return learning_rate(step, step / steps, self.config)


def recipes(steps: int) -> dict[str, PoscliRecipe | NanoGPTRecipe]:
    """The recipes side by side, by the name their rows carry."""
    return {
        "poscli: Muon, lr 8e-3": PoscliRecipe(TrainConfig(optimizer="muon", lr=8e-3, warmup_steps=100, steps=steps)),
        "nanoGPT shakespeare_char: AdamW, lr 1e-3": NanoGPTRecipe(),
    }


RECIPES = tuple(recipes(1))  # the row names


@dataclass
class QualityPlan:
    model: ModelConfig = field(default_factory=lambda: ModelConfig(pe="rope", train_length=128))
    data: str = "stdlib"
    batch_size: int = 16
    steps: int = 2500
    chunk: int = 50  # steps of one recipe before the other takes its turn
    check_every: int = 50
    eval_tokens: int = 32768

    @classmethod
    def quick(cls, data: str) -> QualityPlan:
        return cls(
            ModelConfig(pe="rope", n_layer=1, n_head=4, d_model=32, train_length=32),
            data=data,
            batch_size=4,
            steps=20,
            chunk=5,
            check_every=10,
            eval_tokens=1024,
        )


def time_to_quality(plan: QualityPlan, log=print) -> list[dict]:
    """One row per recipe and threshold: minutes and steps to reach it (NaN: not within ``plan.steps``)."""
    from poscli.data.corpus import load_corpus
    from poscli.data.tokenizer import ByteTokenizer
    from poscli.evaluation.evalset import build_eval_set
    from poscli.evaluation.evaluate import perplexity
    from poscli.evaluation.reference import NGram

    corpus = load_corpus(plan.data).tokenized(ByteTokenizer())
    stream = torch.from_numpy(corpus.train_tokens())
    length = plan.model.train_length
    eval_set = build_eval_set(corpus, length, plan.eval_tokens)
    ngram = NGram.fit(corpus.train_tokens())
    reference = math.exp(
        sum(float(ngram.token_losses(span).sum()) for span in eval_set.spans)
        / (eval_set.num_spans * eval_set.span_length)
    )
    device = torch.device("cpu")
    trainers = {name: Trainer.start(recipe, plan) for name, recipe in recipes(plan.steps).items()}
    for first in range(0, plan.steps, plan.chunk):
        last = min(first + plan.chunk, plan.steps)
        for name, trainer in trainers.items():
            trainer.train(range(first, last), stream, plan, device)
            if last % plan.check_every == 0 or last == plan.steps:
                trainer.check(perplexity(trainer.model, eval_set, length, device)["ppl"] / reference, last)
                log(
                    f"time to quality: {name}, step {last}: {trainer.ratio:.3f}x the 3-gram after "
                    f"{trainer.seconds / 60:.1f} min"
                )
    rows = []
    for name, trainer in trainers.items():
        for threshold in THRESHOLDS:
            minutes, steps = trainer.reached.get(threshold, (float("nan"), None))
            rows.append(
                {
                    "recipe": name,
                    "threshold": threshold,
                    "minutes": round(minutes, 2) if not np.isnan(minutes) else minutes,
                    "steps": steps,
                    "budget_steps": plan.steps,
                    "budget_minutes": round(trainer.seconds / 60, 2),
                    "final_ratio": round(trainer.ratio, 4),
                    "reference_ppl": round(reference, 4),
                }
            )
    return rows


@dataclass
class Trainer:
    """One recipe's model, optimizer and batches, and the minutes and steps at which it reached each threshold."""

    recipe: PoscliRecipe | NanoGPTRecipe
    model: torch.nn.Module
    optimizer: object
    generator: torch.Generator
    seconds: float = 0.0
    ratio: float = float("nan")
    reached: dict = field(default_factory=dict)

    @classmethod
    def start(cls, recipe: PoscliRecipe | NanoGPTRecipe, plan: QualityPlan) -> Trainer:
        from poscli.model.gpt import GPT

        torch.manual_seed(0)  # the same initial weights for every recipe
        model = GPT(plan.model)
        return cls(recipe, model, recipe.optimizer(model), torch.Generator().manual_seed(0))

    def train(self, steps: range, stream: torch.Tensor, plan: QualityPlan, device: torch.device) -> None:
        """Train over ``steps`` (the same batches as every other recipe: one seeded generator each)."""
        from poscli.training.batches import sample_batch
        from poscli.training.train import training_step

        self.model.train()
        start = time.perf_counter()
        for step in steps:
            for group in self.optimizer.param_groups:
                group["lr"] = self.recipe.rate(step, plan.steps)
            tokens, targets, _ = sample_batch(stream, plan.batch_size, plan.model.train_length, self.generator, device)
            training_step(self.model, self.optimizer, tokens, targets, grad_clip=1.0)
        self.seconds += time.perf_counter() - start
        self.model.eval()

    def check(self, ratio: float, step: int) -> None:
        """Record the held-out ratio to the 3-gram after ``step`` steps, and each threshold it reaches first."""
        self.ratio = ratio
        for threshold in THRESHOLDS:
            if ratio <= threshold and threshold not in self.reached:
                self.reached[threshold] = (self.seconds / 60, step)


def speedup_sentence(rows: list[dict], aim: float = 1.5) -> str:
    """How much sooner poscli's recipe reached the strictest threshold than nanoGPT's, in minutes and
    steps, against issue 66's aim; or which of them did not reach it within the budget."""
    strict = min(THRESHOLDS)
    at = {row["recipe"]: row for row in rows if row["threshold"] == strict}
    ours, theirs = (at.get(name) for name in RECIPES)
    if ours is None or theirs is None:
        return ""
    missed = [name for name, row in zip(RECIPES, (ours, theirs), strict=True) if np.isnan(row["minutes"])]
    if missed:
        return f"Not reached within the budget at {strict}x the 3-gram: {', '.join(missed)}; no speed-up is stated."
    minutes, steps = theirs["minutes"] / ours["minutes"], theirs["steps"] / ours["steps"]
    verdict = "met" if minutes >= aim else "not met"
    return (
        f"At {strict}x the 3-gram, {RECIPES[0]} took {ours['minutes']:.2f} min ({ours['steps']} steps) and "
        f"{RECIPES[1]} {theirs['minutes']:.2f} min ({theirs['steps']} steps): {minutes:.2f}x sooner in time, "
        f"{steps:.2f}x in steps (issue 66's aim: {aim}x in time, {verdict})."
    )
