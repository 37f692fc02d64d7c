"""A DataLoader worker's ring of shared-memory slots that carries its batches to the main process.

Pickled through the worker's pipe, a batch costs more to hand over than to read and decode: a
column of 256 values of 4 KB is a megabyte that the pipe (64 KB) passes in 16 turns, each a
wake-up, and even a few small tensors cost ~0.1 ms each way to pickle as arrays. A fresh
shared-memory segment per batch (one file descriptor to fetch, new pages to fault in) measured
slower still. So each worker keeps one segment of :data:`SLOTS` slots: a batch's tensors and
``bytes`` columns are copied into the next free slot (the values of a column back to back, in C,
with their spans), and the message through the pipe carries only the slot's number and each
field's place, dtype and shape: a few hundred bytes. The main process rebuilds the batch from the
slot (the tensors copied out, the ``bytes`` values cut out in C) as it unpickles the message, and
marks the slot free in the segment's header. The segment itself travels once (torch passes its
file descriptor), in every message until the main process says it has it.

Exact by construction: a slot is written only when the main process has released it (else the
batch goes through the pipe, pickled, as before), and the main process reads each slot once, in
the order the worker sent them (one worker's messages are pickled by one thread and read in
order). A batch arrives as a plain ``dict`` of the same keys in the same order, its tensors of the
same dtype, shape and values (new, contiguous memory), its columns of the same type (``list`` or
:class:`RowList`) of the same ``bytes`` values; what the ring does not carry (nested structures,
tensors in shared memory already, other values) is pickled beside the message.
"""

from __future__ import annotations

import ctypes
import math
import multiprocessing
import os
import threading
from typing import Any

import numpy as np
import torch

from ...codec.selection import RowList
from ...support import stages
from ...support.extension import compiled
from ...support.processes import pid_alive

__all__ = ["MAX_SLOT", "SLOTS", "forget_rings", "place_batch"]

SLOTS = 4
"""Slots per worker: more than the batches a DataLoader lets a worker send ahead (2 by default)."""
MAX_SLOT = 1 << 26
"""A batch whose fields hold more goes through the pipe (the ring would hold SLOTS of them)."""
_HEADER = 64  # int64 [0]: messages the main process has read (the next sequence number it expects)
#               int64 [1]: the pid of the last process that got the segment (the main process, once it has)
_ALIGN = 64
_DTYPES = (
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
    torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128,
)  # fmt: skip
_CODES = {dtype: code for code, dtype in enumerate(_DTYPES)}
_LIST, _ROW_LIST, _REST = -1, -2, -3  # field codes besides a tensor's dtype code


class _Ring:
    """The worker's side: the segment, its slot size, and the sequence number of the next message."""

    def __init__(self, slot_size: int, generation: int) -> None:
        self.slot_size = slot_size
        self.block = torch.zeros(_HEADER + SLOTS * slot_size, dtype=torch.uint8).share_memory_()  # type: ignore[no-untyped-call]
        self.array = self.block.numpy()
        self.address = self.array.ctypes.data
        self.header = self.array[:_HEADER].view(np.int64)
        self.key = (os.getpid(), generation)
        self.sent = 0
        parent = multiprocessing.parent_process()  # the main process of a DataLoader worker
        self.receiver = parent.pid if parent is not None and parent.pid is not None else os.getpid()

    def free_slot(self) -> int | None:
        """The place in the segment of the next message's slot; None while the main process has
        not read the message that last used it."""
        if self.sent - int(self.header[0]) >= SLOTS:
            return None
        return _HEADER + (self.sent % SLOTS) * self.slot_size


_ring: _Ring | None = None
_ring_lock = threading.Lock()  # pickling happens in the worker queue's feeder thread


def _worker_ring(total: int) -> _Ring | None:
    """This process's ring with slots of at least ``total`` bytes (a new, larger one if need be)."""
    global _ring
    if total > MAX_SLOT:
        return None
    ring = _ring
    if ring is None or ring.key[0] != os.getpid() or ring.slot_size < total:
        generation = 0 if ring is None or ring.key[0] != os.getpid() else ring.key[1] + 1
        size = max(total + total // 4, 1 << 16)
        ring = _ring = _Ring(-(-size // _ALIGN) * _ALIGN, generation)
    return ring


def _tensor_field(value: torch.Tensor) -> int | None:
    """The dtype code of a tensor the ring carries (on the CPU, plain, of a dtype it knows, not
    in shared memory already: an image decoded into it is sent as it is); None for any other."""
    if value.device.type != "cpu" or value.layout != torch.strided or value.requires_grad:
        return None
    if value.untyped_storage().is_shared():
        return None
    return _CODES.get(value.dtype)


def _plan(batch: dict[str, Any]) -> tuple[list[tuple[str, int, int, Any]], list[int], int]:
    """Each field's (key, place in a slot, code, shape or count), its size there, and the bytes
    the slot needs."""
    fields, sizes = [], []
    total = 0
    for key, value in batch.items():
        code, size, extra = _REST, 0, None  # type: tuple[int, int, Any]
        kind = type(value)
        if kind is torch.Tensor:
            dtype_code = _tensor_field(value)
            if dtype_code is not None:
                code, size, extra = dtype_code, value.numel() * value.element_size(), tuple(value.shape)
        elif (kind is list or kind is RowList) and value and type(value[0]) is bytes:
            try:
                data = sum(map(len, value))
            except TypeError:  # an item without a length: not a bytes column
                data = -1
            if data >= 0:
                code, extra = (_ROW_LIST if kind is RowList else _LIST), len(value)
                size = 8 * (3 * len(value) + 1) + data  # spans and rows, then the values
        fields.append((key, total, code, extra))
        sizes.append(size)
        total += -(-size // _ALIGN) * _ALIGN
    return fields, sizes, total


def place_batch(batch: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    """In a worker, as ``batch`` is sent: its top-level tensors and ``bytes`` columns copied into
    the next free slot of this process's ring.

    Returns:
        The arguments of :func:`receive_batch` but the last, and the fields left to pickle (to
        pass as that last one); None when the ring does not take the batch (no field for it,
        too large, or no slot free).
    """
    fields, sizes, total = _plan(batch)
    if all(code == _REST for _, _, code, _ in fields):
        return None
    with _ring_lock:
        ring = _worker_ring(total)
        start = None if ring is None else ring.free_slot()
        if ring is None or start is None:
            return None
        rest = {}
        for index, (key, place, code, extra) in enumerate(fields):
            value, at = batch[key], start + place
            if code >= 0:
                _write_tensor(ring, at, sizes[index], value)
            elif code != _REST and not _write_column(ring.array[at : at + sizes[index]], value):
                code = _REST  # not all bytes after all: pickled
                fields[index] = (key, place, code, extra)
            if code == _REST:
                rest[key] = value
        sequence = ring.sent
        ring.sent += 1
        block = None if ring.header[1] == ring.receiver else ring.block
    return (ring.key, block, ring.slot_size, sequence, tuple(fields)), rest


def _write_tensor(ring: _Ring, at: int, size: int, value: torch.Tensor) -> None:
    """Copies the tensor's values, in order, to ``at`` (``size`` bytes)."""
    if not size:
        return
    if value.is_contiguous() and not value.is_conj() and not value.is_neg() and value.nbytes == size:
        ctypes.memmove(ring.address + at, value.data_ptr(), size)  # a tenth of a torch copy's cost
    else:  # strided, conjugate or negative views: torch resolves them
        ring.block[at : at + size].view(value.dtype).view(value.shape).copy_(value)


def _write_column(field: np.ndarray[Any, Any], values: list[bytes]) -> bool:
    """Writes into ``field`` the spans and rows (int64) of ``values``, then the values; False
    (nothing usable written) when one is not ``bytes`` or they do not fit (the list changed)."""
    count = len(values)
    cuts = field[: 8 * (3 * count + 1)].view(np.int64)
    data = field[cuts.nbytes :]
    if compiled is not None:
        written = compiled.join_into(values, data, cuts)  # the bytes, or JOIN_NOT_BYTES / JOIN_NO_ROOM
        return written not in (compiled.JOIN_NOT_BYTES, compiled.JOIN_NO_ROOM)  # type: ignore[no-any-return]
    if any(type(value) is not bytes for value in values):
        return False
    lengths = np.fromiter(map(len, values), dtype=np.int64, count=count)
    ends = np.cumsum(lengths)
    if count and ends[-1] > len(data):
        return False
    cuts[: 2 * count : 2] = ends - lengths
    cuts[1 : 2 * count : 2] = lengths
    cuts[2 * count :] = np.arange(count + 1)
    view = memoryview(data)  # type: ignore[arg-type]
    for value, end, length in zip(values, ends.tolist(), lengths.tolist(), strict=True):
        view[end - length : end] = value
    return True


_received: dict[tuple[int, int], tuple[torch.Tensor, np.ndarray[Any, Any]]] = {}
"""The main process's rings, by (worker pid, generation): the segment and its bytes as an array."""


def receive_batch(
    key: tuple[int, int],
    block: torch.Tensor | None,
    slot_size: int,
    sequence: int,
    fields: tuple[tuple[str, int, int, Any], ...],
    rest: dict[str, Any],
) -> dict[str, Any]:
    """In the main process: the batch sent in slot ``sequence`` of the ring ``key``, its fields
    copied out of the slot; frees the slot."""
    token = stages.begin()
    if block is not None and key not in _received:
        _forget_older(key)
        _received[key] = (block, block.numpy())
    ring = _received.get(key)
    if ring is None:
        raise RuntimeError(f"a batch from DataLoader worker {key[0]} names a ring this process never got")
    array = ring[1]
    start = _HEADER + (sequence % SLOTS) * slot_size
    batch: dict[str, Any] = {}
    for name, place, code, extra in fields:
        at = start + place
        if code >= 0:
            batch[name] = _read_tensor(array, at, _DTYPES[code], extra)
        elif code == _REST:
            batch[name] = rest[name]
        else:
            values = _cut(array, at, extra)
            batch[name] = RowList(values) if code == _ROW_LIST else values
    header = array[:_HEADER].view(np.int64)
    header[0] = sequence + 1  # the slot is free (what was read above are copies)
    header[1] = os.getpid()
    stages.end(stages.HANDOFF, token)
    return batch


def _read_tensor(
    array: np.ndarray[Any, Any], at: int, dtype: torch.dtype, shape: tuple[int, ...]
) -> torch.Tensor:
    """A copy (its own memory, writable) of the tensor written at ``at``."""
    count = math.prod(shape)
    if not count:
        return torch.empty(shape, dtype=dtype)
    values = torch.frombuffer(bytearray(array[at : at + count * dtype.itemsize]), dtype=dtype)
    return values if len(shape) == 1 else values.view(shape)


def _cut(array: np.ndarray[Any, Any], at: int, count: int) -> list[bytes]:
    """The ``count`` bytes values written at ``at`` by :func:`_write_column`."""
    cuts = array[at : at + 8 * (3 * count + 1)].view(np.int64)
    data = array[at + cuts.nbytes :]
    spans, rows = cuts[: 2 * count], cuts[2 * count :]
    if compiled is not None:
        return compiled.bytes_rows(data, spans, rows, True)  # type: ignore[no-any-return]
    view = data.data
    return [bytes(view[a : a + n]) for a, n in spans.reshape(-1, 2).tolist()]


def _forget_older(key: tuple[int, int]) -> None:
    """Lets go of the rings this worker replaced, and of workers that ended."""
    for old in list(_received):
        if old[0] == key[0] or not pid_alive(old[0]):
            del _received[old]


def forget_rings(pid: int) -> None:
    """Lets go of the rings of process ``pid`` (a loading process that ended)."""
    for old in list(_received):
        if old[0] == pid:
            del _received[old]
