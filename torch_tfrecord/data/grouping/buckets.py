"""Length buckets: an epoch's sequences batched with others of similar length, a pure function of the lengths.

As tf.data's ``bucket_by_sequence_length``: a sequence of length ``l`` (its longest key) goes to
bucket ``i`` where ``boundaries[i - 1] <= l < boundaries[i]`` (the first bucket from 0, the last
without an end); each bucket's sequences, in the epoch's order, form batches of its batch size.
A batch comes where tf.data's stream would give it: at the place of its last sequence; the last,
partial batch of each bucket comes at the end of the epoch, in bucket order (kept: every sequence
is in exactly one batch).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from .groups import Groups, Int64Array, whole_sequences

__all__ = ["BucketOptions", "BucketedEpoch", "plan_buckets"]


@dataclasses.dataclass(frozen=True)
class BucketOptions:
    """Where the buckets end, and each bucket's batch size.

    Args:
        boundaries: increasing positive lengths: bucket ``i`` holds lengths in
            ``[boundaries[i - 1], boundaries[i])``.
        batch_sizes: one per bucket: ``len(boundaries) + 1``.
    """

    boundaries: tuple[int, ...]
    batch_sizes: tuple[int, ...]

    def __post_init__(self) -> None:
        boundaries, sizes = tuple(self.boundaries), tuple(self.batch_sizes)
        object.__setattr__(self, "boundaries", boundaries)
        object.__setattr__(self, "batch_sizes", sizes)
        integers = all(
            isinstance(v, int | np.integer) and not isinstance(v, bool) for v in boundaries + sizes
        )
        if (
            not integers
            or any(b < 1 for b in boundaries)
            or any(b >= c for b, c in itertools.pairwise(boundaries))
        ):
            raise ValueError(f"boundaries={list(boundaries)} must be increasing positive ints")
        if len(sizes) != len(boundaries) + 1 or any(s < 1 for s in sizes):
            raise ValueError(
                f"batch_sizes={list(sizes)} must be {len(boundaries) + 1} positive ints: one per bucket "
                f"(len(boundaries) + 1, the last for lengths >= {boundaries[-1] if boundaries else 0})"
            )


@dataclasses.dataclass(frozen=True, eq=False)
class BucketedEpoch:
    """An epoch's batches, and the bucket of each."""

    batches: Groups
    buckets: Int64Array


def plan_buckets(lengths: npt.ArrayLike, options: BucketOptions) -> BucketedEpoch:
    """The batches of an epoch whose sequences, in order, have ``lengths`` (one column per key)."""
    table = np.asarray(lengths, dtype=np.int64)
    table = table[:, None] if table.ndim == 1 else table
    count = len(table)
    bucket = np.searchsorted(
        np.asarray(options.boundaries, dtype=np.int64), table.max(axis=1, initial=0), "right"
    )
    members: list[Int64Array] = []  # each batch's sequences
    keys: list[Int64Array] = []  # where each batch comes in the epoch
    buckets: list[Int64Array] = []
    for number, size in enumerate(options.batch_sizes):
        mine = np.flatnonzero(bucket == number)
        if not len(mine):
            continue
        starts = np.arange(0, len(mine), size)
        members += np.split(mine, starts[1:])
        ends = np.minimum(starts + size, len(mine)) - 1
        keys.append(np.where(ends - starts + 1 == size, mine[ends], count + number))
        buckets.append(np.full(len(starts), number, dtype=np.int64))
    order = np.argsort(np.concatenate(keys or [np.zeros(0, dtype=np.int64)]), kind="stable")
    chosen: Sequence[Int64Array] = [members[i] for i in order.tolist()]
    offsets = np.cumsum([0, *(len(batch) for batch in chosen)], dtype=np.int64)
    sequences = np.concatenate(chosen).astype(np.int64) if chosen else np.zeros(0, dtype=np.int64)
    numbers = np.concatenate(buckets or [np.zeros(0, dtype=np.int64)])
    return BucketedEpoch(whole_sequences(offsets, sequences, table), numbers[order])
