"""A learned position table stretched to the target length by linear interpolation."""

from __future__ import annotations

from torch import Tensor

from poscli.errors import Answer
from poscli.extension.methods import register
from poscli.extension.methods.protocol import ExtensionMethod


def interpolate_table(table: Tensor, rows: int) -> Tensor:
    """Stretch a (L, C) position table to (rows, C) by linear interpolation, ends aligned."""
    import torch.nn.functional as F

    return F.interpolate(table.T[None], size=rows, mode="linear", align_corners=True)[0].T.contiguous()


@register("interpolate")
class Interpolate(ExtensionMethod):
    """For an encoding with a table of learned rows (``position_table``, whose weight is
    ``encoding.table.weight`` and whose row count is ``model.position_rows``)."""

    summary = "the table stretched to the target length by linear interpolation (as for BERT and ViT tables)"
    citation = "Dosovitskiy et al., 2021 (ViT's position table at a higher resolution)"

    @classmethod
    def applies_to(cls, encoding):
        return None if getattr(encoding, "position_table", False) else "stretches a table of learned positions"

    @classmethod
    def extended_config(cls, encoding, config, factor, target, options, weights):
        rows = config.position_rows or config.train_length
        if rows > config.train_length:  # trained with --random-positions: its table already reaches further
            raise Answer(
                f"has learned rows for positions up to {rows} (it was trained with --random-positions); "
                f"evaluate it directly up to that length (--lengths {rows})"
            )
        weights["encoding.table.weight"] = interpolate_table(weights["encoding.table.weight"], target)  # (target, C)
        return {"position_rows": target}
