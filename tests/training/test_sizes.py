"""Issue 19's training knobs: --size presets, gradient accumulation, the memory estimate, --compile."""

from __future__ import annotations

import copy

import pytest
import torch

from poscli.config import TrainConfig
from poscli.core.device import compile_model
from poscli.errors import PoscliError
from poscli.model.gpt import GPT
from poscli.training.memory import training_memory
from poscli.training.options import SIZES, TrainRequest, request_from, train_plan
from poscli.training.train import make_optimizer, training_step
from tests.conftest import tiny_config


def plan(**given):
    return train_plan(request_from(TrainRequest, given))


def test_size_presets_set_the_shape_and_explicit_flags_win():
    _, model, train = plan()
    assert (model.n_layer, model.n_head, model.d_model, model.train_length, train.batch_size, train.lr) == (
        4,
        4,
        128,
        256,
        16,
        1e-3,
    )
    _, model, train = plan(size="base")
    assert (model.n_layer, model.n_head, model.d_model, model.train_length) == (12, 12, 768, 1024)  # GPT-2 small
    assert train.size == "base" and train.lr == SIZES["base"]["lr"]
    _, model, train = plan(size="small", layers=2, lr=3e-4)
    assert (model.n_layer, model.d_model, train.lr, train.batch_size) == (2, 384, 3e-4, 32)
    with pytest.raises(PoscliError, match="--size 'huge'.*choose one of.*tiny, small, base"):
        plan(size="huge")


def test_gpt2_small_preset_has_gpt2_small_parameter_count():
    """12 x 768 x 12 with GPT-2's MLP is 85M parameters outside the embeddings (Radford et al., 2019)."""
    _, config, _ = plan(size="base")
    with torch.device("meta"):
        model = GPT(config)
    outside_embeddings = sum(p.numel() for name, p in model.named_parameters() if "embedding" not in name)
    assert 84e6 < outside_embeddings < 86e6


def step_weights(accumulate: int, positions=None, weights=None):
    torch.manual_seed(0)
    model = GPT(tiny_config("rope"))
    optimizer = make_optimizer(model, TrainConfig())
    generator = torch.Generator().manual_seed(1)
    data = torch.randint(0, 256, (8, 33), generator=generator)
    loss = training_step(
        model,
        optimizer,
        data[:, :-1],
        data[:, 1:],
        grad_clip=1.0,
        positions=positions,
        weights=weights,
        accumulate=accumulate,
    )
    return loss, {name: p.detach().clone() for name, p in model.named_parameters()}


@pytest.mark.parametrize("extra", ["plain", "weights", "shared positions", "row positions"])
def test_accumulation_takes_the_full_batch_step(extra):
    """N micro-batches of B/N rows give the step (loss and updated weights) of one batch of B."""
    generator = torch.Generator().manual_seed(2)
    options = {
        "plain": {},
        "weights": {"weights": torch.rand(8, 32, generator=generator) * 2},
        "shared positions": {"positions": torch.arange(32) * 3},
        "row positions": {
            "positions": torch.stack([torch.randperm(96, generator=generator)[:32].sort().values for _ in range(8)])
        },
    }[extra]
    loss_one, weights_one = step_weights(1, **options)
    loss_four, weights_four = step_weights(4, **options)
    assert abs(loss_one.item() - loss_four.item()) < 1e-5
    for name in weights_one:
        torch.testing.assert_close(weights_four[name], weights_one[name], atol=2e-6, rtol=1e-5, msg=name)


def test_accumulation_must_split_the_batch():
    with pytest.raises(
        PoscliError, match="--batch-size 16 does not split into 3 equal micro-batches; use a multiple of 3"
    ):
        TrainConfig(accumulate=3).validate()


def test_a_non_finite_loss_in_any_micro_batch_leaves_the_weights():
    torch.manual_seed(0)
    model = GPT(tiny_config("none"))
    optimizer = make_optimizer(model, TrainConfig())
    before = copy.deepcopy(model.state_dict())
    data = torch.randint(0, 256, (4, 33))
    weights = torch.ones(4, 32)
    weights[3, 0] = float("nan")  # the last micro-batch only
    loss = training_step(model, optimizer, data[:, :-1], data[:, 1:], grad_clip=1.0, weights=weights, accumulate=2)
    assert not torch.isfinite(loss)
    for name, value in model.state_dict().items():
        assert torch.equal(value, before[name]), name


@pytest.mark.parametrize("pe", ["rope", "t5", "fire"])
def test_activation_estimate_is_linear_in_the_batch(pe):
    """The estimate measures one and two sequences and extrapolates; a measured batch of 4 agrees."""
    config = tiny_config(pe)
    model = GPT(config)
    estimate = training_memory(model, config.train_length, batch_size=8, accumulate=2, device=torch.device("cpu"))
    assert estimate.rows == 4
    parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved = {}

    def pack(tensor):
        if tensor.untyped_storage().data_ptr() not in parameters:
            saved[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
        return tensor

    tokens = torch.zeros(4, config.train_length, dtype=torch.long)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        model.loss(tokens, tokens)
    assert 0.97 < estimate.activations / sum(saved.values()) < 1.03
    assert estimate.model_state == 16 * model.num_parameters()
    assert "memory: about" in estimate.line() and "4 sequences per micro-batch" in estimate.line()


def test_compile_falls_back_to_eager_in_one_line(monkeypatch):
    model = GPT(tiny_config("rope"))
    tokens = torch.randint(0, 256, (1, 32))
    expected = model(tokens)

    def broken(self, *args, **kwargs):
        def fail(*a, **k):
            raise RuntimeError("InductorError: no working C++ compiler found\nmore detail")

        self._compiled_call_impl = fail

    monkeypatch.setattr(torch.nn.Module, "compile", broken)
    lines = []
    assert compile_model(model, torch.device("cpu"), 32, report=lines.append) is False
    assert lines == [
        "--compile: torch.compile failed on cpu (InductorError: no working C++ compiler found); running eager"
    ]
    torch.testing.assert_close(model(tokens), expected)


@pytest.mark.parametrize("std", [0.02, 0.125])
def test_init_std_sets_the_weights_spread_and_the_residual_projections_scale_by_depth(std):
    _, config, _ = plan(layers=4, width=128, init_std=std)
    torch.manual_seed(0)
    model = GPT(config)
    assert model.token_embedding.weight.std().item() == pytest.approx(std, rel=0.05)
    block = model.blocks[0]
    assert block.attn.qkv.weight.std().item() == pytest.approx(std, rel=0.05)
    assert block.mlp[0].weight.std().item() == pytest.approx(std, rel=0.05)
    assert block.attn.proj.weight.std().item() == pytest.approx(std / (2 * 4) ** 0.5, rel=0.05)  # GPT-2's 1/sqrt(2L)
    with pytest.raises(PoscliError, match="--init-std must be positive"):
        plan(init_std=0.0)
