"""Optimizers of ``poscli train --optimizer``: AdamW everywhere, or Muon for the hidden matrices.

- ``adamw``: AdamW (betas 0.9, 0.95) with weight decay on matrices only, as nanoGPT does.
- ``muon``: Muon (Jordan et al., 2024, "Muon: An optimizer for hidden layers in neural networks";
  ``torch.optim.Muon``) for the 2-D weights inside the transformer blocks, AdamW as above for the
  token embedding, the encoding's own parameters, norms and biases. Muon's update is scaled to
  AdamW's RMS (Liu et al., 2025, "Muon is Scalable for LLM Training": 0.2 sqrt(max(A, B))), so one
  ``--lr`` and one schedule drive both.

Both expose ``param_groups`` (the loop sets each group's learning rate), ``zero_grad``, ``step``
and ``state_dict`` / ``load_state_dict`` in torch's format, so checkpoints and resume treat them alike.
"""

from __future__ import annotations

import math

import torch

from poscli.config import OPTIMIZERS, TrainConfig  # noqa: F401 (OPTIMIZERS: the choices, declared beside the config)
from poscli.errors import PoscliError


def adamw(parameters: list[torch.nn.Parameter], config: TrainConfig) -> torch.optim.AdamW:
    decay = [p for p in parameters if p.dim() >= 2]
    no_decay = [p for p in parameters if p.dim() < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=config.lr,
        betas=(0.9, 0.95),
    )


def hidden_matrices(model: torch.nn.Module) -> set[str]:
    """Names of the 2-D weights inside the transformer blocks (attention and MLP), Muon's share."""
    return {name for name, p in model.named_parameters() if p.dim() == 2 and name.startswith("blocks.")}


def orthogonalize(
    update: torch.Tensor, coefficients: tuple[float, float, float], steps: int, eps: float
) -> torch.Tensor:
    """Muon's quintic Newton-Schulz iteration towards the nearest semi-orthogonal matrix, the same
    as ``torch.optim.Muon``'s but in float32: torch's runs it in bfloat16, and on a CPU without
    bfloat16 matrix kernels (the AMD EPYC this was tuned on) that made a training step 4x slower.
    Matrices of one shape go together as a batch (one batched matmul per product instead of one
    per matrix). update: (A, B) or (N, A, B) -> the same shape."""
    a, b, c = coefficients
    x = update.float() if update.dim() == 3 else update.float()[None]  # (N, A, B)
    tall = x.size(1) > x.size(2)
    if tall:
        x = x.mT
    x = x / x.norm(dim=(1, 2), keepdim=True).clamp(min=eps)
    for _ in range(steps):
        gram = x @ x.mT
        x = torch.baddbmm(x, torch.baddbmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    x = x.mT if tall else x
    return (x if update.dim() == 3 else x[0]).to(update.dtype)


class Float32Muon(torch.optim.Muon):
    """``torch.optim.Muon`` (momentum, Nesterov, the learning-rate adjustment, decoupled weight
    decay, its state and checkpoints) with the orthogonalisation in float32 (``orthogonalize``),
    the matrices of one shape orthogonalised as one batch."""

    @torch.no_grad()
    def step(self, closure=None):
        from torch.optim._muon import _adjust_lr

        for group in self.param_groups:
            by_shape: dict[torch.Size, list[torch.Tensor]] = {}
            for p in group["params"]:
                if p.grad is not None:
                    by_shape.setdefault(p.shape, []).append(p)
            for shape, params in by_shape.items():
                updates = torch.stack([self.momentum_update(p, group) for p in params])  # (N, A, B)
                updates = orthogonalize(updates, group["ns_coefficients"], group["ns_steps"], group["eps"])
                torch._foreach_mul_(params, 1 - group["lr"] * group["weight_decay"])
                torch._foreach_add_(
                    params, list(updates.unbind(0)), alpha=-_adjust_lr(group["lr"], group["adjust_lr_fn"], shape)
                )
        return None

    def momentum_update(self, p: torch.Tensor, group: dict) -> torch.Tensor:
        """Advance p's momentum buffer by its gradient; -> the update to orthogonalise (Nesterov's, or the buffer)."""
        state = self.state[p]
        if "momentum_buffer" not in state:
            state["momentum_buffer"] = torch.zeros_like(p.grad, memory_format=torch.preserve_format)
        buffer = state["momentum_buffer"]
        buffer.lerp_(p.grad, 1 - group["momentum"])
        return p.grad.lerp(buffer, group["momentum"]) if group["nesterov"] else buffer


class MuonAdamW:
    """Muon for ``hidden_matrices(model)``, AdamW for every other parameter: one optimizer to the loop.

    ``state_dict`` numbers the parameters AdamW's first, then Muon's, as one torch optimizer would
    number its groups' parameters, so a checkpoint stores it like any other."""

    def __init__(self, model: torch.nn.Module, config: TrainConfig):
        hidden = hidden_matrices(model)
        named = list(model.named_parameters())
        self.parts: list[torch.optim.Optimizer] = [
            adamw([p for n, p in named if n not in hidden], config),
            Float32Muon(
                [p for n, p in named if n in hidden],
                lr=config.lr,
                weight_decay=config.weight_decay,
                momentum=0.95,
                nesterov=True,
                adjust_lr_fn="match_rms_adamw",
            ),
        ]

    @property
    def param_groups(self) -> list[dict]:
        return [group for part in self.parts for group in part.param_groups]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for part in self.parts:
            part.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        for part in self.parts:
            part.step()

    def state_dict(self) -> dict:
        state, groups, offset = {}, [], 0
        for part in self.parts:
            own = part.state_dict()
            state.update({offset + index: values for index, values in own["state"].items()})
            groups += [
                {**group, "params": [offset + index for index in group["params"]]} for group in own["param_groups"]
            ]
            offset += sum(len(group["params"]) for group in own["param_groups"])
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, saved: dict) -> None:
        groups, offset = list(saved["param_groups"]), 0
        for part in self.parts:
            own_groups = groups[: len(part.param_groups)]
            groups = groups[len(part.param_groups) :]
            count = sum(len(group["params"]) for group in own_groups)
            state = {
                int(index) - offset: values
                for index, values in saved["state"].items()
                if offset <= int(index) < offset + count
            }
            part.load_state_dict(
                {
                    "state": state,
                    "param_groups": [{**g, "params": [i - offset for i in g["params"]]} for g in own_groups],
                }
            )
            offset += count


def make_optimizer(model: torch.nn.Module, config: TrainConfig):
    """The optimizer ``config.optimizer`` names, over every parameter of ``model``."""
    if config.optimizer == "muon":
        if not hasattr(torch.optim, "Muon"):
            raise PoscliError(
                f"--optimizer muon needs torch.optim.Muon (torch 2.9 or newer; this is {torch.__version__}); "
                "use --optimizer adamw or upgrade torch"
            )
        return MuonAdamW(model, config)
    return adamw(list(model.parameters()), config)


def learning_rate(step: int, progress: float, config: TrainConfig) -> float:
    """Linear warmup over ``warmup_steps``, then cosine decay to ``lr * min_lr_ratio``.

    ``progress`` in [0, 1] is how far training is through its budget (steps, or time when
    ``--minutes`` ends it first), so a time budget still decays the rate to its floor.
    """
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    cosine = 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
    return config.lr * (config.min_lr_ratio + (1 - config.min_lr_ratio) * cosine)


def set_learning_rate(optimizer, step: int, elapsed: float, budget_seconds: float | None, train_config) -> float:
    """The schedule's rate at this step (or at this fraction of a --minutes budget, if further), set on every group."""
    fraction_done = max(step / train_config.steps, elapsed / budget_seconds if budget_seconds else 0.0)
    lr = learning_rate(step, fraction_done, train_config)
    for param_group in optimizer.param_groups:
        param_group["lr"] = lr
    return lr
