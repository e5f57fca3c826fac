"""Data-parallel training with PyTorch's own stack: torchrun starts the processes,
``torch.distributed`` (gloo on CPU, NCCL on CUDA) connects them, DistributedDataParallel
averages the gradients.

    torchrun --nproc-per-node 2 -m poscli train --pe alibi      # or: poscli train --nproc 2 ...

Every process draws the same *global* batch from the same seeded generator and keeps its own
rows (rank r of N takes rows r*B/N .. (r+1)*B/N - 1), so the global batch, the data order and
the result do not depend on the number of processes; DDP's gradient average over equal shards
is the gradient of the global mean loss. Only rank 0 writes files and prints.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from poscli.errors import PoscliError


@dataclass(frozen=True)
class Group:
    """This process's place among the training processes (one process: rank 0 of 1)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1

    @property
    def active(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def shard(self, *batch: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
        """This process's rows of the global batch (tokens, targets, positions...): (B, T) -> (B / N, T)
        each; None stays None."""
        if not self.active:
            return batch
        rows = batch[0].shape[0] // self.world_size
        part = slice(self.rank * rows, (self.rank + 1) * rows)
        return tuple(None if tensor is None else tensor[part] for tensor in batch)

    def mean(self, values: torch.Tensor) -> torch.Tensor:
        """The mean over processes of a small tensor (every process gets it)."""
        if not self.active:
            return values
        values = values.detach().clone()
        dist.all_reduce(values, op=dist.ReduceOp.SUM)
        return values / self.world_size


def group_from_environment() -> Group:
    """The group torchrun describes in the environment (RANK, WORLD_SIZE, LOCAL_RANK, ...)."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return Group()
    return Group(
        rank=int(os.environ["RANK"]),
        world_size=world_size,
        local_rank=int(os.environ.get("LOCAL_RANK", "0")),
        local_world_size=int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
    )


def start(group: Group, requested_device: str) -> torch.device:
    """Join the process group (once) and pick this process's device: CUDA device LOCAL_RANK with
    NCCL when CUDA is there and not refused with --device cpu, else the CPU with gloo. On the
    CPU the cores are shared out, so N processes on one machine do not oversubscribe it."""
    use_cuda = torch.cuda.is_available() and requested_device != "cpu"
    if use_cuda:
        device = torch.device("cuda", group.local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // group.local_world_size))
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    return device


def stop(wait: bool = False) -> None:
    """Leave the process group. ``wait``: first wait at a barrier until every process gets here (rank 0
    writes and evaluates after the last step while the others are done): a process that tears gloo
    down while a peer is still connected can make that peer abort at shutdown. Not on an error,
    where the others may never arrive."""
    if dist.is_available() and dist.is_initialized():
        if wait:
            dist.barrier()
        dist.destroy_process_group()


def check_batch(group: Group, batch_size: int, accumulate: int = 1) -> None:
    if group.active and batch_size % (group.world_size * accumulate):
        parts = f"{group.world_size} processes" + (f" x {accumulate} micro-batches" if accumulate > 1 else "")
        raise PoscliError(
            f"--batch-size {batch_size} does not split evenly over {parts}; "
            f"use a multiple of {group.world_size * accumulate} (the global batch stays the same at any process count)"
        )


class LossModule(nn.Module):
    """The model's loss as a forward pass, so DistributedDataParallel can wrap it."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(
        self,
        tokens: torch.Tensor,
        targets: torch.Tensor,
        positions: torch.Tensor | None = None,
        weights: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return self.model.loss(tokens, targets, positions, weights)


def data_parallel_loss(model: nn.Module, group: Group):
    """A loss function whose backward averages gradients over the group (DDP), or ``model.loss``."""
    if not group.active:
        return model.loss
    return nn.parallel.DistributedDataParallel(LossModule(model))
