"""Passkey retrieval: one prompt format at every length, multi-key distractors, the graded scores,
and positive controls (a model that copies the key scores 1, one that copies the first number
fails with distractors, a random one scores 0, a tiny model trained here beats chance)."""

import math
import random
import re

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from poscli.config import ModelConfig, TrainConfig
from poscli.data import passkey
from poscli.data.passkey import TEMPLATES, Needle, PasskeyTraining
from poscli.data.tokens import decode, encode
from poscli.errors import PoscliError
from poscli.evaluation import passkey_tables, retrieval
from poscli.evaluation.passkey_tables import passkey_seed_summary as seeds_of
from poscli.model.gpt import GPT
from poscli.training.batches import sample_batch
from poscli.training.train import training_step

# --------------------------------------------------------------------------- prompts


@pytest.mark.parametrize("length", [120, 700, 1024, 5000])
@pytest.mark.parametrize("depth", [0, 25, 50, 75, 100])
def test_a_prompt_has_the_exact_length_and_the_key_at_the_requested_depth(length, depth):
    needle = Needle("teal", 31337, depth)
    prompt = passkey.make_prompt(length, [needle])
    template = TEMPLATES["compact"]
    sentence = template.key_sentence.format(name="teal", key=31337)
    question = template.question.format(name="teal")
    assert len(prompt.encode()) == length and prompt.endswith(question)
    assert prompt.count(sentence) == 1 and prompt.count("31337") == 1
    filler = length - len(sentence) - len(question)
    where = prompt.index(sentence)  # offset into the filler: at the depth, moved back by at most one filler sentence
    assert filler * depth / 100 - 25 <= where <= filler * depth / 100 + 1


def test_the_format_is_the_same_at_every_length():
    """The template a model is trained on is the one it is evaluated on: no switch at 1024."""
    for template in ("compact", "paper"):
        parts = TEMPLATES[template]
        for length in (300, 1023, 1024, 4096):
            prompt = passkey.make_prompt(length, [Needle("red", 4242, 50)], template)
            name = "red" if template == "compact" else ""
            assert prompt.startswith(parts.introduction) and prompt.endswith(parts.question.format(name=name))
            assert parts.key_sentence.format(name=name, key=4242) in prompt


def test_the_paper_template_is_the_papers_wording():
    prompt = passkey.make_prompt(400, [Needle("red", 71432, 50)], "paper")
    assert prompt.startswith("There is an important info hidden inside a lot of irrelevant text.")
    assert "The pass key is 71432. Remember it. 71432 is the pass key." in prompt
    assert prompt.endswith("What is the pass key? The pass key is ")


def test_multikey_prompts_hide_every_key_once_and_ask_for_the_first_needle():
    rng = random.Random(3)
    for _ in range(50):
        needles = passkey.draw_needles(rng, rng.uniform(0, 100), keys=4)
        prompt = passkey.make_prompt(600, needles)
        assert len({n.name for n in needles}) == 4
        for needle in needles:
            assert prompt.count(f"The {needle.name} pass key is {needle.key}. ") == 1
        assert prompt.endswith(f"What is the {needles[0].name} pass key? The {needles[0].name} pass key is ")


def test_no_key_name_is_in_the_filler_or_a_prefix_of_another():
    for name in passkey.NAMES:
        assert name not in passkey.FILLER.lower()
        assert not any(other != name and other.startswith(name) for other in passkey.NAMES)


@pytest.mark.parametrize(
    "template, keys, message",
    [
        ("paper", 2, "holds 1 to 1 keys"),
        ("compact", 13, "holds 1 to 12 keys"),
        ("fancy", 1, "unknown"),
    ],
)
def test_a_format_that_cannot_be_made_is_a_clear_error(template, keys, message):
    with pytest.raises(PoscliError, match=message):
        passkey.check_format(template, keys)


def test_training_sequences_end_with_the_answer_and_say_where_it_starts():
    rng = random.Random(0)
    for length, keys in ((129, 1), (257, 2), (2049, 4)):
        tokens, answer_start = passkey.training_sequence(length, rng, "compact", keys)
        text = decode(tokens)
        assert len(text) == length
        name, key = re.search(r"The (\w+) pass key is (\d+)\.$", text).groups()
        assert text[answer_start:] == f"{key}."
        assert text.count(f"The {name} pass key is {key}.") == 2  # stated once, answered once


def test_the_scorer_accepts_the_right_answer_and_rejects_wrong_ones():
    assert passkey.is_correct("4242. Remember", 4242)
    assert not passkey.is_correct("42424", 4242)
    assert not passkey.is_correct("4241.", 4242)
    assert not passkey.is_correct("The pass", 4242)


# --------------------------------------------------------------------------- stub models


class Stub(nn.Module):
    """A 'model' over bytes whose next-token choice is a rule on the text so far: after the
    final "... pass key is " it emits ``answer(prompt_text)`` and a full stop; elsewhere it is
    uniform. forward(tokens (B, T)) -> logits (B, T, 256)."""

    def __init__(self, answer):
        super().__init__()
        self.answer = answer
        self.anchor = nn.Parameter(torch.zeros(()))  # a parameter, so the scorer can find a device

    def forward(self, tokens):
        B, T = tokens.shape
        logits = torch.zeros(B, T, 256)
        for row in range(B):
            text = decode(tokens[row])
            question = text.rfind("pass key? ")
            start = text.find(" pass key is ", question) + len(" pass key is ") if question >= 0 else -1
            if question < 0 or start < len(" pass key is "):
                continue
            said = self.answer(text[:start]) + "."
            for offset, character in enumerate(said):
                if start - 1 + offset < T:
                    logits[row, start - 1 + offset, ord(character)] = 20.0
        return logits


def copy_by_name(prompt: str) -> str:
    name = re.search(r"What is the (\w+) pass key\? The \1 pass key is $", prompt).group(1)
    return re.search(rf"The {name} pass key is (\d+)\. ", prompt).group(1)


def copy_first_number(prompt: str) -> str:
    return re.search(r"\d+", prompt).group(0)


@pytest.mark.parametrize("keys", [1, 4])
def test_a_model_that_copies_the_key_scores_one_at_every_length_and_depth(keys):
    stub = Stub(copy_by_name)
    for length in (256, 512, 2048):
        for depth in (0, 50, 100):
            scores = retrieval.score_cell(stub, length, depth, trials=20, keys=keys)
            assert scores["exact"].all() and (scores["digit_accuracy"] == 1).all()
            assert scores["logprob"].max() <= 0 and scores["logprob"].min() > -1e-6


def test_a_model_that_copies_the_first_number_fails_with_distractors():
    stub = Stub(copy_first_number)
    single = np.concatenate(
        [retrieval.score_cell(stub, 512, depth, 20, keys=1)["exact"] for depth in (25, 50, 75, 100)]
    )
    several = np.concatenate(
        [retrieval.score_cell(stub, 512, depth, 20, keys=4)["exact"] for depth in (25, 50, 75, 100)]
    )
    assert single.mean() == 1.0
    assert several.mean() < 0.5  # right only when the asked key happens to come first


def test_a_random_model_scores_about_zero():
    torch.manual_seed(0)
    model = GPT(ModelConfig(pe="rope", n_layer=1, n_head=2, d_model=32, train_length=128)).eval()
    scores = retrieval.score_cell(model, 256, 50, trials=40)
    assert scores["exact"].mean() == 0
    assert scores["digit_accuracy"].mean() < 0.1
    assert scores["logprob"].mean() < math.log(1 / 64)  # far below knowing the answer is a digit


def test_teacher_forced_exact_match_is_what_greedy_decoding_gives():
    """Right, right then another digit, a wrong digit, a shorter number: exact only for the first."""

    def sometimes_wrong(prompt: str) -> str:
        key = copy_by_name(prompt)
        return [key, key + "7", key[:-1] + str((int(key[-1]) + 1) % 10), key[:-1] or "9"][int(key) % 4]

    stub = Stub(sometimes_wrong)
    prompts, answers = retrieval.cell_prompts(300, 50, 40)
    scored = retrieval.score_answers(stub, prompts, answers)["exact"]
    generated = retrieval.greedy_generate(stub, torch.from_numpy(prompts).long(), passkey.ANSWER_BUDGET)
    greedy = np.array([passkey.is_correct(decode(g), key) for g, key in zip(generated, answers)])
    assert (scored == greedy).all()
    assert 0 < scored.sum() < len(answers)


@pytest.mark.slow
def test_a_tiny_model_trained_here_beats_chance_on_the_graded_scores():
    """A few seconds of training on passkey examples: the true key's digits get more probability
    than another key's under the same prompt (the paired chance level), so the model reads the
    context, not only which digits are common."""
    torch.manual_seed(0)
    config = ModelConfig(pe="rope", n_layer=2, n_head=2, d_model=64, train_length=96)
    model = GPT(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(0)
    stream = torch.zeros(10_000, dtype=torch.uint8)
    for _ in range(250):
        tokens, targets, weights = sample_batch(
            stream, 32, 96, generator, torch.device("cpu"), PasskeyTraining(1.0, answer_weight=4.0)
        )
        training_step(model, optimizer, tokens, targets, grad_clip=1.0, weights=weights)
    model.eval()
    prompts, answers = retrieval.cell_prompts(96, 50, 100)
    decoys = [random.Random(key).randint(1, passkey.MAX_KEY) for key in answers]
    true = retrieval.score_answers(model, prompts, answers)
    other = retrieval.score_answers(model, prompts, decoys)
    assert true["logprob"].mean() > other["logprob"].mean() + 0.1
    assert true["digit_accuracy"].mean() > other["digit_accuracy"].mean()


# --------------------------------------------------------------------------- effective length and answer loss


def test_effective_length_is_the_longest_length_before_accuracy_first_drops_below_the_threshold():
    assert retrieval.effective_length({256: 1.0, 512: 0.9, 1024: 0.5, 2048: 0.9}) == 512
    assert retrieval.effective_length({256: 0.85, 512: 0.85}) == 1024 // 2
    assert retrieval.effective_length({256: 0.5, 512: 1.0}) == 0
    assert retrieval.effective_length({256: 1.0, 512: float("nan"), 1024: 1.0}) == 256
    assert retrieval.effective_length({256: 0.7, 512: 0.6}, threshold=0.6) == 512


def test_the_answer_loss_adds_w_times_the_mean_loss_of_the_answer_tokens():
    torch.manual_seed(0)
    model = GPT(ModelConfig(pe="rope", n_layer=1, n_head=2, d_model=32, train_length=128))
    stream = torch.from_numpy(encode("plain text, no digits at all. " * 400))
    generator = torch.Generator().manual_seed(1)
    tokens, targets, weights = sample_batch(
        stream, 8, 128, generator, torch.device("cpu"), PasskeyTraining(0.5, "compact", 2, "random", 3.0)
    )
    answer = weights > 1
    assert answer.any() and not answer.all()
    for row in range(8):  # the weighted targets are exactly the answer's digits and the stop
        text = decode(targets[row][answer[row]])
        assert (text == "") == (decode(tokens[row]).find("pass key?") < 0)
        if text:
            assert re.fullmatch(r"\d+\.", text) and decode(targets[row]).endswith(text)
    with torch.no_grad():
        losses = nn.functional.cross_entropy(model(tokens).flatten(0, 1), targets.flatten(), reduction="none").view(
            8, 128
        )
        expected = losses.mean() + 3.0 * losses[answer].mean()
        assert model.loss(tokens, targets, weights=weights).item() == pytest.approx(expected.item(), rel=1e-5)


def test_answer_loss_without_passkey_examples_is_refused():
    with pytest.raises(PoscliError, match="--answer-loss weighs the answers of mixed-in examples"):
        PasskeyTraining.plan(TrainConfig(answer_loss=1.0), ModelConfig())
    with pytest.raises(PoscliError, match="needs a train length of at least"):
        PasskeyTraining.plan(TrainConfig(mix="passkey:0.5", passkey_keys=4), ModelConfig(train_length=128))


@pytest.mark.parametrize("lengths", ["random", "full"])
def test_passkey_examples_end_the_sequence_at_random_or_full_length(lengths):
    plan = PasskeyTraining(1.0, lengths=lengths)
    rng = random.Random(0)
    sizes = [len(plan.example(257, rng)[0]) for _ in range(300)]
    if lengths == "full":
        assert set(sizes) == {257}
    else:  # every size from the shortest example to the whole sequence, roughly uniformly
        assert min(sizes) < plan.shortest + 20 and max(sizes) > 257 - 20 and plan.shortest <= min(sizes)
        assert 0.35 < np.mean([size < (plan.shortest + 257) / 2 for size in sizes]) < 0.65


def test_a_config_written_before_passkey_formats_trained_on_full_length_examples():
    old = {
        key: value
        for key, value in TrainConfig(mix="passkey:0.2").to_dict().items()
        if key not in ("passkey_template", "passkey_keys", "passkey_lengths", "answer_loss")
    }
    assert TrainConfig.from_dict(old).passkey_lengths == "full"
    assert TrainConfig.from_dict(TrainConfig().to_dict()).passkey_lengths == "random"


# --------------------------------------------------------------------------- over seeds and beside the papers


def passkey_rows(
    per_group: dict[str, dict[int, list[int]]],
    trials: int = 50,
    depths=(0.0, 100.0),
    pe: str = "rope",
    train_length: int = 256,
):
    """A passkey table from given correct counts per seed: every depth of a cell gets the same count."""
    import pandas as pd

    rows, groups = [], {}
    for group, by_length in per_group.items():
        for length, counts in by_length.items():
            for seed, correct in enumerate(counts):
                run = f"{group}-s{seed}"
                groups[run] = group
                for depth in depths:
                    rows.append(
                        {
                            "run": run,
                            "label": run,
                            "pe": pe,
                            "train_length": train_length,
                            "template": "compact",
                            "keys": 1,
                            "length": length,
                            "depth": depth,
                            "trials": trials,
                            "correct": correct,
                            "accuracy": correct / trials,
                            "ci_low": 0.0,
                            "ci_high": 1.0,
                            "digit_accuracy": correct / trials,
                            "answer_logprob": -0.1,
                            "note": "",
                        }
                    )
    return pd.DataFrame(rows), groups


def test_the_seed_summary_pools_depths_gives_intervals_and_effective_lengths():
    rows, groups = passkey_rows({"a": {256: [50, 50, 50], 512: [45, 44, 46], 1024: [10, 0, 20]}})
    summary = seeds_of(rows, groups)
    pooled = summary[summary["depth"] == passkey_tables.ALL_DEPTHS].set_index("length")
    assert (
        pooled.loc[256, "accuracy"] == 1.0 and 0.95 < pooled.loc[256, "ci_low"] < 1.0
    )  # 150 of 150: an interval below 1
    assert pooled.loc[1024, "ci_low"] < 0.2 < pooled.loc[1024, "ci_high"]  # the seeds disagree: a wide interval
    assert pooled.loc[256, "effective_length"] == 512 and pooled.loc[256, "effective_by_seed"] == "512, 512, 512"
    # one seed of 50 trials: the interval is about the Wilson interval of its count
    single = passkey_tables.passkey_seed_summary(*passkey_rows({"b": {256: [40]}}, depths=(0.0,)))
    low, high = single[single["depth"] == passkey_tables.ALL_DEPTHS][["ci_low", "ci_high"]].iloc[0]
    wilson = retrieval.wilson_interval(40, 50)
    assert abs(low - wilson[0]) < 0.03 and abs(high - wilson[1]) < 0.03
    assert "effective length" in passkey_tables.passkey_seed_markdown(summary)


def test_every_seed_interval_contains_its_own_estimate_even_at_zero_and_one():
    # Jeffreys posterior draws alone put both bounds inside (0, 1); Brown, Cai and DasGupta (2001)
    # set the bound to 0 (or 1) when no trial (or every trial) is right
    rows, groups = passkey_rows({"a": {256: [50, 50, 50], 512: [0, 0, 0], 1024: [0, 50, 0]}})
    summary = seeds_of(rows, groups)
    assert ((summary["ci_low"] <= summary["accuracy"]) & (summary["accuracy"] <= summary["ci_high"])).all()
    pooled = summary[summary["depth"] == passkey_tables.ALL_DEPTHS].set_index("length")
    assert pooled.loc[512, "ci_low"] == 0.0 and 0.0 < pooled.loc[512, "ci_high"] < 0.05
    assert pooled.loc[256, "ci_high"] == 1.0 and 0.95 < pooled.loc[256, "ci_low"] < 1.0
    assert 0.0 < pooled.loc[1024, "ci_low"] < pooled.loc[1024, "ci_high"] < 1.0  # mixed seeds: inside


def test_the_yarn_passkey_comparison_names_a_best_method_only_where_it_separates():
    from poscli.study.published_retrieval import yarn2023_passkey

    per_group = {
        "base": {256: [50, 50, 50], 1024: [0, 0, 0]},
        "yarn": {256: [50, 50, 50], 1024: [49, 50, 48]},
        "pi": {256: [50, 49, 50], 1024: [10, 12, 8]},
        "ntk": {256: [50, 50, 50], 1024: [48, 49, 47]},
    }
    rows, groups = passkey_rows(per_group)
    meta = {"base": {"pe": "rope"}, **{m: {"method": m, "target": "1k", "steps": 0} for m in ("yarn", "pi", "ntk")}}
    text = yarn2023_passkey(seeds_of(rows, groups), meta)
    assert "| YaRN | 1.00 | 1.00 | 0.98 | 1.00 | 0.68 |" in text
    line = next(line for line in text.splitlines() if "at 1024" in line)
    assert "yarn ≈ ntk > pi" in line and "YaRN is tied for best with ntk" in line
    per_group["ntk"][1024] = [0, 1, 0]
    rows, groups = passkey_rows(per_group)
    line = next(line for line in yarn2023_passkey(seeds_of(rows, groups), meta).splitlines() if "at 1024" in line)
    assert "yarn > pi > ntk" in line and "YaRN retrieves best, as published" in line
    assert "unextended base base: 256: 1.00" in yarn2023_passkey(seeds_of(rows, groups), meta)
    # YaRN beside methods the published table lacks only: nothing to place it among
    alone = {"base": per_group["base"], "yarn": per_group["yarn"], "logn": {256: [50, 50, 50], 1024: [0, 0, 0]}}
    rows, groups = passkey_rows(alone)
    meta_alone = {"base": meta["base"], **{m: {"method": m, "target": "1k", "steps": 0} for m in ("yarn", "logn")}}
    line = next(line for line in yarn2023_passkey(seeds_of(rows, groups), meta_alone).splitlines() if "at 1024" in line)
    assert "yarn > logn" in line and "YaRN" not in line


def test_the_passkey_comparison_orders_methods_only_with_three_seeds_each():
    """Two seeds of 550 prompts give narrow pooled intervals, but the ordering needs three seeds of
    every method (issue 30); a tuned method is its own row beside its defaults."""
    from poscli.study.published_retrieval import yarn2023_passkey

    per_group = {
        "base": {1024: [0, 0]},
        "yarn": {1024: [50, 49]},
        "yarn-tuned": {1024: [30, 31]},
        "pi": {1024: [0, 1]},
    }
    rows, groups = passkey_rows(per_group)
    meta = {
        "base": {"pe": "rope"},
        "yarn": {"method": "yarn", "target": "1k", "steps": 0},
        "yarn-tuned": {"method": "yarn", "target": "1k", "steps": 0, "options_from": "tune"},
        "pi": {"method": "pi", "target": "1k", "steps": 0},
    }
    line = next(x for x in yarn2023_passkey(seeds_of(rows, groups), meta).splitlines() if "at 1024" in x)
    assert "not ordered" in line and ">" not in line and "YaRN" not in line
    assert "yarn 0.99" in line and "yarn tuned 0.61" in line
    rows, groups = passkey_rows({group: {1024: [*counts, counts[0]]} for group, counts in
                                 ((g, c[1024]) for g, c in per_group.items())})  # fmt: skip
    line = next(x for x in yarn2023_passkey(seeds_of(rows, groups), meta).splitlines() if "at 1024" in x)
    assert "yarn > yarn tuned > pi" in line and "YaRN retrieves best" in line


def test_the_passkey_comparison_keeps_pose_and_each_control_apart_and_remappings_untrained():
    """yarn and yarn + PoSE are two rows of one setting, not one overwriting the other, and so are
    the continued-training controls at the target's length and at the base's; an attention remapping
    (no steps in the recipe: it never trains) sits with the untrained methods."""
    from poscli.study.published_retrieval import yarn2023_passkey

    per_group = {
        "base": {256: [50, 50, 50]},
        "yarn": {256: [50, 50, 50]},
        "yarn-pose": {256: [10, 12, 11]},
        "continue-1k": {256: [30, 31, 30]},
        "continue-128": {256: [2, 3, 2]},
        "self-extend": {256: [20, 20, 20]},
        "pi": {256: [0, 0, 0]},
    }
    rows, groups = passkey_rows(per_group)
    meta = {
        "base": {"pe": "rope"},
        "yarn": {"method": "yarn", "target": "1k", "steps": 100},
        "yarn-pose": {"method": "yarn", "target": "1k", "steps": 100, "pose": True},
        "continue-1k": {"method": "continue", "target": "1k", "steps": 100, "finetune_length": "1k"},
        "continue-128": {"method": "continue", "target": "1k", "steps": 100, "finetune_length": "128"},
        "self-extend": {"method": "self-extend", "target": "1k"},
        "pi": {"method": "pi", "target": "1k", "steps": 0},
    }
    lines = yarn2023_passkey(seeds_of(rows, groups), meta).splitlines()
    tuned = next(line for line in lines if "100 fine-tuning steps" in line)
    assert "yarn > continue@1k > yarn + PoSE > continue@128" in tuned and "+ PoSE: at the train length" in tuned
    untrained = next(line for line in lines if "no fine-tuning" in line)
    assert "self-extend > pi" in untrained and not any("400 fine-tuning" in line for line in lines)


def test_perplexity_is_not_retrieval_is_said_only_where_both_intervals_decide():
    from poscli.study.published_retrieval import retrieval_vs_perplexity
    from tests.study.test_recipes import summary_from

    passkey_summary = passkey_tables.passkey_seed_summary(
        *passkey_rows(
            {
                "alibi": {256: [50], 1024: [0], 4096: [0]},
                "rope": {256: [50], 1024: [0], 4096: [0]},
                "pope": {256: [50], 1024: [0], 4096: [0]},  # keeps at 4x only, then blows up
                "unlearned": {256: [0], 1024: [0], 4096: [0]},  # never retrieves, not even at 256
            }
        )
    )
    perplexity, _ = summary_from(
        {
            "alibi": {256: [5.0], 1024: [5.0], 4096: [5.0]},
            "rope": {256: [5.0], 1024: [40.0], 4096: [40.0]},
            "pope": {256: [5.0], 1024: [5.0], 4096: [40.0]},
            "unlearned": {256: [5.0], 1024: [5.0], 4096: [5.0]},
        },
        {"alibi": "alibi", "rope": "rope", "pope": "pope", "unlearned": "scaled-sinusoidal"},
        256,
        spread=0.1,
        min_runs=1,
    )
    meta = {g: {"pe": g} for g in ("alibi", "rope", "pope", "unlearned")}
    text = retrieval_vs_perplexity(passkey_summary, meta, perplexity=perplexity)
    computed = next(line for line in text.splitlines() if line.startswith("Computed:"))
    assert "alibi keeps its perplexity at 1024 and 4096 but fails to retrieve there" in computed
    assert "pope keeps its perplexity at 1024 but fails to retrieve there" in computed
    assert "rope keeps" not in computed and "16x: perplexity 8.00x" in text
    assert "unlearned" not in computed and "Left out" in text and "unlearned" in text


def test_a_run_scored_with_one_and_four_keys_gets_a_heatmap_for_each():
    from poscli.evaluation.plots import heatmap_parts

    one, _ = passkey_rows({"a": {256: [50]}})
    four = one.assign(keys=4, correct=10, accuracy=0.2)
    parts = dict(heatmap_parts(pd.concat([one, four]), "passkey"))
    assert set(parts) == {"passkey-a-s0.png", "passkey-a-s0-4keys.png"}
    assert (
        parts["passkey-a-s0-4keys.png"]["accuracy"].eq(0.2).all()
        and parts["passkey-a-s0.png"]["accuracy"].eq(1.0).all()
    )


def test_the_floor_is_the_share_of_keys_inside_the_last_window_and_grows_with_depth():
    from poscli.data.tokens import decode
    from poscli.evaluation.retrieval import cell_prompts, key_starts, window_floor

    length, window = 1024, 128
    floors = []
    for depth in (0.0, 50.0, 90.0, 100.0):
        prompts, answers = cell_prompts(length, depth, 20)
        starts = key_starts(prompts, answers)
        for prompt, key, start in zip(prompts, answers, starts):
            assert decode(prompt[start : start + len(str(key))]) == str(key)
        floors.append(window_floor(prompts, answers, window))
    assert floors[0] == 0.0 and floors[-1] == 1.0 and floors == sorted(floors)
    assert window_floor(*cell_prompts(length, 50.0, 20), window=length) == 1.0, (
        "a window of the whole prompt sees every key"
    )


def test_passkey_rows_carry_their_floor_and_the_markdown_shows_depths(tmp_path):
    import pandas as pd

    from poscli.evaluation.passkey_tables import passkey_markdown

    rows = [
        {
            "run": "r",
            "label": "r",
            "pe": "rope",
            "train_length": 128,
            "template": "compact",
            "keys": 1,
            "length": 512,
            "depth": d,
            "trials": 10,
            "correct": c,
            "accuracy": c / 10,
            "ci_low": 0.0,
            "ci_high": 1.0,
            "digit_accuracy": 0.5,
            "answer_logprob": -1.0,
            "note": "",
            "floor": f,
            "floor_window": 128,
        }
        for d, c, f in ((0.0, 0, 0.0), (50.0, 0, 0.0), (100.0, 10, 1.0))
    ]
    text = passkey_markdown(pd.DataFrame(rows))
    assert "| r | 1 | 512 | 0.00 (0.00) | 0.00 (0.00) | 1.00 (1.00) |" in text
    assert "0.33" in text.split("The floor of each cell")[1].split("Exact match by depth")[0]
