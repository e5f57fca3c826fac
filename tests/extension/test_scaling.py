"""Context-extension recipes against the formulas of their papers (transformers' conventions),
each computed here by hand in float64 Python, independently of poscli.extension.scaling."""

import math

import pytest
import torch

from poscli import encodings
from poscli.errors import PoscliError
from poscli.extension import methods, scaling
from poscli.extension.methods import rope_parameters
from tests.conftest import tiny_config

D, BASE, L = 32, 10000.0, 256


def by_hand_inv_freq(base=BASE, d=D):
    return [base ** (-2 * i / d) for i in range(d // 2)]


def close(tensor, values, rel=1e-5):
    assert tensor.dtype == torch.float32 and tensor.shape == (len(values),)
    assert tensor.double().tolist() == pytest.approx(values, rel=rel)


def test_every_method_has_the_same_signature_and_returns_frequencies_and_a_scale():
    assert set(methods.frequency_method_names()) == {
        "default",
        "pi",
        "ntk",
        "dynamic-ntk",
        "yarn",
        "ntk-by-parts",
        "llama3",
        "longrope",
        "base",
        "resonance",
        "resonance-yarn",
        "yarn-beta",
    }
    for method in methods.frequency_method_names():
        options = {"base": {"rope_base": 500000.0}, "longrope": {"long_factor": (2.0,) * (D // 2)}}.get(method, {})
        inv_freq, attention_scale = rope_parameters(method, D, BASE, 8.0, L, seq_len=2048, **options)
        assert inv_freq.shape == (D // 2,) and torch.isfinite(inv_freq).all() and (inv_freq > 0).all()
        assert isinstance(attention_scale, float)


def test_default_is_plain_rope():
    close(rope_parameters("default", D, BASE, 1.0, L)[0], by_hand_inv_freq())


def test_position_interpolation_divides_every_frequency_by_the_factor():
    inv_freq, scale = rope_parameters("pi", D, BASE, 8.0, L)
    close(inv_freq, [f / 8 for f in by_hand_inv_freq()])
    assert scale == 1.0


def test_ntk_raises_the_base_by_s_to_the_d_over_d_minus_2():
    inv_freq, scale = rope_parameters("ntk", D, BASE, 16.0, L)
    close(inv_freq, by_hand_inv_freq(BASE * 16 ** (D / (D - 2))))
    assert scale == 1.0


def test_ntk_lowest_frequency_is_divided_by_the_factor():
    inv_freq, _ = rope_parameters("ntk", D, BASE, 16.0, L)
    assert inv_freq[-1].item() == pytest.approx(by_hand_inv_freq()[-1] / 16, rel=1e-5)


def test_dynamic_ntk_keeps_the_original_frequencies_up_to_the_original_length():
    for seq_len in (None, 100, L):
        close(rope_parameters("dynamic-ntk", D, BASE, 4.0, L, seq_len=seq_len)[0], by_hand_inv_freq())


def test_dynamic_ntk_recomputes_the_base_from_the_sequence_length():
    s, T = 4.0, 3000
    base = BASE * ((s * T / L) - (s - 1)) ** (D / (D - 2))
    close(rope_parameters("dynamic-ntk", D, BASE, s, L, seq_len=T)[0], by_hand_inv_freq(base))


def yarn_by_hand(s, beta_fast=32, beta_slow=1, d=D, base=BASE, length=L):
    def correction_dim(r):
        return d * math.log(length / (r * 2 * math.pi)) / (2 * math.log(base))

    low = max(math.floor(correction_dim(beta_fast)), 0)
    high = min(math.ceil(correction_dim(beta_slow)), d - 1)
    if low == high:
        high += 0.001
    values = []
    for i, f in enumerate(by_hand_inv_freq(base, d)):
        ramp = min(1.0, max(0.0, (i - low) / (high - low)))
        w = 1 - ramp
        values.append((f / s) * (1 - w) + f * w)
    return values, (0.1 * math.log(s) + 1 if s > 1 else 1.0), (low, high)


@pytest.mark.parametrize("s", [2.0, 8.0, 128.0])
def test_yarn_matches_the_ntk_by_parts_formula_and_temperature(s):
    inv_freq, scale = rope_parameters("yarn", D, BASE, s, L)
    expected, expected_scale, (low, high) = yarn_by_hand(s)
    close(inv_freq, expected)
    assert scale == pytest.approx(expected_scale)
    # high frequencies (i < low) extrapolate unchanged, low ones (i >= high) are interpolated by s
    original = by_hand_inv_freq()
    assert inv_freq[0].item() == pytest.approx(original[0]) and low <= 1
    assert inv_freq[-1].item() == pytest.approx(original[-1] / s, rel=1e-5)


@pytest.mark.parametrize("s", [2.0, 8.0, 128.0])
def test_ntk_by_parts_is_yarn_without_its_temperature(s):
    """Peng et al. (2023), section 3.2: the ramp of eq. 17-18 alone; the temperature is YaRN's addition."""
    inv_freq, scale = rope_parameters("ntk-by-parts", D, BASE, s, L)
    close(inv_freq, yarn_by_hand(s)[0])
    assert scale == 1.0
    moved, _ = rope_parameters("ntk-by-parts", D, BASE, s, L, beta_fast=4, beta_slow=0.5)
    close(moved, yarn_by_hand(s, beta_fast=4, beta_slow=0.5)[0])


def test_yarn_attention_factor_replaces_the_temperature_and_leaves_the_frequencies():
    """transformers' ``attention_factor``: given, it is the scale on q and k; absent, 0.1 ln s + 1."""
    plain, plain_scale = rope_parameters("yarn", D, BASE, 16.0, L)
    given, given_scale = rope_parameters("yarn", D, BASE, 16.0, L, attention_factor=1.0)
    assert plain_scale == pytest.approx(0.1 * math.log(16) + 1) and given_scale == 1.0
    assert torch.equal(plain, given)
    assert rope_parameters("yarn", D, BASE, 16.0, L, attention_factor=1.5)[1] == 1.5
    with pytest.raises(PoscliError, match="--attention-factor -1: give a positive scale"):
        rope_parameters("yarn", D, BASE, 16.0, L, attention_factor=-1.0)


def longrope_by_hand(ext, base=BASE, d=D):
    """transformers' _compute_longrope_parameters: inv_freq = 1 / (ext_factors * base^(2i/d))."""
    return [1.0 / (e * base ** (2 * i / d)) for i, e in enumerate(ext)]


@pytest.mark.parametrize("s", [4.0, 16.0])
def test_longrope_matches_the_transformers_formula_and_switches_sets_at_the_original_length(s):
    long = [1.0 + 0.37 * i for i in range(D // 2)]
    short = [1.0 + 0.01 * i for i in range(D // 2)]
    for seq_len, expected in ((None, short), (L, short), (L + 1, long), (int(s * L), long)):
        inv_freq, scale = rope_parameters(
            "longrope", D, BASE, s, L, seq_len=seq_len, long_factor=long, short_factor=short
        )
        close(inv_freq, longrope_by_hand(expected), rel=1e-6)
        assert scale == pytest.approx(math.sqrt(1 + math.log(s) / math.log(L)))  # the paper's attention factor
    assert rope_parameters("longrope", D, BASE, s, L, seq_len=L, long_factor=long)[0].tolist() == pytest.approx(
        by_hand_inv_freq(), rel=1e-6
    )
    assert rope_parameters("longrope", D, BASE, s, L, long_factor=long, attention_factor=1.25)[1] == 1.25


def test_longrope_factors_are_checked_and_read_from_a_file(tmp_path):
    with pytest.raises(PoscliError, match="needs 16 long factors"):
        rope_parameters("longrope", D, BASE, 4.0, L)
    with pytest.raises(PoscliError, match="positive"):
        rope_parameters("longrope", D, BASE, 4.0, L, seq_len=4 * L, long_factor=[0.0] * (D // 2))
    good = tmp_path / "factors.json"
    good.write_text('{"long_factor": [1, 2.5], "short_factor": [1, 1]}')
    assert scaling.read_factors(good) == {"long_factor": (1.0, 2.5), "short_factor": (1.0, 1.0)}
    for text, message in (
        ("{", "cannot read it as JSON"),
        ('{"short_factor": [1]}', "expected"),
        ('{"long_factor": ["x"]}', "must be a number"),
    ):
        bad = tmp_path / "bad.json"
        bad.write_text(text)
        with pytest.raises(PoscliError, match=message):
            scaling.read_factors(bad)


def test_yarn_options_move_the_ramp():
    a, _ = rope_parameters("yarn", D, BASE, 8.0, L, beta_fast=32, beta_slow=1)
    b, _ = rope_parameters("yarn", D, BASE, 8.0, L, beta_fast=4, beta_slow=0.5)
    close(b, yarn_by_hand(8.0, beta_fast=4, beta_slow=0.5)[0])
    assert not torch.allclose(a, b)


def test_llama3_divides_long_wavelengths_keeps_short_ones_and_blends_between():
    s, low_f, high_f, length = 8.0, 1.0, 4.0, 8192
    d, base = 128, 500000.0
    inv_freq, scale = rope_parameters("llama3", d, base, s, length)
    assert scale == 1.0
    for i, f in enumerate(by_hand_inv_freq(base, d)):
        wavelength = 2 * math.pi / f
        if wavelength < length / high_f:
            expected = f
        elif wavelength > length / low_f:
            expected = f / s
        else:
            smooth = (length / wavelength - low_f) / (high_f - low_f)
            expected = (1 - smooth) * f / s + smooth * f
        assert inv_freq[i].item() == pytest.approx(expected, rel=1e-5), i


def test_base_change_uses_the_new_base_and_requires_it():
    close(rope_parameters("base", D, BASE, 4.0, L, rope_base=500000.0)[0], by_hand_inv_freq(500000.0))
    with pytest.raises(PoscliError, match="--rope-base"):
        rope_parameters("base", D, BASE, 4.0, L)


def test_factor_one_changes_nothing_for_the_scaling_methods():
    for method in ("pi", "ntk", "yarn", "ntk-by-parts", "llama3"):
        inv_freq, scale = rope_parameters(method, D, BASE, 1.0, L, seq_len=4 * L)
        close(inv_freq, by_hand_inv_freq())
        assert scale == 1.0


def test_unknown_method_and_foreign_options_are_clear_errors():
    with pytest.raises(PoscliError, match="unknown extension method 'no-such-method'; choose one of: "):
        rope_parameters("no-such-method", D, BASE, 2.0, L)
    with pytest.raises(PoscliError, match="--method self-extend does not rescale RoPE's frequencies"):
        rope_parameters("self-extend", D, BASE, 2.0, L)
    with pytest.raises(PoscliError, match="--method pi does not take --beta-fast"):
        rope_parameters("pi", D, BASE, 2.0, L, beta_fast=32)


def test_attention_scale_multiplies_q_and_k_so_logits_scale_by_its_square():
    plain = encodings.build(tiny_config("rope"))
    scaled = encodings.build(
        tiny_config("rope", rope_scaling={"method": "yarn", "factor": 16.0, "original_length": 32, "options": {}})
    )
    assert scaled.attention_scale == pytest.approx(0.1 * math.log(16) + 1)
    q, k = torch.randn(1, 4, 10, 8), torch.randn(1, 4, 10, 8)
    positions = torch.arange(10)
    # with the yarn frequencies swapped into the plain encoding, only the scale differs
    plain.inv_freq = scaled.inv_freq.clone()
    q0, k0 = plain.rotate(q, k, positions, 0)
    q1, k1 = scaled.rotate(q, k, positions, 0)
    torch.testing.assert_close(
        q1 @ k1.transpose(-1, -2), (q0 @ k0.transpose(-1, -2)) * scaled.attention_scale**2, rtol=1e-5, atol=1e-5
    )


def test_dynamic_ntk_encoding_recomputes_frequencies_for_each_length():
    encoding = encodings.build(
        tiny_config("rope", rope_scaling={"method": "dynamic-ntk", "factor": 4.0, "original_length": 32, "options": {}})
    )
    short, _ = encoding.frequencies_at(torch.arange(32))
    long, _ = encoding.frequencies_at(torch.arange(512))
    close(short, by_hand_inv_freq(BASE, 8))
    base = BASE * ((4.0 * 512 / 32) - 3) ** (8 / 6)
    close(long, by_hand_inv_freq(base, 8))


@pytest.mark.parametrize("d, base, s", [(16, 10000.0, 2.0), (64, 500000.0, 8.0), (128, 10000.0, 32.0)])
def test_methods_match_the_formulas_at_other_dimensions_bases_and_factors(d, base, s):
    length = 512
    close(rope_parameters("pi", d, base, s, length)[0], [f / s for f in by_hand_inv_freq(base, d)])
    close(rope_parameters("ntk", d, base, s, length)[0], by_hand_inv_freq(base * s ** (d / (d - 2)), d))
    T = 3 * length
    dynamic_base = base * ((s * T / length) - (s - 1)) ** (d / (d - 2))
    close(rope_parameters("dynamic-ntk", d, base, s, length, seq_len=T)[0], by_hand_inv_freq(dynamic_base, d))
    expected, expected_scale, _ = yarn_by_hand(s, d=d, base=base, length=length)
    inv_freq, scale = rope_parameters("yarn", d, base, s, length)
    close(inv_freq, expected)
    assert scale == pytest.approx(expected_scale)
    assert inv_freq[0].item() == pytest.approx(1.0) and inv_freq[-1].item() == pytest.approx(
        by_hand_inv_freq(base, d)[-1] / s, rel=1e-5
    )
