"""The extension-method axis (poscli/extension/methods/): every built-in method is one file behind the
protocol, and log-n attention scaling, its newest member, agrees with Qwen's formula and acts on
the queries alone."""

import math

import pytest
import torch
import torch.nn.functional as F

from poscli import encodings
from poscli.config import ModelConfig
from poscli.errors import PoscliError
from poscli.extension import methods
from poscli.extension.methods.protocol import TRAINING, ExtensionMethod
from poscli.model.gpt import GPT
from tests.conftest import tiny_config

FOURTEEN = {"pi", "ntk", "dynamic-ntk", "yarn", "ntk-by-parts", "llama3", "longrope", "base",
            "self-extend", "rerope", "leaky-rerope", "sinks", "interpolate", "continue"}  # fmt: skip


def test_every_method_is_a_file_declaring_the_protocol():
    assert FOURTEEN | {"logn"} <= set(methods.names())  # a new method file joins them
    for name in methods.names():
        method = methods.get(name)
        assert issubclass(method, ExtensionMethod) and method.name == name
        assert method.summary and method.citation and method.training in TRAINING
        assert methods.applicable(encodings.get("rope")) and name in methods.REGISTRY.builtin_names()


def test_qwen_logn_list_is_the_query_scale():
    """Qwen's modeling_qwen.py: logn_list = [math.log(i, seq_length) if i > seq_length else 1 for i in
    range(1, 32768)], indexed by the 0-based position."""
    L = 32
    positions = torch.arange(4 * L)
    qwen = [math.log(i, L) if i > L else 1 for i in range(1, 4 * L + 1)]
    scale = methods.get("logn").query_scale(positions, original_length=L)
    assert scale.dtype == torch.float32 and scale.tolist() == pytest.approx(qwen, rel=1e-6)
    assert scale[:L].eq(1).all() and (scale[L:].diff() > 0).all()


def by_hand(model: GPT, tokens: torch.Tensor, query_scale: torch.Tensor) -> torch.Tensor:
    """A one-layer GPT without positions, its queries multiplied by ``query_scale`` (T,). -> (B, T, V)."""
    block, (B, T), H = model.blocks[0], tokens.shape, model.config.n_head
    x = model.token_embedding(tokens)  # (B, T, C)
    q, k, v = block.attn.qkv(block.norm_attn(x)).split(model.config.d_model, dim=2)
    q, k, v = (t.view(B, T, H, -1).transpose(1, 2) for t in (q, k, v))  # (B, H, T, hd)
    scores = (q * query_scale[:, None]) @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])  # (B, H, T, T)
    scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    y = (F.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, T, -1)  # (B, T, C)
    x = x + block.attn.proj(y)
    x = x + block.mlp(block.norm_mlp(x))
    return model.norm_out(x) @ model.token_embedding.weight.T


def test_logn_scales_each_query_by_its_position_and_nothing_else():
    torch.manual_seed(0)
    config = tiny_config("none", n_layer=1)
    parent = GPT(config).eval()
    changes = methods.get("logn").extended_config(encodings.get("none"), config, 4.0, 128, {}, {})
    extended = GPT(ModelConfig.from_dict({**config.to_dict(), **changes})).eval()
    extended.load_state_dict(parent.state_dict())
    tokens = torch.randint(0, 256, (2, 128))
    scale = methods.get("logn").query_scale(torch.arange(128), original_length=32)
    with torch.no_grad():
        got = extended(tokens)
        torch.testing.assert_close(got, by_hand(parent, tokens, scale), rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(got[:, :32], parent(tokens)[:, :32])  # inside the train length: unchanged
        assert not torch.allclose(got[:, 64:], parent(tokens)[:, 64:])


def test_every_built_in_method_option_is_declared_with_a_help_line_and_reads_its_own_default():
    """A method's options are declared once, in its file: each has a help line (poscli methods and the
    recipe keys read them), and its default read back as a flag would give it is itself."""
    from poscli.extension.methods.protocol import MethodOption

    for name in methods.names():
        method = methods.get(name)
        for key, option in method.options.items():
            assert isinstance(option, MethodOption) and option.help, (name, key)
            if option.default != ():
                assert option.read(name, key, str(option.default)) == option.default, (name, key)


def test_a_method_option_given_as_text_is_read_as_its_declared_type_or_refused_in_one_line():
    read = methods.get("self-extend").read_options({"window": "64", "group": 4.0})
    assert read == {"window": 64, "group": 4} and all(type(value) is int for value in read.values())
    for bad, message in (({"window": "6.5"}, "must be a whole number"), ({"window": "nan"}, "give a finite number"),
                         ({"windw": 64}, "did you mean --window[?]")):  # fmt: skip
        with pytest.raises(PoscliError, match=message):
            methods.get("self-extend").read_options(bad)
    with pytest.raises(PoscliError, match="give a finite number"):
        methods.get("yarn").read_options({"beta_fast": "inf"})
    with pytest.raises(PoscliError, match="takes one of attention, reversed, index"):
        methods.get("ms-poe").read_options({"head_order": "sideways"})
