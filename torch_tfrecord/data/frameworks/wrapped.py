"""Layouts that pass Accelerate's loader wrappers intact (see :mod:`.detect`): pure logic.

- Under ``DataLoaderDispatcher`` rank 0 alone iterates the loader, for all ranks. It takes
  ``world_size`` batches at a time and sends rank r the r-th; at the end the last, smaller
  batches are concatenated and cut into ``world_size`` equal slices. So rank 0 yields the *world
  stream*: rank 0's first run of units, rank 1's first run, ... (a run: one batch of the loader),
  and at the end the last, shorter run of each rank in rank order. Every rank receives exactly
  the units it would have read itself, in the same batches.
- Under ``IterableDatasetShard`` every rank iterates and keeps, of each ``world_size x run``
  samples, the ``rank``-th run. So each rank yields its own runs with placeholders around them
  where the other ranks' runs would be; its last, short run is completed with repeated samples
  marked as padding (the wrapper would otherwise complete it with samples of its first batch).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["shard_runs", "world_items", "wrapped_len"]

Int64Array = npt.NDArray[np.int64]


def world_items(
    indices: npt.ArrayLike, units_per_rank: int, world_size: int, run: int
) -> tuple[Int64Array, Int64Array]:
    """``(rank, unit)`` of each index of the world stream of ``world_size * units_per_rank`` units.

    Args:
        indices: places in the world stream.
        units_per_rank: units each rank has in the epoch.
        world_size: the ranks the stream interleaves.
        run: units of one rank in a row (the loader's batch in sample mode, 1 in batch mode).
    """
    if run < 1:
        raise ValueError(f"{run=} must be positive")
    index = np.asarray(indices, dtype=np.int64)
    full_rounds = units_per_rank // run
    last_run = units_per_rank - full_rounds * run
    in_rounds = full_rounds * run * world_size
    run_number, within = np.divmod(np.minimum(index, max(0, in_rounds - 1)), run)
    ranks = run_number % world_size
    units = run_number // world_size * run + within
    tail = index >= in_rounds
    if tail.any():
        tail_rank, tail_within = np.divmod(index[tail] - in_rounds, max(1, last_run))
        ranks[tail] = tail_rank
        units[tail] = full_rounds * run + tail_within
    return ranks, units


def shard_runs(
    samples: Iterator[dict[str, Any]], run: int, before: int, after: int, padding_key: str
) -> Iterator[dict[str, Any] | None]:
    """``samples`` in runs of ``run``, each between ``before`` and ``after`` placeholders (None).

    The last run, if short, is completed with copies of its own samples whose ``padding_key``
    is True.
    """
    buffer: list[dict[str, Any]] = []

    def emit(items: list[dict[str, Any]]) -> Iterator[dict[str, Any] | None]:
        yield from [None] * before
        yield from items
        yield from [None] * after

    for sample in samples:
        buffer.append(sample)
        if len(buffer) == run:
            yield from emit(buffer)
            buffer = []
    if buffer:
        count = len(buffer)
        pads = [{**buffer[i % count], padding_key: True} for i in range(run - count)]
        yield from emit(buffer + pads)


def wrapped_len(units_per_rank: int, world_size: int, dispatched: bool, shard_run: int | None) -> int:
    """What the dataset's ``len`` says so that a wrapper's ``len`` is the batches each rank gets.

    Args:
        units_per_rank: the rank's units in the epoch (its own ``len``).
        dispatched: Accelerate's DataLoaderDispatcher serves the dataset (its loader, on rank 0,
            yields all ranks' units; the dispatcher's ``len`` divides by the world size).
        shard_run: asked by Accelerate's IterableDatasetShard, the run it keeps per rank (it
            takes the dataset's ``len`` for all ranks' samples).
    """
    if shard_run is not None:
        return world_size * shard_run * -(-units_per_rank // shard_run)
    if dispatched and world_size > 1:
        return world_size * units_per_rank
    return units_per_rank
