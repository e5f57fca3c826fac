"""Learned absolute position embeddings (GPT-2 style)."""

from torch import Tensor, nn

from poscli.encodings import register
from poscli.encodings.base import PositionalEncoding
from poscli.errors import NotApplicable


@register("learned")
class Learned(PositionalEncoding):
    """A table of ``train_length`` learned vectors added to the input embeddings
    (Gehring et al., 2017; GPT, Radford et al., 2018). It has no row for a position it was
    not trained at, so longer sequences are not applicable rather than silently wrong."""

    citation = "Gehring et al., 2017; Radford et al., 2018"
    summary = "a learned vector per absolute position, train-length rows"
    position_table = True  # poscli extend --method interpolate stretches it
    batched_positions = True  # the table looks up (B, T) positions as it does (T,)

    @classmethod
    def grown_for_positions(cls, config, positions: int) -> dict:
        """A table row for every position."""
        return {"position_rows": max(config.position_rows, positions)}

    def __init__(self, config):
        super().__init__(config)
        # train_length rows, or more after `poscli extend --method interpolate`
        self.table = nn.Embedding(config.position_rows or config.train_length, config.d_model)
        nn.init.normal_(self.table.weight, std=0.02)

    @property
    def max_length(self) -> int:
        return self.table.num_embeddings

    def transformers_layout(self) -> dict:
        """GPT-2 (transformers' ``GPT2LMHeadModel``): its ``wpe`` table is this one, every row of it."""
        return {"architecture": "gpt2", "n_positions": self.max_length}

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        if int(positions.max()) >= self.max_length:
            raise NotApplicable(
                f"learned positions have {self.max_length} rows; position {int(positions.max())} has none"
            )
        return x + self.table(positions).to(x.dtype)  # (B, T, C)
