"""FIRE: functional interpolation for relative positions (Li et al., 2023)."""

import torch
from torch import Tensor, nn

from poscli.attention.distance_attention import ScaledDistanceBias
from poscli.encodings import register
from poscli.encodings.base import PositionalEncoding, causal_distance

MLP_WIDTH = 32  # the paper's f is an MLP with one hidden layer of width 32 (Li et al., 2023, section 3)
C_START = 0.1  # psi(x) = log(c x + 1) starts with c = 0.1
# The MLP runs on at most this many (query, key) pairs at once: its hidden layer holds
# MLP_WIDTH floats per pair, so one chunk is 2^21 * 32 * 4 B = 256 MiB whatever the length.
PAIRS_PER_CHUNK = 2**21


@register("fire")
class Fire(PositionalEncoding):
    """b(i, j) = f(psi(i - j) / psi(max(L, i))), psi(x) = log(c x + 1), added to the scores in
    every layer (Li et al., 2023). f: 1 -> 32 -> H, ReLU, one output per head.

    Dividing by psi(max(L, i)) keeps the input in [0, 1] at every length ("progressive
    interpolation"), so a model evaluated past its train length sees only inputs it was
    trained on; below the threshold L the divisor is constant and the bias is a function of
    i - j alone. c > 0 and L > 0 are learned: c as |c|, L as |s| * L0 with a learned
    multiplier s starting at 1, so Adam moves L by a fraction of itself per step rather than by
    ~lr tokens. poscli starts L0 at the train length (stored with the weights), so training
    sees normalised distances across [0, 1). One f is shared by all layers, as T5's table is.
    The bias depends on i as well as i - j; ``distance_bias`` writes it as a piecewise-linear
    function of psi(i - j) scaled per query row, which the memory-bounded fast path applies.
    """

    citation = "Li et al., 2023"
    summary = "a learned MLP of the log distance normalised by the log query position, added to scores"
    has_score_bias = True

    def __init__(self, config):
        super().__init__(config)
        self.mlp = nn.Sequential(nn.Linear(1, MLP_WIDTH), nn.ReLU(), nn.Linear(MLP_WIDTH, config.n_head))
        self.c = nn.Parameter(torch.tensor(C_START))
        self.threshold_multiplier = nn.Parameter(torch.tensor(1.0))
        self.register_buffer("threshold_start", torch.tensor(float(config.train_length)))  # L0, saved with the weights

    def psi(self, x: Tensor) -> Tensor:
        """log(c x + 1) with c = |c| > 0."""
        return torch.log1p(self.c.abs() * x)

    def threshold(self) -> Tensor:
        """L = |s| * L0, a 0-d tensor."""
        return self.threshold_multiplier.abs() * self.threshold_start

    def normalised_distance(self, q_positions: Tensor, k_positions: Tensor) -> Tensor:
        """psi(i - j) / psi(max(L, i)) for causal pairs, in [0, 1). (Tq, Tk), float32."""
        distance = causal_distance(q_positions, k_positions).to(torch.float32)  # (Tq, Tk)
        divisor = self.psi(torch.maximum(q_positions.to(torch.float32), self.threshold()))  # (Tq,)
        return self.psi(distance) / divisor[:, None]  # (Tq, Tk)

    def score_bias(self, q: Tensor, q_positions: Tensor, k_positions: Tensor, layer: int) -> Tensor:
        x = self.normalised_distance(q_positions, k_positions)  # (Tq, Tk)
        rows = max(1, PAIRS_PER_CHUNK // x.shape[1])
        weights = self.mlp[0].weight.dtype  # float32, or float64 for a reference
        bias = torch.cat([self.mlp(part[..., None].to(weights)) for part in x.split(rows)])  # (Tq, Tk, H)
        return bias.permute(2, 0, 1).to(q.dtype)  # (H, Tq, Tk)

    def distance_bias(self, positions: Tensor, layer: int) -> ScaledDistanceBias:
        """The same bias, exactly, as g(psi(d) * s_i) with s_i = 1 / psi(max(L, i)) and g = f written
        as its linear pieces: a ReLU unit w1 x + b1 switches at x = -b1 / w1, so between consecutive
        switches f is intercept + slope * x (``relu_pieces``). Gradients reach c, L and f's weights."""
        distance = torch.arange(len(positions), dtype=torch.float32, device=positions.device)  # (T,)
        row_scale = 1.0 / self.psi(torch.maximum(positions.to(torch.float32), self.threshold()))  # (T,)
        breakpoints, intercept, slope = relu_pieces(
            self.mlp[0].weight[:, 0], self.mlp[0].bias, self.mlp[2].weight, self.mlp[2].bias
        )
        return ScaledDistanceBias(self.psi(distance), row_scale, breakpoints, intercept, slope)

    def score_mod(self, q: Tensor, positions: Tensor, layer: int):
        """The same bias per (query, key) pair, for FlexAttention: f's 32 hidden units written out
        as scalar arithmetic, which the compiled kernel fuses into the attention loop."""
        w1, b1 = self.mlp[0].weight[:, 0], self.mlp[0].bias  # (32,) each
        w2, b2 = self.mlp[2].weight, self.mlp[2].bias  # (H, 32), (H,)
        constants = torch.stack(
            (self.c.abs(), self.threshold())
        )  # (2,): c and L (FlexAttention captures no 0-d tensors)
        where = positions.to(torch.float32)  # (T,)

        def fire(score, b, h, q_idx, kv_idx):
            query, c = where[q_idx], constants[0]
            x = torch.log1p(c * (query - where[kv_idx]).clamp(min=0)) / torch.log1p(
                c * (constants[1] + (query - constants[1]).clamp(min=0))
            )  # max(i, L)
            bias = b2[h]
            for unit in range(MLP_WIDTH):
                bias = bias + w2[h, unit] * torch.relu(w1[unit] * x + b1[unit])
            return score + bias

        return fire


def relu_pieces(w1: Tensor, b1: Tensor, w2: Tensor, b2: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """f(x) = b2 + w2 relu(w1 x + b1) (scalar x, U hidden units, H outputs) as linear pieces:
    breakpoints (K,) sorted, and per segment m (x between breakpoints m-1 and m) intercept and
    slope (K + 1, H), with f(x) = intercept[m] + slope[m] x there. Differentiable in the weights;
    which units are on in a segment is a constant of the pieces. w1, b1: (U,), w2: (H, U), b2: (H,)."""
    hinged = w1 != 0
    breakpoints = (-b1[hinged] / w1[hinged]).detach().sort().values  # (K,)
    if len(breakpoints) == 0:
        inside = torch.zeros(1, device=w1.device)
    else:  # a point inside each segment, the outer two included
        inside = torch.cat(
            (breakpoints[:1] - 1, (breakpoints[1:] + breakpoints[:-1]) / 2, breakpoints[-1:] + 1)
        )  # (K + 1,)
    on = (w1.detach()[None, :] * inside[:, None] + b1.detach()[None, :] > 0).to(w1.dtype)  # (K + 1, U)
    intercept = b2[None, :] + (on * b1[None, :]) @ w2.T  # (K + 1, H)
    slope = (on * w1[None, :]) @ w2.T  # (K + 1, H)
    return breakpoints, intercept, slope
