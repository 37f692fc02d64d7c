"""A GZIP / ZLIB shard read by ranges of its uncompressed stream, through seek points.

A :class:`CompressedShard` keeps the recently inflated 1 MiB segments of its shard, so a run of
records read in order (``shuffle=False``, ``"shards"``) or a block shuffle's window is inflated
once, whatever order its records are asked for in.
"""

from __future__ import annotations

import atexit
import itertools
import os
import threading
import weakref
import zlib
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ...errors import CorruptRecordError, TruncatedRecordError
from ...support import extension as _extension
from ..inflating import InflatingReader
from ..io import StorageOptions, open_binary
from .index import CompressedIndex
from .inflate import SEGMENT, error_text, has_rapidgzip, open_inflater

__all__ = ["CompressedShard"]

_MIN_CACHE = 2 * SEGMENT
# Runs of ranges in one segment copied by one numpy gather rather than a slice each: at least
# this many, of fewer bytes on average than _GATHER_BELOW (the gather costs a few ns a byte, a
# slice about 0.4 us: the gather pays only for tiny scattered records).
_GATHER_FROM = 32
_GATHER_BELOW = 64
_ZLIB_CHECKPOINT = SEGMENT
"""Uncompressed bytes between the in-memory checkpoints of a shard inflated with Python's zlib
(about 40 KiB each: 4% of the stream inflated so far). 4 MiB apart, a block shuffle of 8,192
records read 0.39 times as fast as through rapidgzip's seek points; 1 MiB apart, as fast
(benchmarks/bench_compressed.py --plain-install)."""


# Open inflaters of this process. rapidgzip runs threads: one still open when the interpreter
# ends aborts it, and one copied into a forked child has lost them; a zlib one's file offset
# would be shared with the child. So all are closed at exit and before a fork (they reopen, from
# a seek point or byte 0, on their next read).
_OPEN: weakref.WeakSet[CompressedShard] = weakref.WeakSet()
_OPEN_LOCK = threading.Lock()


def _close_all() -> None:
    with _OPEN_LOCK:
        shards = list(_OPEN)
    for shard in shards:
        shard.close()


atexit.register(_close_all)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_close_all)


class _ZlibInflater:
    """The uncompressed stream through Python's zlib (no seek points, or no rapidgzip): read in
    order, with a checkpoint of the inflater every :data:`_ZLIB_CHECKPOINT` bytes on the way, so
    that a seek starts from the nearest checkpoint before its target, never from byte 0 twice."""

    def __init__(self, path: str, compression: str, storage_options: StorageOptions) -> None:
        self._reader = InflatingReader(open_binary(path, storage_options), compression)
        self._checkpoints = [self._reader.checkpoint()]  # by position, one per _ZLIB_CHECKPOINT bytes
        self.inflated = 0  # uncompressed bytes produced, seeks included

    def tell(self) -> int:
        return self._reader.position

    def seek(self, offset: int) -> None:
        nearest = self._checkpoints[min(offset // _ZLIB_CHECKPOINT, len(self._checkpoints) - 1)]
        if not nearest.position <= self.tell() <= offset:
            self._reader.restore(nearest)
        while self.tell() < offset:
            if not self.read(min(offset - self.tell(), SEGMENT)):
                break

    def read(self, size: int) -> bytes:
        pieces = []
        wanted = size
        while wanted > 0:
            piece = self._reader.read(min(wanted, _ZLIB_CHECKPOINT - self.tell() % _ZLIB_CHECKPOINT))
            if not piece:
                break
            pieces.append(piece)
            wanted -= len(piece)
            self.inflated += len(piece)
            if self.tell() == len(self._checkpoints) * _ZLIB_CHECKPOINT:
                self._checkpoints.append(self._reader.checkpoint())
        return b"".join(pieces)

    def close(self) -> None:
        self._reader.close()


def _spans(starts: npt.NDArray[np.int64], lengths: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """The indices ``starts[0] .. starts[0] + lengths[0] - 1, starts[1] ..`` in one array."""
    total = int(lengths.sum())
    steps = np.ones(total, dtype=np.int64)
    begins = np.concatenate([[0], np.cumsum(lengths[:-1])])
    steps[0] = starts[0]
    steps[begins[1:]] = starts[1:] - (starts[:-1] + lengths[:-1] - 1)
    return np.cumsum(steps)


class CompressedShard:
    """Byte ranges of one compressed shard's uncompressed stream, read through seek points.

    A :class:`~torch_tfrecord.records.entries.RangeSource`: the datasets read records from it as from a
    remote file. Recently inflated segments are kept (``cache_bytes``), so ranges read in order
    or within a window inflate each segment once.

    Args:
        path: the compressed file.
        index: its compressed index.
        storage_options: for the fsspec file system of URLs.
        cache_bytes: inflated bytes kept (at least two segments).
    """

    def __init__(
        self,
        path: str,
        index: CompressedIndex,
        storage_options: StorageOptions = None,
        cache_bytes: int = _MIN_CACHE,
    ) -> None:
        self.path = path
        self.index = index
        self.storage_options = storage_options
        self.cache_bytes = cache_bytes
        self.segments_inflated = 0
        self._file: Any = None
        self._segments: OrderedDict[int, bytes] = OrderedDict()
        self._lock = threading.Lock()

    def read_ranges(self, starts: Sequence[int], sizes: Sequence[int]) -> list[bytes]:
        """The bytes of each ``[start, start + size)`` of the uncompressed stream.

        Raises:
            CorruptRecordError, TruncatedRecordError: the stream is damaged where a range lies,
                naming the record that starts there.
        """
        with self._lock:
            return [self._read(start, size) for start, size in zip(starts, sizes, strict=True)]

    def read_into(
        self, starts: npt.NDArray[np.int64], sizes: npt.NDArray[np.int64], buffer: bytearray, at: int
    ) -> None:
        """Copies the ranges into ``buffer`` back to back from ``at``, segment by segment: ranges
        that follow one another in the stream (records read in order) are copied as one slice,
        scattered ones (a block shuffle's batch) a slice each, or by one numpy gather when a
        segment holds many tiny ones.

        Raises:
            CorruptRecordError, TruncatedRecordError: as :meth:`read_ranges`.
        """
        if not len(starts):
            return
        with self._lock:
            out = np.frombuffer(buffer, dtype=np.uint8)
            targets = at + np.concatenate([[0], np.cumsum(sizes[:-1])])
            first, last = starts // SEGMENT, (starts + sizes - 1) // SEGMENT
            inside = np.flatnonzero((first == last) & (sizes > 0))  # within one segment
            if len(inside):
                self._copy_runs(starts[inside], sizes[inside], targets[inside], first[inside], inside, buffer)
            for i in np.flatnonzero((first != last) & (sizes > 0)).tolist():  # across a segment end
                target, size = int(targets[i]), int(sizes[i])
                out[target : target + size] = np.frombuffer(self._read(int(starts[i]), size), dtype=np.uint8)

    def _copy_runs(
        self,
        starts: npt.NDArray[np.int64],
        sizes: npt.NDArray[np.int64],
        targets: npt.NDArray[np.int64],
        numbers: npt.NDArray[np.int64],
        positions: npt.NDArray[np.int64],
        buffer: bytearray,
    ) -> None:
        """Copies ranges that each lie in one segment (``numbers``) to ``targets`` of ``buffer``,
        one segment at a time: with the compiled extension one call per segment (no GIL);
        else a run (ranges next to each other in the batch, ``positions``, and in the same
        segment's stream) is one slice, and many tiny runs take a numpy gather.
        """
        extension = _extension.for_reading()
        if extension is not None:
            order = np.argsort(numbers, kind="stable")
            sorted_numbers = numbers[order]
            bounds = [0, *(np.flatnonzero(np.diff(sorted_numbers)) + 1).tolist(), len(order)]
            sources, lengths, to = (starts - numbers * SEGMENT)[order], sizes[order], targets[order]
            for begin, end in itertools.pairwise(bounds):
                number = int(sorted_numbers[begin])
                data = self._segment(number, number * SEGMENT + int(sources[begin]))
                extension.copy_ranges(data, sources[begin:end], lengths[begin:end], buffer, to[begin:end])
            return
        joined = (
            (positions[1:] == positions[:-1] + 1)
            & (numbers[1:] == numbers[:-1])
            & (starts[1:] == starts[:-1] + sizes[:-1])
        )
        breaks = np.flatnonzero(~joined) + 1
        heads = np.concatenate([[0], breaks])
        tails = np.concatenate([breaks, [len(starts)]]) - 1
        run_bytes = starts[tails] + sizes[tails] - starts[heads]
        if len(heads) >= _GATHER_FROM and int(run_bytes.sum()) < _GATHER_BELOW * len(heads):
            out = np.frombuffer(buffer, dtype=np.uint8)
            for number in np.unique(numbers).tolist():
                pick = np.flatnonzero(numbers == number)
                segment = np.frombuffer(self._segment(number, int(starts[pick[0]])), dtype=np.uint8)
                lengths, sources = sizes[pick], starts[pick] - number * SEGMENT
                out[_spans(targets[pick], lengths)] = segment[_spans(sources, lengths)]
            return
        order = np.argsort(numbers[heads], kind="stable")
        view, current, source = memoryview(buffer), -1, memoryview(b"")
        for number, begin, size, target in zip(
            numbers[heads][order].tolist(),
            starts[heads][order].tolist(),
            run_bytes[order].tolist(),
            targets[heads][order].tolist(),
            strict=True,
        ):
            if number != current:
                source, current = memoryview(self._segment(number, begin)), number
            offset = begin - number * SEGMENT
            view[target : target + size] = source[offset : offset + size]

    def _read(self, start: int, size: int) -> bytes:
        end = start + size
        if size <= 0:
            return b""
        first, last = start // SEGMENT, (end - 1) // SEGMENT
        if first == last:
            segment = self._segment(first, start)
            return segment[start - first * SEGMENT : end - first * SEGMENT]
        pieces = [self._segment(number, start) for number in range(first, last + 1)]
        joined = b"".join(pieces)
        return joined[start - first * SEGMENT : end - first * SEGMENT]

    def _segment(self, number: int, wanted: int) -> bytes:
        segment = self._segments.get(number)
        if segment is not None:
            self._segments.move_to_end(number)
            return segment
        begin = number * SEGMENT
        length = min(SEGMENT, self.index.uncompressed_size - begin)
        try:
            if self._file is None:
                if self.index.seek_points and has_rapidgzip():
                    self._file = open_inflater(
                        self.path, self.storage_options, self.index.seek_points, self.index.spacing
                    )
                else:  # a plain install, or an index without seek points (a damaged file's)
                    self._file = _ZlibInflater(self.path, self.index.compression, self.storage_options)
                with _OPEN_LOCK:
                    _OPEN.add(self)
            if self._file.tell() != begin:
                self._file.seek(begin)
            segment = bytes(self._file.read(length))
        except (RuntimeError, ValueError, OSError, EOFError, zlib.error) as error:
            self._drop_file()
            raise self._damage(
                wanted, f"the {self.index.compression.upper()} stream is damaged: {error_text(error)}"
            ) from error
        if len(segment) != length:
            self._drop_file()
            raise self._damage(
                wanted, f"the stream ends at uncompressed byte {begin + len(segment)}", truncated=True
            )
        self.segments_inflated += 1
        self._segments[number] = segment
        budget = max(self.cache_bytes, _MIN_CACHE)
        while len(self._segments) * SEGMENT > budget:
            self._segments.popitem(last=False)
        return segment

    def _damage(self, offset: int, what: str, truncated: bool = False) -> CorruptRecordError:
        offsets = self.index.table[:, 0]
        record = max(0, int(np.searchsorted(offsets, offset, side="right")) - 1)
        kind = TruncatedRecordError if truncated else CorruptRecordError
        return kind(
            f"{self.path!r} cannot be read at record {record} (uncompressed byte {offset}): {what}",
            path=self.path,
            offset=offset,
            record=record,
        )

    def _drop_file(self) -> None:
        file, self._file = self._file, None
        if file is not None:
            try:
                file.close()
            except (RuntimeError, ValueError, OSError, EOFError, zlib.error):
                pass

    def close(self) -> None:
        """Closes the inflater and lets the cached segments go (a later read reopens)."""
        with self._lock:
            self._drop_file()
            self._segments.clear()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.update(_file=None, _segments=OrderedDict(), _lock=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
