"""Bytes and str columns packed for Arrow (codec/byte_column.py, native.packed_bytes): the native
decoder's buffers become Arrow's, and give exactly the values, nulls and errors of the lists' path.

No Spark session: Spark's batches are built here from decoded columns as its reader builds them
(tests/test_spark.py reads through Spark itself)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import torch

import torch_tfrecord as tt
from torch_tfrecord.codec import native
from torch_tfrecord.codec.arrow import binary_array, plain_column
from torch_tfrecord.codec.byte_column import ByteColumn, is_utf8
from torch_tfrecord.errors import FeatureError

if native.compiled is None:
    pytest.skip("the native extension is not built", allow_module_level=True)

# Empty, non-ASCII, a NUL, invalid UTF-8 (bytes only), long.
BLOBS = [b"", "é中🙂".encode(), b"\x00\xff\xfe", b"x" * 1000, b"plain"]
TEXTS = ["", "é中🙂", "a\x00b", "y" * 999, "plain"]


def examples(rows: list[dict[str, Any]]) -> list[bytes]:
    return [tt.encode_example(row) for row in rows]


def decoded(records: list[bytes], spec: dict[str, Any]) -> dict[str, Any]:
    with native.packed_bytes():
        return tt.decode_batch(records, spec)


def test_packed_only_within_the_context() -> None:
    records = examples([{"b": [blob]} for blob in BLOBS])
    spec = {"b": tt.VarLen(bytes)}
    assert isinstance(decoded(records, spec)["b"], ByteColumn)
    assert tt.decode_batch(records, spec)["b"] == [[blob] for blob in BLOBS]


@pytest.mark.parametrize("dtype, values", [(bytes, BLOBS), (str, TEXTS)])
def test_varlen_and_fixed_round_trip_exactly(dtype: Any, values: list[Any]) -> None:
    rows = [values[i : i + i % 3] for i in range(len(values))]  # 0, 1 or 2 values a row
    records = examples([{"v": [x.encode() if dtype is str else x for x in row]} for row in rows])
    column = decoded(records, {"v": tt.VarLen(dtype)})["v"]
    assert isinstance(column, ByteColumn) and column.tolist() == rows
    kind = pa.string() if dtype is str else pa.binary()
    array = plain_column(tt.VarLen(dtype), column)
    assert array.type == pa.list_(kind) and array.to_pylist() == rows
    array.validate(full=True)

    scalars = examples([{"s": [x.encode() if dtype is str else x]} for x in values])
    column = decoded(scalars, {"s": tt.FixedLen((), dtype)})["s"]
    assert plain_column(tt.FixedLen((), dtype), column).to_pylist() == values

    pairs = examples([{"p": [x.encode() if dtype is str else x for x in (v, v)]} for v in values])
    column = decoded(pairs, {"p": tt.FixedLen((2,), dtype)})["p"]
    fixed = plain_column(tt.FixedLen((2,), dtype), column)
    assert fixed.type == pa.list_(kind, 2) and fixed.to_pylist() == [[v, v] for v in values]


def test_invalid_utf8_still_raises_naming_key_and_record() -> None:
    records = examples([{"t": [b"ok"]}, {"t": [b"\xff"]}])
    with pytest.raises(FeatureError) as error:
        decoded(records, {"t": tt.FixedLen((), str)})
    assert error.value.key == "t" and "record 1" in str(error.value)


def test_is_utf8_refuses_a_character_split_across_values() -> None:
    data = "é".encode()  # two bytes: valid as a whole, not as two values
    assert is_utf8(data, np.array([0, 2], dtype=np.int64))
    assert not is_utf8(data, np.array([0, 1, 2], dtype=np.int64))
    assert is_utf8(b"", np.array([0, 0, 0], dtype=np.int64))


def test_binary_array_takes_items_and_nulls() -> None:
    column = ByteColumn(
        b"abc", np.array([0, 1, 3], dtype=np.int64), np.array([0, 1, 2], dtype=np.int64), False
    )
    assert binary_array(column).to_pylist() == [b"a", b"bc"]
    items = np.array([0, 1, 1, 3], dtype=np.int64)  # "a", "", "bc"
    array = binary_array(column, items, np.array([True, False, True]))
    assert array.to_pylist() == [b"a", None, b"bc"] and array.null_count == 1
    array.validate(full=True)


class _SparkTypes:
    """integrations/spark/_types.py, imported when a test uses it (pyspark is the spark extra)."""

    def __getattr__(self, name: str) -> Any:
        module = pytest.importorskip(
            "torch_tfrecord.integrations.spark._types", reason="needs pyspark (extra spark)"
        )
        return getattr(module, name)


spark_types = _SparkTypes()


def spark_batch(records: list[bytes], spec: dict[str, Any], skip: bool = False) -> tuple[pa.RecordBatch, int]:
    """Decoded and built as the Spark reader does (a FixedLen without default: nulls)."""
    to_arrow_schema = pytest.importorskip("pyspark.sql.pandas.types").to_arrow_schema

    columns = decoded(records, spark_types.decoding_spec(spec))
    schema = to_arrow_schema(spark_types.schema_for(spec, None))
    return spark_types.to_batch(
        columns,
        spec,
        None,
        schema,
        num_rows=len(records),
        keep=None,
        locate=lambda row: f"record {row} of 'x'",
        skip=skip,
    )


@pytest.mark.parametrize("dtype, values", [(bytes, BLOBS), (str, TEXTS)])
def test_spark_batch_with_nulls_matches_the_lists_path(dtype: Any, values: list[Any]) -> None:
    """A record lacking a FixedLen without default is a null; empty and non-ASCII values stay."""

    def encoded(x: Any) -> bytes:
        return x.encode() if dtype is str else x

    rows: list[dict[str, Any]] = []
    for i, value in enumerate(values * 2):
        row: dict[str, Any] = {"n": i}
        if i % 3 != 1:
            row["s"] = [encoded(value)]
            row["l"] = [encoded(value), encoded(values[0])]
        rows.append(row)
    spec = {"s": tt.FixedLen((), dtype), "l": tt.FixedLen((2,), dtype), "n": tt.FixedLen((), torch.int64)}
    records = examples(rows)
    batch, dropped = spark_batch(records, spec)
    assert isinstance(decoded(records, spark_types.decoding_spec(spec))["s"], ByteColumn)
    expected_s = [None if i % 3 == 1 else value for i, value in enumerate(values * 2)]
    assert dropped == 0 and batch.column("s").to_pylist() == expected_s
    assert batch.column("l").to_pylist() == [None if v is None else [v, values[0]] for v in expected_s]
    assert batch.column("n").to_pylist() == list(range(len(rows)))
    batch.validate(full=True)
    # The same batch from the lists (the protobuf decoder's, or outside packed_bytes).
    lists = tt.decode_batch(records, spark_types.decoding_spec(spec))
    schema = batch.schema
    same, _ = spark_types.to_batch(
        lists, spec, None, schema, num_rows=len(records), keep=None, locate=str, skip=False
    )
    assert same.equals(batch)


def test_spark_batch_wrong_count_raises_or_drops() -> None:
    records = examples([{"s": [b"a"]}, {"s": [b"b", b"c"]}, {}])
    spec = {"s": tt.FixedLen((), bytes)}
    with pytest.raises(FeatureError) as error:
        spark_batch(records, spec)
    assert error.value.key == "s" and "record 1 of 'x'" in str(error.value)
    batch, dropped = spark_batch(records, spec, skip=True)
    assert dropped == 1 and batch.column("s").to_pylist() == [b"a", None]


def test_spark_float64_is_widened_exactly() -> None:
    values = [[0.1, -2.5, 3e38], [], [1e-45]]
    records = examples([{"x": row} for row in values])
    spec = {"x": tt.VarLen(torch.float64)}
    batch, _ = spark_batch(records, spec)
    expected = [np.array(row, dtype=np.float32).astype(np.float64).tolist() for row in values]
    assert batch.column("x").type == pa.list_(pa.float64()) and batch.column("x").to_pylist() == expected


def test_bytes_pack_refuses_a_span_outside_the_buffer() -> None:
    spans = np.array([[0, 2], [2, 0], [1, 3]], dtype=np.int64)
    offsets, data = native.compiled.bytes_pack(b"abcd", spans)
    assert np.frombuffer(offsets, dtype=np.int64).tolist() == [0, 2, 2, 5] and bytes(data) == b"abbcd"
    for bad in ([[3, 2]], [[-1, 1]], [[0, -1]]):
        with pytest.raises(ValueError, match="outside the buffer"):
            native.compiled.bytes_pack(b"abcd", np.array(bad, dtype=np.int64))
