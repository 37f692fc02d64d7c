"""Selecting rows of a batch's columns by a boolean mask or by indices, as tensors select them.

``batch[key][~batch["_padding"]]`` keeps the rows that are not padding whatever the column holds: a
tensor selects them itself, a :class:`~torch_tfrecord.Ragged` and a :class:`RowList` (the list of
``bytes``, ``str`` or variable-size tensors a dataset's batch holds) through :func:`row_positions`.
"""

from __future__ import annotations

from typing import Any, SupportsIndex, overload

import numpy as np
import torch

__all__ = ["RowList", "is_row_selection", "row_positions"]

_Selection = torch.Tensor | np.ndarray[Any, Any] | list[Any] | tuple[Any, ...]


def is_row_selection(index: Any) -> bool:
    """Whether ``index`` picks rows as a mask or an index array does (not one row, not a slice)."""
    if isinstance(index, torch.Tensor | np.ndarray):
        return index.ndim > 0
    return isinstance(index, list | tuple)


def row_positions(index: Any, rows: int) -> torch.Tensor:
    """The rows ``index`` selects from ``rows`` rows, as int64 positions in ``[0, rows)``.

    Args:
        index: a boolean mask of ``rows`` values, or integer row indices (negative ones count
            from the end), as a tensor, a NumPy array or a list.
        rows: how many rows the column has.

    Raises:
        IndexError: a mask of another length, or an index out of range.
        TypeError: neither booleans nor integers.
    """
    if isinstance(index, torch.Tensor):
        selector = index
    else:
        array = np.asarray(index)
        if array.size == 0 and array.dtype == np.float64:  # [] picks no rows
            array = array.astype(np.int64)
        selector = torch.from_numpy(np.ascontiguousarray(array))
    if selector.dtype == torch.bool:
        if selector.shape != (rows,):
            raise IndexError(f"a boolean mask of shape {tuple(selector.shape)} selects from {rows} rows")
        return torch.nonzero(selector).reshape(-1)
    if selector.dtype.is_floating_point or selector.dtype.is_complex or selector.dim() != 1:
        raise TypeError(
            f"rows are selected by a 1-D boolean mask or integer indices, got {selector.dtype} "
            f"of shape {tuple(selector.shape)}"
        )
    positions = selector.to(torch.int64)
    if len(positions) and (int(positions.min()) < -rows or int(positions.max()) >= rows):
        bad = positions[(positions < -rows) | (positions >= rows)][0]
        raise IndexError(f"row {int(bad)} out of range for {rows} rows")
    return torch.where(positions < 0, positions + rows, positions)


class RowList(list):  # type: ignore[type-arg]
    """A list with one value per row of a batch, that also takes a row mask or row indices.

    What a dataset's batch holds for ``bytes`` and ``str`` features and for images of different
    sizes. It is a ``list`` in every other way (equal to a list of the same values, pickled,
    converted and collated as one): only ``rows[mask]`` and ``rows[indices]`` are new.

    Example:
        >>> rows = RowList([b"a", b"b", b"c"])
        >>> rows[torch.tensor([True, False, True])]
        [b'a', b'c']
        >>> rows[torch.tensor([2, 0])]
        [b'c', b'a']
    """

    __slots__ = ()

    @overload
    def __getitem__(self, index: SupportsIndex) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> RowList: ...
    @overload
    def __getitem__(self, index: _Selection) -> RowList: ...
    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, int):  # first: what split_batch and every loop over rows ask
            return list.__getitem__(self, index)
        if isinstance(index, slice):
            return RowList(list.__getitem__(self, index))
        if is_row_selection(index):
            return RowList([list.__getitem__(self, i) for i in row_positions(index, len(self)).tolist()])
        return list.__getitem__(self, index)  # a NumPy integer, a 0-d tensor: one row
