"""The remote shards of a dataset: each read through the node's cache, or by ranged requests.

A process keeps at most 64 remote files open (least recently used let go first). With a cache
(the default for URLs), a shard is fetched whole into it once per node; the dataset says which
shards it needs when (:meth:`RemoteShards.plan`), so downloads run ahead of the reading
position and eviction keeps what is needed soonest.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence, Set
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal, TypeVar

from ..records.io import StorageOptions, is_url
from ..records.remote import RemoteFile, RequestCounter, file_info, for_each_path
from ..records.remote.cache import ShardCache, cache_key
from ..records.remote.cached import CachedFile, file_version
from ..records.remote.eviction import FETCH_AHEAD, Schedule

__all__ = ["CacheDir", "RemoteShards", "make_cache"]

CacheDir = str | os.PathLike[str] | None | Literal[False]
"""Where remote shards are cached: a directory (shared by every process that names it, kept),
None (a temporary directory, removed when the process that made it exits), or False (no cache)."""

_MAX_OPEN = 64
# Remote shards of one batch read at the same time (each shard's ranges also go concurrently).
_SHARDS_AT_ONCE = 16
T = TypeVar("T")


def make_cache(paths: Sequence[str], cache_dir: CacheDir, cache_limit: int | str | None) -> ShardCache | None:
    """The cache of ``paths``' remote files: None when none is remote or ``cache_dir`` is False."""
    if cache_dir is False or not any(is_url(path) for path in paths):
        return None
    return ShardCache(cache_dir, cache_limit)


class RemoteShards:
    """The remote files among a dataset's shards, by shard number.

    Args:
        paths: every shard's path (local ones are never asked for here).
        storage_options: for the fsspec file system.
        cache: the node's cache, or None (ranged requests only).
        compressed: the compressed shards (whose size and version are looked up only to cache them).

    Attributes:
        sizes, versions: each remote shard's size and ETag or generation, as looked up now
            (0 and "" for the others).
    """

    def __init__(
        self,
        paths: Sequence[str],
        storage_options: StorageOptions,
        cache: ShardCache | None,
        compressed: Set[int] = frozenset(),
    ) -> None:
        self.paths = list(paths)
        self.storage_options = dict(storage_options or {})
        self.cache = cache
        self.sizes, self.versions = [0] * len(self.paths), [""] * len(self.paths)
        looked_up = [
            shard
            for shard, path in enumerate(self.paths)
            if is_url(path) and (cache is not None or shard not in compressed)
        ]
        infos = for_each_path(
            lambda path: file_info(path, self.storage_options), [self.paths[s] for s in looked_up]
        )
        for shard, info in zip(looked_up, infos, strict=True):
            self.sizes[shard], self.versions[shard] = int(info["size"]), file_version(info)
        self.requests = RequestCounter()  # of every remote file, those let go included
        self.now = float("inf")  # the reader's place in its epochs (for order-aware eviction)
        self._looked = -float("inf")  # where advance last looked for shards to fetch
        self._uses: dict[int, list[tuple[float, float]]] = {}
        self._cached: set[int] = set()  # seen complete here (fetched ahead no more)
        self._open: OrderedDict[int, RemoteFile | CachedFile] = OrderedDict()
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._pool_pid = -1

    def source(self, shard: int) -> RemoteFile | CachedFile:
        """How shard ``shard`` is read in this process."""
        with self._lock:
            file = self._open.get(shard)
            if file is not None:
                self._open.move_to_end(shard)
                return file
            if len(self._open) >= _MAX_OPEN:
                _, oldest = self._open.popitem(last=False)
                oldest.close()  # (waits for a read of it in another thread; it stays usable)
            path, size = self.paths[shard], self.sizes[shard]
            if self.cache is None:
                file = RemoteFile(path, size, self.storage_options, counter=self.requests)
            else:
                file = CachedFile(
                    path,
                    size,
                    self.versions[shard],
                    self.storage_options,
                    self.cache,
                    counter=self.requests,
                    now=lambda: self.now,
                )
            self._open[shard] = file
            return file

    def each(self, read: Callable[[Any], T], groups: Sequence[Any]) -> list[T]:
        """``read`` of each group (records of one remote shard), at the same time: their
        requests overlap instead of adding up."""
        if self._pool is None or self._pool_pid != os.getpid():
            self._pool = ThreadPoolExecutor(_SHARDS_AT_ONCE, thread_name_prefix="torch-tfrecord-shards")
            self._pool_pid = os.getpid()
        return list(self._pool.map(read, groups))

    def finish(self) -> None:
        """Waits for the downloads this process started (at the end of an epoch: a worker that
        exits would cut them off, and the next epoch fetch them again)."""
        for file in list(self._open.values()):
            if isinstance(file, CachedFile):
                file.finish()

    def copy(self, shard: int) -> str | None:
        """The path of shard ``shard``'s complete copy in the cache, if there is one."""
        if self.cache is None:
            return None
        return self.cache.lookup(self.paths[shard], self.sizes[shard], self.versions[shard])

    def fetch(self, shard: int) -> str | None:
        """Shard ``shard``'s complete copy, fetched now if need be; None without a cache or when
        it cannot take the shard."""
        file = self.source(shard)
        return file.wait() if isinstance(file, CachedFile) else None

    def discard(self, shard: int) -> None:
        """Removes shard ``shard``'s copy (a damaged one), so the next read fetches it again."""
        if self.cache is not None:
            self.cache.discard(cache_key(self.paths[shard]))

    def plan(self, uses: Mapping[int, Sequence[tuple[float, float]]], now: float) -> None:
        """Tells the cache when this process needs which shards (``(first, last)`` times of each
        use, in epochs), and starts fetching those needed first."""
        if self.cache is None:
            return
        self._uses = {shard: list(spans) for shard, spans in uses.items() if is_url(self.paths[shard])}
        schedule: Schedule = {cache_key(self.paths[shard]): spans for shard, spans in self._uses.items()}
        self.cache.publish(schedule)
        self._looked = -float("inf")
        self.advance(now)

    def advance(self, now: float) -> None:
        """Moves this process's place to ``now`` (each batch) and starts fetching the shards it
        needs next (looked for at most every ``FETCH_AHEAD / 8`` of an epoch)."""
        self.now = now
        if self.cache is None or abs(now - self._looked) < FETCH_AHEAD / 8:
            return
        self._looked = now
        for shard, spans in self._uses.items():
            if shard not in self._cached and any(
                first <= now + FETCH_AHEAD and last >= now for first, last in spans
            ):
                if self.copy(shard) is not None:
                    self._cached.add(shard)
                    continue
                file = self.source(shard)
                if isinstance(file, CachedFile):
                    file.start()

    def close(self) -> None:
        for file in self._open.values():
            file.close()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.update(_open=OrderedDict(), _lock=None, _uses={}, _cached=set(), _pool=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
