"""Groups of an epoch's sequences: the rows of a packing or the batches of length buckets, as arrays.

A group is a list of *pieces*, each the tokens ``[start, stop)`` of every key of one sequence
(named by its position in the epoch's order). :mod:`.packing` and :mod:`.buckets` make
them, pure functions of the epoch's order and the sequences' lengths; the datasets split the
groups over ranks and workers like records (:mod:`.group_datasets`).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import numpy.typing as npt

__all__ = ["Groups", "Int64Array", "whole_sequences"]

Int64Array = npt.NDArray[np.int64]


@dataclasses.dataclass(frozen=True, eq=False)
class Groups:
    """Groups of pieces of an epoch's sequences (compressed rows: no Python object per piece).

    Group ``g`` holds pieces ``offsets[g]:offsets[g + 1]``, in the order they were placed;
    piece ``p`` is tokens ``starts[p, k]:stops[p, k]`` of key ``k`` of sequence ``sequences[p]``
    (its position in the epoch's order).
    """

    offsets: Int64Array
    sequences: Int64Array
    starts: Int64Array
    stops: Int64Array

    def __post_init__(self) -> None:
        pieces = len(self.sequences)
        if (
            self.offsets.ndim != 1
            or len(self.offsets) < 1
            or self.offsets[0] != 0
            or self.offsets[-1] != pieces
        ):
            raise ValueError(f"offsets must run from 0 to the {pieces} pieces")
        if self.starts.shape != self.stops.shape or self.starts.shape[:1] != (pieces,):
            raise ValueError(f"starts {self.starts.shape} and stops {self.stops.shape} must be pieces x keys")

    @property
    def count(self) -> int:
        """Groups in the epoch."""
        return len(self.offsets) - 1

    @property
    def sizes(self) -> Int64Array:
        """Pieces in each group."""
        return np.diff(self.offsets)

    def tokens(self) -> Int64Array:
        """Tokens of each key in all groups together."""
        return (self.stops - self.starts).sum(axis=0)  # type: ignore[no-any-return]

    def pieces(self, groups: npt.ArrayLike) -> tuple[Int64Array, Int64Array, Int64Array, Int64Array]:
        """The pieces of ``groups``, group after group: for each, the index in ``groups`` of its
        group, its sequence, its starts and its stops."""
        chosen = np.asarray(groups, dtype=np.int64)
        first = self.offsets[chosen]
        counts = self.offsets[chosen + 1] - first
        owner = np.repeat(np.arange(len(chosen), dtype=np.int64), counts)
        before = np.cumsum(counts) - counts
        index = np.repeat(first - before, counts) + np.arange(int(counts.sum()), dtype=np.int64)
        return owner, self.sequences[index], self.starts[index], self.stops[index]


def whole_sequences(offsets: Int64Array, sequences: Int64Array, lengths: Int64Array) -> Groups:
    """Groups whose pieces are whole sequences; ``lengths`` holds every sequence's (keys) lengths."""
    ends = lengths[sequences]
    return Groups(offsets, sequences, np.zeros_like(ends), ends)
