"""Decoded columns as plain Arrow arrays, and Arrow columns as the values Examples are made of; no I/O.

Reading: a FixedLen numeric feature is a primitive column (shape ``()``) or nested fixed-size
lists (one level per dimension); a VarLen or FixedLenSequence one a list column (fixed-size
inner lists for a step shape); bytes binary and str string columns (a list of them unless
FixedLen shape ``()``). SequenceExample feature lists are lists of their steps. Ray's tensor
columns (:mod:`torch_tfrecord.integrations.ray`) build on these.

Writing: :func:`row_values` gives one value per row that :func:`~torch_tfrecord.encode_example`
takes (None where the row is null: no feature), numbers as numpy views, not Python objects.

Needs pyarrow (the ``arrow`` extra); import this module only where pyarrow is wanted.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from .byte_column import ByteColumn
from .encode import BytesList, encode_example
from .ragged import Ragged
from .spec import FeatureSpec, FixedLen, FixedLenSequence

__all__ = [
    "binary_array",
    "encode_rows",
    "fixed_array",
    "is_list",
    "is_numeric",
    "list_array",
    "numpy_of",
    "plain_column",
    "ragged_array",
    "row_values",
    "steps_array",
    "text_type",
]

_OFFSET32_LIMIT = (1 << 31) - 1


def numpy_of(tensor: torch.Tensor) -> np.ndarray[Any, Any]:
    """A tensor as numpy (bfloat16, which numpy lacks, as float32)."""
    if tensor.dtype == torch.bfloat16:
        tensor = tensor.float()
    return tensor.numpy()


def list_array(
    offsets: np.ndarray[Any, Any], values: pa.Array, valid: np.ndarray[Any, Any] | None = None
) -> pa.Array:
    """A list column of ``values`` cut at ``offsets`` (a large list past 2**31 values), null
    where ``valid`` is False."""
    mask = None if valid is None or valid.all() else pa.array(~valid)
    if offsets[-1] <= _OFFSET32_LIMIT:
        return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), values, mask=mask)
    return pa.LargeListArray.from_arrays(pa.array(offsets), values, mask=mask)


def fixed_array(values: np.ndarray[Any, Any]) -> pa.Array:
    """``[rows, *shape]`` values as nested fixed-size lists (a primitive column for shape ())."""
    flat: pa.Array = pa.array(values.reshape(-1))
    for size in reversed(values.shape[1:]):
        flat = pa.FixedSizeListArray.from_arrays(flat, size)
    return flat


def ragged_array(column: Ragged) -> pa.Array:
    """A :class:`Ragged` as a list column (a step shape as nested fixed-size lists)."""
    return list_array(column.offsets.numpy(), fixed_array(numpy_of(column.values)))


def text_type(dtype: Any) -> pa.DataType:
    return pa.string() if dtype is str else pa.binary()


def binary_array(
    column: ByteColumn, offsets: np.ndarray[Any, Any] | None = None, valid: np.ndarray[Any, Any] | None = None
) -> pa.Array:
    """A :class:`ByteColumn`'s buffers as a binary (``str``: string) array, no copy of its bytes:
    its values, or with ``offsets`` (into its data, ``[items + 1]``) those items, null where
    ``valid`` is False (a large binary / string past 2**31 bytes)."""
    bounds = column.offsets if offsets is None else offsets
    large = int(bounds[-1]) > _OFFSET32_LIMIT
    if column.text:
        kind = pa.large_string() if large else pa.string()
    else:
        kind = pa.large_binary() if large else pa.binary()
    nulls = None if valid is None or valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    null_count = 0 if nulls is None else int(len(valid) - np.count_nonzero(valid))  # type: ignore[arg-type]
    buffers = [nulls, pa.py_buffer(bounds.astype(np.int64 if large else np.int32)), pa.py_buffer(column.data)]
    return pa.Array.from_buffers(kind, len(bounds) - 1, buffers, null_count=null_count)


def _packed_column(spec: FeatureSpec | None, value: ByteColumn) -> pa.Array:
    if isinstance(spec, FixedLen) and spec.shape == ():  # one value a row: the values are the column
        return binary_array(value)
    values = binary_array(value)
    if isinstance(spec, FixedLen):
        return pa.FixedSizeListArray.from_arrays(values, spec.shape[0])
    return list_array(value.rows, values)


def plain_column(spec: FeatureSpec | None, value: Any) -> pa.Array:
    """A decoded column (:func:`~torch_tfrecord.decode_batch`) of FixedLen, VarLen or
    FixedLenSequence values as a plain Arrow array (bytes and str also as a :class:`ByteColumn`)."""
    if isinstance(value, torch.Tensor):  # FixedLen numeric: [rows, *shape]
        return fixed_array(numpy_of(value))
    if isinstance(value, Ragged):
        return ragged_array(value)
    if isinstance(value, ByteColumn):
        return _packed_column(spec, value)
    dtype = getattr(spec, "dtype", bytes)  # images and raw tensors come here as their bytes
    if isinstance(spec, FixedLen) and spec.shape == ():
        return pa.array(value, type=text_type(dtype))
    if isinstance(spec, FixedLen):
        return pa.array(value, type=pa.list_(text_type(dtype), spec.shape[0]))
    return pa.array(value, type=pa.list_(text_type(dtype)))


def steps_array(spec: FixedLenSequence | Any, value: Any, lengths: torch.Tensor) -> pa.Array:
    """A feature list as a list column: one list of steps per row, unpadded."""
    offsets = np.concatenate([[0], np.cumsum(lengths.numpy())]).astype(np.int64)
    if isinstance(value, torch.Tensor):  # numeric FixedLenSequence, padded [rows, max_steps, *shape]
        present = torch.arange(value.shape[1]) < lengths[:, None]
        return ragged_array(Ragged(value[present], torch.from_numpy(offsets)))
    if value and isinstance(value[0], Ragged):  # numeric VarLen: a Ragged of steps per row
        starts = np.cumsum([0] + [len(row.values) for row in value[:-1]])
        inner = torch.cat([row.offsets[1:] + int(start) for row, start in zip(value, starts)])
        values = torch.cat([row.values for row in value])
        inner = torch.cat([torch.zeros(1, dtype=torch.int64), inner])
        return list_array(offsets, ragged_array(Ragged(values, inner)))
    text = text_type(spec.dtype)
    step = text if isinstance(spec, FixedLenSequence) and spec.shape == () else pa.list_(text)
    return pa.array(value, type=pa.list_(step))


def is_list(kind: pa.DataType) -> bool:
    return bool(pa.types.is_fixed_size_list(kind) or pa.types.is_list(kind) or pa.types.is_large_list(kind))


def is_numeric(kind: pa.DataType) -> bool:
    return bool(pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind))


def _wire_numpy(array: pa.Array) -> np.ndarray[Any, Any]:
    """Numbers as the numpy type their Feature list stores: small and unsigned ints as int64
    (a uint8 array would be refused as ambiguous), half floats as float32."""
    values: np.ndarray[Any, Any] = array.to_numpy(zero_copy_only=False)
    if values.dtype.kind in "iu" and values.dtype != np.int64 and values.dtype != np.uint64:
        return values.astype(np.int64)
    if values.dtype == np.float16:
        return values.astype(np.float32)
    return values


def _flat(row: list[Any]) -> list[Any]:
    """Nested lists (a list of fixed-size steps) as one flat list, as TensorFlow stores them."""
    if row and isinstance(row[0], list):
        return [value for part in row for value in _flat(part)]
    return row


def _innermost(kind: pa.DataType) -> pa.DataType:
    while is_list(kind):
        kind = kind.value_type
    return kind


def row_values(column: pa.ChunkedArray | pa.Array) -> list[Any]:
    """One value per row that :func:`~torch_tfrecord.encode_example` takes (None: no feature)."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    kind = column.type
    rows: list[Any] = []
    if is_numeric(kind) and column.null_count == 0:  # numpy scalars encode as their kind
        for chunk in chunks:
            rows.extend(_wire_numpy(chunk))
        return rows
    if is_list(kind) and is_numeric(_innermost(kind)) and column.null_count == 0:
        # Each row a view of the values: no Python object per value until protobuf takes them.
        for chunk in chunks:
            while is_list(chunk.type.value_type):  # nested lists: flatten to the innermost values
                chunk = _flatten_level(chunk)
            values = _wire_numpy(chunk.flatten())
            if pa.types.is_fixed_size_list(chunk.type):
                rows.extend(values.reshape(len(chunk), chunk.type.list_size))
                continue
            offsets = np.asarray(chunk.offsets)
            offsets = offsets - offsets[0]
            rows.extend(values[start:stop] for start, stop in itertools.pairwise(offsets.tolist()))
        return rows
    if is_list(kind) and (pa.types.is_binary(_innermost(kind)) or pa.types.is_string(_innermost(kind))):
        # an explicit bytes_list, so that an empty one stays a bytes_list (as empty numbers do)
        return [None if row is None else BytesList(_flat(row)) for row in column.to_pylist()]
    if is_list(kind):
        return [None if row is None else _flat(row) for row in column.to_pylist()]
    return column.to_pylist()  # type: ignore[no-any-return]


def _flatten_level(chunk: pa.Array) -> pa.Array:
    """A list of lists as one list per row of the inner lists' values (offsets composed)."""
    inner = chunk.flatten()
    inner_offsets = _offsets(inner)
    outer = _offsets(chunk)
    return pa.LargeListArray.from_arrays(pa.array(inner_offsets[outer]), inner.flatten())


def _offsets(chunk: pa.Array) -> np.ndarray[Any, Any]:
    if pa.types.is_fixed_size_list(chunk.type):
        steps: np.ndarray[Any, Any] = np.arange(len(chunk) + 1, dtype=np.int64)
        return steps * int(chunk.type.list_size)
    offsets: np.ndarray[Any, Any] = np.asarray(chunk.offsets, dtype=np.int64)
    start = int(offsets[0])
    return offsets - start


def encode_rows(
    table: pa.Table | pa.RecordBatch, values: Callable[[Any], list[Any]] = row_values
) -> list[bytes]:
    """Each row of ``table`` as a serialized Example (column name -> feature key; a null: no feature).

    Args:
        table: the rows.
        values: one value per row of a column that :func:`~torch_tfrecord.encode_example` takes.

    Raises:
        TypeError, ValueError: a value that cannot be encoded without guessing, naming its
            column and row.
    """
    names = table.column_names
    columns = [values(table.column(name)) for name in names]
    encoded = []
    for row in range(table.num_rows):
        features = {name: column[row] for name, column in zip(names, columns) if column[row] is not None}
        try:
            encoded.append(encode_example(features))
        except (TypeError, ValueError) as error:
            raise type(error)(f"row {row} of the block: {error}") from error
    return encoded
