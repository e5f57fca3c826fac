"""Self-Extend, ReRoPE, Leaky ReRoPE and attention sinks (poscli.extension.remap) against their papers'
definitions: every score computed pair by pair in float64 from the distance the method assigns."""

import math

import pytest
import torch

from poscli.errors import PoscliError
from poscli.extension import methods, remap
from poscli.model.gpt import GPT, CausalSelfAttention
from tests.conftest import tiny_config


def paper_distance(
    method: str, i: int, j: int, W: int, G: int = 1, k: float = math.inf, S: int = 0, local: int = 0, limit: int = 0
) -> float | None:
    """The distance query i sees key j at, written from the papers (None: not visible)."""
    d = i - j
    if d < 0:
        return None
    if method == "string":  # An et al. (2025): d < S kept, d >= S shifted to d - S + local (W is S here)
        return float(d) if d < W else float(d - W + local)
    if method == "dca":  # An et al. (2024): keys at j mod s; queries by chunk: own, previous, any before
        s, c = W, limit
        if i // s == j // s:
            return float(d)
        return float((min(s + i % s, c - 1) if i // s - j // s == 1 else c - 1) - j % s)
    if method == "lm-infinite":  # Han et al. (2024): local branch W, global branch S at the distance limit
        return float(d) if d < W else (float(limit) if j < S else None)
    if d < W:
        return float(d)
    if method == "self-extend":  # Jin et al. (2024): grouped query i // G + W - W // G, grouped key j // G
        return float((i // G + W - W // G) - j // G)
    if method == "rerope":  # Su (2023): clipped at w
        return float(W)
    if method == "leaky-rerope":  # Su (2023): w + (d - w) / k
        return W + (d - W) / k
    if method == "sinks":  # Xiao et al. (2024): cache of S sinks + W recent, positions within the cache
        return float(min(i, S + W - 1) - j) if j < S else None
    raise AssertionError(method)


def rotate_by(x: torch.Tensor, angle_positions: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """GPT-NeoX-layout rotation of x (..., hd) by position p (...): pair (m, m + hd/2) turns by p * inv_freq[m]."""
    angles = angle_positions[..., None] * inv_freq  # (..., hd/2)
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * angles.cos() - x2 * angles.sin(), x1 * angles.sin() + x2 * angles.cos()), dim=-1)


def textbook(q, k, v, plan: remap.Remap, pe: str, slopes=None) -> torch.Tensor:
    """softmax over visible keys of q_i . R(d'_ij) k_j / sqrt(hd) (rope) or q_i . k_j / sqrt(hd) - m d'_ij
    (alibi), d' the paper's distance. q, k, v: (H, T, hd) float64 -> (H, T, hd)."""
    H, T, hd = q.shape
    inv_freq = 10000.0 ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    distance = torch.full((T, T), float("nan"), dtype=torch.float64)
    for i in range(T):
        for j in range(T):
            extra = {"local": getattr(plan, "local", 0), "limit": getattr(plan, "limit", 0)}
            d = paper_distance(plan.method, i, j, plan.window, plan.group, plan.leak, plan.sinks, **extra)
            if d is not None:
                distance[i, j] = d
    visible = ~distance.isnan()
    d = distance.nan_to_num(0.0)
    if pe == "rope":  # q at position d, k at 0: <R(d) q, k> depends on the distance only
        scores = (rotate_by(q[:, :, None, :].expand(H, T, T, hd), d.expand(H, T, T), inv_freq) * k[:, None, :, :]).sum(
            -1
        )
    else:
        scores = q @ k.transpose(-1, -2) - slopes[:, None, None] * d * math.sqrt(hd)
    scores = (scores / math.sqrt(hd)).masked_fill(~visible, float("-inf"))
    return torch.softmax(scores, -1) @ v


PLANS = [
    ("self-extend", dict(window=6, group=3)),
    ("self-extend", dict(window=5, group=4)),
    ("rerope", dict(window=7)),
    ("leaky-rerope", dict(window=6, leak=3.0)),
    ("sinks", dict(sinks=3, window=9)),
    ("sinks", dict(sinks=0, window=9)),
    ("string", dict(shift=11, local=3)),
    ("lm-infinite", dict(sinks=3, window=9, limit=12)),
    ("lm-infinite", dict(sinks=0, window=9)),
    ("dca", dict(chunk=24)),
    ("dca", dict(chunk=7)),
]


CASES = [("rope", *plan) for plan in PLANS] + [
    ("alibi", *plan) for plan in PLANS if plan[0] == "sinks"
]  # sinks: any encoding


@pytest.mark.parametrize(
    "pe, method, options", CASES, ids=[f"{pe}-{m}-{'-'.join(map(str, o.values()))}" for pe, m, o in CASES]
)
@pytest.mark.parametrize("grad", [False, True], ids=["fast", "blocked"])
def test_attention_equals_the_papers_distances(pe, method, options, grad):
    """The model's attention layer, fast path (no grad, CPU band + fused far part) and blocked
    path (differentiable), against scores computed pair by pair. T = 70 crosses blocks of 16."""
    torch.manual_seed(0)
    plan = methods.plan_remap(method, 32, 512, **options)
    config = tiny_config(pe, remap=plan.to_dict())
    model = GPT(config)
    layer: CausalSelfAttention = model.blocks[0].attn
    T = 70
    x = torch.randn(1, T, config.d_model)
    with torch.set_grad_enabled(grad):
        got = layer(x, torch.arange(T), True, plan)  # (1, T, C)
    q, k, v = (
        t.view(T, config.n_head, config.head_dim).transpose(0, 1).double()
        for t in layer.qkv(x)[0].split(config.d_model, dim=-1)
    )
    slopes = model.encoding.slopes.double() if pe == "alibi" else None
    expected = textbook(q, k, v, plan, pe, slopes)  # (H, T, hd)
    expected = layer.proj.weight.double() @ expected.transpose(0, 1).reshape(T, config.d_model).T  # (C, T)
    torch.testing.assert_close(got[0].double(), expected.T, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "method, options",
    [
        ("self-extend", dict(window=8, group=1)),  # G = 1: every grouped position is the true one
        ("rerope", dict(window=100)),  # a window longer than the sequence clips nothing
        ("leaky-rerope", dict(window=8, leak=1.0)),  # slope 1: w + (d - w) = d
        ("sinks", dict(sinks=4, window=28)),  # a cache as long as the sequence evicts nothing
        ("string", dict(shift=32, local=2)),  # a shift as long as the sequence shifts nothing
        ("lm-infinite", dict(sinks=4)),  # a local branch as long as the sequence masks nothing
    ],
)
def test_a_remapping_that_changes_no_distance_is_plain_rope(method, options):
    torch.manual_seed(0)
    plain = GPT(tiny_config("rope")).eval()
    plan = (
        remap.Remap.from_dict({"method": "rerope", "window": 100})
        if method == "rerope"
        else methods.plan_remap(method, 32, 64, **options)
    )  # (w >= L is refused by plan)
    remapped = GPT(tiny_config("rope", remap=plan.to_dict())).eval()
    remapped.load_state_dict(plain.state_dict())
    tokens = torch.randint(0, 256, (2, 32 if method in ("sinks", "string", "lm-infinite") else 90))
    with torch.no_grad():
        torch.testing.assert_close(remapped(tokens), plain(tokens), rtol=1e-4, atol=1e-4)


def test_sinks_embed_absolute_positions_at_their_cache_slot():
    """A learned table is read at min(i, S + R - 1): the table's first rows only, however long the input."""
    plan = methods.plan_remap("sinks", 32, 1024, sinks=4)
    assert plan.window == 28 and plan.cache_slots == 32
    model = GPT(tiny_config("learned", remap=plan.to_dict())).eval()
    with torch.no_grad():
        logits = model(torch.randint(0, 256, (1, 200)))  # the table has 32 rows
    assert logits.isfinite().all()
    assert torch.equal(plan.embed_positions(torch.arange(40)), torch.arange(40).clamp(max=31))


@pytest.mark.parametrize("L, target", [(128, 1024), (128, 8192), (256, 2048), (256, 65536), (100, 101)])
def test_default_plans_reach_the_target_within_the_trained_distances(L, target):
    """Self-Extend's default group makes the farthest distance (L - W) G + W >= target fit in L;
    Leaky ReRoPE's default slope maps the target's farthest distance to L - 1 (Su, 2023)."""
    se = methods.plan_remap("self-extend", L, target)
    W, G = se.window, se.group
    assert W == L // 4 and target <= (L - W) * G + W
    farthest = lambda G: (target - 1) // G + W - W // G  # noqa: E731, the paper's positions at i = target - 1, j = 0
    far_q, far_k = se.far_positions(torch.tensor([target - 1, 0]))
    assert far_q[0] - far_k[1] == farthest(G) <= L - 1
    assert G == 1 or farthest(G - 1) > L - 1  # the smallest such group
    leaky = methods.plan_remap("leaky-rerope", L, target)
    far_q, far_k = leaky.far_positions(torch.tensor([target - 1, 0]))
    assert float(far_q[0] - far_k[1]) == pytest.approx(min(L - 1, target - 1))


@pytest.mark.parametrize(
    "method, options, message",
    [
        ("self-extend", dict(window=32), "--window 32 must be shorter than the run's train length 32"),
        ("self-extend", dict(group=0.5), "--group must be a whole number"),
        ("sinks", dict(sinks=4, window=29), "--sinks 4 + --window 29 is more than the train length 32"),
        ("leaky-rerope", dict(leak=0.5), "--leak must be at least 1"),
        ("rerope", dict(group=2), "--method rerope does not take --group"),
        ("string", dict(shift=4, local=4), "--shift 4 must be more than --local 4"),
        ("lm-infinite", dict(limit=40), "--window 32 and --limit 40 must be at most the train length 32"),
    ],
)
def test_bad_options_are_one_line_errors(method, options, message):
    with pytest.raises(PoscliError, match=message.replace("+", r"\+").replace(".", r"\.")):
        methods.plan_remap(method, 32, 512, **options)


def test_pose_positions_skip_in_order_and_cover_distances_up_to_the_target():
    """Zhu et al. (2024): chunks of consecutive positions, skips non-decreasing, all below the
    target; over many draws the largest distance seen reaches the target's."""
    from poscli.extension.positions.pose import pose_positions

    generator = torch.Generator().manual_seed(0)
    farthest = 0
    for _ in range(200):
        positions = pose_positions(32, 512, 2, generator, torch.device("cpu"))
        steps = positions.diff()
        assert len(positions) == 32 and positions[0] == 0 and positions[-1] < 512
        assert (steps >= 1).all() and int((steps > 1).sum()) <= 1  # two chunks: at most one jump
        farthest = max(farthest, int(positions[-1] - positions[0]))
    assert farthest >= 500
    three = pose_positions(32, 512, 3, generator, torch.device("cpu"))
    assert int((three.diff() > 1).sum()) <= 2 and three[-1] < 512
    assert torch.equal(pose_positions(32, 512, 1, generator, torch.device("cpu")), torch.arange(32))


def _ms_poe_by_hand(layer, x, ratio_of_head):
    """Zhang et al. (2024): head h sees key j at distance (i - j) / r_h; pair by pair in float64. -> (T, C)"""
    config = layer.config
    T, H, hd = x.shape[1], config.n_head, config.head_dim
    q, k, v = (t.view(T, H, hd).transpose(0, 1).double() for t in layer.qkv(x)[0].split(config.d_model, dim=-1))
    inv_freq = 10000.0 ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    distance = (torch.arange(T)[:, None] - torch.arange(T)[None, :]).double()  # (T, T)
    heads = []
    for h in range(H):
        d = (distance / ratio_of_head[h]).clamp(min=0)
        scores = (rotate_by(q[h][:, None, :].expand(T, T, hd), d, inv_freq) * k[h][None, :, :]).sum(-1) / math.sqrt(hd)
        scores = scores.masked_fill(distance < 0, float("-inf"))
        heads.append(torch.softmax(scores, -1) @ v[h])  # (T, hd)
    return (layer.proj.weight.double() @ torch.stack(heads, 1).reshape(T, config.d_model).T).T


def _sharpened(layer):
    """The layer with its query weights scaled up, head by head, so its heads' attention has outliers
    (at initialization every weight is near the mean and every head's statistic is 0)."""
    config = layer.config
    with torch.no_grad():
        layer.qkv.weight[config.d_model : 2 * config.d_model] *= 20.0  # every key
        for h, scale in enumerate((4.0, 16.0, 2.0, 8.0)):  # an order that is neither the heads' nor reversed
            layer.qkv.weight[h * config.head_dim : (h + 1) * config.head_dim] *= scale
    return layer


def _outlier_order(layer, x):
    """The authors' head statistic by hand: each head's share of the last query's weights (un-rotated
    q and k) above 3x their mean; heads sorted by it, largest first."""
    config = layer.config
    T, H, hd = x.shape[1], config.n_head, config.head_dim
    q, k, _ = (t.view(T, H, hd).transpose(0, 1).double() for t in layer.qkv(x)[0].split(config.d_model, dim=-1))
    shares = []
    for h in range(H):
        weights = torch.softmax(k[h] @ q[h][-1] / math.sqrt(hd), 0)  # (T,)
        shares.append(float((weights > 3 / T).double().mean()))
    return sorted(range(H), key=lambda h: -shares[h]), shares


@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("head_order", ["attention", "reversed", "index"])
def test_ms_poe_rotates_each_head_at_its_own_compressed_distance(grad, head_order):
    """Head h takes ratio r_{order[h]}, r_i = 1.2 + 0.6 i / H (the authors' code); order: each input's
    outlier statistic, reversed head order, or head order. Computed pair by pair in float64."""
    torch.manual_seed(5)
    plan = methods.plan_remap("ms-poe", 32, 256, head_order=head_order)
    config = tiny_config("rope", remap=plan.to_dict())
    layer: CausalSelfAttention = _sharpened(GPT(config).blocks[0].attn)
    T, H = 50, config.n_head
    x = torch.randn(1, T, config.d_model)
    with torch.set_grad_enabled(grad):
        got = layer(x, torch.arange(T), True, plan)  # (1, T, C)
    ratios = [1.2 + 0.6 * i / H for i in range(H)]
    torch.testing.assert_close(plan.ratios(H), torch.tensor(ratios, dtype=torch.float64))
    order, shares = _outlier_order(layer, x)
    # distinct shares, and an order that tells head -> ratio from ratio -> head (not its own inverse)
    assert len(set(shares)) == H and [order.index(h) for h in range(H)] != order
    index = {"attention": order, "reversed": list(range(H - 1, -1, -1)), "index": list(range(H))}[head_order]
    expected = _ms_poe_by_hand(layer, x, [ratios[index[h]] for h in range(H)])
    torch.testing.assert_close(got[0].double(), expected, rtol=1e-4, atol=1e-5)


def test_ms_poe_orders_the_heads_of_each_input_on_its_own():
    """Two inputs in one batch whose statistics differ get each its own order (not the batch's first)."""
    torch.manual_seed(1)
    plan = methods.plan_remap("ms-poe", 32, 256)
    config = tiny_config("rope", remap=plan.to_dict())
    layer: CausalSelfAttention = _sharpened(GPT(config).blocks[0].attn)
    inputs = [torch.randn(1, 40, config.d_model) for _ in range(6)]
    orders = [_outlier_order(layer, x)[0] for x in inputs]
    first, other = next((a, b) for a in range(6) for b in range(6) if orders[a] != orders[b])
    batch = torch.cat([inputs[first], inputs[other]])
    with torch.no_grad():
        got = layer(batch, torch.arange(40), True, plan)  # (2, T, C)
        for row, which in enumerate((first, other)):
            torch.testing.assert_close(got[row], layer(inputs[which], torch.arange(40), True, plan)[0])
