"""``poscli inspect`` on runs: each run's attention, read on the same spans ``poscli eval`` scores.

For every window of every length, one forward pass; each layer's probe (``CausalSelfAttention.probe``)
hands its rotated q and k to ``attention_statistics``, and the pass's own losses give the loss by
position. Values are averaged over a window's queries, then over each span's windows, and reported
with a 95% t interval over spans (the unit ``poscli eval`` bootstraps over).

Shape legend: L layers, H heads, T window length, P rotary pairs, G distances, S spans.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from poscli.errors import PoscliError
from poscli.evaluation.by_position import effective_context, loss_by_position, position_buckets
from poscli.evaluation.evalset import EvalSet
from poscli.evaluation.evaluate import null_context, token_losses
from poscli.evaluation.inspection.attention_maps import QUANTILES, attention_statistics, distance_grid
from poscli.evaluation.inspection.biases import bias_adder
from poscli.evaluation.stats import t_quantile


def check_inspectable(name: str, model) -> None:
    """A one-line error for a model whose attention is not a softmax over scores plus a position bias:
    an encoding that computes its own attention, a remapping extension, or learned sink logits."""
    encoding = model.encoding
    if encoding.replaces_attention:
        raise PoscliError(
            f"{name}: --pe {model.config.pe} computes its own attention (not a softmax of scores plus a bias); "
            "poscli inspect reads softmax attention: inspect a rope, alibi, t5, sinusoidal or nope run"
        )
    if model.remap is not None:
        raise PoscliError(f"{name}: a remapping extension (far keys at other positions) is not inspected yet")
    if any(block.attn.sinks is not None for block in model.blocks):
        raise PoscliError(f"{name}: learned sink logits (-A sinks) are not inspected yet")


@dataclass
class _Sums:
    """What the windows of one span add up at one length, per layer: summed over windows, counted."""

    layers: int
    heads: int
    buckets: list[tuple[int, int]]
    distances: list[int]
    windows: int = 0
    entropy: np.ndarray = field(init=False)  # (L, H, buckets)
    late: np.ndarray = field(init=False)  # (L, H, 3 + Q): entropy, sink, uniform entropy, spans; last half
    within: np.ndarray = field(init=False)  # (L, H, G), last half

    def __post_init__(self):
        L, H = self.layers, self.heads
        self.entropy = np.zeros((L, H, len(self.buckets)))
        self.late = np.zeros((L, H, 3 + len(QUANTILES)))
        self.within = np.zeros((L, H, len(self.distances)))


def _layer_probe(model, sums: _Sums, pair_norms: dict, pairs: Callable | None):
    """The probe every layer calls: its q, k (1, H, T, hd) summarised into ``sums``."""
    encoding = model.encoding

    def probe(layer: int, q: Tensor, k: Tensor, positions: Tensor) -> None:
        add_bias = bias_adder(encoding, q.float(), positions, layer)
        T = q.shape[2]
        half = T // 2
        stats = attention_statistics(q[0].float(), k[0].float(), add_bias, first_row=half)
        for index, (start, end) in enumerate(sums.buckets):
            sums.entropy[layer, :, index] += stats.entropy[:, start:end].mean(-1).cpu().numpy()
        uniform = torch.log(torch.arange(half, T, dtype=torch.float64) + 1).mean().item()
        late = [stats.entropy[:, half:].mean(-1), stats.sink[:, half:].mean(-1)]
        spans = [stats.spans[index, :, half:].double().mean(-1) for index in range(len(QUANTILES))]
        sums.late[layer] += np.stack(
            [
                late[0].cpu().numpy(),
                late[1].cpu().numpy(),
                np.full(q.shape[1], uniform),
                *(s.cpu().numpy() for s in spans),
            ],
            axis=-1,
        )
        sums.within[layer] += stats.within[:, half:].mean(1).cpu().numpy()
        if pairs is not None:
            norms = pair_norms.setdefault(layer, np.zeros((2, q.shape[1], pairs.count)))
            norms[0] += pairs(q[0]).cpu().numpy()
            norms[1] += pairs(k[0]).cpu().numpy()

    return probe


def rotary_pair_norms(layout: str, rotary_dim: int) -> Callable[[Tensor], Tensor]:
    """x (H, T, hd) -> (H, P): each rotary pair's norm, averaged over positions (Barbero et al., 2024,
    read which frequencies a model relies on from these). ``layout`` halves pairs (i, i + P),
    interleaved pairs (2i, 2i + 1)."""
    P = rotary_dim // 2

    def norms(x: Tensor) -> Tensor:
        x = x[..., :rotary_dim].double()
        first, second = (x[..., :P], x[..., P:]) if layout == "halves" else (x[..., 0::2], x[..., 1::2])
        return torch.sqrt(first**2 + second**2).mean(1)  # (H, P)

    norms.count = P  # type: ignore[attr-defined]
    return norms


@torch.inference_mode()
def inspect_length(model, config: dict, eval_set: EvalSet, length: int, device, on_window=None) -> dict:
    """One run at one length: per span, the summed statistics of its windows; the loss by position;
    and, for a rotary encoding, each layer's mean pair norms. Returns {"spans": [_Sums per span],
    "positions": loss-by-position rows, "effective_context": (tokens, open-ended), "pair_norms": {layer:
    (2, H, P)} or {}}."""
    check_inspectable(config["name"], model)
    windows = eval_set.windows(length)
    T = min(length, eval_set.span_length)
    heads, layers = model.config.n_head, model.config.n_layer
    per_span = [_Sums(layers, heads, position_buckets(T), distance_grid(T)) for _ in range(eval_set.num_spans)]
    encoding = model.encoding
    layout = getattr(getattr(encoding, "options", None), "layout", None)
    pairs = rotary_pair_norms(layout, encoding.rotary_dim) if hasattr(encoding, "scaling") and layout else None
    pair_norms: dict[int, np.ndarray] = {}
    position_loss, position_tokens = np.zeros(T), np.zeros(T)
    try:
        for window in windows:
            sums = per_span[window.span]
            for block in model.blocks:
                block.attn.probe = _layer_probe(model, sums, pair_norms, pairs)
            tokens = torch.from_numpy(eval_set.spans[window.span, window.start : window.end + 1][None]).long()
            tokens = tokens.to(device)
            losses = token_losses(model(tokens[:, :-1]), tokens[:, 1:])[0]  # (T,)
            sums.windows += 1
            position_loss[: window.length] += losses
            position_tokens[: window.length] += 1
            if on_window:
                on_window(1)
    finally:
        for block in model.blocks:
            block.attn.probe = None
    buckets = loss_by_position(position_loss, position_tokens, T)
    return {
        "spans": per_span,
        "positions": buckets,
        "effective_context": effective_context(buckets),  # without the 3-gram's offset (runs.inspect_runs adds it)
        "pair_norms": {layer: norms / len(windows) for layer, norms in pair_norms.items()},
        "reference_length": null_context(config),
        "eval_set": eval_set.fingerprint,
    }


def mean_interval(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean over the first axis (spans) and its 95% t interval; a single span: the mean alone."""
    mean = values.mean(0)
    if len(values) < 2:
        return mean, mean, mean
    half = t_quantile(len(values) - 1) * values.std(0, ddof=1) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def per_span(sums: list[_Sums], what: str) -> np.ndarray:
    """(S, ...) each span's mean over its windows of ``sums.<what>``."""
    return np.stack([getattr(s, what) / max(s.windows, 1) for s in sums if s.windows])
