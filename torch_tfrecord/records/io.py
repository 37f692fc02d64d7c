"""Opening TFRecord files: paths and URLs, compression detection and decompressing streams.

Everything that touches a file starts here. Local paths (and ``file://`` URLs) use the
operating system directly; any other URL (``s3://``, ``gs://``, ``https://``, ``memory://``)
goes through fsspec (:mod:`torch_tfrecord.records.remote`), with ``storage_options`` passed to its file
system. Compressed files are read as streams: GZIP and ZLIB wrap the whole file, framing
included, so their byte offsets are offsets into the decompressed stream.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO, Literal

from ..errors import SourceNotFoundError
from . import remote
from .framing import header_is_valid
from .inflating import InflatingReader
from .remote import StorageOptions, is_url

__all__ = [
    "Compression",
    "PathLike",
    "StorageOptions",
    "detect_compression",
    "exists",
    "file_size",
    "is_url",
    "join",
    "local_path",
    "open_binary",
    "open_records_stream",
    "resolve_compression",
]

PathLike = str | os.PathLike[str]
Compression = Literal["gzip", "zlib"] | None
CompressionArg = Literal["auto", "gzip", "zlib"] | None

_GZIP_MAGIC = b"\x1f\x8b"
_SUFFIXES: dict[str, Compression] = {".gz": "gzip", ".gzip": "gzip", ".zz": "zlib", ".zlib": "zlib"}


def _zlib_header_is_valid(head: bytes) -> bool:
    # RFC 1950: CM=8 (deflate), CINFO<=7, and the 16-bit header is a multiple of 31.
    return len(head) >= 2 and head[0] & 0x0F == 8 and head[0] >> 4 <= 7 and (head[0] << 8 | head[1]) % 31 == 0


def detect_compression(head: bytes, path: PathLike = "") -> Compression:
    """Guesses how a file is compressed from its first bytes, then from its name.

    A valid TFRecord header (length plus matching CRC) wins over any magic number, because a
    plain file whose first record is 35,615 bytes long starts with the GZIP magic bytes.

    Args:
        head: the first 12 or more bytes of the file (fewer for a shorter file).
        path: the file name, used only when the bytes decide nothing.

    Returns:
        ``"gzip"``, ``"zlib"`` or ``None`` for an uncompressed file.
    """
    if not head or header_is_valid(head):
        return None
    if head[:2] == _GZIP_MAGIC:
        return "gzip"
    if _zlib_header_is_valid(head):
        return "zlib"
    return _SUFFIXES.get(os.path.splitext(os.fspath(path))[1].lower())


def local_path(path: PathLike) -> str:
    """The path as a string, without a ``file://`` prefix."""
    name = os.fspath(path)
    return name[len("file://") :] if name.startswith("file://") else name


def join(directory: str, name: str) -> str:
    """``directory/name`` for a local directory or a URL prefix."""
    return directory.rstrip("/") + "/" + name if is_url(directory) else os.path.join(directory, name)


def exists(path: PathLike, storage_options: StorageOptions = None) -> bool:
    """Whether a file exists at ``path``."""
    name = os.fspath(path)
    if is_url(name):
        return remote.exists(name, storage_options)
    return os.path.exists(local_path(name))


def resolve_compression(
    compression: CompressionArg, path: PathLike, storage_options: StorageOptions = None
) -> Compression:
    """Turns a ``compression=`` argument into the compression of the file at ``path``.

    Raises:
        ValueError: for an unknown compression name.
    """
    if compression is None or compression in ("gzip", "zlib"):
        return compression  # type: ignore[return-value]
    if compression != "auto":
        raise ValueError(f"{compression=} must be 'auto', 'gzip', 'zlib' or None")
    name = os.fspath(path)
    if is_url(name):
        head = remote.read_head(name, 16, storage_options)
    else:
        with open_binary(name) as f:
            head = f.read(16)
    return detect_compression(head, name)


def file_size(path: PathLike, storage_options: StorageOptions = None) -> int:
    """Size of the file at ``path`` in bytes."""
    name = os.fspath(path)
    if is_url(name):
        return int(remote.file_info(name, storage_options)["size"])
    try:
        return os.stat(local_path(name)).st_size
    except FileNotFoundError:
        raise SourceNotFoundError(f"no such file: {os.fspath(path)!r}") from None


def open_binary(path: PathLike, storage_options: StorageOptions = None) -> BinaryIO:
    """Opens a file for reading, unbuffered; a missing file is a :class:`SourceNotFoundError`.

    A URL opens as a stream of ranged requests with read-ahead (:meth:`remote.RemoteFile.stream`).

    Raises:
        SourceNotFoundError: no file at ``path`` (also a FileNotFoundError).
    """
    name = os.fspath(path)
    if is_url(name):
        return remote.RemoteFile(name, file_size(name, storage_options), storage_options).stream()
    try:
        return open(local_path(name), "rb", buffering=0)
    except FileNotFoundError:
        raise SourceNotFoundError(f"no such file: {os.fspath(path)!r}") from None


@contextmanager
def open_records_stream(
    path: PathLike, compression: Compression, storage_options: StorageOptions = None
) -> Iterator[BinaryIO]:
    """Opens ``path`` for reading its (decompressed) record stream.

    Args:
        path: a local file path or a URL.
        compression: as returned by :func:`resolve_compression`.
        storage_options: for the file system of a URL.

    Yields:
        A binary stream positioned at the start of the (uncompressed) records.
    """
    raw = open_binary(path, storage_options)
    stream: BinaryIO = (
        raw if compression is None else InflatingReader(raw, compression)  # type: ignore[assignment]
    )
    try:
        yield stream
    finally:
        stream.close()
