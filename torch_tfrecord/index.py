"""The index file format: one ``"<offset> <framed_size>\\n"`` line per record.

This is the format of DALI's ``tfrecord2idx`` and of the ``tfrecord`` package, so indexes move
freely between them and us. An index is only trusted after :func:`check_index` has compared it
with its data file: a stale index is an error, never a silent misread.
"""

from __future__ import annotations

import os
import re
import warnings

import numpy as np
import numpy.typing as npt

from . import remote
from ._atomic import atomic_write
from .errors import IndexFormatError, StaleIndexError
from .framing import FRAME_OVERHEAD
from .headers import read_framed_sizes
from .io import (
    PathLike,
    StorageOptions,
    exists,
    file_size,
    is_url,
    local_path,
    open_binary,
    resolve_compression,
)
from .reader import read_records

__all__ = [
    "INDEX_SUFFIX",
    "build_index",
    "check_index",
    "count_records",
    "decode_index",
    "default_index_path",
    "encode_index",
    "index_from_sizes",
    "load_index",
    "save_index",
]

INDEX_SUFFIX = ".idx"

_INT64_MAX = np.iinfo(np.int64).max
_LINE = re.compile(rb"[ \t]*(\d+)[ \t]+(\d+)[ \t]*\r?")


def default_index_path(path: PathLike) -> str:
    """The index path used when none is given: the data path plus ``.idx``."""
    return os.fspath(path) + INDEX_SUFFIX


def build_index(
    path: PathLike, *, verify_crc: bool = False, storage_options: StorageOptions = None
) -> npt.NDArray[np.int64]:
    """Scans an uncompressed TFRecord file: the ``(offset, framed_size)`` of every record.

    Args:
        path: the data file.
        verify_crc: also read and check every payload (otherwise only headers are read).
        storage_options: for the fsspec file system when ``path`` is a URL.

    Returns:
        An int64 array of shape ``(n, 2)``.

    Raises:
        CompressedIndexError: the file is compressed (offsets into it cannot be seeked to).
        CorruptRecordError, TruncatedRecordError: the file is damaged.

    Example:
        >>> table = build_index("train-00000-of-00008.tfrecord")  # doctest: +SKIP
        >>> save_index(table, default_index_path("train-00000-of-00008.tfrecord"))  # doctest: +SKIP
    """
    return index_from_sizes(read_framed_sizes(path, verify_crc=verify_crc, storage_options=storage_options))


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
    data = encode_index(table)
    if is_url(os.fspath(index_path)):
        remote.write_bytes(os.fspath(index_path), data, storage_options)
        return
    with atomic_write(local_path(index_path)) as f:
        f.write(data)


def load_index(
    index_path: PathLike, *, data_path: PathLike | None = None, storage_options: StorageOptions = None
) -> npt.NDArray[np.int64]:
    """Reads an index file into an int64 array of shape ``(n, 2)``.

    Args:
        index_path: the index file.
        data_path: the data file it describes; when given, the index is checked against it
            with :func:`check_index`.
        storage_options: for the fsspec file system of URLs.

    Returns:
        The ``(offset, framed_size)`` rows.

    Raises:
        IndexFormatError: a line is not two non-negative integers.
        StaleIndexError: with ``data_path``, the index does not describe that file.
    """
    name = os.fspath(index_path)
    if is_url(name):
        data = remote.read_bytes(name, storage_options)
    else:
        with open_binary(name) as f:
            data = f.read()
    table = decode_index(data, index_path)
    if data_path is not None:
        check_index(table, data_path, index_path, storage_options=storage_options)
    return table


def decode_index(data: bytes, index_path: PathLike = "<bytes>") -> npt.NDArray[np.int64]:
    """Parses the text of an index file; see :func:`load_index`."""
    lines = data.count(b"\n") + (0 if not data or data.endswith(b"\n") else 1)
    if lines and data.count(b" ") == lines and b"-" not in data and b"+" not in data:
        # C-speed parse of the canonical format; anything unusual falls to the strict path,
        # which names the offending line.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            try:
                values = np.fromstring(data, dtype=np.int64, sep=" ")  # type: ignore[call-overload]
            except ValueError:
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
    storage_options: StorageOptions = None,
) -> None:
    """Checks that an index describes its data file, record after record.

    The records must start at byte 0, follow one another with no gap or overlap, each be at
    least 16 bytes, and end exactly at the end of the file.

    Args:
        storage_options: for the fsspec file system when ``data_path`` is a URL.

    Raises:
        StaleIndexError: naming both files and the first entry that does not fit.
    """
    size = file_size(data_path, storage_options)
    where = f"index {os.fspath(index_path)!r} does not describe {os.fspath(data_path)!r}"
    n = len(table)
    if n == 0:
        if size:
            raise StaleIndexError(f"{where}: the index is empty but the file has {size} bytes")
        return
    offsets, sizes = table[:, 0], table[:, 1]
    if offsets[0] != 0:
        raise StaleIndexError(f"{where}: the first record is at byte {offsets[0]}, not 0")
    small = np.flatnonzero(sizes < FRAME_OVERHEAD)
    if len(small):
        i = int(small[0])
        raise StaleIndexError(
            f"{where}: entry {i} has framed size {sizes[i]}, below the minimum {FRAME_OVERHEAD}"
        )
    bad = np.flatnonzero(offsets[1:] != offsets[:-1] + sizes[:-1])
    if len(bad):
        i = int(bad[0])
        expected = int(offsets[i] + sizes[i])
        kind = "overlaps" if offsets[i + 1] < expected else "leaves a gap after"
        raise StaleIndexError(
            f"{where}: entry {i + 1} (byte {offsets[i + 1]}) {kind} entry {i} "
            f"(bytes {offsets[i]}..{expected})"
        )
    end = int(offsets[-1] + sizes[-1])
    if end != size:
        change = "grew" if size > end else "shrank"
        raise StaleIndexError(
            f"{where}: the index ends at byte {end} but the file has {size} bytes "
            f"(the file {change} since the index was built; rebuild it with "
            f"`tfrecord-index build --force`)"
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
