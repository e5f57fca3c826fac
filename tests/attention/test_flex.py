"""FlexAttention (poscli.attention.flex): every score-bias encoding's score_mod equals textbook attention.

The reference is test_attention's: softmax(q k^T / sqrt(hd) + score_bias, causal) v in float64
from the encoding's dense ``score_bias``. FlexAttention runs eagerly here (exact, on CPU, in CI);
its compiled kernel computes the same score_mod on CUDA. Lengths cross FlexAttention's 128-row
blocks, and positions may start past 0 (a window of a longer text).
"""

import pytest
import torch

from poscli import encodings
from poscli.attention import flex
from poscli.model.gpt import GPT
from tests.attention.test_attention import WITH_BIAS, random_encoding, textbook_attention
from tests.conftest import tiny_config

pytestmark = pytest.mark.skipif(not flex.flex_available(), reason="this torch has no FlexAttention")


@pytest.fixture
def cpu_backward(monkeypatch):
    """torch refuses FlexAttention's backward on CPU (its compiled CPU kernel has none), but the
    eager implementation's backward is plain autograd math; lift the refusal so gradients through
    poscli's score_mods, captured parameters included, are checked here as CUDA computes them."""
    import torch.nn.attention.flex_attention as flex_attention

    monkeypatch.setattr(flex_attention, "_validate_device", lambda *args, **kwargs: None)


@pytest.mark.slow
@pytest.mark.parametrize("pe", WITH_BIAS)
@pytest.mark.parametrize("length,start", [(1, 0), (150, 0), (200, 37)])
def test_flex_equals_the_textbook_formula_forward_and_backward(pe, length, start, cpu_backward):
    encoding = random_encoding(pe, options=dict(max_distance=40, num_buckets=12, clip=5))
    B, H, hd = 2, 4, 8
    q, k, v = (torch.randn(B, H, length, hd, requires_grad=True) for _ in range(3))
    positions = torch.arange(start, start + length)
    inputs = [q, k, v, *encoding.parameters()]

    got = flex.flex_causal_attention(q, k, v, flex.score_mod_for(encoding, q, positions, layer=1), compiled=False)
    got_grads = torch.autograd.grad(got.square().sum(), inputs, allow_unused=True)
    want = textbook_attention(q, k, v, encoding.score_bias(q, positions, positions, layer=1))
    want_grads = torch.autograd.grad(want.square().sum(), inputs, allow_unused=True)

    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    for name, got_grad, want_grad in zip(["q", "k", "v", *dict(encoding.named_parameters())], got_grads, want_grads):
        if want_grad is None:
            assert got_grad is None or not got_grad.any(), name
            continue
        assert got_grad is not None, f"{pe}: no gradient reaches {name} through the score_mod"
        # float32 on the gradient's own scale, as in test_attention (a per-head constant's exact gradient is 0)
        atol = 5e-5 * max(1.0, want_grad.abs().max().item())
        torch.testing.assert_close(
            got_grad,
            want_grad,
            rtol=1e-4,
            atol=atol,
            msg=lambda detail: f"{pe} {name}: {detail}",  # noqa: B023
        )


@pytest.mark.slow
@pytest.mark.parametrize("pe", WITH_BIAS)
def test_the_model_takes_the_flex_path_when_asked_and_agrees(pe, monkeypatch):
    """POSCLI_FLEX=always routes every bias encoding through FlexAttention; logits match the
    default path (CPU fast path or blocked fallback) to float32 precision."""
    torch.manual_seed(0)
    model = GPT(tiny_config(pe, options=dict(max_distance=40, num_buckets=12, clip=5)))
    tokens = torch.randint(0, 256, (2, 70))
    expected = model(tokens)
    calls = []
    original = flex.flex_causal_attention
    monkeypatch.setattr(
        flex,
        "flex_causal_attention",
        lambda *args, **kw: calls.append(1) or original(*args, **{**kw, "compiled": False}),
    )
    flex.set_flex_mode("always")
    try:
        with torch.no_grad():  # on CPU the flex path is inference only
            got = model(tokens)
    finally:
        flex.set_flex_mode("auto")
    assert len(calls) == model.config.n_layer
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


def test_flex_is_chosen_on_cuda_only_by_default():
    assert not flex.wanted(torch.zeros(1))  # CPU: poscli's fast paths
    assert flex.wanted(torch.zeros(1, device="meta")) is False
    flex.set_flex_mode("always")
    try:
        assert flex.wanted(torch.zeros(1))
        assert not flex.wanted(torch.zeros(1, requires_grad=True))  # training on CPU: torch has no flex backward there
    finally:
        flex.set_flex_mode("auto")
    with pytest.raises(Exception, match="flex mode 'sometimes' is not one of auto, always, never"):
        flex.set_flex_mode("sometimes")


def test_a_user_encoding_gets_the_flex_path_by_giving_a_score_mod():
    """A user-defined distance bias: implementing score_mod is all the flex path needs."""
    from poscli.encodings.base import PositionalEncoding, causal_distance

    class Hyperbolic(PositionalEncoding):
        has_score_bias = True

        def score_bias(self, q, q_positions, k_positions, layer):
            return -1.0 / (1.0 + causal_distance(q_positions, k_positions).float())  # (Tq, Tk)

        def score_mod(self, q, positions, layer):
            where = positions.float()
            return lambda score, b, h, q_idx, kv_idx: score - 1.0 / (1.0 + (where[q_idx] - where[kv_idx]).clamp(min=0))

    encoding = Hyperbolic(tiny_config("none"))
    q, k, v = (torch.randn(1, 2, 140, 8) for _ in range(3))
    positions = torch.arange(140)
    got = flex.flex_causal_attention(q, k, v, encoding.score_mod(q, positions, 0), compiled=False)
    torch.testing.assert_close(
        got.double(), textbook_attention(q, k, v, encoding.score_bias(q, positions, positions, 0)), rtol=1e-5, atol=1e-5
    )
    assert encodings  # the registry is untouched: a user class needs no registration to be tested
