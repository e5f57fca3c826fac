"""Training curves: --logger tensorboard writes what TensorBoard reads, --logger wandb logs offline,
poscli plot loss draws a run's curve, and a torn metrics.jsonl no longer stops a resume."""

import importlib.machinery
import json
import math
import sys
import types

import pandas as pd
import pytest

from poscli.model import runs
from tests.cli.test_cli import TINY, poscli
from tests.conftest import write_text_corpus


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_text_corpus(tmp_path_factory.mktemp("loggers") / "corpus")


def train(corpus, results, *extra):
    done = poscli("train", "--pe", "rope", "--data", str(corpus), "--steps", "20", "--results", str(results),
                  *TINY, *extra)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return results / "runs" / extra[extra.index("--name") + 1]


def test_tensorboard_event_files_hold_the_runs_curve_against_tokens_seen(corpus, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = train(corpus, tmp_path / "results", "--name", "tb", "--logger", "tensorboard")
    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    assert {"train/loss", "train/lr", "train/tokens_per_s", "heldout/loss"} <= set(events.Tags()["scalars"])
    logged = runs.read_metrics(run)  # metrics.jsonl: the same numbers, per step
    curve = events.Scalars("train/loss")
    assert [e.step for e in curve] == [record["step"] * 4 * 32 for record in logged]  # tokens: step x batch x length
    assert [e.value for e in curve] == pytest.approx([record["loss"] for record in logged], rel=1e-6)
    heldout = json.loads((run / "config.json").read_text())["heldout"]["loss"]
    assert events.Scalars("heldout/loss")[0].value == pytest.approx(heldout, rel=1e-6)


def test_wandb_logs_offline_unless_told_otherwise(corpus, tmp_path, monkeypatch):
    """W&B is an optional extra; a stand-in module records what poscli asks of it."""
    calls = []

    class Run:
        def log(self, values):
            calls.append(("log", values))

        def finish(self):
            calls.append(("finish", None))

    fake = types.ModuleType("wandb")
    fake.__spec__ = importlib.machinery.ModuleSpec("wandb", None)
    fake.init = lambda **settings: calls.append(("init", settings)) or Run()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    run = train(corpus, tmp_path / "results", "--name", "wb", "--logger", "wandb")
    settings = calls[0][1]
    assert calls[0][0] == "init" and settings["mode"] == "offline" and settings["dir"] == str(run)
    logged = [values for kind, values in calls if kind == "log"]
    assert [v["train/loss"] for v in logged if "train/loss" in v] == [r["loss"] for r in runs.read_metrics(run)]
    assert "heldout/loss" in logged[-1] and calls[-1] == ("finish", None)


def test_a_logger_whose_package_is_missing_is_refused_before_training(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb fails, as where it is not installed
    done = poscli("train", "--pe", "rope", "--steps", "2", "--logger", "wandb", "--results", str(tmp_path), *TINY)
    assert done.returncode == 2 and "--logger wandb needs the wandb package: pip install 'poscli[wandb]'" in done.stderr
    assert not (tmp_path / "runs").exists()


def test_plot_loss_draws_each_runs_curve_and_its_held_out_loss(corpus, tmp_path):
    results = tmp_path / "results"
    run = train(corpus, results, "--name", "a")
    train(corpus, results, "--name", "b", "--lr", "3e-3")
    curve = runs.training_curve(run)
    heldout = json.loads((run / "config.json").read_text())["heldout"]
    assert curve["tokens"][-1] == 20 * 4 * 32 and curve["heldout"][0] == 20 * 4 * 32
    assert curve["heldout"][1:] == pytest.approx((heldout["loss"], math.log(heldout["ci_low"]),
                                                  math.log(heldout["ci_high"])))  # fmt: skip
    for extra in ([], ["--facet", "--out", str(tmp_path / "facet.png")]):
        done = poscli("plot", "loss", "a", "b", "--results", str(results), *extra)
        assert done.returncode == 0, done.stderr
    assert (results / "loss.png").stat().st_size > 10_000 and (tmp_path / "facet.png").stat().st_size > 10_000
    missing = poscli("plot", "loss", "nope", "--results", str(results))
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1


def test_a_torn_last_line_of_the_metrics_is_left_out(tmp_path):
    """A kill mid-write leaves half a line; reading (and resuming, which cuts the file) skips it."""
    from poscli.training.metrics import cut_metrics

    (tmp_path / "metrics.jsonl").write_text('{"step": 10, "loss": 5.0}\n{"step": 20, "loss": 4.0}\n{"step": 3')
    assert [r["step"] for r in runs.read_metrics(tmp_path)] == [10, 20]
    cut_metrics(tmp_path, 10)
    assert [r["step"] for r in runs.read_metrics(tmp_path)] == [10]


def test_eval_every_draws_the_validation_curve_at_two_lengths_without_changing_the_training(corpus, tmp_path):
    """--eval-every N: the held-out loss at the train length and at 4x every N steps and at the end,
    in metrics.jsonl and TensorBoard (at the train length, on the run's own final held-out windows
    where the held-out text is smaller than either sample, as here); the weights are those of the same run trained
    without it; plot loss draws and tabulates both lengths."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    results = tmp_path / "results"
    curved = train(corpus, results, "--name", "curved", "--eval-every", "5", "--logger", "tensorboard")
    plain = train(corpus, results, "--name", "plain", "--eval-every", "0")
    points = [record for record in runs.read_metrics(curved) if "heldout" in record]
    assert [point["step"] for point in points] == [5, 10, 15, 20]
    assert all(set(point["heldout"]) == {"32", "128"} for point in points)  # TINY trains at 32
    final = json.loads((curved / "config.json").read_text())["heldout"]["loss"]
    assert points[-1]["heldout_loss"] == pytest.approx(final, abs=1e-5)
    assert points[0]["heldout_loss"] > points[-1]["heldout_loss"]  # it learns
    assert (curved / runs.WEIGHTS_FILE).read_bytes() == (plain / runs.WEIGHTS_FILE).read_bytes()
    events = EventAccumulator(str(curved / "tensorboard"))
    events.Reload()
    for tag, length in (("heldout/loss", "32"), ("heldout/loss_at_128", "128")):
        logged = events.Scalars(tag)
        assert [e.step for e in logged] == [point["step"] * 4 * 32 for point in points]
        assert [e.value for e in logged] == pytest.approx([point["heldout"][length] for point in points], rel=1e-5)
    recorded = json.loads((curved / "config.json").read_text())["curve"]
    assert recorded["points"] == 4 and recorded["lengths"] == [32, 128] and 0 < recorded["share_of_training"] < 1
    assert not [record for record in runs.read_metrics(plain) if "heldout" in record]
    done = poscli("plot", "loss", "curved", "--results", str(results), "--out", str(tmp_path / "curve.png"))
    assert done.returncode == 0, done.stderr
    table = pd.read_csv(tmp_path / "curve.csv")
    assert sorted(table["length"].unique()) == [32, 128] and len(table) == 8
    assert "curved: " in done.stdout and "last fifth (16-20) gained" in done.stdout
    assert "- curved: " in (tmp_path / "curve.md").read_text()


def test_the_default_curve_has_about_twenty_points_and_costs_at_most_a_tenth_of_the_training():
    """Without --eval-every: CURVE_POINTS points where they cost under CURVE_SHARE of the training (an
    evaluation as half the cost of training on as many tokens), fewer where they would cost
    more, none where fewer than two fit; --eval-every wins."""
    from poscli.config import TrainConfig
    from poscli.training.metrics import CURVE_POINTS, CURVE_SHARE, curve_every

    def cost(config, every, tokens, lengths):  # share of training steps the curve's evaluations cost
        points = -(-config.steps // every)
        return points * len(lengths) * tokens / (2 * config.batch_size * 128) / config.steps

    long_run = TrainConfig(steps=2500, batch_size=16)
    every = curve_every(long_run, 128, 16384, [128, 512])
    assert -(-2500 // every) <= CURVE_POINTS and 2500 // every >= CURVE_POINTS - 1
    assert cost(long_run, every, 16384, [128, 512]) <= CURVE_SHARE
    short_run = TrainConfig(steps=600, batch_size=16)
    every = curve_every(short_run, 128, 16384, [128, 512])
    assert 2 <= 600 // every < CURVE_POINTS and cost(short_run, every, 16384, [128, 512]) <= CURVE_SHARE * 1.05
    assert curve_every(TrainConfig(steps=60, batch_size=4), 128, 16384, [128, 512]) == 0
    assert curve_every(TrainConfig(steps=60, batch_size=4, eval_every=7), 128, 16384, [128, 512]) == 7


def test_a_default_curve_whose_first_point_costs_more_than_planned_is_spaced_out_and_says_so(
    corpus, tmp_path, monkeypatch
):
    """The default spacing is planned from a cost model (a held-out token at half a training token);
    after its first point the curve knows the real cost and widens the spacing so a point costs at most
    CURVE_SHARE of the training between points (here a share so small that no later point but the last
    fits), recorded in config.json; --eval-every N is kept as given whatever it costs."""
    from poscli.training import metrics

    assert metrics.widened_every(10, point_seconds=2.0, step_seconds=1.0) == 20  # 2 s a point, 10% of 20 steps
    assert metrics.widened_every(50, point_seconds=2.0, step_seconds=1.0) == 50  # never narrower
    monkeypatch.setattr(metrics, "CURVE_SHARE", 1e-6)
    monkeypatch.setattr(metrics, "curve_every", lambda *args: 5)  # the plan: every 5 of the 20 steps
    widened = train(corpus, tmp_path / "results", "--name", "widened")
    points = [record["step"] for record in runs.read_metrics(widened) if "heldout" in record]
    recorded = json.loads((widened / "config.json").read_text())["curve"]
    assert points == [5, 20] and recorded["planned_every"] == 5 and recorded["every"] > 20
    kept = train(corpus, tmp_path / "results", "--name", "kept", "--eval-every", "5")
    assert [record["step"] for record in runs.read_metrics(kept) if "heldout" in record] == [5, 10, 15, 20]


def test_a_curve_length_the_encoding_cannot_represent_is_left_out(corpus, tmp_path):
    """Learned absolute positions have train-length rows: the curve keeps the train length only, and
    its first line and config.json say why 4x is left out."""
    results = tmp_path / "results"
    done = poscli("train", "--pe", "learned", "--data", str(corpus), "--steps", "20", "--results", str(results),
                  *TINY, "--name", "learned", "--eval-every", "10")  # fmt: skip
    assert done.returncode == 0, done.stderr
    run = results / "runs" / "learned"
    points = [record for record in runs.read_metrics(run) if "heldout" in record]
    assert [point["step"] for point in points] == [10, 20] and all(set(p["heldout"]) == {"32"} for p in points)
    assert "128 left out: past the encoding's 32 positions" in done.stderr  # said, not silently dropped
    curve = json.loads((run / "config.json").read_text())["curve"]
    assert curve["left_out"] == {"128": "past the encoding's 32 positions"}


def test_convergence_is_read_off_the_curve_where_its_last_fifth_gains_under_one_percent():
    """Against an exponential approach L(s) = 2 + exp(-s / 100), whose last fifth's gain at S is
    (L(0.8 S) - L(S)) / L(0.8 S), computed here in closed form."""
    from poscli.evaluation.curves import converged_at, last_fraction_gain

    steps = list(range(10, 3001, 10))
    losses = [2 + math.exp(-s / 100) for s in steps]

    def gain(at):
        return (math.exp(-0.8 * at / 100) - math.exp(-at / 100)) / (2 + math.exp(-0.8 * at / 100))

    assert last_fraction_gain(steps, losses, 500) == pytest.approx(gain(500), rel=1e-3)
    expected = next(s for s in steps if s >= 13 and gain(s) < 0.01)  # 0.8 S must lie on the curve
    assert converged_at(steps, losses) == expected
    assert converged_at(steps[:20], losses[:20]) is None  # still gaining over 1% at step 200
