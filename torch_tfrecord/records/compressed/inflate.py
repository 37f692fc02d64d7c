"""Reading GZIP / ZLIB shards by record: one inflating pass to index them, seek points to reach
a record without inflating from byte 0, and ranges of the uncompressed stream read in order.

Everything here works with Python's ``zlib`` alone. Seek points stored in the index come from
rapidgzip (optional extra ``compressed``; imported lazily) where it is installed: it reads GZIP
*and* ZLIB streams (indexed_gzip reads only GZIP), inflates with ISA-L about as fast as zlib on one
thread, and exports / imports its checkpoints (bit offset + 32 KiB window each) in indexed_gzip's
GZIDX format, which :mod:`torch_tfrecord.records.compressed.index` stores. Python's own ``zlib`` cannot
start inflating at a bit offset (no ``inflatePrime``), so without rapidgzip an index has no seek
points, and a reader keeps checkpoints of its own in memory as it inflates
(:class:`~torch_tfrecord.records.inflating.InflatingReader`): the first read of a shard's far end
inflates the stream up to it once, later ones start from the nearest checkpoint.

Records are read from such a shard by :class:`~.shard.CompressedShard`.
"""

from __future__ import annotations

import io
import logging
import os
import zlib
from array import array
from typing import Any, BinaryIO

import numpy as np

from ...errors import CompressedIndexError, TFRecordError
from ...support.extras import install_hint
from ..framing import FRAME_OVERHEAD
from ..index import index_from_sizes
from ..io import (
    PathLike,
    StorageOptions,
    file_size,
    is_url,
    open_binary,
    open_records_stream,
    resolve_compression,
)
from ..reader import OnError, ReadStats
from ..scan import Span, scan
from .index import CompressedIndex, read_tail

__all__ = [
    "CHECKPOINT_SPACING",
    "SEGMENT",
    "build_compressed_index",
    "error_text",
    "has_rapidgzip",
    "open_inflater",
]

logger = logging.getLogger(__name__)

SEGMENT = 1 << 20
"""Bytes of uncompressed stream inflated and cached at a time."""
CHECKPOINT_SPACING = 4 << 20
"""Compressed bytes between seek points by default (rapidgzip's chunk size)."""


def has_rapidgzip() -> bool:
    """Whether rapidgzip imports: it makes the seek points; without it, a shard is inflated with
    Python's zlib, from in-memory checkpoints (:mod:`.shard`)."""
    try:
        import rapidgzip  # noqa: F401
    except ImportError:
        return False
    return True


def _rapidgzip() -> Any:
    try:
        import rapidgzip
    except ImportError:
        raise ImportError(
            f"reading GZIP / ZLIB shards by record needs rapidgzip: {install_hint('compressed')}"
        ) from None
    return rapidgzip


def open_inflater(
    path: PathLike,
    storage_options: StorageOptions = None,
    seek_points: bytes = b"",
    spacing: int = CHECKPOINT_SPACING,
) -> Any:
    """A rapidgzip file over ``path`` (local, or a URL through fsspec) on one thread, with the
    given seek points (GZIDX bytes) imported. Close it when done."""
    rapidgzip = _rapidgzip()
    name = os.fspath(path)
    source: str | BinaryIO = open_binary(name, storage_options) if is_url(name) else name
    file = rapidgzip.RapidgzipFile(source, parallelization=1, chunk_size=spacing)
    if seek_points:
        try:
            file.import_index(io.BytesIO(seek_points))
        except BaseException:
            file.close()  # its threads run: left open, they abort the interpreter at exit
            raise
    return file


class _Inflated(io.RawIOBase):
    """A rapidgzip file read as a stream whose failures are the ones :func:`scan` names:
    EOFError for a stream cut short, zlib.error for damage."""

    def __init__(self, file: Any) -> None:
        self._file = file

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        try:
            return bytes(self._file.read(size))
        except (RuntimeError, ValueError) as error:  # rapidgzip's errors carry no type of their own
            raise zlib.error(error_text(error)) from error


def error_text(error: BaseException) -> str:
    return " ".join(str(error).split())[:300]


def build_compressed_index(
    path: PathLike,
    *,
    verify_crc: bool = False,
    on_error: OnError = "raise",
    stats: ReadStats | None = None,
    spacing: int = CHECKPOINT_SPACING,
    storage_options: StorageOptions = None,
) -> CompressedIndex:
    """Inflates a GZIP / ZLIB TFRecord file once: where each record starts in the uncompressed
    stream, and the seek points.

    Args:
        path: the compressed data file (a path or URL).
        verify_crc: check every payload's CRC too (length CRCs are always checked).
        on_error: ``"skip"``: a file damaged or cut short keeps the records before the damage
            (each checked against its CRCs), and the rest is logged and left out; the index
            says so (:attr:`CompressedIndex.damaged`), and only readers with ``on_error="skip"``
            accept it.
        stats: with ``on_error="skip"``, counts such a file in ``files_skipped`` and its error
            in ``errors``.
        spacing: compressed bytes between seek points (each costs up to 32 KiB in the index;
            reaching a record inflates up to about twice this much).

    Raises:
        CompressedIndexError: the file is not compressed.
        CorruptRecordError, TruncatedRecordError: the stream or its framing is damaged, naming
            the record where it happened.
    """
    name = os.fspath(path)
    compression = resolve_compression("auto", name, storage_options)
    if compression is None:
        raise CompressedIndexError(f"{name!r} is not compressed: it takes a plain index (tt.build_index)")
    size = file_size(name, storage_options)
    tail = read_tail(name, size, storage_options)
    span = Span(name, 0, None, None, first_record=0)
    damaged = ""  # the error that ends the records of a damaged file read with on_error="skip"
    fast = None
    if has_rapidgzip():
        fast = _scan_with_seek_points(name, span, size, verify_crc, spacing, storage_options)
    if fast is not None:
        sizes, seek_points = fast
    else:
        # No rapidgzip, or a file damaged or cut short: rapidgzip loses a damaged chunk whole
        # (and may take a stream cut short for a shorter one), so inflate with zlib, which
        # reads up to the damage, to name the exact record (or keep every record before it).
        # Such an index has no seek points: readers inflate with zlib from checkpoints they keep.
        sizes, seek_points = array("q"), b""
        with open_records_stream(name, compression, storage_options) as stream:  # type: ignore[arg-type]
            try:
                for payload in scan(stream, span, True):
                    sizes.append(len(payload) + FRAME_OVERHEAD)
            except TFRecordError as error:
                if on_error == "raise":
                    raise
                logger.warning("skipping the rest of %r after record %d: %s", name, len(sizes) - 1, error)
                damaged = str(error)
                if stats is not None:
                    stats.files_skipped += 1
                    stats.errors.append(damaged)
    table = index_from_sizes(np.frombuffer(sizes, dtype=np.int64) if sizes else np.zeros(0, np.int64))
    return CompressedIndex(compression, size, tail, table, seek_points, spacing, damaged)


def _scan_with_seek_points(
    name: str, span: Span, size: int, verify_crc: bool, spacing: int, storage_options: StorageOptions
) -> tuple[array[int], bytes] | None:
    """One rapidgzip pass: the framed sizes and the exported seek points; None when the stream
    is damaged or does not end where the file does."""
    sizes = array("q")
    file = open_inflater(name, storage_options, spacing=spacing)
    try:
        for payload in scan(_Inflated(file), span, verify_crc):  # type: ignore[arg-type]
            sizes.append(len(payload) + FRAME_OVERHEAD)
        if file.tell_compressed() != 8 * size:  # (in bits) a stream cut short reads as a short one
            return None
        buffer = io.BytesIO()
        file.export_index(buffer)
        return sizes, buffer.getvalue()
    except (TFRecordError, RuntimeError, ValueError):
        return None
    finally:
        file.close()
