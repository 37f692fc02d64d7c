"""Pure epoch order and partition: which records, in which order, for each (epoch, rank, worker).

Nothing here does I/O or holds per-record state: the order of an epoch is a function of
``(seed, epoch, N, position)``, computed for any slice of positions in O(slice) time and memory,
so it works the same for a thousand records and for a billion. The permutation runs in the
compiled extension when it is built (:mod:`.permutation`).

Vocabulary: a *position* is a place in the epoch's order of all records; a *unit* is what a rank
hands out at once (a batch of ``batch_size`` positions in batch mode, one sample otherwise); a
*rank position* counts a rank's own samples, ``0 .. samples_per_rank - 1``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from typing import Literal

import numpy as np
import numpy.typing as npt

from ...support.seeds import mix_seed
from .permutation import permute, permute_windows

__all__ = [
    "SAMPLE_CHUNK",
    "EpochPlan",
    "Progress",
    "Ranges",
    "Shuffle",
    "WorkerSlice",
    "block_size",
    "check_ranges",
    "merge_progress",
    "reading_chunk",
    "rest_of_epoch",
]

Shuffle = Literal["global", "shards", False] | str
"""``"global"``, ``"shards"``, ``False``, or ``"block:K"`` (see :func:`block_size`)."""
Int64Array = npt.NDArray[np.int64]


def block_size(shuffle: Shuffle) -> int | None:
    """K of a ``"block:K"`` shuffle; None for the other shuffles.

    A block shuffle shuffles the shard order, then permutes the records within each window of
    K consecutive places of that order: reads stay sequential within a window (compressed and
    remote shards), and a record moves at most K - 1 places.

    Raises:
        ValueError: ``shuffle`` is no shuffle, or K is not a positive integer.
    """
    if shuffle in ("global", "shards", False):
        return None
    if isinstance(shuffle, str) and shuffle.startswith("block:"):
        text = shuffle[len("block:") :]
        if text.isdigit() and int(text) >= 1:
            return int(text)
    raise ValueError(f"shuffle={shuffle!r} must be 'global', 'shards', 'block:K' (K >= 1 records) or False")


@dataclasses.dataclass(frozen=True)
class Progress:
    """How far a rank got through an epoch: every unit before ``start`` and those in ``done``."""

    start: int = 0
    done: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.start < 0:
            raise ValueError(f"start={self.start} must be >= 0")
        if list(self.done) != sorted(set(self.done)) or (self.done and self.done[0] <= self.start):
            raise ValueError(f"done={self.done} must be sorted, distinct and after start={self.start}")

    def remaining(self, total_units: int) -> int:
        """How many units of ``total_units`` are still to come."""
        return max(0, total_units - self.start - len(self.done))

    def units(self, indices: npt.ArrayLike) -> Int64Array:
        """The units at the given indices of the sequence of remaining units (vectorised)."""
        j = np.asarray(indices, dtype=np.int64)
        if not self.done:
            return j + self.start
        # done[i] would sit at remaining-index done[i] - start - i; every such slot at or before
        # j pushes j's unit one further.
        slots = np.asarray(self.done, dtype=np.int64) - self.start - np.arange(len(self.done))
        return j + self.start + np.searchsorted(slots, j, side="right")


SAMPLE_CHUNK = 64  # sample mode: items a worker reads and decodes at once


def reading_chunk(run: int) -> int:
    """Units read and decoded at once in sample mode: whole runs of ``run``, about :data:`SAMPLE_CHUNK`."""
    return run * max(1, SAMPLE_CHUNK // run)


@dataclasses.dataclass(frozen=True)
class WorkerSlice:
    """Worker ``worker_id`` of ``num_workers`` takes every ``num_workers``-th chunk of ``chunk`` units.

    The units are those :class:`Progress` leaves; within each chunk they are consecutive, so
    unshuffled reads stay sequential and, in batch mode (chunk 1), the DataLoader's round-robin
    over workers hands batches out in the rank's order.
    """

    num_workers: int
    worker_id: int
    chunk: int

    def __post_init__(self) -> None:
        if self.num_workers < 1 or self.chunk < 1:
            raise ValueError(f"num_workers={self.num_workers} and chunk={self.chunk} must be positive")
        if not 0 <= self.worker_id < self.num_workers:
            raise ValueError(f"worker_id must be in [0, {self.num_workers}), got {self.worker_id}")

    def index(self, item: int | Int64Array) -> int | Int64Array:
        """Remaining-index of this worker's ``item``-th unit."""
        return (item // self.chunk * self.num_workers + self.worker_id) * self.chunk + item % self.chunk

    def count(self, remaining: int) -> int:
        """How many of ``remaining`` units this worker takes."""
        span = self.num_workers * self.chunk
        full, rest = divmod(remaining, span)
        return full * self.chunk + min(self.chunk, max(0, rest - self.worker_id * self.chunk))

    def items(self, remaining: int, skip: int = 0, block: int = 4096) -> Iterator[Int64Array]:
        """Remaining-indices of this worker's units after the first ``skip``, in blocks."""
        count = self.count(remaining)
        for first in range(skip, count, block):
            yield np.asarray(self.index(np.arange(first, min(count, first + block), dtype=np.int64)))


def merge_progress(
    progress: Progress, total_units: int, workers: WorkerSlice | None, yielded: Sequence[int]
) -> Progress:
    """The rank's progress after worker ``w`` handed out its first ``yielded[w]`` units.

    The inverse of the split: however the units were spread over workers, the result names
    exactly the units handed out, so a resume with any number of workers loses and repeats
    nothing.

    Args:
        progress: where the split started.
        total_units: units per rank in the epoch.
        workers: the split (None: one process took the units in order).
        yielded: units handed out by each worker, in worker order.
    """
    remaining = progress.remaining(total_units)
    slices = (
        [workers]
        if workers is None
        else [dataclasses.replace(workers, worker_id=w) for w in range(workers.num_workers)]
    )
    if len(yielded) != len(slices):
        raise ValueError(f"{len(yielded)} yielded counts for {len(slices)} workers")
    limits = [remaining if worker is None else worker.count(remaining) for worker in slices]
    next_index = remaining  # the first remaining-index not handed out
    for worker, count, limit in zip(slices, yielded, limits, strict=True):
        if not 0 <= count <= limit:
            raise ValueError(f"a worker yielded {count} units but had only {limit}")
        if count < limit:
            next_index = min(next_index, count if worker is None else int(worker.index(count)))
    taken: list[Int64Array] = []
    for worker, count in zip(slices, yielded, strict=True):
        if worker is None:
            taken.append(np.arange(next_index + 1, count, dtype=np.int64))
        else:
            # Only the units past the first gap matter; they are few (workers run neck and neck).
            low = _first_item_at_or_after(worker, next_index, count)
            taken.append(np.asarray(worker.index(np.arange(low, count, dtype=np.int64))))
    indices = np.concatenate(taken) if taken else np.empty(0, np.int64)
    later = np.unique(indices[indices > next_index])
    if next_index >= remaining:
        return Progress(total_units)
    start = int(progress.units([next_index])[0])
    done = sorted({*(int(u) for u in progress.units(later)), *(d for d in progress.done if d > start)})
    return Progress(start, tuple(done))


def _first_item_at_or_after(worker: WorkerSlice, index: int, count: int) -> int:
    """The first of a worker's item numbers (below ``count``) whose remaining-index is >= index."""
    low, high = 0, count
    while low < high:
        middle = (low + high) // 2
        if int(worker.index(middle)) < index:
            low = middle + 1
        else:
            high = middle
    return low


Ranges = tuple[tuple[int, int], ...]
"""Sorted, disjoint, non-empty ``[start, stop)`` ranges of an epoch's positions."""


def check_ranges(ranges: Sequence[Sequence[int]], limit: int) -> Ranges:
    """``ranges`` as a :data:`Ranges`, checked to be sorted, disjoint, non-empty and in ``[0, limit)``."""
    result = tuple((int(a), int(b)) for a, b in ranges)
    previous = 0
    for start, stop in result:
        if not previous <= start < stop <= limit:
            raise ValueError(
                f"ranges {list(result)[:8]} must be sorted, disjoint, non-empty and in [0, {limit})"
            )
        previous = stop
    return result


def _coalesce(ranges: Sequence[tuple[int, int]]) -> Ranges:
    out: list[tuple[int, int]] = []
    for start, stop in ranges:
        if start >= stop:
            continue
        if out and out[-1][1] == start:
            out[-1] = (out[-1][0], stop)
        else:
            out.append((start, stop))
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class EpochPlan:
    """Who reads what in an epoch: the global order and its split over ranks.

    The records form an endless *stream*: pass ``p`` over the data is the order of all records
    keyed by ``p`` (stream positions ``p * N .. (p + 1) * N - 1``). Epoch ``e`` is the stream's
    ``epoch_size`` positions from ``e * epoch_size``: with ``samples_per_epoch`` None, exactly pass
    ``e``; a shorter epoch goes on through the pass where the previous one stopped (every record
    is read before any repeats), a longer one starts the next pass. ``rest`` narrows an epoch to
    some of its positions: what is left of it after another world size began it.

    Ranks take contiguous blocks of the epoch's positions (rank r: its ``r * samples_per_rank``-th
    onwards), so unshuffled and shard-shuffled reads stay sequential. Every rank gets
    ``samples_per_rank`` samples: with ``drop_last`` the last
    ``num_positions mod (world_size * unit)`` positions are left out (other records each epoch
    when shuffled); without it the positions wrap round and the extra ones are marked as padding.

    Args:
        shard_sizes: records per shard, in shard order; record ids count through the shards.
        world_size, rank: the data-parallel group and this process's place in it.
        batch_size: records per unit in batch mode, None in sample mode.
        drop_last: drop the ragged end (True) or pad it (False).
        shuffle: "global", "shards", "block:K" or False.
        seed: the shuffle's seed.
        samples_per_epoch: the epoch's size in samples over all ranks (None: one pass).
        rest: the epoch's positions (in ``[0, epoch_size)``) still to read, None for all.
    """

    shard_sizes: tuple[int, ...]
    world_size: int = 1
    rank: int = 0
    batch_size: int | None = None
    drop_last: bool = True
    shuffle: Shuffle = "global"
    seed: int = 0
    samples_per_epoch: int | None = None
    rest: Ranges | None = None

    def __post_init__(self) -> None:
        if self.world_size < 1:
            raise ValueError(f"world_size={self.world_size} must be positive")
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank must be in [0, {self.world_size}), got {self.rank}")
        if self.batch_size is not None and self.batch_size < 1:
            raise ValueError(f"batch_size={self.batch_size} must be positive")
        block_size(self.shuffle)  # raises for anything else
        if any(size < 0 for size in self.shard_sizes):
            raise ValueError("shard sizes must be >= 0")
        if self.samples_per_epoch is not None:
            if self.samples_per_epoch < 1:
                raise ValueError(f"samples_per_epoch={self.samples_per_epoch} must be positive")
            if self.num_records == 0:
                raise ValueError(f"samples_per_epoch={self.samples_per_epoch} needs records; there are none")
        if self.rest is not None:
            check_ranges(self.rest, self.epoch_size)

    @property
    def num_records(self) -> int:
        return sum(self.shard_sizes)

    @property
    def epoch_size(self) -> int:
        """Stream positions per epoch: ``samples_per_epoch``, else the number of records."""
        return self.num_records if self.samples_per_epoch is None else self.samples_per_epoch

    @property
    def num_positions(self) -> int:
        """Positions of the epoch to split over the ranks: ``epoch_size``, or those in ``rest``."""
        if self.rest is None:
            return self.epoch_size
        return sum(stop - start for start, stop in self.rest)

    @property
    def unit(self) -> int:
        """Samples per unit: the batch size in batch mode, else 1."""
        return self.batch_size or 1

    @property
    def units_per_rank(self) -> int:
        """Units (batches in batch mode, else samples) each rank gets per epoch."""
        per_global_unit = self.world_size * self.unit
        if self.drop_last:
            return self.num_positions // per_global_unit
        return -(-self.num_positions // per_global_unit)

    @property
    def samples_per_rank(self) -> int:
        return self.units_per_rank * self.unit

    @property
    def dropped(self) -> int:
        """Positions left out of each epoch (with drop_last)."""
        return max(0, self.num_positions - self.world_size * self.samples_per_rank)

    @property
    def padding(self) -> int:
        """Repeated records added to each epoch (without drop_last)."""
        return max(0, self.world_size * self.samples_per_rank - self.num_positions)

    def order(self, positions: npt.ArrayLike, epoch: int) -> Int64Array:
        """The record id at each position of pass ``epoch``'s order of all records."""
        array = np.asarray(positions, dtype=np.int64)
        n = self.num_records
        if self.shuffle == "global":
            return permute(array, n, self.seed, epoch)
        if self.shuffle is False:
            return array.copy()
        window = block_size(self.shuffle)
        if window is not None and n:
            array = permute_windows(array, n, window, self.seed, epoch)
        sizes = np.asarray(self.shard_sizes, dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        shard_order = np.random.Generator(np.random.PCG64(mix_seed(self.seed, epoch))).permutation(len(sizes))
        ends_in_order = np.cumsum(sizes[shard_order])
        slot = np.searchsorted(ends_in_order, array, side="right")
        within = array - (ends_in_order[slot] - sizes[shard_order[slot]])
        return starts[shard_order[slot]] + within

    def stream(self, stream_positions: npt.ArrayLike) -> Int64Array:
        """The record id at each position of the endless stream of passes."""
        array = np.asarray(stream_positions, dtype=np.int64)
        n = self.num_records
        if n == 0 or array.size == 0:
            return np.zeros(array.shape, np.int64)
        passes, within = np.divmod(array, n)
        if passes.min() == passes.max():  # the usual case: one pass
            return self.order(within, int(passes.flat[0]))
        out = np.empty_like(array)
        for pass_ in np.unique(passes).tolist():
            where = passes == pass_
            out[where] = self.order(within[where], pass_)
        return out

    def positions(self, indices: npt.ArrayLike) -> Int64Array:
        """The epoch positions (in ``[0, epoch_size)``) of the ``indices``-th positions to split."""
        array = np.asarray(indices, dtype=np.int64)
        if self.rest is None:
            return array.copy()
        starts = np.asarray([start for start, _ in self.rest], dtype=np.int64)
        lengths = np.asarray([stop - start for start, stop in self.rest], dtype=np.int64)
        before = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        which = np.searchsorted(before, array, side="right") - 1
        return starts[which] + (array - before[which])

    def records(self, rank_positions: npt.ArrayLike, epoch: int) -> tuple[Int64Array, npt.NDArray[np.bool_]]:
        """Record ids and padding flags of this rank's samples at the given rank positions."""
        array = np.asarray(rank_positions, dtype=np.int64)
        if array.size and (array.min() < 0 or array.max() >= self.samples_per_rank):
            raise ValueError(f"rank positions must lie in [0, {self.samples_per_rank})")
        indices = array + self.rank * self.samples_per_rank
        padding = indices >= self.num_positions
        positions = self.positions(indices % max(1, self.num_positions))
        return self.stream(positions + epoch * self.epoch_size), padding

    def unit_positions(self, units: npt.ArrayLike) -> Int64Array:
        """Rank positions of the samples of each unit, flattened in unit order."""
        array = np.asarray(units, dtype=np.int64)
        return (array[:, None] * self.unit + np.arange(self.unit, dtype=np.int64)).reshape(-1)


def rest_of_epoch(plan: EpochPlan, progress: Sequence[Progress]) -> Ranges:
    """The epoch's positions that no rank has handed out yet, from every rank's progress.

    ``plan`` is the epoch's plan of any rank (its ``rank`` does not matter); ``progress[r]`` is
    rank r's place. Positions that the epoch leaves out (``drop_last``) stay out and padding is
    not a position, so the result is exactly what the epoch still has to read; as ranges, its
    size is O(ranks + units handed out out of order), whatever the number of records.

    Raises:
        ValueError: not one progress per rank.
    """
    if len(progress) != plan.world_size:
        raise ValueError(f"{len(progress)} ranks' progress for a world of {plan.world_size} ranks")
    per_rank, unit = plan.samples_per_rank, plan.unit
    limit = min(plan.num_positions, plan.world_size * per_rank)
    indices: list[tuple[int, int]] = []  # ranges of indices into the positions to split
    for rank, place in enumerate(progress):
        first = rank * per_rank
        end = min(first + per_rank, limit)
        cursor = first + place.start * unit
        for unit_done in place.done:
            at = first + unit_done * unit
            if at >= end:
                break
            indices.append((cursor, at))
            cursor = max(cursor, at + unit)
        indices.append((cursor, end))
    return _coalesce([piece for a, b in _coalesce(indices) for piece in _index_ranges(plan, a, b)])


def _index_ranges(plan: EpochPlan, first: int, end: int) -> list[tuple[int, int]]:
    """Epoch positions of the indices ``first .. end - 1`` of the positions to split, as ranges."""
    if plan.rest is None:
        return [(first, end)]
    out, before = [], 0
    for start, stop in plan.rest:
        low, high = max(first, before), min(end, before + stop - start)
        if low < high:
            out.append((start + low - before, start + high - before))
        before += stop - start
        if before >= end:
            break
    return out
