"""The compressed-shard index format: where each record starts in a GZIP / ZLIB file's
uncompressed stream, plus the decompressor seek points that reach a record without inflating
the file from byte 0.

A file of its own, ``<data path>.cidx``, never the plain ``.idx`` name: DALI's ``tfrecord2idx``
and the ``tfrecord`` package read ``.idx`` files as text lines of offsets into the *file*,
which a compressed file has none of. The file also starts with a binary magic (a non-ASCII
byte, then NUL-free text, then ``\\r\\n\\x1a\\n`` as PNG does) that both of their text parsers reject
rather than misread. Layout after the magic, all little-endian::

    u32 header length | JSON header | framed sizes | seek points | u32 CRC32 of all before

The header names the compression, the compressed file's size and its last 8 bytes (GZIP's
trailer: CRC32 and size of the whole uncompressed stream; ZLIB's Adler-32), so an index of
another or a rewritten file is refused before any record is read. The records lie back to back
from byte 0 of the uncompressed stream, so their framed sizes (int64, deflated: about 2 bytes a
record instead of a text index's ~12) give the ``(offset, framed_size)`` rows of a plain
index. The seek points (deflated too)
are the decompressor's checkpoints (bit position + 32 KiB window each) in indexed_gzip's
``GZIDX`` format, as rapidgzip exports and imports them (see :mod:`.inflate`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import struct
import zlib

import numpy as np
import numpy.typing as npt

from ...errors import IndexFormatError, StaleIndexError
from ..index import check_table, index_from_sizes, max_index_bytes, read_index_bytes, write_index_bytes
from ..io import PathLike, StorageOptions, file_size, open_binary

__all__ = [
    "COMPRESSED_INDEX_SUFFIX",
    "MAGIC",
    "TAIL_SIZE",
    "CompressedIndex",
    "check_compressed_index",
    "decode_compressed_index",
    "default_compressed_index_path",
    "encode_compressed_index",
    "is_compressed_index",
    "load_compressed_index",
    "read_tail",
    "save_compressed_index",
]

COMPRESSED_INDEX_SUFFIX = ".cidx"
MAGIC = b"\x89TFRecord compressed index\r\n\x1a\n"
TAIL_SIZE = 8
_VERSION = 1
_U32 = struct.Struct("<I")
# DEFLATE inflates at most about 1032 times; a record takes 16 bytes at least: the most records a
# compressed file of N bytes holds is about 1032 * N / 16. A seek point (a 32 KiB window) per
# compressed KiB at most.
_MAX_RATIO = 1032
_SEEK_BYTES_PER_BYTE = 32


@dataclasses.dataclass(frozen=True, eq=False)
class CompressedIndex:
    """What a compressed shard's index knows.

    Attributes:
        compression: ``"gzip"`` or ``"zlib"``.
        compressed_size: the data file's size in bytes.
        tail: the data file's last :data:`TAIL_SIZE` bytes (its checksum trailer).
        table: ``(offset, framed_size)`` of each record in the uncompressed stream.
        seek_points: the decompressor checkpoints, in GZIDX format (empty: inflate from byte 0).
        spacing: compressed bytes between seek points (what a reader inflates at a time).
        damaged: for a file damaged or cut short, indexed with ``on_error="skip"``: the error
            that ended its readable records (the index lists the records before it, and the
            rest of the file is left out); empty for an intact file.
    """

    compression: str
    compressed_size: int
    tail: bytes
    table: npt.NDArray[np.int64]
    seek_points: bytes
    spacing: int = 4 << 20
    damaged: str = ""

    def __post_init__(self) -> None:
        if self.compression not in ("gzip", "zlib"):
            raise ValueError(f"compression={self.compression!r} must be 'gzip' or 'zlib'")
        if self.compressed_size < 0 or self.spacing < 1:
            raise ValueError(
                f"compressed_size={self.compressed_size} and spacing={self.spacing} must be positive"
            )

    @property
    def uncompressed_size(self) -> int:
        """Bytes of the record stream (where the last record ends)."""
        if not len(self.table):
            return 0
        return int(self.table[-1, 0] + self.table[-1, 1])


def default_compressed_index_path(path: PathLike) -> str:
    """The compressed index's path when none is given: the data path plus ``.cidx``."""
    return os.fspath(path) + COMPRESSED_INDEX_SUFFIX


def is_compressed_index(head: bytes) -> bool:
    """Whether bytes (at least the first ``len(MAGIC)`` of a file) start a compressed index."""
    return head.startswith(MAGIC)


def encode_compressed_index(index: CompressedIndex) -> bytes:
    """The bytes of a compressed index file."""
    table = np.asarray(index.table, dtype=np.int64).reshape(-1, 2)
    check_table(table, index.uncompressed_size, "a compressed index's records")
    sizes = zlib.compress(np.ascontiguousarray(table[:, 1], dtype="<i8").tobytes(), 6)
    seek_points = zlib.compress(index.seek_points, 6)  # the windows are the data's text: ~3x
    fields = {
        "version": _VERSION,
        "compression": index.compression,
        "compressed_size": index.compressed_size,
        "tail": index.tail.hex(),
        "records": len(table),
        "sizes_bytes": len(sizes),
        "seek_points_bytes": len(seek_points),
        "spacing": index.spacing,
    }
    if index.damaged:  # only then: an intact file's index has the same bytes as before
        fields["damaged"] = index.damaged
    header = json.dumps(fields, sort_keys=True).encode()
    body = MAGIC + _U32.pack(len(header)) + header + sizes + seek_points
    return body + _U32.pack(zlib.crc32(body))


def decode_compressed_index(
    data: bytes,
    index_path: PathLike = "<bytes>",
    *,
    data_size: int | None = None,
    data_path: PathLike = "its data file",
) -> CompressedIndex:
    """Parses a compressed index file; see :func:`load_compressed_index`.

    Nothing is inflated past what a compressed file of ``data_size`` bytes (given: the data
    file's, checked against the header first; else the size the header claims) can hold:
    ``records`` sizes of 8 bytes for at most ``1032 * size / 16`` records, and seek points.

    Raises:
        IndexFormatError: damaged, or claiming more than its file can hold.
        StaleIndexError: ``data_size`` is not the size the index was built for.
    """
    name = os.fspath(index_path)
    if not is_compressed_index(data):
        raise IndexFormatError(f"{name!r} is not a torch-tfrecord compressed index (no magic at byte 0)")
    if len(data) < len(MAGIC) + 8 or _U32.unpack_from(data, len(data) - 4)[0] != zlib.crc32(data[:-4]):
        raise IndexFormatError(f"{name!r} is damaged or cut short: its checksum does not match")
    at = len(MAGIC)
    (header_size,) = _U32.unpack_from(data, at)
    at += 4
    try:
        header = json.loads(data[at : at + header_size])
        version, records = int(header["version"]), int(header["records"])
        sizes_bytes = int(header["sizes_bytes"])
        seek_bytes = int(header["seek_points_bytes"])
        compression, compressed_size = str(header["compression"]), int(header["compressed_size"])
        tail = bytes.fromhex(header["tail"])
        spacing = int(header["spacing"])
        damaged = str(header.get("damaged", ""))
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise IndexFormatError(f"{name!r} has an unreadable header: {error}") from None
    if version != _VERSION:
        raise IndexFormatError(
            f"{name!r} is a version {version} compressed index; this reads version {_VERSION}"
        )
    at += header_size
    table_end = at + sizes_bytes
    if table_end + seek_bytes != len(data) - 4 or min(records, sizes_bytes, seek_bytes) < 0:
        raise IndexFormatError(f"{name!r}: the header's sizes do not match the file's {len(data)} bytes")
    if data_size is not None and data_size != compressed_size:
        raise _other_size(index_path, data_path, compressed_size, data_size)
    size = compressed_size if data_size is None else data_size
    most = _MAX_RATIO * size // 16 + 1
    if records > most:
        raise IndexFormatError(
            f"{name!r} claims {records:,} records: a compressed file of {size:,} bytes holds {most:,} at most"
        )
    sizes = _inflate(data[at:table_end], 8 * records, name, "record sizes")
    seek_points = _inflate(
        data[table_end : table_end + seek_bytes], _SEEK_BYTES_PER_BYTE * size + (1 << 20), name, "seek points"
    )
    if len(sizes) != 8 * records:
        raise IndexFormatError(f"{name!r}: {len(sizes) // 8} record sizes for {records} records")
    table = index_from_sizes(np.frombuffer(sizes, dtype="<i8").astype(np.int64))
    try:
        return CompressedIndex(compression, compressed_size, tail, table, seek_points, spacing, damaged)
    except ValueError as error:
        raise IndexFormatError(f"{name!r}: {error}") from None


def _other_size(index_path: PathLike, data_path: PathLike, built: int, size: int) -> StaleIndexError:
    return StaleIndexError(
        f"compressed index {os.fspath(index_path)!r} does not describe {os.fspath(data_path)!r}: it was "
        f"built for a file of {built} bytes, this one has {size} (another file, or this one changed; "
        "rebuild it with `tfrecord-index build`)"
    )


def _inflate(data: bytes, most: int, name: str, what: str) -> bytes:
    """``data`` inflated, but never past ``most`` bytes (more is damage, or a lie)."""
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(data, most + 1)
    except zlib.error as error:
        raise IndexFormatError(f"{name!r}: its {what} do not inflate: {error}") from None
    if len(out) > most or inflater.unconsumed_tail:
        raise IndexFormatError(f"{name!r}: its {what} inflate past the {most:,} bytes its header allows")
    if not inflater.eof:
        raise IndexFormatError(f"{name!r}: its {what} are cut short")
    return out


def save_compressed_index(
    index: CompressedIndex, index_path: PathLike, storage_options: StorageOptions = None
) -> None:
    """Writes a compressed index atomically (one request for a URL)."""
    write_index_bytes(encode_compressed_index(index), index_path, storage_options)


def read_tail(path: PathLike, size: int, storage_options: StorageOptions = None) -> bytes:
    """The last :data:`TAIL_SIZE` bytes of a file of ``size`` bytes."""
    with open_binary(path, storage_options) as f:
        f.seek(max(0, size - TAIL_SIZE))
        return f.read(TAIL_SIZE)


def load_compressed_index(
    index_path: PathLike,
    *,
    data_path: PathLike | None = None,
    allow_damaged: bool = False,
    storage_options: StorageOptions = None,
) -> CompressedIndex:
    """Reads a compressed index, checked against its data file when ``data_path`` is given
    (``allow_damaged``: see :func:`check_compressed_index`).

    Raises:
        IndexFormatError: not a compressed index, or a damaged one.
        StaleIndexError: with ``data_path``, the index describes another or a changed file, or
            a damaged one that ``allow_damaged`` does not accept.
    """
    size = None if data_path is None else file_size(data_path, storage_options)
    limit = None if size is None else max_index_bytes(size)
    data = read_index_bytes(index_path, storage_options, limit)
    index = decode_compressed_index(data, index_path, data_size=size, data_path=data_path or "")
    if data_path is not None:
        check_compressed_index(
            index,
            data_path,
            index_path,
            allow_damaged=allow_damaged,
            storage_options=storage_options,
            size=size,
        )
    return index


def check_compressed_index(
    index: CompressedIndex,
    data_path: PathLike,
    index_path: PathLike,
    *,
    allow_damaged: bool = False,
    storage_options: StorageOptions = None,
    size: int | None = None,
) -> None:
    """Checks that a compressed index describes its data file: its size and checksum trailer,
    and records that lie back to back from byte 0 of the uncompressed stream.

    Args:
        allow_damaged: accept the index of a damaged file built with ``on_error="skip"``
            (:attr:`CompressedIndex.damaged`), which lists only the records before the damage;
            by default it is refused, so that a strict read never stops short silently.
        size: the data file's size, when the caller knows it (else looked up).

    Raises:
        StaleIndexError: naming both files and what differs, or the damage.
    """
    where = f"compressed index {os.fspath(index_path)!r} does not describe {os.fspath(data_path)!r}"
    size = file_size(data_path, storage_options) if size is None else size  # (known from a listing)
    if size != index.compressed_size:
        raise _other_size(index_path, data_path, index.compressed_size, size)
    tail = read_tail(data_path, size, storage_options)
    if tail != index.tail:
        raise StaleIndexError(
            f"{where}: the file's checksum trailer is {tail.hex()}, the index's {index.tail.hex()} "
            "(another file of the same size, or this one was rewritten; rebuild the index)"
        )
    check_table(index.table, index.uncompressed_size, where)
    if index.damaged and not allow_damaged:
        raise StaleIndexError(
            f"compressed index {os.fspath(index_path)!r} lists only the {len(index.table)} records of "
            f"{os.fspath(data_path)!r} before its damage ({index.damaged}): it was built with "
            "on_error='skip'; read with on_error='skip' to accept it"
        )
