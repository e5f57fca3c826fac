"""A pretrained transformers causal LM as something poscli evaluates: ``hf:NAME_OR_DIR``.

``poscli eval hf:DIR`` scores a model transformers loads (a local folder, or a hub name when
online) with the same protocol as poscli's own runs: the held-out documents of ``--data`` (default:
the built-in corpus) in the model's own tokenizer, the same windows at every length, intervals,
bits per byte, the truncation null. Nothing is patched: the model runs as transformers builds it.
The hub is not reached offline; a name that is not a local folder then fails in one line.
"""

from __future__ import annotations

import functools
import math
import os
from pathlib import Path

from poscli.errors import PoscliError

PREFIX = "hf:"
REMAP_KEY = "poscli_remap"  # config.json: a remapping (poscli.extension.remap) poscli's attention applies
SCALING_KEY = "poscli_query_scaling"  # config.json: an attention temperature (a QueryScalingMethod's record)
ATTENTION_NAME = "poscli_remap"  # the function registered in transformers' AttentionInterface for it


def is_pretrained(name: str) -> bool:
    return name.startswith(PREFIX)


def source_of(name: str) -> str:
    """The folder or hub name after ``hf:``; a path (starting /, . or ~) must exist."""
    source = name[len(PREFIX) :]
    if not source:
        raise PoscliError("hf: needs a model: hf:PATH (a folder transformers loads) or hf:ORG/NAME (online)")
    if source.startswith(("/", ".", "~")) and not Path(source).expanduser().exists():
        raise PoscliError(f"{name}: cannot load its config (no such folder); give a local folder (hf:PATH)")
    return str(Path(source).expanduser()) if source.startswith("~") else source


def transformers_module():
    try:
        import transformers
    except ImportError:
        raise PoscliError("hf: models need transformers: pip install 'transformers>=4.57'") from None
    return transformers


def loading(name: str, what: str, load):
    """``load(**hub_settings)``, with a one-line answer where the model cannot be had: a local folder
    without the files, or a hub name neither cached nor reachable (then asked of the cache alone, at
    once, instead of after the hub client's retries)."""
    source = source_of(name)
    local = Path(source).is_dir()
    offline = not local and not hub_reachable()
    try:
        return load(**({"local_files_only": True} if offline else {}))
    except (OSError, ValueError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        if local:
            hint = f"the folder {source} has no {what} transformers reads"
            if what == "tokenizer":
                hint += " (tokenizer.json, or tokenizer_config.json with its vocabulary files): copy the model's there"
            raise PoscliError(f"{name}: {hint} ({first})") from None
        if offline:
            raise PoscliError(
                f"{name}: not in this machine's Hugging Face cache, and the hub ({hub_host()}) cannot be reached; "
                "give a local folder (hf:PATH), or run once online to cache it"
            ) from None
        raise PoscliError(f"{name}: cannot load its {what} ({first}); give a local folder (hf:PATH)") from None


def hub_host() -> str:
    """The hub's host: HF_ENDPOINT's (a mirror), else huggingface.co."""
    from urllib.parse import urlparse

    return urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co").hostname or "huggingface.co"


@functools.cache
def hub_reachable(seconds: float = 3.0) -> bool:
    """Whether the hub answers a connection within ``seconds`` (asked once a process); HF_HUB_OFFLINE=1
    says no without asking."""
    import socket

    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        return False
    try:
        socket.create_connection((hub_host(), 443), timeout=seconds).close()
        return True
    except OSError:
        return False


def transformers_config(name: str):
    """The transformers config object of ``hf:NAME_OR_DIR`` (``poscli inspect`` reads its rope settings)."""
    transformers = transformers_module()
    source = source_of(name)
    return loading(name, "config", lambda **hub: transformers.AutoConfig.from_pretrained(source, **hub))


def pretrained_config(name: str) -> dict:
    """The config a row of poscli's tables needs: name, label, the encoding (``rope`` for a rotary
    model, otherwise the model type) and the length it was trained at (the original length of a
    rescaled RoPE, else ``max_position_embeddings``)."""
    transformers = transformers_module()
    source = source_of(name)
    config = loading(name, "config", lambda **hub: transformers.AutoConfig.from_pretrained(source, **hub))
    scaling = getattr(config, "rope_scaling", None) or {}
    length = (
        scaling.get("original_max_position_embeddings")
        or getattr(config, "max_position_embeddings", None)
        or getattr(config, "n_positions", None)
        or 0
    )
    rotary = any(hasattr(config, key) for key in ("rope_theta", "rotary_emb_base", "rope_parameters", "rotary_pct"))
    pe = "rope" if rotary else config.model_type
    return {
        "name": name,
        "label": f"{name} ({config.model_type})",
        "model": {"pe": pe, "train_length": int(length), "vocab_size": int(config.vocab_size)},
        "pretrained": source,
        "remap": getattr(config, REMAP_KEY, None),
        "query_scaling": getattr(config, SCALING_KEY, None),
    }


def pretrained_tokenizer(name: str):
    """The model's own tokenizer as poscli reads text (``poscli.data.tokenizer.HFTokenizer``): its
    tokenizer.json, or the fast tokenizer transformers builds."""
    from poscli.data.tokenizer import TOKENIZER_FILE, HFTokenizer, load_file

    source = source_of(name)
    if (Path(source) / TOKENIZER_FILE).is_file():
        loaded = load_file(Path(source))
    else:
        transformers = transformers_module()
        fast = loading(
            name, "tokenizer", lambda **hub: transformers.AutoTokenizer.from_pretrained(source, use_fast=True, **hub)
        )
        if not hasattr(fast, "backend_tokenizer"):
            raise PoscliError(f"{name} has no fast tokenizer; poscli reads text through a tokenizer.json")
        if fast.backend_tokenizer.get_vocab_size(with_added_tokens=False) == 0:  # transformers 5 builds an empty one
            raise PoscliError(
                f"{name}: {source} has no tokenizer files (tokenizer.json, or tokenizer_config.json with the "
                "vocabulary and merges); copy the model's tokenizer files there"
            )
        loaded = HFTokenizer(fast.backend_tokenizer, name)
    loaded.spec = name
    return loaded


def start_token(tokenizer) -> int | None:
    """The token the model's tokenizer puts before a text of its own accord (Llama's and Gemma's
    <s>/<bos>; None for Qwen2 or GPT-NeoX, whose tokenizers add none, and for poscli's exports)."""
    backend = getattr(tokenizer, "tokenizer", None)  # HFTokenizer's tokenizers.Tokenizer; bytes have none
    if backend is None:
        return None
    plain, marked = backend.encode("a", add_special_tokens=False).ids, backend.encode("a").ids
    return marked[0] if len(marked) == len(plain) + 1 and marked[1:] == plain else None


def load_pretrained(name: str, device: str = "cpu", tokenizer=None):
    """The model, called as poscli's GPT is (tokens (B, T) -> logits (B, T, V) float32), in eval mode
    on ``device`` in the dtype it was saved in, and its config. Each window is read after the start
    token its tokenizer adds to a text (``start_token``), as the model saw text in training; the
    logits are those of the window's own tokens (``tokenizer``: the model's, when the caller has
    it already; otherwise read here). (Torch is imported here, not with the module:
    ``poscli eval``'s argument checks read ``is_pretrained`` before any model.)"""
    import torch
    from torch import nn

    class PretrainedLM(nn.Module):
        def __init__(self, model, bos: int | None):
            super().__init__()
            self.model, self.config, self.bos = model, model.config, bos

        def forward(self, tokens):  # (B, T) -> (B, T, V)
            if self.bos is not None:
                tokens = torch.cat([torch.full_like(tokens[:, :1], self.bos), tokens], dim=1)  # (B, 1 + T)
            logits = self.model(tokens, use_cache=False).logits  # no key-value cache: nothing is generated
            return logits[:, 1:].float() if self.bos is not None else logits.float()

    transformers = transformers_module()
    source = source_of(name)
    config = pretrained_config(name)
    settings = {"dtype": "auto"}
    if config.get("remap") or config.get("query_scaling"):  # poscli's attention, through transformers' interface
        transformers.AttentionInterface.register(ATTENTION_NAME, remapped_attention_function)
        settings["attn_implementation"] = ATTENTION_NAME
    model = loading(
        name, "weights", lambda **hub: transformers.AutoModelForCausalLM.from_pretrained(source, **settings, **hub)
    )
    bos = start_token(tokenizer if tokenizer is not None else pretrained_tokenizer(name))
    return PretrainedLM(model, bos).to(device).eval(), config


DTYPE_BYTES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2}
GIB = 2**30


def inference_memory(name: str, length: int, windows: int, loss_slice: int) -> dict[str, int]:
    """Bytes one forward of ``windows`` windows of ``length`` tokens (and the start token) needs, by
    part: the weights (their files' size in a folder, else counted from the config), one layer's
    widest activations (hidden states, attention inputs and output, the MLP's intermediate, a causal
    mask of length^2 values), and the logits in the model's dtype and float32 with the float64
    loss of a slice of ``loss_slice`` logits. An estimate of the peak, not a bound."""
    transformers = transformers_module()
    source = source_of(name)
    config = loading(name, "config", lambda **hub: transformers.AutoConfig.from_pretrained(source, **hub))
    config = getattr(config, "text_config", None) or config
    size = DTYPE_BYTES.get(str(getattr(config, "dtype", None) or "float32").removeprefix("torch."), 4)
    width = config.hidden_size
    mlp = getattr(config, "intermediate_size", None) or 4 * width
    vocabulary = config.vocab_size
    files = [*Path(source).glob("*.safetensors"), *Path(source).glob("*.bin")] if Path(source).is_dir() else []
    heads = 1 if getattr(config, "tie_word_embeddings", False) else 2
    counted = (heads * vocabulary * width + config.num_hidden_layers * (4 * width * width + 3 * width * mlp)) * size
    tokens = windows * (length + 1)
    return {
        "weights": sum(f.stat().st_size for f in files) or counted,
        "activations": tokens * (6 * width + 3 * mlp) * size + (length + 1) ** 2 * size,
        "logits": tokens * vocabulary * (size + 4) + loss_slice * 16,
    }


def check_memory(name: str, length: int, windows: int, loss_slice: int, device, report=None) -> None:
    """Refuse, in one line, a length whose ``inference_memory`` is more than ``device`` has free;
    ``report`` (a print) receives the estimate."""
    from poscli.core.device import free_memory

    parts = inference_memory(name, length, windows, loss_slice)
    need, free = sum(parts.values()), free_memory(device)
    detail = ", ".join(f"{part} {value / GIB:.2f}" for part, value in parts.items())
    if free is not None and need > free:
        raise PoscliError(
            f"{name} at length {length} needs about {need / GIB:.1f} GiB ({detail}) and {device} has "
            f"{free / GIB:.1f} GiB free: give shorter --lengths, or run where there is more memory"
        )
    if report is not None:
        report(f"{name} at {length}: about {need / GIB:.2f} GiB ({detail}; {windows} window(s) per forward)")


def rope_of(config: dict) -> tuple[int, float, int]:
    """(rotary dimensions, base, original length) of a rotary model's config.json dict."""
    parameters = config.get("rope_parameters") or {}
    if parameters.get("rope_type", "default") != "default" or (config.get("rope_scaling") or {}).get("rope_type"):
        raise PoscliError("this model's RoPE is already rescaled; extend the model it came from")
    base = parameters.get("rope_theta") or config.get("rope_theta") or config.get("rotary_emb_base")
    if base is None:
        raise PoscliError("this model has no RoPE base in its config (rope_theta): only rotary models are extended")
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    fraction = parameters.get("partial_rotary_factor") or config.get("partial_rotary_factor")
    fraction = fraction or config.get("rotary_pct") or 1.0
    return int(head_dim * fraction), float(base), int(config.get("max_position_embeddings") or 0)


def _turn(x, delta, inv_freq):
    """x (B, H, T, hd), rotated in the halves layout at some positions, rotated further by ``delta`` (T,)
    positions in its first 2 len(inv_freq) dimensions: RoPE's R(p + d) = R(d) R(p)."""
    import torch

    from poscli.encodings.rope import rotate_pairs

    rotary = 2 * inv_freq.numel()
    angles = delta.to(torch.float32)[:, None] * inv_freq[None, :]  # (T, r/2)
    turned = rotate_pairs(x[..., :rotary], angles.cos().to(x.dtype), angles.sin().to(x.dtype), "halves")
    return torch.cat((turned, x[..., rotary:]), dim=-1)


def remapped_attention_function(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """transformers' attention-interface signature: query (B, H, T, hd) and key, value (B, Hkv, T, hd),
    rotated by the model at positions 0..T-1 (a plain forward: no cache, no padding). Far keys are
    turned to the remapping's positions and scored by ``poscli.attention.remapped.remapped_attention``
    (or the remapping's own attention: DCA, Ms-PoE). -> ((B, T, H, hd), None)."""
    import torch

    from poscli.attention.remapped import remapped_attention
    from poscli.encodings.base import recorded_query_scale, recorded_remap, rotary_inv_freq

    B, H, T, hd = query.shape
    positions = torch.arange(T, device=query.device)
    query_scale = recorded_query_scale(getattr(module.config, SCALING_KEY, None))
    if query_scale is not None:  # an attention temperature: each query scaled, as poscli's GPT does after the rotation
        query = query * query_scale(positions).to(query.dtype)[:, None]
    if not getattr(module.config, REMAP_KEY, None):
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
    plan = recorded_remap(getattr(module.config, REMAP_KEY))
    rotary_dim, base, _ = rope_of(module.config.to_dict())
    inv_freq = rotary_inv_freq(rotary_dim, base).to(query.device)
    groups = H // key.shape[1]
    key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)  # (B, H, T, hd)
    if scaling is not None:
        query = query * (scaling * math.sqrt(hd))  # remapped_attention divides by sqrt(hd)

    def at(x, where):  # x rotated at ``positions``, moved to ``where`` (T,)
        return _turn(x, where.to(positions.device) - positions, inv_freq)

    if getattr(plan, "custom_attention", False):
        out = plan.attend(lambda p: at(query, p), lambda p: at(key, p), value, positions, True, 1024)
    else:
        far_q, far_k = plan.far_positions(positions)
        out = remapped_attention(query, key, at(query, far_q), at(key, far_k), value, plan.window, plan.far_keys,
                                 positions, None, 1024)  # fmt: skip
    return out.transpose(1, 2).contiguous(), None
