"""The GZIP / ZLIB shards of a dataset, each read through a
:class:`~torch_tfrecord.records.compressed.shard.CompressedShard` (at most 8 open in a process,
least recently used closed first); a remote one from its cached copy once it has one.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from ..records.compressed.index import CompressedIndex
from ..records.compressed.inflate import SEGMENT
from ..records.compressed.shard import CompressedShard
from ..records.io import StorageOptions, is_url
from .remote_shards import RemoteShards

__all__ = ["Inflaters"]

# Compressed shards inflating at once in a process (each holds inflated segments and a thread).
_MAX_OPEN_INFLATERS = 8


class Inflaters:
    """The compressed shards among ``paths`` (``indexes`` by shard number), opened lazily.

    Attributes:
        cache_bytes: inflated bytes each compressed shard keeps (a block shuffle's window).
        open: the shards open in this process, least recently used first.
    """

    def __init__(
        self,
        paths: Sequence[str],
        indexes: Mapping[int, CompressedIndex],
        storage_options: StorageOptions,
        remote: RemoteShards,
    ) -> None:
        self.paths = list(paths)
        self.indexes = dict(indexes)
        self.storage_options = storage_options
        self.remote = remote
        self.cache_bytes = 0
        self.open: OrderedDict[int, CompressedShard] = OrderedDict()
        self._lock = threading.Lock()

    def hold_window(self, records: int) -> None:
        """Lets each shard keep about ``records`` records inflated (a block shuffle's window),
        so the window is inflated once however its records are asked for."""
        if self.indexes:
            largest_mean = max(
                index.uncompressed_size / max(1, len(index.table)) for index in self.indexes.values()
            )
            self.cache_bytes = int(records * largest_mean) + 2 * SEGMENT

    def get(self, shard: int) -> CompressedShard:
        """Shard ``shard``, opened if it is not open here."""
        path = self.paths[shard]
        if shard not in self.open and is_url(path):
            # Inflating reads the bytes in order from a seek point: wait for the cached copy.
            path = self.remote.copy(shard) or self.remote.fetch(shard) or path
        with self._lock:
            inflater = self.open.get(shard)
            if inflater is not None:
                self.open.move_to_end(shard)
            else:
                if len(self.open) >= _MAX_OPEN_INFLATERS:
                    self.open.popitem(last=False)[1].close()
                options = self.storage_options if is_url(path) else None
                inflater = CompressedShard(path, self.indexes[shard], options, self.cache_bytes)
                self.open[shard] = inflater
            inflater.cache_bytes = self.cache_bytes
            return inflater

    def close(self) -> None:
        for inflater in self.open.values():
            inflater.close()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.update(open=OrderedDict(), _lock=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
