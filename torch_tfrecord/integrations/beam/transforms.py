"""Beam transforms: dicts to indexed shards with the manifest (:class:`WriteExamples`), and shards to
dicts of NumPy values or Arrow tables, read by index ranges (:class:`ReadExamples`).

Writing: each element is encoded as an Example where it is, keyed to a shard by its bytes'
CRC32C (the same element goes to the same shard on a retry), the shards' records gathered, and
each shard written by :class:`torch_tfrecord.RecordWriter` (a temporary name, renamed whole with
its index: a retried bundle writes it again, never half); the last step gathers the shards'
summaries (their records' framed sizes) and writes ``{prefix}.manifest.json``.

Reading: the sources are planned on a worker (:func:`~torch_tfrecord.integrations.ranges.plan_read`:
the manifest or the indexes, never a scan) into index ranges of about ``max_range_bytes``, which a
Reshuffle spreads over the workers; each range is read and decoded in batches by the native
decoder. Damaged records skipped with ``on_error="skip"`` are counted in the Beam counter
``torch_tfrecord/skipped_records``.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal

import apache_beam as beam
import numpy as np
import torch

from ...codec.decode import SpecArg
from ...codec.encode import encode_example
from ...codec.payloads import payload_for
from ...codec.ragged import Ragged
from ...codec.spec import FeatureSpec, normalize_spec
from ...codec.spec_file import decode_spec_json, encode_spec_json
from ...records.framing import crc32c
from ...records.index import default_index_path, index_from_sizes
from ...records.io import PathLike, StorageOptions, is_url, local_path
from ...records.manifest import manifest_for, write_manifest
from ...records.reader import OnError
from ...records.writer import RecordWriter, WriteCompression
from ..ranges import DecodeOptions, RecordRange, plan_read, read_range, read_range_packed

__all__ = ["ReadExamples", "WriteExamples"]

logger = logging.getLogger(__name__)

_NAMESPACE = "torch_tfrecord"


def _numpy_rows(column: Any) -> Sequence[Any]:
    """A decoded column as one NumPy value per row (views of one array per column, not a tensor
    per row: a Python object per value costs more than the decode)."""
    if isinstance(column, torch.Tensor):
        array = (column.float() if column.dtype == torch.bfloat16 else column).numpy()
        return list(array)
    if isinstance(column, Ragged):
        values = (column.values.float() if column.values.dtype == torch.bfloat16 else column.values).numpy()
        bounds = column.offsets.tolist()
        return [values[begin:end] for begin, end in itertools.pairwise(bounds)]
    if isinstance(column, list):
        return column
    raise TypeError(f"no NumPy rows for a column of type {type(column).__name__}")


class WriteExamples(beam.PTransform):  # type: ignore[misc]
    """Writes a PCollection of dicts (or serialized Examples) as indexed shards with the manifest.

    Shards are named ``{prefix}-00000-of-000NN{suffix}``; each uncompressed one gets its ``.idx``,
    and the dataset ``{prefix}.manifest.json`` (with ``spec`` saved in it, when given), so
    :class:`torch_tfrecord.TFRecordDataset` starts at once. The output PCollection holds the
    manifest's path, once everything is written.

    Args:
        prefix: path or URL prefix of the shards, e.g. ``"out/train"``.
        spec: the spec to keep in the manifest (the one that reads the records back).
        num_shards: how many shards (each element goes to one by its bytes' hash).
        compression: None, ``"gzip"`` or ``"zlib"``.
        suffix: file name ending; default ``.tfrecord`` (plus ``.gz`` / ``.zz`` when compressed).
        storage_options: for the fsspec file system of URLs.

    Example:
        >>> rows | tt.beam.WriteExamples("out/train", num_shards=16)  # doctest: +SKIP
    """

    def __init__(
        self,
        prefix: PathLike,
        spec: Mapping[str, Any] | None = None,
        *,
        num_shards: int = 1,
        compression: WriteCompression = None,
        suffix: str | None = None,
        storage_options: StorageOptions = None,
    ) -> None:
        super().__init__()
        if num_shards < 1:
            raise ValueError(f"{num_shards=} must be positive")
        if compression not in (None, "gzip", "zlib"):
            raise ValueError(f"{compression=} must be None, 'gzip' or 'zlib'")
        self.prefix = local_path(prefix) if is_url(os.fspath(prefix)) else os.path.abspath(os.fspath(prefix))
        self.spec_json = None if spec is None else encode_spec_json(spec)  # (checks it now)
        self.num_shards = num_shards
        self.compression: WriteCompression = compression
        self.suffix = (
            suffix
            if suffix is not None
            else ".tfrecord" + {None: "", "gzip": ".gz", "zlib": ".zz"}[compression]
        )
        self.storage_options = dict(storage_options or {})

    def shard_path(self, shard: int) -> str:
        return f"{self.prefix}-{shard:05d}-of-{self.num_shards:05d}{self.suffix}"

    def expand(self, pcoll: Any) -> Any:
        shards = self.num_shards
        keyed = pcoll | "Encode" >> beam.Map(_encode_keyed, shards)
        written = keyed | "Gather" >> beam.GroupByKey() | "WriteShards" >> beam.MapTuple(self._write_shard)
        return (
            written
            | "Summaries" >> beam.combiners.ToList()
            | "WriteManifest" >> beam.Map(self._write_manifest)
        )

    def _write_shard(self, shard: int, records: Iterable[bytes]) -> tuple[int, list[int]]:
        path = self.shard_path(shard)
        if not is_url(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
        with RecordWriter(path, compression=self.compression, storage_options=self.storage_options) as writer:
            for record in records:
                writer.write(record)
        return shard, writer.framed_sizes

    def _write_manifest(self, summaries: list[tuple[int, list[int]]]) -> str:
        """Writes the shards no element went to (empty), then the manifest of all."""
        sizes = dict(summaries)
        for shard in range(self.num_shards):
            if shard not in sizes:
                self._write_shard(shard, [])
                sizes[shard] = []
        paths = [self.shard_path(shard) for shard in range(self.num_shards)]
        with_index = self.compression is None
        location = manifest_for(self.prefix)
        write_manifest(
            location,
            paths,
            [index_from_sizes(sizes[shard]) for shard in range(self.num_shards)],
            self.storage_options,
            index_paths=[default_index_path(path) if with_index else None for path in paths],
            spec=None if self.spec_json is None else json.loads(self.spec_json),
            compression=self.compression,
        )
        logger.info(
            "wrote %d records in %d shards and %r", sum(map(len, sizes.values())), len(paths), location
        )
        return location


def _encode_keyed(element: Mapping[str, Any] | bytes, shards: int) -> tuple[int, bytes]:
    """An element as a serialized Example, keyed by the shard it goes to (by its bytes: the same
    element goes to the same shard whichever worker, and attempt, encodes it)."""
    record = (
        bytes(element) if isinstance(element, bytes | bytearray | memoryview) else encode_example(element)
    )
    return crc32c(record) % shards, record


class ReadExamples(beam.PTransform):  # type: ignore[misc]
    """Reads TFRecord files into a PCollection: one dict of NumPy values per record (or, with
    ``output="arrow"``, one ``pyarrow.Table`` per decoded batch).

    Args:
        sources: files, globs, folders, URLs, or a manifest.
        spec: the features (as for :class:`torch_tfrecord.TFRecordDataset`); None: the manifest's
            saved spec, else every feature as a 1-D array of what it holds. ``"raw"``: each
            record's bytes under ``"record"``.
        context_spec, sequence_spec: for SequenceExamples.
        on_error: ``"raise"``, or ``"skip"``: damaged records are left out, logged and counted
            (Beam counter ``torch_tfrecord/skipped_records``).
        verify_crc: check both CRCs of each record.
        max_range_bytes: the framed bytes one range (one unit of work) reads, about (16 MiB).
        output: ``"numpy"`` (dicts) or ``"arrow"`` (tables; Examples decoded by a spec).
        storage_options: for the fsspec file system of URLs.

    Example:
        >>> pipeline | tt.beam.ReadExamples("out/train.manifest.json")  # doctest: +SKIP
    """

    def __init__(
        self,
        sources: PathLike | Sequence[PathLike],
        spec: SpecArg | Literal["raw"] = None,
        *,
        context_spec: SpecArg = None,
        sequence_spec: SpecArg = None,
        on_error: OnError = "raise",
        verify_crc: bool = True,
        max_range_bytes: int = 16 << 20,
        output: Literal["numpy", "arrow"] = "numpy",
        storage_options: StorageOptions = None,
    ) -> None:
        super().__init__()
        items = [sources] if isinstance(sources, str | os.PathLike) else list(sources)
        self.sources = [os.fspath(item) for item in items]
        self.payload = payload_for(spec, context_spec, sequence_spec)
        self.spec = None if self.payload is not None else normalize_spec(spec)  # type: ignore[arg-type]
        if output not in ("numpy", "arrow"):
            raise ValueError(f"{output=} must be 'numpy' or 'arrow'")
        if output == "arrow" and self.payload is not None:
            raise ValueError("output='arrow' is for Examples read with a spec")
        if max_range_bytes < 1:
            raise ValueError(f"{max_range_bytes=} must be positive")
        self.options = DecodeOptions(
            self.spec, self.payload, None, verify_crc, on_error, dict(storage_options or {})
        )
        self.max_range_bytes = max_range_bytes
        self.output = output

    def expand(self, pbegin: Any) -> Any:
        return (
            pbegin
            | "Sources" >> beam.Create([self.sources])
            | "Plan" >> beam.FlatMap(self._plan)
            | "Spread" >> beam.Reshuffle()
            | "Read" >> beam.ParDo(_ReadRanges(self.output))
        )

    def _plan(self, sources: list[str]) -> Iterator[tuple[list[RecordRange], DecodeOptions]]:
        plan = plan_read(sources, self.options.storage_options)
        options = self.options
        if options.spec is None and options.payload is None and plan.saved_spec is not None:
            parsed = decode_spec_json(json.dumps(plan.saved_spec), "the manifest's spec")
            if parsed is not None and "spec" in parsed:
                options = DecodeOptions(
                    parsed["spec"], None, None, options.verify_crc, options.on_error, options.storage_options
                )
        if self.output == "arrow" and options.spec is None:
            raise ValueError("output='arrow' needs a spec (given, or saved in the manifest)")
        for group in plan.ranges(self.max_range_bytes):
            yield group, options


class _ReadRanges(beam.DoFn):  # type: ignore[misc]
    def __init__(self, output: str) -> None:
        self.output = output
        self.skipped = beam.metrics.Metrics.counter(_NAMESPACE, "skipped_records")
        self.read = beam.metrics.Metrics.counter(_NAMESPACE, "records")

    def process(self, element: tuple[list[RecordRange], DecodeOptions]) -> Iterator[Any]:
        group, options = element
        arrow = self.output == "arrow"  # its bytes columns packed: Arrow's buffers, no object per value
        for rng in group:
            for decoded in (read_range_packed if arrow else read_range)(rng, options):
                self.skipped.inc(decoded.skipped)
                if decoded.num_rows == 0:
                    continue
                rows = np.arange(decoded.num_rows) if decoded.keep is None else np.flatnonzero(decoded.keep)
                self.read.inc(len(rows))
                if arrow:
                    yield _arrow_table(decoded.columns, options.spec, decoded.keep)
                    continue
                kept = {key: value for key, value in decoded.columns.items() if not key.startswith("_")}
                columns = {key: _numpy_rows(value) for key, value in kept.items()}
                for row in rows.tolist():
                    yield {key: column[row] for key, column in columns.items()}


def _arrow_table(columns: Mapping[str, Any], spec: Mapping[str, FeatureSpec] | None, keep: Any) -> Any:
    import pyarrow as pa

    from ...codec.arrow import plain_column

    table = pa.table({key: plain_column((spec or {}).get(key), value) for key, value in columns.items()})
    return table if keep is None else table.filter(pa.array(keep))
