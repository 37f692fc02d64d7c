"""The compiled extension's batch reads: the framed records of many ids read (or copied from a
mapping) into one buffer in one call, without the GIL. Callers check that it is built.
"""

from __future__ import annotations

import enum
from typing import Any

import numpy as np
import numpy.typing as npt

from ..support.extension import compiled as _native

__all__ = ["COALESCE_GAP", "Gathered", "gather", "read_into"]

# Local records of a batch at most this far apart in a file are read with one pread, the bytes
# between them included: a syscall costs about as much as copying this many bytes (bench_dataset).
COALESCE_GAP = 4096


def _constant(name: str) -> int:
    # The numbers live in records/_gather.h. Without the extension nothing answers with them:
    # distinct placeholders then (equal values would make the members aliases).
    return int(getattr(_native, name, -1 - len(name)))


class Gathered(enum.IntEnum):
    """What ``gather`` (records/_gather.c) returns first: the batch read, or what it needs before it
    can. The values are the extension's ``GATHER_*`` constants, named in records/_gather.h."""

    DONE = _constant("GATHER_DONE")  # every record read; the value: bytes used
    OPEN = _constant("GATHER_OPEN")  # the value: a shard to open first (its descriptor is -1)
    GROW = _constant("GATHER_GROW")  # the value: bytes the buffer must hold
    FAILED = _constant("GATHER_FAILED")  # a record past its file's end, or a read that failed
    BAD_ID = _constant("GATHER_BAD_ID")  # an id out of range


def read_into(
    fd: int, offsets: npt.NDArray[np.int64], sizes: npt.NDArray[np.int64], out: Any, start: int
) -> int:
    """Reads the file regions into ``out`` back to back from ``start`` (one pread per run of
    neighbouring regions, without the GIL); returns how many regions arrived whole."""
    assert _native is not None
    return int(_native.read_into(fd, offsets, sizes, out, start))


def gather(
    ids: npt.NDArray[np.int64],
    shard_starts: npt.NDArray[np.int64],
    tables: list[npt.NDArray[np.int64]],
    fds: npt.NDArray[np.int64],
    file_sizes: npt.NDArray[np.int64],
    maps: list[Any],
    out: Any,
    starts_out: npt.NDArray[np.int64],
    sizes_out: npt.NDArray[np.int64],
    gap: int,
) -> tuple[Gathered, int]:
    """Reads the framed records of global ``ids`` into ``out`` in one call (see ``gather`` in
    records/_gather.c): ``(status, value)``, the status a :class:`Gathered`.
    Records at most ``gap`` bytes apart in a file are read in one pread, with the bytes between;
    records of a file with a mapping in ``maps`` (a read-only ``mmap``, or None) are copied from
    it when they lie apart."""
    assert _native is not None
    status, value = _native.gather(
        ids, shard_starts, tables, fds, file_sizes, maps, out, starts_out, sizes_out, gap
    )
    return Gathered(status), value
