"""How much memory a training step needs, printed before training starts.

Two parts dominate (Rajbhandari et al., 2020, ZeRO, section 3): the model states, 16 bytes per
parameter with AdamW in float32 (weights 4, gradients 4, the two moments 8), and the activations
autograd saves for the backward pass. The second depends on the encoding (a dense score bias
saves B H T T values per layer; RoPE saves its rotated q and k), so it is measured rather than
modelled: forward passes of one and of two sequences run under
``torch.autograd.graph.saved_tensors_hooks``, which sees every tensor saved for backward; their
difference is the cost of a sequence and the rest what every batch shares (a T5 or Shaw band
is computed once per batch), so a micro-batch of R rows saves shared + R x per sequence. The peak adds the
temporaries of the backward pass (a logits gradient, attention blocks), so the estimate is a floor, not a bound.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from poscli.core.device import autocast

MODEL_STATE_BYTES_PER_PARAMETER = 16  # float32 weights, gradients and AdamW's two moments
GIB = 2**30


@dataclass(frozen=True)
class MemoryEstimate:
    model_state: int  # bytes
    activations: int  # bytes, for one micro-batch
    rows: int  # sequences per micro-batch on one process

    @property
    def total(self) -> int:
        return self.model_state + self.activations

    def line(self) -> str:
        return (
            f"memory: about {self.total / GIB:.2f} GiB per process = weights, gradients and AdamW "
            f"{self.model_state / GIB:.2f} "
            f"+ activations {self.activations / GIB:.2f} ({self.rows} sequence{'s' if self.rows != 1 else ''} per "
            "micro-batch)"
        )


def saved_activation_bytes(model, length: int, device: torch.device, dtype: str = "fp32", rows: int = 1) -> int:
    """Bytes autograd saves for the backward pass of ``rows`` sequences of ``length`` tokens (the
    model's parameters, which are saved too but already counted, excluded)."""
    parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in parameters and tensor.device.type != "meta":
            saved[storage.data_ptr()] = storage.nbytes()
        return tensor

    tokens = torch.zeros(rows, length, dtype=torch.long, device=device)  # (R, T)
    was_training = model.training
    model.train()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor), autocast(device, dtype):
        model.loss(tokens, tokens)
    model.train(was_training)
    return sum(saved.values())


def training_memory(
    model, length: int, batch_size: int, accumulate: int, device: torch.device, dtype: str = "fp32", processes: int = 1
) -> MemoryEstimate:
    """The memory of one process's training step: model states plus a micro-batch's saved activations."""
    rows = max(1, batch_size // (accumulate * processes))
    parameters = sum(p.numel() for p in model.parameters())
    one, two = (saved_activation_bytes(model, length, device, dtype, count) for count in (1, 2))
    per_sequence = two - one
    return MemoryEstimate(MODEL_STATE_BYTES_PER_PARAMETER * parameters, one + (rows - 1) * per_sequence, rows)
