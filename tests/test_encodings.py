"""Properties every registered encoding must have. A new encoding is held to these
without new test code: the tests are parametrised over the registry."""

import math

import pytest
import torch

from poscli import encodings, runs
from poscli.errors import NotApplicable
from poscli.model import GPT
from tests.conftest import tiny_config

ALL = encodings.names()
WITH_BIAS = [name for name in ALL if encodings.get(name).has_score_bias]


def usable_length(model: GPT, wanted: int) -> int:
    limit = model.encoding.max_length
    return wanted if limit is None else min(wanted, limit)


def test_registry_holds_the_seven_core_encodings():
    assert {"none", "sinusoidal", "learned", "shaw", "t5", "rope", "alibi"} <= set(ALL)


@pytest.mark.parametrize("pe", ALL)
def test_future_tokens_never_change_past_logits(pe):
    model = GPT(tiny_config(pe)).eval()
    length = usable_length(model, 45)  # not a multiple of the 16-query attention block
    tokens = torch.randint(0, 256, (2, length))
    with torch.no_grad():
        reference = model(tokens)
        for t in (0, 7, 16, length - 2):
            changed = tokens.clone()
            changed[:, t + 1 :] = torch.randint(0, 256, (2, length - t - 1))
            logits = model(changed)
            torch.testing.assert_close(logits[:, : t + 1], reference[:, : t + 1], rtol=1e-5, atol=1e-5)
            assert not torch.allclose(logits[:, t + 1 :], reference[:, t + 1 :]), "later logits should see the change"


@pytest.mark.parametrize("pe", ALL)
def test_save_and_load_gives_identical_logits(pe, tmp_path):
    model = GPT(tiny_config(pe)).eval()
    with torch.no_grad():  # move every parameter off its initial value so a missed tensor shows
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    run = tmp_path / "run"
    run.mkdir()
    runs.write_config(run, {"name": "run", "model": model.config.to_dict()})
    runs.save_weights(model, run)
    loaded, _ = runs.load_model(run)
    tokens = torch.randint(0, 256, (2, usable_length(model, 40)))
    with torch.no_grad():
        assert torch.equal(model(tokens), loaded(tokens))


@pytest.mark.parametrize("pe", ALL)
def test_outputs_stay_finite_at_four_times_the_train_length(pe):
    model = GPT(tiny_config(pe)).eval()
    tokens = torch.randint(0, 256, (1, 4 * model.config.train_length))
    if model.encoding.max_length is not None and model.encoding.max_length < tokens.shape[1]:
        with pytest.raises(NotApplicable):
            model(tokens)
        return
    with torch.no_grad():
        assert torch.isfinite(model(tokens)).all()


@pytest.mark.parametrize("pe", ALL)
def test_a_few_steps_on_one_batch_reduce_the_loss_and_train_every_parameter(pe):
    model = GPT(tiny_config(pe))
    tokens = torch.randint(0, 256, (4, usable_length(model, 33)))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    first = None
    for _ in range(15):
        loss = model.loss(tokens[:, :-1], tokens[:, 1:])
        optimizer.zero_grad()
        loss.backward()
        if first is None:
            first = loss.item()
            silent = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
            assert not silent, f"parameters without gradient: {silent}"
        optimizer.step()
    assert loss.item() < first - 0.5


def dense_reference_attention(q, k, v, bias):
    """Textbook causal attention with an explicit (.., T, T) bias: softmax(qk^T/sqrt(d) + bias)v."""
    T = q.shape[-2]
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + bias  # (B, H, T, T)
    scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    return scores.softmax(-1) @ v


@pytest.mark.parametrize("pe", WITH_BIAS)
@pytest.mark.parametrize("length", [16, 37, 70])
def test_blocked_biased_attention_equals_dense_forward_and_backward(pe, length):
    from poscli.model import biased_causal_attention

    torch.manual_seed(1)
    encoding = encodings.build(tiny_config(pe))
    with torch.no_grad():
        for parameter in encoding.parameters():
            parameter.normal_()
    B, H, hd = 2, 4, 8
    q, k, v = (torch.randn(B, H, length, hd, requires_grad=True) for _ in range(3))
    positions = torch.arange(length)

    blocked = biased_causal_attention(q, k, v, encoding, positions, layer=1, max_block=16)
    grads_blocked = torch.autograd.grad(blocked.square().sum(), [q, k, v, *encoding.parameters()])
    bias = encoding.score_bias(q, positions, positions, layer=1)
    dense = dense_reference_attention(q, k, v, bias)
    grads_dense = torch.autograd.grad(dense.square().sum(), [q, k, v, *encoding.parameters()])

    torch.testing.assert_close(blocked, dense, rtol=1e-5, atol=1e-5)
    for got, want in zip(grads_blocked, grads_dense):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("pe", ALL)
def test_encoding_has_a_citation_and_summary(pe):
    cls = encodings.get(pe)
    assert cls.citation and cls.summary


def test_unknown_encoding_lists_the_valid_ones():
    with pytest.raises(Exception) as error:
        encodings.get("rotary")
    for name in ALL:
        assert name in str(error.value)
