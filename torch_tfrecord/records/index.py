"""The index file format: one ``"<offset> <framed_size>\\n"`` line per record.

This is the format of DALI's ``tfrecord2idx`` and of the ``tfrecord`` package, so indexes move
freely between them and us. An index is only trusted after :func:`check_index` has compared it
with its data file: a stale index is an error, never a silent misread.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from ..errors import CorruptRecordError, IndexFormatError, StaleIndexError
from ..support.extension import compiled as _native
from . import remote
from .atomic import atomic_write
from .framing import FRAME_OVERHEAD, HEADER_SIZE, decode_header, header_is_valid
from .headers import read_framed_sizes, read_intact_entries
from .io import (
    PathLike,
    StorageOptions,
    exists,
    file_size,
    is_url,
    local_path,
    open_binary,
    open_records_stream,
    resolve_compression,
)
from .reader import OnError, ReadStats, read_records, record_skipped_region
from .resync import is_record_at

__all__ = [
    "INDEX_SUFFIX",
    "build_index",
    "check_index",
    "check_table",
    "count_records",
    "decode_index",
    "default_index_path",
    "encode_index",
    "index_from_sizes",
    "load_index",
    "max_index_bytes",
    "read_index_bytes",
    "save_index",
    "write_index_bytes",
]

INDEX_SUFFIX = ".idx"

_INT64_MAX = np.iinfo(np.int64).max
_LINE = re.compile(rb"[ \t]*(\d+)[ \t]+(\d+)[ \t]*\r?")


def default_index_path(path: PathLike) -> str:
    """The index path used when none is given: the data path plus ``.idx``."""
    return os.fspath(path) + INDEX_SUFFIX


def build_index(
    path: PathLike,
    *,
    verify_crc: bool = False,
    on_error: OnError = "raise",
    stats: ReadStats | None = None,
    storage_options: StorageOptions = None,
    progress: Callable[[int], None] | None = None,
) -> npt.NDArray[np.int64]:
    """Scans an uncompressed TFRecord file: the ``(offset, framed_size)`` of every record.

    Args:
        path: the data file.
        verify_crc: also read and check every payload (otherwise only headers are read).
        on_error: ``"raise"`` (default), or ``"skip"``: index every intact record of a damaged
            file, leaving out the damaged regions (logged, and listed in ``stats.damaged``).
            The search for intact records past damage reads and checks every payload.
            Load such an index with ``load_index(..., allow_damaged_gaps=True)``.
        stats: with ``on_error="skip"``, filled in with the damaged regions left out.
        storage_options: for the fsspec file system when ``path`` is a URL.
        progress: called with the bytes walked so far while headers are read (a progress bar).

    Returns:
        An int64 array of shape ``(n, 2)``.

    Raises:
        CompressedIndexError: the file is compressed (offsets into it cannot be seeked to).
        CorruptRecordError, TruncatedRecordError: the file is damaged (``on_error="raise"``).

    Example:
        >>> table = build_index("train-00000-of-00008.tfrecord")  # doctest: +SKIP
        >>> save_index(table, default_index_path("train-00000-of-00008.tfrecord"))  # doctest: +SKIP
    """
    if on_error not in ("raise", "skip"):
        raise ValueError(f"{on_error=} must be 'raise' or 'skip'")
    if on_error == "skip" and verify_crc:
        return read_intact_entries(path, lambda region: record_skipped_region(stats, region), storage_options)
    try:
        sizes = read_framed_sizes(
            path, verify_crc=verify_crc, storage_options=storage_options, progress=progress
        )
    except CorruptRecordError:
        if on_error == "raise":
            raise
        return read_intact_entries(path, lambda region: record_skipped_region(stats, region), storage_options)
    return index_from_sizes(sizes)


def index_from_sizes(framed_sizes: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """The ``(offset, framed_size)`` rows of records that lie back to back from byte 0."""
    sizes = np.asarray(framed_sizes, dtype=np.int64).reshape(-1)
    table = np.zeros((len(sizes), 2), dtype=np.int64)
    table[:, 1] = sizes
    if len(sizes) > 1:
        np.cumsum(sizes[:-1], out=table[1:, 0])
    return table


def encode_index(table: npt.ArrayLike) -> bytes:
    """The text of an index file for ``(offset, framed_size)`` rows.

    Vectorised: digits are computed column by column for a block of rows at a time, then
    leading zeros are masked out, about ten times faster than formatting line by line.
    """
    rows = np.asarray(table, dtype=np.int64).reshape(-1, 2)
    if len(rows) and rows.min() < 0:
        raise ValueError("index entries must be non-negative")
    return b"".join(
        _encode_block(rows[start : start + _ENCODE_BLOCK]) for start in range(0, len(rows), _ENCODE_BLOCK)
    )


_ENCODE_BLOCK = 1 << 20
_POWERS_OF_TEN = 10 ** np.arange(1, 19, dtype=np.int64)


def _encode_block(rows: npt.NDArray[np.int64]) -> bytes:
    offsets, sizes = rows[:, 0], rows[:, 1]
    offset_digits = np.searchsorted(_POWERS_OF_TEN, offsets, side="right") + 1
    size_digits = np.searchsorted(_POWERS_OF_TEN, sizes, side="right") + 1
    offset_width, size_width = int(offset_digits.max()), int(size_digits.max())
    chars = np.empty((len(rows), offset_width + size_width + 2), dtype=np.uint8)
    keep = np.ones(chars.shape, dtype=bool)
    for values, digits, width, first in [
        (offsets, offset_digits, offset_width, 0),
        (sizes, size_digits, size_width, offset_width + 1),
    ]:
        remaining = values.copy()
        for column in range(first + width - 1, first - 1, -1):
            quotient = remaining // 10
            chars[:, column] = remaining - quotient * 10 + 48
            remaining = quotient
        keep[:, first : first + width] = np.arange(width)[None, :] >= (width - digits)[:, None]
    chars[:, offset_width] = ord(" ")
    chars[:, -1] = ord("\n")
    return chars[keep].tobytes()


def save_index(table: npt.ArrayLike, index_path: PathLike, storage_options: StorageOptions = None) -> None:
    """Writes an index file atomically (a temporary file renamed into place; one request
    for a URL, which object stores make visible whole or not at all).

    Args:
        table: ``(offset, framed_size)`` rows.
        index_path: where to write it.
        storage_options: for the fsspec file system when ``index_path`` is a URL.
    """
    write_index_bytes(encode_index(table), index_path, storage_options)


def write_index_bytes(data: bytes, index_path: PathLike, storage_options: StorageOptions = None) -> None:
    """Writes an index file's bytes atomically: a temporary file renamed into place, or one
    request for a URL (object stores make it visible whole or not at all)."""
    if is_url(os.fspath(index_path)):
        remote.write_bytes(os.fspath(index_path), data, storage_options)
        return
    with atomic_write(local_path(index_path)) as f:
        f.write(data)


def max_index_bytes(data_size: int) -> int:
    """The most bytes an index (plain or compressed) of a data file of ``data_size`` bytes holds
    honestly: a record takes 16 bytes at least and its line of text at most about 42 (a
    compressed index, its deflated size and a share of the seek points); 1 MiB besides."""
    return 16 * data_size + (1 << 20)


def read_index_bytes(
    index_path: PathLike, storage_options: StorageOptions = None, limit: int | None = None
) -> bytes:
    """The bytes of an index file (a path or URL), of at most ``limit`` bytes when given.

    Raises:
        IndexFormatError: the file is larger than ``limit`` (read no further).
    """
    name = os.fspath(index_path)
    if is_url(name):
        data = remote.read_bytes(name, storage_options, limit)
        size = len(data)
    else:
        with open_binary(name) as f:
            size = os.fstat(f.fileno()).st_size
            if limit is None or size <= limit:
                data = f.read()
    if limit is not None and size > limit:
        raise IndexFormatError(
            f"{name!r} has more than {limit:,} bytes: more than an index of its data file can hold "
            "(see max_index_bytes); not read"
        )
    return data


def load_index(
    index_path: PathLike,
    *,
    data_path: PathLike | None = None,
    allow_damaged_gaps: bool = False,
    storage_options: StorageOptions = None,
) -> npt.NDArray[np.int64]:
    """Reads an index file into an int64 array of shape ``(n, 2)``.

    Args:
        index_path: the index file.
        data_path: the data file it describes; when given, the index is checked against it
            with :func:`check_index`.
        allow_damaged_gaps: accept an index built with ``on_error="skip"`` (see :func:`check_index`).
        storage_options: for the fsspec file system of URLs.

    Returns:
        The ``(offset, framed_size)`` rows.

    Raises:
        IndexFormatError: a line is not two non-negative integers.
        StaleIndexError: with ``data_path``, the index does not describe that file.
    """
    size = None if data_path is None else file_size(data_path, storage_options)
    limit = None if size is None else max_index_bytes(size)
    table = decode_index(read_index_bytes(index_path, storage_options, limit), index_path)
    if data_path is not None:
        check_index(
            table,
            data_path,
            index_path,
            allow_damaged_gaps=allow_damaged_gaps,
            storage_options=storage_options,
            size=size,
        )
    return table


def decode_index(data: bytes, index_path: PathLike = "<bytes>") -> npt.NDArray[np.int64]:
    """Parses the text of an index file; see :func:`load_index`."""
    if _native is not None:  # the canonical form in one pass of compiled code
        rows = np.empty((data.count(b"\n") + 1, 2), dtype=np.int64)  # a row per line
        count = _native.parse_index(data, rows)
        if count != _native.INDEX_NOT_CANONICAL:
            return rows[:count]
    lines = data.count(b"\n") + (0 if not data or data.endswith(b"\n") else 1)
    if lines and data.count(b" ") == lines and b"-" not in data and b"+" not in data:
        # C-speed parse of the canonical format; anything unusual falls to the strict path,
        # which names the offending line.
        with warnings.catch_warnings():
            # Where numpy 2 raises on text it cannot read to its end ("0 1.5"), numpy 1.x warns and
            # returns what it read so far: that warning fails the fast path too.
            warnings.simplefilter("error", DeprecationWarning)
            try:
                values = np.fromstring(data, dtype=np.int64, sep=" ")  # type: ignore[call-overload]
            except (ValueError, DeprecationWarning):
                values = None
        # fromstring saturates numbers past int64 instead of failing: those go the strict way.
        if values is not None and len(values) == 2 * lines and values.max() < _INT64_MAX:
            return values.reshape(lines, 2)
    return _decode_index_strict(data, index_path)


def _decode_index_strict(data: bytes, index_path: PathLike) -> npt.NDArray[np.int64]:
    """Line-by-line parse that accepts tabs, extra spaces and CRLF, and names the bad line."""
    rows: list[tuple[int, int]] = []
    for number, line in enumerate(data.split(b"\n"), start=1):
        if not line.strip():
            continue
        match = _LINE.fullmatch(line)
        if match is None:
            shown = line[:80].decode("utf-8", "replace")
            raise IndexFormatError(
                f"{os.fspath(index_path)!r} line {number} is not '<offset> <framed_size>': {shown!r}"
            )
        offset, framed = int(match[1]), int(match[2])
        if offset >= _INT64_MAX or framed >= _INT64_MAX:
            raise IndexFormatError(
                f"{os.fspath(index_path)!r} line {number}: value out of range: "
                f"{line[:80].decode('ascii', 'replace')!r}"
            )
        rows.append((offset, framed))
    return np.array(rows, dtype=np.int64).reshape(-1, 2)


def check_index(
    table: npt.NDArray[np.int64],
    data_path: PathLike,
    index_path: PathLike,
    *,
    allow_damaged_gaps: bool = False,
    storage_options: StorageOptions = None,
    size: int | None = None,
) -> None:
    """Checks that an index describes its data file, record after record.

    The records must start at byte 0, follow one another with no gap or overlap, each be at
    least 16 bytes, and end exactly at the end of the file: checked against the file size
    alone.

    Args:
        allow_damaged_gaps: accept an index of a damaged file built with ``on_error="skip"``,
            which leaves the damaged regions out: bytes before its first record, between two
            or after its last are accepted when they do not begin with an intact record (an
            index missing a record, of a file appended to or rewritten, is still stale).
            Only those gaps are read.
        storage_options: for the fsspec file system when ``data_path`` is a URL.
        size: the data file's size, when known (a listing said it): not looked up again.

    Raises:
        StaleIndexError: naming both files and the first entry that does not fit.
    """
    size = file_size(data_path, storage_options) if size is None else size
    where = f"index {os.fspath(index_path)!r} does not describe {os.fspath(data_path)!r}"
    starts, ends = check_table(table, size, where, allow_damaged_gaps=allow_damaged_gaps)
    if len(starts):
        _check_gaps(where, data_path, starts, ends, size, storage_options)


def check_table(
    table: npt.NDArray[np.int64], size: int, where: str, *, allow_damaged_gaps: bool = False
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Checks that ``(offset, framed_size)`` rows describe a record stream of ``size`` bytes:
    from byte 0, back to back, each at least 16 bytes, ending at ``size`` (pure; see
    :func:`check_index`).

    Returns:
        With ``allow_damaged_gaps``, the byte ranges ``(starts, ends)`` that lie outside every
        entry (for the caller to check that no intact record begins there); else empty.

    Raises:
        StaleIndexError: ``where`` and the first entry that does not fit.
    """
    none = np.zeros(0, np.int64)
    n = len(table)
    if n == 0:
        if size and allow_damaged_gaps:
            return np.zeros(1, np.int64), np.full(1, size, np.int64)
        if size:
            raise StaleIndexError(f"{where}: the index is empty but the file has {size} bytes")
        return none, none
    offsets, sizes = table[:, 0], table[:, 1]
    # (each within the file before their sum is taken: offset + size past 2**63 would wrap)
    beyond = np.flatnonzero((offsets > size) | (sizes > size))
    if len(beyond):
        i = int(beyond[0])
        raise StaleIndexError(
            f"{where}: entry {i} (byte {offsets[i]}, framed size {sizes[i]}) lies past the end of the "
            f"file ({size} bytes)"
        )
    if offsets[0] != 0 and not allow_damaged_gaps:
        raise StaleIndexError(f"{where}: the first record is at byte {offsets[0]}, not 0")
    small = np.flatnonzero(sizes < FRAME_OVERHEAD)
    if len(small):
        i = int(small[0])
        raise StaleIndexError(
            f"{where}: entry {i} has framed size {sizes[i]}, below the minimum {FRAME_OVERHEAD}"
        )
    ends = offsets + sizes
    bad = np.flatnonzero(offsets[1:] < ends[:-1] if allow_damaged_gaps else offsets[1:] != ends[:-1])
    if len(bad):
        i = int(bad[0])
        kind = "overlaps" if offsets[i + 1] < ends[i] else "leaves a gap after"
        raise StaleIndexError(
            f"{where}: entry {i + 1} (byte {offsets[i + 1]}) {kind} entry {i} "
            f"(bytes {offsets[i]}..{int(ends[i])})"
        )
    end = int(ends[-1])
    if end > size or (end < size and not allow_damaged_gaps):
        change = "grew" if size > end else "shrank"
        raise StaleIndexError(
            f"{where}: the index ends at byte {end} but the file has {size} bytes "
            f"(the file {change} since the index was built; rebuild it with `tfrecord-index build`)"
        )
    if not allow_damaged_gaps:
        return none, none
    gap_starts = np.concatenate([[0], ends]).astype(np.int64)
    gap_ends = np.concatenate([offsets, [size]]).astype(np.int64)
    gaps = np.flatnonzero(gap_ends > gap_starts)
    return gap_starts[gaps], gap_ends[gaps]


def _check_gaps(
    where: str,
    data_path: PathLike,
    starts: npt.NDArray[np.int64],
    ends: npt.NDArray[np.int64],
    size: int,
    storage_options: StorageOptions,
) -> None:
    """Raises StaleIndexError for the first gap that begins with a header that checks out."""
    with open_records_stream(os.fspath(data_path), None, storage_options) as stream:  # type: ignore[arg-type]
        for start, gap_end in zip(starts.tolist(), ends.tolist()):
            stream.seek(start)
            head = stream.read(HEADER_SIZE)
            if not header_is_valid(head) or start + decode_header(head)[0] + FRAME_OVERHEAD > gap_end:
                continue  # damage left out by `build --on-error skip`
            framed = head + stream.read(decode_header(head)[0] + FRAME_OVERHEAD - HEADER_SIZE)
            if not is_record_at(framed, 0):
                continue  # a record whose payload is damaged
            if gap_end == size:
                raise StaleIndexError(
                    f"{where}: the index ends at byte {start} but the file has {size} bytes and a "
                    f"record begins there (the file grew since the index was built; rebuild it with "
                    f"`tfrecord-index build`)"
                )
            raise StaleIndexError(
                f"{where}: a record at byte {start} (bytes {start}..{gap_end} lie between entries) "
                f"is not in the index (rebuild it with `tfrecord-index build`)"
            )


def count_records(
    path: PathLike, *, index_path: PathLike | None = None, storage_options: StorageOptions = None
) -> int:
    """Number of records in a TFRecord file.

    Uses the index when one exists and is fresh, else walks the record headers (uncompressed
    files) or reads the stream (compressed files).

    Raises:
        CorruptRecordError, TruncatedRecordError: the framing is damaged.
    """
    index_path = default_index_path(path) if index_path is None else index_path
    if exists(index_path, storage_options):
        try:
            return len(load_index(index_path, data_path=path, storage_options=storage_options))
        except (StaleIndexError, IndexFormatError):
            pass  # counted from the data below; the stale index is reported by `check`
    if resolve_compression("auto", path, storage_options) is None:
        return len(read_framed_sizes(path, storage_options=storage_options))
    return sum(1 for _ in read_records(path, verify_crc=False, storage_options=storage_options))
