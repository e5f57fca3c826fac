"""``poscli extend hf:DIR``: a pretrained transformers model extended through its own rope scaling
(a frequency method) or a remapping / attention temperature recorded in its config.json, which
``poscli.model.pretrained.load_pretrained`` applies."""

from __future__ import annotations

from pathlib import Path

from poscli.config import ModelConfig
from poscli.errors import PoscliError
from poscli.extension import methods
from poscli.extension.methods.protocol import FrequencyMethod, QueryScalingMethod, RemapMethod
from poscli.model.pretrained import (
    REMAP_KEY,
    SCALING_KEY,
    loading,
    rope_of,
    source_of,
    transformers_module,
)


def extend_pretrained(name: str, method: str, target: int, out: Path, options: dict | None = None) -> Path:
    """``poscli extend hf:DIR --method M --target N``: a frequency method through the model's own
    rope scaling (transformers' rope type), written as a folder transformers loads again, the method
    recorded in its config.json (``poscli_extension``). The frequencies transformers then computes
    are checked equal to poscli's own (``poscli.extension.methods.rope_parameters``) before the
    folder is kept. Returns the folder."""
    import shutil

    import torch

    transformers = transformers_module()
    chosen = methods.get(method)
    if issubclass(chosen, (RemapMethod, QueryScalingMethod)) and chosen.name != "drope":
        return _remapped_copy(name, chosen, target, out, options or {})
    rope = _rope_method(chosen)
    if rope is None:
        usable = [m for m in methods.frequency_method_names()[1:] if _rope_method(methods.get(m)) is not None]
        raise PoscliError(
            f"--method {method}: hf: models take a remapping, an attention temperature, or a frequency method "
            f"transformers has a rope type for: {', '.join(usable)} (ntk and base: a new rope_theta)"
            + ("; DroPE recalibrates by training, which hf: extension does not do" if method == "drope" else "")
        )
    source = source_of(name)
    config = loading(name, "config", lambda **hub: transformers.AutoConfig.from_pretrained(source, **hub)).to_dict()
    rotary_dim, base, original = rope_of(config)
    if target <= original:
        raise PoscliError(f"--target {target} is not longer than the model's length {original}")
    checked = chosen.check_options(options or {})
    factor = target / original
    theta, scaling = rope.transformers_rope(rotary_dim, base, factor, original, _own(rope, checked))
    if rope is not chosen:  # yarn-beta: YaRN's rope type, and the temperature as an attention function computes it
        config[SCALING_KEY] = {"method": method, "original_length": original,
                               **{key: value for key, value in checked.items() if key not in rope.options}}  # fmt: skip
    if "rope_parameters" in config:  # transformers 5: one dict holds the base and the scaling
        kept = config["rope_parameters"] or {}  # what else it holds (GPT-NeoX's partial_rotary_factor)
        config["rope_parameters"] = {**kept, "rope_theta": theta, **(scaling or {"rope_type": "default"})}
    config["rope_scaling"] = scaling
    config["rope_theta" if "rotary_emb_base" not in config else "rotary_emb_base"] = theta
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    if rotary_dim < head_dim or config.get("model_type") == "gpt_neox":
        # transformers 5's GPT-NeoX config re-derives the rotated fraction from rotary_pct (default 0.25)
        # when it is absent, and its to_dict() leaves it out: state it under both names
        config["rotary_pct"] = config["partial_rotary_factor"] = rotary_dim / head_dim
    config["max_position_embeddings"] = target
    config["poscli_extension"] = {"from": source, "method": method, "factor": factor, "target": target,
                                  "original_length": original, "options": checked}  # fmt: skip
    _copy_model(name, source, out, config)
    extended = transformers.AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32)
    rotary = next(module for key, module in extended.named_modules() if key.endswith("rotary_emb"))
    ours, scale = methods.rope_parameters(method, rotary_dim, base, factor, original, **checked)
    theirs = rotary.inv_freq.float().cpu()
    same_scale = abs(float(getattr(rotary, "attention_scaling", 1.0)) - scale) < 1e-6
    if theirs.shape != ours.shape or not torch.allclose(theirs, ours, rtol=1e-5, atol=0) or not same_scale:
        shutil.rmtree(out)
        raise PoscliError(f"transformers {transformers.__version__} computes other frequencies for {method}; not kept")
    return out


def _rope_method(chosen):
    """The frequency method whose transformers rope type writes ``chosen``'s frequencies: itself, or
    for a frequency method with an attention temperature (``yarn-beta``) the parent that has one;
    None where transformers has no rope type for them."""

    if not issubclass(chosen, FrequencyMethod):
        return None
    if chosen.transformers_type is not None:
        return chosen
    if not hasattr(chosen, "query_scale"):
        return None
    return next((c for c in chosen.__mro__[1:] if getattr(c, "transformers_type", None)), None)


def _own(method, options: dict) -> dict:
    """The options ``method`` declares, of ``options``."""
    return {key: value for key, value in options.items() if key in method.options}


def _copy_model(name: str, source: str, out: Path, config: dict) -> None:
    """The model's weights and tokenizer into ``out``, with ``config`` as its config.json."""
    import json
    import shutil

    transformers = transformers_module()
    model = loading(
        name, "weights", lambda **hub: transformers.AutoModelForCausalLM.from_pretrained(source, dtype="auto", **hub)
    )
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out))
    if Path(source).is_dir():
        for kept in Path(source).glob("*token*"):  # tokenizer.json, tokenizer_config.json, special_tokens_map.json
            shutil.copy2(kept, out / kept.name)
    else:
        transformers.AutoTokenizer.from_pretrained(source).save_pretrained(str(out))
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")


def _remapped_copy(name: str, chosen, target: int, out: Path, options: dict) -> Path:
    """A remapping (Self-Extend, ReRoPE, DCA, ...) or an attention temperature recorded in a copy's
    config.json (``poscli_remap``, ``poscli_query_scaling``), which ``load_pretrained`` computes through
    transformers' AttentionInterface."""
    transformers = transformers_module()
    source = source_of(name)
    config = loading(name, "config", lambda **hub: transformers.AutoConfig.from_pretrained(source, **hub)).to_dict()
    _, _, original = rope_of(config)
    if target <= original:
        raise PoscliError(f"--target {target} is not longer than the model's length {original}")

    checked = chosen.check_options(options)
    if issubclass(chosen, RemapMethod):
        config[REMAP_KEY] = chosen.plan(original, target, **checked).to_dict()
    else:  # the record a poscli run would hold (its method, original length and options)
        changes = chosen.extended_config(
            None, ModelConfig(train_length=original), target / original, target, checked, {}
        )
        config[SCALING_KEY] = changes["query_scaling"]
    config["poscli_extension"] = {"from": source, "method": chosen.name, "target": target, "original_length": original}
    _copy_model(name, source, out, config)
    return out
