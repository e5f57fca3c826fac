"""poscli export: a run as a transformers model folder that gives poscli's logits.

The round trip is the test: poscli's GPT and the transformers model loaded from the folder score
the same random tokens, at the train length and past it for extended RoPE runs (every rope type
transformers has), to 1e-4 in float32 as issue 19 asks. Weights are random, layer norms included,
so a transposed or misordered matrix cannot hide behind an identity.
"""

from __future__ import annotations

import json

import pytest
import torch
import transformers

from poscli.cli.app import main
from poscli.config import ModelConfig
from poscli.errors import NotApplicable, PoscliError
from poscli.export.hf import byte_level_tokenizer, check_export, export, exportable_encodings
from poscli.extension import methods
from poscli.model import runs
from poscli.model.gpt import GPT
from tests.conftest import tiny_config

TOLERANCE = 1e-4  # issue 19: max absolute logit difference in float32


def make_run(folder, config: ModelConfig, name: str = "run", tokenizer: str = "bytes"):
    """A run folder holding a model with random weights (every parameter, norms included)."""
    torch.manual_seed(1)
    model = GPT(config)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.1)  # norms' weights near 1, every bias non-zero
    run = folder / name
    run.mkdir(parents=True)
    runs.write_config(
        run, {"name": name, "model": config.to_dict(), "train": {"tokenizer": tokenizer}, "status": "finished"}
    )
    runs.save_weights(model, run)
    return run


def logits_differ(run, folder, lengths) -> float:
    model, _ = runs.load_model(run)
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    worst = 0.0
    for length in lengths:
        tokens = torch.randint(0, model.config.vocab_size, (2, length))
        with torch.no_grad():
            worst = max(worst, float((model(tokens) - hf(tokens).logits).abs().max()))
    return worst


@pytest.mark.parametrize(
    "options", [{}, {"layout": "interleaved"}, {"layout": "interleaved", "rotary_fraction": 0.5}, {"base": 500.0}]
)
def test_rope_runs_give_poscli_logits_in_transformers(tmp_path, options):
    run = make_run(tmp_path, tiny_config("rope", options))
    written = export(run, tmp_path / "hf")
    assert written["architectures"] == ["GPTNeoXForCausalLM"]
    assert logits_differ(run, tmp_path / "hf", [32, 80]) < TOLERANCE


def longrope_options(rotary_dim: int) -> dict:
    generator = torch.Generator().manual_seed(0)
    long = (1 + 3 * torch.rand(rotary_dim // 2, generator=generator)).sort().values
    short = 1 + 0.2 * torch.rand(rotary_dim // 2, generator=generator)
    return {"long_factor": tuple(long.tolist()), "short_factor": tuple(short.tolist())}


EXTENSIONS = {
    "pi": {},
    "ntk": {},
    "dynamic-ntk": {},
    "yarn": {},
    "ntk-by-parts": {},
    "llama3": {},
    "base": {"rope_base": 40000.0},
    "longrope": longrope_options(8),
    "yarn-tuned": {"beta_fast": 8.0, "beta_slow": 2.0, "attention_factor": 1.2},
}


@pytest.mark.parametrize("method", sorted(EXTENSIONS))
def test_extended_rope_runs_match_past_the_train_length(tmp_path, method):
    """Each extension method as a transformers rope type (or a new base), compared below the
    original length (LongRoPE's short factors, dynamic NTK's plain RoPE) and at 4x (long factors)."""
    options = methods.get(method.removesuffix("-tuned")).check_options(EXTENSIONS[method])
    rope_scaling = {"method": method.removesuffix("-tuned"), "factor": 4.0, "original_length": 32, "options": options}
    run = make_run(tmp_path, tiny_config("rope", rope_scaling=rope_scaling))
    export(run, tmp_path / "hf")
    assert logits_differ(run, tmp_path / "hf", [24, 128]) < TOLERANCE


def export_kinds() -> dict[str, ModelConfig]:
    """Every kind of run poscli exports: RoPE in each layout, each extension method, learned positions."""
    kinds = {
        "rope": tiny_config("rope"),
        "rope-interleaved-half": tiny_config("rope", {"layout": "interleaved", "rotary_fraction": 0.5}),
        "learned": tiny_config("learned", position_rows=64),
    }
    for method, given in EXTENSIONS.items():
        options = methods.get(method.removesuffix("-tuned")).check_options(given)
        scaling = {"method": method.removesuffix("-tuned"), "factor": 4.0, "original_length": 32, "options": options}
        kinds[method] = tiny_config("rope", rope_scaling=scaling)
    return kinds  # fmt: skip


LEGACY_KEYS = {"rotary_emb_base", "rotary_pct", "rope_scaling", "torch_dtype", "original_max_position_embeddings"}


@pytest.mark.parametrize("kind", sorted(export_kinds()))
def test_an_export_is_written_in_transformers_5s_form_and_loads_without_a_warning(tmp_path, kind, caplog):
    """config.json holds what transformers' own config class writes for it (``to_dict()`` after
    loading): rope_parameters and dtype, none of transformers 4's legacy keys; loading the config
    and the model raises no Python warning (as errors) and logs no transformers warning."""
    import logging
    import warnings

    run = make_run(tmp_path, export_kinds()[kind])
    written = export(run, tmp_path / "hf")
    assert not LEGACY_KEYS & set(written), LEGACY_KEYS & set(written)
    caplog.set_level(logging.WARNING, logger="transformers")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        own = transformers.AutoConfig.from_pretrained(str(tmp_path / "hf")).to_dict()
        transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "hf"), dtype=torch.float32)
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    on_disk = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert {key: own[key] for key in on_disk if key != "poscli"} == {k: v for k, v in on_disk.items() if k != "poscli"}


def test_learned_runs_export_as_gpt2_with_every_table_row(tmp_path):
    run = make_run(tmp_path, tiny_config("learned", position_rows=64))
    written = export(run, tmp_path / "hf")
    assert written["architectures"] == ["GPT2LMHeadModel"] and written["n_positions"] == 64
    assert logits_differ(run, tmp_path / "hf", [32, 64]) < TOLERANCE


def test_check_export_reports_the_difference_at_the_extended_length(tmp_path):
    rope_scaling = {
        "method": "yarn",
        "factor": 4.0,
        "original_length": 32,
        "options": methods.get("yarn").check_options({}),
    }
    run = make_run(tmp_path, tiny_config("rope", rope_scaling=rope_scaling))
    export(run, tmp_path / "hf")
    checked = check_export(run, tmp_path / "hf")
    assert checked["lengths"] == [32, 128] and checked["max_abs_diff"] < TOLERANCE


def test_encodings_transformers_lacks_answer_in_one_line(tmp_path):
    assert set(exportable_encodings()) == {"rope", "learned"}
    for pe in ("t5", "xpos", "none"):
        with pytest.raises(
            NotApplicable,
            match=f"--pe {pe}, which no transformers architecture has; poscli export takes runs of --pe learned, rope",
        ):
            export(make_run(tmp_path / pe, tiny_config(pe)), tmp_path / "hf")
    remapped = tiny_config("rope", remap={"method": "self-extend", "window": 8, "group": 4})
    with pytest.raises(NotApplicable, match="self-extend, attention at remapped positions"):
        export(make_run(tmp_path / "remap", remapped), tmp_path / "hf")
    with pytest.raises(PoscliError, match="p-RoPE"):
        export(make_run(tmp_path / "keep", tiny_config("rope", {"keep": 0.5})), tmp_path / "hf")
    gated = tiny_config("rope", attention_options={"gate": True})
    with pytest.raises(NotApplicable, match="--attention-option gate=true, which the exported architectures"):
        export(make_run(tmp_path / "gate", gated), tmp_path / "hf")
    assert not (tmp_path / "hf").exists()  # nothing written for a run that cannot be exported


def test_byte_runs_get_a_tokenizer_whose_ids_are_bytes(tmp_path):
    text = "naïve café: 12345 ✓\n"
    assert byte_level_tokenizer().encode(text).ids == list(text.encode("utf-8"))
    run = make_run(tmp_path, tiny_config("rope"))
    export(run, tmp_path / "hf")
    loaded = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    ids = loaded(text, add_special_tokens=False)["input_ids"]
    assert ids == list(text.encode("utf-8")) and loaded.decode(ids) == text


def test_cli_export_checks_and_generation_follows_poscli(tmp_path, capsys):
    """`poscli export` writes and checks the folder; greedy generation in transformers picks the
    tokens poscli's logits pick."""
    results = tmp_path / "results"
    run = make_run(results / "runs", tiny_config("rope"), name="tiny-rope")
    with pytest.raises(SystemExit) as done:
        main(["export", "tiny-rope", str(tmp_path / "hf"), "--results", str(results)])
    assert done.value.code == 0
    printed = capsys.readouterr()
    out = printed.out
    assert "wrote" in out and "GPTNeoXForCausalLM" in out and "max |logit difference|" in out
    assert "Loading weights" not in printed.err  # transformers' bar, silenced for the check and then restored
    assert transformers.utils.logging.is_progress_bar_enabled()
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["poscli"]["run"] == "tiny-rope"
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "hf")).eval()
    prompt = torch.tensor([list(b"def f(x):")])
    generated = hf.generate(prompt, max_new_tokens=6, do_sample=False, pad_token_id=0)
    model, _ = runs.load_model(run)
    tokens = prompt
    with torch.no_grad():
        for _ in range(6):
            tokens = torch.cat((tokens, model(tokens)[:, -1].argmax(-1, keepdim=True)), dim=1)
    assert generated.tolist() == tokens.tolist()


def test_cli_refuses_an_unexportable_run_in_one_line(tmp_path, capsys):
    results = tmp_path / "results"
    make_run(results / "runs", tiny_config("alibi"), name="tiny-alibi")
    with pytest.raises(SystemExit) as done:
        main(["export", "tiny-alibi", str(tmp_path / "hf"), "--results", str(results)])
    err = capsys.readouterr().err
    assert done.value.code == 2 and len(err.strip().splitlines()) == 1 and "tiny-alibi cannot be exported" in err
    assert "MPT has no biases in its MLP and LayerNorms" in err


def test_mpt_the_transformers_alibi_architecture_has_none_of_the_biases_an_alibi_run_has():
    """Why an ALiBi run is not exported as MPT: MPT's linear layers and LayerNorms have no biases,
    poscli's GPT's MLP and LayerNorms do (if transformers adds them, this fails and export can follow)."""
    model = transformers.MptForCausalLM(transformers.MptConfig(d_model=32, n_heads=4, n_layers=1, vocab_size=256,
                                                               attn_config={"alibi": True}))  # fmt: skip
    ours = GPT(tiny_config("alibi"))
    assert not [name for name, _ in model.named_parameters() if name.endswith(".bias")]
    assert {"blocks.0.mlp.0.bias", "blocks.0.norm_attn.bias"} <= {name for name, _ in ours.named_parameters()}


def test_exports_carry_special_tokens_and_a_generation_config_that_pipelines_accept(tmp_path):
    """The NUL byte (id 0, never in text) is BOS, EOS and padding: a batch of prompts of different
    lengths pads, and transformers' text-generation pipeline runs on the folder as it is."""
    run = make_run(tmp_path, tiny_config("rope"))
    export(run, tmp_path / "hf")
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    assert tokenizer.eos_token_id == tokenizer.pad_token_id == tokenizer.bos_token_id == 0
    assert transformers.GenerationConfig.from_pretrained(str(tmp_path / "hf")).eos_token_id == 0
    batch = tokenizer(["ab", "abcd"], padding=True, add_special_tokens=False)["input_ids"]
    assert batch[0][-2:] == [0, 0] or batch[0][:2] == [0, 0]  # the shorter prompt padded with the NUL byte
    pipe = transformers.pipeline("text-generation", model=str(tmp_path / "hf"), device="cpu")
    out = pipe("def f(x):", max_new_tokens=4, do_sample=False)[0]["generated_text"]
    assert out.startswith("def f(x):") and len(out.encode()) >= len(b"def f(x):")


def test_export_refuses_a_non_empty_folder_unless_replace(tmp_path, capsys):
    results = tmp_path / "results"
    make_run(results / "runs", tiny_config("rope"), name="tiny-rope")
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit) as done:
        main(["export", "tiny-rope", str(tmp_path / "hf"), "--no-check", "--results", str(results)])
    err = capsys.readouterr().err
    assert done.value.code == 2 and "is not empty; give --replace" in err and len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in (tmp_path / "hf").iterdir()) == ["notes.txt"]
    with pytest.raises(SystemExit) as done:
        main(["export", "tiny-rope", str(tmp_path / "hf"), "--no-check", "--replace", "--results", str(results)])
    assert done.value.code == 0 and (tmp_path / "hf" / "model.safetensors").exists()
    assert (tmp_path / "hf" / "notes.txt").read_text() == "mine"  # --replace overwrites the export only


def test_lm_evaluation_harness_scores_an_export_as_poscli_does(tmp_path):
    """lm-eval's HFLM loads the folder, prefixes the text with the EOS (the NUL byte) and returns the
    log-likelihood poscli's model gives the same bytes after that token (one window: the text is
    shorter than the train length)."""
    pytest.importorskip("lm_eval", reason="lm-eval is not installed (pip install 'lm-eval[hf]')")
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    run = make_run(tmp_path, tiny_config("rope"))
    export(run, tmp_path / "hf")
    lm = HFLM(pretrained=str(tmp_path / "hf"), device="cpu", batch_size=1)
    text = "def f(x):\n    return x + 1\n"
    request = Instance(request_type="loglikelihood_rolling", doc={}, arguments=(text,), idx=0)
    theirs = lm.loglikelihood_rolling([request])[0]
    model, _ = runs.load_model(run)
    tokens = torch.tensor([[0, *text.encode()]])  # the prefix token, then the bytes
    with torch.no_grad():
        log_probs = torch.log_softmax(model(tokens[:, :-1]).double(), dim=-1)
    ours = float(log_probs[0].gather(-1, tokens[0, 1:, None]).sum())
    assert lm.prefix_token_id == 0 and theirs == pytest.approx(ours, rel=1e-5)
