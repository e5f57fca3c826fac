"""The fast attention paths equal textbook attention, forward and backward.

The reference is the definition, computed in float64 from the encoding's own ``score_bias``
(a dense T x T bias): softmax(q k^T / sqrt(hd) + bias, causal) v. Every encoding with a score
bias is checked through every path the model can take: the banded/linear fast path in its
short-sequence (one dense mask) and long-sequence (chunked band + far keys) modes, and the
portable blocked fallback. Lengths are deliberately not multiples of any block or tile.
"""

import math

import pytest
import torch

import poscli.attention.paths
from poscli import encodings
from poscli.attention import bands, distance_attention
from poscli.attention import blockwise as attention
from poscli.attention import fallback as portable
from poscli.attention.paths import fast_biased_attention
from poscli.model.gpt import GPT
from tests.conftest import tiny_config

# Every built-in bias encoding, and a user-defined one that implements only bias_of_distance.
USER_DEFINED = "examples.power_penalty:PowerPenalty"
WITH_BIAS = [name for name in encodings.names() if encodings.get(name).has_score_bias] + [USER_DEFINED]


def textbook_attention(q, k, v, bias):
    """softmax(q k^T / sqrt(hd) + bias) v with future keys masked, in float64. bias: (.., T, T)."""
    T = q.shape[-2]
    scores = q.double() @ k.double().transpose(-1, -2) / math.sqrt(q.shape[-1]) + bias.double()  # (B, H, T, T)
    scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    return scores.softmax(-1) @ v.double()


def random_encoding(pe, **overrides):
    """An encoding whose learned tables hold large random values, so the bias matters."""
    torch.manual_seed(3)
    encoding = encodings.build(tiny_config(pe, **overrides))
    with torch.no_grad():
        for parameter in encoding.parameters():
            parameter.normal_(std=0.5)
    return encoding


def fast(q, k, v, encoding, positions, block):
    """The path the model takes: banded/linear (ALiBi, T5, Shaw) or distance form (KERPLE, FIRE)."""
    return fast_biased_attention(q, k, v, encoding, positions, 1, block)


def fallback(q, k, v, encoding, positions, block):
    score_bias = lambda q_block, q_pos, k_pos: encoding.score_bias(q_block, q_pos, k_pos, layer=1)  # noqa: E731
    return portable.blocked_biased_attention(q, k, v, score_bias, positions, block)


@pytest.fixture(params=["dense-mask", "chunked-band"])
def fast_mode(request, monkeypatch):
    """The fast path chooses one dense mask for short sequences; force the long-sequence mode too,
    with tiles and chunks small enough that a 150-token test crosses several of each."""
    if request.param == "chunked-band":
        monkeypatch.setattr(attention, "BIAS_BLOCK_ELEMENTS", 0)
        monkeypatch.setattr(attention, "BAND_TILE", 8)
        monkeypatch.setattr(attention, "BAND_CHUNK", 40)
        monkeypatch.setattr(distance_attention, "VIEW_BLOCK", 16)
    return request.param


@pytest.mark.parametrize("pe", WITH_BIAS)
@pytest.mark.parametrize("length", [1, 29, 150])
@pytest.mark.parametrize("path", [fast, fallback], ids=["fast", "fallback"])
def test_attention_equals_the_textbook_formula_forward_and_backward(pe, length, path, fast_mode):
    # A band wider than some tiles (t5_max_distance 40 > tile 8) and narrower than others.
    encoding = random_encoding(pe, options=dict(max_distance=40, num_buckets=12, clip=5))
    B, H, hd = 2, 4, 8
    q, k, v = (torch.randn(B, H, length, hd, requires_grad=True) for _ in range(3))
    positions = torch.arange(length)
    inputs = [q, k, v, *encoding.parameters()]

    got = path(q, k, v, encoding, positions, block=16)
    got_grads = torch.autograd.grad(got.square().sum(), inputs)
    want = textbook_attention(q, k, v, encoding.score_bias(q, positions, positions, layer=1))
    want_grads = torch.autograd.grad(want.square().sum(), inputs)

    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    for name, got_grad, want_grad in zip(["q", "k", "v", *dict(encoding.named_parameters())], got_grads, want_grads):
        # float32 tolerance on the gradient's own scale: a sum of softmax gradients that is zero
        # in exact arithmetic (T5's far bucket when no distance reaches it) is ~1e-5 here.
        atol = 5e-5 * max(1.0, want_grad.abs().max().item())
        message = lambda detail, name=name: f"gradient of {name}: {detail}"  # noqa: E731
        torch.testing.assert_close(got_grad, want_grad, rtol=1e-4, atol=atol, msg=message)


@pytest.mark.parametrize("pe", ["fire", "kerple", USER_DEFINED])
@pytest.mark.parametrize("blocks", ["one", "many"])
def test_distance_forms_are_exact_at_an_offset_and_past_fires_threshold(pe, blocks, monkeypatch):
    """Consecutive positions that start at 300 (a later window): FIRE's bias then depends on the
    query row (past L = 32, s_i = 1 / psi(i) changes every row), and the forward pass (no grad,
    the evaluation path: reversed keys, strided views, runs of one segment) must still equal the
    formula, in one block or in many small ones."""
    if blocks == "many":
        monkeypatch.setattr(attention, "BIAS_BLOCK_ELEMENTS", 0)
        monkeypatch.setattr(distance_attention, "VIEW_BLOCK", 16)
    encoding = random_encoding(pe)
    length, hd = 400, 8
    q, k, v = (torch.randn(1, 4, length, hd) for _ in range(3))
    positions = 300 + torch.arange(length)
    with torch.no_grad():
        got = fast(q, k, v, encoding, positions, block=16)
    want = textbook_attention(q, k, v, encoding.score_bias(q, positions, positions, layer=1))
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)


def test_alibi_fast_path_is_exact_far_from_the_start():
    """ALiBi's key offsets are measured from each block's start, so scores stay small where they
    matter: queries 3000 tokens in agree with the formula as well as the first ones do."""
    encoding = random_encoding("alibi")
    length, hd = 3100, 8
    q, k, v = (torch.randn(1, 4, length, hd) for _ in range(3))
    positions = torch.arange(length)
    got = fast(q, k, v, encoding, positions, block=512)[:, :, -64:]
    bias = encoding.score_bias(q, positions[-64:], positions, layer=1)  # (H, 64, T)
    scores = (q[:, :, -64:].double() @ k.double().transpose(-1, -2)) / math.sqrt(hd) + bias.double()  # (1, H, 64, T)
    future = positions[None, :] > positions[-64:, None]  # (64, T)
    want = scores.masked_fill(future, float("-inf")).softmax(-1) @ v.double()
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("pe", WITH_BIAS)
def test_model_takes_the_fast_path_only_for_consecutive_positions(pe, monkeypatch):
    """The band is indexed by i - j in the sequence, so other positions must use the fallback,
    and both must give the model the same output."""
    model = GPT(tiny_config(pe)).eval()
    tokens = torch.randint(0, 256, (1, 37))
    calls = []
    for path in ("relative_causal_attention", "distance_biased_attention"):
        real = getattr(poscli.attention.paths, path)
        monkeypatch.setattr(poscli.attention.paths, path, lambda *a, real=real: calls.append(1) or real(*a))
    with torch.no_grad():
        consecutive = model(tokens)
        fast_calls = len(calls)
        spread = model(tokens, positions=torch.arange(37) * 2)
    assert fast_calls == model.config.n_layer, "every bias encoding has a fast path for consecutive positions"
    assert len(calls) == fast_calls, "positions 0, 2, 4, ... must not take the fast path"
    assert torch.isfinite(spread).all() and consecutive.shape == spread.shape


def test_band_skew_places_distance_d_on_the_dth_diagonal():
    rows, width = 5, 3
    band = torch.arange(rows * width, dtype=torch.float32).view(rows, width) + 1  # column c: distance W-1-c
    tiles = bands.skew(band, rows + width - 1)  # (5, 7)
    for r in range(rows):
        for c in range(rows + width - 1):
            expected = band[r, c - r] if 0 <= c - r < width else 0.0
            assert tiles[r, c] == expected
    torch.testing.assert_close(bands.unskew(tiles, width), band)


def test_bf16_alibi_stays_within_plain_bf16_attentions_error_at_long_length():
    """The ALiBi bias rides in extra head dimensions; in bfloat16 a single column would round
    m (j - a) / scale to 8 bits (0.7 nats of bias error at T = 1024). Split in two, the error of
    the whole attention stays within that of plain bf16 attention on the same inputs."""
    torch.manual_seed(0)
    B, H, T, hd = 1, 4, 1024, 32
    q, k, v = (torch.randn(B, H, T, hd) for _ in range(3))
    encoding = encodings.build(tiny_config("alibi", n_head=H, d_model=H * hd, train_length=T))
    bias = encoding.score_bias(q, torch.arange(T), torch.arange(T), layer=0)  # (H, T, T) or broadcastable
    exact = textbook_attention(q, k, v, bias)
    low = (x.bfloat16() for x in (q, k, v))
    alibi_error = (fast(*low, encoding, torch.arange(T), 256).double() - exact).abs().max().item()
    plain_error = (
        (
            attention.fused_causal_attention(q.bfloat16(), k.bfloat16(), v.bfloat16()).double()
            - textbook_attention(q, k, v, torch.zeros(T, T))
        )
        .abs()
        .max()
        .item()
    )
    assert alibi_error <= 2 * plain_error, (
        f"bf16 ALiBi error {alibi_error:.4f} vs plain bf16 attention {plain_error:.4f}"
    )


@pytest.mark.parametrize(
    "positions",
    [torch.arange(150), torch.arange(150) * 3 // 2, torch.randperm(150)],
    ids=["consecutive", "increasing-with-gaps", "shuffled"],
)
@pytest.mark.parametrize("with_sink", [False, True], ids=["", "sink"])
def test_a_sliding_window_equals_the_textbook_formula_with_keys_w_or_more_positions_back_hidden(positions, with_sink):
    """The blocked path with ``window`` (a hybrid schedule's local layers) cuts each block's keys to
    the band where positions increase; it must hide exactly the keys W or more positions back, and
    no nearer one, in every block (block 16 here, so 150 tokens cross ten of them), gradients too."""
    torch.manual_seed(0)
    window, T = 11, len(positions)
    q, k, v = (torch.randn(1, 2, T, 8, dtype=torch.float64, requires_grad=True) for _ in range(3))
    alibi = encodings.build(tiny_config("alibi", n_head=2)).double()
    score_bias = lambda q_block, q_pos, k_pos: alibi.score_bias(q_block, q_pos, k_pos, 0)  # noqa: E731
    sink = torch.tensor([0.5, -1.0], dtype=torch.float64, requires_grad=True) if with_sink else None
    got = portable.blocked_biased_attention(q, k, v, score_bias, positions, 16, sink, window=window)

    distance = positions[:, None] - positions[None, :]  # (T, T)
    bias = alibi.score_bias(q, positions, positions, 0).masked_fill(distance >= window, float("-inf"))  # (H, T, T)
    if with_sink:  # the sink: a zero key before every other with the sink logit as its score, zero value
        scores = q @ k.transpose(-1, -2) / math.sqrt(8) + bias
        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        scores = torch.cat((sink[None, :, None, None].expand(1, 2, T, 1), scores), dim=-1)
        want = scores.softmax(-1)[..., 1:] @ v
    else:
        want = textbook_attention(q, k, v, bias)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
    grads = torch.autograd.grad(got.square().sum(), (q, k, v))
    wants = torch.autograd.grad(want.square().sum(), (q, k, v))
    for g, w in zip(grads, wants, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("rows, keys", [(256, 1024), (8, 8), (5, 12)], ids=["one-step", "square", "uneven"])
def test_blockwise_outputs_are_the_same_written_into_one_tensor_without_autograd_as_concatenated_with_it(
    rows, keys, monkeypatch
):
    """``RowBlocks``: without autograd each block is written into a preallocated output (bounded
    peak memory); with it the blocks are concatenated. Both must give every row, once, in order;
    and the chunked scan's online softmax (blocks of ``rows`` queries, chunks of ``keys`` keys,
    lengths that are multiples of neither) must be the textbook softmax."""
    from poscli.attention import data_dependent
    from poscli.attention.data_dependent import scanned_causal_attention, visible

    monkeypatch.setattr(data_dependent, "SCAN_ROWS", rows)
    monkeypatch.setattr(data_dependent, "SCAN_KEYS", keys)
    torch.manual_seed(1)
    q, k, v = (torch.randn(2, 2, 70, 8, dtype=torch.float64) for _ in range(3))
    positions = torch.arange(70)

    def softmax_logits(q_block, scores, query_rows, key_index, carry):
        return scores.masked_fill(~visible(query_rows, key_index), float("-inf")), carry

    paths = {
        "blocked": lambda: portable.blocked_biased_attention(q, k, v, None, positions, 16, window=9),
        "scanned": lambda: scanned_causal_attention(q, k, v, softmax_logits, normalize=True),
    }
    for name, path in paths.items():
        with_grad = path()
        with torch.no_grad():
            without = path()
        torch.testing.assert_close(without, with_grad, rtol=0, atol=0, msg=name)
    want = textbook_attention(q, k, v, torch.zeros(70, 70, dtype=torch.float64))
    torch.testing.assert_close(paths["scanned"](), want, rtol=1e-12, atol=1e-12)
