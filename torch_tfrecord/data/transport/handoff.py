"""How a DataLoader worker hands a batch to the main process: one block of memory per batch.

A worker moves every tensor storage it sends into shared memory, one segment (and one file
descriptor, fetched by the main process over a socket) per storage, which costs far more than
the copy: ~0.4 ms per tensor on a small machine, against a few microseconds to copy a batch.
So a batch (a dict) travels in the worker's ring of shared-memory slots (:mod:`.byte_ring`, a
:class:`RingBatch`): its tensors and ``bytes`` columns copied into a slot, a few hundred bytes
through the pipe. When the ring does not take it (a full ring, a huge batch), it travels inside
the pickle (:class:`InlineBatch`), its tensors as NumPy arrays. Tensors of more than
:data:`INLINE_LIMIT` bytes in all first become views of one shared-memory block, which the main
process maps rather than copies.
"""

from __future__ import annotations

from collections.abc import Callable
from multiprocessing.reduction import ForkingPickler
from typing import Any

import numpy as np
import torch

from ...codec.ragged import Ragged
from ...codec.selection import RowList
from ...support.stages import HANDOFF, begin, end
from .byte_ring import place_batch, receive_batch

__all__ = ["INLINE_LIMIT", "InlineBatch", "RingBatch", "pack_tensors"]

_ALIGN = 64
INLINE_LIMIT = 1 << 18
"""Batches whose tensors hold at most this many bytes travel through the pipe (see bench_dataset)."""
_PLAIN_TYPES: tuple[type, ...] = (bytes, str, int, float, bool, type(None))
_PLAIN = frozenset(_PLAIN_TYPES)
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
    seen: set[int] = set()
    tensors = []
    for tensor in found:
        if id(tensor) not in seen and _packable(tensor):
            seen.add(id(tensor))
            tensors.append(tensor)
    return (tensors, *_places(tensors))


def _places(tensors: list[torch.Tensor]) -> tuple[dict[int, int], int]:
    """Each tensor's place in a block that holds them all (by id), and the block's size."""
    places: dict[int, int] = {}
    total = 0
    for tensor in tensors:
        places[id(tensor)] = total
        total += -(-tensor.numel() * tensor.element_size() // _ALIGN) * _ALIGN
    return places, total


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
    """A batch (a dict) whose tensors are pickled inside the pickle.

    Sent from a DataLoader worker, it reaches the main process through the worker's pipe as a
    plain dict of tensors: each one NumPy can hold as an array (pickled and rebuilt in one step
    each), the others (bfloat16, conjugate views...) as views of one bytearray; no
    shared-memory segment, no file descriptor to fetch. It packs at pickling time, so whatever
    the worker put in it is sent.
    """

    def __copy__(self) -> InlineBatch:  # DataLoader's default_convert copies mappings
        return InlineBatch(self)

    def __reduce__(self) -> tuple[Any, ...]:
        batch = dict(self)
        tensors, _, total = _layout(batch)
        if not total:
            return (dict, (batch,))
        # Each tensor NumPy can hold travels as an array (pickled by NumPy in one step, rebuilt
        # by torch.from_numpy): a third of the cost of views of one block, measured in a worker.
        arrays = {id(t): _Array(array) for t in tensors if (array := _as_array(t)) is not None}
        rest = [t for t in tensors if id(t) not in arrays]
        places, total = _places(rest)
        payload = bytearray(total)
        block = torch.frombuffer(payload, dtype=torch.uint8) if total else None
        views = _views(block, rest, places) if block is not None else {}
        slots: dict[int, Any] = {key: _Slot(places[key], v.dtype, tuple(v.shape)) for key, v in views.items()}
        slots.update(arrays)
        structure = _map(batch, lambda t: slots.get(id(t), t), _RaggedParts)
        return (_unpack, (payload, structure))


_NUMPY_DTYPES = frozenset(
    {torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64}
    | {torch.float16, torch.float32, torch.float64, torch.complex64, torch.complex128}
)


def _as_array(tensor: torch.Tensor) -> np.ndarray[Any, Any] | None:
    """The tensor as a NumPy array sharing its memory, or None (bfloat16, conjugate views...)."""
    if tensor.dtype not in _NUMPY_DTYPES:
        return None
    try:
        return tensor.numpy()
    except (RuntimeError, TypeError):
        return None


class _Array:
    """A tensor as a NumPy array, that unpickles as a tensor."""

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray[Any, Any]) -> None:
        self.array = array

    def __reduce__(self) -> tuple[Any, ...]:
        return (torch.from_numpy, (self.array,))


def _unpack(payload: bytearray, structure: dict[str, Any]) -> dict[str, Any]:
    """The batch of an :class:`InlineBatch`, its tensors arrays' or views of ``payload``."""
    token = begin()
    block = torch.frombuffer(payload, dtype=torch.uint8) if payload else None

    def leaf(value: Any) -> Any:
        if isinstance(value, _Slot):
            assert block is not None
            return _view(block, value.place, value.dtype, value.shape)
        return value

    batch = _map(structure, leaf, _keep)
    end(HANDOFF, token)
    return batch  # type: ignore[no-any-return]


class RingBatch(InlineBatch):
    """A batch (a dict) that, sent from a DataLoader worker (pickled by multiprocessing's
    ``ForkingPickler``, which sends it to the main process), travels in the worker's ring of
    shared-memory slots (:func:`~torch_tfrecord.data.transport.byte_ring.place_batch`) and unpickles as a
    plain dict of the same values. With the ring full, for a batch the ring does not take, or
    pickled any other way (``pickle``, ``copy.deepcopy``: the result may go anywhere), it
    pickles as an :class:`InlineBatch`. Tensors in shared memory already are sent as they are."""

    def __copy__(self) -> RingBatch:
        return RingBatch(self)


def _send(batch: RingBatch) -> tuple[Any, ...]:
    """``ForkingPickler``'s reduction of a :class:`RingBatch`."""
    placed = place_batch(batch)
    if placed is None:
        return InlineBatch.__reduce__(batch)
    message, rest = placed
    return (receive_batch, (*message, InlineBatch(rest) if rest else rest))


ForkingPickler.register(RingBatch, _send)


def pack_tensors(batch: Any) -> Any:
    """The same structure (dicts, lists, tuples, Ragged), ready to leave a worker: a dict as a
    :class:`RingBatch`, its tensors first moved into one shared-memory block when they hold more
    than :data:`INLINE_LIMIT` bytes; another structure's CPU tensors as views of one
    shared-memory block (when there are several)."""
    if isinstance(batch, dict) and _tensor_bytes(batch) <= INLINE_LIMIT:
        return RingBatch(batch)  # (the common case, checked without walking the batch)
    tensors, places, total = _layout(batch)
    if isinstance(batch, dict):
        return RingBatch(batch if total <= INLINE_LIMIT else _shared(batch, tensors, places, total))
    return batch if len(tensors) < 2 else _shared(batch, tensors, places, total)


def _shared(batch: Any, tensors: list[torch.Tensor], places: dict[int, int], total: int) -> Any:
    """``batch`` with ``tensors`` as views of one new shared-memory block (so that sending them
    to the main process copies nothing)."""
    block = torch.empty(total, dtype=torch.uint8).share_memory_()  # type: ignore[no-untyped-call]
    views = _views(block, tensors, places)
    return _map(batch, lambda t: views.get(id(t), t), _keep)


def _tensor_bytes(batch: dict[str, Any]) -> int:
    """The bytes of the batch's tensors when they are all top-level values (an upper bound of
    what :func:`_layout` counts), else more than :data:`INLINE_LIMIT`."""
    total = 0
    for value in batch.values():
        if isinstance(value, torch.Tensor):
            total += value.numel() * value.element_size()
        elif not isinstance(value, _PLAIN_TYPES) and not (
            type(value) in (list, RowList) and _PLAIN.issuperset(map(type, value))
        ):
            return INLINE_LIMIT + 1
    return total
