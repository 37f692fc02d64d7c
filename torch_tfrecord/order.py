"""Pure epoch order and partition: which records, in which order, for each (epoch, rank, worker).

Nothing here does I/O or holds per-record state: the order of an epoch is a function of
``(seed, epoch, N, position)``, computed for any slice of positions in O(slice) time and memory,
so it works the same for a thousand records and for a billion.

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

__all__ = [
    "EpochPlan",
    "Progress",
    "Shuffle",
    "WorkerSlice",
    "merge_progress",
    "mix_seed",
    "permute",
]

Shuffle = Literal["global", "shards", False]
Int64Array = npt.NDArray[np.int64]

_M64 = (1 << 64) - 1
_ROUNDS = 4


def _splitmix(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def mix_seed(*values: int) -> int:
    """A well-mixed 63-bit seed from integers (e.g. ``seed, epoch, record_id``); pure and stable."""
    state = 0x243F6A8885A308D3
    for value in values:
        state = _splitmix(state ^ (int(value) & _M64))
    return state >> 1


def _mix_array(x: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    # splitmix64's finaliser, vectorised; uint64 arithmetic wraps, which is what we want.
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _feistel(values: npt.NDArray[np.uint64], half_bits: int, keys: Sequence[int]) -> npt.NDArray[np.uint64]:
    """A balanced Feistel network: a bijection of ``[0, 4**half_bits)``."""
    shift = np.uint64(half_bits)
    mask = np.uint64((1 << half_bits) - 1)
    left = values >> shift
    right = values & mask
    for key in keys:
        left, right = right, left ^ (_mix_array(right ^ np.uint64(key)) & mask)
    return (left << shift) | right


def permute(positions: npt.ArrayLike, n: int, seed: int, epoch: int = 0) -> Int64Array:
    """Where a pseudo-random permutation of ``range(n)`` sends each position.

    A keyed Feistel network over the smallest power of four >= n, with cycle walking back into
    ``[0, n)``: a true permutation, computed for the given positions only (no table of n ints).

    Args:
        positions: ints in ``[0, n)``.
        n: size of the permuted range.
        seed, epoch: the key; every (seed, epoch) gives another permutation.

    Returns:
        int64 array, ``permutation[positions]``.
    """
    array = np.asarray(positions, dtype=np.int64)
    if n <= 1 or array.size == 0:
        return array.copy()
    if array.min() < 0 or array.max() >= n:
        raise ValueError(f"positions must lie in [0, {n})")
    half_bits = max(1, ((n - 1).bit_length() + 1) // 2)
    keys = [mix_seed(seed, epoch, round_) for round_ in range(_ROUNDS)]
    values = _feistel(array.astype(np.uint64), half_bits, keys)
    limit = np.uint64(n)
    outside = np.flatnonzero(values >= limit)
    while outside.size:  # cycle walking: each step lands inside with probability > 1/4
        walked = _feistel(values[outside], half_bits, keys)
        values[outside] = walked
        outside = outside[walked >= limit]
    return values.astype(np.int64)


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


@dataclasses.dataclass(frozen=True)
class EpochPlan:
    """Who reads what in an epoch: the global order and its split over ranks.

    Ranks take contiguous blocks of the epoch's order (rank r: positions
    ``r * samples_per_rank ..``), so unshuffled and shard-shuffled reads stay sequential. Every
    rank gets ``samples_per_rank`` samples: with ``drop_last`` the last
    ``num_records mod (world_size * unit)`` positions of the order are left out (other records
    each epoch when shuffled); without it the order wraps round and the extra positions are
    marked as padding.

    Args:
        shard_sizes: records per shard, in shard order; record ids count through the shards.
        world_size, rank: the data-parallel group and this process's place in it.
        batch_size: records per unit in batch mode, None in sample mode.
        drop_last: drop the ragged end (True) or pad it (False).
        shuffle: "global", "shards" or False.
        seed: the shuffle's seed.
    """

    shard_sizes: tuple[int, ...]
    world_size: int = 1
    rank: int = 0
    batch_size: int | None = None
    drop_last: bool = True
    shuffle: Shuffle = "global"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.world_size < 1:
            raise ValueError(f"world_size={self.world_size} must be positive")
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank must be in [0, {self.world_size}), got {self.rank}")
        if self.batch_size is not None and self.batch_size < 1:
            raise ValueError(f"batch_size={self.batch_size} must be positive")
        if self.shuffle not in ("global", "shards", False):
            raise ValueError(f"shuffle={self.shuffle!r} must be 'global', 'shards' or False")
        if any(size < 0 for size in self.shard_sizes):
            raise ValueError("shard sizes must be >= 0")

    @property
    def num_records(self) -> int:
        return sum(self.shard_sizes)

    @property
    def unit(self) -> int:
        """Samples per unit: the batch size in batch mode, else 1."""
        return self.batch_size or 1

    @property
    def units_per_rank(self) -> int:
        """Units (batches in batch mode, else samples) each rank gets per epoch."""
        per_global_unit = self.world_size * self.unit
        if self.drop_last:
            return self.num_records // per_global_unit
        return -(-self.num_records // per_global_unit)

    @property
    def samples_per_rank(self) -> int:
        return self.units_per_rank * self.unit

    @property
    def dropped(self) -> int:
        """Records left out of each epoch (with drop_last)."""
        return max(0, self.num_records - self.world_size * self.samples_per_rank)

    @property
    def padding(self) -> int:
        """Repeated records added to each epoch (without drop_last)."""
        return max(0, self.world_size * self.samples_per_rank - self.num_records)

    def order(self, positions: npt.ArrayLike, epoch: int) -> Int64Array:
        """The record id at each position of the epoch's order of all records."""
        array = np.asarray(positions, dtype=np.int64)
        n = self.num_records
        if self.shuffle == "global":
            return permute(array, n, self.seed, epoch)
        if self.shuffle is False:
            return array.copy()
        sizes = np.asarray(self.shard_sizes, dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        shard_order = np.random.Generator(np.random.PCG64(mix_seed(self.seed, epoch))).permutation(len(sizes))
        ends_in_order = np.cumsum(sizes[shard_order])
        slot = np.searchsorted(ends_in_order, array, side="right")
        within = array - (ends_in_order[slot] - sizes[shard_order[slot]])
        return starts[shard_order[slot]] + within

    def records(self, rank_positions: npt.ArrayLike, epoch: int) -> tuple[Int64Array, npt.NDArray[np.bool_]]:
        """Record ids and padding flags of this rank's samples at the given rank positions."""
        array = np.asarray(rank_positions, dtype=np.int64)
        if array.size and (array.min() < 0 or array.max() >= self.samples_per_rank):
            raise ValueError(f"rank positions must lie in [0, {self.samples_per_rank})")
        positions = array + self.rank * self.samples_per_rank
        padding = positions >= self.num_records
        return self.order(positions % max(1, self.num_records), epoch), padding

    def unit_positions(self, units: npt.ArrayLike) -> Int64Array:
        """Rank positions of the samples of each unit, flattened in unit order."""
        array = np.asarray(units, dtype=np.int64)
        return (array[:, None] * self.unit + np.arange(self.unit, dtype=np.int64)).reshape(-1)
