"""NoPE: no positional signal at all."""

from poscli.encodings import register
from poscli.encodings.base import PositionalEncoding


@register("none")
class NoPE(PositionalEncoding):
    """No position information (Kazemnejad et al., 2023, "The Impact of Positional Encoding on
    Length Generalization in Transformers"): a causal decoder can still infer order from the
    causal mask itself. Every hook is the identity."""

    citation = "Kazemnejad et al., 2023"
    summary = "no position signal; causal masking alone orders tokens"
    reads_positions = False
