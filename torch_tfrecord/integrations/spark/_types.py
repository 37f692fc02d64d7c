"""Specs as Spark schemas, decoded columns as Arrow batches of that schema, and Spark rows as Examples.

Reading: a FixedLen numeric feature is a Spark number (``LongType`` for int64 ...), an array per
dimension for a shape; bytes ``BinaryType``, str ``StringType``; a VarLen an array. A FixedLen
feature without a default that a record lacks is a null (so a null written reads back as one); a
FixedLenSequence / VarLen feature list an array of its steps.

Writing: each Spark type has its Feature list (integers and booleans int64_list, floats
float_list, strings and binary bytes_list; arrays of them the same, flattened); a null leaves the
feature out of the record. The spec that reads the rows back as they were is kept in the manifest:
scalars FixedLen (of the column's dtype: a DoubleType comes back a double, with a float32's
precision, which is what a float_list holds), arrays VarLen (a null array reads back empty), with
the columns' order beside it (``"columns"``), so a read gives them in the DataFrame's order.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch
from pyspark.sql import types as st

from ...codec.arrow import binary_array, encode_rows, list_array, numpy_of, plain_column, steps_array
from ...codec.byte_column import ByteColumn
from ...codec.payloads import LENGTHS_KEY, RECORD_KEY, Payload, RawPayload, SequencePayload
from ...codec.ragged import Ragged
from ...codec.spec import FeatureSpec, FixedLen, FixedLenSequence, Image, RawTensor, VarLen
from ...errors import FeatureError, SpecError

__all__ = [
    "COLUMNS_KEY",
    "decoding_spec",
    "encode_batch",
    "in_saved_order",
    "schema_for",
    "spec_for_schema",
    "to_batch",
]

COLUMNS_KEY = "columns"
"""Beside the spec a write saves in the manifest: the DataFrame's column order (the manifest's JSON
sorts an object's keys, so the spec's own order is lost there)."""

_SPARK_OF: dict[Any, st.DataType] = {
    torch.int64: st.LongType(),
    torch.int32: st.IntegerType(),
    torch.int16: st.ShortType(),
    torch.int8: st.ByteType(),
    torch.uint8: st.ShortType(),
    torch.bool: st.BooleanType(),
    torch.float32: st.FloatType(),
    torch.float64: st.DoubleType(),
    torch.float16: st.FloatType(),
    torch.bfloat16: st.FloatType(),
    bytes: st.BinaryType(),
    str: st.StringType(),
}
_DTYPE_OF: list[tuple[type[st.DataType], Any]] = [
    (st.LongType, torch.int64),
    (st.IntegerType, torch.int32),
    (st.ShortType, torch.int16),
    (st.ByteType, torch.int8),
    (st.BooleanType, torch.bool),
    (st.FloatType, torch.float32),
    (st.DoubleType, torch.float64),
    (st.BinaryType, bytes),
    (st.StringType, str),
]


def _element(dtype: Any, key: str) -> st.DataType:
    if dtype not in _SPARK_OF:
        raise SpecError(f"feature {key!r}: no Spark type for dtype {dtype!r}")
    return _SPARK_OF[dtype]


def _nested(element: st.DataType, shape: tuple[int, ...]) -> st.DataType:
    for _ in shape:
        element = st.ArrayType(element)
    return element


def spark_type(key: str, spec: FeatureSpec, *, sequence: bool = False) -> st.DataType:
    """The Spark type of a feature's column (``sequence``: a SequenceExample's feature list)."""
    if isinstance(spec, Image | RawTensor):
        raise SpecError(
            f"feature {key!r}: {type(spec).__name__} decodes to tensors, which Spark has no type for; "
            "read it as tt.FixedLen((), bytes) and decode it in your job"
        )
    element = _element(getattr(spec, "dtype", None), key)
    if sequence:
        step = _nested(element, spec.shape) if isinstance(spec, FixedLenSequence) else st.ArrayType(element)
        return st.ArrayType(step)
    if isinstance(spec, FixedLen):
        return _nested(element, spec.shape)
    if isinstance(spec, VarLen | FixedLenSequence):
        return st.ArrayType(element)
    raise SpecError(f"feature {key!r}: {type(spec).__name__} is not a spec Spark reads")


def schema_for(spec: Mapping[str, FeatureSpec] | None, payload: Payload | None) -> st.StructType:
    """The Spark schema of what ``spec`` (or ``payload``: raw records, SequenceExamples) decodes."""
    if isinstance(payload, RawPayload):
        return st.StructType([st.StructField(RECORD_KEY, st.BinaryType())])
    fields = []
    if isinstance(payload, SequencePayload):
        for key, feature in payload.context_spec.items():
            fields.append(st.StructField(key, spark_type(key, feature)))
        for key, feature in payload.sequence_spec.items():
            fields.append(st.StructField(key, spark_type(key, feature, sequence=True)))
    else:
        for key, feature in (spec or {}).items():
            fields.append(st.StructField(key, spark_type(key, feature)))
    return st.StructType(fields)


def _nullable(spec: FeatureSpec) -> bool:
    """A FixedLen without a default: a record lacking it is a null, not an error."""
    return isinstance(spec, FixedLen) and spec.default is None


def decoding_spec(spec: Mapping[str, FeatureSpec]) -> dict[str, FeatureSpec]:
    """The spec the records are decoded with: a FixedLen without a default as a VarLen, whose
    lengths say which rows lack it (:func:`to_batch` checks the others' lengths); a float64
    VarLen as the float32 its float_list holds (:func:`to_batch`'s cast to the schema's
    DoubleType widens it in Arrow, cheaper than in torch; every float32 is a float64 exactly)."""
    decoded: dict[str, FeatureSpec] = {}
    for key, feature in spec.items():
        if isinstance(feature, FixedLen) and _nullable(feature):
            feature = VarLen(feature.dtype)
        if type(feature) is VarLen and feature.dtype == torch.float64:
            feature = VarLen(torch.float32)
        decoded[key] = feature
    return decoded


def _fixed_with_nulls(
    key: str, spec: FixedLen, value: Any, locate: Callable[[int], str], skip: bool, bad: list[int]
) -> pa.Array:
    """A FixedLen column decoded as a VarLen: nulls where a row has no value, ``bad`` rows noted
    (a count that is neither 0 nor the shape's)."""
    numel = math.prod(spec.shape)
    if isinstance(value, Ragged):
        counts = np.diff(value.offsets.numpy())
        values: Any = numpy_of(value.values)
    elif isinstance(value, ByteColumn):
        counts = value.counts()
    else:  # bytes / str lists (the protobuf decoder's): a list per row
        counts = np.fromiter(map(len, value), dtype=np.int64, count=len(value))
        values = value
    wrong = np.flatnonzero((counts != 0) & (counts != numel))
    for row in wrong.tolist():
        bad.append(row)
        if not skip:
            raise FeatureError(
                f"feature {key!r} of {locate(row)}: {int(counts[row])} values, but "
                f"FixedLen{spec.shape} holds {numel}",
                key=key,
                record=locate(row),
            )
    present = counts == numel
    rows = len(counts)
    if isinstance(value, ByteColumn):  # (its buffers as they are; the bad rows are filtered out)
        if spec.shape == ():  # a row's one value, or none: each row's bytes end where the next begin
            return binary_array(value, value.offsets[value.rows], present)
        return list_array(value.rows, binary_array(value), present)
    if isinstance(values, np.ndarray):
        if present.all() and len(values) == rows * numel:  # (the common case: no null)
            return plain_column(spec, torch.from_numpy(values.reshape(rows, *spec.shape)))
        full = np.zeros((rows, *spec.shape), dtype=values.dtype)
        keep_values = np.repeat(present, counts)
        full[present] = values[keep_values].reshape(-1, *spec.shape)
        array = plain_column(spec, torch.from_numpy(full))
    elif spec.shape == ():  # (no Python per row)
        kind = pa.string() if spec.dtype is str else pa.binary()
        flat = pa.array(itertools.chain.from_iterable(values), type=kind, size=int(counts.sum()))
        if present.all() and len(flat) == rows:
            return flat
        first = np.cumsum(counts) - counts  # each row's first value in ``flat``
        return flat.take(pa.array(first, mask=~present))
    else:
        array = pa.array([row if len(row) == numel else [None] * numel for row in values])
    return pc.if_else(pa.array(present), array, pa.scalar(None, array.type))


def to_batch(
    columns: Mapping[str, Any],
    spec: Mapping[str, FeatureSpec] | None,
    payload: Payload | None,
    schema: pa.Schema,
    *,
    num_rows: int,
    keep: np.ndarray[Any, Any] | None,
    locate: Callable[[int], str],
    skip: bool,
) -> tuple[pa.RecordBatch, int]:
    """Decoded columns as an Arrow batch of the Spark schema; returns it and the rows dropped for a
    wrong value count (with ``skip``; without, such a row raises FeatureError).

    Args:
        columns: what :func:`decoding_spec`'s spec (or ``payload``) decoded.
        spec: the spec the user asked for (None with a payload).
        keep: the rows to keep (None: all).
        locate: names row ``i`` (its record and file).
    """
    arrays: list[pa.Array] = []
    bad: list[int] = []
    for field in schema:
        key = field.name
        if isinstance(payload, RawPayload):
            array = pa.array(columns[RECORD_KEY], type=pa.binary())
        elif isinstance(payload, SequencePayload) and key in payload.sequence_spec:
            array = steps_array(payload.sequence_spec[key], columns[key], columns[LENGTHS_KEY][key])
        else:
            feature = payload.context_spec[key] if isinstance(payload, SequencePayload) else spec[key]  # type: ignore[index]
            if _nullable(feature) and payload is None:
                array = _fixed_with_nulls(key, feature, columns[key], locate, skip, bad)  # type: ignore[arg-type]
            else:
                array = plain_column(feature, columns[key])
        arrays.append(array.cast(field.type))
    batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
    mask = np.ones(num_rows, dtype=bool) if keep is None else keep.copy()
    mask[bad] = False
    if not mask.all():
        batch = batch.filter(pa.array(mask))
    return batch, len(set(bad))


def spec_for_schema(schema: st.StructType, columns: list[str] | None = None) -> dict[str, FeatureSpec]:
    """The spec that reads rows of ``schema`` back as they were written (its ``columns`` only).

    Raises:
        SpecError: a column of a type that has no Feature list (maps, structs, dates, decimals,
            arrays of arrays), naming it.
    """
    spec: dict[str, FeatureSpec] = {}
    for field in schema.fields:
        if columns is not None and field.name not in columns:
            continue
        kind, is_array = field.dataType, False
        if isinstance(kind, st.ArrayType):
            kind, is_array = kind.elementType, True
        dtype = next((dtype for spark, dtype in _DTYPE_OF if isinstance(kind, spark)), None)
        if dtype is None:
            raise SpecError(
                f"column {field.name!r} is {field.dataType.simpleString()}, which no Feature list holds: "
                "cast it to a number, string, binary or an array of one first"
            )
        spec[field.name] = VarLen(dtype) if is_array else FixedLen((), dtype)
    return spec


def in_saved_order(spec: dict[str, FeatureSpec], saved: Mapping[str, Any]) -> dict[str, FeatureSpec]:
    """``spec`` (from a manifest's saved spec) in the column order the write kept beside it, if any."""
    order = saved.get(COLUMNS_KEY)
    if not isinstance(order, list) or sorted(map(str, order)) != sorted(spec):
        return spec
    return {key: spec[key] for key in order}


def encode_batch(batch: pa.RecordBatch) -> list[bytes]:
    """Each row of ``batch`` as a serialized Example (column name -> feature key, a null: no feature).

    Raises:
        TypeError, ValueError: a value that cannot be encoded, naming its column and row.
    """
    return encode_rows(batch)
