"""Reading byte ranges of a remote object: merged requests, read-ahead, and a stream over them.

Index entries are read as byte ranges, neighbouring ranges merged into one request
(:func:`coalesce`), several requests sent at once, each hedged and under a deadline
(:mod:`.hedged`); requests that follow one another through a file (the sequential shuffle
modes, a stream) read ahead in the background.
"""

from __future__ import annotations

import io
import os
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, BinaryIO

from ...support.stages import REQUESTS, count
from . import hedged
from .urls import StorageOptions, filesystem

__all__ = ["RemoteFile", "RequestCounter", "coalesce"]


_READ_AHEAD = 8 << 20
_MAX_GAP = 64 << 10


def coalesce(
    starts: Sequence[int], ends: Sequence[int], max_gap: int = _MAX_GAP
) -> list[tuple[int, int, list[int]]]:
    """Groups byte ranges into requests: ranges sorted by start whose gaps are at most
    ``max_gap`` bytes share one request. Returns ``(start, end, members)`` per request."""
    order = sorted(range(len(starts)), key=lambda i: (starts[i], ends[i]))
    requests: list[tuple[int, int, list[int]]] = []
    for i in order:
        if requests and starts[i] <= requests[-1][1] + max_gap:
            start, end, members = requests[-1]
            members.append(i)
            requests[-1] = (start, max(end, ends[i]), members)
        else:
            requests.append((starts[i], ends[i], [i]))
    return requests


class RequestCounter:
    """Ranged requests made through several :class:`RemoteFile` objects, counted under a lock.

    Every file adds to it as its requests are made, so a file let go while another thread
    still reads through it is counted all the same.
    """

    def __init__(self) -> None:
        self.value = 0
        self._lock = threading.Lock()

    def add(self, requests: int) -> None:
        with self._lock:
            self.value += requests
        count(REQUESTS, requests)  # in a read's thread (not a background download's): telemetry

    def __getstate__(self) -> dict[str, Any]:
        return {"value": self.value}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.value = state["value"]
        self._lock = threading.Lock()


class RemoteFile:
    """Byte ranges of one remote object, with request merging, read-ahead and retries.

    Not shared between processes: each process (DataLoader worker) makes its own, and the
    file system is looked up lazily, so the object pickles as its URL and options.

    Args:
        url: the object.
        size: its size in bytes (ranges past it are never asked for).
        storage_options: for the file system.
        read_ahead: bytes fetched ahead when requests follow one another through the file.
        max_gap: neighbouring ranges at most this far apart are read in one request.
        counter: also counts this file's requests (shared by the files of a dataset).
    """

    def __init__(
        self,
        url: str,
        size: int,
        storage_options: StorageOptions = None,
        *,
        read_ahead: int = _READ_AHEAD,
        max_gap: int = _MAX_GAP,
        counter: RequestCounter | None = None,
    ) -> None:
        self.url = url
        self.counter = counter
        self.size = size
        self.storage_options = dict(storage_options or {})
        self.read_ahead = read_ahead
        self.max_gap = max_gap
        self.requests = 0  # made by this process, for benchmarks and tests
        self._fs: tuple[Any, str] | None = None
        self._whole: bytes | None = None  # the whole object, once read_whole has fetched it
        self._window: tuple[int, bytes] = (0, b"")
        self._ahead: tuple[int, Future[bytes]] | None = None
        self._last_end = -1
        self._streak = 0  # requests in a row that began where the one before ended
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.update(
            _fs=None, _window=(0, b""), _ahead=None, _pool=None, _lock=None, _last_end=-1, _streak=0, _pid=-1
        )
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def _count(self, requests: int) -> None:
        self.requests += requests
        if self.counter is not None:
            self.counter.add(requests)

    def _filesystem(self) -> tuple[Any, str]:
        if self._pid != os.getpid():
            # Forked (a DataLoader worker): the parent's event loop, connections and read-ahead
            # thread do not exist here. Start afresh.
            self._fs, self._pool, self._ahead, self._window = None, None, None, (0, b"")
            self._last_end, self._streak = -1, 0
            self._pid = os.getpid()
        if self._fs is None:
            self._fs = filesystem(self.url, self.storage_options)
        return self._fs

    def _get(self, start: int, end: int) -> bytes:
        """One ranged request (hedged, under a deadline, retried); short answers (a shrunken
        object) are returned as they are."""
        fs, path = self._filesystem()
        return hedged.fetch(fs, self.url, path, start, end, f"reading bytes {start}..{end}", self._sent)

    def _get_many(self, spans: list[tuple[int, int]]) -> list[bytes]:
        """Several ranged requests at once (each hedged and under a deadline)."""
        if len(spans) == 1:
            return [self._get(*spans[0])]
        fs, path = self._filesystem()
        return hedged.fetch_many(
            fs, self.url, path, spans, f"reading {len(spans)} ranges from byte {spans[0][0]}", self._sent
        )

    def _sent(self) -> None:
        self._count(1)

    def read_whole(self) -> int:
        """Fetches the whole object in one request that asks for one byte more than ``size``, and
        serves every read from it from then on: how many bytes the store answered (``size``,
        else the object changed: ``size + 1`` when it grew). For an object of at most a few tens
        of kilobytes, where this request costs what one range would, and says the size."""
        data = self._get(0, self.size + 1)
        if len(data) == self.size:
            self._whole = data
        return len(data)

    def read_ranges(self, starts: Sequence[int], sizes: Sequence[int]) -> list[bytes]:
        """The bytes of each range ``[start, start + size)``, in the order asked.

        Neighbouring ranges share a request; a run of requests through the file is served
        from a read-ahead window fetched in the background.
        """
        whole = self._whole
        if whole is not None:
            return [whole[start : start + size] for start, size in zip(starts, sizes, strict=True)]
        ends = [start + size for start, size in zip(starts, sizes, strict=True)]
        out: list[bytes] = [b""] * len(starts)
        requests = coalesce(starts, ends, self.max_gap)
        self._filesystem()  # (starts afresh after a fork)
        with self._lock:
            fetched: dict[int, bytes] = {}
            remote: list[int] = []
            for r, (start, end, _) in enumerate(requests):
                data = self._from_window(start, end)
                if data is None:
                    remote.append(r)
                else:
                    fetched[r] = data
            # Two requests in a row that each start where the one before ended are a pass
            # through the file (shuffle="shards" or False, a stream): read ahead. One such
            # request alone happens by chance under a global shuffle, where fetching megabytes
            # ahead would be waste.
            contiguous = len(requests) == 1 and requests[0][0] == self._last_end
            self._streak = self._streak + 1 if contiguous else 0
            sequential = self._streak >= 2
            if remote:
                spans = [requests[r][:2] for r in remote]
                if sequential and self.read_ahead:
                    # Fetch this request and the next stretch of the file in one go.
                    start, end = spans[0]
                    stop = min(self.size, max(end, start + self.read_ahead))
                    window = self._get(start, stop)
                    self._window = (start, window)
                    fetched[remote[0]] = window[: end - start]
                else:
                    for r, data in zip(remote, self._get_many(spans), strict=True):
                        fetched[r] = data
            if requests:
                self._last_end = requests[-1][1]
                if self._last_end >= self.size:  # the pass reached the end: let go of its memory
                    self._release()
                elif sequential:
                    self._prefetch()
        for r, (start, _, members) in enumerate(requests):
            data = fetched[r]
            for i in members:
                out[i] = data[starts[i] - start : ends[i] - start]
        return out

    def _from_window(self, start: int, end: int) -> bytes | None:
        """The range from the read-ahead window (and the block fetched after it), if there."""
        base, window = self._window
        if self._ahead is not None and end > base + len(window):
            ahead_start, future = self._ahead
            if ahead_start == base + len(window) and start >= base:
                self._ahead = None
                try:
                    more = future.result()
                except Exception:  # fetched again in the foreground, which reports it
                    more = b""
                keep = max(0, start - base)
                base, window = base + keep, window[keep:] + more
                self._window = (base, window)
        if base <= start and end <= base + len(window):
            return window[start - base : end - base]
        return None

    def _prefetch(self) -> None:
        base, window = self._window
        start = base + len(window)
        if self._ahead is not None or not window or start >= self.size:
            return
        stop = min(self.size, start + self.read_ahead)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="torch-tfrecord-read-ahead")
        self._ahead = (start, self._pool.submit(self._get, start, stop))

    def stream(self, start: int = 0) -> BinaryIO:
        """A sequential reader of the object from ``start``, fetching ahead in the background."""
        return _RemoteStream(self, start)  # type: ignore[return-value]

    def _release(self, wait: bool = False) -> None:
        """Drops the read-ahead window and its thread (a later pass starts them again)."""
        if self._pool is not None:
            self._pool.shutdown(wait=wait, cancel_futures=True)
            self._pool = None
        self._ahead = None
        self._window = (0, b"")

    def close(self) -> None:
        with self._lock:
            self._release(wait=True)


class _RemoteStream(io.RawIOBase):
    """A seekable, read-only stream over a :class:`RemoteFile`, served from its read-ahead window."""

    def __init__(self, file: RemoteFile, start: int) -> None:
        super().__init__()
        self._file = file
        self._position = start
        file._last_end, file._streak = start, 1  # a stream is a pass: fetch ahead from its first read

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._file.size}[whence]
        self._position = max(0, base + offset)
        return self._position

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        count = min(len(view), self._file.size - self._position)
        if count <= 0:
            return 0
        (data,) = self._file.read_ranges([self._position], [count])
        view[: len(data)] = data
        self._position += len(data)
        return len(data)

    def close(self) -> None:
        try:
            self._file.close()
        finally:
            super().close()
