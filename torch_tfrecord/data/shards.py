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
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal, TypeVar

import numpy as np
import numpy.typing as npt

from ..errors import TFRecordError
from ..records.compressed.index import (
    CompressedIndex,
)
from ..records.compressed.inflate import SEGMENT
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
from ..records.remote import RemoteFile, RequestCounter
from .guards import check_sources
from .local_files import LocalFiles, grown
from .shard_index import IndexArg, ShardIndex, resolve_index

__all__ = ["RecordFiles", "record_files"]

logger = logging.getLogger(__name__)

_MAX_OPEN_FILES = 64
# Local records of a batch at most this far apart in a file are read with one pread, the bytes
# between them included: a syscall costs about as much as copying this many bytes (bench_dataset).
_COALESCE_GAP = 4096
# Compressed shards inflating at once in a process (each holds inflated segments and a thread).
_MAX_OPEN_INFLATERS = 8
# Remote shards of one batch read at the same time (each shard's ranges also go concurrently).
_REMOTE_SHARDS_AT_ONCE = 16

T = TypeVar("T")


class RecordFiles:
    """Shard files and their indexes, read by global record id.

    Local files are read with positional reads on descriptors; URLs through a
    :class:`~torch_tfrecord.records.remote.RemoteFile` each (ranged requests, merged and retried);
    GZIP / ZLIB files through a :class:`~torch_tfrecord.records.compressed.shard.CompressedShard`
    each (their offsets count in the uncompressed stream).

    Args:
        paths: the data files (paths or URLs), in record-id order.
        tables: each file's ``(offset, framed_size)`` index table, or compressed index.
        storage_options: for the fsspec file system of URLs.

    Attributes:
        cache_bytes: inflated bytes each compressed shard keeps (a block shuffle's window).
    """

    def __init__(
        self,
        paths: Sequence[str],
        tables: Sequence[ShardIndex],
        storage_options: StorageOptions = None,
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
        # The size of each record stream: a compressed file's uncompressed size.
        self.sizes = [
            self.compressed[i].uncompressed_size
            if i in self.compressed
            else file_size(path, self.storage_options)
            for i, path in enumerate(self.paths)
        ]
        self.cache_bytes = 0
        self._inflaters: OrderedDict[int, CompressedShard] = OrderedDict()
        # Remote files in use here, least recently used first (each may hold a read-ahead window).
        self._remote: OrderedDict[int, RemoteFile] = OrderedDict()
        self._requests = RequestCounter()  # of every remote file, those let go included
        self._remote_lock = threading.Lock()  # shards of one batch are opened from several threads
        self._remote_paths = [is_url(path) for path in self.paths]
        self._all_remote = bool(self.paths) and all(self._remote_paths)
        self._pool: ThreadPoolExecutor | None = None
        self._pool_pid = -1
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
    ) -> RecordFiles:
        """Expands paths / globs / directories / URLs (sorted) and resolves every file's index
        (``on_error``: see :func:`resolve_index`).

        Raises:
            ValueError: ``sources`` is an empty list.
        """
        check_sources(sources)
        paths = expand_sources(sources, storage_options)
        indexes = [resolve_index(path, index, storage_options, on_error) for path in paths]
        return cls(paths, indexes, storage_options)

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
        return RecordFiles(paths, tables, self.storage_options)

    @property
    def remote_requests(self) -> int:
        """Ranged requests this process has made to remote files (none for local ones)."""
        return self._requests.value

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
            framed = self._gather(gather, ids, scratch)
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
            if shard in self.compressed or is_url(self.paths[shard]):
                remote_reads.append((shard, offsets, sizes, buffer, int(positions[first])))
                continue
            try:
                complete = read_into(self._local.fd(shard), offsets, sizes, buffer, int(positions[first]))
            except OSError:  # the per-record read meets it again and raises it
                return None
            if complete != stop - first:
                return None

        def copy(read: tuple[Any, ...]) -> bool:
            source = self._source(read[0])
            assert not isinstance(source, int)  # a remote or compressed shard
            return read_ranges_into(source, *read[1:])

        if remote_reads and not all(self._each_shard(copy, remote_reads)):
            return None
        starts = np.empty_like(positions)
        framed_sizes = np.empty_like(positions)
        starts[by_id] = positions
        framed_sizes[by_id] = entries[:, 1]
        return buffer, starts, framed_sizes

    def _gather(
        self,
        gather: Callable[..., tuple[int, int]],
        ids: npt.NDArray[np.int64],
        scratch: bytearray | None,
        gap: int = _COALESCE_GAP,
    ) -> tuple[bytearray, npt.NDArray[np.int64], npt.NDArray[np.int64]] | Literal[False] | None:
        """:meth:`read_framed` of local files in one native call; False when the batch's shards
        do not all stay open at once (the loop per shard then reads it)."""
        buffer = bytearray() if scratch is None else scratch
        starts = np.empty(len(ids), dtype=np.int64)
        sizes = np.empty(len(ids), dtype=np.int64)
        for _ in range(_MAX_OPEN_FILES + 1):
            status, value = gather(
                ids,
                self.starts,
                self.tables,
                self._local.fds,
                self._size_table,
                self._local.maps,
                buffer,
                starts,
                sizes,
                gap,
            )
            if status == 0:
                return buffer, starts, sizes
            if status == 1:  # opening it may close the least recently used one
                self._local.fd(value)
            elif status == 2:
                buffer = grown(buffer, value)
            elif status == 4:
                self.locate(ids)  # raises the IndexError
            else:
                return None
        return False

    def _each_shard(self, read: Callable[[Any], T], groups: Sequence[Any]) -> list[T]:
        """``read`` of each group of records of one shard. Remote shards are read at the same
        time (their requests overlap instead of adding up); local ones here, one after another
        (and so do mixed ones: a descriptor may be closed for another only in this thread)."""
        if len(groups) < 2 or not self._all_remote:
            return [read(group) for group in groups]
        if self._pool is None or self._pool_pid != os.getpid():
            self._pool = ThreadPoolExecutor(
                _REMOTE_SHARDS_AT_ONCE, thread_name_prefix="torch-tfrecord-shards"
            )
            self._pool_pid = os.getpid()
        return list(self._pool.map(read, groups))

    def _source(self, shard: int) -> int | RemoteFile | CompressedShard:
        """How shard ``shard`` is read in this process: a descriptor, a remote or a compressed file."""
        if shard in self.compressed:
            return self._inflater(shard)
        if not is_url(self.paths[shard]):
            return self._local.fd(shard)
        with self._remote_lock:
            file = self._remote.get(shard)
            if file is not None:
                self._remote.move_to_end(shard)
                return file
            if len(self._remote) >= _MAX_OPEN_FILES:
                _, oldest = self._remote.popitem(last=False)
                oldest.close()  # (waits for a read of it in another thread; it stays usable)
            file = RemoteFile(
                self.paths[shard], self.sizes[shard], self.storage_options, counter=self._requests
            )
            self._remote[shard] = file
            return file

    def hold_window(self, records: int) -> None:
        """Lets each compressed shard keep about ``records`` records inflated (a block
        shuffle's window), so the window is inflated once however its records are asked for."""
        if not self.compressed:
            return
        largest_mean = max(
            index.uncompressed_size / max(1, len(index.table)) for index in self.compressed.values()
        )
        self.cache_bytes = int(records * largest_mean) + 2 * SEGMENT

    def _inflater(self, shard: int) -> CompressedShard:
        with self._remote_lock:
            inflater = self._inflaters.get(shard)
            if inflater is not None:
                self._inflaters.move_to_end(shard)
            else:
                if len(self._inflaters) >= _MAX_OPEN_INFLATERS:
                    self._inflaters.popitem(last=False)[1].close()
                inflater = CompressedShard(
                    self.paths[shard], self.compressed[shard], self.storage_options, self.cache_bytes
                )
                self._inflaters[shard] = inflater
            inflater.cache_bytes = self.cache_bytes
            return inflater

    def _read_shard(
        self, shard: int, numbers: npt.NDArray[np.int64], verify_crc: bool, on_error: OnError
    ) -> list[bytes | None]:
        fd, path, size, table = self._source(shard), self.paths[shard], self.sizes[shard], self.tables[shard]
        try:
            return list(read_entries_at(fd, path, size, table[numbers], numbers, verify_crc=verify_crc))
        except TFRecordError:
            if on_error == "raise":
                raise
        payloads: list[bytes | None] = []
        for number in numbers.tolist():  # find the damaged ones, keep the rest
            one = np.array([number], dtype=np.int64)
            try:
                payloads.extend(read_entries_at(fd, path, size, table[one], one, verify_crc=verify_crc))
            except TFRecordError as error:
                logger.warning("skipping record: %s", error)
                payloads.append(None)
        return payloads

    def close(self) -> None:
        """Closes the files this process opened (they reopen on the next read)."""
        self._local.close()
        for file in self._remote.values():
            file.close()
        for inflater in self._inflaters.values():
            inflater.close()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_remote"] = OrderedDict()
        state["_inflaters"] = OrderedDict()
        state["_remote_lock"] = None
        state["_pool"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._remote_lock = threading.Lock()

    def __del__(self) -> None:
        try:
            self.close()
        except OSError:
            pass


def record_files(
    sources: PathLike | Sequence[PathLike] | RecordFiles,
    index: IndexArg,
    storage_options: StorageOptions,
    on_error: OnError = "raise",
) -> RecordFiles:
    """The files of ``sources``; a :class:`RecordFiles` made beforehand (e.g. a selection of
    records, as :func:`torch_tfrecord.integrations.tfds.from_tfds` makes) is used as it is."""
    if isinstance(sources, RecordFiles):
        if index is not None or storage_options is not None:
            raise ValueError("index= and storage_options= belong to the RecordFiles passed as sources")
        return sources
    return RecordFiles.from_sources(sources, index, storage_options, on_error)
