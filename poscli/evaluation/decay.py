"""The attention-decay figure (the long-term decay argument of Su et al., 2021, section 3.4.3, beside
sinusoidal positions): the mean q.k over random q and k against relative distance, for sinusoidal
positions added to q and k, and for RoPE-rotated q and k.

Sinusoidal: (q + PE_i) . (k + PE_j) averages to PE_i . PE_j = sum_t cos((j - i) w_t), which
oscillates with distance, so a far key can look as related as a near one. RoPE:
R(i) q . R(j) k = q^T R(j - i) k carries only relative position, and its mean over random
pairs stays near zero at every distance.
"""

from __future__ import annotations

import torch

from poscli.encodings.base import sinusoid_table
from poscli.encodings.rope import rotate_pairs
from poscli.extension.scaling import default_inv_freq


def attention_decay(
    dim: int = 128, base: float = 10000.0, max_distance: int = 1024, pairs: int = 80, seed: int = 0
) -> dict:
    """Mean q.k over ``pairs`` random (q, k) ~ N(0, I) at relative distances 0..max_distance.

    The query sits at position 0 and the key at position ``distance``. Returns float64 tensors
    ``distance`` (D,), ``sinusoidal`` (D,) and ``rope`` (D,).
    """
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(pairs, dim, generator=generator, dtype=torch.float64)  # (P, d)
    k = torch.randn(pairs, dim, generator=generator, dtype=torch.float64)  # (P, d)
    distance = torch.arange(max_distance + 1)  # (D,)

    table = sinusoid_table(distance, dim, base).to(torch.float64)  # (D, d)
    q_sin = q + table[0]  # (P, d): query at position 0
    k_sin = k[:, None, :] + table[None, :, :]  # (P, D, d): key at position `distance`
    sinusoidal = torch.einsum("pd,pnd->pn", q_sin, k_sin).mean(0)  # (D,)

    angles = distance.to(torch.float64)[:, None] * default_inv_freq(dim, base).to(torch.float64)[None, :]  # (D, d/2)
    k_rot = rotate_pairs(
        k[:, None, :].expand(pairs, len(distance), dim), angles.cos(), angles.sin(), "interleaved"
    )  # (P, D, d)
    rope = torch.einsum("pd,pnd->pn", q, k_rot).mean(0)  # (D,); the query at position 0 is not rotated
    return {"distance": distance, "sinusoidal": sinusoidal, "rope": rope}


def write_decay(
    results=None, dim: int = 128, base: float = 10000.0, max_distance: int = 1024, pairs: int = 80, seed: int = 0
):
    """RESULTS/decay.csv and decay.png; returns their paths."""
    from poscli.core.io import atomic_write
    from poscli.errors import PoscliError
    from poscli.evaluation.plots import plot_decay
    from poscli.model.runs import results_dir

    if dim < 2 or dim % 2:
        raise PoscliError(f"--dim must be an even number of at least 2, got {dim}")
    if base <= 1:
        raise PoscliError(f"--base must be greater than 1, got {base:g}")
    if pairs < 1:
        raise PoscliError(f"--pairs must be at least 1, got {pairs}")
    folder = results_dir(results)
    folder.mkdir(parents=True, exist_ok=True)
    result = attention_decay(dim, base, max_distance, pairs, seed)
    with atomic_write(folder / "decay.csv") as handle:
        handle.write("distance,sinusoidal,rope\n")
        for d, s, r in zip(result["distance"].tolist(), result["sinusoidal"].tolist(), result["rope"].tolist()):
            handle.write(f"{d},{s:.6f},{r:.6f}\n")
    return folder / "decay.csv", plot_decay(result, folder / "decay.png", dim, base, pairs)
