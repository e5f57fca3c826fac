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
    assert line_with(text, "resonance-yarn-0", "yarn-0").endswith(": in the claimed direction.")
    assert "against the claimed direction" in line_with(text, "Gelberg", "drope-250", "yarn-0")
    control = line_with(text, "control", "drope-250")
    assert (
        "continue-128-250" in control
        and "continue-1k-250" not in control
        and control.endswith(": in the claimed direction.")
    )
    assert line_with(text, "self-extend tuned", "self-extend-0").endswith(": not separated.")
    assert "Holm" in text


def test_without_a_rival_nothing_is_claimed():
    summary, _ = summary_from({"dca-0": {1024: [5.0, 6.0]}}, {"dca-0": "rope"}, 128)
    text = method_orderings(summary, {"dca-0": {"method": "dca", "target": "1k"}})
    assert "No issue-34 method and its rival are both in this table." in text


def test_the_newer_claims_find_their_rivals_by_kind_and_the_mixed_windows_are_read_at_the_train_length():
    # CREAM's seeds are 0.9x PoSE's at 1k; the needle-searched factors (LongRoPE2) 1.1x the
    # perplexity-searched ones; the mixed windows 0.9x the unmixed fine-tuning at 128 and 1.1x at 1k,
    # so only the train length shows the claim; Resonance RoPE 0.9x the continue control at the target,
    # never the control at the train length (1.5x it).
    perplexity = {
        "pose": {128: [4.0, 5.0, 6.0], 1024: [10.0, 12.0, 14.0]},
        "cream": {128: [4.0, 5.0, 6.0], 1024: [9.0, 10.8, 12.6]},
        "longrope": {128: [4.0, 5.0, 6.0], 1024: [10.0, 12.0, 14.0]},
        "longrope2": {128: [4.0, 5.0, 6.0], 1024: [11.0, 13.2, 15.4]},
        "longrope2-250": {128: [5.0, 6.0, 7.0], 1024: [8.0, 9.0, 10.0]},
        "longrope2-mixed-250": {128: [4.5, 5.4, 6.3], 1024: [8.8, 9.9, 11.0]},
        "continue-1k-250": {128: [5.0, 6.0, 7.0], 1024: [10.0, 12.0, 14.0]},
        "continue-128-250": {128: [4.0, 5.0, 6.0], 1024: [6.0, 7.2, 8.4]},
        "resonance-250": {128: [5.0, 6.0, 7.0], 1024: [9.0, 10.8, 12.6]},
    }
    summary, _ = summary_from(perplexity, dict.fromkeys(perplexity, "rope"), 128)
    searched = {"method": "longrope", "target": "1k", "factors": "search"}
    meta = {
        "pose": {"method": "yarn", "target": "1k", "steps": 250, "pose": True},
        "cream": {"method": "yarn", "target": "1k", "steps": 250, "cream": True},
        "longrope": {**searched, "steps": 0},
        "longrope2": {**searched, "steps": 0, "search_score": "needle"},
        "longrope2-250": {**searched, "steps": 250, "search_score": "needle"},
        "longrope2-mixed-250": {**searched, "steps": 250, "search_score": "needle", "mixed_short": 0.5},
        "continue-128-250": {"method": "continue", "target": "1k", "steps": 250, "finetune_length": "128"},
        "continue-1k-250": {"method": "continue", "target": "1k", "steps": 250, "finetune_length": "1k"},
        "resonance-250": {"method": "resonance", "target": "1k", "steps": 250, "finetune_length": "1k"},
    }
    text = method_orderings(summary, meta)
    assert line_with(text, "Wu et al.", "At 1024: cream", "pose").endswith(": in the claimed direction.")
    needle = line_with(text, "needle-driven", "At 1024: longrope2 ")
    assert "longrope " in needle and "against the claimed direction" in needle
    mixed = line_with(text, "mixed context windows", "longrope2-mixed-250")
    assert "At 128:" in mixed and "longrope2-250" in mixed and mixed.endswith(": in the claimed direction.")
    resonance = line_with(text, "Resonance RoPE", "resonance-250")
    assert (
        "continue-1k-250" in resonance
        and "continue-128-250" not in resonance
        and resonance.endswith(": in the claimed direction.")
    )
