"""Training budgets: the Muon optimizer, snapshots at earlier budgets, tokens seen and FLOPs."""

import json

import numpy as np
import pytest
import torch

from poscli.config import ModelConfig, TrainConfig
from poscli.errors import PoscliError
from poscli.model import runs
from poscli.model.gpt import GPT
from poscli.training.optim import MuonAdamW, hidden_matrices, make_optimizer
from tests.cli.test_cli import TINY, poscli
from tests.conftest import cli_workspace, tiny_config
from tests.training.test_resume import same_weights, stopped_then_resumed


def test_muon_takes_exactly_the_blocks_matrices_and_adamw_the_rest():
    model = GPT(tiny_config("learned"))
    optimizer = make_optimizer(model, TrainConfig(optimizer="muon"))
    adamw, muon = optimizer.parts
    named = dict(model.named_parameters())
    muon_ids = {id(p) for group in muon.param_groups for p in group["params"]}
    adamw_ids = {id(p) for group in adamw.param_groups for p in group["params"]}
    assert muon_ids == {id(named[n]) for n in hidden_matrices(model)}
    assert muon_ids.isdisjoint(adamw_ids) and muon_ids | adamw_ids == {id(p) for p in model.parameters()}
    assert id(named["token_embedding.weight"]) in adamw_ids and id(named["encoding.table.weight"]) in adamw_ids
    assert all(p.dim() == 2 for group in muon.param_groups for p in group["params"])


def test_muons_first_step_is_an_orthogonalised_gradient_at_adamws_rms():
    """Muon's update of a matrix is (nearly) orthogonal: its singular values cluster, unlike the
    raw gradient's, and with ``match_rms_adamw`` its RMS is about 0.2 lr (Liu et al., 2025)."""
    torch.manual_seed(0)
    model = GPT(tiny_config("rope"))
    config = TrainConfig(optimizer="muon", lr=0.01, weight_decay=0.0)
    optimizer = make_optimizer(model, config)
    tokens = torch.randint(0, 256, (4, 32))
    model.loss(tokens[:, :-1], tokens[:, 1:]).backward()
    weight = model.blocks[0].mlp[0].weight  # (512 / 4 ..., 32)
    before, gradient = weight.detach().clone(), weight.grad.clone()
    optimizer.step()
    update = (before - weight.detach()) / config.lr
    singular = torch.linalg.svdvals(update)
    raw = torch.linalg.svdvals(gradient)
    assert (singular.max() / singular.min()) < 0.5 * (raw.max() / raw.min())
    rms = update.pow(2).mean().sqrt().item()
    assert 0.1 < rms < 0.3


def test_the_combined_state_dict_round_trips_into_a_fresh_optimizer():
    torch.manual_seed(0)
    model = GPT(tiny_config("alibi"))
    optimizer = MuonAdamW(model, TrainConfig(optimizer="muon"))
    tokens = torch.randint(0, 256, (2, 32))
    for _ in range(2):
        optimizer.zero_grad()
        model.loss(tokens[:, :-1], tokens[:, 1:]).backward()
        optimizer.step()
    saved = optimizer.state_dict()
    fresh = MuonAdamW(model, TrainConfig(optimizer="muon"))
    fresh.load_state_dict(json.loads(json.dumps(saved, default=lambda t: t.tolist())) | {"state": saved["state"]})
    for old, new in zip(optimizer.parts, fresh.parts):
        for p in model.parameters():
            if p in old.state:
                assert all(
                    torch.equal(torch.as_tensor(old.state[p][k]), torch.as_tensor(new.state[p][k]))
                    for k in old.state[p]
                )


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    return cli_workspace(tmp_path_factory, "budgets")


@pytest.mark.slow
def test_muon_training_resumes_after_sigterm_to_the_uninterrupted_weights(workspace):
    corpus, results = workspace
    args = [
        "train",
        "--pe",
        "rope",
        "--data",
        str(corpus),
        "--results",
        str(results),
        "--optimizer",
        "muon",
        *TINY,
        "--steps",
        "120",
        "--checkpoint-every",
        "20",
    ]
    done = poscli(*args, "--name", "muon-whole")
    assert done.returncode == 0, done.stderr
    stopped_then_resumed(
        args, results, "muon-cut", ["train", "--resume", "muon-cut", "--results", str(results), "--quiet"]
    )
    assert same_weights(results, "muon-whole", "muon-cut")


def test_a_snapshot_holds_the_weights_the_model_had_after_its_step(workspace, monkeypatch):
    """The weights of RUN@20 are the model's after exactly 20 steps: the checkpoint written at step
    20 (spied on, in-process) holds the same tensors, and the final model differs."""
    from poscli.training.options import TrainRequest, train_plan
    from poscli.training.train import train

    corpus, results = workspace
    seen = {}
    real = runs.save_checkpoint

    def spy(run, model, optimizer, generator, step, elapsed):
        seen[step] = {k: v.detach().clone() for k, v in model.state_dict().items()}
        return real(run, model, optimizer, generator, step, elapsed)

    monkeypatch.setattr(runs, "save_checkpoint", spy)
    values = TrainRequest(
        pe="alibi",
        data=str(corpus),
        layers=1,
        width=32,
        heads=4,
        train_length=32,
        batch_size=4,
        warmup=2,
        steps=40,
        checkpoint_every=20,
        snapshots="0.25,0.5",
    )
    _, model_config, train_config = train_plan(values)
    train(model_config, train_config, name="snap", results=results, show_progress=False)
    run = results / "runs" / "snap"
    assert runs.snapshot_steps(run) == [10, 20]
    folder = runs.find_run("snap@20", results)
    config = runs.read_config(folder)
    assert config["name"] == "snap@20" and config["steps_done"] == 20 and config["snapshot_of"] == "snap"
    snapshot, final = runs.load_weights(folder), runs.load_weights(run)
    assert all(torch.equal(snapshot[k], seen[20][k]) for k in snapshot)
    assert not all(torch.equal(snapshot[k], final[k]) for k in snapshot), "a snapshot is not the final model"
    assert runs.training_budget(config)["tokens_seen"] == 20 * 4 * 32  # steps x batch x train length


def test_a_sweep_job_takes_the_cores_freed_by_its_pair_at_its_next_checkpoint(workspace, tmp_path, monkeypatch):
    """A job started as one of a pair (each with half the cores) whose neighbour ends mid-training
    (the sweep's count file goes from 2 to 1) trains on with every core from its next checkpoint,
    and gives them back when another job starts (the count goes to 2 again)."""
    from poscli.core import device
    from poscli.training.options import TrainRequest, train_plan
    from poscli.training.train import train

    corpus, results = workspace
    monkeypatch.setattr(device.os, "cpu_count", lambda: 4)  # so a pair's share (2) differs from all (4)
    count = tmp_path / "running"
    count.write_text("2")
    monkeypatch.setenv(device.RUNNING_JOBS_VARIABLE, str(count))
    seen: dict[int, int] = {}
    real = runs.save_checkpoint

    def spy(run, model, optimizer, generator, step, elapsed):
        seen[step] = torch.get_num_threads()  # the threads this checkpoint's steps ran with
        count.write_text({4: "1", 8: "2"}.get(step, count.read_text()))  # the pair ends at 4, another starts at 8
        return real(run, model, optimizer, generator, step, elapsed)

    monkeypatch.setattr(runs, "save_checkpoint", spy)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        values = TrainRequest(pe="rope", data=str(corpus), layers=1, width=32, heads=4, train_length=32,
                              batch_size=4, warmup=2, steps=12, checkpoint_every=4)  # fmt: skip
        _, model_config, train_config = train_plan(values)
        train(model_config, train_config, name="share", results=results, show_progress=False, replace=True)
    finally:
        torch.set_num_threads(threads)
    assert [seen[step] for step in (4, 8, 12)] == [2, 4, 2]


@pytest.mark.slow
def test_eval_reads_snapshots_by_name_and_reports_each_budget(workspace):
    corpus, results = workspace
    done = poscli(
        "train",
        "--pe",
        "rope",
        "--data",
        str(corpus),
        "--results",
        str(results),
        *TINY,
        "--steps",
        "20",
        "--snapshots",
        "0.5",
        "--name",
        "budgeted",
    )
    assert done.returncode == 0, done.stderr
    shown = poscli(
        "eval",
        "budgeted@10",
        "budgeted",
        "--lengths",
        "32",
        "--max-tokens",
        "512",
        "--table",
        "budgets",
        "--results",
        str(results),
        "--quiet",
    )
    assert shown.returncode == 0, shown.stderr
    import pandas as pd

    table = pd.read_csv(results / "budgets.csv")
    seen = dict(zip(table["run"], table["tokens_seen"]))
    assert seen["budgeted@10"] == 10 * 4 * 32 and seen["budgeted"] == 20 * 4 * 32
    missing = poscli("eval", "budgeted@15", "--results", str(results))
    assert missing.returncode != 0 and "budgeted@10" in missing.stderr and "Traceback" not in missing.stderr


@pytest.mark.parametrize("value", ["0", "1", "2", "half", "0.5,x"])
def test_snapshot_fractions_outside_0_1_are_refused_in_one_line(value):
    with pytest.raises(PoscliError, match="--snapshots"):
        TrainConfig(snapshots=value).validate()


def test_flops_follow_kaplans_count_and_an_extension_adds_its_parents_budget():
    model = ModelConfig(n_layer=4, d_model=128, train_length=128).to_dict()
    config = {"model": model, "train": {"batch_size": 16}, "steps_done": 400, "parameters": 820_000}
    budget = runs.training_budget(config)
    tokens = 400 * 16 * 128
    non_embedding = 4 * 12 * 128 * 128  # 12 d^2 per layer (Kaplan et al., 2020)
    assert budget["tokens_seen"] == tokens
    assert budget["train_flops"] == pytest.approx(6 * non_embedding * tokens + 6 * 4 * 128 * 128 * tokens)
    assert budget["tokens_per_parameter"] == pytest.approx(tokens / 820_000)
    child = {**config, "steps_done": 40, "parent_budget": budget}
    assert runs.training_budget(child)["tokens_seen"] == tokens + 40 * 16 * 128


def test_the_effective_context_is_where_the_loss_by_position_stops_falling():
    from poscli.evaluation.by_position import effective_context, loss_by_position, position_buckets

    length = 128
    # loss falls as 2 + 1/(p + 1) until position 20, then stays flat (a model using 20 tokens of context)
    position_loss = np.array([2 + 1 / (min(p, 20) + 1) for p in range(length)])
    buckets = loss_by_position(position_loss, np.ones(length), length)
    context, still_falling = effective_context(buckets)
    starts = [start for start, _ in position_buckets(length)]
    assert not still_falling and context in starts
    assert 10 <= context <= 20, "1/(p + 1) - 1/21 is under 0.01 nats only from about p = 17; flat from 20"
    falling = loss_by_position(np.array([3 - 0.01 * p for p in range(length)]), np.ones(length), length)
    assert effective_context(falling) == (63, True), "a loss falling to the end (its last octave: 63..127)"


def test_the_effective_context_reads_through_the_texts_difficulty_with_the_3gram_curve():
    """A model that uses 20 tokens of context, scored on text whose last octave of positions
    happens to be easier (0.05 nats, every model alike, as a small sample of windows gives): its
    own curve still falls there, the curve less the 3-gram's on the same targets does not."""
    from poscli.evaluation.by_position import effective_context, loss_by_position

    length = 128
    difficulty = np.array([0.05 if p < 63 else 0.0 for p in range(length)])  # (T,) the text, not the positions
    model = np.array([2 + 1 / (min(p, 20) + 1) for p in range(length)]) + difficulty
    trigram = 2.5 + difficulty
    buckets = loss_by_position(model, np.ones(length), length)
    reference = loss_by_position(trigram, np.ones(length), length)
    assert effective_context(buckets) == (63, True), "the easier text alone looks like more context used"
    assert effective_context(buckets, reference) == (15, False)
    with pytest.raises(ValueError, match="no bucket"):
        effective_context(buckets, reference[:-1])


def test_float32_muon_takes_torchs_muon_step_up_to_bfloat16_rounding():
    """The same parameters, gradients and state: our float32 step (matrices of one shape
    orthogonalised as one batch) and torch.optim.Muon's bfloat16 one, matrix by matrix, agree to
    bfloat16's precision over several steps (momentum, Nesterov, weight decay), for several
    matrices of two shapes, wide and tall."""
    from poscli.training.optim import Float32Muon, orthogonalize

    torch.manual_seed(0)
    shapes = [(48, 16), (16, 40), (48, 16), (48, 16), (16, 40)]
    ours = [torch.nn.Parameter(torch.randn(shape)) for shape in shapes]
    theirs = [torch.nn.Parameter(p.data.clone()) for p in ours]
    start = [p.data.clone() for p in ours]
    options = dict(lr=0.02, weight_decay=0.1, momentum=0.95, nesterov=True, adjust_lr_fn="match_rms_adamw")
    mine, reference = Float32Muon(ours, **options), torch.optim.Muon(theirs, **options)
    for _ in range(3):
        for a, b in zip(ours, theirs, strict=True):
            gradient = torch.randn(a.shape)
            a.grad, b.grad = gradient.clone(), gradient.clone()
        mine.step()
        reference.step()
    for a, b, before in zip(ours, theirs, start, strict=True):
        ours_moved, theirs_moved = a.data - before, b.data - before
        assert (ours_moved - theirs_moved).norm() < 0.02 * theirs_moved.norm()
    batch = torch.randn(3, 24, 8)  # a batch is each of its matrices orthogonalised alone
    together = orthogonalize(batch, (3.4445, -4.7750, 2.0315), 5, 1e-7)
    for matrix, result in zip(batch, together, strict=True):
        torch.testing.assert_close(result, orthogonalize(matrix, (3.4445, -4.7750, 2.0315), 5, 1e-7))
