"""``poscli inspect`` on trained runs, through the CLI: the spans eval scores, every table and figure, the
bounds each quantity must keep, an extension beside its base, and one line for a run it cannot read."""

import pandas as pd
import pytest

from tests.cli.test_cli import TINY, poscli


@pytest.fixture(scope="module")
def inspected(tmp_path_factory):
    from tests.conftest import cli_workspace

    corpus, results = cli_workspace(tmp_path_factory, "inspect")
    for pe in ("rope", "alibi", "cope"):
        done = poscli("train", "--pe", pe, "--data", str(corpus), "--steps", "4", "--results", str(results),
                      "--name", pe, *TINY)  # fmt: skip
        assert done.returncode == 0, done.stderr
    done = poscli("extend", "rope", "--method", "yarn", "--target", "128", "--steps", "0", "--results", str(results))
    assert done.returncode == 0, done.stderr
    done = poscli("inspect", "rope", "alibi", "rope+yarn-x4", "--lengths", "64,128", "--max-tokens", "512",
                  "--results", str(results), "--quiet")  # fmt: skip
    assert done.returncode == 0, done.stderr
    return results, done


@pytest.mark.slow
def test_inspect_writes_every_table_and_figure_on_the_spans_eval_scores(inspected):
    results, done = inspected
    names = ["inspect.csv", "inspect.md", "inspect_entropy.csv", "inspect_mass.csv", "inspect_angles.csv",
             "inspect_frequencies.csv", "inspect-entropy.png", "inspect-span.png", "inspect-mass.png",
             "inspect-angles.png", "inspect-frequencies.png"]  # fmt: skip
    assert all((results / name).exists() for name in names), sorted(p.name for p in results.iterdir())
    assert "| rope | 128 |" in done.stderr  # the summary printed
    evaluated = poscli("eval", "alibi", "--lengths", "64,128", "--max-tokens", "512", "--results", str(results), "-q")
    assert evaluated.returncode == 0, evaluated.stderr
    scored = pd.read_csv(results / "ppl.csv")
    summary = pd.read_csv(results / "inspect.csv")
    assert set(summary.loc[summary["run"] == "alibi", "eval_set"]) == set(
        scored.loc[scored["run"] == "alibi", "eval_set"]
    )
    from poscli.evaluation.by_position import effective_context

    positions = pd.read_csv(results / "ppl_by_position.csv")
    for length in (64, 128):  # the effective context as eval's table reads it: less the 3-gram on the same windows
        at = positions[(positions["length"] == length) & (positions["mode"] == "nonoverlapping")]
        mine, three_gram = (at[at["run"] == run].to_dict("records") for run in ("alibi", "reference-3gram"))
        tokens, open_ended = effective_context(mine, three_gram)
        row = summary[(summary["run"] == "alibi") & (summary["length"] == length) & (summary["layer"] == "all")]
        assert (int(row["effective_context"].iloc[0]), bool(row["context_open_ended"].iloc[0])) == (tokens, open_ended)


@pytest.mark.slow
def test_each_quantity_keeps_its_bounds_and_the_train_length_is_its_own_reference(inspected):
    results, _ = inspected
    summary = pd.read_csv(results / "inspect.csv")
    assert set(summary["length"]) == {32, 64, 128}, "each run's train length is added for the ratio"
    assert (summary["entropy"] <= summary["uniform_entropy"] + 1e-6).all() and (summary["entropy"] >= 0).all()
    assert (summary["span50"] <= summary["span90"] + 1e-9).all() and (summary["span90"] < summary["length"]).all()
    assert summary["sink"].between(0, 1).all() and (summary["effective_context"] <= summary["length"]).all()
    at_train = summary[summary["length"] == summary["train_length"]]
    assert (at_train["entropy_ratio"] - 1).abs().max() < 1e-9
    mass = pd.read_csv(results / "inspect_mass.csv")
    shares = mass[mass["head"] == "all"].sort_values("distance").groupby(["run", "length", "layer"])["within"]
    assert shares.apply(lambda s: bool((s.diff().dropna() >= -1e-9).all())).all(), "mass within d grows with d"
    entropy = pd.read_csv(results / "inspect_entropy.csv")
    assert (entropy["entropy"] <= entropy["uniform"] + 1e-6).all()


@pytest.mark.slow
def test_rotary_runs_get_angles_and_frequency_use_and_an_extension_sits_beside_its_base(inspected):
    results, _ = inspected
    angles = pd.read_csv(results / "inspect_angles.csv")
    assert set(angles["run"]) == {"rope", "rope+yarn-x4"}
    extended = angles[angles["run"] == "rope+yarn-x4"]
    assert set(extended["treatment"]) <= {"kept", "ramped", "interpolated"} and "interpolated" in set(
        extended["treatment"]
    )
    assert set(extended["train_length"]) == {32}, "the extension's trained range is its base's"
    frequencies = pd.read_csv(results / "inspect_frequencies.csv")
    assert set(frequencies["run"]) == {"rope", "rope+yarn-x4"} and (frequencies["q_norm"] > 0).all()
    summary = pd.read_csv(results / "inspect.csv")
    assert set(summary.loc[summary["run"] == "rope+yarn-x4", "train_length"]) == {32}


@pytest.mark.slow
def test_inspecting_again_replaces_a_runs_rows_and_an_unreadable_run_is_one_line(inspected):
    results, _ = inspected
    before = pd.read_csv(results / "inspect.csv")
    again = poscli("inspect", "alibi", "--lengths", "64", "--max-tokens", "512", "--results", str(results), "-q")
    assert again.returncode == 0, again.stderr
    after = pd.read_csv(results / "inspect.csv")
    assert set(after.loc[after["run"] == "alibi", "length"]) == {32, 64}
    assert len(after[after["run"] == "rope"]) == len(before[before["run"] == "rope"])
    refused = poscli("inspect", "cope", "--lengths", "64", "--results", str(results))
    assert refused.returncode == 2 and "computes its own attention" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1


def test_the_effective_context_is_read_less_the_3grams_loss_on_the_same_windows():
    """Text that gets easier late in the window (the 3-gram's loss falls there) must not read as a model
    using more context: less the 3-gram, a model whose own gain stops at 8 tokens uses 15 (the octave
    after its last gain), where its raw loss, still falling with the text, would say all 64 (open-ended)."""
    import numpy as np

    from poscli.evaluation.by_position import loss_by_position
    from poscli.evaluation.evalset import EvalSet
    from poscli.evaluation.inspection.runs import _context

    spans, length = 2, 64
    eval_set = EvalSet("c", "stream", length, np.zeros((spans, length + 1), np.uint8), np.arange(spans),
                       [{0}] * spans)  # fmt: skip
    positions = np.arange(length)
    three_gram = np.tile(np.where(positions < 32, 2.0, 1.0), (spans, 1))  # (S, span_length): easier text late
    model = three_gram[0] + np.where(positions < 8, 1.0, 0.0)  # the model's gain from context ends at 8
    buckets = loss_by_position(model * spans, np.full(length, float(spans)), length)
    assert _context(buckets, None, eval_set, length) == (31, True)  # its own loss alone: the text's fall
    assert _context(buckets, three_gram, eval_set, length) == (15, False)
