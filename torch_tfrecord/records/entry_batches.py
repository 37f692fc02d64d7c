"""Reading index entries of a local file a batch at a time: each batch's records gathered into one
buffer and checked in two native calls (records/_gather.c, records/_framing.c), no Python per record.

The fast path of :func:`torch_tfrecord.read_records` with ``entries``: it yields what
:func:`~torch_tfrecord.records.entries.read_entries` would, and hands the entries from the first one
it cannot take (a damaged record, an entry that does not describe its record, one past the file's
end) to that careful path, which raises or skips with the error that names the file, offset and
record.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable, Iterator, Sequence
from types import ModuleType

import numpy as np
import numpy.typing as npt

from ..errors import SourceNotFoundError, TFRecordError
from .entries import as_entries, entry_numbers, read_entries, run_starts
from .gather import COALESCE_GAP, Gathered, gather
from .io import StorageOptions, file_size, local_path

__all__ = ["read_entries_gathered"]

# A batch: this many entries at most, and this many framed bytes at most (at least one entry).
_BATCH_ENTRIES = 1024
_BATCH_BYTES = 16 << 20
# Records copied from a fresh mapping of the file cost its page faults and its unmapping: they
# pay where there are many records and at least one for every two pages of the file, else
# positional reads are faster (shuffled, one shard of 20,000 records of ~50 B / ~4 KB, us per
# record mapped / preads: 64 of them 9.6 / 5.8 and 34 / 9.6; 1,024: 0.6-1.7 / 1.7-2.0 and
# 20 / 5.7-8.0; all 20,000: 0.8 / 1.4 and 6.0 / 9.0).
_MAPPED_MIN_ENTRIES = 1024


def read_entries_gathered(
    extension: ModuleType,
    path: str,
    entries: Sequence[tuple[int, int]] | npt.ArrayLike,
    record_numbers: Sequence[int] | npt.ArrayLike | None,
    verify_crc: bool,
    on_skip: Callable[[TFRecordError], None] | None,
    storage_options: StorageOptions,
) -> Iterator[bytes]:
    """Yields the payloads of the records at ``entries`` of the local, uncompressed file ``path``, in
    their order: :func:`~torch_tfrecord.records.entries.read_entries`'s records and errors, read a
    batch at a time by the compiled ``extension``."""
    table = as_entries(entries, path)
    numbers = entry_numbers(table, record_numbers)
    size = file_size(path, storage_options)
    ends = table[:, 0] + table[:, 1]
    fast_end = len(table)
    if fast_end and int(ends.max()) > size:
        # A run with an entry past the file's end is the careful path's from its start: it
        # reports that entry before any record of the run.
        runs = run_starts(table, numbers)
        past = int(np.argmax(ends > size))
        fast_end = int(runs[np.searchsorted(runs, past, side="right") - 1])
    held = np.cumsum(table[:, 1])  # the framed bytes of the entries up to each
    position = 0
    if fast_end:
        mapped = fast_end >= _MAPPED_MIN_ENTRIES and 2 * mmap.PAGESIZE * fast_end >= size
        reader = _BatchReader(extension, path, size, mapped=mapped)
        try:
            while position < fast_end:
                stop = _batch_end(held, position, fast_end)
                payloads = reader.read(table[position:stop], verify_crc)
                yield from payloads
                position += len(payloads)
                if position < stop:
                    if on_skip is None or reader.failed:
                        break  # the careful path raises here, or reads the rest (a file that changed)
                    # The record it could not take, the careful way: skipped, with its error.
                    yield from read_entries(
                        path,
                        table[position : position + 1],
                        numbers[position : position + 1],
                        verify_crc,
                        on_skip,
                        storage_options,
                    )
                    position += 1
        finally:
            reader.close()
    if position < len(table):
        yield from read_entries(
            path, table[position:], numbers[position:], verify_crc, on_skip, storage_options
        )


def _batch_end(held: npt.NDArray[np.int64], start: int, stop: int) -> int:
    """The end of the batch from ``start``: at most _BATCH_ENTRIES entries and _BATCH_BYTES bytes
    (``held``: the cumulative framed sizes of the entries), at least one entry."""
    stop = min(stop, start + _BATCH_ENTRIES)
    before = int(held[start - 1]) if start else 0
    if int(held[stop - 1]) - before <= _BATCH_BYTES:
        return stop
    return start + max(1, int(np.searchsorted(held[start:stop], before + _BATCH_BYTES, side="right")))


class _BatchReader:
    """Gathers batches of one open file's records into a reused buffer and takes their payloads."""

    def __init__(self, extension: ModuleType, path: str, size: int, *, mapped: bool) -> None:
        self.extension = extension
        try:  # a bare descriptor: a file object costs more than the read of a small batch
            fd = os.open(local_path(path), os.O_RDONLY)  # (not inherited by children: PEP 446)
        except FileNotFoundError:
            raise SourceNotFoundError(f"no such file: {path!r}") from None
        self.fd = fd
        self.failed = False  # a batch the gather could not read (a file cut shorter, a failed read)
        # Records copied from a mapping: a shuffled batch costs a copy per record, not a syscall.
        self.mapping: mmap.mmap | None = None
        if size and mapped:
            try:
                self.mapping = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
            except (OSError, ValueError):  # a file that cannot be mapped: positional reads
                self.mapping = None
        # Copies from the mapping take only the records; preads read through short gaps between
        # them (one syscall for neighbours), so the buffer then holds the gaps too.
        self.gap = 0 if self.mapping is not None else COALESCE_GAP
        self.buffer = bytearray()
        self.bounds = np.zeros(2, dtype=np.int64)
        self.fds = np.array([fd], dtype=np.int64)
        self.sizes = np.array([size], dtype=np.int64)

    def read(self, batch: npt.NDArray[np.int64], verify_crc: bool) -> list[bytes]:
        """The payloads of the batch's records, up to the first it cannot take."""
        # The gather reads in id order, which must be file order: ids are places in the sorted table.
        order = np.argsort(batch[:, 0], kind="stable")
        ids = np.empty(len(batch), dtype=np.int64)
        ids[order] = np.arange(len(batch), dtype=np.int64)
        self.bounds[1] = len(batch)
        starts = np.empty(len(batch), dtype=np.int64)
        framed = np.empty(len(batch), dtype=np.int64)
        needed = int(batch[:, 1].sum())  # (more when the reads take the bytes between records too)
        if len(self.buffer) < needed:
            self.buffer = bytearray(needed)
        while True:
            status, value = gather(
                ids,
                self.bounds,
                [batch[order]],
                self.fds,
                self.sizes,
                [self.mapping],
                self.buffer,
                starts,
                framed,
                self.gap,
            )
            if status != Gathered.GROW:
                break
            self.buffer = bytearray(value)
        if status != Gathered.DONE:
            self.failed = True
            return []
        payloads: list[bytes] = self.extension.unframe(self.buffer, starts, framed, verify_crc)[0]
        return payloads

    def close(self) -> None:
        if self.mapping is not None:
            self.mapping.close()
            self.mapping = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
