"""The shards a process has open: one pool per dataset per process, least recently used let go
first, within a cap per kind; and what the node's cache hears of the reads (which shards are
needed when, fetched ahead of the reading position).

Only the specs and the storage options pickle: each DataLoader worker opens its own sources. A
forked worker keeps the sources it inherited (descriptors and mappings stay valid, and each
remote or compressed source starts its own connections and threads afresh after a fork).

Several threads may read at once (a dataset's ``threads=``): a source let go while other threads
are inside a read (:func:`using_pool`) is closed only once every read that began before it was let
go has ended, since such a read may hold its descriptor or mapping (the native batch read uses
them without the GIL).
"""

from __future__ import annotations

import functools
import itertools
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

import numpy as np

from ...support.stages import Helpers
from ..remote.cache import cache_key
from ..remote.eviction import FETCH_AHEAD, ShardUses
from ..shard_access import CachedShard, InflatingShard, OpenShard, ShardSpec, Storage, open_shard

__all__ = ["CAPS", "FETCHES_STARTED", "ShardPool", "using_pool"]

CAPS = {"local": 64, "remote": 64, "cached": 64, "inflating": 8}
"""Sources of each kind open at once in a process (an inflating one holds segments and a thread)."""
# Remote shards of one batch read at the same time (each shard's ranges also go concurrently).
_SHARDS_AT_ONCE = 16
FETCHES_STARTED = 64
"""Downloads into the cache a process has started ahead of its reads at most (they run a few at a
time, see records/remote/cached.py); more start as those end. Under a global shuffle every shard
is needed from the epoch's start: starting them all at once cost a rank of 20,000 shards about a
second of CPU before its first batch, for downloads that would wait in a queue."""
T = TypeVar("T")
P = ParamSpec("P")


def _kind(spec: ShardSpec) -> str:
    return "inflating" if spec.inflating else spec.kind


class ShardPool:
    """The open sources of ``specs``, by shard number, opened on first use.

    Attributes:
        fds, maps: each shard's descriptor and read-only mapping while it is open as a local file
            (-1 and None otherwise), as the native batch read takes them.
        storage: what the sources share (options, the cache, the request count, the clock).
    """

    def __init__(self, specs: Sequence[ShardSpec], storage: Storage) -> None:
        self.specs = list(specs)
        self.storage = storage
        self.window = 0  # a compressed shard's inflated bytes kept
        self._reset()

    def _reset(self) -> None:
        self._open: dict[str, OrderedDict[int, OpenShard]] = {kind: OrderedDict() for kind in CAPS}
        self.fds = np.full(len(self.specs), -1, dtype=np.int64)
        self.maps: list[Any] = [None] * len(self.specs)
        self._lock = threading.RLock()
        self._pid = os.getpid()
        self._threads: ThreadPoolExecutor | None = None
        self._uses: dict[int, list[tuple[float, float]]] = {}
        self._complete: set[int] = set()  # cached shards seen complete (fetched ahead no more)
        self._fetchers: dict[int, CachedShard] = {}  # compressed cached shards' downloads
        self._fetching: dict[int, CachedShard] = {}  # downloads started ahead, not yet ended
        self._looked = -float("inf")
        self._reads: dict[int, int] = {}  # the reads in progress (by number) and their threads
        self._read_number = 0
        # Sources let go while other threads read: (the last read begun then, the source).
        self._retired: list[tuple[int, OpenShard]] = []

    def _guard(self) -> threading.RLock:
        if self._pid != os.getpid():  # forked: another thread may have held the lock then
            self._lock, self._threads, self._pid = threading.RLock(), None, os.getpid()
        return self._lock

    def source(self, shard: int) -> OpenShard:
        """Shard ``shard``'s source, opened if it is not open here (maybe letting go of the least
        recently used of its kind)."""
        spec = self.specs[shard]
        opened = self._open[_kind(spec)]
        with self._guard():
            source = opened.get(shard)
            if source is not None:
                opened.move_to_end(shard)
                return source
        # Opened without the lock: opening may take a request (a remote shard checked against
        # its manifest), and the threads reading a batch's shards would wait for each other's
        # (64 shards at 20 ms: 1.3 s, where they overlap in 0.1 s).
        fresh = open_shard(spec, self.storage, window=self.window)
        with self._guard():
            source = opened.get(shard)
            if source is None:  # (else another thread opened it meanwhile: theirs is kept)
                if len(opened) >= CAPS[_kind(spec)]:
                    oldest, evicted = opened.popitem(last=False)
                    self.forget_local(oldest)
                    self._retire(evicted)
                opened[shard] = source = fresh
                return source
            opened.move_to_end(shard)
        fresh.close()
        return source

    def _retire(self, source: OpenShard) -> None:
        """Closes a source let go (under the lock): now if no other thread is inside a read, else
        once the reads in progress now have ended."""
        me = threading.get_ident()
        if all(thread == me for thread in self._reads.values()):
            source.close()
        else:
            self._retired.append((self._read_number, source))

    def begin_read(self) -> int:
        """A read starts in this thread (its sources stay open until :meth:`end_read`); its number."""
        with self._guard():
            number = self._read_number = self._read_number + 1
            self._reads[number] = threading.get_ident()
            return number

    def end_read(self, number: int) -> None:
        """The read ``number`` has ended: the sources let go before every read still in progress
        began are closed."""
        with self._guard():
            self._reads.pop(number, None)
            oldest = min(self._reads, default=self._read_number + 1)
            closing = [source for after, source in self._retired if after < oldest]
            self._retired = [(after, source) for after, source in self._retired if after >= oldest]
        for source in closing:
            source.close()

    def open_local(self, shard: int) -> bool:
        """Opens shard ``shard`` for the native batch read: False when it is not a local file now
        (a remote shard without its complete cached copy, a compressed one)."""
        if self.specs[shard].inflating:
            return False
        source = self.source(shard)
        local = source.local()
        if local is None:
            return False
        with self._guard():  # (not if another thread let it go meanwhile: it is opened again)
            if self._open[_kind(self.specs[shard])].get(shard) is source:
                self.fds[shard] = local.fd
                self.maps[shard] = local.mapping
        return True

    def forget_local(self, shard: int) -> None:
        """Takes shard ``shard`` out of the native batch read's tables (its copy was replaced):
        it is opened again when next read."""
        self.fds[shard] = -1
        self.maps[shard] = None

    def hold_window(self, window_bytes: int) -> None:
        """Lets each compressed shard keep about ``window_bytes`` inflated (a block shuffle's window)."""
        self.window = window_bytes
        for source in self._open["inflating"].values():
            if isinstance(source, InflatingShard):
                source.window = window_bytes

    def each(self, read: Callable[[Any], T], groups: Sequence[Any]) -> list[T]:
        """``read`` of each group (records of one remote shard), at the same time: their requests
        overlap instead of adding up."""
        with self._guard():
            if self._threads is None:
                self._threads = ThreadPoolExecutor(
                    _SHARDS_AT_ONCE, thread_name_prefix="torch-tfrecord-shards"
                )
            threads = self._threads
        with Helpers() as helpers:  # the wait counted as the stages the threads ran (remote fetches)
            return list(threads.map(helpers.wrap(read), groups))

    # -- what the cache hears -------------------------------------------------------------

    def plan(self, uses: Mapping[int, Sequence[tuple[float, float]]], now: float) -> None:
        """Tells the cache when this process needs which shards (``(first, last)`` times of each
        use, in epochs), and starts fetching those needed first."""
        cache = self.storage.cache
        if cache is None:
            return
        self._uses = {s: list(spans) for s, spans in uses.items() if self.specs[s].kind == "cached"}
        schedule: ShardUses = {cache_key(self.specs[s].path): spans for s, spans in self._uses.items()}
        cache.publish(schedule)
        self._looked = -float("inf")
        self.advance(now)

    def advance(self, now: float) -> None:
        """Moves this process's place to ``now`` (each batch) and starts fetching the shards it
        needs next (looked for at most every ``FETCH_AHEAD / 8`` of an epoch), up to
        :data:`FETCHES_STARTED` under way, in the schedule's order of shards: not the soonest
        first, which are those the reads fetch themselves now (a read runs its shard's download),
        so that the two would wait on each other (an epoch of 2,000 shards, ~60 ms a request,
        soonest first: 11.5-12.2 s; in this order 9.7-10.2 s; all at once, as before, 10.8-10.9 s)."""
        self.storage.now = now
        if self.storage.cache is None or abs(now - self._looked) < FETCH_AHEAD / 8:
            return
        self._looked = now
        fetching = self._fetching
        for shard in [shard for shard, source in fetching.items() if not source.fetching()]:
            del fetching[shard]
        room = FETCHES_STARTED - len(fetching)
        if room <= 0:
            return
        horizon = now + FETCH_AHEAD
        needed = (
            shard
            for shard, spans in self._uses.items()
            if shard not in self._complete
            and shard not in fetching
            and any(first <= horizon and last >= now for first, last in spans)
        )
        for shard in itertools.islice(needed, room):
            source = self._cached(shard)
            if source.complete():
                self._complete.add(shard)
                continue
            source.start()
            if source.fetching():
                fetching[shard] = source

    def finish(self) -> None:
        """Waits for the downloads this process started (at the end of an epoch: a worker that
        exits would cut them off, and the next epoch fetch them again)."""
        for source in [*self._open["cached"].values(), *self._fetchers.values(), *self._fetching.values()]:
            if isinstance(source, CachedShard):
                source.finish()

    def _cached(self, shard: int) -> CachedShard:
        """A cached shard's download: its source, or (a compressed one, whose source inflates the
        copy) one of its own."""
        spec = self.specs[shard]
        if not spec.inflating:
            source = self.source(shard)
            assert isinstance(source, CachedShard)
            return source
        with self._guard():
            fetcher = self._fetchers.get(shard)
            if fetcher is None:
                fetcher = self._fetchers[shard] = CachedShard(spec, self.storage)
            return fetcher

    def fetch(self, shard: int) -> str | None:
        """A cached shard's complete copy, fetched now if need be; None when the cache cannot take it."""
        return self._cached(shard).fetch()

    # -- counters -------------------------------------------------------------------------

    @property
    def requests(self) -> int:
        """Requests made to remote objects by this process (those of sources let go included)."""
        return self.storage.requests.value

    def opened(self, kind: str) -> dict[int, OpenShard]:
        """The sources of ``kind`` (``"local"``, ``"remote"``, ``"cached"``, ``"inflating"``) open
        here, by shard number, least recently used first."""
        return dict(self._open[kind])

    def mapped(self) -> int:
        """Shards open here as local files with a mapping."""
        return sum(mapping is not None for mapping in self.maps)

    def close(self) -> None:
        """Lets go of every open source (they reopen on the next read)."""
        with self._guard():
            for opened in self._open.values():
                for shard, source in opened.items():
                    self.forget_local(shard)
                    source.close()
                opened.clear()

    def __getstate__(self) -> dict[str, Any]:
        return {"specs": self.specs, "storage": self.storage, "window": self.window}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()


class _Pooled(Protocol):
    pool: ShardPool


S = TypeVar("S", bound=_Pooled)


def using_pool(method: Callable[Concatenate[S, P], T]) -> Callable[Concatenate[S, P], T]:
    """A method of an object with a ``pool`` that reads through it: no source it uses is closed
    by another thread meanwhile (see the module's docstring)."""

    def reading(self: S, /, *args: P.args, **kwargs: P.kwargs) -> T:
        number = self.pool.begin_read()
        try:
            return method(self, *args, **kwargs)
        finally:
            self.pool.end_read(number)

    functools.update_wrapper(reading, method)
    return reading
