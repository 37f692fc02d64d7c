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
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from .entries import read_entries_at
from .errors import CompressedIndexError, SourceNotFoundError, TFRecordError
from .index import build_index, check_index, default_index_path, load_index
from .io import (
    PathLike,
    StorageOptions,
    exists,
    expand_sources,
    file_size,
    is_url,
    join,
    open_binary,
    resolve_compression,
)
from .reader import OnError
from .remote import RemoteFile

__all__ = ["IndexArg", "RecordFiles", "resolve_index"]

logger = logging.getLogger(__name__)

IndexArg = str | Mapping[str, str | npt.ArrayLike] | Callable[[str], str] | None
"""Where indexes come from: None (``<path>.idx`` or a scan), a pattern such as
``"/indexes/{name}.idx"`` (fields ``path``, ``name``, ``stem``, ``dir``), a directory holding
``<name>.idx`` files (a string with no ``{``), a mapping from data
path (or file name) to index path or ``(offset, framed_size)`` table, or a function of the path."""

_MAX_OPEN_FILES = 64
# Remote shards of one batch read at the same time (each shard's ranges also go concurrently).
_REMOTE_SHARDS_AT_ONCE = 16

T = TypeVar("T")


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
    path: str, index: IndexArg = None, storage_options: StorageOptions = None
) -> npt.NDArray[np.int64]:
    """The ``(offset, framed_size)`` table of one data file, checked against the file.

    Args:
        path: the data file (a path or URL).
        index: see :data:`IndexArg`.
        storage_options: for the fsspec file system of URLs.

    Raises:
        StaleIndexError: the index does not describe the file (never silently rebuilt).
        CompressedIndexError: the file is compressed, so its records cannot be read by offset.
        SourceNotFoundError: a named index file does not exist.
    """
    options = storage_options
    if index is None:
        index_path = default_index_path(path)
        if exists(index_path, options):
            return load_index(index_path, data_path=path, storage_options=options)
        compression = resolve_compression("auto", path, options)
        if compression is not None:
            raise CompressedIndexError(
                f"{path!r} is {compression.upper()}-compressed: the datasets read records by offset, "
                "which compressed files do not allow; rewrite it uncompressed (e.g. with "
                "tt.RecordWriter) to use it here"
            )
        table = build_index(path, storage_options=options)
        logger.info(
            "no index for %r: scanned it in memory (%d records); `tfrecord-index build` saves one",
            path,
            len(table),
        )
        return table
    if isinstance(index, str):
        index_path = (
            _pattern_path(index, path)
            if "{" in index
            else join(index, os.path.basename(default_index_path(path)))
        )
        return load_index(index_path, data_path=path, storage_options=options)
    if isinstance(index, Mapping):
        entry = index.get(path, index.get(os.path.basename(path)))
        if entry is None:
            raise SourceNotFoundError(f"the index mapping has no entry for {path!r}")
        if isinstance(entry, str | os.PathLike):
            return load_index(entry, data_path=path, storage_options=options)
        table = np.asarray(entry, dtype=np.int64).reshape(-1, 2)
        check_index(table, path, "<index mapping>", storage_options=options)
        return table
    if callable(index):
        return load_index(index(path), data_path=path, storage_options=options)
    raise TypeError(f"index must be None, a pattern, a mapping or a function, not {type(index).__name__}")


class RecordFiles:
    """Shard files and their indexes, read by global record id.

    Local files are read with positional reads on descriptors; URLs through a
    :class:`~torch_tfrecord.remote.RemoteFile` each (ranged requests, merged and retried).

    Args:
        paths: the data files (paths or URLs), in record-id order.
        tables: each file's ``(offset, framed_size)`` index table.
        storage_options: for the fsspec file system of URLs.
    """

    def __init__(
        self,
        paths: Sequence[str],
        tables: Sequence[npt.NDArray[np.int64]],
        storage_options: StorageOptions = None,
    ) -> None:
        if len(paths) != len(tables):
            raise ValueError(f"{len(paths)} paths but {len(tables)} index tables")
        self.paths = list(paths)
        self.storage_options = dict(storage_options or {})
        self.tables = [np.ascontiguousarray(table, dtype=np.int64).reshape(-1, 2) for table in tables]
        self.sizes = [file_size(path, self.storage_options) for path in self.paths]
        # Remote files in use here, least recently used first (each may hold a read-ahead window).
        self._remote: OrderedDict[int, RemoteFile] = OrderedDict()
        self._evicted_requests = 0
        self._remote_lock = threading.Lock()  # shards of one batch are opened from several threads
        self._all_remote = bool(self.paths) and all(is_url(path) for path in self.paths)
        self._pool: ThreadPoolExecutor | None = None
        self._pool_pid = -1
        self.counts = np.array([len(table) for table in self.tables], dtype=np.int64)
        self.starts = np.concatenate([[0], np.cumsum(self.counts)]).astype(np.int64)
        # Descriptors inherited through a fork stay usable: positional reads share no offset.
        self._files: OrderedDict[int, int] = OrderedDict()

    @classmethod
    def from_sources(
        cls,
        sources: PathLike | Sequence[PathLike],
        index: IndexArg = None,
        storage_options: StorageOptions = None,
    ) -> RecordFiles:
        """Expands paths / globs / directories / URLs (sorted) and resolves every file's index."""
        paths = expand_sources(sources, storage_options)
        return cls(paths, [resolve_index(path, index, storage_options) for path in paths], storage_options)

    @property
    def remote_requests(self) -> int:
        """Ranged requests this process has made to remote files (none for local ones)."""
        return self._evicted_requests + sum(file.requests for file in self._remote.values())

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
        for path, size, count in zip(self.paths, self.sizes, self.counts, strict=True):
            digest.update(f"{os.path.basename(path)}\0{size}\0{int(count)}\n".encode())
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
        from .native import read_into

        ids = np.asarray(record_ids, dtype=np.int64)
        if not len(ids):
            return bytearray(), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        by_id = np.argsort(ids, kind="stable")  # global id order is file order
        shards, local = self.locate(ids[by_id])
        entries = np.empty((len(ids), 2), dtype=np.int64)
        bounds = [0, *(np.flatnonzero(np.diff(shards)) + 1).tolist(), len(ids)]
        for first, stop in itertools.pairwise(bounds):
            entries[first:stop] = self.tables[int(shards[first])][local[first:stop]]
        positions = np.zeros(len(ids), dtype=np.int64)
        np.cumsum(entries[:-1, 1], out=positions[1:])
        total = int(entries[:, 1].sum())
        if scratch is None:
            buffer = bytearray(total)
        else:
            buffer = scratch
            if len(scratch) < total:
                try:
                    scratch.extend(bytes(total - len(scratch)))
                except BufferError:  # something still holds a view of it: leave it be
                    buffer = bytearray(total)
        remote_reads = []
        for first, stop in itertools.pairwise(bounds):
            shard = int(shards[first])
            offsets = np.ascontiguousarray(entries[first:stop, 0])
            sizes = np.ascontiguousarray(entries[first:stop, 1])
            if int((offsets + sizes).max()) > self.sizes[shard]:
                return None
            if is_url(self.paths[shard]):
                remote_reads.append((shard, offsets, sizes, buffer, int(positions[first])))
                continue
            try:
                complete = read_into(self._fd(shard), offsets, sizes, buffer, int(positions[first]))
            except OSError:  # the per-record read meets it again and raises it
                return None
            if complete != stop - first:
                return None
        if remote_reads and not all(self._each_shard(lambda r: self._copy_remote(*r), remote_reads)):
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
        if len(groups) < 2 or not self._all_remote:
            return [read(group) for group in groups]
        if self._pool is None or self._pool_pid != os.getpid():
            self._pool = ThreadPoolExecutor(
                _REMOTE_SHARDS_AT_ONCE, thread_name_prefix="torch-tfrecord-shards"
            )
            self._pool_pid = os.getpid()
        return list(self._pool.map(read, groups))

    def _copy_remote(
        self,
        shard: int,
        offsets: npt.NDArray[np.int64],
        sizes: npt.NDArray[np.int64],
        buffer: bytearray,
        start: int,
    ) -> bool:
        """Reads remote records into ``buffer`` back to back from ``start``; False if one is short."""
        try:
            pieces = self._source(shard).read_ranges(offsets.tolist(), sizes.tolist())  # type: ignore[union-attr]
        except TFRecordError:  # the per-record read meets it again and raises it
            return False
        view = memoryview(buffer)
        for piece, size in zip(pieces, sizes.tolist(), strict=True):
            if len(piece) != size:
                return False
            view[start : start + size] = piece
            start += size
        return True

    def _source(self, shard: int) -> int | RemoteFile:
        """How shard ``shard`` is read in this process: a descriptor or a remote file."""
        if not is_url(self.paths[shard]):
            return self._fd(shard)
        with self._remote_lock:
            file = self._remote.get(shard)
            if file is not None:
                self._remote.move_to_end(shard)
                return file
            if len(self._remote) >= _MAX_OPEN_FILES:
                _, oldest = self._remote.popitem(last=False)
                self._evicted_requests += oldest.requests
                oldest.close()  # (waits for a read of it in another thread; it stays usable)
            file = RemoteFile(self.paths[shard], self.sizes[shard], self.storage_options)
            self._remote[shard] = file
            return file

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

    def _fd(self, shard: int) -> int:
        fd = self._files.get(shard)
        if fd is not None:
            self._files.move_to_end(shard)
            return fd
        if len(self._files) >= _MAX_OPEN_FILES:
            _, oldest = self._files.popitem(last=False)
            os.close(oldest)
        with open_binary(self.paths[shard]) as handle:
            fd = os.dup(handle.fileno())
        self._files[shard] = fd
        return fd

    def close(self) -> None:
        """Closes the files this process opened (they reopen on the next read)."""
        for fd in self._files.values():
            os.close(fd)
        self._files.clear()
        for file in self._remote.values():
            file.close()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_files"] = OrderedDict()
        state["_remote"] = OrderedDict()
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
