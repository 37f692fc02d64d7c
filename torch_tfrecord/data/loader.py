"""The DataLoader that iterates a dataset, seen from the dataset: its fetcher, and a faster convert.

A DataLoader calls ``iter(dataset)`` from the fetcher it creates (in the main process, or in each
worker), and the fetcher holds whether it batches (``auto_collation``) and with which
``collate_fn``: the dataset's ``__iter__`` looks at its caller for one. This reads torch's
private fetcher class: when torch changes it, no fetcher is found, and the guards check nothing
and the convert below is not used (results are the same either way).

``DataLoader(dataset, batch_size=None)`` passes each batch through torch's ``default_convert``,
which walks every list it meets item by item (about a microsecond per item): a column of 256
``bytes`` values cost more than reading and decoding the batch. :func:`convert` returns what
``default_convert`` returns, for any input, but copies a list of plain values (``bytes``,
``str``, numbers, None; what ``default_convert`` leaves as they are) in one step.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Iterator, Sized
from types import FrameType
from typing import Any

import torch
from torch.utils.data._utils.collate import default_convert

from ..codec.selection import RowList
from .packing import InlineBatch

__all__ = ["calling_fetcher", "convert", "requested_batch_size", "use_fast_convert"]

_LEAVES = frozenset({bytes, str, int, float, bool, type(None)})
"""Exact types that ``default_convert`` returns unchanged (and that no list of them changes)."""
_LISTS = frozenset({list, RowList})
"""Exact list types that ``default_convert`` copies (``copy.copy``) and converts item by item."""


def calling_fetcher(depth: int = 5) -> Any:
    """The DataLoader fetcher whose ``iter(dataset)`` called the caller, if any, within ``depth``
    frames above it."""
    for _, fetcher in _fetcher_frames(depth):
        return fetcher
    return None


def requested_batch_size(depth: int = 6) -> int | None:
    """How many items the DataLoader fetcher takes from the caller (a generator, at its first step)
    per batch: its batch size, or None when it does not batch or no fetcher is found.

    A fetcher asks for one batch's indices at a time (``fetch(possibly_batched_index)``), and its
    batches are always full until the data ends, so the first request gives the batch size.
    """
    for frame, fetcher in _fetcher_frames(depth):
        if frame.f_code.co_name == "fetch":
            index = frame.f_locals.get("possibly_batched_index")
            if not fetcher.auto_collation or not isinstance(index, Sized):
                return None
            return len(index) or None
    return None


def _fetcher_frames(depth: int) -> Iterator[tuple[FrameType, Any]]:
    """The frames, among ``depth`` above the caller's caller, of a method of an iterable-dataset
    fetcher, with the fetcher."""
    try:
        from torch.utils.data._utils.fetch import _IterableDatasetFetcher
    except ImportError:
        return
    frame: FrameType | None = sys._getframe(2)
    for _ in range(depth):
        if frame is None:
            return
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, _IterableDatasetFetcher):
            yield frame, candidate
        frame = frame.f_back


def convert(data: Any) -> Any:
    """torch's ``default_convert(data)``: the same result, faster on lists of plain values.

    A mapping is converted as ``default_convert`` converts it (a copy, updated key by key);
    each value that is a tensor is kept, a list of plain values is copied at once, anything
    else goes to ``default_convert``.
    """
    if isinstance(data, InlineBatch):  # packed to leave a worker: the main process gets new copies
        return data
    if not isinstance(data, dict):
        return default_convert(data)  # type: ignore[no-untyped-call]
    try:
        clone = copy.copy(data)
        clone.update({key: _value(data[key]) for key in data})
        return clone
    except TypeError:  # as default_convert does for a mapping that cannot be copied or updated
        return {key: _value(data[key]) for key in data}


def _value(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value
    if type(value) in _LISTS and _LEAVES.issuperset(map(type, value)):
        return type(value)(value)  # default_convert's copy of the list, item for item
    return convert(value)


def use_fast_convert(fetcher: Any) -> None:
    """Makes ``fetcher`` convert with :func:`convert` where it would use ``default_convert``
    (a DataLoader with ``batch_size=None`` and no ``collate_fn`` of the user's)."""
    if fetcher is None or getattr(fetcher, "auto_collation", True):
        return
    if getattr(fetcher, "collate_fn", None) is default_convert:
        fetcher.collate_fn = convert
