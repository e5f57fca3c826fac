"""Export a run as a transformers model folder (``poscli export RUN DIR``).

poscli's GPT is pre-norm with LayerNorm, a GELU MLP with biases, attention projections without
biases and tied embeddings: GPT-NeoX (Black et al., 2022) with ``use_parallel_residual=False``
and ``attention_bias=False`` for rotary runs, and GPT-2 (Radford et al., 2019), with zero
attention biases, for learned-position runs, are the same network. The encoding says which
architecture expresses it (``PositionalEncoding.transformers_layout``); an encoding no
transformers architecture has is a one-line answer. The folder holds ``config.json``,
``model.safetensors`` and a tokenizer (``tokenizer.json``, the run's own or, for byte runs, a
byte-level tokenizer whose ids are the bytes), so ``AutoModelForCausalLM.from_pretrained`` and
``AutoTokenizer.from_pretrained`` load it, and ``generate`` and lm-evaluation-harness work on it.

The config is written as transformers 5 writes it for the same architecture (``rope_parameters``,
``dtype``; not transformers 4's legacy ``rotary_emb_base``, ``rotary_pct``, ``rope_scaling`` and
``torch_dtype``, which transformers 5 only maps over). When transformers is installed,
``check_export`` loads the folder and compares its logits with poscli's.

Shape legend: C width, H heads, hd head dimension, V vocabulary.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from poscli import encodings
from poscli.config import ModelConfig
from poscli.core.io import atomic_write
from poscli.data import tokenizer as tokenizers
from poscli.data.tokenizer import bytes_to_unicode
from poscli.errors import NotApplicable, PoscliError
from poscli.model import runs

LAYER_NORM_EPS = 1e-5  # torch.nn.LayerNorm's default, which poscli's GPT uses


@dataclass(frozen=True)
class Architecture:
    """A transformers architecture poscli's GPT maps onto: its config keys and weight names."""

    model_type: str
    class_name: str
    config: Callable[[object, dict], dict]  # (ModelConfig, the encoding's layout) -> config.json keys
    weights: Callable[[dict, object, dict], dict]  # (poscli state dict, ModelConfig, layout) -> transformers state dict


def _neox_config(model, layout: dict) -> dict:
    config = {
        "hidden_size": model.d_model,
        "num_hidden_layers": model.n_layer,
        "num_attention_heads": model.n_head,
        "intermediate_size": model.mlp_ratio * model.d_model,
        "hidden_act": "gelu",
        "layer_norm_eps": LAYER_NORM_EPS,
        "use_parallel_residual": False,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "hidden_dropout": 0.0,
        "max_position_embeddings": layout["max_position_embeddings"],
        "rope_parameters": rope_parameters(layout),
    }
    return config


def rope_parameters(layout: dict) -> dict:
    """transformers 5's ``rope_parameters``: the rope type, its theta, the rotated share of a head and
    the extension's own parameters (what transformers 4 spread over rope_scaling, rotary_emb_base
    and rotary_pct)."""
    scaling = dict(layout["rope_scaling"] or {"rope_type": "default"})
    return {"rope_type": scaling.pop("rope_type"), "rope_theta": layout["rope_theta"],
            "partial_rotary_factor": layout["partial_rotary_factor"], **scaling}  # fmt: skip


def _neox_weights(state: dict, model, layout: dict) -> dict:
    """GPT-NeoX fuses q, k, v per head ([q_h, k_h, v_h] for each head h) where poscli stacks all
    heads' q, then k, then v; ``pair_order`` reorders q's and k's dimensions (interleaved RoPE)."""
    C, H, hd = model.d_model, model.n_head, model.head_dim
    order = torch.tensor(layout["pair_order"]) if layout["pair_order"] is not None else None
    out = {
        "gpt_neox.embed_in.weight": state["token_embedding.weight"],  # embed_out: tied (tie_word_embeddings)
        "gpt_neox.final_layer_norm.weight": state["norm_out.weight"],
        "gpt_neox.final_layer_norm.bias": state["norm_out.bias"],
    }
    for layer in range(model.n_layer):
        ours, theirs = f"blocks.{layer}.", f"gpt_neox.layers.{layer}."
        qkv = state[ours + "attn.qkv.weight"].view(3, H, hd, C)  # (q|k|v, H, hd, C)
        if order is not None:
            qkv = torch.cat((qkv[:2, :, order], qkv[2:]))
        out[theirs + "attention.query_key_value.weight"] = qkv.transpose(0, 1).reshape(
            3 * C, C
        )  # (H, q|k|v, hd, C) rows
        out[theirs + "attention.dense.weight"] = state[ours + "attn.proj.weight"]
        for norm, name in (("norm_attn", "input_layernorm"), ("norm_mlp", "post_attention_layernorm")):
            for kind in ("weight", "bias"):
                out[f"{theirs}{name}.{kind}"] = state[f"{ours}{norm}.{kind}"]
        for index, name in ((0, "dense_h_to_4h"), (2, "dense_4h_to_h")):
            for kind in ("weight", "bias"):
                out[f"{theirs}mlp.{name}.{kind}"] = state[f"{ours}mlp.{index}.{kind}"]
    return out


def _gpt2_config(model, layout: dict) -> dict:
    return {
        "n_embd": model.d_model,
        "n_layer": model.n_layer,
        "n_head": model.n_head,
        "n_inner": model.mlp_ratio * model.d_model,
        "n_positions": layout["n_positions"],
        "activation_function": "gelu",
        "layer_norm_epsilon": LAYER_NORM_EPS,
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "attn_pdrop": 0.0,
        "scale_attn_weights": True,
    }


def _gpt2_weights(state: dict, model, layout: dict) -> dict:
    """GPT-2's Conv1D layers hold (in, out) matrices, the transpose of nn.Linear's; its attention
    projections have biases, which are zero here."""
    C = model.d_model
    out = {
        "transformer.wte.weight": state["token_embedding.weight"],
        "transformer.wpe.weight": state["encoding.table.weight"],
        # lm_head: tied to wte (tie_word_embeddings)
        "transformer.ln_f.weight": state["norm_out.weight"],
        "transformer.ln_f.bias": state["norm_out.bias"],
    }
    for layer in range(model.n_layer):
        ours, theirs = f"blocks.{layer}.", f"transformer.h.{layer}."
        out[theirs + "attn.c_attn.weight"] = state[ours + "attn.qkv.weight"].T
        out[theirs + "attn.c_attn.bias"] = torch.zeros(3 * C)
        out[theirs + "attn.c_proj.weight"] = state[ours + "attn.proj.weight"].T
        out[theirs + "attn.c_proj.bias"] = torch.zeros(C)
        for norm, name in (("norm_attn", "ln_1"), ("norm_mlp", "ln_2")):
            for kind in ("weight", "bias"):
                out[f"{theirs}{name}.{kind}"] = state[f"{ours}{norm}.{kind}"]
        for index, name in ((0, "c_fc"), (2, "c_proj")):
            out[f"{theirs}mlp.{name}.weight"] = state[f"{ours}mlp.{index}.weight"].T
            out[f"{theirs}mlp.{name}.bias"] = state[f"{ours}mlp.{index}.bias"]
    return out


ARCHITECTURES = {
    "gpt_neox": Architecture("gpt_neox", "GPTNeoXForCausalLM", _neox_config, _neox_weights),
    "gpt2": Architecture("gpt2", "GPT2LMHeadModel", _gpt2_config, _gpt2_weights),
}


def exportable_encodings() -> list[str]:
    """Built-in encodings a transformers architecture expresses (at their default options)."""

    def expressed(name: str) -> bool:
        try:
            return encodings.build(ModelConfig(pe=name)).transformers_layout() is not None
        except PoscliError:  # an encoding that says why no architecture fits (ALiBi)
            return False

    return [name for name in encodings.builtin_names() if expressed(name)]


def layout_of(model, name: str) -> dict:
    """The encoding's transformers layout, or a one-line answer why run ``name`` cannot be exported."""
    config = model.config
    if config.remap:
        raise NotApplicable(
            f"{name} uses --method {config.remap.get('method')}, attention at remapped positions, which no "
            "transformers model implements; export the run it was extended from"
        )
    if config.query_scaling:
        raise NotApplicable(
            f"{name} uses --method {config.query_scaling.get('method')}, an attention temperature on the queries, "
            "which the exported architectures (GPT-2, GPT-NeoX) do not have; export the run it was extended from"
        )
    if config.attention_options:
        switches = ", ".join(f"{key}=true" for key in config.attention_options)
        raise NotApplicable(
            f"{name} was trained with --attention-option {switches}, which the exported architectures (GPT-2, "
            "GPT-NeoX) do not have; export a run trained without it"
        )
    try:
        layout = model.encoding.transformers_layout()
    except NotApplicable:
        raise
    except PoscliError as error:  # a setting of the encoding transformers cannot express
        raise NotApplicable(f"{name} cannot be exported: {error}") from None
    if layout is None:
        raise NotApplicable(
            f"{name} has --pe {config.pe}, which no transformers architecture has; poscli export takes runs of "
            f"--pe {', '.join(exportable_encodings())}"
        )
    return layout


# poscli's runs have no special tokens: the NUL byte (id 0 in a byte run's vocabulary; a BPE run's
# byte-level alphabet has it too), which text never contains, stands in for BOS, EOS and padding, so
# tools that need them (transformers' pipeline, lm-evaluation-harness) have ids inside the vocabulary.
SPECIAL_TOKEN = "\u0100"  # GPT-2's byte-to-unicode symbol of byte 0


def check_folder(folder: Path, replace: bool) -> None:
    """A folder to export into: absent, empty, or (``replace``) one whose files are overwritten."""
    if folder.exists() and not folder.is_dir():
        raise PoscliError(f"{folder} is a file; give a folder to export into")
    if folder.exists() and any(folder.iterdir()) and not replace:
        raise PoscliError(f"{folder} is not empty; give --replace to overwrite the export there, or another folder")


def export(run: Path, folder: Path, replace: bool = False) -> dict:
    """Write ``folder`` as a transformers model folder for ``run`` (refusing a non-empty folder unless
    ``replace``). Returns its config.json dict."""
    check_folder(folder, replace)
    model, config = runs.load_model(run)
    model_config = model.config
    layout = layout_of(model, config["name"])
    architecture = ARCHITECTURES[layout["architecture"]]
    state = {key: value.detach().float().cpu() for key, value in model.state_dict().items()}
    folder.mkdir(parents=True, exist_ok=True)
    special = _write_tokenizer(run, config, folder, layout)  # the NUL byte's id, or None
    hf_config = {
        "architectures": [architecture.class_name],
        "model_type": architecture.model_type,
        "vocab_size": model_config.vocab_size,
        "tie_word_embeddings": True,
        "dtype": "float32",
        "bos_token_id": special,
        "eos_token_id": special,
        "pad_token_id": special,
        **architecture.config(model_config, layout),
        "poscli": {"run": config["name"], "pe": model_config.pe, "rope_scaling": model_config.rope_scaling or None},
    }
    weights = {key: value.contiguous() for key, value in architecture.weights(state, model_config, layout).items()}
    from safetensors.torch import save

    with atomic_write(folder / "model.safetensors", "wb") as handle:
        handle.write(save(weights, metadata={"format": "pt"}))
    with atomic_write(folder / "config.json") as handle:
        handle.write(json.dumps(hf_config, indent=2) + "\n")
    generation = {"bos_token_id": special, "eos_token_id": special, "pad_token_id": special}
    with atomic_write(folder / "generation_config.json") as handle:
        handle.write(json.dumps(generation, indent=2) + "\n")
    return hf_config


def _write_tokenizer(run: Path, config: dict, folder: Path, layout: dict) -> int | None:
    """tokenizer.json (the run's BPE, or bytes as a byte-level vocabulary with no merges) and a
    tokenizer_config.json that makes ``AutoTokenizer`` read it as a fast tokenizer, with the NUL
    byte as its BOS, EOS and padding token. Returns that token's id (None: not in the vocabulary)."""
    from tokenizers import Tokenizer

    spec = config["train"].get("tokenizer", "bytes")
    if spec == "bytes":
        byte_level_tokenizer().save(str(folder / tokenizers.TOKENIZER_FILE))
    else:
        tokenizers.run_tokenizer(spec, run).save(folder)
    special = Tokenizer.from_file(str(folder / tokenizers.TOKENIZER_FILE)).token_to_id(SPECIAL_TOKEN)
    length = layout.get("n_positions") or layout.get("max_position_embeddings")
    specials = dict.fromkeys(("bos_token", "eos_token", "pad_token"), SPECIAL_TOKEN) if special is not None else {}
    settings = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": length,
        "clean_up_tokenization_spaces": False,
        **specials,
    }
    with atomic_write(folder / "special_tokens_map.json") as handle:
        handle.write(json.dumps(specials, indent=2) + "\n")
    with atomic_write(folder / "tokenizer_config.json") as handle:
        handle.write(json.dumps(settings, indent=2) + "\n")
    return special


def byte_level_tokenizer():
    """A ``tokenizers.Tokenizer`` whose ids are UTF-8 bytes, as poscli's byte runs read text: a
    byte-level BPE with GPT-2's byte-to-character table, every byte its own token, no merges."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {char: byte for byte, char in bytes_to_unicode().items()}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def check_lengths(model_config, layout: dict) -> list[int]:
    """Lengths at which to compare logits: the train length, and, for an extended run, the length
    it was extended to (at most 1024 tokens, so the check takes seconds)."""
    lengths = [model_config.train_length]
    reach = layout.get("n_positions") or layout.get("max_position_embeddings")
    if model_config.rope_scaling:
        reach = round(model_config.rope_scaling.get("factor", 1) * model_config.train_length)
    if reach > model_config.train_length:
        lengths.append(min(reach, 1024))
    return lengths


def check_export(run: Path, folder: Path, seed: int = 0) -> dict:
    """Load ``folder`` with transformers and compare its logits with poscli's on random tokens at
    ``check_lengths``. Returns {"max_abs_diff", "lengths", "transformers"}; raises when
    transformers is missing."""
    try:
        import transformers
    except ImportError:
        raise PoscliError(
            "checking an export needs transformers 5: pip install 'transformers>=5' (or pip install -e '.[export]')"
        ) from None
    model, config = runs.load_model(run)
    layout = layout_of(model, config["name"])
    bars = transformers.utils.logging.is_progress_bar_enabled()
    transformers.utils.logging.disable_progress_bar()  # a local folder: no "Loading weights" bar under poscli's lines
    try:
        hf_model = transformers.AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    finally:
        if bars:
            transformers.utils.logging.enable_progress_bar()
    generator = torch.Generator().manual_seed(seed)
    worst, lengths = 0.0, check_lengths(model.config, layout)
    for length in lengths:
        tokens = torch.randint(0, model.config.vocab_size, (1, length), generator=generator)  # (1, T)
        with torch.no_grad():
            ours = model(tokens)  # (1, T, V)
            theirs = hf_model(tokens).logits  # (1, T, V)
        worst = max(worst, float((ours - theirs).abs().max()))
    if not math.isfinite(worst):
        raise PoscliError(f"the export of {run.name} gives non-finite logits in transformers")
    return {"max_abs_diff": worst, "lengths": lengths, "transformers": transformers.__version__}
