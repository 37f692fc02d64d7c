"""Guards against common mistakes in wiring a dataset: each a clear error instead of silent nonsense.

- A batch-mode dataset under a DataLoader that batches again (batches of batches, stacked).
- Variable-length features in sample mode under torch's default collate, which cannot stack them.
- Several epochs of a shuffled dataset without ``set_epoch``: the same order every epoch.

The DataLoader checks read its fetcher (``_loader.calling_fetcher``): when torch changes its
private fetcher class, no fetcher is found and nothing is checked.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

__all__ = ["EpochGuard", "check_loader"]


def check_loader(fetcher: Any, batch_mode: bool, spec: Mapping[str, Any] | None) -> None:
    """Raises when the DataLoader iterating this dataset would batch it wrongly.

    Args:
        fetcher: the DataLoader's fetcher calling ``iter(dataset)`` (see ``_loader``), or None.
        batch_mode: the dataset yields batches (it was given ``batch_size=``).
        spec: the dataset's normalised spec (None: inferred or raw).

    Raises:
        ValueError: a batch-mode dataset under a DataLoader with a ``batch_size``; or VarLen
            features in sample mode under torch's ``default_collate``.
    """
    if fetcher is None or not getattr(fetcher, "auto_collation", False):
        return
    if batch_mode:
        raise ValueError(
            "the dataset makes batches itself (batch_size= was given), and the DataLoader batches "
            "them again: use DataLoader(dataset, batch_size=None) (under transformers.Trainer, "
            "which makes its own DataLoader with a batch size, give the dataset no batch_size)"
        )
    from torch.utils.data import default_collate

    from ...codec.spec import VarLen

    if getattr(fetcher, "collate_fn", None) is default_collate and spec:
        varlen = sorted(key for key, feature in spec.items() if isinstance(feature, VarLen))
        if varlen:
            raise ValueError(
                f"VarLen features {varlen} have a different length in each sample, which torch's "
                "default collate cannot stack: use DataLoader(..., collate_fn=tt.collate) (it "
                "makes them a tt.Ragged), or give the dataset batch_size= and DataLoader(batch_size=None)"
            )


class EpochGuard:
    """Warns once when a shuffled dataset starts the epoch it has already gone through whole.

    Without ``set_epoch`` every epoch has the same order. Each iterating process (the main one,
    and each DataLoader worker by its id) records the epoch it last went through to the end,
    in shared memory beside a flag that the warning was given: workers, persistent or not,
    forked or spawned, see it. A worker compares with its own record, not another's: workers
    of one pass finish at different times. Only the main process or worker 0 (which every pass
    has) warns, so that two workers cannot both pass the flag's test at once.
    """

    _SLOTS = 257  # the main process and 256 workers; workers past them are not checked

    def __init__(self, shuffled: bool) -> None:
        import torch

        self.shuffled = shuffled
        # [warned (0 / 1), then the epoch each process last completed (-1: none)]
        state = torch.full((1 + self._SLOTS,), -1, dtype=torch.int64)
        state[0] = 0
        self.state = state.share_memory_()  # type: ignore[no-untyped-call]

    def _slot(self) -> int | None:
        from torch.utils.data import get_worker_info

        info = get_worker_info()
        slot = 1 if info is None else 2 + info.id
        return slot if slot <= self._SLOTS else None

    def starting(self, epoch: int, resuming: bool) -> None:
        """Called as an iteration begins; ``resuming``: it continues a loaded state."""
        slot = self._slot()
        if not self.shuffled or resuming or slot is None or int(self.state[slot]) != epoch:
            return
        if int(self.state[0]) or slot > 2:
            return
        self.state[0] = 1
        warnings.warn(
            f"the shuffled dataset starts epoch {epoch} again after a complete pass, in the same "
            "order: call dataset.set_epoch(epoch) before each epoch for a new order",
            UserWarning,
            stacklevel=4,
        )

    def finished(self, epoch: int) -> None:
        """Called when an iteration has gone through its whole epoch."""
        slot = self._slot()
        if slot is not None:
            self.state[slot] = epoch
