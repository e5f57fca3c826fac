"""Randomized positional encodings (Ruoss et al., 2023): ``train --random-positions MAX``."""

import pytest
import torch

from poscli.config import TrainConfig
from poscli.errors import PoscliError
from poscli.extension.positions.randomized import sample_positions
from poscli.model.gpt import GPT
from poscli.training.train import train
from tests.conftest import tiny_config


def test_positions_are_sorted_unique_and_in_range_and_differ_between_sequences():
    generator = torch.Generator().manual_seed(0)
    positions = sample_positions(64, 100, 1000, generator, torch.device("cpu"))  # (B, T)
    assert positions.shape == (64, 100) and positions.dtype == torch.int64
    assert (positions.diff(dim=1) > 0).all()  # sorted and unique
    assert positions.min() >= 0 and positions.max() < 1000
    assert len({tuple(row.tolist()) for row in positions}) == 64  # each sequence draws its own
    assert positions.max() > 900 and positions.min() < 100  # the whole range is used, not just 0..T-1
    again = sample_positions(64, 100, 1000, torch.Generator().manual_seed(0), torch.device("cpu"))
    assert torch.equal(positions, again)  # drawn from the seeded generator: a resumed run draws the same


def test_a_position_range_equal_to_the_length_is_the_plain_positions():
    positions = sample_positions(3, 50, 50, torch.Generator().manual_seed(1), torch.device("cpu"))
    assert torch.equal(positions, torch.arange(50).expand(3, 50))


@pytest.mark.parametrize("pe", ["rope", "alibi", "learned", "fire"])
def test_per_sequence_positions_give_each_sequence_its_own_logits(pe):
    """(B, T) positions: row b of the logits is the model run on sequence b at positions[b]."""
    torch.manual_seed(0)
    config = tiny_config(pe, **({"position_rows": 256} if pe == "learned" else {}))
    model = GPT(config).eval()
    tokens = torch.randint(0, 256, (3, 20))
    positions = torch.stack([torch.arange(20), torch.arange(20) * 3 + 5, torch.arange(0, 200, 10)])  # (3, 20)
    with torch.no_grad():
        batched = model(tokens, positions)  # (3, 20, V)
        for row in range(3):
            torch.testing.assert_close(batched[row], model(tokens[row : row + 1], positions[row])[0])
        torch.testing.assert_close(batched[0], model(tokens[:1])[0])  # 0..T-1 is the default
        assert not torch.allclose(batched[1], model(tokens[1:2])[0])  # other positions change the result


@pytest.mark.parametrize(
    "pe, extra",
    [("rope", {}), ("learned", {"position_rows": 256}), ("rope", {"attention_options": {"sinks": True}})],
)
def test_a_batch_with_position_rows_has_the_gradients_of_its_sequences_run_one_by_one(pe, extra):
    """RoPE and a learned table take (B, T) positions in one pass (``batched_positions``); sink
    logits read one row of positions, so that model runs row by row. Either way the loss and every
    gradient are those of the sequences run one at a time."""
    torch.manual_seed(0)
    model = GPT(tiny_config(pe, **extra))
    tokens, targets = torch.randint(0, 256, (3, 20)), torch.randint(0, 256, (3, 20))
    positions = sample_positions(3, 20, 200, torch.Generator().manual_seed(2), torch.device("cpu"))  # (3, 20)
    model.zero_grad()
    model.loss(tokens, targets, positions).backward()
    batched = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad()
    sum(model.loss(tokens[row : row + 1], targets[row : row + 1], positions[row]) / 3 for row in range(3)).backward()
    for name, p in model.named_parameters():
        torch.testing.assert_close(batched[name], p.grad, rtol=1e-4, atol=1e-6, msg=name)
    assert model._batches_position_rows() == (not extra.get("attention_options"))


def test_training_reaches_positions_beyond_the_train_length(tmp_path, text_corpus):
    """A learned table trained with --random-positions 256 at length 32 has 256 rows, and rows past
    32 move in training (weight decay off, so only gradients move them)."""
    model_config = tiny_config("learned")  # train length 32
    train_config = TrainConfig(
        data=str(text_corpus), steps=5, batch_size=4, weight_decay=0.0, random_positions=256, eval_tokens=256
    )
    result = train(model_config, train_config, name="random", results=tmp_path, show_progress=False)
    from poscli.model import runs

    trained = runs.load_weights(result.run)["encoding.table.weight"]  # (rows, C)
    assert trained.shape[0] == 256
    torch.manual_seed(train_config.seed)
    start = GPT(tiny_config("learned", position_rows=256)).state_dict()["encoding.table.weight"]
    moved = (trained - start).abs().amax(dim=1) > 0  # (256,)
    assert moved[32:].sum() > 100, "positions beyond the train length must be trained"


def test_the_range_must_cover_the_train_length_and_none_has_no_positions(tmp_path, text_corpus):
    with pytest.raises(PoscliError, match="shorter than --train-length 32"):
        train(
            tiny_config("rope"),
            TrainConfig(data=str(text_corpus), steps=1, random_positions=16),
            results=tmp_path,
            show_progress=False,
        )
    with pytest.raises(PoscliError, match="reads no positions"):
        train(
            tiny_config("none"),
            TrainConfig(data=str(text_corpus), steps=1, random_positions=64),
            results=tmp_path,
            show_progress=False,
        )
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("name", ["pose", "randomized", "cream"])
def test_every_position_scheme_draws_increasing_positions_below_its_limit_from_the_seed(name):
    """The protocol's promise, for each built-in scheme: (T,) or (B, T) int64, strictly increasing
    along T (attention reads order from positions), every position below the configured limit, the
    same draw from the same seed, and the configured limit reached for (its distances are the point)."""
    from poscli.extension import positions

    scheme = positions.get(name)
    config = tiny_config("rope", train_length=16)
    train_config = TrainConfig(**{scheme.field: 200, "pose_chunks": 3})
    assert positions.chosen(train_config) is scheme

    def draws(seed: int) -> list[torch.Tensor]:
        drawing = positions.for_training(config, train_config)
        generator = torch.Generator().manual_seed(seed)
        return [drawing.draw(4, 16, generator, torch.device("cpu")) for _ in range(50)]

    first = draws(0)
    for drawn in first:
        assert drawn.dtype == torch.int64 and drawn.shape in ((16,), (4, 16))
        assert (drawn.diff(dim=-1) > 0).all() and drawn.min() >= 0 and drawn.max() < 200
    assert max(int(d.max()) for d in first) > 150  # positions far past the window of 16
    assert all(torch.equal(a, b) for a, b in zip(first, draws(0)))
    assert positions.chosen(TrainConfig()) is None and positions.for_training(config, TrainConfig()) is None


def test_cream_keeps_head_and_tail_and_favours_a_middle_near_the_targets_centre():
    """Wu et al. (2024): a head of k at 0.., a tail of k ending at f N - 1, k = N // 3 or 4 f (half the
    draws each), the middle N - 2k consecutive positions between; the middle's scale r is a Gaussian
    around 1 + f truncated to [2, 2f], so its centre is concentrated (spread well under a uniform
    placement's 0.29 of the target) and rarely near either end. With the authors' bounds on the
    middle's end, r / 2 (N - 2k) to r N / 2 - k, the centre's median is near a third of the target."""
    from poscli.extension.positions.cream import cream_positions

    N, f = 120, 8
    generator = torch.Generator().manual_seed(0)
    heads, centres = set(), []
    for _ in range(400):
        drawn = cream_positions(N, f * N, generator, torch.device("cpu"))
        assert drawn.shape == (N,) and (drawn.diff() > 0).all() and drawn.max() == f * N - 1
        kept = [k for k in (N // 3, 4 * f) if torch.equal(drawn[:k], torch.arange(k))
                and torch.equal(drawn[N - k :], torch.arange(f * N - k, f * N))]  # fmt: skip
        assert kept, drawn
        k = max(kept)
        assert (drawn[k : N - k].diff() == 1).all()  # the middle is consecutive
        heads.add(k)
        centres.append(float(drawn[k : N - k].double().mean()) / (f * N))
    centres = torch.tensor(centres)
    assert heads == {N // 3, 4 * f}
    assert centres.std() < 0.2 and 0.25 < centres.median() < 0.5
    assert ((centres < 0.1) | (centres > 0.9)).double().mean() < 0.05


def test_a_randomized_run_is_evaluated_at_positions_drawn_as_its_training_drew_them():
    """Ruoss et al. (2023) sample positions at test time too (their model draws them at every call):
    an instance within the train length gets the first T of the train length's sorted draws, as a
    training window's prefix does; a longer one T draws from the same range; one longer than MAX is
    n/a; and a run trained at 0..T-1 is evaluated at 0..T-1."""
    from poscli.errors import NotApplicable
    from poscli.extension.positions import for_training

    model_config = tiny_config("rope", train_length=26)
    scheme = for_training(model_config, TrainConfig(random_positions=104))
    cpu = torch.device("cpu")
    trained = scheme.draw(50, 26, torch.Generator().manual_seed(3), cpu)  # (B, 26): training windows
    short = scheme.evaluation_positions(50, 12, torch.Generator().manual_seed(3), cpu)  # (B, 12)
    assert torch.equal(short, trained[:, :12])
    long = scheme.evaluation_positions(50, 90, torch.Generator().manual_seed(3), cpu)  # (B, 90)
    assert (long.diff(dim=1) > 0).all() and long.min() >= 0 and long.max() < 104
    assert not torch.equal(long[:, :26], trained)  # 90 draws from [0, 104), not a training window grown
    with pytest.raises(NotApplicable, match=r"\[0, 104\) cannot place 105 tokens"):
        scheme.evaluation_positions(1, 105, torch.Generator().manual_seed(3), cpu)
    assert for_training(model_config, TrainConfig()) is None


def test_a_task_cell_gives_a_randomized_run_the_schemes_positions_the_same_for_every_run():
    from poscli.evaluation import tasks
    from poscli.extension.positions import for_training

    seen = []

    class Spy(torch.nn.Module):  # records the positions each forward gets; predicts nothing right
        def forward(self, tokens, positions=None):
            seen.append(positions)
            return torch.zeros(*tokens.shape, 256)

    copy = tasks.get("copy")
    scheme = for_training(tiny_config("rope", train_length=26), TrainConfig(random_positions=104))
    for _ in range(2):
        copy.cell(Spy(), 8, 20, torch.device("cpu"), scheme=scheme)
    copy.cell(Spy(), 8, 20, torch.device("cpu"))
    first, again, plain = seen
    assert first.shape == (20, 18) and (first.diff(dim=1) > 0).all() and first.max() < 104
    assert not torch.equal(first[0], torch.arange(18))
    assert torch.equal(first, again)  # seeded by the task and size: every run of a study gets the same
    assert plain is None  # a run trained at 0..T-1 is scored at 0..T-1
