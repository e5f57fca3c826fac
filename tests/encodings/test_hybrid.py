"""The per-layer schedule (--pe hybrid -O layers=...): each layer runs its own encoding and window,
extension rescales only the layers that rotate, and bad schedules are one-line errors."""

import math

import pytest
import torch
import torch.nn.functional as F

from poscli import encodings
from poscli.errors import PoscliError
from poscli.extension import methods
from poscli.model.gpt import GPT
from tests.conftest import tiny_config

F64 = torch.float64


def hybrid(layers: str, n_layer: int = 4, **overrides):
    return encodings.build(tiny_config("hybrid", options={"layers": layers}, n_layer=n_layer, **overrides)).double()


def test_the_schedule_repeats_over_the_layers_with_each_entrys_options_and_window():
    encoding = hybrid("rope@8(base=100);none", n_layer=4)
    kinds = [(type(part).__name__, window) for part, window in encoding.schedule]
    assert kinds == [("RoPE", 8), ("NoPE", None), ("RoPE", 8), ("NoPE", None)]
    assert encoding.layer(0)[0].options.base == 100.0
    assert encoding.layer(0)[0] is encoding.layer(2)[0]  # one module per distinct entry


def test_a_windowed_layer_is_its_encodings_attention_over_the_last_w_keys_and_a_global_layer_over_all():
    encoding = hybrid("alibi@5;none", n_layer=2)
    T, hd = 17, 8
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, T, hd, dtype=F64) for _ in range(3))
    positions = torch.arange(T)
    alibi = encoding.layer(0)[0]
    distance = positions[:, None] - positions[None, :]
    bias = alibi.score_bias(q, positions, positions, 0).masked_fill((distance < 0) | (distance >= 5), float("-inf"))
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=bias[None])
    torch.testing.assert_close(encoding.attend(None, q, k, v, positions, 0), want, rtol=1e-9, atol=1e-9)
    plain = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(encoding.attend(None, q, k, v, positions, 1), plain, rtol=1e-9, atol=1e-9)


def test_a_window_hides_what_lies_farther_back_in_a_one_layer_model():
    model = GPT(tiny_config("hybrid", options={"layers": "rope@6"}, n_layer=1)).eval()
    tokens = torch.randint(0, 256, (1, 30))
    changed = tokens.clone()
    changed[0, :10] = torch.randint(0, 256, (10,))
    with torch.no_grad():
        a, b = model(tokens), model(changed)
    torch.testing.assert_close(a[0, 15:], b[0, 15:])  # positions 15.. see keys 10.. only
    assert not torch.allclose(a[0, 10:15], b[0, 10:15])


def test_extension_rescales_only_the_layers_that_rotate():
    config = tiny_config("hybrid", options={"layers": "rope@8(base=100);none;rope(base=10000)"}, n_layer=3)
    yarn = methods.get("yarn")
    changes = yarn.extended_config(encodings.get("hybrid"), config, 4.0, 128, yarn.check_options({}), {})
    extended = encodings.build(type(config).from_dict({**config.to_dict(), **changes}))
    local, nope, global_ = (extended.layer(i)[0] for i in range(3))
    assert local.method.name == global_.method.name == "yarn" and type(nope).__name__ == "NoPE"
    plain = encodings.build(config).layer(2)[0]
    assert not torch.allclose(global_.inv_freq, plain.inv_freq)  # the global layer's own base, rescaled
    assert global_.inv_freq[0] == pytest.approx(1.0) and local.inv_freq[0] == pytest.approx(1.0)
    assert local.inv_freq[-1] < 100 ** (-(len(local.inv_freq) - 1) / len(local.inv_freq))  # base 100, then yarn


@pytest.mark.parametrize(
    "layers, message",
    [
        ("rope@x", "is not NAME"),
        ("learned;rope", "adds positions at the input"),
        ("fox@8", "takes no @WINDOW"),
        ("rotary", "unknown encoding 'rotary'"),
        ("rope(bogus=1)", "no option 'bogus'"),
    ],
)
def test_bad_schedules_are_one_line_errors(layers, message):
    with pytest.raises(PoscliError, match=message):
        GPT(tiny_config("hybrid", options={"layers": layers}))


def test_a_frequency_method_on_a_schedule_without_rotation_says_so():
    config = tiny_config("hybrid", options={"layers": "alibi@8;none"})
    with pytest.raises(PoscliError, match="has no rotary layer"):
        methods.get("pi").extended_config(encodings.get("hybrid"), config, 2.0, 64, {}, {})
    assert math.isfinite(GPT(config)(torch.randint(0, 256, (1, 40))).sum().item())
