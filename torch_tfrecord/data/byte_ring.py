"""A DataLoader worker's ring of shared-memory slots that carries its batches' ``bytes`` columns.

Pickled through the worker's pipe, a column of 256 values of 4 KB is a megabyte that the pipe
(64 KB) passes in 16 turns between the worker and the main process, each a wake-up: on a busy
machine that cost more than reading and decoding the batch. A fresh shared-memory segment per
batch (one file descriptor to fetch, new pages to fault in) measured slower still. So each
worker keeps one segment, :data:`SLOTS` slots: a batch's ``bytes`` columns are copied, joined,
into the next free slot, and the pickle carries only the slot's place and the values' spans; the
main process cuts the same ``bytes`` values out of the slot as it unpickles (one copy, in C) and
marks the slot free in the segment's header. The segment itself travels once (torch passes its
file descriptor), in every message until the main process says it has it.

Exact by construction: a slot is written only when the main process has released it (else the
column goes through the pipe as before), and the main process reads each slot once, in the
order the worker sent them. The column arrives as the same type (a :class:`RowList` or a
``list``) of the same ``bytes`` values.
"""

from __future__ import annotations

import os
import threading
from itertools import accumulate
from typing import Any

import numpy as np
import torch

from ..codec.selection import RowList
from ..support.extension import compiled
from ..support.processes import pid_alive

__all__ = ["MIN_BYTES", "SLOTS", "RingBytes", "byte_columns"]

SLOTS = 4
"""Slots per worker: more than the batches a DataLoader lets a worker send ahead (2 by default)."""
MIN_BYTES = 1 << 16
"""A column holding fewer bytes than this travels in the pickle (cheap at that size)."""
MAX_SLOT = 1 << 26
"""A batch whose columns hold more goes through the pipe (the ring would hold SLOTS of them)."""
_HEADER = 64  # int64 [0]: messages the main process has read (the next sequence number it expects)
#               int64 [1]: 1 once the main process holds the segment


class _Ring:
    """The worker's side: the segment, its slot size, and the sequence number of the next message."""

    def __init__(self, slot_size: int, generation: int) -> None:
        self.slot_size = slot_size
        self.block = torch.zeros(_HEADER + SLOTS * slot_size, dtype=torch.uint8).share_memory_()  # type: ignore[no-untyped-call]
        self.array = self.block.numpy()
        self.header = self.array[:_HEADER].view(np.int64)
        self.key = (os.getpid(), generation)
        self.sent = 0

    def put(self, joined: list[bytes], total: int) -> tuple[int, torch.Tensor | None] | None:
        """Copies ``joined`` (``total`` bytes) into the next slot: its sequence number and, until
        the main process holds it, the segment; None when no slot is free."""
        sequence = self.sent
        if sequence - int(self.header[0]) >= SLOTS:
            return None  # the main process has not read that slot yet
        start = _HEADER + (sequence % SLOTS) * self.slot_size
        view = memoryview(self.array)[start : start + total]  # type: ignore[arg-type]
        at = 0
        for part in joined:
            view[at : at + len(part)] = part
            at += len(part)
        self.sent += 1
        return sequence, None if self.header[1] else self.block


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
        size = max(total + total // 4, 1 << 20)
        ring = _ring = _Ring(-(-size // 64) * 64, generation)
    return ring


class RingBytes(list):  # type: ignore[type-arg]
    """A column of ``bytes`` values that, pickled in a DataLoader worker, travels in the worker's
    ring (see the module) and unpickles as ``kind`` (``RowList`` or ``list``) of the same values.
    Pickled anywhere else, or with the ring full, it pickles as that type, values inline."""

    __slots__ = ("kind", "total")

    def __init__(self, values: list[bytes], kind: type[list], total: int) -> None:  # type: ignore[type-arg]
        super().__init__(values)
        self.kind, self.total = kind, total

    def __reduce__(self) -> tuple[Any, ...]:  # type: ignore[override]
        with _ring_lock:
            ring = _worker_ring(self.total)
            placed = None if ring is None else ring.put(self, self.total)
        if ring is None or placed is None:
            return (self.kind, (list(self),))
        sequence, block = placed
        ends = np.fromiter(accumulate(map(len, self)), dtype=np.int64, count=len(self))
        return (_receive, (ring.key, block, ring.slot_size, sequence, ends.tobytes(), self.kind is RowList))


_received: dict[tuple[int, int], torch.Tensor] = {}  # the main process's rings, by (worker pid, generation)


def _receive(
    key: tuple[int, int],
    block: torch.Tensor | None,
    slot_size: int,
    sequence: int,
    ends: bytes,
    row_list: bool,
) -> list[bytes]:
    """In the main process: the column sent in slot ``sequence`` of the ring ``key``; frees the slot."""
    if block is not None and key not in _received:
        _forget_older(key)
        _received[key] = block
    ring = _received.get(key)
    if ring is None:
        raise RuntimeError(
            f"a bytes column from DataLoader worker {key[0]} names a ring this process never got"
        )
    array = ring.numpy()
    header = array[:_HEADER].view(np.int64)
    start = _HEADER + (sequence % SLOTS) * slot_size
    cuts = np.frombuffer(ends, dtype=np.int64)
    values = _cut(array[start : start + slot_size], cuts)
    header[0] = sequence + 1  # the slot is free (the values above are copies)
    header[1] = 1
    return RowList(values) if row_list else values


def _cut(slot: np.ndarray[Any, Any], ends: np.ndarray[Any, Any]) -> list[bytes]:
    starts = np.concatenate(([0], ends[:-1])) if len(ends) else ends
    if compiled is not None:
        spans = np.stack([starts, ends - starts], axis=1).astype(np.int64)
        rows = np.arange(len(ends) + 1, dtype=np.int64)
        return compiled.bytes_rows(slot, spans, rows, True)  # type: ignore[no-any-return]
    data = slot.data
    return [bytes(data[a:b]) for a, b in zip(starts.tolist(), ends.tolist(), strict=True)]


def _forget_older(key: tuple[int, int]) -> None:
    """Lets go of the rings this worker replaced, and of workers that ended."""
    for old in list(_received):
        if old[0] == key[0] or not pid_alive(old[0]):
            del _received[old]


def byte_columns(batch: dict[str, Any]) -> dict[str, Any]:
    """``batch`` with each column of ``bytes`` values (a ``list`` or :class:`RowList`) that holds
    :data:`MIN_BYTES` or more as a :class:`RingBytes`."""
    rings = {}
    for key, value in batch.items():
        if type(value) in (list, RowList) and value and all(type(item) is bytes for item in value):
            size = sum(map(len, value))
            if size >= MIN_BYTES:
                rings[key] = RingBytes(value, type(value), size)
    return {**batch, **rings} if rings else batch
