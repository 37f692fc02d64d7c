"""Sets of record ids, kept compact: as sorted runs, or as a bitmap where runs would be larger.

A selection of records is a set of ids in ``[0, size)``. A few runs (whole shards, ranges) cost
a few numbers; a scattered set (a predicate's matches, a random fraction) costs one bit per
record of the data, whatever the fraction kept. Both answer the two questions a dataset asks of
its selection, vectorised for a batch of ids at once: the ``i``-th member (:meth:`IdSet.select`,
from a place in the selection to a record of the files) and how many members lie below an id
(:meth:`IdSet.rank`). Pure numpy: nothing here reads a file.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator

import numpy as np
import numpy.typing as npt

__all__ = ["BitSet", "IdSet", "IdSetParts", "RunSet", "compact"]

Int64Array = npt.NDArray[np.int64]
Bits = npt.NDArray[np.uint8]
_RUN_BYTES = 24  # a run in memory: its start, its stop and the members before it (int64 each)
_BIT_BYTES = 0.25  # a record in a bitmap: its bit, and its word's share of the counts before it
_CHUNK = 1 << 24  # records handled at once when a set is unpacked (16 MiB of bools)
_BYTE_COUNTS = np.array([bin(value).count("1") for value in range(256)], dtype=np.uint8)
# _BIT_OF[byte, k]: the place of the k-th set bit of a byte (little bit order).
_BIT_OF = np.zeros((256, 8), dtype=np.int64)
for _value in range(256):
    _set = [bit for bit in range(8) if _value >> bit & 1]
    _BIT_OF[_value, : len(_set)] = _set


def _popcount(words: npt.NDArray[np.uint64]) -> Int64Array:
    """Set bits of each 64-bit word."""
    if hasattr(np, "bitwise_count"):  # numpy >= 2.0
        counted: Int64Array = np.bitwise_count(words).astype(np.int64)
        return counted
    per_byte = _BYTE_COUNTS[words.view(np.uint8).reshape(-1, 8)]
    summed: Int64Array = per_byte.sum(axis=1, dtype=np.int64)
    return summed


class IdSet(ABC):
    """A set of ids in ``[0, size)``."""

    size: int

    @abstractmethod
    def __len__(self) -> int:
        """Members."""

    @abstractmethod
    def select(self, positions: npt.ArrayLike) -> Int64Array:
        """The members at ``positions`` of the sorted members (each in ``[0, len)``)."""

    @abstractmethod
    def rank(self, ids: npt.ArrayLike) -> Int64Array:
        """How many members are below each id (ids in ``[0, size]``)."""

    @abstractmethod
    def runs(self, low: int, high: int) -> tuple[Int64Array, Int64Array]:
        """``(starts, stops)`` of the members in ``[low, high)``, as maximal runs, clipped to it."""

    @abstractmethod
    def mask(self, low: int, high: int) -> npt.NDArray[np.bool_]:
        """Membership of each id in ``[low, high)``."""

    @property
    @abstractmethod
    def nbytes(self) -> int:
        """Memory the set holds."""

    def ids(self) -> Int64Array:
        """Every member, sorted (one int64 each)."""
        return self.select(np.arange(len(self), dtype=np.int64))

    def count_runs(self, low: int, high: int) -> int:
        """Maximal runs of members in ``[low, high)``."""
        return len(self.runs(low, high)[0])

    def _check_positions(self, positions: npt.ArrayLike) -> Int64Array:
        array = np.asarray(positions, dtype=np.int64)
        if array.size and (array.min() < 0 or array.max() >= len(self)):
            raise IndexError(f"positions must lie in [0, {len(self)})")
        return array


class RunSet(IdSet):
    """Members as sorted, disjoint, non-adjacent runs ``[starts[i], stops[i])``."""

    def __init__(self, starts: npt.ArrayLike, stops: npt.ArrayLike, size: int) -> None:
        self.starts = np.ascontiguousarray(starts, dtype=np.int64)
        self.stops = np.ascontiguousarray(stops, dtype=np.int64)
        self.size = int(size)
        lengths = self.stops - self.starts
        if len(self.starts) != len(self.stops) or (lengths <= 0).any():
            raise ValueError("runs must be non-empty [start, stop) pairs")
        if len(self.starts) and (self.starts[0] < 0 or self.stops[-1] > self.size):
            raise ValueError(f"runs must lie in [0, {self.size})")
        if (self.starts[1:] <= self.stops[:-1]).any():
            raise ValueError("runs must be sorted, disjoint and not adjacent")
        self.before = np.zeros(len(lengths) + 1, dtype=np.int64)  # members before each run
        np.cumsum(lengths, out=self.before[1:])

    def __len__(self) -> int:
        return int(self.before[-1])

    def select(self, positions: npt.ArrayLike) -> Int64Array:
        array = self._check_positions(positions)
        run = np.searchsorted(self.before, array, side="right") - 1
        return self.starts[run] + (array - self.before[run])

    def rank(self, ids: npt.ArrayLike) -> Int64Array:
        array = np.asarray(ids, dtype=np.int64)
        if not len(self.starts):
            return np.zeros(array.shape, np.int64)
        run = np.searchsorted(self.starts, array, side="right") - 1
        inside = np.minimum(array - self.starts[run], self.stops[run] - self.starts[run])
        return np.where(run >= 0, self.before[np.maximum(run, 0)] + inside, 0)

    def runs(self, low: int, high: int) -> tuple[Int64Array, Int64Array]:
        first = int(np.searchsorted(self.stops, low, side="right"))
        last = int(np.searchsorted(self.starts, high, side="left"))
        return np.maximum(self.starts[first:last], low), np.minimum(self.stops[first:last], high)

    def ids(self) -> Int64Array:
        lengths = self.stops - self.starts
        return np.repeat(self.starts - self.before[:-1], lengths) + np.arange(len(self), dtype=np.int64)

    def mask(self, low: int, high: int) -> npt.NDArray[np.bool_]:
        out = np.zeros(high - low, dtype=bool)
        for start, stop in zip(*self.runs(low, high), strict=True):
            out[int(start) - low : int(stop) - low] = True
        return out

    @property
    def nbytes(self) -> int:
        return self.starts.nbytes + self.stops.nbytes + self.before.nbytes


class BitSet(IdSet):
    """Members as a bitmap (little bit order: id ``i`` is bit ``i % 8`` of byte ``i // 8``), with
    the count of members before each 64-bit word (for :meth:`select` and :meth:`rank`)."""

    def __init__(self, bits: npt.ArrayLike, size: int) -> None:
        self.size = int(size)
        words = -(-self.size // 64)
        padded = np.zeros(words * 8, dtype=np.uint8)
        given = np.asarray(bits, dtype=np.uint8).reshape(-1)
        if len(given) != -(-self.size // 8):
            raise ValueError(f"{len(given)} bytes of bits for {self.size} ids")
        padded[: len(given)] = given
        if self.size % 8 and len(given):  # bits past the end are not members
            padded[len(given) - 1] &= (1 << (self.size % 8)) - 1
        self.words = padded.view(np.uint64)
        counts = _popcount(self.words)
        self.before = np.zeros(words + 1, dtype=np.int64)
        np.cumsum(counts, out=self.before[1:])

    @property
    def bits(self) -> Bits:
        """The bitmap's bytes (``ceil(size / 8)``)."""
        return self.words.view(np.uint8)[: -(-self.size // 8)]

    def __len__(self) -> int:
        return int(self.before[-1])

    def select(self, positions: npt.ArrayLike) -> Int64Array:
        array = self._check_positions(positions)
        word = np.searchsorted(self.before, array, side="right") - 1
        wanted = array - self.before[word]  # the wanted-th set bit of its word
        octets = self.words[word].view(np.uint8).reshape(-1, 8)
        seen = np.cumsum(_BYTE_COUNTS[octets], axis=1, dtype=np.int64)  # set bits up to each byte
        byte = (seen <= wanted[:, None]).sum(axis=1)  # the byte that holds it
        rows = np.arange(len(array))
        before = np.where(byte > 0, seen[rows, np.maximum(byte - 1, 0)], 0)
        found: Int64Array = word * 64 + byte * 8 + _BIT_OF[octets[rows, byte], wanted - before]
        return found

    def rank(self, ids: npt.ArrayLike) -> Int64Array:
        array = np.asarray(ids, dtype=np.int64)
        word = np.minimum(array >> 6, len(self.words) - 1)
        if not len(self.words):
            return np.zeros(array.shape, np.int64)
        below = (array - word * 64).astype(np.uint64)  # 0..64
        shifted = (np.uint64(1) << np.minimum(below, np.uint64(63))) - np.uint64(1)
        low_bits = np.where(below >= 64, ~np.uint64(0), shifted)
        counted: Int64Array = self.before[word] + _popcount(self.words[word] & low_bits)
        return counted

    def runs(self, low: int, high: int) -> tuple[Int64Array, Int64Array]:
        starts, stops = [], []
        for first in range(low, high, _CHUNK):
            last = min(high, first + _CHUNK)
            padded = np.concatenate([[False], self.mask(first, last), [False]]).view(np.int8)
            edges = np.diff(padded)
            starts.append(np.flatnonzero(edges == 1) + first)
            stops.append(np.flatnonzero(edges == -1) + first)
        return _merge_runs(starts, stops)

    def mask(self, low: int, high: int) -> npt.NDArray[np.bool_]:
        if high <= low:
            return np.zeros(0, dtype=bool)
        first, last = low // 8, -(-high // 8)
        unpacked = np.unpackbits(self.words.view(np.uint8)[first:last], bitorder="little")
        return unpacked[low - first * 8 : high - first * 8].astype(bool)

    def ids(self) -> Int64Array:
        chunks = [np.flatnonzero(self.mask(low, high)) + low for low, high in _chunks(self.size)]
        return np.concatenate(chunks) if chunks else np.zeros(0, np.int64)

    def count_runs(self, low: int, high: int) -> int:
        return _runs_in_bits(self, low, high)

    @property
    def nbytes(self) -> int:
        return self.words.nbytes + self.before.nbytes


def _runs_in_bits(bits: BitSet, low: int, high: int) -> int:
    """Runs of members in ``[low, high)``: members whose id before is no member (or is ``low - 1``)."""
    total = 0
    for first in range(low, high, _CHUNK):
        last = min(high, first + _CHUNK)
        here = bits.mask(first, last)
        before = np.concatenate([[first > low and bool(bits.mask(first - 1, first)[0])], here[:-1]])
        total += int(np.count_nonzero(here & ~before))
    return total


def _merge_runs(starts: list[Int64Array], stops: list[Int64Array]) -> tuple[Int64Array, Int64Array]:
    """Runs given in order (pieces of one set), adjacent ones joined."""
    start = np.concatenate(starts) if starts else np.zeros(0, np.int64)
    stop = np.concatenate(stops) if stops else np.zeros(0, np.int64)
    if len(start) > 1:
        joined = np.flatnonzero(start[1:] == stop[:-1])  # a run that goes on where one stopped
        if len(joined):
            keep = np.ones(len(start), dtype=bool)
            keep[joined + 1] = False
            stop = np.delete(stop, joined)
            start = start[keep]
    return start.astype(np.int64), stop.astype(np.int64)


def compact(size: int, runs: int) -> bool:
    """Whether ``runs`` runs over ``size`` ids are kept as runs (else as a bitmap): whichever is smaller."""
    return runs * _RUN_BYTES <= size * _BIT_BYTES


class IdSetParts:
    """Builds an :class:`IdSet` over ``[0, size)`` from consecutive pieces (a shard's runs, a
    shard's bitmap or mask), given in order; :meth:`build` keeps it as runs or as a bitmap,
    whichever is smaller: the same set is always built the same way, however it was cut."""

    def __init__(self, size: int) -> None:
        self.size = int(size)
        self._at = 0  # where the next piece starts
        self._pieces: list[tuple[int, int, object]] = []  # (start, length, runs or bitmap)
        self._runs = 0  # runs of the whole set (one that goes on across pieces counts once)
        self._end = -1  # the id after the last member so far

    def add_runs(self, length: int, starts: npt.ArrayLike, stops: npt.ArrayLike) -> None:
        """The next ``length`` ids: members in ``[starts[i], stops[i])`` (relative to the piece)."""
        run_starts = np.asarray(starts, dtype=np.int64)
        run_stops = np.asarray(stops, dtype=np.int64)
        piece = RunSet(run_starts, run_stops, length)  # checks them
        self._add(length, piece, len(run_starts))

    def add_bits(self, length: int, bits: npt.ArrayLike) -> None:
        """The next ``length`` ids: members where ``bits`` (little bit order) has a 1."""
        piece = BitSet(bits, length)
        self._add(length, piece, piece.count_runs(0, length))

    def add_mask(self, mask: npt.ArrayLike) -> None:
        """The next ``len(mask)`` ids: members where ``mask`` is True."""
        array = np.asarray(mask, dtype=bool)
        self.add_bits(len(array), np.packbits(array, bitorder="little"))

    def _add(self, length: int, piece: IdSet, runs: int) -> None:
        if self._at + length > self.size:
            raise ValueError(f"pieces of {self._at + length} ids for a set over {self.size}")
        if len(piece):
            self._pieces.append((self._at, length, piece))
            first, last = (int(i) for i in piece.select([0, len(piece) - 1]))
            self._runs += runs - (self._at + first == self._end)
            self._end = self._at + last + 1
        self._at += length

    def build(self) -> IdSet:
        """The set (the pieces must cover ``[0, size)``)."""
        if self._at != self.size:
            raise ValueError(f"pieces of {self._at} ids for a set over {self.size}")
        if compact(self.size, self._runs):
            starts, stops = [], []
            for start, length, piece in self._pieces:
                assert isinstance(piece, IdSet)
                first, last = piece.runs(0, length)
                starts.append(first + start)
                stops.append(last + start)
            return RunSet(*_merge_runs(starts, stops), self.size)
        out = np.zeros(-(-self.size // 8), dtype=np.uint8)
        for at, length, piece in self._pieces:
            assert isinstance(piece, IdSet)
            for low, high in _chunks(length):
                _or_bits(out, at + low, piece.mask(low, high))
        return BitSet(out, self.size)


def _chunks(length: int) -> Iterator[tuple[int, int]]:
    for first in range(0, length, _CHUNK):
        yield first, min(length, first + _CHUNK)


def _or_bits(out: Bits, at: int, mask: npt.NDArray[np.bool_]) -> None:
    """Sets the bits of ``out`` from bit ``at`` where ``mask`` is True."""
    shift = at % 8
    packed = np.packbits(np.concatenate([np.zeros(shift, dtype=bool), mask]), bitorder="little")
    out[at // 8 : at // 8 + len(packed)] |= packed


def from_ids(ids: npt.ArrayLike, size: int) -> IdSet:
    """The set of ``ids`` (sorted or not; repeats count once), over ``[0, size)``.

    Raises:
        IndexError: an id outside ``[0, size)``.
    """
    array = np.unique(np.asarray(ids, dtype=np.int64))
    if array.size and (array[0] < 0 or array[-1] >= size):
        raise IndexError(f"record ids must lie in [0, {size}), got {int(array[0])}..{int(array[-1])}")
    breaks = np.flatnonzero(np.diff(array) != 1) + 1
    starts = array[np.concatenate([[0], breaks])] if array.size else array
    stops = array[np.concatenate([breaks - 1, [len(array) - 1]])] + 1 if array.size else array
    parts = IdSetParts(size)
    parts.add_runs(size, starts, stops)
    return parts.build()


def from_runs(starts: npt.ArrayLike, stops: npt.ArrayLike, size: int) -> IdSet:
    """The set of the runs ``[starts[i], stops[i])`` (sorted, disjoint; adjacent ones are joined)."""
    first, last = _merge_runs([np.asarray(starts, np.int64)], [np.asarray(stops, np.int64)])
    keep = last > first
    parts = IdSetParts(size)
    parts.add_runs(size, first[keep], last[keep])
    return parts.build()
