"""Issue 34's method claims as orderings (poscli.study.published_methods): each against its rival at
the same target and steps, decided by the paired test over seeds, Holm-corrected."""

from poscli.study.published_methods import method_orderings
from tests.study.test_published_recent import line_with
from tests.study.test_recipes import summary_from


def test_orderings_pick_the_right_rival_and_follow_the_paired_test():
    # Every seed of Resonance YaRN is 0.9x its YaRN seed at 1k; DroPE 1.2x zero-shot YaRN's and 0.8x the
    # continue control's at the train length; the tuned Self-Extend is its defaults' seeds shuffled (undecided).
    perplexity = {
        "yarn-0": {1024: [10.0, 12.0, 14.0]},
        "resonance-yarn-0": {1024: [9.0, 10.8, 12.6]},
        "drope-250": {1024: [12.0, 14.4, 16.8]},
        "continue-128-250": {1024: [15.0, 18.0, 21.0]},
        "continue-1k-250": {1024: [11.0, 11.0, 11.0]},
        "self-extend-0": {1024: [10.0, 12.0, 14.0]},
        "self-extend-tuned-0": {1024: [12.0, 14.0, 10.0]},
    }
    summary, _ = summary_from(perplexity, dict.fromkeys(perplexity, "rope"), 128)
    meta = {
        "yarn-0": {"method": "yarn", "target": "1k", "steps": 0},
        "resonance-yarn-0": {"method": "resonance-yarn", "target": "1k", "steps": 0},
        "drope-250": {"method": "drope", "target": "1k", "steps": 250},
        "continue-1k-250": {"method": "continue", "target": "1k", "steps": 250, "finetune_length": "1k"},
        "continue-128-250": {"method": "continue", "target": "1k", "steps": 250, "finetune_length": "128"},
        "self-extend-0": {"method": "self-extend", "target": "1k"},
        "self-extend-tuned-0": {"method": "self-extend", "target": "1k", "options_from": "tune"},
    }
    text = method_orderings(summary, meta)
    assert line_with(text, "resonance-yarn-0", "yarn-0").endswith(": holds.")
    assert "does not hold" in line_with(text, "Gelberg", "drope-250", "yarn-0")
    control = line_with(text, "control", "drope-250")
    assert "continue-128-250" in control and "continue-1k-250" not in control and control.endswith(": holds.")
    assert line_with(text, "self-extend tuned", "self-extend-0").endswith(": undecided.")
    assert "Holm" in text


def test_without_a_rival_nothing_is_claimed():
    summary, _ = summary_from({"dca-0": {1024: [5.0, 6.0]}}, {"dca-0": "rope"}, 128)
    text = method_orderings(summary, {"dca-0": {"method": "dca", "target": "1k"}})
    assert "No issue-34 method and its rival are both in this table." in text
