"""Where a dataset's index files are read from, and where the index of a shard that has none is
made and kept: straight from the file system or store (:class:`DirectIndexes`), or through the
node's cache of remote shards (:class:`CachedIndexes`). Chosen once per dataset
(:func:`index_files`); the index's resolving (:mod:`.index`) does not look behind it.

Also the one place an index file's bytes are decoded (either format, told apart by the compressed
index's magic) and an index is checked against its data file.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from typing import Any

import numpy as np
import numpy.typing as npt

from ..compressed.index import (
    CompressedIndex,
    check_compressed_index,
    decode_compressed_index,
    encode_compressed_index,
    is_compressed_index,
)
from ..compressed.inflate import build_compressed_index
from ..index import build_index, check_index, decode_index, encode_index, read_index_bytes
from ..io import StorageOptions, is_url, resolve_compression
from ..reader import OnError
from ..remote import file_info
from ..remote.cache import ShardCache
from ..remote.cached import CachedFile, file_version, read_through

__all__ = [
    "CachedIndexes",
    "DirectIndexes",
    "IndexFiles",
    "check_shard_index",
    "decode_shard_index",
    "index_files",
]

logger = logging.getLogger(__name__)

ShardIndex = npt.NDArray[np.int64] | CompressedIndex
"""A plain file's ``(offset, framed_size)`` table, or a compressed file's index."""


def decode_shard_index(data: bytes, index_path: str, data_path: str, data_size: int | None) -> ShardIndex:
    """An index file's bytes decoded, of either kind.

    Raises:
        IndexFormatError: the bytes are damaged or in neither format.
    """
    if is_compressed_index(data):
        return decode_compressed_index(data, index_path, data_size=data_size, data_path=data_path)
    return decode_index(data, index_path)


def check_shard_index(
    found: ShardIndex,
    index_path: str,
    data_path: str,
    options: StorageOptions,
    allow_damaged_gaps: bool,
    size: int | None = None,
) -> ShardIndex:
    """``found``, checked against its data file (``allow_damaged_gaps``: see
    :func:`~torch_tfrecord.records.index.check_index`).

    Raises:
        StaleIndexError: it does not describe ``data_path``.
    """
    gaps = allow_damaged_gaps
    if isinstance(found, CompressedIndex):
        check_compressed_index(
            found, data_path, index_path, allow_damaged=gaps, storage_options=options, size=size
        )
    else:
        check_index(found, data_path, index_path, allow_damaged_gaps=gaps, storage_options=options, size=size)
    return found


def _scanned(path: str, on_error: OnError, options: StorageOptions, compressed: bool | None) -> ShardIndex:
    if compressed is None:
        compressed = resolve_compression("auto", path, options) is not None
    if compressed:
        return build_compressed_index(path, on_error=on_error, storage_options=options)
    return build_index(path, on_error=on_error, storage_options=options)


class IndexFiles(ABC):
    """How one dataset reads its index files and indexes a shard that has none."""

    def __init__(self, options: StorageOptions) -> None:
        self.options = options

    @abstractmethod
    def read(self, index_path: str, limit: int, info: dict[str, Any] | None = None) -> bytes:
        """The bytes of an index file, at most ``limit`` (``info``: its fsspec info, when known).

        Raises:
            IndexFormatError: the file is larger than ``limit`` (nothing more read).
        """

    @abstractmethod
    def scan(
        self,
        path: str,
        on_error: OnError,
        info: dict[str, Any] | None = None,
        *,
        compressed: bool | None = None,
    ) -> ShardIndex:
        """The index of a shard that has no index file, made by one scan (``info``: the shard's
        fsspec info, when known; ``compressed``: whether it is GZIP / ZLIB, None: told by its
        name and first bytes)."""


class DirectIndexes(IndexFiles):
    """Index files read from where they are; a shard without one scanned in memory, every time."""

    def read(self, index_path: str, limit: int, info: dict[str, Any] | None = None) -> bytes:
        return read_index_bytes(index_path, self.options, limit)

    def scan(
        self,
        path: str,
        on_error: OnError,
        info: dict[str, Any] | None = None,
        *,
        compressed: bool | None = None,
    ) -> ShardIndex:
        found = _scanned(path, on_error, self.options, compressed)
        logger.info(
            "no index for %r: scanned it in memory (%d records); `tfrecord-index build` saves one",
            path,
            len(found.table if isinstance(found, CompressedIndex) else found),
        )
        return found


class CachedIndexes(IndexFiles):
    """Remote index files read through the node's cache; a remote shard without one scanned from its
    cached copy, the scanned index kept in the cache too (a later run neither downloads nor scans it
    again). Local files as :class:`DirectIndexes` reads them."""

    def __init__(self, options: StorageOptions, cache: ShardCache) -> None:
        super().__init__(options)
        self.cache = cache
        self.direct = DirectIndexes(options)

    def read(self, index_path: str, limit: int, info: dict[str, Any] | None = None) -> bytes:
        if not is_url(index_path):
            return self.direct.read(index_path, limit, info)
        return read_through(self.cache, index_path, self.options, info, limit=limit)

    def scan(
        self,
        path: str,
        on_error: OnError,
        info: dict[str, Any] | None = None,
        *,
        compressed: bool | None = None,
    ) -> ShardIndex:
        if not is_url(path):
            return self.direct.scan(path, on_error, info, compressed=compressed)
        cache, options = self.cache, self.options
        info = file_info(path, options) if info is None else info
        size, version = int(info["size"]), file_version(info)
        name = path + "#scanned-index"
        kept = cache.get_bytes(name, version)
        if kept is not None:  # checked against the cached copy, if there is one (no request)
            copy = cache.lookup(path, size, version)
            where = f"<index of {path!r} kept in {cache.root!r}>"
            found = decode_shard_index(kept, where, copy or path, size)
            gaps = on_error == "skip"
            return check_shard_index(found, where, copy or path, None if copy else options, gaps, size)
        copy = CachedFile(path, size, version, options, cache).wait()
        source, source_options = (path, options) if copy is None else (copy, None)
        found = _scanned(source, on_error, source_options, compressed)
        data = encode_compressed_index(found) if isinstance(found, CompressedIndex) else encode_index(found)
        cache.put_bytes(name, version, data)
        logger.info("no index for %r: scanned its cached copy once, kept in %r", path, cache.root)
        return found


def index_files(options: StorageOptions, cache: ShardCache | None) -> IndexFiles:
    """How a dataset with ``cache`` (None: none) reads its indexes."""
    return DirectIndexes(options) if cache is None else CachedIndexes(options, cache)
