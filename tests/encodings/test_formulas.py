"""Each encoding against its paper's formula, computed independently of the implementation."""

import cmath
import math

import pytest
import torch

from poscli import encodings
from poscli.encodings.alibi import alibi_slopes
from poscli.encodings.base import sinusoid_table
from poscli.encodings.rope import rotate_pairs
from poscli.encodings.t5 import t5_causal_bucket
from poscli.extension.scaling import default_inv_freq as rope_inv_freq
from tests.conftest import tiny_config

# --------------------------------------------------------------------------- RoPE


def rope_scores(layout, q, k, q_position, k_position, base=10000.0):
    """<R(m) q, R(n) k> through the implementation. q, k: (hd,)."""
    encoding = encodings.build(tiny_config("rope", options=dict(layout=layout, base=base), d_model=4 * q.numel()))
    positions = torch.tensor([q_position, k_position])
    both = torch.stack([q, k])[None, None]  # (1, 1, 2, hd)
    rotated, _ = encoding.rotate(both, both, positions, layer=0)
    return torch.dot(rotated[0, 0, 0].double(), rotated[0, 0, 1].double()).item()


@pytest.mark.parametrize("layout", ["halves", "interleaved"])
def test_rope_scores_depend_only_on_relative_position(layout):
    torch.manual_seed(0)
    q, k = torch.randn(32), torch.randn(32)
    for m, n in [(0, 3), (5, 1), (100, 37), (7, 7)]:
        reference = rope_scores(layout, q, k, m, n)
        for shift in (1, 13, 1000, 5000):
            assert rope_scores(layout, q, k, m + shift, n + shift) == pytest.approx(reference, rel=1e-4, abs=1e-3)
    assert rope_scores(layout, q, k, 0, 3) != pytest.approx(rope_scores(layout, q, k, 0, 9), rel=1e-3)


def test_rope_interleaved_matches_complex_multiplication():
    """RoFormer eq. 16 in complex form: pair (x_2i, x_2i+1) at position m is multiplied by e^{i m theta_i}."""
    torch.manual_seed(1)
    hd, base, position = 8, 10000.0, 37
    x = torch.randn(hd, dtype=torch.float64)
    expected = []
    for i in range(hd // 2):
        theta = base ** (-2 * i / hd)
        z = complex(x[2 * i], x[2 * i + 1]) * cmath.exp(1j * position * theta)
        expected += [z.real, z.imag]
    angles = position * rope_inv_freq(hd, base).double()
    got = rotate_pairs(x[None, None, None], angles.cos(), angles.sin(), "interleaved")[0, 0, 0]
    torch.testing.assert_close(got, torch.tensor(expected, dtype=torch.float64), rtol=1e-6, atol=1e-6)


def test_rope_layouts_are_the_same_rotation_up_to_a_fixed_permutation():
    torch.manual_seed(2)
    hd = 16
    x = torch.randn(1, 1, 5, hd)
    angles = torch.arange(5.0)[:, None] * rope_inv_freq(hd, 10000.0)[None]
    # interleaved pair i is (2i, 2i+1); halves pair i is (i, i + hd/2)
    to_halves = torch.cat([torch.arange(0, hd, 2), torch.arange(1, hd, 2)])
    interleaved = rotate_pairs(x, angles.cos(), angles.sin(), "interleaved")
    halves = rotate_pairs(x[..., to_halves], angles.cos(), angles.sin(), "halves")
    torch.testing.assert_close(halves, interleaved[..., to_halves])


def test_rope_inverse_frequencies_follow_the_base():
    for base in (10000.0, 500000.0):
        expected = [base ** (-2 * i / 32) for i in range(16)]
        torch.testing.assert_close(
            rope_inv_freq(32, base).double(), torch.tensor(expected, dtype=torch.float64), rtol=1e-6, atol=0
        )


# --------------------------------------------------------------------------- sinusoidal


def test_sinusoidal_pe_at_pos_plus_k_is_one_linear_map_of_pe_at_pos():
    """Vaswani et al. 3.5: for each offset k, PE(pos + k) = M_k PE(pos) for every pos, where M_k
    rotates each (sin, cos) pair by k * w_i."""
    d = 16
    positions = torch.arange(0, 2000)
    table = sinusoid_table(positions, d).double()  # (P, d)
    frequencies = [10000 ** (-2 * i / d) for i in range(d // 2)]
    for k in (1, 5, 64, 777):
        M = torch.zeros(d, d, dtype=torch.float64)
        for i, w in enumerate(frequencies):
            c, s = math.cos(k * w), math.sin(k * w)
            # sin(a + b) = sin a cos b + cos a sin b ; cos(a + b) = cos a cos b - sin a sin b
            M[2 * i, 2 * i], M[2 * i, 2 * i + 1] = c, s
            M[2 * i + 1, 2 * i], M[2 * i + 1, 2 * i + 1] = -s, c
        predicted = table[: len(positions) - k] @ M.T
        torch.testing.assert_close(predicted, table[k:], rtol=0, atol=2e-3)  # float32 table, angles up to 2000


def test_sinusoidal_table_matches_the_formula():
    d, pos = 8, 123
    row = sinusoid_table(torch.tensor([pos]), d)[0].double()
    for i in range(d // 2):
        angle = pos / 10000 ** (2 * i / d)
        assert row[2 * i].item() == pytest.approx(math.sin(angle), abs=1e-5)
        assert row[2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-5)


# --------------------------------------------------------------------------- ALiBi


def test_alibi_slopes_for_8_heads_are_the_papers():
    assert alibi_slopes(8) == pytest.approx([1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 32, 1 / 64, 1 / 128, 1 / 256])


def test_alibi_slopes_for_12_heads_are_the_papers():
    expected = [2.0**-e for e in (1, 2, 3, 4, 5, 6, 7, 8, 0.5, 1.5, 2.5, 3.5)]
    assert alibi_slopes(12) == pytest.approx(expected)


def test_alibi_slopes_for_other_head_counts():
    assert alibi_slopes(4) == pytest.approx([2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8])
    assert alibi_slopes(6) == pytest.approx([2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8, 2.0**-1, 2.0**-3])
    assert alibi_slopes(1) == pytest.approx([2.0**-8])


def test_alibi_bias_is_minus_slope_times_distance():
    encoding = encodings.build(tiny_config("alibi", n_head=8, d_model=64))
    positions = torch.arange(20)
    bias = encoding.score_bias(torch.zeros(1, 8, 20, 8), positions, positions, layer=0)  # (H, T, T)
    slopes = alibi_slopes(8)
    for h, i, j in [(0, 5, 5), (0, 9, 2), (3, 19, 0), (7, 12, 11)]:
        assert bias[h, i, j].item() == pytest.approx(-slopes[h] * (i - j))


# --------------------------------------------------------------------------- T5


def t5_bucket_by_hand(n, num_buckets=32, max_distance=128):
    """Raffel et al. (2020) / the T5 code: n < 16 own bucket; else
    16 + floor(log(n/16) / log(128/16) * 16), capped at 31."""
    exact = num_buckets // 2
    if n < exact:
        return n
    return min(
        num_buckets - 1,
        exact + math.floor(math.log(n / exact) / math.log(max_distance / exact) * (num_buckets - exact)),
    )


def test_t5_buckets_for_distances_0_to_300_match_the_formula():
    distances = torch.arange(0, 301)
    got = t5_causal_bucket(distances, 32, 128).tolist()
    assert got == [t5_bucket_by_hand(n) for n in range(301)]
    assert got[:16] == list(range(16)) and set(got[128:]) == {31}


def test_t5_bias_reads_the_bucket_table():
    encoding = encodings.build(tiny_config("t5"))
    with torch.no_grad():
        encoding.bucket_bias.weight.copy_(torch.randn(32, 4))
    positions = torch.arange(300)
    bias = encoding.score_bias(torch.zeros(1, 4, 300, 8), positions, positions, layer=0)  # (H, T, T)
    for i, j in [(0, 0), (20, 3), (200, 10), (299, 0), (150, 149)]:
        expected = encoding.bias_scale * encoding.bucket_bias.weight[t5_bucket_by_hand(i - j), :]
        torch.testing.assert_close(bias[:, i, j], expected)


# --------------------------------------------------------------------------- Shaw


def test_shaw_bias_is_q_dot_relative_key_clipped_beyond_k():
    clip = 4
    encoding = encodings.build(tiny_config("shaw", options=dict(clip=clip)))
    hd = encoding.config.head_dim
    q = torch.randn(1, 4, 12, hd)
    positions = torch.arange(12)
    bias = encoding.score_bias(q, positions, positions, layer=1)  # (B, H, T, T)
    table = encoding.relative_keys[1]  # row r: relative position -r
    for h, i, j in [(0, 0, 0), (1, 5, 3), (2, 11, 7), (3, 11, 0), (0, 9, 1)]:
        row = min(i - j, clip)
        expected = torch.dot(q[0, h, i], table[row]) / math.sqrt(hd)
        assert bias[0, h, i, j].item() == pytest.approx(expected.item(), abs=1e-5)
    # every distance beyond k shares the vector for k
    torch.testing.assert_close(bias[0, :, 11, :7], bias[0, :, 11, 7:8].expand(-1, 7))
    assert encoding.relative_keys.shape == (2, clip + 1, hd)


def test_xpos_score_is_rope_score_times_zeta_to_the_distance_over_gamma():
    """Sun et al. (2022): q_m . k_n = sum_i zeta_i^((m - n)/gamma) x (RoPE's term of pair i), with
    zeta_i = (2i/d + 0.4)/1.4; so the score depends only on m - n."""
    from poscli.encodings import build

    config = tiny_config("xpos", options=dict(gamma=64.0))
    xpos, rope = build(config), build(tiny_config("rope"))
    hd = config.head_dim
    torch.manual_seed(0)
    q, k = torch.randn(1, 1, 1, hd), torch.randn(1, 1, 1, hd)

    def score(encoding, m, n):
        positions = torch.tensor([n, m]) if m > n else torch.tensor([m, n])
        T = 2
        qs, ks = q.expand(1, 1, T, hd).clone(), k.expand(1, 1, T, hd).clone()
        q_rot, k_rot = encoding.rotate(qs, ks, positions, layer=0)
        index = {int(p): i for i, p in enumerate(positions)}
        return q_rot[0, 0, index[m]], k_rot[0, 0, index[n]]

    zeta = (2 * torch.arange(hd // 2) / hd + 0.4) / 1.4  # (hd/2,)
    for m, n in [(7, 3), (40, 1), (300, 100)]:
        q_x, k_x = score(xpos, m, n)
        q_r, k_r = score(rope, m, n)
        per_pair = (q_r * k_r).view(2, hd // 2).sum(0)  # halves layout: pair i is (i, i + hd/2)
        expected = (per_pair * zeta ** ((m - n) / 64.0)).sum()
        torch.testing.assert_close((q_x * k_x).sum(), expected, rtol=1e-4, atol=1e-5)
    shifted = [(q_x * k_x).sum() for q_x, k_x in (score(xpos, 50, 20), score(xpos, 1050, 1020))]
    torch.testing.assert_close(shifted[0], shifted[1], rtol=1e-4, atol=1e-5)


def test_xpos_stays_finite_at_64k_positions():
    from poscli.encodings import build

    xpos = build(tiny_config("xpos"))
    positions = torch.arange(65536)
    q = torch.randn(1, 1, 65536, tiny_config("xpos").head_dim)
    q_rot, k_rot = xpos.rotate(q, q.clone(), positions, layer=0)
    assert torch.isfinite(q_rot).all() and torch.isfinite(k_rot).all()


def test_kerple_bias_is_zero_at_distance_zero_and_falls_with_distance():
    """Chi et al. (2022): -r1 log(1 + r2 d) with r1, r2 > 0 is 0 at d = 0 and strictly decreasing."""
    from poscli.encodings import build

    kerple = build(tiny_config("kerple"))
    with torch.no_grad():
        kerple.raw_r1.normal_()
        kerple.raw_r2.normal_()
    positions = torch.arange(200)
    bias = kerple.score_bias(torch.zeros(1, 4, 200, 8), positions[-1:], positions, layer=0)[
        :, 0
    ]  # (H, 200): distance 199..0
    by_distance = bias.flip(-1)  # distance 0, 1, ..., 199
    assert torch.all(by_distance[:, 0] == 0)
    assert torch.all(by_distance[:, 1:] < by_distance[:, :-1])
    r1, r2 = kerple.strengths()
    torch.testing.assert_close(by_distance[:, 10], -r1 * torch.log1p(10 * r2))


def test_fire_input_is_the_progressively_normalised_log_distance():
    """Li et al. (2023): f is applied to psi(i - j) / psi(max(L, i)), psi(x) = log(c x + 1)."""
    from poscli.encodings import build

    fire = build(tiny_config("fire", train_length=64))  # L starts at the train length
    c, L = abs(fire.c.item()), fire.threshold().item()
    positions = torch.arange(2000)
    x = fire.normalised_distance(positions, positions)  # (T, T)
    for i, j in [(10, 3), (63, 0), (64, 64), (500, 7), (1999, 0)]:
        expected = math.log(c * (i - j) + 1) / math.log(c * max(L, i) + 1)
        assert x[i, j].item() == pytest.approx(expected, rel=1e-5)
    causal = positions[:, None] >= positions[None, :]
    assert x[causal].min() >= 0 and x[causal].max() <= 1  # in [0, 1] at every length: nothing unseen far out
    below = x[:64, :64]  # queries below L: a function of i - j alone
    torch.testing.assert_close(below[40, 30], below[20, 10])


def test_fire_mlp_is_its_linear_pieces():
    """A one-layer ReLU MLP of a scalar is piecewise linear with a switch per unit at x = -b1 / w1
    (the form poscli.attention.distance_attention applies): the pieces from relu_pieces equal the MLP in
    float64 everywhere, exactly at each switch and on either side of it, and off the switches
    their gradients with respect to the weights equal the MLP's."""
    from poscli.encodings.fire import relu_pieces

    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(1, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).double()
    with torch.no_grad():
        mlp[0].weight[3] = 0.0  # a unit that never switches: a constant relu(b1)
    w1, b1, w2, b2 = mlp[0].weight[:, 0], mlp[0].bias, mlp[2].weight, mlp[2].bias
    breakpoints, intercept, slope = relu_pieces(w1, b1, w2, b2)
    assert len(breakpoints) == 31 and bool((breakpoints.diff() >= 0).all())
    x = torch.cat(
        (torch.linspace(-5, 5, 1001, dtype=torch.float64), breakpoints, breakpoints - 1e-9, breakpoints + 1e-9)
    )
    segment = torch.searchsorted(breakpoints, x, right=True)  # pieces: x >= breakpoint k is past it
    pieces = intercept[segment] + slope[segment] * x[:, None]  # (N, H)
    torch.testing.assert_close(pieces, mlp(x[:, None]), rtol=1e-12, atol=1e-12)
    weights, generic = list(mlp.parameters()), slice(0, 1001)  # off the switches, where ReLU's gradient is defined
    for got, want in zip(
        torch.autograd.grad(pieces[generic].sum(), weights), torch.autograd.grad(mlp(x[generic, None]).sum(), weights)
    ):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9)


@pytest.mark.slow
def test_fire_can_represent_alibi():
    """FIRE learns ALiBi as a special case (Li et al., 2023): with L above every position and
    c -> 0, psi(i - j) / psi(L) -> (i - j) / L, and the MLP only has to scale it by -m_h L.
    Fit FIRE's bias alone to ALiBi's for 128 positions with Adam; the error must be a few
    percent of a bias that reaches -32."""
    from poscli.encodings import build

    torch.manual_seed(0)
    positions = torch.arange(128)
    fire = build(tiny_config("fire", train_length=128))
    fire.threshold_multiplier.requires_grad_(False)  # L stays at 128, above every position
    slopes = torch.tensor(alibi_slopes(4))
    distance = (positions[:, None] - positions[None, :]).float()  # (T, T)
    causal = distance >= 0
    target = (-slopes[:, None, None] * distance)[:, causal]  # (H, causal pairs)
    q = torch.zeros(1, 4, 128, 8)
    optimizer = torch.optim.Adam([p for p in fire.parameters() if p.requires_grad], lr=3e-2)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, 400)

    def error():
        return fire.score_bias(q, positions, positions, layer=0)[:, causal] - target  # (H, pairs)

    start = error().detach()
    for _ in range(400):
        loss = error().pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
    final = error().detach()
    target_rms = target.pow(2).mean().sqrt()
    assert start.pow(2).mean().sqrt() > 0.9 * target_rms  # it did not start there
    assert final.pow(2).mean().sqrt() < 0.03 * target_rms
    assert final.abs().max() < 0.05 * target.abs().max()


def rotate_once(config, x, positions):
    from poscli.encodings import build

    return build(config).rotate(x, x.clone(), positions, layer=0)[0]


def test_p_rope_with_keep_1_is_rope_and_lower_keeps_leave_the_lowest_pairs_unturned():
    """Barbero et al. (2025): p-RoPE keeps the highest fraction of frequencies and zeroes the rest."""
    torch.manual_seed(0)
    config = tiny_config("rope")  # head dim 8: 4 pairs, halves layout
    x, positions = torch.randn(1, 1, 20, 8), torch.arange(20)
    torch.testing.assert_close(
        rotate_once(tiny_config("rope", options=dict(keep=1.0)), x, positions), rotate_once(config, x, positions)
    )
    half = rotate_once(tiny_config("rope", options=dict(keep=0.5)), x, positions)
    dropped = [2, 3, 6, 7]  # the two lowest-frequency pairs: (2, 6) and (3, 7)
    torch.testing.assert_close(half[..., dropped], x[..., dropped])
    kept = [0, 1, 4, 5]
    torch.testing.assert_close(half[..., kept], rotate_once(config, x, positions)[..., kept])


def test_rotary_fraction_rotates_only_the_first_dimensions_as_a_smaller_rope():
    """GPT-NeoX's rotary_pct: the first F x d dimensions are a RoPE of that size, the rest pass through."""
    torch.manual_seed(0)
    x, positions = torch.randn(1, 1, 20, 8), torch.arange(20)
    partial = rotate_once(tiny_config("rope", options=dict(rotary_fraction=0.5)), x, positions)
    torch.testing.assert_close(partial[..., 4:], x[..., 4:])
    small = tiny_config("rope", d_model=16)  # head dim 4, same base: the RoPE of the rotated part
    torch.testing.assert_close(partial[..., :4], rotate_once(small, x[..., :4].contiguous(), positions))


def test_extension_methods_apply_to_the_rotated_dimensions_of_the_variants():
    from poscli.encodings import build

    config = tiny_config(
        "rope",
        options=dict(rotary_fraction=0.5, keep=0.5),
        rope_scaling={"method": "yarn", "factor": 4.0, "original_length": 32, "options": {}},
    )
    encoding = build(config)
    assert encoding.inv_freq.shape == (encoding.rotary_dim // 2,)
    assert encoding.inv_freq[-1] == 0 and encoding.inv_freq[0] > 0
    x = torch.randn(1, 1, 128, 8)
    assert torch.isfinite(encoding.rotate(x, x.clone(), torch.arange(128), layer=0)[0]).all()
