"""poscli extend: the library and the CLI."""

import json

import pandas as pd
import pytest
import torch

from poscli.config import ModelConfig
from poscli.extension import methods
from poscli.model import runs
from poscli.model.gpt import GPT
from tests.cli.test_cli import TINY, poscli
from tests.conftest import tiny_config


def test_position_interpolation_equals_the_parent_at_interpolated_positions():
    """PI (Chen et al., 2023) is RoPE at position m / s: check it through the whole model."""
    parent = GPT(tiny_config("rope")).eval()
    s = 4.0
    extended_config = ModelConfig.from_dict(
        {**parent.config.to_dict(), "rope_scaling": {"method": "pi", "factor": s, "original_length": 32, "options": {}}}
    )
    extended = GPT(extended_config).eval()
    extended.load_state_dict(parent.state_dict())
    tokens = torch.randint(0, 256, (2, 100))
    with torch.no_grad():
        torch.testing.assert_close(
            extended(tokens), parent(tokens, positions=torch.arange(100) / s), rtol=1e-4, atol=1e-4
        )


@pytest.fixture(scope="module")
def rope_run(tmp_path_factory):
    from tests.conftest import write_text_corpus

    base = tmp_path_factory.mktemp("extend")
    corpus = write_text_corpus(base / "corpus", documents=12, words=1200)
    results = base / "results"
    for pe in ("rope", "alibi", "learned", "sinusoidal"):
        done = poscli("train", "--pe", pe, "--data", str(corpus), "--steps", "4", "--results", str(results), *TINY)
        assert done.returncode == 0, done.stderr
    return results


@pytest.mark.slow
def test_extend_records_parent_method_factor_options_and_finetuning(rope_run):
    done = poscli(
        "extend",
        "rope",
        "--method",
        "yarn",
        "--target",
        "256",
        "--steps",
        "3",
        "--beta-fast",
        "16",
        "--results",
        str(rope_run),
        "--quiet",
    )
    assert done.returncode == 0, done.stderr
    folder = rope_run / "runs" / "rope+yarn-x8"
    config = json.loads((folder / "config.json").read_text())
    assert config["parent"] == "rope" and config["status"] == "finished" and config["steps_done"] == 3
    extension = config["extension"]
    assert extension["method"] == "yarn" and extension["factor"] == 8 and extension["target"] == 256
    assert extension["options"] == {
        "beta_fast": 16.0,
        "beta_slow": 1.0,
        "attention_factor": 0.0,
    }  # 0: the paper's 0.1 ln s + 1
    assert extension["finetune"]["steps"] == 3 and extension["finetune"]["length"] == 128  # min(target, 4 x 32)
    assert config["model"]["rope_scaling"]["method"] == "yarn" and config["model"]["train_length"] == 128
    assert config["label"] == "rope +yarn x8, 3 steps at 128"
    # fine-tuning moved the weights away from the parent's
    parent, child = runs.load_weights(rope_run / "runs" / "rope"), runs.load_weights(folder)
    assert any(not torch.equal(parent[k], child[k]) for k in parent)


@pytest.mark.slow
def test_extend_without_training_keeps_the_weights_and_eval_labels_it(rope_run):
    done = poscli(
        "extend",
        "rope",
        "--method",
        "pi",
        "--target",
        "128",
        "--steps",
        "0",
        "--name",
        "rope-pi0",
        "--results",
        str(rope_run),
        "--quiet",
    )
    assert done.returncode == 0, done.stderr
    parent, child = runs.load_weights(rope_run / "runs" / "rope"), runs.load_weights(rope_run / "runs" / "rope-pi0")
    assert all(torch.equal(parent[k], child[k]) for k in parent)
    evaluated = poscli(
        "eval", "rope-pi0", "--results", str(rope_run), "--quiet", "--no-reference", "--table", "extended"
    )
    assert evaluated.returncode == 0, evaluated.stderr
    table = pd.read_csv(rope_run / "extended.csv")
    assert set(table["length"]) == {32, 128}  # default lengths: original and target
    assert set(table["label"]) == {"rope +pi x4, no fine-tuning"}
    assert (table["ppl"] > 1).all()


@pytest.mark.slow
def test_dynamic_ntk_run_evaluates_at_several_lengths(rope_run):
    done = poscli(
        "extend",
        "rope",
        "--method",
        "dynamic-ntk",
        "--target",
        "256",
        "--steps",
        "0",
        "--name",
        "rope-dyn",
        "--results",
        str(rope_run),
        "--quiet",
    )
    assert done.returncode == 0, done.stderr
    evaluated = poscli(
        "eval",
        "rope-dyn",
        "--lengths",
        "32,64,256",
        "--results",
        str(rope_run),
        "--quiet",
        "--no-reference",
        "--table",
        "dyn",
    )
    assert evaluated.returncode == 0, evaluated.stderr
    table = pd.read_csv(rope_run / "dyn.csv")
    assert len(table) == 3 and table["ppl"].notna().all()


@pytest.mark.slow
def test_longrope_run_reads_its_factors_and_switches_sets_at_the_train_length(rope_run, tmp_path):
    """--factors FILE carries the searched factors into the run; evaluation below and above the
    original length uses the short and the long set (Ding et al., 2024)."""
    import json

    model = json.loads((rope_run / "runs" / "rope" / "config.json").read_text())["model"]
    half = model["d_model"] // model["n_head"] // 2  # one factor per rotary frequency
    factors = tmp_path / "factors.json"
    factors.write_text(json.dumps({"long_factor": [1.0 + i for i in range(half)], "short_factor": [1.0] * half}))
    done = poscli(
        "extend",
        "rope",
        "--method",
        "longrope",
        "--target",
        "128",
        "--factors",
        str(factors),
        "--steps",
        "0",
        "--name",
        "rope-longrope",
        "--results",
        str(rope_run),
        "--quiet",
    )
    assert done.returncode == 0, done.stderr
    extension = json.loads((rope_run / "runs" / "rope-longrope" / "config.json").read_text())["extension"]
    assert extension["method"] == "longrope" and extension["options"]["long_factor"] == [1.0 + i for i in range(half)]
    evaluated = poscli(
        "eval",
        "rope-longrope",
        "--lengths",
        "32,128",
        "--results",
        str(rope_run),
        "--quiet",
        "--no-reference",
        "--table",
        "lr",
    )
    assert evaluated.returncode == 0, evaluated.stderr
    assert pd.read_csv(rope_run / "lr.csv")["ppl"].notna().all()


@pytest.mark.slow
def test_attention_remappings_extend_without_training_and_evaluate(rope_run):
    """Self-Extend on RoPE, sinks and log-n scaling on ALiBi (any encoding): no training, the weights
    kept, the resolved remapping (or query scaling) in config.json, and evaluation past the train length."""
    for args, name, method, field in [
        (["rope", "--method", "self-extend"], "rope+self-extend-x8", "self-extend", "remap"),
        (["alibi", "--method", "sinks", "--sinks", "2"], "alibi+sinks-x8", "sinks", "remap"),
        (["alibi", "--method", "logn"], "alibi+logn-x8", "logn", "query_scaling"),
    ]:
        done = poscli("extend", *args, "--target", "256", "--results", str(rope_run), "--quiet")
        assert done.returncode == 0, done.stderr
        folder = rope_run / "runs" / name
        config = json.loads((folder / "config.json").read_text())
        assert config["steps_done"] == 0 and config["model"][field]["method"] == method
        parent, child = runs.load_weights(rope_run / "runs" / args[0]), runs.load_weights(folder)
        assert all(torch.equal(parent[k], child[k]) for k in parent)
    assert json.loads((rope_run / "runs" / "rope+self-extend-x8" / "config.json").read_text())["model"]["remap"] == {
        "method": "self-extend",
        "window": 8,
        "group": 11,
        "leak": None,
        "sinks": 0,
    }  # W = 32 / 4, smallest G reaching 256
    assert (
        json.loads((rope_run / "runs" / "alibi+sinks-x8" / "config.json").read_text())["label"]
        == "alibi +2 sinks + 30 recent, no training"
    )
    logn = json.loads((rope_run / "runs" / "alibi+logn-x8" / "config.json").read_text())
    assert logn["model"]["query_scaling"] == {"method": "logn", "original_length": 32}
    assert logn["label"] == "alibi +log-n attention scaling, no training"
    evaluated = poscli(
        "eval",
        "rope+self-extend-x8",
        "alibi+sinks-x8",
        "alibi+logn-x8",
        "--lengths",
        "32,256",
        "--results",
        str(rope_run),
        "--quiet",
        "--no-reference",
        "--table",
        "remapped",
    )
    assert evaluated.returncode == 0, evaluated.stderr
    table = pd.read_csv(rope_run / "remapped.csv")
    assert len(table) == 6 and (table["ppl"] > 1).all()


@pytest.mark.slow
def test_issue_34_methods_apply_to_a_rope_run_and_evaluate_at_8x(rope_run):
    """Each temperature, DroPE, Resonance and the remappings of issue 34 on the trained RoPE run (train
    length 32), then one table at 8x."""
    made = []
    for method, steps in [("llama4-temperature", "0"), ("beta-scaling", "0"), ("yarn-beta", "0"),
                          ("resonance", "0"), ("resonance-yarn", "0"), ("drope", "2"), ("string", "0"),
                          ("dca", "0"), ("lm-infinite", "0"), ("ms-poe", "0")]:  # fmt: skip
        done = poscli(
            "extend", "rope", "--method", method, "--target", "256", "--steps", steps, "--results", str(rope_run),
            "--quiet",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        made.append(f"rope+{method}-x8")
    drope = json.loads((rope_run / "runs" / "rope+drope-x8" / "config.json").read_text())
    assert drope["model"]["pe"] == "none" and drope["model"]["train_length"] == 32  # recalibrated at 32
    assert drope["steps_done"] == 2 and drope["model"]["query_scaling"]["method"] == "drope"
    evaluated = poscli(
        "eval", *made, "--lengths", "256", "--results", str(rope_run), "--quiet", "--no-reference",
        "--table", "temperatures",
    )  # fmt: skip
    assert evaluated.returncode == 0, evaluated.stderr
    table = pd.read_csv(rope_run / "temperatures.csv")
    assert len(table) == len(made) and (table["ppl"] > 1).all()


@pytest.mark.slow
def test_tune_chooses_self_extend_options_resumes_and_extend_applies_them(rope_run, tmp_path):
    """poscli tune on the trained RoPE run: the defaults and 3 candidates scored, the best written; a
    larger budget evaluates only the new ones; the defaults' score is the extended model's own loss
    on the same windows; poscli extend --options-from applies the chosen options."""
    from poscli.training.factor_search import training_windows
    from poscli.training.tune import best_of

    out = tmp_path / "chosen.json"
    common = ["--target", "256", "--windows", "1", "--results", str(rope_run), "--out", str(out), "--quiet"]
    done = poscli("tune", "rope", "--method", "self-extend", "--budget", "4", *common)
    assert done.returncode == 0, done.stderr
    state = json.loads((tmp_path / "chosen.json.tune.json").read_text())
    assert len(state["trajectory"]) == 4 and state["candidates"][0] == {}
    chosen = json.loads(out.read_text())
    options, loss = best_of(state)
    assert chosen["loss"] == loss <= chosen["defaults_loss"] and chosen["method"] == "self-extend"
    done = poscli("tune", "rope", "--method", "self-extend", "--budget", "6", *common)
    assert done.returncode == 0, done.stderr
    state = json.loads((tmp_path / "chosen.json.tune.json").read_text())
    assert len(state["trajectory"]) == 6 and state["trajectory"][4]["candidate"] == 4  # only the two new ones
    # a grid of three values an option: the best at an end of one is named, and the user is told to widen it
    grid = ["--grid", "window=4,6,8", "--grid", "group=12,14,16", "--budget", "10", "--quiet", "--out",
            str(tmp_path / "g.json")]  # fmt: skip
    done = poscli("tune", "rope", "--method", "self-extend", *common[:-3], *grid)
    assert done.returncode == 0, done.stderr
    state_path = tmp_path / "g.json.tune.json"
    state = json.loads(state_path.read_text())
    best = next(i for i, c in enumerate(state["candidates"]) if c == {"window": 4.0, "group": 14.0})
    state["scores"][best] = min(state["scores"]) - 1.0  # make it the best; resuming rescores nothing
    state_path.write_text(json.dumps(state))
    done = poscli("tune", "rope", "--method", "self-extend", *common[:-3], *grid)
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "g.json").read_text())["at_edge"] == {"window": "smallest"}  # 14: inside
    assert "window=4 is the smallest of the values tried" in done.stderr and "widen with --grid window=" in done.stderr

    folder = rope_run / "runs" / "rope"
    batch = training_windows(folder, runs.read_config(folder), 256, 1, 0, torch.device("cpu"))
    parent = ModelConfig.from_dict(runs.read_config(folder)["model"])
    default_plan = methods.plan_remap("self-extend", 32, 256)
    model = GPT(ModelConfig.from_dict({**parent.to_dict(), "remap": default_plan.to_dict()})).eval()
    model.load_state_dict(runs.load_weights(folder))
    with torch.no_grad():
        assert float(model.loss(batch[:, :-1], batch[:, 1:])) == pytest.approx(state["scores"][0], rel=1e-5)

    done = poscli("extend", "rope", "--target", "256", "--options-from", str(out), "--name", "tuned", "--results",
                  str(rope_run), "--quiet")  # fmt: skip
    assert done.returncode == 0, done.stderr
    remap = json.loads((rope_run / "runs" / "tuned" / "config.json").read_text())["model"]["remap"]
    best = json.loads(out.read_text())["options"]
    expected = methods.plan_remap("self-extend", 32, 256, **best).to_dict()
    assert remap == expected
    needle = poscli("tune", "rope", "--method", "beta-scaling", "--score", "needle", "--budget", "2", "--target",
                    "256", "--windows", "1", "--results", str(rope_run), "--quiet")  # fmt: skip
    assert needle.returncode == 0, needle.stderr


@pytest.mark.slow
def test_eval_with_sinks_evaluates_the_runs_streaming_variant(rope_run):
    """poscli eval RUN --sinks S: RUN+sinksS is made once (no training) and its rows carry its name."""
    for _ in range(2):  # the second time the variant exists and is reused
        done = poscli(
            "eval",
            "learned",
            "--sinks",
            "2",
            "--lengths",
            "32,128",
            "--results",
            str(rope_run),
            "--quiet",
            "--no-reference",
            "--table",
            "streaming",
        )
        assert done.returncode == 0, done.stderr
    config = json.loads((rope_run / "runs" / "learned+sinks2" / "config.json").read_text())
    assert config["model"]["remap"] == {"method": "sinks", "window": 30, "group": 1, "leak": None, "sinks": 2}
    table = pd.read_csv(rope_run / "streaming.csv")
    assert (
        set(table["run"]) == {"learned+sinks2"} and len(table) == 2 and table["ppl"].notna().all()
    )  # 128 > the table's 32 rows
    lone = poscli("eval", "learned", "--window", "8", "--results", str(rope_run))
    assert lone.returncode == 2 and "--window goes with --sinks" in lone.stderr


@pytest.mark.slow
def test_pose_fine_tunes_at_the_train_length_with_positions_up_to_the_target(rope_run):
    done = poscli(
        "extend",
        "rope",
        "--method",
        "yarn",
        "--target",
        "256",
        "--steps",
        "2",
        "--pose",
        "--results",
        str(rope_run),
        "--quiet",
    )
    assert done.returncode == 0, done.stderr
    config = json.loads((rope_run / "runs" / "rope+yarn-x8-pose" / "config.json").read_text())
    assert (
        config["train"]["pose"] == 256
        and config["model"]["train_length"] == 32
        and config["extension"]["finetune"]["pose"] is True
    )
    assert config["label"] == "rope +yarn x8, 2 steps at 32 (PoSE to 256)"


@pytest.mark.slow
def test_cream_fine_tunes_at_the_train_length_with_its_positions_and_excludes_pose(rope_run):
    done = poscli("extend", "rope", "--method", "yarn", "--target", "256", "--steps", "2", "--cream", "--results",
                  str(rope_run), "--quiet")  # fmt: skip
    assert done.returncode == 0, done.stderr
    config = json.loads((rope_run / "runs" / "rope+yarn-x8-cream" / "config.json").read_text())
    assert config["train"]["cream"] == 256 and config["train"]["pose"] == 0 and config["model"]["train_length"] == 32
    assert config["label"] == "rope +yarn x8, 2 steps at 32 (CREAM to 256)"
    both = poscli("extend", "rope", "--method", "yarn", "--target", "256", "--pose", "--cream", "--results",
                  str(rope_run), "--quiet")  # fmt: skip
    assert both.returncode == 2 and "--pose and --cream each choose" in both.stderr


EXTEND_ERRORS = [
    (
        ["rope", "--method", "yarn", "--target", "1k", "--beta-fast", "-1"],
        "--beta-fast -1 and --beta-slow 1: both must be positive and --beta-fast the larger",
    ),  # was a traceback (math domain error)
    (
        ["rope", "--method", "ntk-by-parts", "--target", "1k", "--beta-slow", "100", "--beta-fast", "1"],
        "--beta-fast 1 and --beta-slow 100: both must be positive",
    ),  # was accepted
    (
        ["rope", "--method", "self-extend", "--target", "1k", "--window", "0"],
        "--window 0: --method self-extend works --window out from the lengths when it is left out",
    ),  # was accepted as the default
    (["rope", "--method", "self-extend", "--target", "1k", "--group", "0"], "--group 0: --method self-extend"),
    (["rope", "--method", "leaky-rerope", "--target", "1k", "--leak", "0"], "--leak 0: --method leaky-rerope"),
    (["rope", "--method", "dca", "--target", "1k", "-M", "chunk=0"], "--chunk 0: --method dca"),
    (
        ["alibi", "--method", "self-extend", "--target", "1k"],
        "--method self-extend remaps rotary positions and does not apply to --pe alibi",
    ),
    (
        ["rope", "--method", "rerope", "--target", "1k", "--steps", "3"],
        "--method rerope needs no training; drop --steps",
    ),
    (["alibi", "--method", "logn", "--target", "1k", "--steps", "3"], "--method logn needs no training; drop --steps"),
    (
        ["rope", "--method", "yarn", "--target", "1k", "--steps", "0", "--pose"],
        "--pose fine-tunes with skipping positions; give --steps N",
    ),
    (
        ["rope", "--method", "no-such-method", "--target", "1k"],
        "unknown extension method 'no-such-method'; choose one of: " + ", ".join(methods.names()),
    ),
    (
        ["sinusoidal", "--method", "yarn", "--target", "1k"],
        "--method yarn rescales rotary frequencies and does not apply to --pe sinusoidal; for run 'sinusoidal' use: "
        "beta-scaling, continue, llama4-temperature, logn, pi, sinks",
    ),
    (
        ["learned", "--method", "pi", "--target", "1k"],
        "--method pi divides rotary frequencies or positions added at the input and does not apply to --pe learned; "
        "for run 'learned' use: beta-scaling, continue, interpolate, llama4-temperature, logn, sinks",
    ),
    (["learned", "--method", "interpolate", "--target", "1k", "--beta-fast", "4"], "takes no options"),
    (["rope", "--method", "yarn", "--target", "16"], "is not longer than the run's train length 32"),
    (["rope", "--method", "pi", "--target", "1k", "--beta-fast", "8"], "--method pi does not take --beta-fast"),
    (["rope", "--method", "base", "--target", "1k", "--steps", "0"], "add e.g. --rope-base 500000"),
    (["rope", "--method", "longrope", "--target", "1k", "--steps", "0"], "needs 4 long factors"),
    (["rope", "--method", "yarn", "--target", "1k", "--factor", "0.5"], "--factor must be at least 1"),
    (["nope", "--method", "yarn", "--target", "1k"], "no run named 'nope'"),
    (["rope-extended", "--method", "yarn", "--target", "1k"], "is already extended"),
]


@pytest.mark.slow
@pytest.mark.parametrize("args, message", EXTEND_ERRORS, ids=[" ".join(a) for a, _ in EXTEND_ERRORS])
def test_extend_errors_are_one_line_exit_2_and_write_nothing(rope_run, args, message):
    if args[0] == "rope-extended" and not (rope_run / "runs" / "rope-extended").exists():  # a run to refuse
        made = poscli("extend", "rope", "--method", "pi", "--target", "256", "--steps", "0", "--name", "rope-extended",
                      "--results", str(rope_run), "--quiet")  # fmt: skip
        assert made.returncode == 0, made.stderr
    before = sorted(p.name for p in (rope_run / "runs").iterdir())
    done = poscli("extend", *args, "--results", str(rope_run))
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], done.stderr
    assert sorted(p.name for p in (rope_run / "runs").iterdir()) == before


def test_sinusoidal_pi_equals_the_parent_at_interpolated_positions():
    parent = GPT(tiny_config("sinusoidal")).eval()
    extended = GPT(ModelConfig.from_dict({**parent.config.to_dict(), "position_scale": 4.0})).eval()
    extended.load_state_dict(parent.state_dict())
    tokens = torch.randint(0, 256, (2, 100))
    with torch.no_grad():
        torch.testing.assert_close(
            extended(tokens), parent(tokens, positions=torch.arange(100) / 4.0), rtol=1e-4, atol=1e-4
        )


def test_interpolated_learned_table_keeps_its_rows_and_stretches_between_them():
    from poscli.extension.methods.interpolate import interpolate_table

    table = torch.randn(32, 8)
    stretched = interpolate_table(table, 125)  # 124 / 31 = 4: row 4i is the old row i
    assert stretched.shape == (125, 8)
    torch.testing.assert_close(stretched[::4], table)
    torch.testing.assert_close(stretched[2], (table[0] + table[1]) / 2)


@pytest.mark.slow
def test_relative_encodings_need_no_rescaling_and_say_so(rope_run):
    before = sorted(p.name for p in (rope_run / "runs").iterdir())
    done = poscli("extend", "alibi", "--method", "yarn", "--target", "1k", "--results", str(rope_run))
    assert done.returncode == 0, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "needs no rescaling" in lines[0] and "poscli eval alibi --lengths 1k" in lines[0]
    assert sorted(p.name for p in (rope_run / "runs").iterdir()) == before


@pytest.mark.slow
def test_learned_table_interpolated_to_the_target_evaluates_past_its_old_rows(rope_run):
    done = poscli(
        "extend",
        "learned",
        "--method",
        "interpolate",
        "--target",
        "128",
        "--steps",
        "0",
        "--name",
        "learned-x4",
        "--results",
        str(rope_run),
        "--quiet",
    )
    assert done.returncode == 0, done.stderr
    weights = runs.load_weights(rope_run / "runs" / "learned-x4")
    assert weights["encoding.table.weight"].shape[0] == 128
    evaluated = poscli(
        "eval",
        "learned-x4",
        "--lengths",
        "128",
        "--results",
        str(rope_run),
        "--quiet",
        "--no-reference",
        "--table",
        "learned",
    )
    assert evaluated.returncode == 0, evaluated.stderr
    table = pd.read_csv(rope_run / "learned.csv")
    assert table["ppl"].notna().all() and set(table["label"]) == {"learned +interpolate x4, no fine-tuning"}


@pytest.mark.slow
def test_sinusoidal_pi_extension_runs_and_fine_tunes(rope_run):
    done = poscli(
        "extend",
        "sinusoidal",
        "--method",
        "pi",
        "--target",
        "128",
        "--steps",
        "2",
        "--name",
        "sin-pi",
        "--results",
        str(rope_run),
        "--quiet",
    )
    assert done.returncode == 0, done.stderr
    config = json.loads((rope_run / "runs" / "sin-pi" / "config.json").read_text())
    assert config["model"]["position_scale"] == 4 and config["extension"]["method"] == "pi"


@pytest.mark.slow
def test_continue_trains_the_base_further_with_nothing_rescaled_and_counts_both_budgets(rope_run):
    """The continued-training control: any encoding, the model unchanged but for its train length,
    the weights moved by training, and tokens seen = the base's + its own."""
    for pe, length in (("alibi", 32), ("rope", 128)):
        name = f"{pe}-continued-{length}"
        done = poscli(
            "extend",
            pe,
            "--method",
            "continue",
            "--target",
            "128",
            "--steps",
            "3",
            "--finetune-length",
            str(length),
            "--name",
            name,
            "--results",
            str(rope_run),
            "--quiet",
        )
        assert done.returncode == 0, done.stderr
        parent, child = (json.loads((rope_run / "runs" / n / "config.json").read_text()) for n in (pe, name))
        assert child["extension"]["method"] == "continue" and child["model"]["train_length"] == length
        unchanged = {k: v for k, v in parent["model"].items() if k != "train_length"}
        assert {k: v for k, v in child["model"].items() if k != "train_length"} == unchanged, "nothing rescaled"
        assert child["label"] == f"{pe} +continued training (no rescaling), 3 steps at {length}"
        batch = child["train"]["batch_size"]
        assert (
            runs.training_budget(child)["tokens_seen"]
            == runs.training_budget(parent)["tokens_seen"] + 3 * batch * length
        )
        before, after = runs.load_weights(rope_run / "runs" / pe), runs.load_weights(rope_run / "runs" / name)
        assert any(not torch.equal(before[k], after[k]) for k in before)
    refused = poscli(
        "extend", "rope", "--method", "continue", "--target", "128", "--steps", "0", "--results", str(rope_run)
    )
    assert refused.returncode == 2 and "give --steps" in refused.stderr and "Traceback" not in refused.stderr


def test_mixed_windows_run_a_fraction_of_steps_at_the_original_length_with_the_same_tokens():
    """LongRoPE2's mixed context windows: with --mixed-short 0.5 about half the steps draw sequences of
    the original length, batch scaled so every step trains the same number of tokens."""
    from poscli.config import TrainConfig
    from poscli.training.batches import next_batch
    from poscli.training.distributed import Group

    model_config = tiny_config("rope", train_length=64)
    train_config = TrainConfig(batch_size=4, mixed_short=0.5, mixed_length=16)
    stream = torch.randint(0, 256, (10_000,), dtype=torch.uint8)
    generator = torch.Generator().manual_seed(0)
    shapes = [
        tuple(
            next_batch(stream, train_config, model_config, generator, torch.device("cpu"), None, Group(), None)[0].shape
        )
        for _ in range(200)
    ]
    assert set(shapes) == {(4, 64), (16, 16)}
    assert 70 <= shapes.count((16, 16)) <= 130
    plain = TrainConfig(batch_size=4)
    assert {
        tuple(next_batch(stream, plain, model_config, generator, torch.device("cpu"), None, Group(), None)[0].shape)
        for _ in range(20)
    } == {(4, 64)}


@pytest.mark.slow
def test_mixed_short_is_recorded_and_fine_tunes(rope_run):
    done = poscli("extend", "rope", "--method", "yarn", "--target", "256", "--steps", "3", "--mixed-short", "0.5",
                  "--name", "mixed", "--results", str(rope_run), "--quiet")  # fmt: skip
    assert done.returncode == 0, done.stderr
    config = json.loads((rope_run / "runs" / "mixed" / "config.json").read_text())
    assert config["train"]["mixed_short"] == 0.5 and config["train"]["mixed_length"] == 32
    assert config["steps_done"] == 3 and config["label"].endswith("(50% of steps at 32)")
    bad = poscli("extend", "rope", "--method", "yarn", "--target", "256", "--steps", "3", "--mixed-short", "0.5",
                 "--pose", "--results", str(rope_run), "--quiet")  # fmt: skip
    assert bad.returncode == 2 and "--mixed-short goes with" in bad.stderr
