"""The index tables of a dataset's shards: loaded when the dataset is made, or, where a manifest
gave the record counts, fetched when a shard is first read (concurrently for a batch's shards).

Only what was loaded pickles with the tables: a DataLoader worker fetches the others itself.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["ShardTables", "TableLoader"]

Table = npt.NDArray[np.int64]
TableLoader = Callable[[], Table]
"""Fetches one shard's ``(offset, framed_size)`` table, checked against what its manifest says."""
_EMPTY = np.zeros((0, 2), dtype=np.int64)
_AT_ONCE = 64  # tables fetched at once


class ShardTables:
    """Each shard's ``(offset, framed_size)`` table, by shard number; some loaded on first use.

    Args:
        tables: each shard's table, or a loader of it (with its record count in ``counts``).
        counts: each shard's record count (needed for the pending ones).

    Attributes:
        arrays: the tables as a list, an empty table standing for one not loaded yet (the native
            batch read takes the list; it reads only shards whose tables were ensured).
    """

    def __init__(self, tables: Sequence[Table | TableLoader], counts: Sequence[int]) -> None:
        if len(tables) != len(counts):
            raise ValueError(f"{len(tables)} tables but {len(counts)} record counts")
        self.counts = np.asarray(counts, dtype=np.int64)
        self.arrays: list[Table] = []
        self._pending: dict[int, TableLoader] = {}
        for shard, table in enumerate(tables):
            if callable(table):
                self._pending[shard] = table
                self.arrays.append(_EMPTY)
            else:
                array = np.ascontiguousarray(table, dtype=np.int64).reshape(-1, 2)
                if len(array) != self.counts[shard]:
                    raise ValueError(f"shard {shard}'s table has {len(array)} rows, not {self.counts[shard]}")
                self.arrays.append(array)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.arrays)

    def __getitem__(self, shard: int) -> Table:
        if shard in self._pending:
            self.ensure([shard])
        return self.arrays[shard]

    def __iter__(self) -> Any:
        return (self[shard] for shard in range(len(self)))

    @property
    def pending(self) -> int:
        """Shards whose tables were not fetched yet (in this process)."""
        return len(self._pending)

    def ensure(self, shards: Iterable[int]) -> None:
        """Fetches the tables of ``shards`` not loaded yet, at the same time."""
        if not self._pending:
            return
        wanted = sorted({int(s) for s in shards} & self._pending.keys())
        if not wanted:
            return
        loaders = [self._pending[s] for s in wanted]
        if len(loaders) == 1:
            loaded = [loaders[0]()]
        else:  # each a request or two: at the same time, not one after another
            with ThreadPoolExecutor(
                min(_AT_ONCE, len(loaders)), thread_name_prefix="torch-tfrecord-index"
            ) as pool:
                loaded = list(pool.map(lambda load: load(), loaders))
        with self._lock:
            for shard, table in zip(wanted, loaded, strict=True):
                if len(table) != self.counts[shard]:
                    raise ValueError(f"shard {shard}'s table has {len(table)} rows, not {self.counts[shard]}")
                self.arrays[shard] = table
                self._pending.pop(shard, None)

    def part(self, shard: int, start: int, stop: int) -> Table | TableLoader:
        """Rows ``[start, stop)`` of shard ``shard``'s table; for a whole table not fetched yet, its
        loader (so that a selection of whole shards fetches nothing)."""
        loader = self._pending.get(shard)
        if loader is not None and (start, stop) == (0, int(self.counts[shard])):
            return loader
        return self[shard][start:stop]

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_lock"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
