"""The records of a dataset: its shard files, their indexes, and reading records by global id.

Record ids count through the shards in sorted path order (shard 0's records first). Files are
opened lazily in whichever process reads and never pickled, so one object can be handed to
DataLoader workers (fork or spawn) or to a pool.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import mmap
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal, TypeVar

import numpy as np
import numpy.typing as npt

from ._guards import check_sources
from .compressed_index import (
    CompressedIndex,
    check_compressed_index,
    decode_compressed_index,
    default_compressed_index_path,
    is_compressed_index,
)
from .entries import read_entries_at
from .errors import SourceNotFoundError, TFRecordError
from .index import build_index, check_index, decode_index, default_index_path, read_index_bytes
from .inflate import SEGMENT, CompressedShard, build_compressed_index
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
from .remote import RemoteFile, RequestCounter

__all__ = ["IndexArg", "RecordFiles", "ShardIndex", "load_shard_index", "resolve_index"]

logger = logging.getLogger(__name__)

IndexArg = str | Mapping[str, str | npt.ArrayLike] | Callable[[str], str] | None
"""Where indexes come from: None (``<path>.idx`` or a scan), a pattern such as
``"/indexes/{name}.idx"`` (fields ``path``, ``name``, ``stem``, ``dir``), a directory holding
``<name>.idx`` files (a string with no ``{``), a mapping from data
path (or file name) to index path or ``(offset, framed_size)`` table, or a function of the path."""

ShardIndex = npt.NDArray[np.int64] | CompressedIndex
"""A plain file's ``(offset, framed_size)`` table, or a compressed file's index."""

_MAX_OPEN_FILES = 64
# Local records of a batch at most this far apart in a file are read with one pread, the bytes
# between them included: a syscall costs about as much as copying this many bytes (bench_dataset).
_COALESCE_GAP = 4096
# Compressed shards inflating at once in a process (each holds inflated segments and a thread).
_MAX_OPEN_INFLATERS = 8
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
    path: str, index: IndexArg = None, storage_options: StorageOptions = None, on_error: OnError = "raise"
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

    Raises:
        StaleIndexError: the index does not describe the file (never silently rebuilt).
        SourceNotFoundError: a named index file does not exist.
    """
    options = storage_options
    gaps = on_error == "skip"
    if index is None:
        for index_path in (default_compressed_index_path(path), default_index_path(path)):
            if exists(index_path, options):
                return load_shard_index(index_path, path, options, allow_damaged_gaps=gaps)
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
            return load_shard_index(_pattern_path(index, path), path, options, allow_damaged_gaps=gaps)
        compressed = join(index, os.path.basename(default_compressed_index_path(path)))
        if exists(compressed, options):
            return load_shard_index(compressed, path, options, allow_damaged_gaps=gaps)
        plain = join(index, os.path.basename(default_index_path(path)))
        return load_shard_index(plain, path, options, allow_damaged_gaps=gaps)
    if isinstance(index, Mapping):
        entry = index.get(path, index.get(os.path.basename(path)))
        if entry is None:
            raise SourceNotFoundError(f"the index mapping has no entry for {path!r}")
        if isinstance(entry, str | os.PathLike):
            return load_shard_index(os.fspath(entry), path, options, allow_damaged_gaps=gaps)
        table = np.asarray(entry, dtype=np.int64).reshape(-1, 2)
        check_index(table, path, "<index mapping>", allow_damaged_gaps=gaps, storage_options=options)
        return table
    if callable(index):
        return load_shard_index(os.fspath(index(path)), path, options, allow_damaged_gaps=gaps)
    raise TypeError(f"index must be None, a pattern, a mapping or a function, not {type(index).__name__}")


def load_shard_index(
    index_path: str, data_path: str, options: StorageOptions = None, *, allow_damaged_gaps: bool = False
) -> ShardIndex:
    """Reads an index file of either kind (told apart by the compressed index's magic) and
    checks it against its data file (``allow_damaged_gaps``: see :func:`~.index.check_index`).

    Raises:
        IndexFormatError: the index file is damaged or in neither format.
        StaleIndexError: it does not describe ``data_path``.
    """
    data = read_index_bytes(index_path, options)
    if is_compressed_index(data):
        found = decode_compressed_index(data, index_path)
        check_compressed_index(
            found, data_path, index_path, allow_damaged=allow_damaged_gaps, storage_options=options
        )
        return found
    table = decode_index(data, index_path)
    check_index(table, data_path, index_path, allow_damaged_gaps=allow_damaged_gaps, storage_options=options)
    return table


def _grown(buffer: bytearray, size: int) -> bytearray:
    """``buffer`` grown to at least ``size`` bytes, or a new one if something holds a view of it."""
    if len(buffer) < size:
        try:
            buffer.extend(bytes(size - len(buffer)))
        except BufferError:  # something still holds a view of it: leave it be
            return bytearray(size)
    return buffer


class RecordFiles:
    """Shard files and their indexes, read by global record id.

    Local files are read with positional reads on descriptors; URLs through a
    :class:`~torch_tfrecord.remote.RemoteFile` each (ranged requests, merged and retried);
    GZIP / ZLIB files through a :class:`~torch_tfrecord.inflate.CompressedShard` each (their
    offsets count in the uncompressed stream).

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
        # Descriptors inherited through a fork stay usable: positional reads share no offset.
        self._files: OrderedDict[int, int] = OrderedDict()
        # The same descriptors by shard (-1: not open here) and the file sizes, as the native
        # batch read takes them.
        self._fd_table = np.full(len(self.paths), -1, dtype=np.int64)
        self._size_table = np.array(self.sizes, dtype=np.int64)
        # Each open descriptor's read-only mapping (None: not open, empty, or not mappable): the
        # native batch read copies records that lie apart from it instead of a pread each.
        self._maps: list[mmap.mmap | None] = [None] * len(self.paths)

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
        from .native import gather, read_into

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
        buffer = bytearray(total) if scratch is None else _grown(scratch, total)
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
                self._fd_table,
                self._size_table,
                self._maps,
                buffer,
                starts,
                sizes,
                gap,
            )
            if status == 0:
                return buffer, starts, sizes
            if status == 1:  # opening it may close the least recently used one
                self._fd(value)
            elif status == 2:
                buffer = _grown(buffer, value)
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

    def _copy_remote(
        self,
        shard: int,
        offsets: npt.NDArray[np.int64],
        sizes: npt.NDArray[np.int64],
        buffer: bytearray,
        start: int,
    ) -> bool:
        """Reads remote or compressed records into ``buffer`` back to back from ``start``; False
        if one is short or damaged."""
        source = self._source(shard)
        try:
            if isinstance(source, CompressedShard):
                source.read_into(offsets, sizes, buffer, start)
                return True
            pieces = source.read_ranges(offsets.tolist(), sizes.tolist())  # type: ignore[union-attr]
        except TFRecordError:  # the per-record read meets it again and raises it
            return False
        view = memoryview(buffer)
        for piece, size in zip(pieces, sizes.tolist(), strict=True):
            if len(piece) != size:
                return False
            view[start : start + size] = piece
            start += size
        return True

    def _source(self, shard: int) -> int | RemoteFile | CompressedShard:
        """How shard ``shard`` is read in this process: a descriptor, a remote or a compressed file."""
        if shard in self.compressed:
            return self._inflater(shard)
        if not is_url(self.paths[shard]):
            return self._fd(shard)
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

    def _fd(self, shard: int) -> int:
        fd = self._files.get(shard)
        if fd is not None:
            self._files.move_to_end(shard)
            return fd
        if len(self._files) >= _MAX_OPEN_FILES:
            closed, oldest = self._files.popitem(last=False)
            self._fd_table[closed] = -1
            self._unmap(closed)
            os.close(oldest)
        with open_binary(self.paths[shard]) as handle:
            fd = os.dup(handle.fileno())
        self._files[shard] = fd
        self._fd_table[shard] = fd
        try:
            self._maps[shard] = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        except (ValueError, OSError):  # an empty file, or one that cannot be mapped: read it
            self._maps[shard] = None
        return fd

    def _unmap(self, shard: int) -> None:
        mapping, self._maps[shard] = self._maps[shard], None
        if mapping is not None:
            try:
                mapping.close()
            except BufferError:  # another thread's read holds it: unmapped when it lets go
                pass

    def close(self) -> None:
        """Closes the files this process opened (they reopen on the next read)."""
        for shard, fd in self._files.items():
            self._unmap(shard)
            os.close(fd)
        self._files.clear()
        self._fd_table[:] = -1
        for file in self._remote.values():
            file.close()
        for inflater in self._inflaters.values():
            inflater.close()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_files"] = OrderedDict()
        state["_fd_table"] = np.full(len(self.paths), -1, dtype=np.int64)
        state["_maps"] = [None] * len(self.paths)
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
