"""Writing TFRecord files: one file (RecordWriter) or numbered shards (ShardedRecordWriter).

Files are written under a temporary name and renamed into place on close, so a crash never
leaves a half-written file under the final name; a URL is uploaded and the object committed
only on close (see ``_atomic.PendingFile``). Uncompressed files get their index
(``<path>.idx``) at close, computed while writing.
"""

from __future__ import annotations

import logging
import os
import zlib
from array import array
from types import TracebackType
from typing import Any, BinaryIO, Literal, TypeVar

from . import remote
from .atomic import PendingFile, remove_quietly
from .framing import FRAME_OVERHEAD, encode_record
from .index import default_index_path, index_from_sizes, save_index
from .io import PathLike, StorageOptions, exists, is_url, local_path

__all__ = [
    "RecordBytes",
    "RecordWriter",
    "ShardedRecordWriter",
    "WriteCompression",
    "as_payload",
    "move_written",
]

logger = logging.getLogger(__name__)

WriteCompression = Literal["gzip", "zlib"] | None

RecordBytes = bytes | bytearray | memoryview
"""A record's bytes as a writer takes them (a :mod:`~torch_tfrecord.codec.payloads` Payload is what a
dataset makes of a record's bytes when it reads them)."""
_Sharded = TypeVar("_Sharded", bound="ShardedRecordWriter")


def as_payload(record: object) -> RecordBytes:
    """A record's bytes as they are; anything else is refused."""
    if not isinstance(record, bytes | bytearray | memoryview):
        raise TypeError(f"write() takes bytes, got {type(record).__name__}")
    return record


_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "zlib": zlib.MAX_WBITS}


class _CompressingSink:
    """A write-only stream that GZIP- or ZLIB-compresses into ``raw``.

    The GZIP header carries no file name and mtime 0, so the same records give the same bytes.
    """

    def __init__(self, raw: BinaryIO, compression: str, level: int) -> None:
        self._raw = raw
        self._compressor = zlib.compressobj(level, zlib.DEFLATED, _WBITS[compression])

    def write(self, data: bytes) -> None:
        self._raw.write(self._compressor.compress(data))

    def flush(self) -> None:
        self._raw.write(self._compressor.flush(zlib.Z_SYNC_FLUSH))
        self._raw.flush()

    def close(self) -> None:
        try:
            self._raw.write(self._compressor.flush(zlib.Z_FINISH))
        finally:
            self._raw.close()


class RecordWriter:
    """Writes records to one TFRecord file, atomically.

    Args:
        path: the final file name. Nothing appears under it until :meth:`close`.
        compression: None, ``"gzip"`` or ``"zlib"``.
        write_index: write ``<path>.idx`` at close (uncompressed files only; an index cannot
            point into a compressed stream). Without it, an index left from an older file
            under that name is removed, since it would describe other bytes.
        compression_level: zlib level 0-9 for compressed files.
        storage_options: for the fsspec file system when ``path`` is a URL (``s3://...``):
            the object is uploaded while writing (in parts, where the store has multipart
            uploads) and committed on close; an aborted writer leaves no object.

    Example:
        >>> with RecordWriter("train.tfrecord") as writer:  # doctest: +SKIP
        ...     writer.write(b"payload")
    """

    # A shard of a ShardedExampleWriter learns its final name only at the end: remotely it is then
    # uploaded under a temporary name and moved, instead of uploaded straight to its name.
    _staged = False

    def __init__(
        self,
        path: PathLike,
        *,
        compression: WriteCompression = None,
        write_index: bool = True,
        compression_level: int = 6,
        storage_options: StorageOptions = None,
    ) -> None:
        if compression not in (None, "gzip", "zlib"):
            raise ValueError(f"{compression=} must be None, 'gzip' or 'zlib'")
        if not 0 <= compression_level <= 9:
            raise ValueError(f"{compression_level=} must be in [0, 9]")
        self.path = local_path(path)
        self.compression = compression
        self.storage_options = storage_options
        self._write_index = write_index and compression is None
        self._pending = PendingFile(self.path, storage_options, staged=self._staged)
        raw = self._pending.stream
        self._sink: BinaryIO | _CompressingSink = (
            raw if compression is None else _CompressingSink(raw, compression, compression_level)
        )
        self._framed_sizes = array("q")
        self._records = 0
        self._bytes = 0
        self._state: Literal["open", "finished", "closed"] = "open"

    @property
    def records_written(self) -> int:
        """Records written so far."""
        return self._records

    @property
    def bytes_written(self) -> int:
        """Uncompressed bytes written so far, framing included."""
        return self._bytes

    @property
    def framed_sizes(self) -> list[int]:
        """The framed size of each record written so far (its index, offsets aside)."""
        return self._framed_sizes.tolist()

    def write(self, payload: bytes | bytearray | memoryview) -> None:
        """Appends one record.

        Args:
            payload: the record's data, e.g. a serialized Example.
        """
        if self._state != "open":
            raise ValueError(f"write to a closed RecordWriter for {self.path!r}")
        self._sink.write(encode_record(payload))
        framed = len(payload) + FRAME_OVERHEAD
        self._framed_sizes.append(framed)
        self._records += 1
        self._bytes += framed

    def flush(self) -> None:
        """Pushes buffered bytes to the temporary file (it keeps its temporary name)."""
        if self._state == "open":
            self._sink.flush()

    def close(self) -> None:
        """Finishes the file and renames it (and its index) into place. Idempotent."""
        if self._state == "closed":
            return
        self._finish()
        self._publish(self.path)

    def abort(self) -> None:
        """Discards everything written: the temporary file is removed, ``path`` is untouched."""
        if self._state == "closed":
            return
        try:
            if self._state == "open":
                self._sink.close()
        finally:
            self._state = "closed"
            self._pending.discard()

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def _finish(self) -> None:
        """Closes the temporary file, which stays under its temporary name."""
        if self._state == "open":
            try:
                self._sink.close()
            except BaseException:
                self.abort()
                raise
            self._state = "finished"

    def _publish(self, path: str) -> None:
        """Renames the finished temporary file to ``path``, its index first.

        The index is written (or a stale one removed) before the data is renamed, so a file
        under its final name always has its index beside it, even if the process dies between
        the two steps: then the index stands alone, or beside the file it was to replace, where
        it is a StaleIndexError on reading, never a silent misread.
        """
        index_path = default_index_path(path)
        options = self.storage_options
        try:
            if self._write_index:
                save_index(index_from_sizes(self._framed_sizes), index_path, options)
            elif exists(index_path, options):
                logger.info("removing %s: it described the file %s replaces", index_path, path)
                remove_quietly(index_path, options)
            self._pending.publish(path)
        except BaseException:
            if self._write_index:  # it describes data that did not arrive
                remove_quietly(index_path, options)
            self.abort()
            raise
        self._state = "closed"


def move_written(source: str, target: str, *, indexed: bool, storage_options: StorageOptions = None) -> None:
    """Moves a file a writer finished under a hidden name to its final name, its index first
    (``indexed``); a compressed file's move removes an index left beside ``target``, which would
    describe the file it replaces. For writers whose final names are known only when every
    task is done (Ray's, Spark's)."""
    index_target = default_index_path(target)
    moves = [(default_index_path(source), index_target)] if indexed else []
    if not indexed and exists(index_target, storage_options):
        remove_quietly(index_target, storage_options)
    for old, new in [*moves, (source, target)]:
        if is_url(old):
            remote.move(old, new, storage_options)
        else:
            os.replace(old, new)


class _Shard(RecordWriter):
    _staged = True


class ShardedRecordWriter:
    """Writes byte records across numbered shards, rolling over by record count or size.

    The record layer's half of :class:`torch_tfrecord.ShardedExampleWriter` (which also takes dicts
    of features, and whose documentation lists the arguments): shards are named
    ``{prefix}-00000-of-00012{suffix}`` and stay under temporary names until :meth:`close`.
    """

    def __init__(
        self,
        prefix: PathLike,
        *,
        max_records: int | None = None,
        max_bytes: int | None = None,
        suffix: str | None = None,
        compression: WriteCompression = None,
        write_index: bool = True,
        storage_options: StorageOptions = None,
        write_manifest: bool = True,
    ) -> None:
        if max_records is None and max_bytes is None:
            raise ValueError("give max_records, max_bytes or both")
        if max_records is not None and max_records < 1:
            raise ValueError(f"{max_records=} must be positive")
        if max_bytes is not None and max_bytes < FRAME_OVERHEAD:
            raise ValueError(f"{max_bytes=} must be at least {FRAME_OVERHEAD}")
        if compression not in (None, "gzip", "zlib"):
            raise ValueError(f"{compression=} must be None, 'gzip' or 'zlib'")
        self.prefix = local_path(prefix)
        self.storage_options = storage_options
        if is_url(self.prefix):
            remote.make_dirs(self.prefix.rpartition("/")[0], storage_options)
        else:
            os.makedirs(os.path.dirname(os.path.abspath(self.prefix)), exist_ok=True)
        default_suffix = ".tfrecord" + {None: "", "gzip": ".gz", "zlib": ".zz"}[compression]
        self.suffix = default_suffix if suffix is None else suffix
        self.max_records = max_records
        self.max_bytes = max_bytes
        self.compression: WriteCompression = compression
        self.write_index = write_index
        self.write_manifest = write_manifest
        self.shard_paths: list[str] = []
        self._shards: list[RecordWriter] = []
        self._closed = False

    @property
    def records_written(self) -> int:
        """Records written so far, over all shards."""
        return sum(shard.records_written for shard in self._shards)

    def write(self, record: Any) -> None:
        """Appends one record to the current shard, starting a new shard when it is full."""
        if self._closed:
            raise ValueError(f"write to a closed ShardedExampleWriter for {self.prefix!r}")
        payload = self._payload(record)
        if not self._shards or self._is_full(self._shards[-1], len(payload) + FRAME_OVERHEAD):
            self._start_shard()
        self._shards[-1].write(payload)

    def _payload(self, record: Any) -> RecordBytes:
        return as_payload(record)

    def _is_full(self, shard: RecordWriter, framed: int) -> bool:
        if shard.records_written == 0:
            return False
        if self.max_records is not None and shard.records_written >= self.max_records:
            return True
        return self.max_bytes is not None and shard.bytes_written + framed > self.max_bytes

    def _start_shard(self) -> None:
        if self._shards:
            self._shards[-1]._finish()
        number = len(self._shards)
        self._shards.append(
            _Shard(
                f"{self.prefix}-{number:05d}{self.suffix}",
                compression=self.compression,
                write_index=self.write_index,
                storage_options=self.storage_options,
            )
        )

    def close(self) -> list[str]:
        """Finishes the last shard and renames every shard to its final name.

        Returns:
            The shard paths, in order (also kept as :attr:`shard_paths`). Writing no record
            at all gives one empty shard, so readers find the dataset.
        """
        if self._closed:
            return self.shard_paths
        if not self._shards:
            self._start_shard()
        try:
            self._shards[-1]._finish()
        except BaseException:
            self.abort()
            raise
        total = len(self._shards)
        final = [f"{self.prefix}-{i:05d}-of-{total:05d}{self.suffix}" for i in range(total)]
        for shard, path in zip(self._shards, final):
            shard._publish(path)
        self._closed = True
        self.shard_paths = final
        if self.write_manifest:
            from .manifest import write_shards_manifest

            sizes = [shard.framed_sizes for shard in self._shards]
            write_shards_manifest(
                self.prefix,
                final,
                sizes,
                self.storage_options,
                compression=self.compression,
                indexed=self.write_index,
            )
        return final

    def abort(self) -> None:
        """Discards every shard not yet renamed into place."""
        self._closed = True
        for shard in self._shards:
            shard.abort()

    def __enter__(self: _Sharded) -> _Sharded:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()
