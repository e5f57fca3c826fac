"""RoPE angle coverage against its definitions: the pairs that meet angles training never showed them are
those whose wavelength exceeds the train length; PI keeps every angle inside the trained range; the pairs
YaRN and NTK-by-parts keep, ramp and interpolate are transformers' own (``_compute_yarn_parameters``)."""

import math

import pytest
import torch

from poscli.evaluation.inspection.angles import configured_frequencies, coverage_rows, pretrained_frequencies
from poscli.extension.scaling import ramp_bounds


def _unseen(rows, length):
    return [row["pair"] for row in rows if row["length"] == length and row["unseen"]]


@pytest.mark.parametrize("train_length, head_dim", [(128, 32), (256, 64), (4096, 128)])
def test_plain_rope_meets_unseen_angles_exactly_in_the_pairs_slower_than_its_train_length(train_length, head_dim):
    frequencies = configured_frequencies("rope", {}, train_length, head_dim)
    rows = coverage_rows(frequencies, [train_length, 8 * train_length])
    assert _unseen(rows, train_length) == []
    wavelengths = 2 * math.pi / frequencies.trained.double()
    assert _unseen(rows, 8 * train_length) == [i for i, w in enumerate(wavelengths.tolist()) if w > train_length]
    full = [row["pair"] for row in rows if row["length"] == train_length and row["full_period"]]
    assert full == [i for i, w in enumerate(wavelengths.tolist()) if w <= train_length]


def test_pi_keeps_every_angle_inside_the_trained_range_up_to_its_target():
    frequencies = configured_frequencies("rope", {}, 128, 32, "pi", 1024)
    rows = coverage_rows(frequencies, [1024, 2048])
    assert _unseen(rows, 1024) == [] and set(row["treatment"] for row in rows) == {"interpolated"}
    assert _unseen(rows, 2048) != [], "past its target PI's slow pairs leave the trained range again"


@pytest.mark.parametrize(
    "head_dim, base, original, factor, beta_fast, beta_slow",
    [(32, 10000.0, 128, 8, 32, 1), (64, 10000.0, 256, 16, 32, 1), (128, 500000.0, 4096, 4, 32, 1),
     (128, 10000.0, 4096, 32, 16, 2), (64, 10000.0, 1024, 8, 8, 0.5)],
)  # fmt: skip
def test_the_pairs_yarn_keeps_ramps_and_interpolates_are_transformers_own(
    head_dim, base, original, factor, beta_fast, beta_slow
):
    """transformers' inv_freq for the same parameters: a pair at its trained frequency is kept, one divided
    by the factor is interpolated, any other is ramped; poscli's classes come from ``ramp_bounds``."""
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import _compute_yarn_parameters

    config = LlamaConfig(
        hidden_size=head_dim * 2, num_attention_heads=2, max_position_embeddings=original * factor,
        rope_parameters={"rope_type": "yarn", "rope_theta": base, "factor": float(factor), "beta_fast": beta_fast,
                         "beta_slow": beta_slow, "original_max_position_embeddings": original},
    )  # fmt: skip
    theirs = _compute_yarn_parameters(config, None)[0].double()
    trained = 1.0 / (base ** (torch.arange(0, head_dim, 2).float() / head_dim))  # as transformers computes it
    expected = [
        "kept" if math.isclose(f, t, rel_tol=1e-6) else "interpolated" if math.isclose(f * factor, t, rel_tol=1e-6)
        else "ramped"
        for f, t in zip(theirs.tolist(), trained.tolist())
    ]  # fmt: skip
    options = {"beta_fast": beta_fast, "beta_slow": beta_slow}
    for method in ("yarn", "ntk-by-parts"):
        ours = configured_frequencies("rope", {"base": base}, original, head_dim, method, original * factor, options)
        assert ours.treatments() == expected, method
        torch.testing.assert_close(ours.used.double(), theirs, rtol=1e-5, atol=0)  # float32 powers
    hf = pretrained_frequencies("hf", config)
    assert hf.treatments() == expected and hf.train_length == original
    assert hf.ramp == ramp_bounds(head_dim, base, original, beta_fast, beta_slow)


def test_an_hf_config_folder_is_read_with_no_weights(tmp_path):
    from transformers import LlamaConfig

    from tests.cli.test_cli import poscli

    rope = {"rope_type": "default", "rope_theta": 10000.0}
    config = LlamaConfig(hidden_size=64, num_attention_heads=2, max_position_embeddings=512, rope_parameters=rope)
    config.save_pretrained(tmp_path / "m")
    done = poscli("inspect", f"hf:{tmp_path / 'm'}", "--lengths", "512,2k", "--results", str(tmp_path / "r"))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "r" / "inspect_angles.csv").exists() and (tmp_path / "r" / "inspect-angles.png").exists()


def test_inspect_with_no_run_draws_an_encoding_and_its_extensions(tmp_path):
    import pandas as pd

    from tests.cli.test_cli import poscli

    done = poscli("inspect", "--pe", "rope", "--train-length", "128", "--method", "pi", "--method", "yarn",
                  "--lengths", "1k", "--results", str(tmp_path))  # fmt: skip
    assert done.returncode == 0, done.stderr
    table = pd.read_csv(tmp_path / "inspect_angles.csv")
    assert set(table["run"]) == {"rope", "rope+pi-x8", "rope+yarn-x8"} and set(table["length"]) == {128, 1024}
    assert (tmp_path / "inspect-angles.png").stat().st_size > 10_000


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--pe", "alibi"], "--pe alibi does not rotate queries and keys"),
        (["--pe", "rope", "--method", "self-extend", "--target", "1k"], "angle coverage takes a frequency method"),
        (["--pe", "rope", "--method", "yarn", "--lengths", "128"], "give a length longer than --train-length"),
        ([], "give runs to inspect (poscli inspect RUN...) or --pe NAME"),
        (["--pe", "bogus"], "bogus"),
        (["--pe", "rope", "--head-dim", "0"], "--head-dim 0: give an even number of at least 4"),
        (["--pe", "rope", "--method", "pi", "--method", "yarn", "--method", "pi"], "--method pi is given twice"),
        (["--pe", "rope", "--max-tokens", "4k"], "--max-tokens: --pe with no run reads no text"),
        (["hf:/nowhere", "--method", "yarn"], "--method: runs read their own configuration"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, arguments, message):
    from tests.cli.test_cli import poscli

    done = poscli("inspect", *arguments, "--results", str(tmp_path / "r"))
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "r").exists()
