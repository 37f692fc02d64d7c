"""The index of each shard of a dataset: found beside it, by pattern, directory, mapping or
function, or made by one scan; always checked against its file (a stale index is an error).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import SourceNotFoundError
from ..records.compressed.index import (
    CompressedIndex,
    check_compressed_index,
    decode_compressed_index,
    default_compressed_index_path,
    encode_compressed_index,
    is_compressed_index,
)
from ..records.compressed.inflate import build_compressed_index
from ..records.index import (
    build_index,
    check_index,
    decode_index,
    default_index_path,
    encode_index,
    max_index_bytes,
    read_index_bytes,
)
from ..records.io import SourceListing, StorageOptions, exists, file_size, is_url, join, resolve_compression
from ..records.reader import OnError
from ..records.remote import file_info
from ..records.remote.cache import ShardCache
from ..records.remote.cached import CachedFile, file_version, read_through

__all__ = ["IndexArg", "ShardIndex", "load_shard_index", "resolve_index"]

logger = logging.getLogger(__name__)

IndexArg = str | Mapping[str, str | npt.ArrayLike] | Callable[[str], str] | None
"""Where indexes come from: None (``<path>.idx`` or a scan), a pattern such as
``"/indexes/{name}.idx"`` (fields ``path``, ``name``, ``stem``, ``dir``), a directory holding
``<name>.idx`` files (a string with no ``{``), a mapping from data
path (or file name) to index path or ``(offset, framed_size)`` table, or a function of the path."""

ShardIndex = npt.NDArray[np.int64] | CompressedIndex
"""A plain file's ``(offset, framed_size)`` table, or a compressed file's index."""


def _pattern_path(pattern: str, path: str) -> str:
    name = os.path.basename(path)
    fields = {"path": path, "name": name, "stem": os.path.splitext(name)[0], "dir": os.path.dirname(path)}
    try:
        return pattern.format(**fields)
    except (KeyError, IndexError) as error:
        raise ValueError(
            f"index pattern {pattern!r} uses an unknown field {error}; use {{path}}, {{name}}, {{stem}} "
            "or {dir}"
        ) from None


def resolve_index(
    path: str,
    index: IndexArg = None,
    storage_options: StorageOptions = None,
    on_error: OnError = "raise",
    cache: ShardCache | None = None,
    listing: SourceListing | None = None,
) -> ShardIndex:
    """The index of one data file, checked against the file: a plain file's ``(offset,
    framed_size)`` table, or a GZIP / ZLIB file's :class:`CompressedIndex`.

    Args:
        path: the data file (a path or URL).
        index: see :data:`IndexArg`. Without one, ``<path>.cidx`` or ``<path>.idx`` is used
            when it exists, else the file is scanned once in memory (a compressed file inflated).
        storage_options: for the fsspec file system of URLs.
        on_error: ``"skip"``: a damaged file without an index is indexed in its intact records
            (the damaged regions logged; a compressed file keeps its records before the
            damage), and an index that leaves damaged regions out (built with
            ``on_error="skip"``) is accepted.
        cache: the node's cache of remote files: a remote index file is read through it, and
            a remote file without one is scanned from its cached copy, the scanned index kept
            there too (a later run neither downloads nor scans it again).
        listing: what listing the sources saw (sizes, which index files exist): what it knows
            is not looked up again, so a remote shard with an index beside it costs one request.

    Raises:
        StaleIndexError: the index does not describe the file (never silently rebuilt).
        SourceNotFoundError: a named index file does not exist.
    """
    options = storage_options
    gaps = on_error == "skip"
    if cache is not None and not is_url(path):
        cache = None
    listing = listing or SourceListing([])
    known = listing.info(path)
    size = None if known is None else int(known["size"])

    def load(index_path: str) -> ShardIndex:
        return load_shard_index(
            index_path, path, options, allow_damaged_gaps=gaps, cache=cache, data_size=size,
            index_info=listing.info(index_path),
        )  # fmt: skip

    if index is None:
        for index_path in (default_compressed_index_path(path), default_index_path(path)):
            if listing.exists(index_path, options):
                return load(index_path)
        if cache is not None:
            return scan_cached(path, options, on_error, cache, known)
        compression = resolve_compression("auto", path, options)
        if compression is not None:
            found: ShardIndex = build_compressed_index(path, on_error=on_error, storage_options=options)
        else:
            found = build_index(path, on_error=on_error, storage_options=options)
        logger.info(
            "no index for %r: scanned it in memory (%d records); `tfrecord-index build` saves one",
            path,
            len(found.table if isinstance(found, CompressedIndex) else found),
        )
        return found
    if isinstance(index, str):
        if "{" in index:
            return load(_pattern_path(index, path))
        compressed = join(index, os.path.basename(default_compressed_index_path(path)))
        if exists(compressed, options):
            return load(compressed)
        return load(join(index, os.path.basename(default_index_path(path))))
    if isinstance(index, Mapping):
        entry = index.get(path, index.get(os.path.basename(path)))
        if entry is None:
            raise SourceNotFoundError(f"the index mapping has no entry for {path!r}")
        if isinstance(entry, str | os.PathLike):
            return load(os.fspath(entry))
        table = np.asarray(entry, dtype=np.int64).reshape(-1, 2)
        check_index(
            table, path, "<index mapping>", allow_damaged_gaps=gaps, storage_options=options, size=size
        )
        return table
    if callable(index):
        return load(os.fspath(index(path)))
    raise TypeError(f"index must be None, a pattern, a mapping or a function, not {type(index).__name__}")


def load_shard_index(
    index_path: str,
    data_path: str,
    options: StorageOptions = None,
    *,
    allow_damaged_gaps: bool = False,
    cache: ShardCache | None = None,
    data_size: int | None = None,
    index_info: dict[str, Any] | None = None,
) -> ShardIndex:
    """Reads an index file of either kind (told apart by the compressed index's magic) and
    checks it against its data file (``allow_damaged_gaps``: see
    :func:`~torch_tfrecord.records.index.check_index`); a remote one through ``cache`` when given.
    ``data_size`` and ``index_info``: the data file's size and the index file's fsspec info, when
    a listing said them (not looked up again).

    Raises:
        IndexFormatError: the index file is damaged or in neither format.
        StaleIndexError: it does not describe ``data_path``.
    """
    # what an honest index of the data file can hold: read no more
    size = file_size(data_path, options) if data_size is None else data_size
    if cache is not None and is_url(index_path):
        data = read_through(cache, index_path, options, index_info, limit=max_index_bytes(size))
    else:
        data = read_index_bytes(index_path, options, max_index_bytes(size))
    return _checked(data, index_path, data_path, options, allow_damaged_gaps, size)


def _checked(
    data: bytes,
    index_path: str,
    data_path: str,
    options: StorageOptions,
    allow_damaged_gaps: bool,
    size: int | None = None,
) -> ShardIndex:
    gaps = allow_damaged_gaps
    if is_compressed_index(data):
        found = decode_compressed_index(data, index_path, data_size=size, data_path=data_path)
        check_compressed_index(
            found, data_path, index_path, allow_damaged=gaps, storage_options=options, size=size
        )
        return found
    table = decode_index(data, index_path)
    check_index(table, data_path, index_path, allow_damaged_gaps=gaps, storage_options=options, size=size)
    return table


def scan_cached(
    path: str,
    options: StorageOptions,
    on_error: OnError,
    cache: ShardCache,
    info: dict[str, Any] | None = None,
) -> ShardIndex:
    """The index of a remote file that has none: the one scanned before and kept in ``cache``,
    else made by scanning the file's cached copy (fetched now) and kept there. ``info``: the
    file's fsspec info when known."""
    info = file_info(path, options) if info is None else info
    version = file_version(info)
    name = path + "#scanned-index"
    kept = cache.get_bytes(name, version)
    if kept is not None:  # checked against the cached copy, if there is one (no request)
        copy = cache.lookup(path, int(info["size"]), version)
        where = f"<index of {path!r} kept in {cache.root!r}>"
        size = int(info["size"])
        return _checked(kept, where, copy or path, None if copy else options, on_error == "skip", size)
    copy = CachedFile(path, int(info["size"]), version, options, cache).wait()
    source, source_options = (path, options) if copy is None else (copy, None)
    found: ShardIndex
    if resolve_compression("auto", source, source_options) is not None:
        found = build_compressed_index(source, on_error=on_error, storage_options=source_options)
        data = encode_compressed_index(found)
    else:
        found = build_index(source, on_error=on_error, storage_options=source_options)
        data = encode_index(found)
    cache.put_bytes(name, version, data)
    logger.info("no index for %r: scanned its cached copy once, kept in %r", path, cache.root)
    return found
