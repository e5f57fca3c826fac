"""Properties every registered encoding must have. A new encoding is held to these
without new test code: the tests are parametrised over the registry."""

import os

import pytest
import torch

from poscli import encodings
from poscli.errors import NotApplicable
from poscli.model import runs
from poscli.model.gpt import GPT
from tests.conftest import tiny_config

# POSCLI_TEST_ENCODINGS=a,b holds only those encodings to these properties (the test of a new
# encoding file runs this module that way, see tests/encodings/test_new_encoding.py).
ALL = [name for name in os.environ.get("POSCLI_TEST_ENCODINGS", "").split(",") if name] or encodings.names()
WITH_BIAS = [name for name in ALL if encodings.get(name).has_score_bias]


def usable_length(model: GPT, wanted: int) -> int:
    limit = model.encoding.max_length
    return wanted if limit is None else min(wanted, limit)


def test_registry_holds_the_seven_core_encodings():
    assert {"none", "sinusoidal", "learned", "shaw", "t5", "rope", "alibi"} <= set(encodings.names())


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
    for name in encodings.names():
        assert name in str(error.value)


@pytest.mark.parametrize("pe", ALL)
def test_declared_options_are_written_in_full_and_load_back(pe):
    """config.json holds every option of the encoding (defaults included) and builds the same model."""
    import dataclasses
    import json

    from poscli.config import ModelConfig

    config = encodings.resolve_options(tiny_config(pe))
    assert config.pe_options == dataclasses.asdict(encodings.get(pe).Options())
    again = ModelConfig.from_dict(json.loads(json.dumps(config.to_dict())))
    assert again == config and encodings.build(again).options == encodings.build(config).options


@pytest.mark.parametrize("pe", ALL)
def test_each_applicable_extension_method_gives_a_model_that_runs_at_its_target(pe):
    """Every extension method that says it applies to an encoding yields a config (and weights) that
    build and give finite logits at the target length; an encoding no rescaling method applies to
    "needs no rescaling"."""
    from poscli.extension import methods

    cls = encodings.get(pe)
    applicable = methods.applicable(cls)
    assert "continue" in applicable and "logn" in applicable  # every encoding takes these
    torch.manual_seed(0)
    config = tiny_config(pe)
    weights = GPT(config).state_dict()
    target = 4 * config.train_length
    own = cls.parse_options({})
    frequencies = own.rotary_dim(config.head_dim) // 2 if hasattr(own, "rotary_dim") else config.head_dim // 2
    needed = {"base": {"rope_base": 40000.0}, "longrope": {"long_factor": (4.0,) * frequencies}}
    for name in applicable:
        method = methods.get(name)
        changed = dict(weights)
        options = method.check_options(needed.get(name, {}))
        changes = method.extended_config(cls, config, 4.0, target, options, changed)
        model = GPT(type(config).from_dict({**config.to_dict(), **changes})).eval()
        model.load_state_dict(changed)
        with torch.no_grad():
            try:
                logits = model(torch.randint(0, 256, (1, target)))
            except NotApplicable:  # a table without rows there, and a method that adds none (continue, logn)
                assert pe == "learned" and not method.rescales, f"{pe} +{name}"
                continue
        assert torch.isfinite(logits).all(), f"{pe} +{name}"


def test_a_config_written_before_encodings_declared_their_options_still_loads():
    """Old config.json files kept every encoding's options as model fields; each encoding reads
    its own (renamed) and ignores the others'."""
    from poscli.config import ModelConfig

    old_fields = {
        "rope_base": 500000.0,
        "rope_layout": "interleaved",
        "rotary_fraction": 1.0,
        "rope_keep": 1.0,
        "shaw_clip": 5,
        "xpos_gamma": 64.0,
        "t5_num_buckets": 12,
        "t5_max_distance": 40,
    }
    base = tiny_config("rope").to_dict()
    del base["pe_options"]
    xpos = encodings.build(ModelConfig.from_dict({**base, **old_fields, "pe": "xpos"}))
    assert (xpos.options.base, xpos.options.layout, xpos.options.gamma) == (500000.0, "interleaved", 64.0)
    assert encodings.build(ModelConfig.from_dict({**base, **old_fields, "pe": "shaw"})).options.clip == 5
    t5 = encodings.build(ModelConfig.from_dict({**base, **old_fields, "pe": "t5"})).options
    assert (t5.num_buckets, t5.max_distance) == (12, 40)
    assert (
        encodings.build(ModelConfig.from_dict({**base, **old_fields, "pe": "alibi"})).options
        == encodings.get("alibi").Options()
    )
