"""Which shards a reader needs when: a pure function of the epoch's plan, told to the cache.

A time is ``epoch + place / units``, the place of a unit (batch or sample) in its rank's
sequence for the epoch: every rank has as many units, and a rank's workers take turns through
them, so the readers of a node share one clock. Each shard's use in an epoch is the span from
the first to the last unit that reads it. The cache fetches the shards needed next ahead of
the reading position and evicts those needed latest (:mod:`torch_tfrecord.records.remote.eviction`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from .plan import EpochPlan, Progress, WorkerSlice

if TYPE_CHECKING:
    from ...records.shards.shard_records import ShardRecords

__all__ = ["NoSchedule", "ReadSchedule", "shard_uses"]

Uses = dict[int, list[tuple[float, float]]]


def shard_uses(
    plan: EpochPlan,
    epoch: int,
    workers: WorkerSlice,
    record_starts: npt.NDArray[np.int64],
    progress: Progress | None = None,
    skip: int = 0,
) -> Uses:
    """When one worker reads each shard in ``epoch`` (from its place there): per shard, the
    ``[(first, last)]`` times of its use.

    Args:
        plan: the epoch's plan.
        epoch: the epoch.
        workers: the worker.
        record_starts: each shard's first global record id, and the total last.
        progress, skip: where the rank and the worker start (a resumed epoch).
    """
    progress = progress or Progress()
    remaining = progress.remaining(plan.units_per_rank)
    shards = len(record_starts) - 1
    first = np.full(shards, np.inf)
    last = np.full(shards, -np.inf)
    per_unit = plan.batch_size or 1
    for block in workers.items(remaining, skip):
        units = progress.units(block)
        positions = plan.unit_positions(units) if plan.batch_size else units
        ids, _ = plan.records(positions, epoch)
        times = epoch + np.repeat(block, per_unit)[: len(ids)] / max(remaining, 1)
        shard = np.searchsorted(record_starts, ids, side="right") - 1
        np.minimum.at(first, shard, times)
        np.maximum.at(last, shard, times)
    used = np.flatnonzero(np.isfinite(first))
    return {int(s): [(float(first[s]), float(last[s]))] for s in used}


class ReadSchedule:
    """One worker's iteration of an epoch, as the cache of ``files`` hears of it: its uses of
    the shards in this epoch and the next, and its place as it goes (a no-op without a cache)."""

    def __init__(
        self,
        files: ShardRecords,
        plan: EpochPlan,
        epoch: int,
        workers: WorkerSlice,
        progress: Progress,
        skip: int,
    ) -> None:
        self._files = files if files.cache is not None else None
        self._epoch = epoch
        self._remaining = max(progress.remaining(plan.units_per_rank), 1)
        if self._files is None:
            return
        uses = shard_uses(plan, epoch, workers, files.starts, progress, skip)
        for shard, spans in shard_uses(plan, epoch + 1, workers, files.starts).items():
            uses.setdefault(shard, []).extend(spans)
        files.pool.plan(uses, float(epoch))

    def reached(self, unit: int | np.integer[Any]) -> None:
        """The worker is about to read ``unit`` (a remaining-index of the rank's units)."""
        if self._files is not None:
            self._files.pool.advance(self._epoch + int(unit) / self._remaining)

    def finished(self) -> None:
        """The worker read its part of the epoch: its downloads are let finish."""
        if self._files is not None:
            self._files.pool.finish()


class NoSchedule:
    """A read schedule that tells no cache anything (a dataset's whose reads no cache plans)."""

    def reached(self, unit: int | np.integer[Any]) -> None:
        pass

    def finished(self) -> None:
        pass
