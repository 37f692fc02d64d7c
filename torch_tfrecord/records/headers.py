"""Walking the record headers of an uncompressed file: the framed size of every record.

What an index is built from: only the 12-byte headers are read (a large payload is skipped
over, not read), each length CRC checked, unless every payload's CRC is to be checked too.
"""

from __future__ import annotations

import dataclasses
from array import array
from collections.abc import Callable, Sequence
from typing import BinaryIO

import numpy as np
import numpy.typing as npt

from ..errors import CompressedIndexError, CorruptRecordError, TruncatedRecordError
from .framing import FRAME_OVERHEAD, HEADER_SIZE, crc32c
from .io import PathLike, StorageOptions, file_size, open_records_stream, resolve_compression
from .resync import DamagedRegion
from .scan import CHUNK, HEADER, Span, bad_length, masked, scan

__all__ = ["read_framed_sizes", "read_intact_entries"]


def read_framed_sizes(
    path: PathLike,
    *,
    verify_crc: bool = False,
    storage_options: StorageOptions = None,
    progress: Callable[[int], None] | None = None,
) -> npt.NDArray[np.int64]:
    """Walks the record headers of an uncompressed file: the framed size of each record.

    Only the 12-byte headers are read (their length CRCs are always checked), unless
    ``verify_crc`` asks to read and check every payload too.

    Args:
        path: an uncompressed TFRecord file.
        verify_crc: also check every payload's CRC.
        progress: called with the bytes walked so far, after each read of headers.

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
            f"cannot offset-index {name!r}: it is {compression.upper()}-compressed, and byte offsets "
            "in a compressed stream cannot be seeked to. Give it a compressed index instead "
            "(tt.build_compressed_index, or `tfrecord-index build`, which writes <file>.cidx)"
        )
    size = file_size(path, storage_options)
    if verify_crc:
        sizes = array("q")
        span = Span(name, 0, None, size, first_record=0)
        with open_records_stream(path, None, storage_options) as stream:
            sizes.extend(len(payload) + FRAME_OVERHEAD for payload in scan(stream, span, True))
        return np.frombuffer(sizes, dtype=np.int64) if sizes else np.zeros(0, np.int64)
    with open_records_stream(path, None, storage_options) as stream:
        return _walk_headers(stream, name, size, progress)


def read_intact_entries(
    path: PathLike, on_damage: Callable[[DamagedRegion], None], storage_options: StorageOptions = None
) -> npt.NDArray[np.int64]:
    """The ``(offset, framed_size)`` of every intact record of a damaged, uncompressed file.

    Reads every payload and checks both CRCs; damage is stepped over (see
    :mod:`torch_tfrecord.records.resync`) and each region handed to ``on_damage``.
    """
    name = str(path)
    compression = resolve_compression("auto", path, storage_options)
    if compression is not None:
        read_framed_sizes(path, storage_options=storage_options)  # raises the error that says why
    rows = array("q")
    next_offset = 0

    def resume_after(region: DamagedRegion) -> None:
        nonlocal next_offset
        next_offset = region.end
        on_damage(region)

    span = Span(name, 0, None, file_size(path, storage_options), first_record=0)
    with open_records_stream(path, None, storage_options) as stream:
        for payload in scan(stream, span, True, resume_after):
            framed = len(payload) + FRAME_OVERHEAD
            rows.extend((next_offset, framed))
            next_offset += framed
    return np.frombuffer(rows, dtype=np.int64).reshape(-1, 2) if rows else np.zeros((0, 2), np.int64)


def _damage_before(
    stream: BinaryIO, span: Span, offset: int, framed_sizes: Sequence[int]
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
        for _ in scan(stream, previous, verify_crc=True):
            pass
    except CorruptRecordError as error:
        return error
    return None


def _walk_headers(
    stream: BinaryIO, path: str, size: int, progress: Callable[[int], None] | None = None
) -> npt.NDArray[np.int64]:
    """Framed sizes of all records, reading headers only (and skipping over large payloads)."""
    unpack_header = HEADER.unpack_from
    framed_sizes = array("q")
    append = framed_sizes.append
    span = Span(path, 0, None, size, first_record=0)
    offset = 0  # absolute offset of the next header
    buffer = b""
    base = 0  # absolute offset of buffer[0]
    read_size = CHUNK
    while offset < size:
        position = offset - base
        if position < 0 or len(buffer) - position < HEADER_SIZE:
            stream.seek(offset)
            buffer = stream.read(min(max(read_size, HEADER_SIZE), size - offset))
            base, position = offset, 0
            if progress is not None:
                progress(offset)
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
        if masked(crc32c(buffer[position : position + 8])) != stored or offset + length + 16 > size:
            error = bad_length(span, buffer, position, offset, len(framed_sizes))
            raise _damage_before(stream, span, offset, framed_sizes) or error
        framed = length + FRAME_OVERHEAD
        append(framed)
        offset += framed
        # Records larger than a chunk: fetch only their headers instead of whole chunks.
        read_size = HEADER_SIZE if framed > CHUNK else CHUNK
    return np.frombuffer(framed_sizes, dtype=np.int64) if framed_sizes else np.zeros(0, np.int64)
