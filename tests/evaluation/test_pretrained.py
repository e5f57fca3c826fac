"""poscli eval hf:DIR: a transformers model scored by poscli's protocol. The round trip is the test:
a poscli run exported with poscli export and evaluated as hf:DIR gives the run's own perplexity on
the same held-out tokens, at two lengths."""

import pandas as pd
import pytest

from tests.cli.test_cli import TINY, poscli
from tests.conftest import write_text_corpus


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    base = tmp_path_factory.mktemp("pretrained")
    corpus = write_text_corpus(base / "corpus", documents=12, words=1200)
    results = base / "results"
    done = poscli("train", "--pe", "rope", "--data", str(corpus), "--steps", "6", "--name", "r", "--results",
                  str(results), *TINY)  # fmt: skip
    assert done.returncode == 0, done.stderr
    done = poscli("export", "r", str(base / "hf"), "--no-check", "--results", str(results))
    assert done.returncode == 0, done.stderr
    return corpus, results, base / "hf"


@pytest.mark.slow
def test_an_exported_run_evaluated_as_hf_gives_the_runs_own_perplexity(exported):
    corpus, results, folder = exported
    common = ["--lengths", "32,64", "--results", str(results), "--no-reference", "--quiet"]
    done = poscli("eval", "r", "--table", "own", *common)
    assert done.returncode == 0, done.stderr
    done = poscli("eval", f"hf:{folder}", "--data", str(corpus), "--table", "hf", *common)
    assert done.returncode == 0, done.stderr
    own = pd.read_csv(results / "own.csv").set_index("length")
    hf = pd.read_csv(results / "hf.csv").set_index("length")
    assert (hf["run"] == f"hf:{folder}").all() and (hf["pe"] == "rope").all() and (hf["train_length"] == 32).all()
    for length in (32, 64):
        assert hf.loc[length, "tokens"] == own.loc[length, "tokens"] > 0  # the same held-out tokens
        assert hf.loc[length, "ppl"] == pytest.approx(own.loc[length, "ppl"], rel=1e-4)
    # extended by YaRN to 4x (the export's GPT-NeoX layout rotates the whole head), then evaluated there
    done = poscli("extend", f"hf:{folder}", "--method", "yarn", "--target", "128", "--results", str(results))
    assert done.returncode == 0, done.stderr
    done = poscli("eval", f"hf:{results / 'pretrained' / 'hf+yarn-128'}", "--data", str(corpus), "--lengths", "128",
                  "--table", "hf-yarn", "--results", str(results), "--no-reference", "--quiet")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert pd.read_csv(results / "hf-yarn.csv")["ppl"].between(1, 256).all()


def test_a_hub_name_offline_and_a_missing_folder_fail_in_one_line(tmp_path):
    """Offline (HF_HUB_OFFLINE=1, as a machine without network behaves) a hub name is one line saying
    it is neither cached nor reachable; so is a folder that does not exist."""
    import os
    import subprocess
    import sys

    offline = {**os.environ, "HF_HUB_OFFLINE": "1"}
    hub = subprocess.run(
        [sys.executable, "-P", "-m", "poscli", "eval", "hf:no-such-org/no-such-model", "--lengths", "32",
         "--results", str(tmp_path)], capture_output=True, text=True, env=offline,
    )  # fmt: skip
    missing = poscli("eval", f"hf:{tmp_path / 'missing'}", "--lengths", "32", "--results", str(tmp_path))
    for done in (hub, missing):
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "give a local folder (hf:PATH)" in done.stderr
    assert "not in this machine's Hugging Face cache, and the hub (huggingface.co) cannot be reached" in hub.stderr
    assert "no such folder" in missing.stderr


def test_an_unreachable_hub_is_asked_of_the_cache_alone_and_a_folder_without_a_tokenizer_says_so(tmp_path, monkeypatch):
    """Where the hub cannot be reached, transformers is asked for the cached files only
    (local_files_only: no retries); a model folder with a config but no tokenizer files is refused
    by name, where transformers 5 would build an empty tokenizer that reads every text as nothing."""
    import transformers

    from poscli.errors import PoscliError
    from poscli.model import pretrained

    asked = []

    def from_pretrained(source, **settings):
        asked.append(settings)
        raise OSError("not cached")

    monkeypatch.setattr(pretrained, "hub_reachable", lambda: False)
    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", from_pretrained)
    with pytest.raises(PoscliError, match="not in this machine's Hugging Face cache"):
        pretrained.pretrained_config("hf:some-org/some-model")
    assert asked == [{"local_files_only": True}]
    monkeypatch.undo()
    transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2).save_pretrained(tmp_path / "no-tokenizer")
    with pytest.raises(PoscliError, match="has no tokenizer files"):
        pretrained.pretrained_tokenizer(f"hf:{tmp_path / 'no-tokenizer'}")


def test_hf_models_refuse_other_tasks_for_now(tmp_path):
    done = poscli("eval", "hf:whatever", "--task", "multiquery", "--results", str(tmp_path))
    assert done.returncode == 2 and "hf: models take the perplexity, passkey and algorithmic evaluations" in done.stderr


def test_an_algorithmic_task_in_a_models_own_tokenizer_scores_the_answers_tokens():
    """A tokenizer that merges letters (a BPE trained here): a model that always predicts the true
    next token is exact on every instance, one that predicts a wrong token on none (the answer scored
    in the model's tokens, not in bytes)."""
    import numpy as np
    import torch

    from poscli.data.tokenizer import train_bpe
    from poscli.evaluation import tasks
    from poscli.evaluation.algorithmic import score

    reverse = tasks.get("reverse")
    examples = reverse.examples(6, 8)
    tokenizer = train_bpe(["".join(p + a for p, a in examples) * 20], 300)
    sequences = [np.concatenate([tokenizer.encode(p), tokenizer.encode(a)]) for p, a in examples]
    assert max(map(len, sequences)) < max(len(p + a) for p, a in examples)  # merged: fewer tokens than bytes

    class Oracle(torch.nn.Module):  # the argmax at each position is the true next token (or, if wrong, the next one)
        def __init__(self, shift):
            super().__init__()
            self.shift = shift

        def forward(self, tokens):  # (B, T) -> (B, T, V)
            logits = torch.zeros(*tokens.shape, 300)
            for row, sequence in enumerate(sequences):
                following = torch.from_numpy(sequence[1:].astype(np.int64))
                logits[row, torch.arange(len(following)), (following + self.shift) % 300] = 1.0
            return logits

    exact, share = score(Oracle(0), examples, "cpu", None, tokenizer)
    assert exact.all() and (share == 1).all()
    exact, share = score(Oracle(1), examples, "cpu", None, tokenizer)
    assert not exact.any() and (share == 0).all()


@pytest.mark.slow
def test_passkey_on_an_exported_run_as_hf_is_the_runs_own(exported):
    """The same prompts in the model's own tokenizer (here bytes): every cell's accuracy, digit
    accuracy and answer log-probability equal the run's."""
    _, results, folder = exported
    common = ["--task", "passkey", "--lengths", "128", "--depths", "0,50,100", "--trials", "4", "--results",
              str(results), "--quiet"]  # fmt: skip
    assert poscli("eval", "r", "--table", "pk-own", *common).returncode == 0
    done = poscli("eval", f"hf:{folder}", "--table", "pk-hf", *common)
    assert done.returncode == 0, done.stderr
    own = pd.read_csv(results / "pk-own.csv").set_index("depth")
    hf = pd.read_csv(results / "pk-hf.csv").set_index("depth")
    assert list(hf.index) == list(own.index) == [0, 50, 100]
    assert (hf["correct"] == own["correct"]).all() and (hf["digit_accuracy"] == own["digit_accuracy"]).all()
    assert hf["answer_logprob"].tolist() == pytest.approx(own["answer_logprob"].tolist(), rel=1e-4)
    assert list(results.glob("pk-hf-hf-*.png"))  # the heatmap's file name has no '/' or ':'


def tiny_hub_model(folder, architecture: str):
    """A randomly initialised Llama or Qwen2 built from a config (no download), with a byte-level
    tokenizer, saved as transformers saves any model."""
    import json

    import torch
    import transformers

    from poscli.export.hf import byte_level_tokenizer

    torch.manual_seed(0)
    sizes = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=256, max_position_embeddings=32)  # fmt: skip
    if architecture == "gpt_neox":  # GPT-NeoX: one key-value head per query head, half of each head rotated
        del sizes["num_key_value_heads"]
        sizes["rotary_pct"] = 0.5
    classes = {"llama": transformers.LlamaConfig, "qwen2": transformers.Qwen2Config,
               "mistral": transformers.MistralConfig, "gpt_neox": transformers.GPTNeoXConfig,
               "gemma": transformers.GemmaConfig}  # fmt: skip
    config = classes[architecture](**sizes)
    model = transformers.AutoModelForCausalLM.from_config(config)
    model.save_pretrained(str(folder))
    byte_level_tokenizer().save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("architecture", ["llama", "qwen2", "gpt_neox", "gemma"])
def test_a_tiny_llama_and_qwen2_evaluate_and_extend_by_rope_scaling_and_by_a_remapping(tmp_path, architecture):
    """eval hf:DIR at the model's length and 4x; extend hf:DIR --method yarn writes a folder whose
    frequencies transformers computes as poscli does (checked by the command), then evaluates at 4x;
    and --method self-extend (grouped-query attention: 4 query heads, 2 key-value heads) evaluates too."""
    import json

    corpus = write_text_corpus(tmp_path / "corpus", documents=12, words=600)
    folder = tiny_hub_model(tmp_path / architecture, architecture)
    results = tmp_path / "results"
    common = ["--data", str(corpus), "--results", str(results), "--no-reference", "--quiet"]
    done = poscli("eval", f"hf:{folder}", "--lengths", "32,128", "--table", "base", *common)
    assert done.returncode == 0, done.stderr
    done = poscli("extend", f"hf:{folder}", "--method", "yarn", "--target", "128", "--results", str(results))
    assert done.returncode == 0, done.stderr
    extended = results / "pretrained" / f"{architecture}+yarn-128"
    written = json.loads((extended / "config.json").read_text())
    assert written["rope_scaling"]["rope_type"] == "yarn" and written["poscli_extension"]["factor"] == 4.0
    done = poscli("eval", f"hf:{extended}", "--lengths", "32,128", "--table", "yarn", *common)
    assert done.returncode == 0, done.stderr
    base, yarn = pd.read_csv(results / "base.csv"), pd.read_csv(results / "yarn.csv")
    assert (base["ppl"] > 1).all() and (yarn["ppl"] > 1).all() and (yarn["train_length"] == 32).all()
    assert list(base["tokens"]) == list(yarn["tokens"])  # the same held-out tokens for both
    done = poscli("extend", f"hf:{folder}", "--method", "self-extend", "--target", "128", "--results", str(results))
    assert done.returncode == 0, done.stderr  # a remapping, computed through transformers' AttentionInterface
    remapped = results / "pretrained" / f"{architecture}+self-extend-128"
    done = poscli("eval", f"hf:{remapped}", "--lengths", "32,128", "--table", "remapped", *common)
    assert done.returncode == 0, done.stderr
    assert (pd.read_csv(results / "remapped.csv")["ppl"] > 1).all()
    refused = poscli("extend", f"hf:{folder}", "--method", "drope", "--target", "128", "--results", str(results))
    assert refused.returncode == 2 and "hf: models take a remapping, an attention temperature" in refused.stderr


@pytest.mark.parametrize("method", ["self-extend", "rerope", "dca", "lm-infinite", "llama4-temperature", "yarn-beta"])
def test_a_remapped_hf_model_gives_poscli_remapped_logits_on_the_same_weights(tmp_path, method):
    """An exported RoPE run extended as hf:DIR by a remapping (or an attention temperature):
    transformers' model, with poscli's attention registered in its AttentionInterface, gives the
    logits of poscli's own extended model (the same weights and plan) past the train length."""
    import json

    import torch

    from poscli.config import ModelConfig
    from poscli.export.hf import export
    from poscli.extension import methods
    from poscli.model import runs
    from poscli.model.gpt import GPT
    from poscli.model.pretrained import load_pretrained
    from poscli.training.extend_pretrained import extend_pretrained
    from tests.conftest import tiny_config
    from tests.export.test_export import make_run

    run = make_run(tmp_path, tiny_config("rope"))
    export(run, tmp_path / "hf")
    folder = extend_pretrained(f"hf:{tmp_path / 'hf'}", method, 128, tmp_path / "remapped")
    hf_model, config = load_pretrained(f"hf:{folder}")
    model, _ = runs.load_model(run)
    if method == "llama4-temperature":  # an attention temperature: recorded as a poscli run records it
        changes = {"query_scaling": {"method": method, "original_length": 32, "factor": 4.0, "beta": 0.1,
                                     "floor_scale": 0.0}}  # fmt: skip
        assert config["query_scaling"] == changes["query_scaling"]
    elif method == "yarn-beta":  # YaRN's rope type in config.json, the temperature through the attention function
        from poscli import encodings

        chosen = methods.get(method)
        changes = chosen.extended_config(encodings.get("rope"), model.config, 4.0, 128, chosen.check_options({}), {})
        assert config["query_scaling"] == {"method": "yarn-beta", "original_length": 32, "beta": 0.1}
        assert json.loads((folder / "config.json").read_text())["rope_scaling"]["rope_type"] == "yarn"
    else:
        changes = {"remap": methods.plan_remap(method, 32, 128).to_dict()}
        assert config["remap"] == changes["remap"]
    remapped = GPT(ModelConfig.from_dict({**model.config.to_dict(), **changes})).eval()
    remapped.load_state_dict(model.state_dict())
    tokens = torch.randint(0, 256, (2, 100), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        theirs, ours, plain = hf_model(tokens), remapped(tokens), model(tokens)
    torch.testing.assert_close(theirs, ours, rtol=1e-4, atol=1e-4)
    assert not torch.allclose(theirs[:, 40:], plain[:, 40:], atol=1e-3)  # the remapping changed something


def test_a_window_is_read_after_the_start_token_the_models_tokenizer_adds(tmp_path):
    """A tokenizer that puts <s> (id 1) before a text: each window is read after it and only the
    window's own logits come back; a tokenizer that adds nothing (an export's) reads the bare window."""
    import torch
    from tokenizers import processors

    from poscli.export.hf import byte_level_tokenizer
    from poscli.model.pretrained import load_pretrained

    folder = tiny_hub_model(tmp_path / "llama", "llama")
    tokens = torch.randint(2, 256, (2, 20), generator=torch.Generator().manual_seed(0))
    bare, _ = load_pretrained(f"hf:{folder}")
    with torch.no_grad():
        assert bare.bos is None
        torch.testing.assert_close(bare(tokens), bare.model(tokens).logits, rtol=0, atol=0)
        tokenizer = byte_level_tokenizer()
        tokenizer.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
        tokenizer.save(str(folder / "tokenizer.json"))
        marked, _ = load_pretrained(f"hf:{folder}")
        after_start = marked.model(torch.cat([torch.ones(2, 1, dtype=torch.long), tokens], 1)).logits[:, 1:]
        assert marked.bos == 1 and marked(tokens).shape == (2, 20, 256)
        torch.testing.assert_close(marked(tokens), after_start, rtol=0, atol=0)
        assert not torch.allclose(marked(tokens), bare(tokens), atol=1e-4)  # the start token changes the logits


def test_a_length_that_cannot_fit_is_refused_in_one_line_before_any_window(tmp_path):
    """The estimate counts the weights as their files' size and grows with the length; a window of
    a million tokens (a 10^12-value causal mask) is refused before the evaluation set is built."""
    from poscli.model.pretrained import inference_memory

    folder = tiny_hub_model(tmp_path / "llama", "llama")
    name = f"hf:{folder}"
    short, long = inference_memory(name, 64, 1, 1 << 10), inference_memory(name, 640, 1, 1 << 10)
    assert short["weights"] == long["weights"] == (folder / "model.safetensors").stat().st_size
    assert long["activations"] > 10 * short["activations"] and long["logits"] > short["logits"]  # the mask: quadratic
    done = poscli("eval", name, "--lengths", "1m", "--results", str(tmp_path / "results"))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "at length 1048576 needs about" in done.stderr and "give shorter --lengths" in done.stderr


@pytest.mark.slow
def test_the_3gram_row_of_a_model_in_another_tokenizer_scores_the_same_text_in_bytes(exported, tmp_path):
    """The 3-gram row is fitted and scored over bytes whatever the model's tokenizer: through an
    export's byte-level tokenizer it is the run's own 3-gram row (perplexity and bits per byte), and
    through a BPE tokenizer it spends about the same bits on each byte of the same held-out documents."""
    import json

    from poscli.data.tokenizer import train_bpe

    corpus, results, folder = exported
    common = ["--lengths", "64", "--results", str(results), "--quiet"]
    assert poscli("eval", "r", "--table", "ref-own", *common).returncode == 0
    done = poscli("eval", f"hf:{folder}", "--data", str(corpus), "--table", "ref-hf", *common)
    assert done.returncode == 0, done.stderr
    own = pd.read_csv(results / "ref-own.csv").set_index("pe").loc["reference"]
    through_hf = pd.read_csv(results / "ref-hf.csv").set_index("pe").loc["reference"]
    assert through_hf["run"].startswith("reference-3gram-") and through_hf["label"].endswith(", per hf token")
    assert through_hf["ppl"] == pytest.approx(own["ppl"], rel=1e-9) and through_hf["bpb"] == pytest.approx(own["bpb"])

    bpe = tiny_hub_model(tmp_path / "bpe", "llama")
    texts = [path.read_text() for path in sorted(corpus.iterdir())]
    train_bpe(texts, 300).save(bpe)
    config = json.loads((bpe / "config.json").read_text())
    (bpe / "config.json").write_text(json.dumps({**config, "vocab_size": 300}))
    import transformers

    transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.from_pretrained(bpe)).save_pretrained(bpe)
    done = poscli("eval", f"hf:{bpe}", "--data", str(corpus), "--table", "ref-bpe", *common)
    assert done.returncode == 0, done.stderr
    rows = pd.read_csv(results / "ref-bpe.csv").set_index("pe")
    reference = rows.loc["reference"]
    assert reference["ppl"] > own["ppl"]  # per BPE token, each of which stands for several bytes
    assert reference["bpb"] == pytest.approx(own["bpb"], rel=0.05)
