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

from ...errors import SourceNotFoundError
from ..compressed.index import (
    default_compressed_index_path,
)
from ..index import (
    check_index,
    default_index_path,
    max_index_bytes,
)
from ..io import StorageOptions, exists, file_size, join
from ..listing import SourceListing
from ..reader import OnError
from ..remote.cache import ShardCache
from .index_files import IndexFiles, ShardIndex, check_shard_index, decode_shard_index, index_files

__all__ = ["IndexArg", "ShardIndex", "load_shard_index", "read_shard_index", "resolve_index"]


logger = logging.getLogger(__name__)

IndexArg = str | Mapping[str, str | npt.ArrayLike] | Callable[[str], str] | None
"""Where indexes come from: None (``<path>.idx`` or a scan), a pattern such as
``"/indexes/{name}.idx"`` (fields ``path``, ``name``, ``stem``, ``dir``), a directory holding
``<name>.idx`` files (a string with no ``{``), a mapping from data
path (or file name) to index path or ``(offset, framed_size)`` table, or a function of the path."""


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
    files: IndexFiles | None = None,
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
        files: how the dataset reads its index files (made from ``storage_options`` and
            ``cache`` when None; one per dataset).
        listing: what listing the sources saw (sizes, which index files exist): what it knows
            is not looked up again, so a remote shard with an index beside it costs one request.

    Raises:
        StaleIndexError: the index does not describe the file (never silently rebuilt).
        SourceNotFoundError: a named index file does not exist.
    """
    options = storage_options
    gaps = on_error == "skip"
    files = index_files(options, cache) if files is None else files
    listing = listing or SourceListing([])
    known = listing.info(path)
    size = None if known is None else int(known["size"])

    def load(index_path: str) -> ShardIndex:
        return load_shard_index(
            index_path, path, options, allow_damaged_gaps=gaps, data_size=size,
            index_info=listing.info(index_path), files=files,
        )  # fmt: skip

    if index is None:
        for index_path in (default_compressed_index_path(path), default_index_path(path)):
            if listing.exists(index_path, options):
                return load(index_path)
        return files.scan(path, on_error, known)
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
    files: IndexFiles | None = None,
) -> ShardIndex:
    """Reads an index file of either kind and checks it against its data file
    (``allow_damaged_gaps``: see :func:`~torch_tfrecord.records.index.check_index`); a remote one
    through ``cache`` when given. ``data_size`` and ``index_info``: the data file's size and the
    index file's fsspec info, when a listing said them (not looked up again). ``files``: how the
    dataset reads its index files (made from ``options`` and ``cache`` when None).

    Raises:
        IndexFormatError: the index file is damaged or in neither format.
        StaleIndexError: it does not describe ``data_path``.
    """
    size = file_size(data_path, options) if data_size is None else data_size
    files = index_files(options, cache) if files is None else files
    found = read_shard_index(index_path, data_path, size, files, index_info)
    return check_shard_index(found, index_path, data_path, options, allow_damaged_gaps, size)


def read_shard_index(
    index_path: str,
    data_path: str,
    data_size: int,
    files: IndexFiles,
    index_info: dict[str, Any] | None = None,
) -> ShardIndex:
    """An index file read and decoded, not yet checked against its data file: the one place an
    index file is read. At most what an honest index of ``data_size`` bytes can hold is read
    (``index_info``: its fsspec info, when a listing said it).

    Raises:
        IndexFormatError: the index file is damaged, in neither format, or too large.
    """
    data = files.read(index_path, max_index_bytes(data_size), index_info)
    return decode_shard_index(data, index_path, data_path, data_size)
