"""``df.write.format("tfrecord")``: each task writes its rows as Examples into hidden, indexed pieces;
the job's commit names them shards and leaves the dataset's manifest.

A task writes its pieces under hidden names that carry the write's id, its partition and its
attempt (:class:`torch_tfrecord.RecordWriter`: each appears under that name only once complete,
with its index). Spark's commit then hands the driver one message per partition, from the attempt
it let commit: the driver renames those pieces ``{prefix}-00000-of-000NN{suffix}`` (per partition
folder, index first), writes ``{prefix}.manifest.json`` (with the spec that reads the rows back)
and removes every other hidden file of the write. A killed, failed, retried or speculative attempt
leaves nothing under a final name, and no shard twice.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import secrets
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from ...codec.spec import FeatureSpec
from ...codec.spec_file import encode_spec_json
from ...records import remote
from ...records.atomic import remove_quietly
from ...records.index import default_index_path, index_from_sizes
from ...records.io import exists, is_url, join, local_path
from ...records.manifest import manifest_for, read_manifest, write_manifest
from ...records.writer import RecordWriter, WriteCompression, move_written
from ._partitions import partition_folder
from ._types import COLUMNS_KEY, encode_batch, spec_for_schema
from .options import parse_spec_option, storage_options_of

__all__ = ["Piece", "PieceList", "TFRecordWriter", "WriteOptions"]

logger = logging.getLogger(__name__)

_WRITE_KEYS = {"path", "prefix", "compression", "max_records_per_shard", "partition_by", "spec"}
_WRITE_KEYS |= {"storage_options"}


@dataclasses.dataclass(frozen=True)
class WriteOptions:
    """The write's options, checked before any task runs.

    Attributes:
        path: the output folder (``save(path)``).
        prefix: the shards' name: ``{prefix}-00000-of-00008.tfrecord`` (default ``part``).
        compression: None, ``"gzip"`` or ``"zlib"`` (option ``compression``, any case; ``none``).
        max_records_per_shard: a task starts a new shard after this many records (default: one
            shard per task and partition folder).
        partition_by: columns whose values name folders ``col=value/`` (not stored in the records).
        spec: the spec kept in the manifest (default: the one that reads the columns back).
    """

    path: str
    prefix: str
    compression: WriteCompression
    max_records_per_shard: int | None
    partition_by: tuple[str, ...]
    spec: dict[str, FeatureSpec]
    storage_options: dict[str, Any]

    @classmethod
    def parse(cls, raw: Mapping[str, str], schema: StructType) -> WriteOptions:
        options = {key.lower(): value for key, value in raw.items()}
        unknown = sorted(set(options) - _WRITE_KEYS)
        if unknown:
            raise ValueError(
                f"unknown option(s) {unknown} for format 'tfrecord': it takes {sorted(_WRITE_KEYS)}"
            )
        if not options.get("path"):
            raise ValueError("no path: df.write.format('tfrecord').save(path)")
        compression = options.get("compression", "none").lower()
        if compression not in ("none", "gzip", "zlib"):
            raise ValueError(f"option 'compression'={options['compression']!r} must be none, gzip or zlib")
        prefix = options.get("prefix", "part")
        if not prefix or "/" in prefix or os.sep in prefix or prefix.startswith("."):
            raise ValueError(f"option 'prefix'={prefix!r} must be a plain file name")
        most = options.get("max_records_per_shard")
        if most is not None and (not most.isdigit() or int(most) < 1):
            raise ValueError(f"option 'max_records_per_shard'={most!r} must be a positive integer")
        partition_by = tuple(
            name.strip() for name in options.get("partition_by", "").split(",") if name.strip()
        )
        missing = [name for name in partition_by if name not in schema.names]
        if missing:
            raise ValueError(f"partition_by column(s) {missing} are not in the DataFrame's {schema.names}")
        data_columns = [name for name in schema.names if name not in partition_by]
        if not data_columns:
            raise ValueError("every column is a partition_by column: nothing is left to write in the records")
        derived = spec_for_schema(schema, data_columns)  # (refuses a column no Feature list holds)
        if "spec" in options:
            parsed = parse_spec_option(options["spec"])
            if "spec" not in parsed:
                raise ValueError("the write's spec is for Examples: {'key': {...}}")
            derived = parsed["spec"]
        return cls(
            options["path"],
            prefix,
            None if compression == "none" else compression,  # type: ignore[arg-type]
            int(most) if most is not None else None,
            partition_by,
            derived,
            storage_options_of(options),
        )

    @property
    def suffix(self) -> str:
        return ".tfrecord" + {None: "", "gzip": ".gz", "zlib": ".zz"}[self.compression]


@dataclasses.dataclass(frozen=True)
class Piece:
    """One finished file of a task, under its hidden name until the commit renames it."""

    folder: str  # the partition folder, relative to the output ("" for none)
    number: int
    path: str
    framed_sizes: list[int]


@dataclasses.dataclass(frozen=True)
class PieceList(WriterCommitMessage):  # type: ignore[misc]
    """What one task attempt wrote."""

    partition: int
    attempt: int
    pieces: list[Piece]


class TFRecordWriter(DataSourceArrowWriter):  # type: ignore[misc]
    """Writes each task's rows (see the module's description)."""

    def __init__(self, options: WriteOptions, schema: StructType, overwrite: bool) -> None:
        self.options = options
        self.overwrite = overwrite
        self.root = local_path(options.path) if is_url(options.path) else os.path.abspath(options.path)
        self.manifest = manifest_for(join(self.root, options.prefix))
        if not overwrite and exists(self.manifest, options.storage_options):
            raise FileExistsError(
                f"{self.manifest!r} exists: {options.path!r} holds a dataset already "
                "(mode('overwrite') replaces it)"
            )
        self.job = secrets.token_hex(6)  # names this write's hidden files, whichever task made them
        self.data_columns = [name for name in schema.names if name not in options.partition_by]

    def _hidden(self, folder: str, partition: int, attempt: int, number: int) -> str:
        name = (
            f".{self.options.prefix}.{self.job}-{partition:05d}-{attempt}-{number:04d}{self.options.suffix}"
        )
        return join(join(self.root, folder), name) if folder else join(self.root, name)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> PieceList:
        context = TaskContext.get()
        partition = context.partitionId() if context is not None else 0
        attempt = context.taskAttemptId() if context is not None else 0
        open_writers: dict[str, RecordWriter] = {}
        pieces: list[Piece] = []
        counts: dict[str, int] = {}
        try:
            for batch in iterator:
                for folder, rows in self._split(batch):
                    writer = open_writers.get(folder)
                    for payload in encode_batch(rows):
                        if (
                            writer is not None
                            and writer.records_written == self.options.max_records_per_shard
                        ):
                            pieces.append(self._finish(folder, counts[folder] - 1, writer))
                            writer = None
                        if writer is None:
                            counts[folder] = counts.get(folder, 0) + 1
                            writer = open_writers[folder] = self._open(
                                folder, partition, attempt, counts[folder] - 1
                            )
                        writer.write(payload)
            for folder, writer in open_writers.items():
                pieces.append(self._finish(folder, counts[folder] - 1, writer))
            open_writers = {}
        finally:
            for writer in open_writers.values():
                writer.abort()
        return PieceList(partition, attempt, pieces)

    def _split(self, batch: pa.RecordBatch) -> Iterator[tuple[str, pa.RecordBatch]]:
        """The batch's rows by partition folder, without the partition columns."""
        data = batch.select(self.data_columns)
        if not self.options.partition_by:
            yield "", data
            return
        keys = list(zip(*(batch.column(name).to_pylist() for name in self.options.partition_by), strict=True))
        rows: dict[tuple[Any, ...], list[int]] = {}
        for row, key in enumerate(keys):
            rows.setdefault(key, []).append(row)
        for key, indices in rows.items():
            yield partition_folder(self.options.partition_by, key), data.take(pa.array(indices))

    def _open(self, folder: str, partition: int, attempt: int, number: int) -> RecordWriter:
        path = self._hidden(folder, partition, attempt, number)
        if not is_url(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
        return RecordWriter(
            path, compression=self.options.compression, storage_options=self.options.storage_options
        )

    @staticmethod
    def _finish(folder: str, number: int, writer: RecordWriter) -> Piece:
        writer.close()
        return Piece(folder, number, writer.path, writer.framed_sizes)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Renames the committed attempts' pieces to shards, writes the manifest, removes the rest."""
        options = self.options
        by_partition: dict[int, PieceList] = {}
        for message in messages:
            if isinstance(message, PieceList):
                by_partition.setdefault(message.partition, message)
        folders: dict[str, list[Piece]] = {}
        for partition in sorted(by_partition):
            for piece in by_partition[partition].pieces:
                folders.setdefault(piece.folder, []).append(piece)
        if not folders:  # no row at all: an empty shard, so that readers find the dataset
            empty = join(self.root, f".{options.prefix}.{self.job}-empty{options.suffix}")
            RecordWriter(
                empty, compression=options.compression, storage_options=options.storage_options
            ).close()
            folders[""] = [Piece("", 0, empty, [])]
        old = self._old_shards()
        shard_paths, sizes = [], []
        for folder in sorted(folders):
            pieces = folders[folder]
            base = join(self.root, folder) if folder else self.root
            for i, piece in enumerate(pieces):
                target = join(base, f"{options.prefix}-{i:05d}-of-{len(pieces):05d}{options.suffix}")
                indexed = options.compression is None
                move_written(piece.path, target, indexed=indexed, storage_options=options.storage_options)
                shard_paths.append(target)
                sizes.append(piece.framed_sizes)
        with_index = options.compression is None
        saved = json.loads(encode_spec_json(options.spec))
        saved[COLUMNS_KEY] = list(options.spec)  # (the manifest sorts the spec's keys; a list keeps order)
        write_manifest(
            self.manifest,
            shard_paths,
            [index_from_sizes(list(s)) for s in sizes],
            options.storage_options,
            index_paths=[default_index_path(p) if with_index else None for p in shard_paths],
            spec=saved,
            compression=options.compression,
        )
        for path in sorted(set(old) - set(shard_paths)):  # mode("overwrite"): the dataset replaced
            remove_quietly(default_index_path(path), options.storage_options)
            remove_quietly(path, options.storage_options)
        self._remove_leftovers()
        logger.info("wrote %d shards and %r", len(shard_paths), self.manifest)

    def _old_shards(self) -> list[str]:
        if not self.overwrite or not exists(self.manifest, self.options.storage_options):
            return []
        return list(read_manifest(self.manifest, self.options.storage_options).paths)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        self._remove_leftovers()

    def _remove_leftovers(self) -> None:
        """Removes every hidden file of this write (pieces of failed, killed or losing attempts)."""
        storage = self.options.storage_options
        marker = f".{self.options.prefix}.{self.job}-"
        if is_url(self.root):
            fs, root = remote.filesystem(self.root, storage)
            found = [str(p) for p in fs.find(root)]
            names = [fs.unstrip_protocol(p) for p in found if marker in p.rsplit("/", 1)[-1]]
        else:
            names = [
                os.path.join(folder, name)
                for folder, _, files in os.walk(self.root)
                for name in files
                if marker in name  # (a piece, its index, or a temporary of either)
            ]
        for name in names:
            remove_quietly(name, storage)
