"""A Ray Data datasource for TFRecord files of Examples, read and decoded by torch-tfrecord.

The plan is made on the driver from the indexes: the records of all indexed files, in file
order, are cut into runs of about equal bytes, as many as Ray asks for (never more than the
records), and each read task knows its row count and size before it runs. A task reads its
run with positional reads (local) or merged ranged requests (URLs) and decodes it with the
native batched decoder into Arrow blocks. A file without an index (or a compressed one) is
read whole, front to back, by one task of its own: such files are read in parallel with each
other, not split.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import ray.data
from ray.data.block import BlockMetadata
from ray.data.datasource import Datasource, ReadTask

from ...codec.decode import SpecArg, decode_batch
from ...codec.payloads import Payload, payload_for
from ...codec.schema import sample_dtypes
from ...codec.spec import FeatureSpec, normalize_spec
from ...data.decoding import BatchDecoder
from ...errors import ExampleDecodeError, FeatureError, TFRecordError
from ...records.compressed.index import CompressedIndex
from ...records.index import default_index_path, load_index
from ...records.io import PathLike, StorageOptions, exists, file_size, resolve_compression
from ...records.listing import expand_sources
from ...records.reader import OnError, read_records
from ...records.shards.files import RecordFiles
from ...records.shards.index import IndexArg, resolve_index
from ..ranges import decodable_records, plan_runs
from ._arrow import columns_to_table, payload_table

__all__ = ["TFRecordDatasource", "plan_runs", "read_tfrecords"]

logger = logging.getLogger(__name__)

_BLOCK_BYTES = 32 << 20  # framed bytes decoded into one block (a task yields several)
_BLOCK_RECORDS = 65536
_SAMPLE_RECORDS = 256  # spec=None: records read on the driver to find the keys and their types
_SAMPLE_FILES = 32
# A read task costs Ray tens of milliseconds to schedule on a loaded machine: unless the number
# of blocks is given, no task reads fewer bytes than this (Ray's own default asks for 1 MiB).
MIN_TASK_BYTES = 8 << 20


@dataclass(frozen=True)
class _Options:
    """What every read task needs besides its records."""

    spec: dict[str, FeatureSpec] | None
    dtypes: dict[str, Any] | None  # spec=None: every key the sample found, with its type
    verify_crc: bool
    on_error: OnError
    storage_options: dict[str, Any]
    payload: Payload | None = None  # spec="raw" or SequenceExamples (None: Examples)

    def table(
        self, columns: dict[str, Any], num_rows: int, keep: npt.NDArray[np.bool_] | None = None
    ) -> pa.Table:
        if self.payload is not None:
            return payload_table(columns, self.payload, num_rows=num_rows, keep=keep)
        return columns_to_table(columns, self.spec, num_rows=num_rows, keep=keep, dtypes=self.dtypes)

    def decode(self, records: list[bytes], locations: list[str] | None = None) -> dict[str, Any]:
        if self.payload is not None:
            return self.payload.decode(records, locations)
        return decode_batch(records, self.spec, locations=locations, dtypes=self.dtypes)


class _ReadRun:
    """A read task's work: records ``[start, stop)`` of the files it touches (full index tables,
    so that errors name each record's number in its file)."""

    def __init__(
        self,
        paths: list[str],
        tables: list[npt.NDArray[np.int64]],
        start: int,
        stop: int,
        options: _Options,
    ) -> None:
        self.paths, self.tables, self.start, self.stop, self.options = paths, tables, start, stop, options

    def __call__(self) -> Iterator[pa.Table]:
        options = self.options
        files = RecordFiles.of_tables(self.paths, self.tables, options.storage_options)
        decoder = BatchDecoder(
            files,
            options.spec,
            verify_crc=options.verify_crc,
            on_error=options.on_error,
            payload=options.payload,
        )
        try:
            for first, stop in _chunks(files, self.start, self.stop):
                ids = np.arange(first, stop, dtype=np.int64)
                table = _decode_ids(decoder, ids, options)
                if table is not None and table.num_rows:
                    yield table
        finally:
            files.close()


def _chunks(files: RecordFiles, start: int, stop: int) -> Iterator[tuple[int, int]]:
    """Pieces of ``[start, stop)`` of at most _BLOCK_BYTES framed bytes or _BLOCK_RECORDS records."""
    sizes = np.concatenate([table[:, 1] for table in files.tables])[start:stop]
    ends = np.cumsum(sizes)
    first = 0
    while first < len(sizes):
        base = ends[first - 1] if first else 0
        stop_at = int(np.searchsorted(ends, base + _BLOCK_BYTES, side="right"))
        stop_at = min(max(stop_at, first + 1), first + _BLOCK_RECORDS, len(sizes))
        yield start + first, start + stop_at
        first = stop_at


def _decode_ids(decoder: BatchDecoder, ids: npt.NDArray[np.int64], options: _Options) -> pa.Table | None:
    padding = np.zeros(len(ids), dtype=bool)
    try:
        columns, _, marked = decoder.decode(ids, padding)
    except TFRecordError as error:
        # With "skip", the decoder raises a plain TFRecordError only when every record of the
        # chunk is damaged (each one logged): nothing is left of it. Anything else is raised.
        if options.on_error == "skip" and type(error) is TFRecordError:
            return None
        raise
    return options.table(columns, len(ids), keep=~marked)


class _ReadFile:
    """A read task's work: one file without an index (or compressed), front to back."""

    def __init__(self, path: str, options: _Options) -> None:
        self.path, self.options = path, options

    def __call__(self) -> Iterator[pa.Table]:
        options = self.options
        records = read_records(
            self.path,
            verify_crc=options.verify_crc,
            on_error=options.on_error,
            storage_options=options.storage_options,
        )
        number = 0
        while True:
            batch, size = [], 0
            for record in records:
                batch.append(record)
                size += len(record)
                if size >= _BLOCK_BYTES or len(batch) >= _BLOCK_RECORDS:
                    break
            if not batch:
                return
            table = self._decode(batch, number)
            number += len(batch)
            if table.num_rows:
                yield table

    def _decode(self, records: list[bytes], first: int) -> pa.Table:
        options = self.options
        try:
            return options.table(options.decode(records), len(records))
        except (FeatureError, ExampleDecodeError):
            pass  # decode again record by record, to raise or skip naming the record
        good = decodable_records(records, first, self.path, options.decode, options.on_error)
        return options.table(options.decode(good), len(good))


def _find_index(path: str, index: IndexArg, storage_options: StorageOptions) -> npt.NDArray[np.int64] | None:
    """The file's index table, or None when it has none (it is then read front to back).

    An index that exists but does not describe its file is an error (StaleIndexError). A GZIP /
    ZLIB file is read front to back by one task, whatever index it has.
    """
    if resolve_compression("auto", path, storage_options) is not None:
        return None
    if index is not None:
        found = resolve_index(path, index, storage_options)
        return None if isinstance(found, CompressedIndex) else found
    index_path = default_index_path(path)
    if exists(index_path, storage_options):
        return load_index(index_path, data_path=path, storage_options=storage_options)
    return None


class TFRecordDatasource(Datasource):  # type: ignore[misc]
    """TFRecord files of Examples as a Ray Data datasource (see :func:`read_tfrecords`).

    The files are listed and their indexes loaded (and checked) when it is made, on the driver.
    Arguments as for :func:`read_tfrecords`, and ``min_task_bytes``: the indexed records are cut
    into as many runs as Ray asks for, but none smaller than this many bytes (0: no floor).
    """

    def __init__(
        self,
        sources: PathLike | Sequence[PathLike],
        *,
        spec: SpecArg | str = None,
        context_spec: SpecArg = None,
        sequence_spec: SpecArg = None,
        index: IndexArg = None,
        verify_crc: bool = True,
        on_error: OnError = "raise",
        storage_options: StorageOptions = None,
        min_task_bytes: int = MIN_TASK_BYTES,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        if on_error not in ("raise", "skip"):
            raise ValueError(f"{on_error=} must be 'raise' or 'skip'")
        payload = payload_for(spec, context_spec, sequence_spec)
        normalized = normalize_spec(spec) if payload is None else None  # type: ignore[arg-type]
        if payload is None and normalized is not None and not normalized:
            raise ValueError("spec names no feature: give at least one, or spec=None for all")
        options = dict(storage_options or {})
        self.paths = expand_sources(sources, options)
        self.tables = [_find_index(path, index, options) for path in self.paths]
        self.sizes = [
            int(table[:, 1].sum()) if table is not None else file_size(path, options)
            for path, table in zip(self.paths, self.tables)
        ]
        for path, table in zip(self.paths, self.tables):
            if table is None:
                compression = resolve_compression("auto", path, options)
                logger.info(
                    "%r has no index%s: one read task reads it whole (`tfrecord-index build` lets "
                    "several tasks share it)",
                    path,
                    f" ({compression.upper()}-compressed)" if compression else "",
                )
        dtypes = self._sample_dtypes(options) if normalized is None and payload is None else None
        self.options = _Options(normalized, dtypes, verify_crc, on_error, options, payload)
        self.min_task_bytes = min_task_bytes

    def _sample_dtypes(self, storage_options: dict[str, Any]) -> dict[str, Any]:
        """spec=None: the keys (and their types) of the first records of the first files."""
        files = self.paths[:_SAMPLE_FILES]
        per_file = max(1, math.ceil(_SAMPLE_RECORDS / max(1, len(files))))
        sample: list[bytes] = []
        for path in files:
            records = read_records(path, verify_crc=False, on_error="skip", storage_options=storage_options)
            sample.extend(itertools.islice(records, per_file))
            records.close()  # type: ignore[attr-defined]
        return sample_dtypes(sample)

    @property
    def num_records(self) -> int | None:
        """Records in all files; None when a file has no index (its count is not known)."""
        if any(table is None for table in self.tables):
            return None
        return sum(len(table) for table in self.tables if table is not None)

    def estimate_inmemory_data_size(self) -> int | None:
        return sum(self.sizes)

    def get_name(self) -> str:
        return "TorchTFRecord"

    def get_read_tasks(
        self, parallelism: int, per_task_row_limit: int | None = None, data_context: Any = None
    ) -> list[ReadTask]:
        """About ``parallelism`` tasks: indexed records in runs of equal bytes, plus one task
        per file without an index; in file order."""
        indexed = [i for i, table in enumerate(self.tables) if table is not None]
        whole = [i for i, table in enumerate(self.tables) if table is None]
        tasks: list[tuple[int, ReadTask]] = []  # (first file, task), to sort into file order
        for i in whole:
            metadata = BlockMetadata(
                num_rows=None, size_bytes=self.sizes[i], input_files=(self.paths[i],), exec_stats=None
            )
            read = _ReadFile(self.paths[i], self.options)
            tasks.append((i, ReadTask(read, metadata, None, per_task_row_limit)))
        if indexed:
            tables = [self.tables[i] for i in indexed]
            framed = np.concatenate([table[:, 1] for table in tables])  # type: ignore[index]
            counts = np.array([len(table) for table in tables], dtype=np.int64)  # type: ignore[arg-type]
            starts = np.concatenate([[0], np.cumsum(counts)])
            wanted = max(1, parallelism - len(whole))
            if self.min_task_bytes > 0:
                wanted = min(wanted, max(1, math.ceil(int(framed.sum()) / self.min_task_bytes)))
            for start, stop in plan_runs(framed, wanted):
                first = int(np.searchsorted(starts, start, side="right")) - 1
                last = int(np.searchsorted(starts, stop - 1, side="right")) - 1
                files = indexed[first : last + 1]
                run = _ReadRun(
                    [self.paths[i] for i in files],
                    [self.tables[i] for i in files],  # type: ignore[misc]
                    int(start - starts[first]),
                    int(stop - starts[first]),
                    self.options,
                )
                metadata = BlockMetadata(
                    num_rows=stop - start,
                    size_bytes=int(framed[start:stop].sum()),
                    input_files=tuple(self.paths[i] for i in files),
                    exec_stats=None,
                )
                tasks.append((files[0], ReadTask(run, metadata, None, per_task_row_limit)))
        tasks.sort(key=lambda item: item[0])
        return [task for _, task in tasks]


def read_tfrecords(
    sources: PathLike | Sequence[PathLike],
    *,
    spec: SpecArg | str = None,
    context_spec: SpecArg = None,
    sequence_spec: SpecArg = None,
    index: IndexArg = None,
    verify_crc: bool = True,
    on_error: OnError = "raise",
    storage_options: StorageOptions = None,
    override_num_blocks: int | None = None,
    concurrency: int | None = None,
    **read_options: Any,
) -> ray.data.Dataset:
    """Reads TFRecord files of Examples (or raw records, SequenceExamples) into a Ray Dataset.

    One row per record, in file order.

    Args:
        sources: files, globs, directories or URLs such as ``"s3://bucket/train-*.tfrecord"``.
        spec: feature specs, as for :func:`torch_tfrecord.decode_batch`. A numeric
            :class:`~torch_tfrecord.FixedLen` becomes a scalar or fixed-shape tensor column, a
            :class:`~torch_tfrecord.VarLen` a list column, bytes / str binary / string columns,
            an :class:`~torch_tfrecord.Image` a (variable-shaped) uint8 CHW tensor column.
            None reads every feature as a list column of the type it holds (keys and types from
            the first records of the first files; decoded with protobuf, several times slower
            than with a spec). ``"raw"``: one binary column ``record``, each record's bytes
            (CRC checked), for records that are not Examples.
        context_spec: with ``sequence_spec``, for ``tf.train.SequenceExample`` records (instead
            of ``spec``, as in :class:`torch_tfrecord.TFRecordDataset`): the context features,
            columns as for Examples.
        sequence_spec: the feature lists (FixedLenSequence or VarLen): each a list column of the
            row's steps, unpadded (a fixed-shape numeric step a fixed-size list, a VarLen step
            a list); the step counts are the lists' lengths.
        index: where the indexes are (see :data:`torch_tfrecord.records.shards.files.IndexArg`). None:
            ``<path>.idx`` when it exists (it must describe its file); a file with none, or
            a compressed one, is read whole by one task.
        verify_crc: check both CRCs of every record.
        on_error: ``"raise"``, or ``"skip"``: a damaged record is logged (naming file and
            record) and left out; in a file read front to back without an index, the rest of
            the file is left out (framing cannot be resynchronised).
        storage_options: for the fsspec file system of URLs.
        override_num_blocks: the number of read tasks. By default Ray chooses (a block per
            MiB, at least twice the CPUs, up to 200), and no task reads less than 8 MiB.
        concurrency: the most read tasks at once.
        read_options: anything else :func:`ray.data.read_datasource` takes (``num_cpus``,
            ``memory``, ``runtime_env`` ...).

    Returns:
        A lazy :class:`ray.data.Dataset`.

    Example:
        >>> ds = tt.ray.read_tfrecords(  # doctest: +SKIP
        ...     "data/train-*.tfrecord",
        ...     spec={"image": tt.Image(), "label": tt.FixedLen((), torch.int64)},
        ... )
        >>> for batch in ds.iter_torch_batches(batch_size=256): ...  # doctest: +SKIP
    """
    datasource = TFRecordDatasource(
        sources,
        spec=spec,
        context_spec=context_spec,
        sequence_spec=sequence_spec,
        index=index,
        verify_crc=verify_crc,
        on_error=on_error,
        storage_options=storage_options,
        min_task_bytes=0 if override_num_blocks else MIN_TASK_BYTES,
    )
    dataset: ray.data.Dataset = ray.data.read_datasource(
        datasource,
        override_num_blocks=override_num_blocks,
        concurrency=concurrency,
        **read_options,
    )
    return dataset
