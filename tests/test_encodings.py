"""Properties every registered encoding must have. A new encoding is held to these
without new test code: the tests are parametrised over the registry."""

import pytest
import torch

from poscli import encodings, runs
from poscli.errors import NotApplicable
from poscli.model import GPT
from tests.conftest import tiny_config

ALL = encodings.names()
WITH_BIAS = [name for name in ALL if encodings.get(name).has_score_bias]


def usable_length(model: GPT, wanted: int) -> int:
    limit = model.encoding.max_length
    return wanted if limit is None else min(wanted, limit)


def test_registry_holds_the_seven_core_encodings():
    assert {"none", "sinusoidal", "learned", "shaw", "t5", "rope", "alibi"} <= set(ALL)


@pytest.mark.parametrize("pe", ALL)
def test_future_tokens_never_change_past_logits(pe):
    model = GPT(tiny_config(pe)).eval()
    length = usable_length(model, 45)  # not a multiple of the 16-query attention block
    tokens = torch.randint(0, 256, (2, length))
    with torch.no_grad():
        reference = model(tokens)
        for t in (0, 7, 16, length - 2):
            changed = tokens.clone()
            changed[:, t + 1 :] = torch.randint(0, 256, (2, length - t - 1))
            logits = model(changed)
            torch.testing.assert_close(logits[:, : t + 1], reference[:, : t + 1], rtol=1e-5, atol=1e-5)
            assert not torch.allclose(logits[:, t + 1 :], reference[:, t + 1 :]), "later logits should see the change"


@pytest.mark.parametrize("pe", ALL)
def test_save_and_load_gives_identical_logits(pe, tmp_path):
    model = GPT(tiny_config(pe)).eval()
    with torch.no_grad():  # move every parameter off its initial value so a missed tensor shows
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    run = tmp_path / "run"
    run.mkdir()
    runs.write_config(run, {"name": "run", "model": model.config.to_dict()})
    runs.save_weights(model, run)
    loaded, _ = runs.load_model(run)
    tokens = torch.randint(0, 256, (2, usable_length(model, 40)))
    with torch.no_grad():
        assert torch.equal(model(tokens), loaded(tokens))


@pytest.mark.parametrize("pe", ALL)
def test_outputs_stay_finite_at_four_times_the_train_length(pe):
    model = GPT(tiny_config(pe)).eval()
    tokens = torch.randint(0, 256, (1, 4 * model.config.train_length))
    if model.encoding.max_length is not None and model.encoding.max_length < tokens.shape[1]:
        with pytest.raises(NotApplicable):
            model(tokens)
        return
    with torch.no_grad():
        assert torch.isfinite(model(tokens)).all()


@pytest.mark.parametrize("pe", ALL)
def test_a_few_steps_on_one_batch_reduce_the_loss_and_train_every_parameter(pe):
    model = GPT(tiny_config(pe))
    tokens = torch.randint(0, 256, (4, usable_length(model, 33)))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    first = None
    for _ in range(15):
        loss = model.loss(tokens[:, :-1], tokens[:, 1:])
        optimizer.zero_grad()
        loss.backward()
        if first is None:
            first = loss.item()
            silent = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
            assert not silent, f"parameters without gradient: {silent}"
        optimizer.step()
    assert loss.item() < first - 0.5


@pytest.mark.parametrize("pe", ALL)
def test_encoding_has_a_citation_and_summary(pe):
    cls = encodings.get(pe)
    assert cls.citation and cls.summary


def test_unknown_encoding_lists_the_valid_ones():
    with pytest.raises(Exception) as error:
        encodings.get("rotary")
    for name in ALL:
        assert name in str(error.value)
