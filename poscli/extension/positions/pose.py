"""PoSE, positional skip-wise training (Zhu et al., 2024): fine-tuning windows of the original
length whose positions skip ahead, so an extended model sees every distance up to its target
without training on target-length windows (``poscli extend RUN --method M --target N --pose``)."""

from __future__ import annotations

import torch

from poscli.errors import PoscliError
from poscli.extension.positions import register
from poscli.extension.positions.protocol import PositionScheme


@register("pose")
class PoSE(PositionScheme):
    summary = "fine-tuning windows whose chunks skip ahead to positions up to the target (extend --pose)"
    citation = "Zhu et al., 2024, PoSE: Efficient Context Window Extension of LLMs via Positional Skip-wise Training"
    field = "pose"
    flag = "--pose"

    def draw(self, batch_size, length, generator, device) -> torch.Tensor:
        return pose_positions(length, self.limit, self.train_config.pose_chunks, generator, device)  # (T,)

    @classmethod
    def finetune_length(cls, given: int | None, target: int, original_length: int) -> int:
        """The fine-tuning window: the original one unless given (section 3), shorter than the target."""
        finetune_length = original_length if given is None else given
        if finetune_length >= target:
            raise PoscliError(
                f"{cls.flag} needs a --finetune-length shorter than the target {target}, got {finetune_length}"
            )
        return finetune_length

    @classmethod
    def check_steps(cls, method, steps: int | None) -> None:
        """PoSE is a way to fine-tune: a method that takes no training, or --steps 0, cannot use it."""
        if method.training == "never":
            raise PoscliError(f"{cls.flag} fine-tunes, and --method {method.name} needs no training; drop {cls.flag}")
        if steps == 0:
            raise PoscliError(f"{cls.flag} fine-tunes with skipping positions; give --steps N (e.g. 400)")


def pose_positions(
    length: int, target: int, chunks: int, generator: torch.Generator, device: torch.device
) -> torch.Tensor:
    """A window of ``length`` tokens cut at random into ``chunks`` non-empty chunks of consecutive
    positions (section 3); chunk i starts where the text puts it plus a skip u_i drawn uniformly from
    [u_(i-1), target - length] (u_0 = 0), so the positions stay in order, never exceed target - 1,
    and relative distances up to target - 1 are seen. The whole batch of a step shares one draw.
    -> (T,) int64."""
    chunks = min(chunks, length)
    cuts = (
        (torch.randperm(length - 1, generator=generator)[: chunks - 1] + 1).sort().values.tolist() if chunks > 1 else []
    )
    starts = [0, *cuts]
    ends = [*cuts, length]
    room = target - length
    positions, skip = [], 0
    for index, (start, end) in enumerate(zip(starts, ends)):
        if index:
            skip = int(torch.randint(skip, room + 1, (1,), generator=generator))
        positions.append(torch.arange(start, end) + skip)
    return torch.cat(positions).to(device)  # (T,)
