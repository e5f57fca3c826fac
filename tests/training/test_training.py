"""The training step: bf16 autocast tracks fp32, and a non-finite loss never reaches the weights."""

import pytest
import torch

from poscli.config import TrainConfig
from poscli.model.gpt import GPT
from poscli.training.train import make_optimizer, training_step
from tests.conftest import tiny_config


def loss_curve(pe: str, dtype: str, steps: int = 40) -> list[float]:
    torch.manual_seed(0)
    model = GPT(tiny_config(pe))
    optimizer = make_optimizer(model, TrainConfig(lr=3e-3))
    generator = torch.Generator().manual_seed(1)
    text = torch.tensor(list(b"the quick brown fox jumps over the lazy dog. " * 20))  # a learnable stream
    losses = []
    for _ in range(steps):
        starts = torch.randint(0, len(text) - 33, (8,), generator=generator)
        batch = torch.stack([text[s : s + 33] for s in starts.tolist()])  # (8, 33)
        losses.append(training_step(model, optimizer, batch[:, :-1], batch[:, 1:], grad_clip=1.0, dtype=dtype).item())
    return losses


@pytest.mark.slow
def test_bf16_loss_curve_tracks_fp32():
    for pe in ("rope", "alibi", "t5"):
        fp32, bf16 = loss_curve(pe, "fp32"), loss_curve(pe, "bf16")
        assert bf16[-1] < 0.6 * bf16[0], f"{pe}: bf16 training must learn"
        for step in range(0, len(fp32), 10):
            assert abs(bf16[step] - fp32[step]) < 0.05 * fp32[step], (
                f"{pe} step {step}: bf16 {bf16[step]:.3f} vs fp32 {fp32[step]:.3f}"
            )


def test_a_non_finite_loss_leaves_the_weights_untouched():
    model = GPT(tiny_config("none"))
    optimizer = make_optimizer(model, TrainConfig())
    with torch.no_grad():
        model.norm_out.weight.fill_(float("nan"))  # every logit, and so the loss, becomes NaN
    before = {name: p.clone() for name, p in model.named_parameters() if name != "norm_out.weight"}
    tokens = torch.randint(0, 256, (2, 16))
    loss = training_step(model, optimizer, tokens, tokens, grad_clip=1.0)
    assert not torch.isfinite(loss)
    assert not optimizer.state, "the optimizer must not have stepped"
    for name, p in model.named_parameters():
        if name in before:
            assert torch.equal(p, before[name]), name
