"""``spark.read.format("tfrecord")``: a Spark 4 Python data source reading TFRecord files by index ranges.

The read is planned where Spark plans it, from the dataset's manifest or the shards' indexes (never
a scan): each partition is a few record ranges of about ``max_partition_bytes``, so a large shard
is read by many tasks. Each task decodes its ranges with the native batched decoder into Arrow
batches of the schema (:mod:`._types`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceWriter, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from ...codec.payloads import Payload, payload_for
from ...codec.schema import InferredSequenceSpec, infer_spec_from_records
from ...codec.spec import FeatureSpec, FixedLen, Image, RawTensor, normalize_spec
from ...codec.spec_file import decode_spec_json
from ...errors import SpecError
from ...records.reader import read_records
from ..ranges import DecodeOptions, ReadPlan, RecordRange, plan_read, read_range_packed
from ._partitions import below_folders, partitioning
from ._types import decoding_spec, in_saved_order, schema_for, spec_for_schema, to_batch
from .options import flag, parse_spec_option, positive, sources_of, storage_options_of

__all__ = ["ReadOptions", "TFRecordDataSource"]

logger = logging.getLogger(__name__)

_RECORD_TYPES = ("example", "sequence_example", "raw")


_READ_KEYS = {"path", "paths", "spec", "record_type", "on_error", "verify_crc", "max_partition_bytes"}
_READ_KEYS |= {"storage_options", "infer_records"}


@dataclasses.dataclass(frozen=True)
class ReadOptions:
    """The read's options, checked (all of them before any task runs)."""

    sources: list[str]
    spec: dict[str, FeatureSpec] | None  # Examples: None until found (saved, inferred or from a schema)
    payload: Payload | None
    on_error: str
    verify_crc: bool
    max_partition_bytes: int
    infer_records: int
    storage_options: dict[str, Any]

    @classmethod
    def parse(cls, raw: Mapping[str, str]) -> ReadOptions:
        options = {key.lower(): value for key, value in raw.items()}
        unknown = sorted(set(options) - _READ_KEYS)
        if unknown:
            raise ValueError(
                f"unknown option(s) {unknown} for format 'tfrecord': it takes {sorted(_READ_KEYS)}"
            )
        record_type = options.get("record_type", "example").lower()
        if record_type not in _RECORD_TYPES:
            raise ValueError(f"option 'record_type'={record_type!r} must be one of {list(_RECORD_TYPES)}")
        on_error = options.get("on_error", "raise").lower()
        if on_error not in ("raise", "skip"):
            raise ValueError(f"option 'on_error'={on_error!r} must be 'raise' or 'skip'")
        parsed = parse_spec_option(options["spec"]) if "spec" in options else None
        spec, payload = _spec_and_payload(record_type, parsed)
        return cls(
            sources_of(options),
            spec,
            payload,
            on_error,
            flag(options, "verify_crc", True),
            positive(options, "max_partition_bytes", 128 << 20) or 0,
            positive(options, "infer_records", 1000) or 0,
            storage_options_of(options),
        )


def _spec_and_payload(
    record_type: str, parsed: Mapping[str, Any] | None
) -> tuple[dict[str, FeatureSpec] | None, Payload | None]:
    if record_type == "raw":
        return None, payload_for("raw", None, None)
    if record_type == "sequence_example":
        if parsed is None:
            return None, None
        if "sequence_spec" not in parsed:
            raise SpecError(
                "record_type 'sequence_example' takes a spec with 'context_spec' and 'sequence_spec'"
            )
        return None, payload_for(None, parsed["context_spec"], parsed["sequence_spec"])
    if parsed is None:
        return None, None
    if "spec" not in parsed:
        raise SpecError("a spec with 'sequence_spec' is for record_type 'sequence_example'")
    return _checked(parsed["spec"]), None


def _checked(spec: Mapping[str, Any]) -> dict[str, FeatureSpec]:
    normalized = normalize_spec(spec) or {}
    if not normalized:
        raise SpecError("the spec names no feature")
    schema_for(normalized, None)  # (refuses the specs Spark has no type for, naming the key)
    return normalized


def _for_spark(spec: Mapping[str, FeatureSpec]) -> dict[str, FeatureSpec]:
    """An inferred spec as Spark reads it: images as their bytes."""
    return {
        key: FixedLen((), bytes) if isinstance(feature, Image | RawTensor) else feature
        for key, feature in spec.items()
    }


class _Resolved:
    """The plan and the spec of a read (from the options, the manifest, a schema or the records)."""

    def __init__(self, options: ReadOptions, schema: StructType | None = None) -> None:
        self.options = options
        self.plan: ReadPlan = plan_read(options.sources, options.storage_options)
        self.partitioning = partitioning(self.plan.paths, below_folders(self.plan, options.sources))
        self.spec, self.payload = options.spec, options.payload
        if self.spec is None and self.payload is None:
            self._find_spec(schema)
        if self.spec is not None:  # (a column both in the records and a folder is the folder's, as in Spark)
            self.spec = {key: spec for key, spec in self.spec.items() if key not in self.partitioning.names}

    def _find_spec(self, schema: StructType | None) -> None:
        saved = self.plan.saved_spec
        if saved is not None:
            parsed = decode_spec_json(json.dumps(saved), f"the spec of {self.plan.manifest.location!r}")  # type: ignore[union-attr]
            if parsed is not None and "spec" in parsed:
                self.spec = in_saved_order(_checked(parsed["spec"]), saved)
            elif parsed is not None:
                self.payload = payload_for(None, parsed["context_spec"], parsed["sequence_spec"])
        data = None if schema is None else [n for n in schema.names if n not in self.partitioning.names]
        if self.spec is not None and data is not None and set(data) <= set(self.spec):
            self.spec = {key: self.spec[key] for key in data}
        elif schema is not None and self.payload is None:
            self.spec = spec_for_schema(schema, data)
        elif self.spec is None and self.payload is None:
            self._infer()

    def _infer(self) -> None:
        records: list[bytes] = []
        for path in self.plan.paths:
            reader = read_records(  # (a damaged record says nothing of the spec)
                path, on_error="skip", storage_options=self.options.storage_options
            )
            for record in reader:
                records.append(record)
                if len(records) >= self.options.infer_records:
                    break
            reader.close()  # type: ignore[attr-defined]
            if len(records) >= self.options.infer_records:
                break
        if not records:
            raise SpecError(f"no records in {self.options.sources} to infer a spec from: give option 'spec'")
        inferred = infer_spec_from_records(records)
        if isinstance(inferred, InferredSequenceSpec):
            self.payload = payload_for(
                None, _for_spark(inferred.context_spec), _for_spark(inferred.sequence_spec)
            )
        else:
            self.spec = _checked(_for_spark(inferred))

    def schema(self) -> StructType:
        """The records' columns, then the partition folders' (as Spark's Parquet orders them)."""
        return StructType([*schema_for(self.spec, self.payload).fields, *self.partitioning.fields])


class TFRecordDataSource(DataSource):
    """TFRecord files as a Spark data source named ``"tfrecord"`` (see :func:`torch_tfrecord.spark.register`).

    Read options: ``path`` (``load(path)``: a file, glob, folder, URL or manifest) or ``paths`` (a
    JSON list), ``spec`` (JSON as ``spec.json`` holds it, or its feature mapping; default: the
    manifest's saved spec, else the schema given with ``.schema()``, else inferred from the first
    ``infer_records`` records), ``record_type`` (``example``, ``sequence_example``, ``raw``),
    ``on_error`` (``raise`` / ``skip``), ``verify_crc``, ``max_partition_bytes`` (default 128 MiB),
    ``storage_options`` (JSON). ``key=value`` folders below the folder or manifest named are
    columns, last, typed as Spark types Parquet's. Write options: see
    :class:`~torch_tfrecord.integrations.spark.sink.WriteOptions`.
    """

    @classmethod
    def name(cls) -> str:
        return "tfrecord"

    def schema(self) -> StructType:
        return _Resolved(ReadOptions.parse(self.options)).schema()

    def reader(self, schema: StructType) -> DataSourceReader:
        options = ReadOptions.parse(self.options)
        resolved = _Resolved(options, schema)
        return TFRecordReader(resolved, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from .sink import TFRecordWriter, WriteOptions

        return TFRecordWriter(WriteOptions.parse(self.options, schema), schema, overwrite)


class TFRecordReader(DataSourceReader):
    """Reads the ranges of one partition (sent to each task: the options and the record ranges)."""

    def __init__(self, resolved: _Resolved, schema: StructType) -> None:
        options = resolved.options
        self.spec, self.payload = resolved.spec, resolved.payload
        decode_with = decoding_spec(self.spec) if self.spec is not None else None
        self.decode = DecodeOptions(
            decode_with,
            self.payload,
            None,
            options.verify_crc,
            options.on_error,  # type: ignore[arg-type]
            options.storage_options,
        )
        found = resolved.partitioning
        folder_columns = [name for name in schema.names if name in found.names]
        self.arrow_schema: pa.Schema = to_arrow_schema(
            StructType([field for field in schema.fields if field.name not in folder_columns])
        )
        self.folder_fields = [
            (to_arrow_schema(StructType([schema[name]])).field(0), found.names.index(name))
            for name in folder_columns
        ]
        self.folder_values = found.values if folder_columns else {}
        self.groups = resolved.plan.ranges(options.max_partition_bytes)

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(group) for group in self.groups]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        ranges: list[RecordRange] = partition.value
        skipped = 0
        skip = self.decode.on_error == "skip"
        for rng in ranges:
            for decoded in read_range_packed(rng, self.decode):
                skipped += decoded.skipped
                if decoded.num_rows == 0:
                    continue
                batch, dropped = to_batch(
                    decoded.columns,
                    self.spec,
                    self.payload,
                    self.arrow_schema,
                    num_rows=decoded.num_rows,
                    keep=decoded.keep,
                    locate=decoded.locate,
                    skip=skip,
                )
                skipped += dropped
                if batch.num_rows:
                    yield self._with_folders(batch, rng.path)
        if skipped:
            logger.warning("skipped %d damaged record(s) in %s", skipped, [r.path for r in ranges])

    def _with_folders(self, batch: pa.RecordBatch, path: str) -> pa.RecordBatch:
        """The batch with its shard's partition columns (each its folder's value in every row)."""
        if not self.folder_fields:
            return batch
        arrays, fields = list(batch.columns), list(batch.schema)
        for field, position in self.folder_fields:
            text = self.folder_values[path][position]
            try:
                arrays.append(pa.repeat(pa.scalar(text, pa.string()), batch.num_rows).cast(field.type))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
                raise SpecError(
                    f"partition column {field.name!r} of {path!r}: its folder's value {text!r} is not "
                    f"a {field.type} ({error})"
                ) from None
            fields.append(field)
        return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))
