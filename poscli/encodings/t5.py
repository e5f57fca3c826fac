"""T5 relative position bias (Raffel et al., 2020)."""

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from poscli.attention.blockwise import RelativeBias
from poscli.encodings import register
from poscli.encodings.base import PositionalEncoding, causal_distance
from poscli.errors import PoscliError


def t5_causal_bucket(distance: Tensor, num_buckets: int = 32, max_distance: int = 128) -> Tensor:
    """Bucket of each causal distance n = max(i - j, 0), as T5's decoder computes it.

    n < num_buckets/2 has a bucket of its own; larger n share logarithmically wider buckets,
    max_exact + floor(log(n / max_exact) / log(max_distance / max_exact) * (num_buckets - max_exact)),
    capped at num_buckets - 1, so every distance beyond max_distance lands in the last bucket.
    Computed in float64 so bucket edges do not move with rounding.
    """
    max_exact = num_buckets // 2
    n = distance.clamp(min=0)
    scaled = torch.log(n.to(torch.float64).clamp(min=1) / max_exact) / math.log(max_distance / max_exact)
    large = max_exact + (scaled * (num_buckets - max_exact)).floor().to(torch.long)
    large = large.clamp(max=num_buckets - 1)
    return torch.where(n < max_exact, n, large)


@dataclass(frozen=True)
class T5Options:
    """Args:
    num_buckets: distance buckets (32 in T5), half of them exact distances.
    max_distance: distances from here on share the last bucket (128 in T5)."""

    num_buckets: int = 32
    max_distance: int = 128

    def __post_init__(self) -> None:
        if self.num_buckets < 2 or self.max_distance <= self.num_buckets // 2:
            raise PoscliError(
                "T5 bias needs --pe-option num_buckets of at least 2 and a max_distance above half the buckets"
            )


@register("t5")
class T5Bias(PositionalEncoding):
    """A learned scalar per head and distance bucket, added to the attention scores in every
    layer (one table shared by all layers, as in T5). Distances past ``max_distance`` share
    the last bucket, which is what lets it run at any length."""

    citation = "Raffel et al., 2020"
    # The table is stored divided by this factor. Adam moves a parameter by about the learning
    # rate per step, so at poscli's default lr (1e-3) a bias could move only ~1 in 1000 steps,
    # far less than the several units a useful distance bias needs (ALiBi's reach -25 at distance
    # 100); T5 itself trained at lr 1e-2 (Raffel et al., 2020, 3.1.2). The factor gives the
    # bias table that 10x effective learning rate without a separate optimizer group.
    bias_scale = 10.0
    summary = "a learned per-head scalar for each log-spaced distance bucket, added to scores"
    has_score_bias = True
    Options = T5Options
    legacy_options = {"t5_num_buckets": "num_buckets", "t5_max_distance": "max_distance"}

    def __init__(self, config):
        super().__init__(config)
        self.max_distance = self.options.max_distance
        self.bucket_bias = nn.Embedding(self.options.num_buckets, config.n_head)  # (buckets, H)
        nn.init.zeros_(self.bucket_bias.weight)
        # Every distance >= max_distance is in the last bucket, so a lookup table over
        # 0..max_distance covers any length.
        buckets = t5_causal_bucket(torch.arange(self.max_distance + 1), self.options.num_buckets, self.max_distance)
        self.register_buffer("bucket_of_distance", buckets, persistent=False)  # (max_distance + 1,)

    def bias_by_distance(self) -> Tensor:
        """The bias at distances 0 .. max_distance (the last value holds for every longer one).
        (H, max_distance + 1)."""
        return self.bias_scale * self.bucket_bias(self.bucket_of_distance).T

    def score_bias(self, q: Tensor, q_positions: Tensor, k_positions: Tensor, layer: int) -> Tensor:
        distance = causal_distance(q_positions, k_positions).clamp(max=self.max_distance)  # (Tq, Tk)
        return self.bias_by_distance()[:, distance].to(q.dtype)  # (H, Tq, Tk)

    def relative_bias(self, q: Tensor, layer: int) -> RelativeBias:
        per_distance = self.bias_by_distance()  # (H, max_distance + 1)
        band = per_distance[:, :-1] - per_distance[:, -1:]  # (H, max_distance): minus the far value
        return RelativeBias(band=band[None, :, None, :])  # (1, H, 1, W)
