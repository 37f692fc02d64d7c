"""Collating decoded samples into a batch (the inverse of :func:`~torch_tfrecord.split_batch`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch.utils.data import default_collate, get_worker_info

from ...codec.ragged import Ragged
from ...codec.selection import RowList
from .handoff import pack_tensors

__all__ = ["collate", "collate_columns"]


def _collate_tensors(values: Sequence[torch.Tensor]) -> torch.Tensor | Ragged | list[torch.Tensor]:
    first = values[0]
    if all(v.shape == first.shape for v in values):
        return torch.stack(list(values))
    if first.dim() >= 1 and all(v.dim() == first.dim() and v.shape[1:] == first.shape[1:] for v in values):
        return Ragged.from_rows(list(values))
    return RowList(values)  # e.g. images of different sizes: transforms decide


def collate(samples: Sequence[Any]) -> Any:
    """Batches samples: equal shapes are stacked, variable lengths become a :class:`Ragged`.

    For ``DataLoader(dataset, batch_size=..., collate_fn=tt.collate)`` in per-sample mode.
    Tensors of equal shape -> ``torch.stack``; tensors that differ only in their first
    dimension (variable-length features) -> :class:`Ragged`; other tensors (images of different
    sizes) -> a list; bytes / str -> a list; numbers -> a tensor; dicts, tuples and lists are
    collated element-wise.

    Example:
        >>> batch = collate([{"ids": torch.tensor([1, 2])}, {"ids": torch.tensor([3])}])
        >>> batch["ids"].tolist()
        [[1, 2], [3]]
    """
    batch = _collate(samples)
    # In a DataLoader worker: the batch leaves as one block (see .handoff), not one segment per tensor.
    return pack_tensors(batch) if get_worker_info() is not None else batch


def collate_columns(samples: Sequence[Any]) -> Any:
    """:func:`collate`'s batch as plain columns, never packed for the worker hand-off: for a
    dataset that collates samples in its own reader (length buckets), whose batches the epoch
    driver hands off itself."""
    return _collate(samples)


def _collate(samples: Sequence[Any]) -> Any:
    if len(samples) == 0:
        raise ValueError("collate needs at least one sample")
    first = samples[0]
    if isinstance(first, Mapping):
        keys = list(first.keys())
        for sample in samples:
            if not isinstance(sample, Mapping) or list(sample.keys()) != keys:
                raise ValueError(f"samples have different keys: {keys} vs {list(sample)}")
        return {key: _collate([sample[key] for sample in samples]) for key in keys}
    if isinstance(first, torch.Tensor):
        return _collate_tensors(samples)
    if isinstance(first, bytes | str | Ragged):
        return RowList(samples)
    if isinstance(first, tuple | list) and not isinstance(first, str):
        if all(isinstance(v, bytes | str) for sample in samples for v in sample):
            return RowList(list(sample) for sample in samples)
        if any(len(sample) != len(first) for sample in samples):
            raise ValueError("sequence samples have different lengths; decode them as tensors")
        return (
            type(first)(_collate(list(column)) for column in zip(*samples))
            if isinstance(first, tuple)
            else [_collate(list(column)) for column in zip(*samples)]
        )
    return default_collate(list(samples))
