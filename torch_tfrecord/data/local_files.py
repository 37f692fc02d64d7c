"""The local shard files a process has open: descriptors and read-only mappings, least
recently used closed first, as the native batch read takes them (tables by shard).

Descriptors are opened lazily in whichever process reads and never pickled; those inherited
through a fork stay usable (positional reads share no offset).
"""

from __future__ import annotations

import mmap
import os
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from ..records.gather import GatherStatus
from ..records.io import open_binary

__all__ = ["LocalFiles", "grown"]

# Local records of a batch at most this far apart in a file are read with one pread, the bytes
# between them included: a syscall costs about as much as copying this many bytes (bench_dataset).
_COALESCE_GAP = 4096


def grown(buffer: bytearray, size: int) -> bytearray:
    """``buffer`` grown to at least ``size`` bytes, or a new one if something holds a view of it."""
    if len(buffer) < size:
        try:
            buffer.extend(bytes(size - len(buffer)))
        except BufferError:  # something still holds a view of it: leave it be
            return bytearray(size)
    return buffer


class LocalFiles:
    """At most ``max_open`` of ``paths`` open at once, by shard number.

    Attributes:
        fds: each shard's descriptor (-1: not open here).
        maps: each open descriptor's read-only mapping (None: not open, empty, or not
            mappable): the native batch read copies records that lie apart from it instead of
            a pread each.
    """

    def __init__(self, paths: Sequence[str], max_open: int) -> None:
        self.paths = list(paths)
        self.max_open = max_open
        self._reset()

    def _reset(self) -> None:
        self._open: OrderedDict[int, int] = OrderedDict()
        self.fds = np.full(len(self.paths), -1, dtype=np.int64)
        self.maps: list[mmap.mmap | None] = [None] * len(self.paths)

    def fd(self, shard: int) -> int:
        """The descriptor of shard ``shard``, opened (and mapped) if it is not open."""
        fd = self._open.get(shard)
        if fd is not None:
            self._open.move_to_end(shard)
            return fd
        if len(self._open) >= self.max_open:
            closed, oldest = self._open.popitem(last=False)
            self.fds[closed] = -1
            self._unmap(closed)
            os.close(oldest)
        with open_binary(self.paths[shard]) as handle:
            fd = os.dup(handle.fileno())
        self._open[shard] = fd
        self.fds[shard] = fd
        try:
            self.maps[shard] = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        except (ValueError, OSError):  # an empty file, or one that cannot be mapped: read it
            self.maps[shard] = None
        return fd

    def _unmap(self, shard: int) -> None:
        mapping, self.maps[shard] = self.maps[shard], None
        if mapping is not None:
            try:
                mapping.close()
            except BufferError:  # another thread's read holds it: unmapped when it lets go
                pass

    def gather(
        self,
        gather: Callable[..., tuple[int, int]],
        ids: npt.NDArray[np.int64],
        record_starts: npt.NDArray[np.int64],
        tables: Sequence[npt.NDArray[np.int64]],
        file_sizes: npt.NDArray[np.int64],
        scratch: bytearray | None,
        open_shard: Callable[[int], bool],
        locate: Callable[[npt.NDArray[np.int64]], Any],
        gap: int = _COALESCE_GAP,
    ) -> tuple[bytearray, npt.NDArray[np.int64], npt.NDArray[np.int64]] | Literal[False] | None:
        """The framed records ``ids`` of these files in one native call (``gather``); False when
        the batch's shards do not all stay open at once, or one is no longer local
        (``open_shard`` opens one: False then), so that the loop per shard reads it."""
        buffer = bytearray() if scratch is None else scratch
        starts = np.empty(len(ids), dtype=np.int64)
        sizes = np.empty(len(ids), dtype=np.int64)
        for _ in range(self.max_open + 1):
            status, value = gather(
                ids, record_starts, tables, self.fds, file_sizes, self.maps, buffer, starts, sizes, gap
            )
            if status == GatherStatus.DONE:
                return buffer, starts, sizes
            if status == GatherStatus.OPEN_SHARD:  # opening it may close the least recently used one
                if not open_shard(value):
                    return False
            elif status == GatherStatus.GROW:
                buffer = grown(buffer, value)
            elif status == GatherStatus.BAD_ID:
                locate(ids)  # raises the IndexError
            else:
                return None
        return False

    def forget(self, shard: int) -> None:
        """Closes (and unmaps) shard ``shard`` if it is open here (its path may change)."""
        fd = self._open.pop(shard, None)
        if fd is not None:
            self.fds[shard] = -1
            self._unmap(shard)
            os.close(fd)

    def close(self) -> None:
        """Closes (and unmaps) every file open here; they reopen on the next read."""
        for shard, fd in self._open.items():
            self._unmap(shard)
            os.close(fd)
        self._open.clear()
        self.fds[:] = -1

    def __getstate__(self) -> dict[str, Any]:
        return {"paths": self.paths, "max_open": self.max_open}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()
