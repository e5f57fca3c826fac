"""The encodings of 2024-2026 (FoX, CoPE, stick-breaking, PoPE, dynamic position bias, scaled
sinusoidal): each against its paper's formula written out pair by pair in float64, and each that
x-transformers implements against its module with the same weights (to 1e-5)."""

import math

import pytest
import torch
import torch.nn.functional as F
from x_transformers import attend
from x_transformers import x_transformers as xt

from poscli import encodings
from poscli.model.gpt import GPT
from tests.conftest import tiny_config

F64 = torch.float64
B, H, T, HD, C = 2, 4, 11, 8, 32  # tiny_config: 4 heads, width 32, head dim 8


def qkv(dtype=F64, length=T, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(B, H, length, HD, generator=generator, dtype=dtype) for _ in range(3))


def softmax_rows(scores: list[float]) -> list[float]:
    top = max(scores)
    weights = [math.exp(s - top) for s in scores]
    return [w / sum(weights) for w in weights]


def weighted(weights, v, b, h, keys) -> torch.Tensor:
    return sum((w * v[b, h, j] for w, j in zip(weights, keys)), torch.zeros(HD, dtype=v.dtype))


def dot(a, b) -> float:
    return float((a * b).sum().detach())


def build(pe, **options):
    return encodings.build(tiny_config(pe, options=options or None)).double()


@pytest.fixture(params=["one-step", "chunked"])
def scan(request, monkeypatch):
    """CoPE and stick-breaking scan keys in chunks from the nearest back, carrying what the nearer
    chunks summed: with "chunked", blocks of 3 queries and chunks of 4 keys, so the 11 tokens of
    these tests cross several of each and every carry is used (the first block, whose keys fit in
    one chunk, takes the direct path that "one-step" takes for every row)."""
    from poscli.attention import data_dependent

    if request.param == "chunked":
        monkeypatch.setattr(data_dependent, "SCAN_ROWS", 3)
        monkeypatch.setattr(data_dependent, "SCAN_KEYS", 4)
    return request.param


# ------------------------------------------------------------------ FoX (Lin et al., 2025)


def test_fox_attention_is_softmax_plus_the_forget_gates_summed_between_key_and_query():
    torch.manual_seed(0)
    fox = build("fox")
    with torch.no_grad():
        for gate in fox.gates:
            gate.bias.normal_(0, 2)  # gates well away from 1, so the bias matters
    x = torch.randn(B, T, C, dtype=F64)
    q, k, v = qkv()
    out = fox.attend(x, q, k, v, torch.arange(T), layer=1)
    gate = fox.gates[1]
    log_f = [[[math.log(torch.sigmoid(dot(gate.weight[h], x[b, t]) + gate.bias[h]).item()) for t in range(T)]
              for h in range(H)] for b in range(B)]  # fmt: skip
    for b in range(B):
        for h in range(H):
            for i in range(T):
                keys = range(i + 1)
                scores = [dot(q[b, h, i], k[b, h, j]) / math.sqrt(HD) + sum(log_f[b][h][j + 1 : i + 1]) for j in keys]
                expected = weighted(softmax_rows(scores), v, b, h, keys)
                torch.testing.assert_close(out[b, h, i], expected, rtol=1e-9, atol=1e-9)


def test_fox_with_a_fixed_gate_is_alibi_and_with_open_gates_is_nope():
    """f = exp(-m) at every token makes D_ij = -m (i - j), ALiBi's bias; f = 1 makes it NoPE."""
    from poscli.encodings.alibi import alibi_slopes

    fox = build("fox")
    slopes = torch.tensor(alibi_slopes(H), dtype=F64)
    x = torch.randn(B, T, C, dtype=F64)
    q, k, v = qkv()
    with torch.no_grad():
        fox.gates[0].weight.zero_()
        fox.gates[0].bias.copy_(torch.log(torch.expm1(slopes)).neg())  # sigmoid(b) = exp(-m)
    distance = (torch.arange(T)[:, None] - torch.arange(T)[None, :]).to(F64)
    alibi = (-slopes[:, None, None] * distance).masked_fill(distance < 0, float("-inf"))  # (H, T, T)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=alibi)
    torch.testing.assert_close(fox.attend(x, q, k, v, torch.arange(T), layer=0), expected, rtol=1e-9, atol=1e-9)
    with torch.no_grad():
        fox.gates[0].bias.fill_(60.0)  # log sigmoid(60) ~ -1e-26
    nope = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(fox.attend(x, q, k, v, torch.arange(T), layer=0), nope, rtol=1e-9, atol=1e-9)


# ------------------------------------------------------------------ stick-breaking (Tan et al., 2025)


@pytest.mark.parametrize("attend_current", [False, True])
def test_stick_breaking_weights_are_each_keys_share_of_the_stick_left(attend_current, scan):
    sb = build("stick-breaking", attend_current=attend_current)
    q, k, v = qkv()
    out = sb.attend(None, q, k, v, torch.arange(T), layer=0)
    last = 0 if attend_current else 1  # the nearest key a query reads is i - last
    for b in range(B):
        for h in range(H):
            for i in range(T):
                keys = range(i + 1 - last)
                beta = {j: 1 / (1 + math.exp(-dot(q[b, h, i], k[b, h, j]) / math.sqrt(HD))) for j in keys}
                weights = [beta[j] * math.prod(1 - beta[t] for t in range(j + 1, i + 1 - last)) for j in keys]
                expected = weighted(weights, v, b, h, keys)
                torch.testing.assert_close(out[b, h, i], expected, rtol=1e-9, atol=1e-9)
                assert sum(weights) <= 1 + 1e-12  # a stick, not a distribution


def test_stick_breaking_serves_the_nearest_key_first():
    """Two keys identical to the query: the nearer takes sigmoid(z), the farther only what is left."""
    sb = build("stick-breaking")
    q = torch.zeros(1, 1, 3, HD, dtype=F64)
    q[..., 0] = 4.0
    v = torch.zeros(1, 1, 3, HD, dtype=F64)
    v[0, 0, 0, 0], v[0, 0, 1, 1] = 1.0, 1.0  # key 0 writes dimension 0, key 1 dimension 1
    out = sb.attend(None, q, q, v, torch.arange(3), layer=0)[0, 0, 2]
    beta = 1 / (1 + math.exp(-16 / math.sqrt(HD)))
    assert out[1].item() == pytest.approx(beta) and out[0].item() == pytest.approx(beta * (1 - beta))


# ------------------------------------------------------------------ CoPE (Golovneva et al., 2024)


def test_cope_positions_are_the_gates_summed_from_key_to_query_and_index_interpolated_embeddings(scan):
    cope = build("cope", max_positions=6)  # small, so some positions clamp
    with torch.no_grad():
        for table in cope.embeddings:
            table.normal_()
    q, k, v = qkv(seed=1)
    q = q * 2  # larger scores: gates far from 1/2
    out = cope.attend(None, q, k, v, torch.arange(T), layer=1)
    e = cope.embeddings[1]
    for b in range(B):
        for h in range(H):
            for i in range(T):
                keys = range(i + 1)
                z = [dot(q[b, h, i], k[b, h, j]) / math.sqrt(HD) for j in keys]
                gates = [1 / (1 + math.exp(-s)) for s in z]
                scores = []
                for j in keys:
                    p = min(sum(gates[j : i + 1]), 5.0)
                    low, high = math.floor(p), math.ceil(p)
                    term = (p - low) * dot(q[b, h, i], e[high]) + (1 - (p - low)) * dot(q[b, h, i], e[low])
                    scores.append(z[j] + term)
                expected = weighted(softmax_rows(scores), v, b, h, keys)
                torch.testing.assert_close(out[b, h, i], expected, rtol=1e-9, atol=1e-9)


# ------------------------------------------------------------------ the training path of CoPE and stick-breaking


def through_scan(encoding, q, k, v, monkeypatch):
    """The encoding's attention with gradients through autograd on the chunked scan (the path the
    formula tests above check), instead of its hand-written backward."""
    from poscli.attention import data_dependent

    monkeypatch.setattr(data_dependent, "SCAN_KEYS", 0)  # no length trains at once
    monkeypatch.setattr(data_dependent, "SCAN_ROWS", 4)
    return encoding.attend(None, q, k, v, torch.arange(q.shape[2]), layer=0)


@pytest.fixture(params=[64, 4], ids=["one-block", "row-blocks"])
def row_block(request, monkeypatch):
    """The training path's query rows in one block, or in blocks of 4 (each against only the keys it
    sees), so the 11 tokens of these tests cross several blocks."""
    from poscli.attention import nearest_first

    monkeypatch.setattr(nearest_first, "ROW_BLOCK", request.param)
    return request.param


@pytest.mark.parametrize("attend_current", [False, True])
def test_stick_breaking_training_path_has_the_formulas_values_and_gradients(attend_current, row_block, monkeypatch):
    """With gradients wanted, stick-breaking attends over every key at once with a hand-written
    backward: its outputs and gradients equal autograd's through the formula-checked scan, and
    the backward passes gradcheck (numerical derivatives in float64)."""
    from poscli.attention.nearest_first import stick_breaking_attention

    sb = build("stick-breaking", attend_current=attend_current)
    q, k, v = (x.requires_grad_() for x in qkv(seed=2))
    out = sb.attend(None, q, k, v, torch.arange(T), layer=0)
    weights = torch.randn(out.shape, dtype=F64)
    grads = torch.autograd.grad((out * weights).sum(), (q, k, v))
    expected = through_scan(sb, q, k, v, monkeypatch)
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-10)
    for got, want in zip(grads, torch.autograd.grad((expected * weights).sum(), (q, k, v)), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-10)
    small = [x.detach()[:1, :2, :6, :4].clone().requires_grad_() for x in qkv(seed=3)]
    assert torch.autograd.gradcheck(lambda q, k, v: stick_breaking_attention(q, k, v, not attend_current), small)


def test_cope_training_path_has_the_formulas_values_and_gradients(row_block, monkeypatch):
    """As above for CoPE, with positions that clamp at the last embedding (max_positions 4) and
    gradients reaching the embeddings."""
    from poscli.attention.nearest_first import cope_attention

    cope = build("cope", max_positions=4)
    with torch.no_grad():
        cope.embeddings[0].normal_()
    q, k, v = (x.requires_grad_() for x in qkv(seed=4))
    embeddings = cope.embeddings[0]
    out = cope.attend(None, q, k, v, torch.arange(T), layer=0)
    weights = torch.randn(out.shape, dtype=F64)
    grads = torch.autograd.grad((out * weights).sum(), (q, k, v, embeddings))
    expected = through_scan(cope, q, k, v, monkeypatch)
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-10)
    for got, want in zip(grads, torch.autograd.grad((expected * weights).sum(), (q, k, v, embeddings)), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-10)
    small = [x.detach()[:1, :2, :7, :4].clone().requires_grad_() for x in qkv(seed=5)]
    table = torch.randn(3, 4, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(cope_attention, (*small, table))


def chunked_scan(monkeypatch):
    """Blocks of 3 queries over chunks of 4 keys (the "chunked" fixture's sizes)."""
    from poscli.attention import data_dependent

    monkeypatch.setattr(data_dependent, "SCAN_ROWS", 3)
    monkeypatch.setattr(data_dependent, "SCAN_KEYS", 4)


def counted(monkeypatch, module, name: str) -> dict:
    """Count the calls of ``module.name`` (it still runs). -> {"calls": N}, updated as it is called."""
    count, original = {"calls": 0}, getattr(module, name)

    def spy(*args, **kwargs):
        count["calls"] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, spy)
    return count


def test_cope_keys_past_the_last_position_go_through_the_fused_kernel_with_the_same_result(monkeypatch):
    """Once every row's gates summed over the nearer keys reach max_positions - 1, each farther key's
    position is clamped there: the scan hands those keys to one flash-attention call with the row
    constant q . e[P - 1] and merges it, and the result is the one-step path's."""
    from poscli.attention import data_dependent

    cope = build("cope", max_positions=2)
    with torch.no_grad():
        cope.embeddings[0].normal_()
    q, k, v = qkv(length=40, seed=6)
    with torch.no_grad():
        one_step = cope.attend(None, q, k, v, torch.arange(40), layer=0)
        chunked_scan(monkeypatch)
        fused = counted(monkeypatch, data_dependent, "flash")
        chunked = cope.attend(None, q, k, v, torch.arange(40), layer=0)
    assert fused["calls"] > 0
    torch.testing.assert_close(chunked, one_step, rtol=1e-12, atol=1e-12)


def test_stick_breaking_stops_scanning_where_the_stick_is_taken_with_identical_outputs(monkeypatch):
    """Scores so large that the nearest keys take every row's stick: the farther keys' weights are
    exactly 0 in float32, so the scan stops there and its output is bitwise the full scan's."""
    from poscli.attention import data_dependent
    from poscli.encodings import stick_breaking

    sb = build("stick-breaking").float()
    q, k, v = qkv(torch.float32, length=40, seed=7)
    k = q.abs() * 3  # q . k large and positive: beta near 1
    q = q.abs() * 3
    chunked_scan(monkeypatch)
    scored = counted(monkeypatch, data_dependent, "scaled_scores")
    with torch.no_grad():
        stopped = sb.attend(None, q, k, v, torch.arange(40), layer=0)
        calls_stopped = scored["calls"]
        monkeypatch.setattr(stick_breaking, "stick_taken", lambda rest: False)
        full = sb.attend(None, q, k, v, torch.arange(40), layer=0)
    assert calls_stopped < scored["calls"] - calls_stopped
    assert torch.equal(stopped, full)


# ------------------------------------------------------------------ PoPE (Gopalakrishnan et al., 2025)


def pope_scores(pope, q, k, positions):
    """q'_i . k'_j / sqrt(2 hd), as the attention kernel scores PoPE's 2 hd-dimensional vectors."""
    q2, k2 = pope.rotate(q, k, positions, layer=0)
    return q2 @ k2.transpose(-1, -2) / math.sqrt(q2.shape[-1])


def test_pope_score_is_softplus_magnitudes_times_cos_of_distance_times_frequency_minus_the_phase_bias():
    pope = build("pope")
    with torch.no_grad():
        pope.phase_bias.uniform_(-2 * math.pi, 0)
    q, k, _ = qkv()
    positions = torch.arange(T)
    scores = pope_scores(pope, q, k, positions)
    theta = [10000.0 ** (-c / HD) for c in range(HD)]
    softplus = lambda x: math.log1p(math.exp(x))  # noqa: E731
    delta = pope.phase_bias.detach()
    for b, h, i, j in [(0, 0, 3, 1), (1, 2, 10, 0), (0, 3, 7, 7), (1, 1, 5, 9)]:
        expected = sum(
            softplus(q[b, h, i, c]) * softplus(k[b, h, j, c]) * math.cos((i - j) * theta[c] - float(delta[h, c]))
            for c in range(HD)
        ) / math.sqrt(HD)
        assert scores[b, h, i, j].item() == pytest.approx(expected, rel=1e-6, abs=1e-8)


def test_pope_scores_depend_only_on_relative_position():
    pope = build("pope")
    with torch.no_grad():
        pope.phase_bias.uniform_(-2 * math.pi, 0)
    q, k, _ = qkv()
    near = pope_scores(pope, q, k, torch.arange(T))
    far = pope_scores(pope, q, k, torch.arange(T) + 5000)
    torch.testing.assert_close(far, near, rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------------ dynamic position bias, scaled sinusoidal


def test_dynamic_position_bias_is_the_mlp_of_the_log_distance():
    dpb = build("dpb")
    bias = dpb.score_bias(torch.zeros(1, H, T, HD, dtype=F64), torch.arange(T), torch.arange(T), layer=0)  # (H, T, T)
    linears = [m for m in dpb.mlp if isinstance(m, torch.nn.Linear)]
    for i, j in [(0, 0), (5, 2), (10, 0), (9, 8)]:
        hidden = torch.tensor([math.log(1 + i - j)], dtype=F64)
        for linear in linears[:-1]:
            hidden = F.silu(linear.weight @ hidden + linear.bias)
        expected = linears[-1].weight @ hidden + linears[-1].bias  # (H,)
        torch.testing.assert_close(bias[:, i, j], expected, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(bias[:, 7, 3], bias[:, 9, 5])  # a function of i - j alone


def test_scaled_sinusoidal_adds_one_learned_scale_times_sin_and_cos():
    encoding = build("scaled-sinusoidal")
    with torch.no_grad():
        encoding.scale.fill_(0.37)
    x = torch.randn(B, T, C, dtype=F64)
    added = encoding.embed(x, torch.arange(T)) - x  # (B, T, C)
    half = C // 2
    for position in (0, 3, 10):
        for i in (0, 5, half - 1):
            angle = position * 10000.0 ** (-i / half)
            assert added[1, position, i].item() == pytest.approx(0.37 * math.sin(angle), abs=1e-6)
            assert added[1, position, half + i].item() == pytest.approx(0.37 * math.cos(angle), abs=1e-6)


# ------------------------------------------------------------------ against x-transformers


def test_fox_matches_x_transformers_data_dependent_alibi():
    torch.manual_seed(0)
    fox = encodings.build(tiny_config("fox"))
    reference = xt.DataDependentAlibi(C, H)
    with torch.no_grad():
        reference.to_forget_gates[0].weight.copy_(fox.gates[1].weight)
        reference.to_forget_gates[0].bias.normal_(0, 2)
        fox.gates[1].bias.copy_(reference.to_forget_gates[0].bias)
    x = torch.randn(B, T, C)
    q, k, v = qkv(torch.float32)
    expected, _ = attend.Attend(causal=True)(q, k, v, attn_bias=reference(x))
    torch.testing.assert_close(fox.attend(x, q, k, v, torch.arange(T), layer=1), expected, rtol=1e-5, atol=1e-5)


def test_cope_matches_x_transformers():
    torch.manual_seed(0)
    cope = encodings.build(tiny_config("cope", options=dict(max_positions=8)))
    reference = xt.CoPE(HD, H, max_pos=8)
    with torch.no_grad():
        reference.pos_emb.normal_()
        cope.embeddings[0].copy_(reference.pos_emb)
    q, k, v = qkv(torch.float32)
    expected, _ = attend.Attend(causal=True, cope=reference)(q, k, v)
    torch.testing.assert_close(cope.attend(None, q, k, v, torch.arange(T), layer=0), expected, rtol=1e-5, atol=1e-5)


def test_dynamic_position_bias_matches_x_transformers():
    torch.manual_seed(0)
    dpb = encodings.build(tiny_config("dpb"))  # width d_model / 4 = 8, depth 2, log distance
    reference = xt.DynamicPositionBias(C // 4, heads=H, depth=2, log_distance=True)
    ours = [m for m in dpb.mlp if isinstance(m, torch.nn.Linear)]
    theirs = [m for m in reference.modules() if isinstance(m, torch.nn.Linear)]
    assert len(ours) == len(theirs) == 3
    with torch.no_grad():
        for mine, their in zip(ours, theirs):
            mine.weight.copy_(their.weight)
            mine.bias.copy_(their.bias)
    expected = reference(T, T)  # (H, T, T), both directions
    bias = dpb.score_bias(torch.zeros(1, H, T, HD), torch.arange(T), torch.arange(T), layer=0)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    torch.testing.assert_close(bias[:, causal], expected[:, causal], rtol=1e-5, atol=1e-5)


def test_scaled_sinusoidal_matches_x_transformers():
    encoding = encodings.build(tiny_config("scaled-sinusoidal"))
    reference = xt.ScaledSinusoidalEmbedding(C)
    with torch.no_grad():
        encoding.scale.fill_(0.3)
        reference.scale.fill_(0.3)
    x = torch.randn(B, T, C)
    torch.testing.assert_close(
        encoding.embed(x, torch.arange(T)) - x, reference(x).expand(B, -1, -1), rtol=1e-5, atol=1e-5
    )


def test_pope_matches_x_transformers_polar_embedding():
    torch.manual_seed(0)
    pope = encodings.build(tiny_config("pope"))
    reference = xt.PolarEmbedding(HD, H)
    with torch.no_grad():
        reference.learned_bias.uniform_(-2 * math.pi, 0)
        pope.phase_bias.copy_(reference.learned_bias[:, 0])
    q, k, v = qkv(torch.float32)
    freqs, bias = reference(torch.arange(T))
    q_ref, k_ref = xt.apply_polar_pos_emb(q, freqs), xt.apply_polar_pos_emb(k, freqs + bias)
    expected, _ = attend.Attend(causal=True, scale=HD**-0.5)(q_ref, k_ref, v)
    q2, k2 = pope.rotate(q, k, torch.arange(T), layer=0)
    torch.testing.assert_close(
        F.scaled_dot_product_attention(q2, k2, v, is_causal=True), expected, rtol=1e-5, atol=1e-5
    )


# ------------------------------------------------------------------ in the model


@pytest.mark.parametrize("pe", ["fox", "cope", "stick-breaking"])
def test_an_encoding_that_replaces_attention_trains_its_own_parameters_through_the_model(pe):
    model = GPT(tiny_config(pe))
    tokens = torch.randint(0, 256, (2, 24))
    model.loss(tokens[:, :-1], tokens[:, 1:]).backward()
    grads = [p.grad for p in model.encoding.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    if pe != "stick-breaking":  # it has no parameters of its own
        assert any(g.abs().sum() > 0 for g in grads)
