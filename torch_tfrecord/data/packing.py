"""How a DataLoader worker hands a batch to the main process: one block of memory per batch.

A worker moves every tensor storage it sends into shared memory, one segment (and one file
descriptor, fetched by the main process over a socket) per storage, which costs far more than
the copy: ~0.4 ms per tensor on a small machine, against a few microseconds to copy a batch.
So a batch's tensors are packed as views of one block: for a small batch, a block that travels
inside the pickle through the worker's pipe (no shared memory at all, :class:`InlineBatch`);
for a large one, one shared-memory block.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..codec.ragged import Ragged
from ..codec.selection import RowList

__all__ = ["INLINE_LIMIT", "InlineBatch", "pack_tensors"]

_ALIGN = 64
INLINE_LIMIT = 1 << 18
"""Batches whose tensors hold at most this many bytes travel through the pipe (see bench_dataset)."""
_PLAIN = frozenset({bytes, str, int, float, bool, type(None)})
"""Types of list items that hold no tensor: such a list is kept as it is, not walked item by item
(unpacking a batch of 256 ``bytes`` in the main process took ~0.9 ms walking it)."""


class _Slot:
    """A tensor's place in a packed block (as it is pickled)."""

    __slots__ = ("dtype", "place", "shape")

    def __init__(self, place: int, dtype: torch.dtype, shape: tuple[int, ...]) -> None:
        self.place, self.dtype, self.shape = place, dtype, shape

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Slot, (self.place, self.dtype, self.shape))


class _RaggedParts:
    """A Ragged whose parts are slots (Ragged itself takes tensors only)."""

    __slots__ = ("offsets", "values")

    def __init__(self, values: Any, offsets: Any) -> None:
        self.values, self.offsets = values, offsets

    def __reduce__(self) -> tuple[Any, ...]:
        return (_RaggedParts, (self.values, self.offsets))


Leaf = Callable[[Any], Any]


def _map(value: Any, leaf: Leaf, ragged: Callable[[Any, Any], Any]) -> Any:
    """The same structure (dicts, lists, tuples, named tuples, Ragged) with each tensor or slot
    replaced by ``leaf(it)`` and each Ragged by ``ragged(values, offsets)``; a list of plain
    values is the same list."""
    if isinstance(value, torch.Tensor | _Slot):
        return leaf(value)
    if isinstance(value, Ragged | _RaggedParts):
        return ragged(_map(value.values, leaf, ragged), _map(value.offsets, leaf, ragged))
    if isinstance(value, dict):
        return {key: _map(item, leaf, ragged) for key, item in value.items()}
    if isinstance(value, list):
        if _PLAIN.issuperset(map(type, value)):  # bytes, numbers...: nothing inside to replace
            return value
        mapped = [_map(item, leaf, ragged) for item in value]
        return RowList(mapped) if isinstance(value, RowList) else mapped
    if isinstance(value, tuple):
        items = (_map(item, leaf, ragged) for item in value)
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    return value


def _packable(tensor: torch.Tensor) -> bool:
    """A CPU tensor to copy into the block; one in shared memory already (images decoded
    straight into it) is sent as it is."""
    return (
        tensor.device.type == "cpu"
        and not tensor.requires_grad
        and tensor.layout == torch.strided
        and not tensor.is_shared()  # type: ignore[no-untyped-call]
    )


def _layout(batch: Any) -> tuple[list[torch.Tensor], dict[int, int], int]:
    """The batch's packable tensors (each once), each one's place in a block, and its size."""
    found: list[torch.Tensor] = []
    _map(batch, found.append, lambda values, offsets: None)
    places: dict[int, int] = {}
    tensors, total = [], 0
    for tensor in found:
        if id(tensor) in places or not _packable(tensor):
            continue
        tensors.append(tensor)
        places[id(tensor)] = total
        total += -(-tensor.numel() * tensor.element_size() // _ALIGN) * _ALIGN
    return tensors, places, total


def _views(
    block: torch.Tensor, tensors: list[torch.Tensor], places: dict[int, int]
) -> dict[int, torch.Tensor]:
    """Copies of ``tensors`` as views of ``block`` at their places, by the id of the original."""
    views = {}
    for tensor in tensors:
        place = places[id(tensor)]
        view = _view(block, place, tensor.dtype, tuple(tensor.shape))
        view.copy_(tensor)
        views[id(tensor)] = view
    return views


def _view(block: torch.Tensor, place: int, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    size = torch.Size(shape).numel() * dtype.itemsize
    return block[place : place + size].view(dtype).view(shape)


def _keep(values: Any, offsets: Any) -> Ragged:
    return Ragged(values, offsets)


class InlineBatch(dict):  # type: ignore[type-arg]
    """A batch (a dict) whose tensors are pickled as one block of bytes inside the pickle.

    Sent from a DataLoader worker, it reaches the main process through the worker's pipe as a
    plain dict of tensors that are views of one bytearray: no shared-memory segment, no file
    descriptor to fetch. It packs at pickling time, so whatever the worker put in it is sent.
    """

    def __copy__(self) -> InlineBatch:  # DataLoader's default_convert copies mappings
        return InlineBatch(self)

    def __reduce__(self) -> tuple[Any, ...]:
        batch = dict(self)
        tensors, places, total = _layout(batch)
        if not total:
            return (dict, (batch,))
        payload = bytearray(total)
        block = torch.frombuffer(payload, dtype=torch.uint8)
        views = _views(block, tensors, places)
        slots = {key: _Slot(places[key], view.dtype, tuple(view.shape)) for key, view in views.items()}
        structure = _map(batch, lambda t: slots.get(id(t), t), _RaggedParts)
        return (_unpack, (payload, structure))


def _unpack(payload: bytearray, structure: dict[str, Any]) -> dict[str, Any]:
    """The batch of an :class:`InlineBatch`, its tensors views of ``payload``."""
    block = torch.frombuffer(payload, dtype=torch.uint8)

    def leaf(value: Any) -> Any:
        return _view(block, value.place, value.dtype, value.shape) if isinstance(value, _Slot) else value

    return _map(structure, leaf, _keep)  # type: ignore[no-any-return]


def pack_tensors(batch: Any) -> Any:
    """The same structure (dicts, lists, tuples, Ragged), ready to leave a worker: a dict whose
    tensors hold at most :data:`INLINE_LIMIT` bytes as an :class:`InlineBatch`, otherwise its
    CPU tensors as views of one shared-memory block."""
    tensors, places, total = _layout(batch)
    if isinstance(batch, dict) and total <= INLINE_LIMIT:
        return InlineBatch(batch)
    if len(tensors) < 2:
        return batch
    # Allocated in shared memory already, so sending it to the main process copies nothing.
    block = torch.empty(total, dtype=torch.uint8).share_memory_()  # type: ignore[no-untyped-call]
    views = _views(block, tensors, places)
    return _map(batch, lambda t: views.get(id(t), t), _keep)
