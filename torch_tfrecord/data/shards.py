"""The records of a dataset: its shard files, their indexes, and reading records by global id.

Record ids count through the shards in sorted path order (shard 0's records first). Files are
opened lazily in whichever process reads and never pickled, so one object can be handed to
DataLoader workers (fork or spawn) or to a pool.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from ..errors import TFRecordError
from ..records.compressed.index import (
    CompressedIndex,
)
from ..records.compressed.shard import CompressedShard
from ..records.entries import read_entries_at, read_ranges_into
from ..records.io import (
    PathLike,
    StorageOptions,
    expand_sources,
    file_size,
    is_url,
)
from ..records.reader import OnError
from ..records.remote import RemoteFile, for_each_path
from ..records.remote.cache import ShardCache
from ..records.remote.cached import CachedFile
from .compressed_shards import Inflaters
from .guards import check_sources
from .local_files import LocalFiles, grown
from .remote_shards import CacheDir, RemoteShards, make_cache
from .shard_index import IndexArg, ShardIndex, resolve_index

__all__ = ["RecordFiles", "record_files"]

logger = logging.getLogger(__name__)

_MAX_OPEN_FILES = 64

T = TypeVar("T")


class RecordFiles:
    """Shard files and their indexes, read by global record id.

    Local files are read with positional reads on descriptors; URLs through a
    :class:`~torch_tfrecord.records.remote.RemoteFile` each (ranged requests, merged and retried);
    GZIP / ZLIB files through a :class:`~torch_tfrecord.records.compressed.shard.CompressedShard`
    each (their offsets count in the uncompressed stream). With a ``cache``, a remote shard is
    fetched whole into it (once per node) and read as a local file once its copy is complete.

    Args:
        paths: the data files (paths or URLs), in record-id order.
        tables: each file's ``(offset, framed_size)`` index table, or compressed index.
        storage_options: for the fsspec file system of URLs.
        cache: the node's cache of remote shards, or None.

    Attributes:
        cache_bytes: inflated bytes each compressed shard keeps (a block shuffle's window).
    """

    def __init__(
        self,
        paths: Sequence[str],
        tables: Sequence[ShardIndex],
        storage_options: StorageOptions = None,
        cache: ShardCache | None = None,
    ) -> None:
        if len(paths) != len(tables):
            raise ValueError(f"{len(paths)} paths but {len(tables)} index tables")
        self.paths = list(paths)
        self.storage_options = dict(storage_options or {})
        self.compressed = {i: table for i, table in enumerate(tables) if isinstance(table, CompressedIndex)}
        self.tables = [
            np.ascontiguousarray(
                table.table if isinstance(table, CompressedIndex) else table, dtype=np.int64
            ).reshape(-1, 2)
            for table in tables
        ]
        self.cache = cache
        # (a compressed file's size is looked up only to cache it: its index has what reading needs)
        self.remote = RemoteShards(self.paths, self.storage_options, cache, set(self.compressed))
        # The size of each record stream: a compressed file's uncompressed size.
        self.sizes = [
            self.compressed[i].uncompressed_size
            if i in self.compressed
            else self.remote.sizes[i]
            if is_url(path)
            else file_size(path)
            for i, path in enumerate(self.paths)
        ]
        self._inflaters = Inflaters(self.paths, self.compressed, self.storage_options, self.remote)
        self._remote_lock = threading.Lock()  # shards of one batch are opened from several threads
        # Whether each shard is read remotely here (a remote one is not once its cached copy is).
        self._remote_paths = [is_url(path) for path in self.paths]
        self.counts = np.array([len(table) for table in self.tables], dtype=np.int64)
        self.starts = np.concatenate([[0], np.cumsum(self.counts)]).astype(np.int64)
        self._local = LocalFiles(self.paths, _MAX_OPEN_FILES)
        self._size_table = np.array(self.sizes, dtype=np.int64)  # as the native batch read takes them

    @classmethod
    def from_sources(
        cls,
        sources: PathLike | Sequence[PathLike],
        index: IndexArg = None,
        storage_options: StorageOptions = None,
        on_error: OnError = "raise",
        cache_dir: CacheDir = None,
        cache_limit: int | str | None = None,
    ) -> RecordFiles:
        """Expands paths / globs / directories / URLs (sorted) and resolves every file's index
        (``on_error``: see :func:`resolve_index`); remote files are cached in ``cache_dir``
        (see :data:`~torch_tfrecord.data.remote_shards.CacheDir`), at most ``cache_limit`` bytes.

        Raises:
            ValueError: ``sources`` is an empty list.
        """
        check_sources(sources)
        paths = expand_sources(sources, storage_options)
        cache = make_cache(paths, cache_dir, cache_limit)
        indexes = for_each_path(
            lambda path: resolve_index(path, index, storage_options, on_error, cache), paths
        )
        return cls(paths, indexes, storage_options, cache)

    def select(self, ranges: Sequence[tuple[int, int, int]]) -> RecordFiles:
        """The records ``[start, stop)`` of shard ``shard`` for each ``(shard, start, stop)``, as files.

        The result reads only those records, in the order given (a shard may appear more than
        once); its record ids count through the ranges. Nothing is read or scanned again.

        Raises:
            IndexError: a shard number out of range.
            ValueError: a range that is not within its shard's records, or a compressed shard.
        """
        paths, tables = [], []
        for shard, start, stop in ranges:
            if not 0 <= shard < len(self.paths):
                raise IndexError(f"shard {shard} out of range for {len(self.paths)} files")
            if not 0 <= start <= stop <= self.counts[shard]:
                raise ValueError(
                    f"records [{start}, {stop}) are not within the {int(self.counts[shard])} records of "
                    f"{self.paths[shard]!r}"
                )
            if shard in self.compressed:
                raise ValueError(
                    f"{self.paths[shard]!r} is {self.compressed[shard].compression.upper()}-compressed: "
                    "a selection of its records is not supported (select from uncompressed shards)"
                )
            paths.append(self.paths[shard])
            tables.append(self.tables[shard][start:stop])
        return RecordFiles(paths, tables, self.storage_options, self.cache)

    @property
    def remote_requests(self) -> int:
        """Ranged requests this process has made to remote files (none for local ones)."""
        return self.remote.requests.value

    @property
    def num_records(self) -> int:
        return int(self.starts[-1])

    @property
    def shard_sizes(self) -> tuple[int, ...]:
        return tuple(int(count) for count in self.counts)

    @property
    def fingerprint(self) -> str:
        """Identifies the data: file names, sizes and record counts (not the directory they are in)."""
        digest = hashlib.sha256()
        for path, size, table in zip(self.paths, self.sizes, self.tables, strict=True):
            # Part of a file (select()) also says where it starts; a whole file reads as it always did.
            start = f"\0{int(table[0, 0])}" if len(table) and table[0, 0] else ""
            digest.update(f"{os.path.basename(path)}\0{size}\0{len(table)}{start}\n".encode())
        return digest.hexdigest()[:32]

    def locate(self, record_ids: npt.ArrayLike) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """``(shard, record number in the shard)`` of each global record id."""
        ids = np.asarray(record_ids, dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= self.num_records):
            raise IndexError(f"record ids must lie in [0, {self.num_records})")
        shards = np.searchsorted(self.starts, ids, side="right") - 1
        return shards, ids - self.starts[shards]

    def describe(self, record_id: int) -> str:
        """``"record 17 of 'train-00001.tfrecord'"``, for error messages."""
        shards, local = self.locate([record_id])
        return f"record {int(local[0])} of {self.paths[int(shards[0])]!r}"

    def read(
        self, record_ids: npt.ArrayLike, *, verify_crc: bool = True, on_error: OnError = "raise"
    ) -> list[bytes | None]:
        """The payloads of the given records, in the given order.

        Records of one file are read in file order, neighbours in one request. With
        ``on_error="skip"`` a damaged record comes back as None (and is logged); otherwise
        its error is raised.
        """
        ids = np.asarray(record_ids, dtype=np.int64)
        result: list[bytes | None] = [None] * len(ids)
        if not len(ids):
            return result
        by_id = np.argsort(ids, kind="stable")  # global id order is file order
        shards, local = self.locate(ids[by_id])
        bounds = np.flatnonzero(np.diff(shards)) + 1
        groups = np.split(np.arange(len(ids)), bounds)
        read = self._each_shard(
            lambda group: self._read_shard(int(shards[group[0]]), local[group], verify_crc, on_error), groups
        )
        for group, payloads in zip(groups, read, strict=True):
            for place, payload in zip(by_id[group].tolist(), payloads, strict=True):
                result[place] = payload
        return result

    def read_framed(
        self, record_ids: npt.ArrayLike, scratch: bytearray | None = None
    ) -> tuple[bytearray, npt.NDArray[np.int64], npt.NDArray[np.int64]] | None:
        """The framed records (header, payload, CRCs) of the given ids, read into one buffer.

        For the native decoder: one buffer per batch, one positional read per run of records
        that lie back to back in a file, no Python object per record.

        Args:
            record_ids: global record ids, in the order wanted.
            scratch: a buffer to read into (grown as needed) instead of a new one, so that
                batch after batch reuses memory that is already mapped.

        Returns:
            ``(buffer, starts, framed_sizes)``, record ``i`` of ``record_ids`` at
            ``buffer[starts[i]:starts[i] + framed_sizes[i]]``; None when a file is shorter
            than its index says or a read fails (:meth:`read` then reports which record and why).
        """
        from ..records.gather import gather, read_into

        ids = np.asarray(record_ids, dtype=np.int64)
        if not len(ids):
            return bytearray(), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        if not self.compressed and not any(self._remote_paths):  # every shard a local plain file
            framed = self._local.gather(
                gather,
                ids,
                self.starts,
                self.tables,
                self._size_table,
                scratch,
                self._open_local,
                self.locate,
            )
            if framed is not False:
                return framed
        by_id = np.argsort(ids, kind="stable")  # global id order is file order
        shards, local = self.locate(ids[by_id])
        entries = np.empty((len(ids), 2), dtype=np.int64)
        bounds = [0, *(np.flatnonzero(np.diff(shards)) + 1).tolist(), len(ids)]
        for first, stop in itertools.pairwise(bounds):
            entries[first:stop] = self.tables[int(shards[first])][local[first:stop]]
        positions = np.zeros(len(ids), dtype=np.int64)
        np.cumsum(entries[:-1, 1], out=positions[1:])
        total = int(entries[:, 1].sum())
        buffer = bytearray(total) if scratch is None else grown(scratch, total)
        remote_reads = []
        for first, stop in itertools.pairwise(bounds):
            shard = int(shards[first])
            offsets = np.ascontiguousarray(entries[first:stop, 0])
            sizes = np.ascontiguousarray(entries[first:stop, 1])
            if int((offsets + sizes).max()) > self.sizes[shard]:
                return None
            source = self._source(shard)
            if not isinstance(source, int):
                remote_reads.append((source, offsets, sizes, buffer, int(positions[first])))
                continue
            try:
                complete = read_into(source, offsets, sizes, buffer, int(positions[first]))
            except OSError:  # the per-record read meets it again and raises it
                return None
            if complete != stop - first:
                return None

        def copy(read: tuple[Any, ...]) -> bool:
            return read_ranges_into(*read)

        if remote_reads and not all(self._each_shard(copy, remote_reads)):
            return None
        starts = np.empty_like(positions)
        framed_sizes = np.empty_like(positions)
        starts[by_id] = positions
        framed_sizes[by_id] = entries[:, 1]
        return buffer, starts, framed_sizes

    def _each_shard(self, read: Callable[[Any], T], groups: Sequence[Any]) -> list[T]:
        """``read`` of each group of records of one shard. Remote shards are read at the same
        time (their requests overlap instead of adding up); local ones here, one after another
        (and so do mixed ones: a descriptor may be closed for another only in this thread)."""
        if len(groups) < 2 or not all(self._remote_paths):
            return [read(group) for group in groups]
        return self.remote.each(read, groups)

    def _source(self, shard: int) -> int | RemoteFile | CachedFile | CompressedShard:
        """How shard ``shard`` is read in this process: a descriptor (of a local file or of a
        remote one's cached copy), a remote or a compressed file."""
        if shard in self.compressed:
            return self._inflaters.get(shard)
        if not self._remote_paths[shard]:
            try:
                return self._local.fd(shard)
            except FileNotFoundError:  # a cached copy, evicted before this process opened it
                if not is_url(self.paths[shard]):
                    raise
                self._read_remotely(shard)
        copy = self.remote.copy(shard)
        if copy is None:
            return self.remote.source(shard)
        with self._remote_lock:  # read as a local file from now on
            self._local.paths[shard] = copy
            self._remote_paths[shard] = False
        return self._source(shard)

    def _open_local(self, shard: int) -> bool:
        """Opens shard ``shard`` as a local file; False when it is read remotely (its copy gone)."""
        return isinstance(self._source(shard), int)

    def _read_remotely(self, shard: int) -> None:
        with self._remote_lock:
            self._local.forget(shard)
            self._local.paths[shard] = self.paths[shard]
            self._remote_paths[shard] = True

    def hold_window(self, records: int) -> None:
        """Lets each compressed shard keep about ``records`` records inflated (a block
        shuffle's window), so the window is inflated once however its records are asked for."""
        self._inflaters.hold_window(records)

    @property
    def cache_bytes(self) -> int:
        return self._inflaters.cache_bytes

    def _read_shard(
        self, shard: int, numbers: npt.NDArray[np.int64], verify_crc: bool, on_error: OnError
    ) -> list[bytes | None]:
        path, size, table = self.paths[shard], self.sizes[shard], self.tables[shard]
        refetched = False
        while True:
            fd = self._source(shard)
            try:
                return list(read_entries_at(fd, path, size, table[numbers], numbers, verify_crc=verify_crc))
            except TFRecordError as error:
                copy = self._cached_copy_read(shard)
                if copy is not None and refetched:
                    error.args = (f"{error} (read from {copy!r}, its cached copy, fetched again once)",)
                cached = self.cache is not None and is_url(path) and shard not in self.compressed
                if not cached or refetched:
                    if on_error == "raise":
                        raise
                    break
                if copy is None and self.remote.fetch(shard) is not None:
                    continue  # read before its copy was complete: now from the copy
                logger.warning("%s: in the cached copy %r; fetching it again", error, copy)
                self._refetch(shard)
                refetched = True
        payloads: list[bytes | None] = []
        for number in numbers.tolist():  # find the damaged ones, keep the rest
            one = np.array([number], dtype=np.int64)
            try:
                payloads.extend(read_entries_at(fd, path, size, table[one], one, verify_crc=verify_crc))
            except TFRecordError as error:
                logger.warning("skipping record: %s", error)
                payloads.append(None)
        return payloads

    def _cached_copy_read(self, shard: int) -> str | None:
        """The cached copy that shard ``shard`` is read from here, if it is."""
        if shard in self.compressed or self._remote_paths[shard] or not is_url(self.paths[shard]):
            return None
        return self._local.paths[shard]

    def _refetch(self, shard: int) -> None:
        self._read_remotely(shard)
        self.remote.discard(shard)
        self.remote.fetch(shard)

    def close(self) -> None:
        """Closes the files this process opened (they reopen on the next read)."""
        self._local.close()
        self.remote.close()
        self._inflaters.close()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_remote_lock"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._remote_lock = threading.Lock()

    def __del__(self) -> None:
        try:
            self.close()
        except (OSError, AttributeError):  # (AttributeError: at interpreter exit, modules are gone)
            pass


def record_files(
    sources: PathLike | Sequence[PathLike] | RecordFiles,
    index: IndexArg,
    storage_options: StorageOptions,
    on_error: OnError = "raise",
    cache_dir: CacheDir = None,
    cache_limit: int | str | None = None,
) -> RecordFiles:
    """The files of ``sources`` (see :meth:`RecordFiles.from_sources`); a :class:`RecordFiles` made
    beforehand (e.g. a selection of records, as ``tt.from_tfds`` makes) is used as it is."""
    if isinstance(sources, RecordFiles):
        if (
            index is not None
            or storage_options is not None
            or cache_dir is not None
            or cache_limit is not None
        ):
            raise ValueError(
                "index=, storage_options=, cache_dir= and cache_limit= belong to the RecordFiles "
                "passed as sources"
            )
        return sources
    return RecordFiles.from_sources(sources, index, storage_options, on_error, cache_dir, cache_limit)
