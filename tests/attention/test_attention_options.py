"""The --attention-option switches (Scalable-Softmax, sink logits, the output gate) against their
formulas written out in float64, and for every encoding: causal, finite, and trained."""

import math

import pytest
import torch
import torch.nn.functional as F

from poscli import encodings
from poscli.errors import PoscliError
from poscli.model.gpt import GPT
from tests.conftest import tiny_config

F64 = torch.float64
ALL = encodings.names()


def layer_with(pe: str, **switches):
    """Layer 0's attention of a float64 tiny model with these switches, its parameters moved off
    their initial values, and an input x (2, 13, 32)."""
    torch.manual_seed(0)
    model = GPT(tiny_config(pe, attention_options=switches)).double()
    attention = model.blocks[0].attn
    with torch.no_grad():
        for parameter in attention.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.3)
    return attention, torch.randn(2, 13, 32, dtype=F64)


def by_hand(attention, x, bias=None):
    """q, k, v of the layer, its scores q.k / sqrt(hd) (+ bias) per (b, h, i, j), causal."""
    B, T, C = x.shape
    H, hd = attention.config.n_head, attention.config.head_dim
    q, k, v = (t.view(B, T, H, hd).transpose(1, 2) for t in attention.qkv(x).split(C, dim=2))
    return q, k, v, H, hd, T


def project(attention, y):
    B, H, T, hd = y.shape
    return attention.proj(y.transpose(1, 2).reshape(B, T, H * hd))


def test_ssmax_multiplies_each_querys_scores_by_s_log_n():
    attention, x = layer_with("none", ssmax=True)
    q, k, v, H, hd, T = by_hand(attention, x)
    s = attention.ssmax.detach()
    expected = torch.zeros_like(q)
    for i in range(T):
        scores = q[:, :, i : i + 1] @ k[:, :, : i + 1].transpose(-1, -2) / math.sqrt(hd)  # (B, H, 1, i + 1)
        scores = scores * (s * math.log(i + 1))[None, :, None, None]
        expected[:, :, i] = (scores.softmax(-1) @ v[:, :, : i + 1])[:, :, 0]
    out = attention(x, torch.arange(T), consecutive=True)
    torch.testing.assert_close(out, project(attention, expected), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("pe", ["none", "alibi", "rope"])
def test_sinks_add_a_key_with_the_learned_logit_and_no_value(pe):
    attention, x = layer_with(pe, sinks=True)
    q, k, v, H, hd, T = by_hand(attention, x)
    encoding = attention.encoding[0]
    q, k = encoding.rotate(q, k, torch.arange(T), 0)
    bias = encoding.score_bias(q, torch.arange(T), torch.arange(T), 0) if encoding.has_score_bias else 0
    scores = q @ k.transpose(-1, -2) / math.sqrt(hd) + bias  # (B, H, T, T)
    scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    weights = scores.exp() / (scores.exp().sum(-1, keepdim=True) + attention.sinks.detach().exp()[None, :, None, None])
    out = attention(x, torch.arange(T), consecutive=True)
    torch.testing.assert_close(out, project(attention, weights @ v), rtol=1e-9, atol=1e-9)


def test_gate_scales_each_heads_output_by_a_sigmoid_of_the_input():
    attention, x = layer_with("rope", gate=True)
    q, k, v, H, hd, T = by_hand(attention, x)
    q, k = attention.encoding[0].rotate(q, k, torch.arange(T), 0)
    plain = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, hd)
    gate = torch.sigmoid(x @ attention.gate.weight.T + attention.gate.bias)  # (B, T, H)
    expected = plain * gate.transpose(1, 2)[..., None]
    torch.testing.assert_close(attention(x, torch.arange(T), consecutive=True), project(attention, expected))


@pytest.mark.parametrize("pe", ALL)
def test_every_encoding_takes_the_switches_causally_and_trains_their_parameters(pe):
    switches = dict(ssmax=True, gate=True, sinks=not encodings.get(pe).replaces_attention)
    torch.manual_seed(0)
    model = GPT(tiny_config(pe, attention_options=switches))
    tokens = torch.randint(0, 256, (2, 30))
    with torch.no_grad():
        reference = model(tokens)
        changed = tokens.clone()
        changed[:, 20:] = torch.randint(0, 256, (2, 10))
        torch.testing.assert_close(model(changed)[:, :20], reference[:, :20], rtol=1e-5, atol=1e-5)
        if model.encoding.max_length is None:
            assert torch.isfinite(model(torch.randint(0, 256, (1, 4 * 32)))).all()
    model.loss(tokens[:, :-1], tokens[:, 1:]).backward()
    attention = model.blocks[1].attn
    for parameter in (attention.ssmax, attention.gate.weight, attention.sinks):
        if parameter is not None:
            assert parameter.grad is not None and parameter.grad.abs().sum() > 0


def test_sinks_with_an_encoding_that_computes_its_own_attention_is_a_one_line_error():
    with pytest.raises(PoscliError, match="does not apply to --pe stick-breaking"):
        GPT(tiny_config("stick-breaking", attention_options={"sinks": True}))
    with pytest.raises(PoscliError, match="'window' is not an option"):
        tiny_config("rope", attention_options={"window": 64})
