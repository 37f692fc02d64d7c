"""Record iteration: a whole file, a list of (offset, framed_size) index entries, or a byte range.

Files are read in large chunks and parsed in place; each payload is handed out as its own
``bytes`` (never a view of a buffer that is reused). Damage is reported with the file, the byte
offset and the record number, and is never returned as data.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import struct
import zlib
from array import array
from collections.abc import Iterable, Iterator, Sequence
from typing import BinaryIO, Literal, Protocol

import numpy as np
import numpy.typing as npt

from .errors import (
    CompressedIndexError,
    CorruptRecordError,
    StaleIndexError,
    TFRecordError,
    TruncatedRecordError,
)
from .framing import FRAME_OVERHEAD, HEADER_SIZE, MASK_DELTA, crc32c
from .io import (
    CompressionArg,
    PathLike,
    StorageOptions,
    file_size,
    open_records_stream,
    resolve_compression,
)

__all__ = ["OnError", "ReadStats", "read_entries_at", "read_framed_sizes", "read_records"]

logger = logging.getLogger(__name__)

OnError = Literal["raise", "skip"]

_CHUNK = 1 << 20
# Growth step while reading a record longer than a chunk from a stream of unknown size: memory
# only grows as bytes actually arrive, so a damaged length field cannot make us allocate 2**63.
_MAX_STEP = 64 << 20
_U32 = 0xFFFFFFFF
_HEADER = struct.Struct("<QI")
_FOOTER = struct.Struct("<I")


@dataclasses.dataclass
class ReadStats:
    """Counters a reader fills in; pass one as ``stats=`` to see what ``on_error="skip"`` skipped.

    Attributes:
        records: records returned.
        payload_bytes: bytes of payload returned.
        files_skipped: files abandoned after damage (sequential reads cannot resynchronise).
        records_skipped: single records skipped (index reads know where the next one starts).
        errors: the message of every error that was skipped.
    """

    records: int = 0
    payload_bytes: int = 0
    files_skipped: int = 0
    records_skipped: int = 0
    errors: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class _Span:
    """Where a scan runs: ``[start, end)`` of the record stream, and how records are numbered."""

    path: str
    start: int
    end: int | None  # stop before a record that begins at or after this offset
    limit: int | None  # no byte of any record may lie at or past this offset
    first_record: int | None  # number of the record at ``start``; None when unknown

    def where(self, offset: int, ordinal: int) -> str:
        if self.first_record is not None:
            return f"{self.path!r} at byte {offset} (record {self.first_record + ordinal})"
        return f"{self.path!r} at byte {offset} (record {ordinal} after byte {self.start})"

    def record_number(self, ordinal: int) -> int:
        return -1 if self.first_record is None else self.first_record + ordinal


def _masked(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + MASK_DELTA) & _U32


def _bad_length(span: _Span, buffer: bytes, position: int, offset: int, ordinal: int) -> TFRecordError:
    """The error for a record whose length runs past the end of the file or span."""
    length, stored = _HEADER.unpack_from(buffer, position)
    computed = _masked(crc32c(buffer[position : position + 8]))
    record = span.record_number(ordinal)
    if computed != stored:
        return CorruptRecordError(
            f"length CRC mismatch in {span.where(offset, ordinal)}: stored 0x{stored:08x}, "
            f"computed 0x{computed:08x} (length field reads {length})",
            path=span.path,
            offset=offset,
            record=record,
        )
    return TruncatedRecordError(
        f"file ends inside a record in {span.where(offset, ordinal)}: the header announces "
        f"{length} payload bytes ({length + FRAME_OVERHEAD} framed) but the file ends at byte "
        f"{span.limit}",
        path=span.path,
        offset=offset,
        record=record,
    )


def _scan(stream: BinaryIO, span: _Span, verify_crc: bool) -> Iterator[bytes]:
    """Yields the payloads of consecutive records read from ``stream``, positioned at ``span.start``."""
    unpack_header = _HEADER.unpack_from
    unpack_footer = _FOOTER.unpack_from
    end = span.end
    limit = span.limit
    buffer = b""
    base = span.start  # stream offset of buffer[0]
    position = 0
    ordinal = 0
    eof = False
    while True:
        available = len(buffer) - position
        if available < HEADER_SIZE:
            if end is not None and base + position >= end:
                return
            if not eof:
                buffer, base, position, eof = _refill(
                    stream, span, buffer, base, position, HEADER_SIZE, ordinal
                )
                continue
            if available == 0:
                return
            offset = base + position
            raise TruncatedRecordError(
                f"file ends inside a record header in {span.where(offset, ordinal)}: "
                f"{available} of {HEADER_SIZE} header bytes present",
                path=span.path,
                offset=offset,
                record=span.record_number(ordinal),
            )
        offset = base + position
        if end is not None and offset >= end:
            return
        length, length_crc = unpack_header(buffer, position)
        frame_end = position + length + FRAME_OVERHEAD
        if frame_end > len(buffer):
            if limit is not None and offset + length + FRAME_OVERHEAD > limit:
                raise _bad_length(span, buffer, position, offset, ordinal)
            if verify_crc:
                _check_length_crc(span, buffer, position, offset, ordinal)
            needed = length + FRAME_OVERHEAD
            while len(buffer) - position < needed and not eof:
                buffer, base, position, eof = _refill(stream, span, buffer, base, position, needed, ordinal)
            if len(buffer) - position < needed:
                limit = base + len(buffer)
                span = dataclasses.replace(span, limit=limit)
                raise _bad_length(span, buffer, position, offset, ordinal)
            frame_end = position + needed
        elif verify_crc and _masked(crc32c(buffer[position : position + 8])) != length_crc:
            _check_length_crc(span, buffer, position, offset, ordinal)
        payload = buffer[position + HEADER_SIZE : frame_end - 4]
        if verify_crc:
            (stored,) = unpack_footer(buffer, frame_end - 4)
            computed = _masked(crc32c(payload))
            if computed != stored:
                raise CorruptRecordError(
                    f"data CRC mismatch in {span.where(offset, ordinal)}: stored 0x{stored:08x}, "
                    f"computed 0x{computed:08x}",
                    path=span.path,
                    offset=offset,
                    record=span.record_number(ordinal),
                )
        yield payload
        position = frame_end
        ordinal += 1


def _check_length_crc(span: _Span, buffer: bytes, position: int, offset: int, ordinal: int) -> None:
    length, stored = _HEADER.unpack_from(buffer, position)
    computed = _masked(crc32c(buffer[position : position + 8]))
    if computed != stored:
        raise CorruptRecordError(
            f"length CRC mismatch in {span.where(offset, ordinal)}: stored 0x{stored:08x}, "
            f"computed 0x{computed:08x} (length field reads {length})",
            path=span.path,
            offset=offset,
            record=span.record_number(ordinal),
        )


def _refill(
    stream: BinaryIO,
    span: _Span,
    buffer: bytes,
    base: int,
    position: int,
    needed: int,
    ordinal: int,
) -> tuple[bytes, int, int, bool]:
    """Drops consumed bytes and reads more: returns (buffer, base, position=0, eof).

    Reads a chunk, but not past the span's end (a run of index entries is read in one request
    and no more), and at least what the current record still needs.
    """
    base += position
    kept = buffer[position:]
    stream_offset = base + len(kept)
    read_end = span.end if span.end is not None else span.limit
    ahead = _CHUNK if read_end is None else min(_CHUNK, read_end - stream_offset)
    want = max(ahead, min(needed - len(kept), _MAX_STEP))
    if span.limit is not None:
        want = min(want, span.limit - stream_offset)
    chunk = _read_stream(stream, span, stream_offset, want, ordinal) if want > 0 else b""
    return kept + chunk, base, 0, not chunk


def _read_stream(stream: BinaryIO, span: _Span, offset: int, size: int, ordinal: int) -> bytes:
    """One read from the stream; decompression failures become errors that say where."""
    try:
        return stream.read(size)
    except EOFError as exc:
        raise TruncatedRecordError(
            f"compressed stream ends early in {span.where(offset, ordinal)} (uncompressed offset): {exc}",
            path=span.path,
            offset=offset,
            record=span.record_number(ordinal),
        ) from exc
    except zlib.error as exc:
        raise CorruptRecordError(
            f"compressed stream is damaged in {span.where(offset, ordinal)} (uncompressed offset): {exc}",
            path=span.path,
            offset=offset,
            record=span.record_number(ordinal),
        ) from exc


def _coalesce(entries: npt.NDArray[np.int64], numbers: npt.NDArray[np.int64]) -> Iterator[tuple[int, int]]:
    """Splits entries into runs of back-to-back, consecutively numbered records.

    Yields:
        ``(first, stop)``: entries ``first..stop-1`` can be read with one request.
    """
    n = len(entries)
    if n == 0:
        return
    offsets = entries[:, 0]
    ends = offsets + entries[:, 1]
    breaks = np.flatnonzero((offsets[1:] != ends[:-1]) | (numbers[1:] != numbers[:-1] + 1)) + 1
    yield from itertools.pairwise([0, *breaks.tolist(), n])


def _as_entries(entries: Sequence[tuple[int, int]] | npt.ArrayLike, path: str) -> npt.NDArray[np.int64]:
    """Index rows as an ``(n, 2)`` int64 array; an entry no record can have is a StaleIndexError."""
    array_ = np.asarray(entries, dtype=np.int64)
    if array_.size == 0:
        return array_.reshape(0, 2)
    if array_.ndim != 2 or array_.shape[1] != 2:
        raise ValueError(f"entries must be (offset, framed_size) pairs, got shape {array_.shape}")
    offsets, sizes = array_[:, 0], array_[:, 1]
    # offset + size must not pass int64's end either: that would wrap to a "valid" small end.
    impossible = (offsets < 0) | (sizes < FRAME_OVERHEAD) | (offsets > np.iinfo(np.int64).max - sizes)
    if impossible.any():
        bad = int(np.flatnonzero(impossible)[0])
        raise StaleIndexError(
            f"index entry {bad} {tuple(array_[bad].tolist())} for {path!r} is impossible: offsets "
            f"are >= 0, framed sizes >= {FRAME_OVERHEAD}, and a record ends before byte 2**63"
        )
    return array_


def _skip(stats: ReadStats | None, error: TFRecordError, what: str) -> None:
    logger.warning("skipping %s: %s", what, error)
    if stats is not None:
        stats.errors.append(str(error))
        if what == "record":
            stats.records_skipped += 1
        else:
            stats.files_skipped += 1


def _counted(records: Iterator[bytes], stats: ReadStats) -> Iterator[bytes]:
    for payload in records:
        stats.records += 1
        stats.payload_bytes += len(payload)
        yield payload


def read_records(
    path: PathLike,
    *,
    compression: CompressionArg = "auto",
    verify_crc: bool = True,
    on_error: OnError = "raise",
    entries: Sequence[tuple[int, int]] | npt.ArrayLike | None = None,
    record_numbers: Sequence[int] | npt.ArrayLike | None = None,
    byte_range: tuple[int, int] | None = None,
    stats: ReadStats | None = None,
    storage_options: StorageOptions = None,
) -> Iterator[bytes]:
    """Yields the payload of each record of a TFRecord file, as ``bytes``.

    Reads the whole file, or only the records named by ``entries`` (index rows), or only the
    records that begin inside ``byte_range``.

    Args:
        path: the file to read.
        compression: ``"auto"`` (by magic bytes, then suffix .gz / .zz / .zlib), ``"gzip"``,
            ``"zlib"`` or None.
        verify_crc: check both CRCs of every record. Lengths are bounds-checked either way.
        on_error: ``"raise"`` (default) or ``"skip"``: log the damage, count it in ``stats``
            and go on; a sequential read skips the rest of the file (framing cannot be
            resynchronised), an index read skips just the damaged record.
        entries: ``(offset, framed_size)`` rows, e.g. from :func:`torch_tfrecord.load_index`;
            records are returned in the given order, and neighbouring ones are read together.
        record_numbers: the record number of each entry, for error messages (default: the
            entry's position in ``entries``).
        byte_range: ``(start, end)``: the records that begin at an offset in ``[start, end)``;
            ``start`` must be the offset of a record (or the file size).
        stats: counters to fill in.
        storage_options: for the fsspec file system when ``path`` is a URL.

    Yields:
        Each record's payload.

    Raises:
        CorruptRecordError: a CRC mismatch or an impossible length.
        TruncatedRecordError: the file ends inside a record.
        StaleIndexError: an entry does not match the record at its offset.
        CompressedIndexError: ``entries`` or ``byte_range`` given for a compressed file.

    Example:
        >>> for payload in read_records("train-00000-of-00008.tfrecord"):  # doctest: +SKIP
        ...     example = decode_example(payload)
    """
    if on_error not in ("raise", "skip"):
        raise ValueError(f"{on_error=} must be 'raise' or 'skip'")
    if entries is not None and byte_range is not None:
        raise ValueError("give entries or byte_range, not both")
    name = str(path)
    resolved = resolve_compression(compression, path, storage_options)
    if resolved is not None and (entries is not None or byte_range is not None):
        raise CompressedIndexError(
            f"{name!r} is {resolved.upper()}-compressed: its records can only be read in order, "
            "not by offset; read it whole, or rewrite it uncompressed to read by index"
        )
    if entries is not None:
        records = _read_entries(name, entries, record_numbers, verify_crc, on_error, stats, storage_options)
    else:
        records = _read_sequential(name, resolved, byte_range, verify_crc, on_error, stats, storage_options)
    # Counting costs a generator frame per record: only when stats are asked for.
    return records if stats is None else _counted(records, stats)


def _read_sequential(
    path: str,
    compression: str | None,
    byte_range: tuple[int, int] | None,
    verify_crc: bool,
    on_error: OnError,
    stats: ReadStats | None,
    storage_options: StorageOptions,
) -> Iterator[bytes]:
    size = file_size(path, storage_options) if compression is None else None
    start, end = 0, None
    if byte_range is not None:
        start, end = byte_range
        if not 0 <= start <= end:
            raise ValueError(f"{byte_range=} must satisfy 0 <= start <= end")
        if size is not None and start > size:
            raise ValueError(f"{byte_range=} starts past the end of {path!r} ({size} bytes)")
    span = _Span(path, start, end, size, first_record=0 if start == 0 else None)
    with open_records_stream(path, compression, storage_options) as stream:  # type: ignore[arg-type]
        if start:
            stream.seek(start)
        try:
            yield from _scan(stream, span, verify_crc)
        except TFRecordError as error:
            if on_error == "raise":
                raise
            _skip(stats, error, "rest of file")


def _read_entries(
    path: str,
    entries: Sequence[tuple[int, int]] | npt.ArrayLike,
    record_numbers: Sequence[int] | npt.ArrayLike | None,
    verify_crc: bool,
    on_error: OnError,
    stats: ReadStats | None,
    storage_options: StorageOptions,
) -> Iterator[bytes]:
    table = _as_entries(entries, path)
    numbers = (
        np.arange(len(table), dtype=np.int64)
        if record_numbers is None
        else np.asarray(record_numbers, dtype=np.int64)
    )
    if len(numbers) != len(table):
        raise ValueError(f"{len(numbers)} record_numbers for {len(table)} entries")
    size = file_size(path, storage_options)
    with open_records_stream(path, None, storage_options) as stream:
        for first, stop in _coalesce(table, numbers):
            while first < stop:
                try:
                    for payload in _read_run(stream, path, size, table, numbers, first, stop, verify_crc):
                        yield payload
                        first += 1
                except TFRecordError as error:
                    if on_error == "raise":
                        raise
                    _skip(stats, error, "record")
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
    span = _Span(path, start, run_end, size, first_record=int(numbers[first]))
    position = first
    for payload in _scan(stream, span, verify_crc):
        framed = len(payload) + FRAME_OVERHEAD
        if framed != table[position, 1]:
            raise _size_mismatch_error(
                path, int(table[position, 0]), int(table[position, 1]), int(numbers[position]), framed
            )
        yield payload
        position += 1


class RangeSource(Protocol):
    """Reads byte ranges of one file: a remote file (:class:`torch_tfrecord.remote.RemoteFile`)."""

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
    unpack_header, unpack_footer = _HEADER.unpack_from, _FOOTER.unpack_from
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
                    _masked(crc32c(buffer[position : position + 8])) != length_crc
                    or _masked(crc32c(payload)) != unpack_footer(buffer, end - 4)[0]
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
    span = _Span(path, offset, None, size, first_record=record)
    length, length_crc = _HEADER.unpack_from(buffer, position)
    if verify_crc and _masked(crc32c(buffer[position : position + 8])) != length_crc:
        try:
            _check_length_crc(span, buffer, position, offset, 0)
        except CorruptRecordError as error:
            return error
    if length + FRAME_OVERHEAD != framed:
        return _size_mismatch_error(path, offset, framed, record, length + FRAME_OVERHEAD)
    payload = buffer[position + HEADER_SIZE : position + framed - 4]
    (stored,) = _FOOTER.unpack_from(buffer, position + framed - 4)
    return CorruptRecordError(
        f"data CRC mismatch in {span.where(offset, 0)}: stored 0x{stored:08x}, "
        f"computed 0x{_masked(crc32c(payload)):08x}",
        path=path,
        offset=offset,
        record=record,
    )


def read_framed_sizes(
    path: PathLike, *, verify_crc: bool = False, storage_options: StorageOptions = None
) -> npt.NDArray[np.int64]:
    """Walks the record headers of an uncompressed file: the framed size of each record.

    Only the 12-byte headers are read (their length CRCs are always checked), unless
    ``verify_crc`` asks to read and check every payload too.

    Args:
        path: an uncompressed TFRecord file.
        verify_crc: also check every payload's CRC.

    Returns:
        An int64 array of shape ``(n,)``: ``payload length + 16`` of each record, in order.

    Raises:
        CompressedIndexError: the file is compressed.
        CorruptRecordError, TruncatedRecordError: the framing is damaged.
    """
    name = str(path)
    compression = resolve_compression("auto", path, storage_options)
    if compression is not None:
        raise CompressedIndexError(
            f"cannot index {name!r}: it is {compression.upper()}-compressed, and byte offsets in a "
            "compressed stream cannot be seeked to. Read it sequentially (no index needed), or "
            "rewrite it uncompressed (torch_tfrecord.RecordWriter) to index and shuffle it"
        )
    size = file_size(path, storage_options)
    if verify_crc:
        sizes = array("q")
        span = _Span(name, 0, None, size, first_record=0)
        with open_records_stream(path, None, storage_options) as stream:
            sizes.extend(len(payload) + FRAME_OVERHEAD for payload in _scan(stream, span, True))
        return np.frombuffer(sizes, dtype=np.int64) if sizes else np.zeros(0, np.int64)
    with open_records_stream(path, None, storage_options) as stream:
        return _walk_headers(stream, name, size)


def _damage_before(
    stream: BinaryIO, span: _Span, offset: int, framed_sizes: Sequence[int]
) -> CorruptRecordError | None:
    """The data CRC error of the record before a header that does not check out, if it has one.

    A header walk skips payloads, so bytes inserted into (or lost from) a record show up as a
    garbage header after it. A sequential read (``verify``, ``read_records``) names the record
    whose data CRC fails first; so must every tool, for one truth about a file.
    """
    if not framed_sizes:
        return None
    start = offset - framed_sizes[-1]
    stream.seek(start)
    previous = dataclasses.replace(span, start=start, end=offset, first_record=len(framed_sizes) - 1)
    try:
        for _ in _scan(stream, previous, verify_crc=True):
            pass
    except CorruptRecordError as error:
        return error
    return None


def _walk_headers(stream: BinaryIO, path: str, size: int) -> npt.NDArray[np.int64]:
    """Framed sizes of all records, reading headers only (and skipping over large payloads)."""
    unpack_header = _HEADER.unpack_from
    framed_sizes = array("q")
    append = framed_sizes.append
    span = _Span(path, 0, None, size, first_record=0)
    offset = 0  # absolute offset of the next header
    buffer = b""
    base = 0  # absolute offset of buffer[0]
    read_size = _CHUNK
    while offset < size:
        position = offset - base
        if position < 0 or len(buffer) - position < HEADER_SIZE:
            stream.seek(offset)
            buffer = stream.read(min(max(read_size, HEADER_SIZE), size - offset))
            base, position = offset, 0
            if len(buffer) < HEADER_SIZE:
                ordinal = len(framed_sizes)
                raise _damage_before(stream, span, offset, framed_sizes) or TruncatedRecordError(
                    f"file ends inside a record header in {span.where(offset, ordinal)}: "
                    f"{len(buffer)} of {HEADER_SIZE} header bytes present",
                    path=path,
                    offset=offset,
                    record=ordinal,
                )
        length, stored = unpack_header(buffer, position)
        if _masked(crc32c(buffer[position : position + 8])) != stored or offset + length + 16 > size:
            bad_length = _bad_length(span, buffer, position, offset, len(framed_sizes))
            raise _damage_before(stream, span, offset, framed_sizes) or bad_length
        framed = length + FRAME_OVERHEAD
        append(framed)
        offset += framed
        # Records larger than a chunk: fetch only their headers instead of whole chunks.
        read_size = HEADER_SIZE if framed > _CHUNK else _CHUNK
    return np.frombuffer(framed_sizes, dtype=np.int64) if framed_sizes else np.zeros(0, np.int64)
