"""Two-pair associative recall, poscli's GPT beside a plain PyTorch transformer on the same batches.

    python tools/recall_reference.py     # about 2.5 minutes on 2 cores

The reference check behind ``--init-std`` (docs/results.md, "Length generalization on algorithmic
tasks"): the batches are poscli's own (``TaskTraining.batch``, two pairs, the values scored), the
optimizer AdamW 1e-3 for 1500 steps. The reference is ``nn.TransformerEncoder`` with a causal mask,
learned positions and PyTorch's default initialisation; poscli's GPT runs at GPT-2's std 0.02 (RoPE
and a learned table) and at std 0.08. Prints each model's loss every 250 steps and its exact match
(both values right) on 500 held-out instances.
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F
from torch import nn

from poscli.config import ModelConfig, TrainConfig
from poscli.model.gpt import GPT
from poscli.training.tasks import TaskTraining

LENGTH, WIDTH, STEPS = 10, 64, 1500
PLAN = TaskTraining.plan(
    TrainConfig(task="associative-recall", task_sizes="2"), ModelConfig(pe="rope", train_length=LENGTH)
)


class Reference(nn.Module):
    """A pre-norm causal transformer from torch.nn, learned positions, PyTorch's default init."""

    def __init__(self, width: int = WIDTH, layers: int = 2, heads: int = 4):
        super().__init__()
        self.tokens, self.positions = nn.Embedding(256, width), nn.Embedding(LENGTH, width)
        layer = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0, batch_first=True, norm_first=True)
        self.body = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.out = nn.Linear(width, 256)

    def forward(self, tokens):  # (B, T) -> (B, T, 256)
        length = tokens.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(length)
        hidden = self.tokens(tokens) + self.positions(torch.arange(length))  # (B, T, width)
        return self.out(self.body(hidden, mask=mask, is_causal=True))


def train_and_score(model, name: str) -> float:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    generator, start = torch.Generator().manual_seed(1), time.time()
    for step in range(STEPS):
        tokens, targets, weights = PLAN.batch(32, LENGTH, generator, "cpu")
        losses = F.cross_entropy(model(tokens).flatten(0, 1), targets.flatten(), reduction="none")
        loss = (losses * weights.flatten()).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 250 == 0 or step == STEPS - 1:
            print(f"{name} step {step} loss {loss.item():.3f}", flush=True)
    tokens, targets, weights = PLAN.batch(500, LENGTH, torch.Generator().manual_seed(99), "cpu")
    with torch.no_grad():
        best = model(tokens).argmax(-1)
    exact = ((best == targets) | (weights == 0)).all(1).float().mean().item()
    print(f"{name}: exact match {exact:.3f} ({time.time() - start:.0f} s)", flush=True)
    return exact


def gpt(pe: str, init_std: float = 0.02) -> GPT:
    return GPT(ModelConfig(pe=pe, n_layer=2, n_head=4, d_model=WIDTH, train_length=LENGTH, init_std=init_std))


if __name__ == "__main__":
    torch.manual_seed(0)
    train_and_score(Reference(), "torch.nn reference (default init)")
    train_and_score(gpt("rope"), "poscli rope, init std 0.02")
    train_and_score(gpt("learned"), "poscli learned, init std 0.02")
    train_and_score(gpt("rope", 0.08), "poscli rope, init std 0.08")
