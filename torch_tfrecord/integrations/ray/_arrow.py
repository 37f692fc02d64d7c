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

from ...codec.arrow import encode_rows, list_array, numpy_of, ragged_array, row_values, steps_array, text_type
from ...codec.payloads import LENGTHS_KEY, RECORD_KEY, Payload, RawPayload, SequencePayload
from ...codec.ragged import Ragged
from ...codec.spec import FeatureSpec, FixedLen, Image, RawTensor

__all__ = ["columns_to_table", "encode_table", "payload_table"]


def _tensors(values: list[torch.Tensor]) -> pa.Array:
    """Per-row tensors as a Ray tensor column (variable-shaped when the shapes differ)."""
    arrays = [numpy_of(value) for value in values]
    if arrays and all(array.shape == arrays[0].shape for array in arrays):
        return ArrowTensorArray.from_numpy(np.stack(arrays))
    return ArrowVariableShapedTensorArray.from_numpy(np.array([*arrays, None], dtype=object)[:-1])


def _column(spec: FeatureSpec | None, value: Any) -> pa.Array:
    if isinstance(spec, Image | RawTensor):
        if isinstance(value, torch.Tensor):  # a RawTensor of static shape comes stacked
            return ArrowTensorArray.from_numpy(numpy_of(value))
        return _tensors(value)
    if isinstance(value, torch.Tensor):  # FixedLen numeric: [rows, *shape]
        array = numpy_of(value)
        return pa.array(array) if array.ndim == 1 else ArrowTensorArray.from_numpy(array)
    if isinstance(value, Ragged):
        return ragged_array(value)
    # bytes / str: FixedLen shape () gives one value per row, anything else a list per row
    dtype = bytes if spec is None else spec.dtype
    if isinstance(spec, FixedLen) and spec.shape == ():
        return pa.array(value, type=text_type(dtype))
    return pa.array(value, type=pa.list_(text_type(dtype)))


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
            arrays[key] = list_array(np.zeros(num_rows + 1, dtype=np.int64), empty)
    if spec is None:
        arrays = dict(sorted(arrays.items()))
    table = pa.table(arrays)
    if keep is not None and not keep.all():
        table = table.filter(pa.array(keep))
    return table


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
                arrays[key] = steps_array(payload.sequence_spec[key], value, lengths[key])
    else:
        raise TypeError(f"no Arrow columns for {payload!r}")
    table = pa.table(arrays)
    if keep is not None and not keep.all():
        table = table.filter(pa.array(keep))
    return table


# Writing -----------------------------------------------------------------------------------


def _row_values(column: pa.ChunkedArray) -> list[Any]:
    """One Python value per row that :func:`encode_example` takes (None: no feature)."""
    if isinstance(column.type, get_arrow_extension_tensor_types()):  # type: ignore[no-untyped-call]
        return [row for chunk in column.chunks for row in chunk.to_numpy()]
    return row_values(column)


def encode_table(table: pa.Table) -> list[bytes]:
    """Each row of ``table`` as a serialized Example (column name -> feature key).

    Raises:
        TypeError, ValueError: a value that cannot be encoded without guessing, naming its
            column and row.
    """
    return encode_rows(table, _row_values)
