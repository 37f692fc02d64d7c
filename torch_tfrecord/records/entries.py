"""Reading records by index entry: ``(offset, framed_size)`` rows, in any order.

Neighbouring entries are read together (one request per run of back-to-back records); every
record is checked against its entry, so an index that no longer describes its file is a
:class:`StaleIndexError`, never wrong data. :func:`read_entries` reads through a stream (for
:func:`torch_tfrecord.read_records`); :func:`read_entries_at` with positional reads or a remote
file's ranged reads (the datasets' random-access path).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import BinaryIO, Protocol

import numpy as np
import numpy.typing as npt

from ..errors import CorruptRecordError, StaleIndexError, TFRecordError
from .framing import FRAME_OVERHEAD, HEADER_SIZE, crc32c
from .io import StorageOptions, file_size, open_records_stream
from .scan import FOOTER, HEADER, Span, length_crc_error, masked, scan

__all__ = ["RangeSource", "as_entries", "entry_numbers", "read_entries", "read_entries_at", "run_starts"]

_INT64_MAX = np.iinfo(np.int64).max


def run_starts(entries: npt.NDArray[np.int64], numbers: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Where each run of back-to-back, consecutively numbered entries begins (the first at 0),
    and ``len(entries)`` at the end: the runs an index read reads with one request each."""
    n = len(entries)
    if n == 0:
        return np.zeros(1, dtype=np.int64)
    offsets = entries[:, 0]
    ends = offsets + entries[:, 1]
    breaks = np.flatnonzero((offsets[1:] != ends[:-1]) | (numbers[1:] != numbers[:-1] + 1)) + 1
    return np.concatenate([[0], breaks, [n]]).astype(np.int64)


def as_entries(entries: Sequence[tuple[int, int]] | npt.ArrayLike, path: str) -> npt.NDArray[np.int64]:
    """Index rows as an ``(n, 2)`` int64 array; an entry no record can have is a StaleIndexError."""
    array_ = np.asarray(entries, dtype=np.int64)
    if array_.size == 0:
        return array_.reshape(0, 2)
    if array_.ndim != 2 or array_.shape[1] != 2:
        raise ValueError(f"entries must be (offset, framed_size) pairs, got shape {array_.shape}")
    offsets, sizes = array_[:, 0], array_[:, 1]
    # offset + size must not pass int64's end either: that would wrap to a "valid" small end.
    impossible = (offsets < 0) | (sizes < FRAME_OVERHEAD) | (offsets > _INT64_MAX - sizes)
    if impossible.any():
        bad = int(np.flatnonzero(impossible)[0])
        raise StaleIndexError(
            f"index entry {bad} {tuple(array_[bad].tolist())} for {path!r} is impossible: offsets "
            f"are >= 0, framed sizes >= {FRAME_OVERHEAD}, and a record ends before byte 2**63"
        )
    return array_


def entry_numbers(
    table: npt.NDArray[np.int64], record_numbers: Sequence[int] | npt.ArrayLike | None
) -> npt.NDArray[np.int64]:
    """The record number of each entry: ``record_numbers``, by default each entry's position."""
    numbers = (
        np.arange(len(table), dtype=np.int64)
        if record_numbers is None
        else np.asarray(record_numbers, dtype=np.int64)
    )
    if len(numbers) != len(table):
        raise ValueError(f"{len(numbers)} record_numbers for {len(table)} entries")
    return numbers


def read_entries(
    path: str,
    entries: Sequence[tuple[int, int]] | npt.ArrayLike,
    record_numbers: Sequence[int] | npt.ArrayLike | None,
    verify_crc: bool,
    on_skip: Callable[[TFRecordError], None] | None,
    storage_options: StorageOptions,
) -> Iterator[bytes]:
    """Yields the payloads of the records at ``entries``, in their order, through one stream.

    A damaged record raises, or, given ``on_skip``, is handed to it and passed over (an index
    read knows where the next record starts).
    """
    table = as_entries(entries, path)
    numbers = entry_numbers(table, record_numbers)
    size = file_size(path, storage_options)
    with open_records_stream(path, None, storage_options) as stream:
        for first, stop in itertools.pairwise(run_starts(table, numbers).tolist()):
            while first < stop:
                try:
                    for payload in _read_run(stream, path, size, table, numbers, first, stop, verify_crc):
                        yield payload
                        first += 1
                except TFRecordError as error:
                    if on_skip is None:
                        raise
                    on_skip(error)
                    first += 1


def _read_run(
    stream: BinaryIO,
    path: str,
    size: int,
    table: npt.NDArray[np.int64],
    numbers: npt.NDArray[np.int64],
    first: int,
    stop: int,
    verify_crc: bool,
) -> Iterator[bytes]:
    """Reads entries ``first..stop-1``, which lie back to back in the file."""
    start = int(table[first, 0])
    run_end = int(table[stop - 1, 0] + table[stop - 1, 1])
    if run_end > size:
        bad = first + int(np.flatnonzero(table[first:stop, 0] + table[first:stop, 1] > size)[0])
        raise _past_end_error(path, size, table, numbers, bad)
    stream.seek(start)
    # The span may read up to the file's end, so that a record longer than its entry is
    # reported as a stale index rather than as a truncated file.
    span = Span(path, start, run_end, size, first_record=int(numbers[first]))
    position = first
    for payload in scan(stream, span, verify_crc):
        framed = len(payload) + FRAME_OVERHEAD
        if framed != table[position, 1]:
            raise _size_mismatch_error(
                path, int(table[position, 0]), int(table[position, 1]), int(numbers[position]), framed
            )
        yield payload
        position += 1


class RangeSource(Protocol):
    """Reads byte ranges of one file: a :class:`~torch_tfrecord.records.shard_access.OpenShard`, or a
    remote file (:class:`~torch_tfrecord.records.remote.RemoteFile`)."""

    def read_ranges(self, starts: Sequence[int], sizes: Sequence[int]) -> list[bytes]: ...


def read_entries_at(
    source: int | RangeSource,
    path: str,
    size: int,
    entries: npt.NDArray[np.int64],
    record_numbers: npt.NDArray[np.int64],
    *,
    verify_crc: bool = True,
) -> list[bytes]:
    """Reads index entries from an open uncompressed file with positional reads.

    The random-access path of the datasets: no seek state (safe to share a descriptor), one
    ``pread`` per run of back-to-back entries, bounded by the entries themselves (the caller
    reads a batch at a time). A remote file gets all runs in one call, which merges
    neighbouring runs into one request and sends the requests concurrently.

    Args:
        source: an open file descriptor of ``path``, or a remote file's range reader.
        path: the file's name, for error messages.
        size: the file's size; an entry past it is a stale index.
        entries: ``(offset, framed_size)`` rows, in the order wanted.
        record_numbers: the record number of each entry in its file.
        verify_crc: check both CRCs of every record.

    Returns:
        The payloads, in the order of ``entries``.

    Raises:
        StaleIndexError: an entry does not match the record at its offset.
        CorruptRecordError: a CRC mismatch.
    """
    payloads: list[bytes] = []
    ends = entries[:, 0] + entries[:, 1]
    if len(entries) and int(ends.max()) > size:
        bad = int(np.flatnonzero(ends > size)[0])
        raise _past_end_error(path, size, entries, record_numbers, bad)
    # Plain Python ints from here: numpy scalar access would cost more than the read itself.
    offsets, framed_sizes, numbers = entries[:, 0].tolist(), entries[:, 1].tolist(), record_numbers.tolist()
    unpack_header, unpack_footer = HEADER.unpack_from, FOOTER.unpack_from
    runs = [0, *(np.flatnonzero((entries[1:, 0] != ends[:-1]) | (np.diff(record_numbers) != 1)) + 1).tolist()]
    bounds = list(itertools.pairwise([*runs, len(offsets)] if offsets else []))
    run_starts = [offsets[first] for first, _ in bounds]
    run_sizes = [offsets[stop - 1] + framed_sizes[stop - 1] - offsets[first] for first, stop in bounds]
    if isinstance(source, int):
        buffers: Iterable[bytes] = (os.pread(source, n, at) for at, n in zip(run_starts, run_sizes))
    else:
        buffers = source.read_ranges(run_starts, run_sizes)
    for (first, stop), start, run_size, buffer in zip(bounds, run_starts, run_sizes, buffers, strict=True):
        if len(buffer) != run_size:
            raise StaleIndexError(
                f"{path!r} ended at byte {start + len(buffer)} while reading records "
                f"{numbers[first]}..{numbers[stop - 1]}: it shrank since it was indexed"
            )
        position = 0
        for row in range(first, stop):
            length, length_crc = unpack_header(buffer, position)
            framed = framed_sizes[row]
            end = position + framed
            payload = buffer[position + HEADER_SIZE : end - 4]
            if length + FRAME_OVERHEAD != framed or (
                verify_crc
                and (
                    masked(crc32c(buffer[position : position + 8])) != length_crc
                    or masked(crc32c(payload)) != unpack_footer(buffer, end - 4)[0]
                )
            ):
                raise _entry_error(
                    path, size, buffer, position, start + position, framed, numbers[row], verify_crc
                )
            payloads.append(payload)
            position = end
    return payloads


def _past_end_error(
    path: str, size: int, entries: npt.NDArray[np.int64], numbers: npt.NDArray[np.int64], bad: int
) -> StaleIndexError:
    return StaleIndexError(
        f"index entry {tuple(entries[bad].tolist())} for record {numbers[bad]} runs past the end "
        f"of {path!r} ({size} bytes): the index does not describe this file"
    )


def _size_mismatch_error(path: str, offset: int, framed: int, record: int, found: int) -> StaleIndexError:
    return StaleIndexError(
        f"index entry ({offset}, {framed}) for record {record} of {path!r} says {framed} framed bytes, "
        f"but the record at that offset has {found}: the index does not describe this file"
    )


def _entry_error(
    path: str,
    size: int,
    buffer: bytes,
    position: int,
    offset: int,
    framed: int,
    record: int,
    verify_crc: bool,
) -> TFRecordError:
    """What is wrong with the record at ``offset`` that its index entry says is ``framed`` bytes."""
    span = Span(path, offset, None, size, first_record=record)
    length = HEADER.unpack_from(buffer, position)[0]
    if verify_crc and (error := length_crc_error(span, buffer, position, offset, 0)) is not None:
        return error
    if length + FRAME_OVERHEAD != framed:
        return _size_mismatch_error(path, offset, framed, record, length + FRAME_OVERHEAD)
    payload = buffer[position + HEADER_SIZE : position + framed - 4]
    (stored,) = FOOTER.unpack_from(buffer, position + framed - 4)
    return CorruptRecordError(
        f"data CRC mismatch in {span.where(offset, 0)}: stored 0x{stored:08x}, "
        f"computed 0x{masked(crc32c(payload)):08x}",
        path=path,
        offset=offset,
        record=record,
    )
