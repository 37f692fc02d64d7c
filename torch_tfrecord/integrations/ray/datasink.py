"""A Ray Data datasink writing a dataset's rows as Examples into numbered, indexed shards.

Each write task writes its rows to hidden files named after the write job, the task and the
piece (a task rolls over to a new piece every ``max_records_per_shard`` rows); each appears
under that hidden name only once complete (:class:`torch_tfrecord.RecordWriter`), with its
index. When every task is done, the driver numbers the pieces in task order and renames them
``{prefix}-00000-of-000NN{suffix}``, index first. A task that fails or is killed and retried
leaves nothing under a final name; what it left under hidden names is removed at the end.
"""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import ray.data
from ray.data.block import BlockAccessor
from ray.data.datasource import Datasink

from ...records import remote
from ...records.atomic import remove_quietly
from ...records.io import PathLike, StorageOptions, is_url, join, local_path
from ...records.manifest import write_shards_manifest
from ...records.writer import RecordWriter, WriteCompression, move_written
from ._arrow import encode_table

__all__ = ["ShardPiece", "TFRecordDatasink", "write_tfrecords"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ShardPiece:
    """One finished file of a write task, under its hidden name until the driver renames it."""

    task: int
    piece: int
    path: str
    records: int
    framed_sizes: list[int]  # each record's (for the dataset's manifest)


class TFRecordDatasink(Datasink[list[ShardPiece]]):
    """Writes rows as Examples into shards ``{prefix}-00000-of-000NN{suffix}`` (see
    :func:`write_tfrecords`). After the write, :attr:`shard_paths` lists them in order."""

    def __init__(
        self,
        prefix: PathLike,
        *,
        max_records_per_shard: int | None = None,
        num_shards: int | None = None,
        compression: WriteCompression = None,
        suffix: str | None = None,
        storage_options: StorageOptions = None,
    ) -> None:
        if max_records_per_shard is not None and max_records_per_shard < 1:
            raise ValueError(f"{max_records_per_shard=} must be positive")
        if num_shards is not None and num_shards < 1:
            raise ValueError(f"{num_shards=} must be positive")
        if compression not in (None, "gzip", "zlib"):
            raise ValueError(f"{compression=} must be None, 'gzip' or 'zlib'")
        self.prefix = local_path(prefix)
        self.max_records_per_shard = max_records_per_shard
        self.num_shards = num_shards
        self.compression: WriteCompression = compression
        default_suffix = ".tfrecord" + {None: "", "gzip": ".gz", "zlib": ".zz"}[compression]
        self.suffix = default_suffix if suffix is None else suffix
        self.storage_options = dict(storage_options or {})
        self.directory, self.name = self.prefix.rpartition("/" if is_url(self.prefix) else os.sep)[::2]
        if not is_url(self.prefix):
            self.directory = os.path.dirname(os.path.abspath(self.prefix))
        # Names this write's hidden files (and their own temporaries), whatever task made them.
        self.job = f"{self.name}.{secrets.token_hex(8)}"
        self.shard_paths: list[str] = []

    def on_write_start(self, schema: Any = None) -> None:
        if is_url(self.prefix):
            remote.make_dirs(self.directory, self.storage_options)
        else:
            os.makedirs(self.directory, exist_ok=True)

    def _piece_path(self, task: int, piece: int) -> str:
        return join(self.directory, f".{self.job}-task{task:05d}-{piece:05d}{self.suffix}")

    def write(self, blocks: Iterable[Any], ctx: Any) -> list[ShardPiece]:
        """Writes the task's rows; returns its finished pieces (renamed later by the driver)."""
        task = int(ctx.task_idx)
        pieces: list[ShardPiece] = []
        writer: RecordWriter | None = None
        try:
            for block in blocks:
                for payload in encode_table(BlockAccessor.for_block(block).to_arrow()):
                    if writer is None or writer.records_written == self.max_records_per_shard:
                        if writer is not None:
                            pieces.append(self._finish(task, len(pieces), writer))
                        writer = self._open(task, len(pieces))
                    writer.write(payload)
            if writer is None and self.num_shards is not None:  # no rows: an empty shard all the same
                writer = self._open(task, 0)
            if writer is not None:
                pieces.append(self._finish(task, len(pieces), writer))
                writer = None
        finally:
            if writer is not None:
                writer.abort()
        return pieces

    def _open(self, task: int, piece: int) -> RecordWriter:
        return RecordWriter(
            self._piece_path(task, piece),
            compression=self.compression,
            storage_options=self.storage_options,
        )

    def _finish(self, task: int, piece: int, writer: RecordWriter) -> ShardPiece:
        writer.close()
        return ShardPiece(task, piece, writer.path, writer.records_written, writer.framed_sizes)

    def on_write_complete(self, write_result: Any) -> None:
        """Renames the pieces to their final names, in task order; removes leftovers."""
        pieces = sorted(
            (piece for pieces in write_result.write_returns for piece in pieces),
            key=lambda piece: (piece.task, piece.piece),
        )
        total = len(pieces)
        if self.num_shards is not None:
            if total > self.num_shards:
                raise RuntimeError(
                    f"{total} write tasks for num_shards={self.num_shards}: the dataset was not "
                    "repartitioned into num_shards blocks; use write_tfrecords(), which does"
                )
            total = self.num_shards
        final = [
            join(self.directory, f"{self.name}-{i:05d}-of-{total:05d}{self.suffix}") for i in range(total)
        ]
        for piece, path in zip(pieces, final):
            move_written(
                piece.path, path, indexed=self.compression is None, storage_options=self.storage_options
            )
        for path in final[len(pieces) :]:  # fewer tasks than num_shards: empty shards
            RecordWriter(path, compression=self.compression, storage_options=self.storage_options).close()
        self._remove_leftovers()
        sizes = [piece.framed_sizes for piece in pieces] + [[]] * (total - len(pieces))
        write_shards_manifest(
            join(self.directory, self.name), final, sizes, self.storage_options, compression=self.compression
        )
        self.shard_paths = final
        logger.info("wrote %d records into %d shards %s", sum(p.records for p in pieces), total, final[:1])

    def on_write_failed(self, error: Exception) -> None:
        self._remove_leftovers()

    def _remove_leftovers(self) -> None:
        """Removes every hidden file of this write (pieces of failed or retried tasks)."""
        options = self.storage_options
        if is_url(self.prefix):
            fs, directory = remote.filesystem(self.directory, options)
            names = [path.rsplit("/", 1)[-1] for path in fs.ls(directory, detail=False, refresh=True)]
        else:
            names = os.listdir(self.directory)
        for name in names:
            if self.job in name and name.startswith("."):
                remove_quietly(join(self.directory, name), options)


def write_tfrecords(
    dataset: ray.data.Dataset,
    prefix: PathLike,
    *,
    num_shards: int | None = None,
    max_records_per_shard: int | None = None,
    compression: WriteCompression = None,
    suffix: str | None = None,
    storage_options: StorageOptions = None,
    concurrency: int | None = None,
    ray_remote_args: Mapping[str, Any] | None = None,
) -> list[str]:
    """Writes a Ray Dataset as Examples into shards ``{prefix}-00000-of-000NN{suffix}``.

    Column types become feature types as :func:`torch_tfrecord.encode_example` has them:
    integers and bools int64_list, floats float_list, binary and string bytes_list; list and
    tensor columns the same, flattened; a null leaves the feature out of that row. A uint8
    list or tensor column is refused as ambiguous (encode images to bytes, or cast, first).

    Every shard is written under a hidden name and renamed when all tasks are done, so a
    failed or retried task leaves no partial shard under a final name. Shards are numbered in
    the order of the write tasks, whichever finishes first; each uncompressed shard gets its
    ``.idx``.

    Args:
        dataset: the rows to write.
        prefix: path or URL prefix of the shards, e.g. ``"out/train"``.
        num_shards: exactly this many shards (the dataset is repartitioned into as many blocks).
        max_records_per_shard: a write task starts a new shard after this many records.
            Without either, each write task writes one shard.
        compression: None, ``"gzip"`` or ``"zlib"`` (compressed shards have no index).
        suffix: file name ending; default ``.tfrecord``, plus ``.gz`` / ``.zz`` when compressed.
        storage_options: for the fsspec file system when ``prefix`` is a URL.
        concurrency, ray_remote_args: as for :meth:`ray.data.Dataset.write_datasink`.

    Returns:
        The shard paths, in order.

    Example:
        >>> tt.ray.write_tfrecords(ds, "out/train", num_shards=8)  # doctest: +SKIP
        ['out/train-00000-of-00008.tfrecord', ...]
    """
    if num_shards is not None and max_records_per_shard is not None:
        raise ValueError("give num_shards or max_records_per_shard, not both")
    sink = TFRecordDatasink(
        prefix,
        num_shards=num_shards,
        max_records_per_shard=max_records_per_shard,
        compression=compression,
        suffix=suffix,
        storage_options=storage_options,
    )
    if num_shards is not None:
        dataset = dataset.repartition(num_shards)
    dataset.write_datasink(
        sink, concurrency=concurrency, ray_remote_args=dict(ray_remote_args) if ray_remote_args else None
    )
    return sink.shard_paths
