"""The records of a dataset: its shards, their indexes, and reading records by global id.

Record ids count through the shards in sorted path order (shard 0's records first). What each
shard is (local, remote, cached, compressed) is decided once, as its
:class:`~torch_tfrecord.records.shard_access.ShardSpec`, when the object is made; each process reads
through its own :class:`~torch_tfrecord.records.shards.pool.ShardPool` of open sources, so one object can
be handed to DataLoader workers (fork or spawn) or to a pool.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import logging
import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from ...errors import TFRecordError
from ...support.stages import BYTES, count
from ..compressed.index import CompressedIndex
from ..compressed.inflate import SEGMENT
from ..entries import read_entries_at
from ..io import PathLike, StorageOptions
from ..reader import OnError
from ..shard_access import BatchReadFailed, Storage
from .index import IndexArg, ShardIndex
from .pool import CAPS, ShardPool, using_pool
from .resolve import CacheDir, resolve_shards, shards_of_tables
from .shard_records import ShardRecords
from .shard_set import ShardSet
from .tables import ShardTables

__all__ = ["RecordFiles", "grown", "record_files"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


def grown(buffer: bytearray, size: int) -> bytearray:
    """``buffer`` grown to at least ``size`` bytes, or a new one if something holds a view of it."""
    if len(buffer) < size:
        try:
            buffer.extend(bytes(size - len(buffer)))
        except BufferError:  # something still holds a view of it: leave it be
            return bytearray(size)
    return buffer


class RecordFiles(ShardRecords):
    """Shard files and their indexes, read by global record id.

    Each shard's :class:`~torch_tfrecord.records.shard_access.ShardSpec` says what it is; each process
    reads through its own pool of open sources (:attr:`pool`): local files with positional reads
    and mappings (a batch of them in one native call), URLs by ranged requests (merged, retried)
    or through the node's cache (fetched whole once per node, then read as local files), GZIP /
    ZLIB files through their seek points (their offsets count in the uncompressed stream).

    Args:
        shards: the shards, resolved (:func:`~torch_tfrecord.records.shards.resolve.resolve_shards`).
    """

    def __init__(self, shards: ShardSet) -> None:
        self.shards = shards
        self.paths = list(shards.paths)
        self.storage_options = shards.storage_options
        self.cache = shards.cache
        self.feature_spec = shards.feature_spec  # the spec a manifest keeps, as spec.json holds it
        plain = [table.table if isinstance(table, CompressedIndex) else table for table in shards.tables]
        self.tables = ShardTables(plain, shards.counts)
        self.specs = list(shards.specs)
        self.pool = ShardPool(self.specs, Storage(self.storage_options, self.cache))
        self.sizes = [spec.size for spec in self.specs]  # each record stream's size
        self.counts = self.tables.counts
        self.starts = np.concatenate([[0], np.cumsum(self.counts)]).astype(np.int64)
        self._size_table = np.array(self.sizes, dtype=np.int64)  # as the native batch read takes them
        # The native batch read applies where every shard may be a local file (remote ones once
        # their cached copies are complete); compressed ones are inflated, remote ones fetched.
        self._gathers = all(spec.kind != "remote" and not spec.inflating for spec in self.specs)

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
        """The files of ``sources``, resolved by :func:`~.resolve.resolve_shards`."""
        return cls(
            resolve_shards(
                sources,
                index=index,
                storage_options=storage_options,
                on_error=on_error,
                cache_dir=cache_dir,
                cache_limit=cache_limit,
            )
        )

    @classmethod
    def of_tables(
        cls, paths: Sequence[str], tables: Sequence[ShardIndex], storage_options: StorageOptions = None
    ) -> RecordFiles:
        """The files at ``paths`` with their index tables known (each shard's spec looked up)."""
        return cls(shards_of_tables(paths, tables, storage_options))

    def keep_ranges(self, ranges: Sequence[tuple[int, int, int]]) -> RecordFiles:
        """The records ``[start, stop)`` of shard ``shard`` for each ``(shard, start, stop)``, as files.

        The result reads only those records, in the order given (a shard may appear more than
        once); its record ids count through the ranges. Nothing is read, looked up or scanned again.

        Raises:
            IndexError: a shard number out of range.
            ValueError: a range that is not within its shard's records, or a compressed shard.
        """
        paths, tables, specs, counts = [], [], [], []
        for shard, start, stop in ranges:
            if not 0 <= shard < len(self.paths):
                raise IndexError(f"shard {shard} out of range for {len(self.paths)} files")
            if not 0 <= start <= stop <= self.counts[shard]:
                raise ValueError(
                    f"records [{start}, {stop}) are not within the {int(self.counts[shard])} records of "
                    f"{self.paths[shard]!r}"
                )
            spec = self.specs[shard]
            if spec.compressed is not None:
                raise ValueError(
                    f"{self.paths[shard]!r} is {spec.compressed.compression.upper()}-compressed: "
                    "a selection of its records is not supported (select from uncompressed shards)"
                )
            paths.append(self.paths[shard])
            tables.append(self.tables.part(shard, start, stop))
            specs.append(spec)
            counts.append(stop - start)
        return RecordFiles(
            dataclasses.replace(
                self.shards,
                paths=tuple(paths),
                specs=tuple(specs),
                tables=tuple(tables),
                counts=tuple(counts),
            )
        )

    @property
    def fingerprint(self) -> str:
        """Identifies the data: file names, sizes and record counts (not the directory they are in)."""
        digest = hashlib.sha256()
        for path, size, table, rows in zip(
            self.paths, self.sizes, self.tables.arrays, self.counts, strict=True
        ):
            # Part of a file (select()) also says where it starts; a whole file (or table to fetch) as ever.
            start = f"\0{int(table[0, 0])}" if len(table) and table[0, 0] else ""
            digest.update(f"{os.path.basename(path)}\0{size}\0{int(rows)}{start}\n".encode())
        return digest.hexdigest()[:32]

    def locate(self, record_ids: npt.ArrayLike) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """``(shard, record number in the shard)`` of each global record id."""
        ids = np.asarray(record_ids, dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= self.num_records):
            raise IndexError(f"record ids must lie in [0, {self.num_records})")
        shards = np.searchsorted(self.starts, ids, side="right") - 1
        return shards, ids - self.starts[shards]

    @using_pool
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
        self.tables.ensure(np.unique(shards).tolist())
        read = self._each_shard(
            lambda group: self._read_shard(int(shards[group[0]]), local[group], verify_crc, on_error),
            groups,
            [int(shards[group[0]]) for group in groups],
        )
        for group, payloads in zip(groups, read, strict=True):
            for place, payload in zip(by_id[group].tolist(), payloads, strict=True):
                result[place] = payload
        return result

    @using_pool
    def read_framed(
        self, record_ids: npt.ArrayLike, scratch: bytearray | None = None
    ) -> tuple[bytearray, npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """The framed records (header, payload, CRCs) of the given ids, read into one buffer.

        For the native decoder: one buffer per batch, one positional read per run of records
        that lie back to back in a file, no Python object per record.

        Args:
            record_ids: global record ids, in the order wanted.
            scratch: a buffer to read into (grown as needed) instead of a new one, so that
                batch after batch reuses memory that is already mapped.

        Returns:
            ``(buffer, starts, framed_sizes)``, record ``i`` of ``record_ids`` at
            ``buffer[starts[i]:starts[i] + framed_sizes[i]]``.

        Raises:
            BatchReadFailed: a file is shorter than its index says, or a read failed (:meth:`read`
                then names the record and why).
            IndexError: an id out of range.
        """
        ids = np.asarray(record_ids, dtype=np.int64)
        if not len(ids):
            return bytearray(), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        if self._gathers:
            from ...support.extension import compiled

            if compiled is not None:
                framed = self._gather(ids, scratch)
                if framed is not None:
                    return framed
        by_id = np.argsort(ids, kind="stable")  # global id order is file order
        shards, local = self.locate(ids[by_id])
        self.tables.ensure(np.unique(shards).tolist())
        entries = np.empty((len(ids), 2), dtype=np.int64)
        bounds = [0, *(np.flatnonzero(np.diff(shards)) + 1).tolist(), len(ids)]
        for first, stop in itertools.pairwise(bounds):
            entries[first:stop] = self.tables[int(shards[first])][local[first:stop]]
        positions = np.zeros(len(ids), dtype=np.int64)
        np.cumsum(entries[:-1, 1], out=positions[1:])
        total = int(entries[:, 1].sum())
        count(BYTES, total)  # (the load telemetry's, in the thread that read)
        buffer = bytearray(total) if scratch is None else grown(scratch, total)
        runs = []
        for first, stop in itertools.pairwise(bounds):
            shard = int(shards[first])
            offsets = np.ascontiguousarray(entries[first:stop, 0])
            sizes = np.ascontiguousarray(entries[first:stop, 1])
            if int((offsets + sizes).max()) > self.sizes[shard]:
                raise BatchReadFailed(f"{self.paths[shard]!r} is shorter than its index says")
            runs.append((shard, offsets, sizes, int(positions[first])))

        def copy(run: tuple[int, Any, Any, int]) -> None:
            shard, offsets, sizes, at = run
            self.pool.source(shard).read_into(offsets, sizes, buffer, at)

        self._each_shard(copy, runs, [run[0] for run in runs])
        starts = np.empty_like(positions)
        framed_sizes = np.empty_like(positions)
        starts[by_id] = positions
        framed_sizes[by_id] = entries[:, 1]
        return buffer, starts, framed_sizes

    def _gather(
        self, ids: npt.NDArray[np.int64], scratch: bytearray | None
    ) -> tuple[bytearray, npt.NDArray[np.int64], npt.NDArray[np.int64]] | None:
        """The batch read of local files in one native call; None where a shard of the batch is
        not a local file now (a remote one's copy not complete), or the batch's shards do not all
        stay open at once: the loop per shard then reads it."""
        from ..gather import COALESCE_GAP, Gathered, gather

        pool = self.pool
        if self.tables.pending:
            self.tables.ensure(np.unique(self.locate(ids)[0]).tolist())
        buffer = bytearray() if scratch is None else scratch
        starts = np.empty(len(ids), dtype=np.int64)
        sizes = np.empty(len(ids), dtype=np.int64)
        for _ in range(CAPS["local"] + 1):
            status, value = gather(
                ids,
                self.starts,
                self.tables.arrays,
                pool.fds,
                self._size_table,
                pool.maps,
                buffer,
                starts,
                sizes,
                COALESCE_GAP,
            )
            if status == Gathered.DONE:
                count(BYTES, value)  # (what the batch read took, gaps read through included)
                return buffer, starts, sizes
            if status == Gathered.OPEN:  # opening it may let go of the least recently used one
                if not pool.open_local(value):
                    return None
            elif status == Gathered.GROW:
                buffer = grown(buffer, value)
            elif status == Gathered.BAD_ID:
                self.locate(ids)  # raises the IndexError
            else:
                raise BatchReadFailed("a record past its file's end, or a read that failed")
        return None

    def _each_shard(self, read: Callable[[Any], T], groups: Sequence[Any], shards: Sequence[int]) -> list[T]:
        """``read`` of each group of records of one shard. Remote shards are read at the same time
        (their requests overlap instead of adding up); if any is local or compressed, one after
        another here (a source may be let go for another only in this thread)."""
        specs = self.pool.specs
        if len(groups) < 2 or any(specs[s].kind == "local" or specs[s].inflating for s in shards):
            return [read(group) for group in groups]
        return self.pool.each(read, groups)

    def hold_window(self, records: int) -> None:
        """Lets each compressed shard keep about ``records`` records inflated (a block
        shuffle's window), so the window is inflated once however its records are asked for."""
        compressed = [spec.compressed for spec in self.specs if spec.compressed is not None]
        if compressed:
            largest_mean = max(index.uncompressed_size / max(1, len(index.table)) for index in compressed)
            self.pool.hold_window(int(records * largest_mean) + 2 * SEGMENT)

    def _read_shard(
        self, shard: int, numbers: npt.NDArray[np.int64], verify_crc: bool, on_error: OnError
    ) -> list[bytes | None]:
        path, size, table = self.paths[shard], self.sizes[shard], self.tables[shard]
        recovery = self.pool.source(shard).recovery()
        while True:
            source = self.pool.source(shard)
            try:
                read = read_entries_at(source, path, size, table[numbers], numbers, verify_crc=verify_crc)
                return list(read)
            except TFRecordError as error:
                if recovery.again(error):
                    self.pool.forget_local(shard)  # a copy fetched again: not the one mapped
                    continue
                if on_error == "raise":
                    raise
                break
        payloads: list[bytes | None] = []
        for number in numbers.tolist():  # find the damaged ones, keep the rest
            one = np.array([number], dtype=np.int64)
            try:
                payloads.extend(read_entries_at(source, path, size, table[one], one, verify_crc=verify_crc))
            except TFRecordError as error:
                logger.warning("skipping record: %s", error)
                payloads.append(None)
        return payloads

    def close(self) -> None:
        """Closes the files this process opened (they reopen on the next read)."""
        self.pool.close()

    def __del__(self) -> None:
        try:
            self.close()
        except (OSError, AttributeError):  # (AttributeError: at interpreter exit, modules are gone)
            pass


def record_files(
    sources: PathLike | Sequence[PathLike] | ShardRecords,
    index: IndexArg,
    storage_options: StorageOptions,
    on_error: OnError = "raise",
    cache_dir: CacheDir = None,
    cache_limit: int | str | None = None,
) -> ShardRecords:
    """The files of ``sources`` (see :meth:`RecordFiles.from_sources`); records made beforehand
    (e.g. a range of records, as ``tt.from_tfds`` makes, or a selection) are used as they are."""
    if isinstance(sources, ShardRecords):
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
