"""The epoch of each pass over a dataset: the one ``set_epoch`` gave, else counted, per process.

Training frameworks (Lightning's Trainer and Fabric, a plain loop that forgets) never call the
dataset's ``set_epoch``: without a count of their own, every epoch would have the order of epoch 0.
So each process that iterates the dataset (the main process, and each DataLoader worker by its
id) records, in shared memory, the epoch of the last pass it began; a new pass begins the next.
The workers of one pass all began the same number of passes before it (a DataLoader starts an
iteration in every worker, persistent or not, each pass), so they agree, and the ranks agree as
they run the same passes. Once ``set_epoch`` is called its epoch wins, for good.

A loaded state sets the *floor*: the next pass of every process is the state's epoch, the one
after it the next.
"""

from __future__ import annotations

import torch
from torch.utils.data import get_worker_info

__all__ = ["EpochCounter"]

_SLOTS = 257  # the main process and 256 workers; further workers share the last slot
_EXPLICIT, _EPOCH, _FLOOR, _FIRST_SLOT = 0, 1, 2, 3


class EpochCounter:
    """The epoch: set explicitly (then fixed until set again) or counted per iterating process.

    Picklable with the dataset; the counts live in shared memory, so forked or spawned, persistent
    or not, DataLoader workers see and update the same ones.
    """

    def __init__(self) -> None:
        # [set_epoch was called (0/1), its epoch, the floor, the last epoch each slot began (-1: none)]
        state = torch.full((_FIRST_SLOT + _SLOTS,), -1, dtype=torch.int64)
        state[:_FIRST_SLOT] = 0
        self.state = state.share_memory_()  # type: ignore[no-untyped-call]

    @property
    def explicit(self) -> bool:
        """Whether ``set_epoch`` decides the epoch."""
        return bool(self.state[_EXPLICIT])

    def set(self, epoch: int) -> None:
        """``set_epoch``: from now on every pass is ``epoch`` until it is set again."""
        if epoch < 0:
            raise ValueError(f"{epoch=} must be >= 0")
        self.state[_EPOCH] = epoch
        self.state[_EXPLICIT] = 1

    def restart_at(self, epoch: int) -> None:
        """A state of ``epoch`` was loaded: the next pass of every process is ``epoch``."""
        if self.explicit:
            self.state[_EPOCH] = epoch
        else:
            self.state[_FLOOR] = epoch
            self.state[_FIRST_SLOT:] = -1

    def current(self) -> int:
        """The epoch in progress or, before any pass, the next one (for ``len`` and ``state_dict``)."""
        if self.explicit:
            return int(self.state[_EPOCH])
        return max(int(self.state[_FLOOR]), int(self.state[_FIRST_SLOT:].max()))

    def begin(self, resuming: int | None = None) -> int:
        """The epoch of a pass this process begins now, counted as begun.

        Args:
            resuming: the epoch of a state loaded in this process (a DataLoader worker given its
                place by torchdata's StatefulDataLoader): the pass continues it, unless this
                process already began that epoch.
        """
        if self.explicit:
            return int(self.state[_EPOCH])
        info = get_worker_info()
        slot = _FIRST_SLOT + min(_SLOTS - 1, 0 if info is None else 1 + info.id)
        epoch = max(int(self.state[slot]) + 1, int(self.state[_FLOOR]))
        if resuming is not None and resuming > int(self.state[slot]):
            epoch = resuming
        self.state[slot] = epoch
        return epoch
