"""Dynamic position bias: an MLP of the distance (Wang et al., CrossFormer, 2021)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from poscli.encodings import register
from poscli.encodings.base import PositionalEncoding, causal_distance
from poscli.errors import PoscliError


@dataclass(frozen=True)
class DpbOptions:
    """Args:
    width: the MLP's hidden width (0: d_model / 4, as x-transformers' ``DynamicPositionBias``).
    depth: hidden layers of the MLP (x-transformers' default, 2).
    log_distance: feed log(1 + d) rather than d (x-transformers' ``log_distance``), so far
        distances are close together and the bias extrapolates more smoothly.
    """

    width: int = 0
    depth: int = 2
    log_distance: bool = True

    def __post_init__(self) -> None:
        if self.width < 0 or self.depth < 1:
            raise PoscliError(
                f"--pe-option width must be >= 0 and depth >= 1, got width={self.width} depth={self.depth}"
            )


@register("dpb")
class DynamicPositionBias(PositionalEncoding):
    """A learned continuous function of the distance added to the scores ("CrossFormer", Wang et al.,
    2021, section 3.3; x-transformers' ``DynamicPositionBias``): bias_h(i, j) = MLP(d)_h with
    d = i - j, or log(1 + d) by default, through Linear(1, w), SiLU, (depth - 1) x [Linear(w, w),
    SiLU], Linear(w, H). Unlike T5's buckets it has a value at every distance, including ones never
    trained on. One MLP shared by all layers, as x-transformers shares it.
    """

    citation = "Wang et al., 2021"
    summary = "an MLP of the (log) distance gives each head's bias, defined at every distance"
    Options = DpbOptions
    has_score_bias = True

    def __init__(self, config):
        super().__init__(config)
        width = self.options.width or max(1, config.d_model // 4)
        layers: list[nn.Module] = [nn.Linear(1, width), nn.SiLU()]
        for _ in range(self.options.depth - 1):
            layers += [nn.Linear(width, width), nn.SiLU()]
        self.mlp = nn.Sequential(*layers, nn.Linear(width, config.n_head))

    def bias_of_distance(self, distance: Tensor, layer: int) -> Tensor:
        feature = distance.log1p() if self.options.log_distance else distance  # (N,)
        return self.mlp(feature[:, None].to(self.mlp[0].weight.dtype)).T  # (H, N)

    def score_bias(self, q: Tensor, q_positions: Tensor, k_positions: Tensor, layer: int) -> Tensor:
        """The MLP once per distinct distance, then a lookup: (H, Tq, Tk)."""
        distance = causal_distance(q_positions, k_positions).long()  # (Tq, Tk)
        table = self.bias_of_distance(
            torch.arange(int(distance.max()) + 1, device=q.device, dtype=self.mlp[0].weight.dtype), layer
        )
        return table[:, distance].to(q.dtype)  # (H, Tq, Tk)
