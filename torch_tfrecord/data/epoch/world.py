"""Where a dataset runs: its rank and world size, and an epoch shared with worker processes."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

__all__ = ["SharedEpoch", "resolve_world"]


def resolve_world(rank: int | None = None, world_size: int | None = None) -> tuple[int, int]:
    """``(rank, world_size)``: the arguments, else torch.distributed, else RANK / WORLD_SIZE, else 0 / 1."""
    if dist.is_available() and dist.is_initialized():
        found_rank, found_size = dist.get_rank(), dist.get_world_size()
    else:
        found_rank, found_size = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    return (found_rank if rank is None else rank), (found_size if world_size is None else world_size)


class SharedEpoch:
    """The epoch, in shared memory: set in the main process, read by (persistent) workers."""

    def __init__(self) -> None:
        self.value = torch.zeros(1, dtype=torch.int64).share_memory_()  # type: ignore[no-untyped-call]

    def get(self) -> int:
        return int(self.value[0])

    def set(self, epoch: int) -> None:
        if epoch < 0:
            raise ValueError(f"{epoch=} must be >= 0")
        self.value[0] = epoch
