"""poscli tune: the candidates a method declares, the scorer, resuming, and extend --options-from."""

import json

import pytest

from poscli.errors import PoscliError
from poscli.extension import methods
from poscli.training.tune import TuneSettings, at_edge, candidates, read_options


def settings(**overrides) -> TuneSettings:
    return TuneSettings(**{"run": "r", "method": "self-extend", "target": 256, **overrides})


def test_candidates_start_with_the_defaults_and_a_larger_budget_extends_a_smaller_one():
    method = methods.get("yarn")
    space = method.search_space(32, 256)
    full = 1
    for values in space.values():
        full *= len(values)
    small, large = (candidates(method, 32, 256, settings(method="yarn", budget=b)) for b in (5, 9))
    assert small[0] == {} and len(small) == 5 and len(large) == 9
    assert large[:5] == small  # resuming with more budget keeps what was evaluated
    everything = candidates(method, 32, 256, settings(method="yarn", budget=1000))
    assert len(everything) == full + 1 and len({json.dumps(c, sort_keys=True) for c in everything}) == full + 1


def test_every_declared_value_is_an_option_the_method_takes():
    for name in methods.REGISTRY.builtin_names():
        method = methods.get(name)
        space = method.search_space(128, 1024)
        assert set(space) <= set(method.options), name
        assert all(len(values) >= 2 for values in space.values()), name


def test_a_grid_overrides_and_an_unknown_option_or_an_untunable_method_is_a_one_line_error():
    method = methods.get("self-extend")
    chosen = candidates(method, 32, 256, settings(grid={"window": [4.0, 8.0]}, budget=100))
    assert {c.get("window") for c in chosen[1:]} == {4.0, 8.0}
    with pytest.raises(PoscliError, match="does not take --beta-fast"):
        candidates(method, 32, 256, settings(grid={"beta_fast": [1.0, 2.0]}))
    with pytest.raises(PoscliError, match="--method pi declares no options to tune"):
        candidates(methods.get("pi"), 32, 256, settings(method="pi"))


def test_options_from_checks_the_method(tmp_path):
    path = tmp_path / "chosen.json"
    path.write_text(json.dumps({"method": "self-extend", "options": {"window": 8.0, "group": 4.0}}))
    assert read_options(path, None) == ("self-extend", {"window": 8.0, "group": 4.0})
    with pytest.raises(PoscliError, match="holds options for --method self-extend, not yarn"):
        read_options(path, "yarn")
    with pytest.raises(PoscliError, match="no such file"):
        read_options(tmp_path / "missing.json", None)


def test_a_choice_at_the_smallest_or_largest_value_tried_is_flagged_and_an_inner_one_is_not():
    space = {"window": [8.0, 16.0, 32.0], "group": [4.0, 6.0, 8.0, 10.0], "switch": [0.0, 1.0]}
    assert at_edge({"window": 32.0, "group": 4.0, "switch": 1.0}, space) == {"window": "largest", "group": "smallest"}
    assert at_edge({"window": 16.0, "group": 10.0, "switch": 0.0}, space) == {"group": "largest"}
    assert at_edge({}, space) == {}  # the method's defaults are not a grid point
    assert at_edge({"window": 16.0}, {"window": [32.0, 16.0, 8.0]}) == {}  # an inner value, in any order


def test_an_unknown_score_or_a_budget_under_one_is_a_one_line_error_naming_the_choices():
    with pytest.raises(PoscliError, match=r"--score 'answers' is unknown; choose perplexity or needle"):
        settings(score="answers").check()
    with pytest.raises(PoscliError, match="--budget must be at least 1"):
        settings(budget=0).check()
    settings(score="needle").check()  # both scores are accepted
