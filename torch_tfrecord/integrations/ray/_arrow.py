"""Decoded columns as Arrow tables, and Arrow tables as serialized Examples: no I/O.

Reading: a fixed-shape numeric feature becomes a primitive column (shape ``()``) or a Ray
fixed-shape tensor column; a variable-length one a list column (fixed-size inner lists for a
FixedLenSequence's step shape); bytes binary and str string columns; decoded images and raw
tensors tensor columns (variable-shaped when their shapes differ). ``spec="raw"``: one binary
column ``record``. SequenceExamples: context columns as for Examples, each feature list a list
column of its steps (no padding: each row holds its own steps, the list lengths are the step
counts).

Writing: each row becomes one Example with :func:`torch_tfrecord.encode_example`'s rules (ints
and bools to int64_list, floats to float_list, bytes and str to bytes_list; a uint8 array is
refused as ambiguous); a null is a missing feature.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import torch
from ray.data.extensions import (
    ArrowTensorArray,
    ArrowVariableShapedTensorArray,
    get_arrow_extension_tensor_types,
)

from ...codec.encode import encode_example
from ...codec.payloads import LENGTHS_KEY, RECORD_KEY, Payload, RawPayload, SequencePayload
from ...codec.ragged import Ragged
from ...codec.spec import FeatureSpec, FixedLen, FixedLenSequence, Image, RawTensor

__all__ = ["columns_to_table", "encode_table", "payload_table"]

_OFFSET32_LIMIT = (1 << 31) - 1


def _numpy(tensor: torch.Tensor) -> np.ndarray[Any, Any]:
    if tensor.dtype == torch.bfloat16:  # numpy has no bfloat16
        tensor = tensor.float()
    return tensor.numpy()


def _tensors(values: list[torch.Tensor]) -> pa.Array:
    """Per-row tensors as a Ray tensor column (variable-shaped when the shapes differ)."""
    arrays = [_numpy(value) for value in values]
    if arrays and all(array.shape == arrays[0].shape for array in arrays):
        return ArrowTensorArray.from_numpy(np.stack(arrays))
    return ArrowVariableShapedTensorArray.from_numpy(np.array([*arrays, None], dtype=object)[:-1])


def _list_array(offsets: np.ndarray[Any, Any], values: pa.Array) -> pa.Array:
    if offsets[-1] <= _OFFSET32_LIMIT:
        return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), values)
    return pa.LargeListArray.from_arrays(pa.array(offsets), values)


def _ragged(column: Ragged) -> pa.Array:
    values = _numpy(column.values)
    flat: pa.Array = pa.array(values.reshape(-1))
    for size in reversed(values.shape[1:]):  # a step shape: nested fixed-size lists
        flat = pa.FixedSizeListArray.from_arrays(flat, size)
    return _list_array(column.offsets.numpy(), flat)


def _text_type(dtype: Any) -> pa.DataType:
    return pa.string() if dtype is str else pa.binary()


def _column(spec: FeatureSpec | None, value: Any) -> pa.Array:
    if isinstance(spec, Image | RawTensor):
        if isinstance(value, torch.Tensor):  # a RawTensor of static shape comes stacked
            return ArrowTensorArray.from_numpy(_numpy(value))
        return _tensors(value)
    if isinstance(value, torch.Tensor):  # FixedLen numeric: [rows, *shape]
        array = _numpy(value)
        return pa.array(array) if array.ndim == 1 else ArrowTensorArray.from_numpy(array)
    if isinstance(value, Ragged):
        return _ragged(value)
    # bytes / str: FixedLen shape () gives one value per row, anything else a list per row
    dtype = bytes if spec is None else spec.dtype
    if isinstance(spec, FixedLen) and spec.shape == ():
        return pa.array(value, type=_text_type(dtype))
    return pa.array(value, type=pa.list_(_text_type(dtype)))


_EMPTY_TYPES = {torch.int64: pa.int64(), torch.float32: pa.float32(), bytes: pa.binary()}


def columns_to_table(
    columns: Mapping[str, Any],
    spec: Mapping[str, FeatureSpec] | None,
    *,
    num_rows: int,
    keep: np.ndarray[Any, Any] | None = None,
    dtypes: Mapping[str, Any] | None = None,
) -> pa.Table:
    """An Arrow table of decoded columns (:func:`torch_tfrecord.decode_batch`'s result).

    Args:
        columns: feature key -> column.
        spec: the spec they were decoded with; None for ``spec=None`` (every feature a list).
        num_rows: rows in the columns.
        keep: a boolean mask of the rows to keep (None: all).
        dtypes: with ``spec=None``, the keys every table has (as empty lists where a batch
            lacks them), so that all blocks share a schema: key -> torch.int64 / float32 / bytes.
    """
    arrays: dict[str, pa.Array] = {}
    for key, value in columns.items():
        arrays[key] = _column(None if spec is None else spec[key], value)
    for key, dtype in (dtypes or {}).items():
        if key not in arrays:
            empty = pa.array([], type=_EMPTY_TYPES.get(dtype, pa.float32()))
            arrays[key] = _list_array(np.zeros(num_rows + 1, dtype=np.int64), empty)
    if spec is None:
        arrays = dict(sorted(arrays.items()))
    table = pa.table(arrays)
    if keep is not None and not keep.all():
        table = table.filter(pa.array(keep))
    return table


def _steps(spec: FixedLenSequence | Any, value: Any, lengths: torch.Tensor) -> pa.Array:
    """A feature list as a list column: one list of steps per row, unpadded."""
    offsets = np.concatenate([[0], np.cumsum(lengths.numpy())]).astype(np.int64)
    if isinstance(value, torch.Tensor):  # numeric FixedLenSequence, padded [rows, max_steps, *shape]
        present = torch.arange(value.shape[1]) < lengths[:, None]
        return _ragged(Ragged(value[present], torch.from_numpy(offsets)))
    if value and isinstance(value[0], Ragged):  # numeric VarLen: a Ragged of steps per row
        starts = np.cumsum([0] + [len(row.values) for row in value[:-1]])
        inner = torch.cat([row.offsets[1:] + int(start) for row, start in zip(value, starts)])
        values = torch.cat([row.values for row in value])
        inner = torch.cat([torch.zeros(1, dtype=torch.int64), inner])
        return _list_array(offsets, _ragged(Ragged(values, inner)))
    text = _text_type(spec.dtype)
    step = text if isinstance(spec, FixedLenSequence) and spec.shape == () else pa.list_(text)
    return pa.array(value, type=pa.list_(step))


def payload_table(
    columns: Mapping[str, Any], payload: Payload, *, num_rows: int, keep: np.ndarray[Any, Any] | None = None
) -> pa.Table:
    """An Arrow table of what a :class:`~torch_tfrecord.codec.payloads.Payload` decoded.

    ``spec="raw"``: a binary column ``record``. SequenceExamples: context columns as
    :func:`columns_to_table` makes them; each feature list a list column of steps (a
    fixed-shape numeric step a fixed-size list, a VarLen step a list); the step counts
    (``"_lengths"``) are the lists' lengths, not a column.
    """
    arrays: dict[str, pa.Array] = {}
    if isinstance(payload, RawPayload):
        arrays[RECORD_KEY] = pa.array(columns[RECORD_KEY], type=pa.large_binary())
    elif isinstance(payload, SequencePayload):
        lengths = columns[LENGTHS_KEY]
        for key, value in columns.items():
            if key in payload.context_spec:
                arrays[key] = _column(payload.context_spec[key], value)
            elif key in payload.sequence_spec:
                arrays[key] = _steps(payload.sequence_spec[key], value, lengths[key])
    else:
        raise TypeError(f"no Arrow columns for {payload!r}")
    table = pa.table(arrays)
    if keep is not None and not keep.all():
        table = table.filter(pa.array(keep))
    return table


# Writing -----------------------------------------------------------------------------------


def _row_values(column: pa.ChunkedArray) -> list[Any]:
    """One Python value per row that :func:`encode_example` takes (None: no feature)."""
    kind = column.type
    rows: list[Any] = []
    if isinstance(kind, get_arrow_extension_tensor_types()):  # type: ignore[no-untyped-call]
        for chunk in column.chunks:
            rows.extend(chunk.to_numpy())
        return rows
    numeric = pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)
    if numeric and column.null_count == 0:  # numpy scalars encode as their kind, no list per row
        return list(column.to_numpy())
    if _is_list(kind) and _is_numeric(kind.value_type) and column.null_count == 0:
        # Each row a view of the values: no Python object per value until protobuf takes them.
        for chunk in column.chunks:
            values = chunk.flatten().to_numpy(zero_copy_only=False)
            if pa.types.is_fixed_size_list(kind):
                rows.extend(values.reshape(len(chunk), kind.list_size))
                continue
            offsets = np.asarray(chunk.offsets)
            offsets = offsets - offsets[0]
            rows.extend(values[start:stop] for start, stop in itertools.pairwise(offsets.tolist()))
        return rows
    if _is_list(kind):
        return [None if row is None else _flat(row) for row in column.to_pylist()]
    return column.to_pylist()  # type: ignore[no-any-return]


def _is_list(kind: pa.DataType) -> bool:
    return bool(pa.types.is_fixed_size_list(kind) or pa.types.is_list(kind) or pa.types.is_large_list(kind))


def _is_numeric(kind: pa.DataType) -> bool:
    return bool(pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind))


def _flat(row: list[Any]) -> list[Any]:
    """Nested lists (a list of fixed-size steps) as one flat list, as TensorFlow stores them."""
    if row and isinstance(row[0], list):
        return [value for part in row for value in _flat(part)]
    return row


def encode_table(table: pa.Table) -> list[bytes]:
    """Each row of ``table`` as a serialized Example (column name -> feature key).

    Raises:
        TypeError, ValueError: a value that cannot be encoded without guessing, naming its
            column and row.
    """
    names = table.column_names
    columns = [_row_values(table.column(name)) for name in names]
    encoded = []
    for row in range(table.num_rows):
        features = {name: values[row] for name, values in zip(names, columns) if values[row] is not None}
        try:
            encoded.append(encode_example(features))
        except (TypeError, ValueError) as error:
            raise type(error)(f"row {row} of the block: {error}") from error
    return encoded
