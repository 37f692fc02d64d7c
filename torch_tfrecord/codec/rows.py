"""Splitting a decoded batch into its samples: the inverse of collating them."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import torch

from .ragged import Ragged

__all__ = ["split_batch"]


def _rows(column: Any, size: int) -> list[Any]:
    # Rows are views of the batch's tensors (no copy): the batch is small and never reused.
    if isinstance(column, torch.Tensor):
        return list(column.unbind(0))
    if isinstance(column, Ragged):
        bounds = column.offsets.tolist()
        return [column.values[begin:end] for begin, end in itertools.pairwise(bounds)]
    if isinstance(column, list):
        return column
    raise TypeError(f"cannot split a batch column of type {type(column).__name__}")


def split_batch(batch: Mapping[str, Any], size: int | None = None) -> list[dict[str, Any]]:
    """The samples of a decoded batch: the inverse of :func:`collate` for decoded columns.

    Args:
        batch: columns as :func:`decode_batch` returns them.
        size: the number of samples (needed only when the batch has no column).

    Example:
        >>> split_batch({"ids": Ragged.from_rows([torch.tensor([1, 2]), torch.tensor([3])])})
        [{'ids': tensor([1, 2])}, {'ids': tensor([3])}]
    """
    if size is None:
        if not batch:
            raise ValueError("a batch with no column needs its size")
        size = len(next(iter(batch.values())))
    columns = {key: _rows(column, size) for key, column in batch.items()}
    for key, rows in columns.items():
        if len(rows) != size:
            raise ValueError(f"column {key!r} has {len(rows)} rows, expected {size}")
    return [{key: rows[i] for key, rows in columns.items()} for i in range(size)]
