"""Which attention kernel a layer runs, chosen from what its encoding declares (never its name).

``causal_attention`` is the one entry point the model (and a per-layer schedule, ``hybrid``) calls
after the encoding has rotated q and k: the encoding's own attention (``replaces_attention``), the
fused kernel (no bias), FlexAttention (CUDA), the memory-bounded fast paths (consecutive positions
on CPU), or the blocked fallback. Shape legend: B batch, H heads, T length, hd head dimension.

Every kernel keeps one contract, which ``causal_attention`` asserts on shapes and
``tests/attention/`` checks on values for every path: q, k (B, H, T, hd or wider) and v (B, H,
T, hd) in, (B, H, T, hd) out; row i a convex mix of v[..., :i + 1, :] (causal: no later key moves
it); finite wherever the inputs are.
"""

from __future__ import annotations

from torch import Tensor

from poscli.attention import flex
from poscli.attention.blockwise import (
    fast_path_available,
    fused_causal_attention,
    relative_causal_attention,
)
from poscli.attention.distance_attention import distance_biased_attention
from poscli.attention.fallback import blocked_biased_attention


def fast_biased_attention(
    q: Tensor, k: Tensor, v: Tensor, encoding, positions: Tensor, layer: int, block: int
) -> Tensor | None:
    """The encoding's bias through a memory-bounded fast path over consecutive ``positions``, or
    None where it has none here: its banded or linear form (``relative_bias``: ALiBi, T5, Shaw),
    else its distance form (``distance_bias``: KERPLE, FIRE, ``bias_of_distance``). CPU only.
    q, k, v: (B, H, T, hd) -> (B, H, T, hd)."""
    if not fast_path_available(q):
        return None
    if (relative := encoding.relative_bias(q, layer)) is not None:
        return relative_causal_attention(q, k, v, relative, block)
    if (form := encoding.distance_bias(positions, layer)) is not None:
        return distance_biased_attention(q, k, v, form)
    return None


def causal_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    encoding,
    positions: Tensor,
    layer: int,
    consecutive: bool,
    block: int,
    x: Tensor,
    sink: Tensor | None = None,
) -> Tensor:
    """Causal attention of one layer with its encoding's bias, if any. q, k (B, H, T, hd or wider,
    rotated), v (B, H, T, hd); positions (T,); consecutive: positions are i, i+1, ... (the fast paths
    need i - j); x (B, T, C): the layer's input, for an encoding that reads it; sink (H,): learned
    sink logits (``-A sinks=true``), which only the blocked path takes. -> (B, H, T, hd)."""
    B, H, T, _ = v.shape
    assert q.shape[:3] == k.shape[:3] == (B, H, T), f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
    out = _one_kernel(q, k, v, encoding, positions, layer, consecutive, block, x, sink)
    assert out.shape == v.shape, f"an attention kernel returned {tuple(out.shape)} for v {tuple(v.shape)}"
    return out


def _one_kernel(q, k, v, encoding, positions, layer: int, consecutive: bool, block: int, x, sink) -> Tensor:
    """The kernel ``causal_attention`` runs, chosen in order (see the module's docstring)."""
    if encoding.replaces_attention:  # FoX, CoPE, stick-breaking, a per-layer schedule
        return encoding.attend(x, q, k, v, positions, layer)
    score_bias = lambda q_block, q_pos, k_pos: encoding.score_bias(q_block, q_pos, k_pos, layer)  # noqa: E731
    if sink is not None:  # every encoding's bias (or none) with the sink key, block by block
        return blocked_biased_attention(
            q, k, v, score_bias if encoding.has_score_bias else None, positions, block, sink
        )
    if not encoding.has_score_bias:
        return fused_causal_attention(q, k, v)
    if flex.wanted(q) and (score_mod := flex.score_mod_for(encoding, q, positions, layer, consecutive)) is not None:
        return flex.flex_causal_attention(q, k, v, score_mod)
    if consecutive and (fast := fast_biased_attention(q, k, v, encoding, positions, layer, block)) is not None:
        return fast
    return blocked_biased_attention(q, k, v, score_bias, positions, block)
