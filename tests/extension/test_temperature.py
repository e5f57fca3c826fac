"""Attention temperatures (Llama 4, Ministral 3, DroPE) against transformers' own code for those
models, and Resonance RoPE against its authors' rounding; each acts on the queries (or the
frequencies) alone."""

import math

import pytest
import torch
import torch.nn.functional as F

from poscli import encodings
from poscli.config import ModelConfig
from poscli.extension import methods
from poscli.extension.methods.resonance import resonant
from poscli.extension.scaling import default_inv_freq
from poscli.model.gpt import GPT
from tests.conftest import tiny_config
from tests.extension.test_methods import by_hand


def transformers_model(module: str):
    """transformers.models.``module``, or a skip naming the installed version that lacks it."""
    transformers = pytest.importorskip("transformers")
    try:
        return __import__(f"transformers.models.{module}.modeling_{module}", fromlist=["_"])
    except ImportError:
        pytest.skip(f"transformers {transformers.__version__} has no {module} model")


def test_llama4_temperature_is_transformers_llama4_nope_layer():
    """A Llama 4 NoPE layer with temperature tuning (modeling_llama4.Llama4TextAttention) computes
    attention of q * scale(p); the same layer computed here with our query_scale agrees to 1e-6."""
    llama4 = transformers_model("llama4")
    from transformers import Llama4TextConfig

    torch.manual_seed(0)
    T, F_, beta = 40, 8, 0.1
    config = Llama4TextConfig(
        hidden_size=16, num_attention_heads=2, num_key_value_heads=2, head_dim=8, num_hidden_layers=1,
        no_rope_layers=[0], attn_temperature_tuning=True, floor_scale=F_, attn_scale=beta, use_qk_norm=False,
    )  # fmt: skip
    config._attn_implementation = "eager"
    layer = llama4.Llama4TextAttention(config, layer_idx=0).double().eval()
    assert not layer.use_rope
    x = torch.randn(1, T, 16, dtype=torch.float64)
    mask = torch.zeros(T, T, dtype=torch.float64).masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), -math.inf)
    identity = torch.ones(1, T, 4, dtype=torch.complex128)  # the rotation the NoPE layer never applies
    with torch.no_grad():
        theirs = layer(x, identity, mask[None, None])[0]  # (1, T, 16)
        scale = methods.get("llama4-temperature").query_scale(torch.arange(T), 32, beta=beta, floor_scale=F_)
        q, k, v = (proj(x).view(1, T, 2, 8).transpose(1, 2) for proj in (layer.q_proj, layer.k_proj, layer.v_proj))
        q = q * scale.double()[:, None]
        y = F.softmax(q @ k.transpose(-1, -2) / math.sqrt(8) + mask, dim=-1) @ v  # (1, 2, T, 8)
        ours = layer.o_proj(y.transpose(1, 2).reshape(1, T, 16))
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-6)
    assert scale[: F_ - 1].eq(1).all() and scale[-1] == pytest.approx(1 + beta * math.log(1 + T // F_))


def test_beta_scaling_is_ministral3s_llama_4_attn_scale():
    ministral3 = transformers_model("ministral3")
    L, beta = 16, 0.1
    positions = torch.arange(10 * L)
    theirs = ministral3.get_llama_4_attn_scale(positions[None].float(), beta, L)[0, 0, :, 0]  # (T,)
    for name, kwargs in [("beta-scaling", {"factor": 8.0}), ("yarn-beta", {})]:
        ours = methods.get(name).query_scale(positions, L, beta=beta, **kwargs)
        torch.testing.assert_close(ours, theirs.float(), rtol=1e-6, atol=1e-6)
    assert theirs[:L].eq(1).all() and theirs[L] > 1  # 1 inside the original length


@pytest.mark.parametrize(
    "name, options",
    [
        ("llama4-temperature", {"beta": 0.1, "floor_scale": 0.0}),
        ("beta-scaling", {"beta": 0.1}),
        ("drope", {"beta": 0.1}),
    ],
)
def test_a_temperature_scales_each_query_and_nothing_else(name, options):
    """On a one-layer NoPE model: the extended model is attention of q * scale(p), computed by hand,
    and equals the parent where the scale is 1 (inside the train length)."""
    torch.manual_seed(0)
    config = tiny_config("none", n_layer=1)
    parent = GPT(config).eval()
    method = methods.get(name)
    changes = method.extended_config(encodings.get("none"), config, 4.0, 128, method.check_options(options), {})
    extended = GPT(ModelConfig.from_dict({**config.to_dict(), **changes})).eval()
    extended.load_state_dict(parent.state_dict())
    tokens = torch.randint(0, 256, (2, 128))
    recorded = {k: v for k, v in changes["query_scaling"].items() if k != "method"}
    scale = method.query_scale(torch.arange(128), **recorded)
    assert scale.max() > 1
    with torch.no_grad():
        torch.testing.assert_close(extended(tokens), by_hand(parent, tokens, scale), rtol=1e-4, atol=1e-4)
        inside = tokens[:, :31]
        torch.testing.assert_close(extended(inside), parent(inside))


def test_drope_scale_is_one_plus_c_ln_of_the_length_over_the_train_length():
    drope = methods.get("drope")
    for T, expected in [(16, 1.0), (32, 1.0), (128, 1 + 0.2 * math.log(4)), (96, 1 + 0.2 * math.log(3))]:
        scale = drope.query_scale(torch.arange(T), original_length=32, beta=0.2)
        assert scale.shape == (T,) and scale.tolist() == pytest.approx([expected] * T)


def test_drope_drops_rope_and_keeps_every_weight():
    torch.manual_seed(0)
    config = tiny_config("rope", n_layer=2)
    parent = GPT(config).eval()
    changes = methods.get("drope").extended_config(encodings.get("rope"), config, 4.0, 128, {"beta": 0.1}, {})
    assert changes["pe"] == "none"
    dropped = GPT(ModelConfig.from_dict({**config.to_dict(), **changes})).eval()
    dropped.load_state_dict(parent.state_dict())  # strict: RoPE has no weights of its own
    nope = GPT(tiny_config("none", n_layer=2)).eval()
    nope.load_state_dict(parent.state_dict())
    tokens = torch.randint(0, 256, (1, 32))
    with torch.no_grad():
        torch.testing.assert_close(dropped(tokens), nope(tokens))
        assert not torch.allclose(dropped(tokens), parent(tokens))
    assert methods.get("drope").applies_to(encodings.get("alibi")) is not None
    assert methods.get("drope").default_finetune_length(256, 32) == 32  # recalibrated at the train length


def test_llama4_temperature_scales_only_the_nope_layers_of_a_hybrid():
    config = tiny_config("hybrid", {"layers": "rope@8;none"}, n_layer=2)
    scaled = ModelConfig.from_dict(
        {**config.to_dict(), "query_scaling": {"method": "llama4-temperature", "original_length": 32}}
    )
    model = GPT(scaled)
    assert [block.attn.query_scale is not None for block in model.blocks] == [False, True]
    beta = ModelConfig.from_dict(
        {**scaled.to_dict(), "query_scaling": {"method": "beta-scaling", "original_length": 32}}
    )
    assert all(block.attn.query_scale is not None for block in GPT(beta).blocks)


def test_yarn_beta_is_yarn_with_ministral_temperature_on_top():
    torch.manual_seed(0)
    config = tiny_config("rope", n_layer=1)
    rope = encodings.get("rope")
    yarn = methods.get("yarn").extended_config(rope, config, 4.0, 128, methods.get("yarn").check_options({}), {})
    both = methods.get("yarn-beta").extended_config(
        rope, config, 4.0, 128, methods.get("yarn-beta").check_options({}), {}
    )
    assert both["query_scaling"] == {"method": "yarn-beta", "original_length": 32, "beta": 0.1}
    models = [GPT(ModelConfig.from_dict({**config.to_dict(), **changes})).eval() for changes in (yarn, both)]
    models[1].load_state_dict(models[0].state_dict())
    tokens = torch.randint(0, 256, (1, 96))
    with torch.no_grad():
        plain, scaled = (model(tokens) for model in models)
    torch.testing.assert_close(plain[:, :32], scaled[:, :32])  # the temperature is 1 inside L, YaRN the same
    assert not torch.allclose(plain[:, 32:], scaled[:, 32:])


def test_resonance_wavelengths_are_whole_and_within_half_a_token():
    """The authors' code: r_wavelengths = round(2 pi / inv_freq), r_inv_freq = 2 pi / r_wavelengths."""
    for inv_freq in (default_inv_freq(32, 10000.0), default_inv_freq(16, 500.0)):
        rounded = resonant(inv_freq).double()
        wavelengths = 2 * math.pi / rounded
        torch.testing.assert_close(wavelengths, wavelengths.round(), rtol=1e-6, atol=1e-4)
        assert (wavelengths - 2 * math.pi / inv_freq.double()).abs().max() <= 0.5 + 1e-4
    inv_freq, scale = methods.rope_parameters("resonance", 32, 10000.0, 4.0, 32)
    torch.testing.assert_close(inv_freq, resonant(default_inv_freq(32, 10000.0)))
    assert scale == 1.0
    yarn, yarn_scale = methods.rope_parameters("yarn", 32, 10000.0, 4.0, 32)
    both, both_scale = methods.rope_parameters("resonance-yarn", 32, 10000.0, 4.0, 32)
    torch.testing.assert_close(both, resonant(yarn))
    assert both_scale == yarn_scale and not torch.equal(both, yarn)
