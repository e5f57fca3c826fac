"""Time to quality: the minutes a recipe needs before its model beats the 3-gram by a margin.

``make bench`` (``python -m benchmarks.bench``) trains the default-size model (RoPE, 4 x 128) at the
reference studies' train length, 128, on the built-in corpus twice, side by side: with the old
reference recipe (AdamW, peak lr 1e-3) and with the tuned one (Muon for the blocks' matrices, peak
lr 8e-3; ``recipes/recipe-sweep.toml``), both with 100 warmup steps and a cosine over the same
``steps``. The two train in alternating chunks of steps on the same batches, so a VM whose speed
drifts slows both alike. Every ``check_every`` steps each model's held-out perplexity at 128 is
set beside the context-free 3-gram's on the same tokens; the row gives the training minutes
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
RECIPES = {  # name -> TrainConfig fields
    "before: AdamW, lr 1e-3": {"optimizer": "adamw", "lr": 1e-3, "warmup_steps": 100},
    "after: Muon, lr 8e-3": {"optimizer": "muon", "lr": 8e-3, "warmup_steps": 100},
}


@dataclass
class QualityPlan:
    model: ModelConfig = field(default_factory=lambda: ModelConfig(pe="rope", train_length=128))
    data: str = "stdlib"
    batch_size: int = 16
    steps: int = 2500
    chunk: int = 50  # steps of one recipe before the other takes its turn
    check_every: int = 100
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
    from poscli.model.gpt import GPT
    from poscli.training.batches import sample_batch
    from poscli.training.optim import learning_rate, make_optimizer
    from poscli.training.train import training_step

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
    trainers = {}
    for name, fields in RECIPES.items():
        torch.manual_seed(0)
        model = GPT(plan.model)
        config = TrainConfig(batch_size=plan.batch_size, steps=plan.steps, **fields)
        trainers[name] = {
            "model": model,
            "optimizer": make_optimizer(model, config),
            "config": config,
            "generator": torch.Generator().manual_seed(0),
            "seconds": 0.0,
            "reached": {},
            "ratio": float("nan"),
        }
    for first in range(0, plan.steps, plan.chunk):
        last = min(first + plan.chunk, plan.steps)
        for name, t in trainers.items():
            t["model"].train()
            start = time.perf_counter()
            for step in range(first, last):
                lr = learning_rate(step, step / plan.steps, t["config"])
                for group in t["optimizer"].param_groups:
                    group["lr"] = lr
                tokens, targets, _ = sample_batch(stream, plan.batch_size, length, t["generator"], device)
                training_step(t["model"], t["optimizer"], tokens, targets, grad_clip=1.0)
            t["seconds"] += time.perf_counter() - start
            if last % plan.check_every == 0 or last == plan.steps:
                t["model"].eval()
                t["ratio"] = perplexity(t["model"], eval_set, length, device)["ppl"] / reference
                for threshold in THRESHOLDS:
                    if t["ratio"] <= threshold and threshold not in t["reached"]:
                        t["reached"][threshold] = (t["seconds"] / 60, last)
                log(
                    f"time to quality: {name}, step {last}: {t['ratio']:.3f}x the 3-gram after {t['seconds'] / 60:.1f} "
                    "min"
                )
    rows = []
    for name, t in trainers.items():
        for threshold in THRESHOLDS:
            minutes, steps = t["reached"].get(threshold, (float("nan"), None))
            rows.append(
                {
                    "recipe": name,
                    "threshold": threshold,
                    "minutes": round(minutes, 2) if not np.isnan(minutes) else minutes,
                    "steps": steps,
                    "budget_steps": plan.steps,
                    "budget_minutes": round(t["seconds"] / 60, 2),
                    "final_ratio": round(t["ratio"], 4),
                    "reference_ppl": round(reference, 4),
                }
            )
    return rows
