"""poscli inspect's attention statistics against their definitions: uniform attention's entropy is log(n),
a one-hot's is 0 and its span is its distance, ALiBi's mass by distance follows the closed form of its
bias, blocks change nothing, float32 agrees with float64, and the statistics read the weights the model
attends with."""

import math

import pytest
import torch

from poscli.evaluation.inspection.attention_maps import QUANTILES, SINK_TOKENS, attention_statistics, distance_grid
from poscli.evaluation.inspection.biases import bias_adder
from tests.conftest import tiny_config

H, T, HD = 3, 200, 8


def test_uniform_attention_has_entropy_log_n_and_mass_proportional_to_distance():
    zeros = torch.zeros(H, T, HD, dtype=torch.float64)
    stats = attention_statistics(zeros, zeros)
    keys = torch.arange(T, dtype=torch.float64) + 1  # query i sees i + 1 keys
    torch.testing.assert_close(stats.entropy, keys.log().expand(H, T), rtol=0, atol=1e-12)
    for index, distance in enumerate(stats.distances):
        expected = ((distance + 1) / keys).clamp(max=1)  # d + 1 of the i + 1 keys are within d
        torch.testing.assert_close(stats.within[..., index], expected.expand(H, T), rtol=0, atol=1e-12)
    for index, quantile in enumerate(QUANTILES):  # the smallest d with (d + 1) / (i + 1) >= q
        expected = (quantile * keys - 1 - 1e-9).ceil().clamp(min=0).long()
        assert torch.equal(stats.spans[index], expected.expand(H, T))
    torch.testing.assert_close(stats.sink, (SINK_TOKENS / keys).clamp(max=1).expand(H, T), rtol=0, atol=1e-12)


@pytest.mark.parametrize("distance", [0, 1, 37])
def test_one_hot_attention_has_entropy_0_and_a_span_of_its_distance(distance):
    def add_bias(scores, start, end):  # +1000 on the key `distance` back from each query (or key 0)
        rows = torch.arange(start, end)
        scores[:, torch.arange(end - start), (rows - distance).clamp(min=0)] += 1000.0

    zeros = torch.zeros(H, T, HD, dtype=torch.float64)
    stats = attention_statistics(zeros, zeros, add_bias, block_elements=H * T * 16)
    rows = torch.arange(T)
    far = rows >= distance  # queries with a key that far back
    assert stats.entropy[:, far].abs().max() < 1e-9
    assert (stats.spans[:, :, far] == distance).all()
    grid = torch.tensor(stats.distances)
    assert torch.equal(stats.within[:, far].round(), (grid >= distance).double().expand(H, int(far.sum()), -1))


def test_alibis_mass_by_distance_follows_the_closed_form_of_its_bias():
    """Zero queries and keys leave ALiBi's bias -m d alone: a_d = e^(-m d) / sum_{d' <= i} e^(-m d'), so the
    mass within D of query i is (1 - e^(-m (D + 1))) / (1 - e^(-m (i + 1)))."""
    from poscli import encodings

    encoding = encodings.build(tiny_config("alibi", n_head=H, d_model=H * HD))
    zeros = torch.zeros(1, H, T, HD, dtype=torch.float64)
    add = bias_adder(encoding, zeros, torch.arange(T), layer=0)
    stats = attention_statistics(zeros[0], zeros[0], add, block_elements=H * T * 24)
    m = encoding.slopes.double()[:, None, None]  # (H, 1, 1)
    D = torch.tensor(stats.distances, dtype=torch.float64)[None, None, :]  # (1, 1, G)
    i = torch.arange(T, dtype=torch.float64)[None, :, None]  # (1, T, 1)
    expected = ((1 - torch.exp(-m * (torch.minimum(D, i) + 1))) / (1 - torch.exp(-m * (i + 1)))).expand_as(stats.within)
    torch.testing.assert_close(stats.within, expected, rtol=0, atol=1e-10)
    weights = torch.exp(-m * torch.arange(T, dtype=torch.float64)) / (1 - torch.exp(-m * T)) * (1 - torch.exp(-m))
    entropy_last = -(weights * weights.log()).sum(-1)[:, 0]  # the last query sees all T distances
    torch.testing.assert_close(stats.entropy[:, -1], entropy_last, rtol=0, atol=1e-10)


@pytest.mark.parametrize("pe", ["alibi", "t5", "shaw", "kerple", "fire", "rope", "none"])
def test_the_statistics_read_the_weights_the_model_attends_with(pe):
    """The probe's q and k with the encoding's bias, softmaxed row by row, times v, give the attention
    output the model's own kernel computed (fast paths included): so entropy and spans describe the
    attention the model uses. (The fast paths work in float32 inside: agreement to 1e-3 relative, where a
    wrong bias moves the output by tens of percent.)"""
    from poscli.evaluation.inspection.attention_maps import _block_scores
    from poscli.model.gpt import GPT

    torch.manual_seed(1)
    model = GPT(tiny_config(pe, n_layer=1, d_model=32, train_length=48, attention_block=16)).double().eval()
    captured = {}
    attention = model.blocks[0].attn
    attention.probe = lambda layer, q, k, positions: captured.update(q=q, k=k, positions=positions)
    attention.qkv.register_forward_hook(lambda module, args, out: captured.update(v=out))
    attention.proj.register_forward_hook(lambda module, args, out: captured.update(y=args[0]))
    tokens = torch.randint(0, 256, (1, 80))
    model(tokens)
    q, k = captured["q"], captured["k"]
    B, Hh, Tt, hd = q.shape
    v = captured["v"].split(32, dim=2)[2].view(B, Tt, Hh, hd).transpose(1, 2)[0]  # (H, T, hd)
    add = bias_adder(model.encoding, q, captured["positions"], 0)
    scores = _block_scores(q[0] / math.sqrt(hd), k[0], add, 0, Tt)
    output = torch.softmax(scores, -1) @ v  # (H, T, hd)
    torch.testing.assert_close(output.transpose(0, 1).reshape(Tt, -1), captured["y"][0], rtol=1e-3, atol=1e-7)


def test_blocks_change_nothing_and_later_keys_never_reach_an_earlier_query():
    torch.manual_seed(0)
    q, k = torch.randn(H, T, HD, dtype=torch.float64), torch.randn(H, T, HD, dtype=torch.float64)
    whole = attention_statistics(q, k, block_elements=H * T * T)
    blocked = attention_statistics(q, k, block_elements=H * T * 7)
    for name in ("entropy", "within", "sink"):
        torch.testing.assert_close(getattr(blocked, name), getattr(whole, name), rtol=0, atol=1e-12)
    assert torch.equal(blocked.spans, whole.spans)
    changed = k.clone()
    changed[:, 120:] = torch.randn(H, T - 120, HD, dtype=torch.float64) * 5
    later = attention_statistics(q, changed)
    torch.testing.assert_close(later.entropy[:, :120], whole.entropy[:, :120], rtol=0, atol=1e-12)
    assert torch.equal(later.spans[..., :120], whole.spans[..., :120])


def test_float32_agrees_with_a_float64_reference_at_a_long_length():
    """Entropy and mass to float32's rounding; a float32 span holds its quantile of the float64 weights to
    within the rounding the span search allows (8 eps sqrt(T)), and one key less does not."""
    from poscli.attention.blockwise import RelativeBias
    from poscli.encodings.alibi import alibi_slopes
    from poscli.evaluation.inspection.biases import _add_relative

    torch.manual_seed(0)
    length = 1500
    q, k = torch.randn(2, length, 16, dtype=torch.float64) * 2, torch.randn(2, length, 16, dtype=torch.float64)
    relative = RelativeBias(slopes=torch.tensor(alibi_slopes(2), dtype=torch.float64) / 64)
    add = lambda scores, start, end: _add_relative(relative, scores, start, end)  # noqa: E731
    reference = attention_statistics(q, k, add)
    single = attention_statistics(q.float(), k.float(), add)
    torch.testing.assert_close(single.entropy.double(), reference.entropy, rtol=0, atol=1e-4)
    torch.testing.assert_close(single.within.double(), reference.within, rtol=0, atol=1e-5)
    scores = q @ k.transpose(-1, -2) / 4 + relative.slopes[:, None, None] * torch.arange(length, dtype=torch.float64)
    weights = torch.softmax(scores.masked_fill(torch.ones(length, length, dtype=torch.bool).triu(1), -torch.inf), -1)
    rows = torch.arange(length)
    slack = 2 * 8 * torch.finfo(torch.float32).eps * length**0.5
    for index, quantile in enumerate(QUANTILES):
        span = single.spans[index]  # (H, T)
        within = _mass_within(weights, rows, span)  # the float64 mass at distances <= span
        shorter = _mass_within(weights, rows, span - 1)
        assert (within >= quantile - slack).all() and ((shorter < quantile + slack) | (span == 0)).all()


def _mass_within(weights, rows, span):
    """weights (H, T, T) causal; the mass of row i at distances <= span[h, i] (0 for a negative span)."""
    cumulative = weights.cumsum(-1)  # mass on keys 0..j
    before = rows[None, :] - span - 1  # the last key outside the span
    outside = cumulative.gather(-1, before.clamp(min=0)[..., None])[..., 0] * (before >= 0)
    return (cumulative[..., -1] - outside) * (span >= 0)


def test_the_distance_grid_is_0_and_the_powers_of_two_below_the_length():
    assert distance_grid(1) == [0] and distance_grid(9) == [0, 1, 2, 4, 8] and distance_grid(8) == [0, 1, 2, 4]
