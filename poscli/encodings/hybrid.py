"""A per-layer schedule of encodings and attention windows: RNoPE-SWA, SWAN-GPT, Llama 4, Gemma 3."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from torch import Tensor, nn

from poscli.attention.fallback import blocked_biased_attention
from poscli.attention.paths import causal_attention
from poscli.encodings import check_name, get, parse_option_pairs, register
from poscli.encodings.base import PositionalEncoding
from poscli.errors import PoscliError

# NAME[@WINDOW][(KEY=VALUE,KEY=VALUE)], e.g. rope@64(base=10000)
LAYER = re.compile(r"^\s*(?P<pe>[\w.:-]+?)(?:@(?P<window>\d+))?(?:\((?P<options>[^()]*)\))?\s*$")


@dataclass(frozen=True)
class LayerSpec:
    pe: str
    window: int | None
    options: tuple[tuple[str, str], ...]


def parse_schedule(text: str) -> list[LayerSpec]:
    """``rope@64;rope@64;rope@64;none`` -> one LayerSpec per entry (repeated over the layers by the encoding)."""
    specs = []
    for part in text.split(";"):
        match = LAYER.match(part)
        if not match or not part.strip():
            raise PoscliError(
                f"-O layers: {part.strip()!r} is not NAME[@WINDOW][(KEY=VALUE,...)]; e.g. -O "
                "'layers=rope@64;rope@64;rope@64;none' (three sliding-window RoPE layers, one global NoPE)"
            )
        window = int(match["window"]) if match["window"] else None
        if window is not None and window < 1:
            raise PoscliError(f"-O layers: the window of {part.strip()!r} must be at least 1")
        pairs = [pair for pair in (match["options"] or "").split(",") if pair.strip()]
        specs.append(LayerSpec(check_name(match["pe"]), window, tuple(parse_option_pairs(pairs).items())))
    return specs


@dataclass(frozen=True)
class HybridOptions:
    """Args:
    layers: the schedule, one entry per layer separated by ``;`` and repeated over the model's
        layers: ``NAME[@WINDOW][(KEY=VALUE,...)]``, an encoding that acts in every layer, the
        sliding window its queries see (the last W keys; none: global) and its options.
        ``rope@64;rope@64;rope@64;none`` is RNoPE-SWA's three local RoPE layers and one global NoPE
        layer; ``rope@64(base=10000);rope(base=1000000)`` gives local and global layers their own
        RoPE base, as Gemma 3 does.
    """

    layers: str = "rope@64;rope@64;rope@64;none"

    def __post_init__(self) -> None:
        parse_schedule(self.layers)

    def first_rotary(self):
        """The options of the first layer whose encoding rotates (extension methods read ``base``)."""
        for spec in parse_schedule(self.layers):
            cls = get(spec.pe)
            if cls.rotary_frequencies:
                return cls.parse_options(dict(spec.options))
        raise PoscliError(f"-O layers={self.layers} has no rotary layer for a frequency method to rescale")

    def rotary_dim(self, head_dim: int) -> int:
        return self.first_rotary().rotary_dim(head_dim)

    @property
    def base(self) -> float:
        return self.first_rotary().base


@register("hybrid")
class Hybrid(PositionalEncoding):
    """Each layer its own encoding and attention window (``-O layers=...``, see ``HybridOptions``):
    the production long-context recipe of interleaving sliding-window RoPE layers with global NoPE
    layers (RNoPE-SWA, Yang et al., 2025, arXiv 2501.18795; SWAN-GPT, Puvvada et al., 2025, arXiv
    2504.08719; Llama 4's one NoPE layer in four) and a RoPE base per layer type (Gemma 3). Each
    layer's encoding is built with its own options and calls its own hooks; a windowed layer runs
    the blocked path with the keys farther than W masked out. ``poscli extend`` rescales the layers
    that rotate (each reads ``config.rope_scaling``) and leaves the others. An absolute encoding acts
    at the input, not per layer, so it cannot be in a schedule.
    """

    citation = "Yang et al., 2025"
    summary = "a per-layer schedule: each layer its own encoding and sliding window (e.g. 3 local RoPE, 1 global NoPE)"
    Options = HybridOptions
    replaces_attention = True  # each layer's attention is its own encoding's, with its window
    rotary_frequencies = True  # a frequency method rescales the layers that rotate
    separable_positions = False

    def __init__(self, config):
        super().__init__(config)
        specs = parse_schedule(self.options.layers)
        given = self.options.layers != HybridOptions.layers  # the default is cut to a smaller model's layers
        if given and len(specs) > config.n_layer:  # repeated over the layers: a longer schedule would lose its tail
            raise PoscliError(
                f"-O layers: the schedule has {len(specs)} entries for a model of {config.n_layer} layers; give at "
                f"most {config.n_layer} (it repeats over the layers) or more --layers"
            )
        built: dict[LayerSpec, PositionalEncoding] = {}
        for spec in specs:
            cls = get(spec.pe)
            if cls is Hybrid:
                raise PoscliError("-O layers: a schedule cannot hold another hybrid")
            if cls.embed is not PositionalEncoding.embed:
                raise PoscliError(
                    f"-O layers: --pe {spec.pe} adds positions at the input, not in a layer; use an encoding that acts "
                    "in every layer (rope, alibi, none, ...)"
                )
            if spec.window is not None and cls.replaces_attention:
                raise PoscliError(f"-O layers: --pe {spec.pe} computes its own attention; it takes no @WINDOW")
            own = dataclasses.replace(config, pe=spec.pe, pe_options=dict(spec.options))
            built.setdefault(spec, cls(own))
        self.parts = nn.ModuleList(dict.fromkeys(built.values()))  # each distinct layer encoding once
        self.schedule = [
            (built[specs[layer % len(specs)]], specs[layer % len(specs)].window) for layer in range(config.n_layer)
        ]

    def layer(self, layer: int) -> tuple[PositionalEncoding, int | None]:
        """The encoding and window (None: global) of ``layer``."""
        return self.schedule[layer]

    def rotate(self, q: Tensor, k: Tensor, positions: Tensor, layer: int) -> tuple[Tensor, Tensor]:
        return self.layer(layer)[0].rotate(q, k, positions, layer)

    def attend(self, x: Tensor, q: Tensor, k: Tensor, v: Tensor, positions: Tensor, layer: int) -> Tensor:
        encoding, window = self.layer(layer)
        block = self.config.attention_block
        if window is None:
            consecutive = len(positions) < 2 or bool((positions.diff() == 1).all())
            return causal_attention(q, k, v, encoding, positions, layer, consecutive, block, x)

        score_bias = None
        if encoding.has_score_bias:
            score_bias = lambda q_block, q_pos, k_pos: encoding.score_bias(q_block, q_pos, k_pos, layer)  # noqa: E731
        return blocked_biased_attention(q, k, v, score_bias, positions, block, window=window)  # (B, H, T, hd)
