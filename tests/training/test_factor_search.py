"""LongRoPE's factor search (Ding et al., 2024): constraints, never worse than its seeds, resumable."""

import json
import re

import numpy as np
import pytest

from poscli.errors import PoscliError
from poscli.training import factor_search
from poscli.training.factor_search import Fitness, SearchSettings, constrain, search_factors, seed_factors
from tests.cli.test_cli import TINY, poscli
from tests.conftest import cli_workspace


@pytest.fixture(scope="module")
def rope_run(tmp_path_factory):
    corpus, results = cli_workspace(tmp_path_factory, "search")
    done = poscli(
        "train", "--pe", "rope", "--data", str(corpus), "--steps", "4", "--name", "r", "--results", str(results), *TINY
    )
    assert done.returncode == 0, done.stderr
    return results


def test_seeds_are_pi_ntk_and_yarn_as_factors_and_constraints_hold():
    pi, ntk, parts = seed_factors(8, 10000.0, 4.0, 32)
    np.testing.assert_allclose(pi, 4.0)  # PI divides every frequency by s
    assert ntk[0] == pytest.approx(1.0) and ntk[-1] == pytest.approx(
        4.0 ** (6 / 8 * 8 / 6), rel=1e-5
    )  # NTK: (b s^(d/(d-2)))^(2i/d) / b^(2i/d)
    assert parts[0] == pytest.approx(1.0) and parts[-1] == pytest.approx(
        4.0
    )  # by-parts: high frequencies kept, low ones interpolated
    raw = np.array([0.5, 3.0, 2.0, 9.0])
    np.testing.assert_allclose(constrain(raw, 4.0), [1.0, 3.0, 3.0, 5.0])  # clipped to [1, 1.25 s], non-decreasing


@pytest.mark.slow
def test_search_is_never_worse_than_its_seeds_and_resumes_to_the_same_result(rope_run, tmp_path):
    settings = SearchSettings("r", 128, population=5, generations=2, parents=2, windows=1, seed=3)
    whole = search_factors(settings, tmp_path / "whole.json", rope_run, "cpu")
    half = search_factors(
        SearchSettings(**{**settings.__dict__, "generations": 1}), tmp_path / "half.json", rope_run, "cpu"
    )
    assert half["generation"] == 1
    resumed = search_factors(settings, tmp_path / "half.json", rope_run, "cpu")  # continues from the saved generation
    assert resumed["best"] == whole["best"] and resumed["trajectory"] == whole["trajectory"]
    best = [step["best_so_far"] for step in whole["trajectory"]]
    assert best == sorted(best, reverse=True)  # the best so far never gets worse
    fitness = Fitness(rope_run / "runs" / "r", 128, 1, 3, "cpu")
    seeds = [fitness(constrain(s, 4.0)) for s in seed_factors(8, 10000.0, 4.0, 32)]
    assert whole["best"]["loss"] <= min(seeds) + 1e-9
    written = json.loads((tmp_path / "whole.json").read_text())
    factors = np.array(written["long_factor"])
    assert len(factors) == 4 and written["short_factor"] == [1.0] * 4
    assert (np.diff(factors) >= 0).all() and factors.min() >= 1 and factors.max() <= 1.25 * 4
    with pytest.raises(factor_search.PoscliError, match="other settings"):
        search_factors(SearchSettings(**{**settings.__dict__, "windows": 2}), tmp_path / "whole.json", rope_run, "cpu")


@pytest.mark.slow
def test_needle_fitness_scores_the_passkey_answer_only_and_drives_the_search(rope_run, tmp_path):
    """LongRoPE2's needle-driven fitness (Shang et al., 2025): prompts of the target length whose scored
    targets are exactly the answer's digits and its full stop; the search runs on it and is never
    worse than its seeds."""
    import re

    import torch

    from poscli.model import runs

    folder = rope_run / "runs" / "r"
    batch, starts = factor_search.tuning_split(folder, runs.read_config(folder), 128, 3, 0, "cpu", "needle")
    assert batch.shape == (3, 129)
    for row, start in zip(batch, starts):
        answer = bytes(row[start + 1 :].tolist()).decode()
        assert re.fullmatch(r"\d{1,5}\.", answer), answer
        assert "is" in bytes(row[start - 20 : start + 1].tolist()).decode()  # the question just before it
    settings = SearchSettings("r", 128, population=4, generations=1, parents=2, windows=2, seed=1, score="needle")
    state = search_factors(settings, tmp_path / "needle.json", rope_run, "cpu")
    fitness = Fitness(folder, 128, 2, 1, "cpu", "needle")
    seeds = [fitness(constrain(s, 4.0)) for s in seed_factors(8, 10000.0, 4.0, 32)]
    assert state["best"]["loss"] <= min(seeds) + 1e-9
    logits_free = torch.full((1, 128, 256), 0.0)
    uniform = factor_search.split_loss(lambda tokens: logits_free, batch[:1], starts[:1])
    assert uniform == pytest.approx(torch.log(torch.tensor(256.0)).item())  # a uniform model: ln V per answer token


@pytest.mark.slow
def test_extend_searches_by_the_needle_when_asked_and_keeps_it_apart(rope_run):
    """``--factors search --search-score needle`` runs LongRoPE2's needle-scored search (its own
    state file, apart from the perplexity search's) and the new run carries the factors it found;
    --search-score without --factors search, or an unknown score, is one line that says what to type."""
    common = ("--method", "longrope", "--target", "128", "--steps", "0", "--results", str(rope_run), "--quiet")
    done = poscli("extend", "r", *common, "--factors", "search", "--search-score", "needle", "--name", "r-l2")
    assert done.returncode == 0, done.stderr
    searches = rope_run / "searches"
    state = json.loads((searches / "r-longrope-128-needle.json.search.json").read_text())
    assert state["settings"]["score"] == "needle"
    assert not (searches / "r-longrope-128.json").exists()  # the perplexity search's file is another
    found = json.loads((searches / "r-longrope-128-needle.json").read_text())["long_factor"]
    extension = json.loads((rope_run / "runs" / "r-l2" / "config.json").read_text())["extension"]
    assert extension["options"]["long_factor"] == found
    for flags, message in (
        (("--search-score", "needle"), "add --factors search"),
        (("--factors", "search", "--search-score", "answers"), "choose perplexity or needle"),
    ):
        refused = poscli("extend", "r", *common, *flags, "--name", "r-refused")
        assert refused.returncode == 2 and message in refused.stderr and "Traceback" not in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr


@pytest.mark.parametrize(
    "given, message",
    [
        ({"generations": 0}, "--generations must be at least 1, got 0"),
        ({"windows": 0}, "--windows must be at least 1, got 0"),
        ({"parents": 5, "population": 4}, "--parents 5 is more than the --population 4"),
        ({"score": "answers"}, "--score 'answers' is unknown; choose perplexity or needle"),
    ],
)
def test_a_search_setting_out_of_range_is_a_one_line_error_naming_its_flag(given, message):
    with pytest.raises(PoscliError, match=re.escape(message)):
        SearchSettings("r", 128, **given).check()
