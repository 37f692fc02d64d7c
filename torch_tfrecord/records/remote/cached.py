"""A remote shard read through the node's cache: fetched whole, once per node, in the background.

While the copy is being fetched, reads are served from the bytes already written, wait for the
download when it is about to reach them, and go to the store as exact byte ranges only when
they lie far ahead of it (the first batch never waits for a whole shard). Once the copy is
complete, :meth:`CachedFile.local_path` says where it is, and the caller reads it as a local file.
When the cache cannot take the shard (its limit, and what the readers need sooner), reads go
to the store as without a cache (merged ranges, read-ahead).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from ...errors import IndexFormatError
from . import hedged
from .cache import ShardCache, cache_key
from .cache_dir import CacheWriteError, read_small, writing
from .ranged import RemoteFile, RequestCounter
from .urls import StorageOptions, file_info, filesystem, read_bytes
from .versions import ObjectChangedError, check_version, file_version

__all__ = ["CachedFile", "ObjectChangedError", "download", "file_version", "read_through"]

# Reads that end at most this far past what the download has written wait for it: the stream
# brings those bytes about as soon as a request of their own would.
_WAIT_AHEAD = 16 << 20
# A download that writes nothing for this long is given up on by its readers (ranged reads);
# a slow request is no reason (a dead downloader is seen at once: its lock is free).
_STALL_S = 30.0
# A shard the cache could not take is offered to it again at most this often.
_RETRY_S = 1.0
_FIRST_CHUNK = 256 << 10
_MAX_CHUNK = 8 << 20
_DOWNLOADS_AT_ONCE = 4


def download(
    cache: ShardCache,
    url: str,
    size: int,
    version: str,
    storage_options: StorageOptions = None,
    now: float = float("inf"),
    counter: RequestCounter | None = None,
    *,
    recheck: bool = True,
) -> str | None:
    """Fetches ``url`` whole into ``cache``: the copy's path, or None when another process is
    fetching it or the cache cannot take it.

    The bytes go to ``KEY.part`` in growing ranged requests (retried), and become the copy by a
    rename once their size and (``recheck``) the object's version (ETag, generation) are checked
    again: one more lookup, spared where the version is not known (a manifest written beside
    local files): one request, one byte longer than the object, then says its size.

    Raises:
        ObjectChangedError: the object changed (size or version) since it was listed.
    """
    if cache.disabled is not None:
        return None
    key = cache_key(url)
    lock = cache.try_lock(key)
    if lock is None:
        return None
    try:
        found = cache.lookup(url, size, version)
        if found is not None:
            return found
        if not cache.reserve(url, size, version, now):
            return None

        def check(in_one: bool) -> None:
            # A version nobody said (a manifest written beside local files) cannot be compared:
            # its size is, by the fetch.
            if recheck and version:
                check_version(url, size, version, storage_options, "cached")

        try:
            _fetch(cache, key, url, size, storage_options, counter, check)
            return cache.commit(key)
        except BaseException:
            cache.remove(key)
            raise
    except CacheWriteError as error:  # read-only or full: read from the store instead
        cache.degrade(error)
        return None
    finally:
        lock.release()


def _fetch(
    cache: ShardCache,
    key: str,
    url: str,
    size: int,
    storage_options: StorageOptions,
    counter: RequestCounter | None,
    check: Callable[[bool], None],
) -> None:
    """Writes the object's ``size`` bytes to its part file, and ``check``s its version: an object
    of at most _FIRST_CHUNK bytes is asked for one byte more than it holds in one request (a
    store answers a range past the end with the bytes there are), which says its size, and is
    checked before its bytes are written (readers read a download under way: never the bytes of
    another version); a larger one is checked once all its bytes are written."""
    fs, path = filesystem(url, storage_options)
    position, chunk = 0, _FIRST_CHUNK
    in_one = size <= _FIRST_CHUNK
    sent = None if counter is None else lambda: counter.add(1)
    with os.fdopen(cache.create_part(key), "wb", buffering=0) as out:
        while position < size:
            start, end = position, min(size, position + chunk)
            asked = end + 1 if in_one else end
            data = hedged.fetch(fs, url, path, start, asked, f"caching bytes {start}..{end}", sent)
            if in_one and len(data) != size:
                raise ObjectChangedError(
                    f"{url!r} has {'more' if len(data) > size else 'fewer'} than the {size} bytes it had "
                    "when it was listed (it changed since)"
                )
            if len(data) != end - start:
                raise ObjectChangedError(f"{url!r} is shorter than {size} bytes (it changed while cached)")
            if in_one:
                check(True)
            with writing(repr(cache.part_path(key))):
                out.write(data)
            position, chunk = end, min(2 * chunk, _MAX_CHUNK)
    if not in_one:
        check(False)


def read_through(
    cache: ShardCache,
    url: str,
    storage_options: StorageOptions = None,
    info: dict[str, Any] | None = None,
    *,
    limit: int | None = None,
) -> bytes:
    """The whole (small) object at ``url`` (an index file), from its cached copy, which is
    fetched first if there is none; from the store when the cache cannot take it. ``info``:
    fsspec's info of the object when known (a listing said it), not looked up again.

    Raises:
        IndexFormatError: the object is larger than ``limit`` (nothing fetched).
    """
    info = file_info(url, storage_options) if info is None else info
    size, version = int(info["size"]), file_version(info)
    if limit is not None and size > limit:
        raise IndexFormatError(
            f"{url!r} has {size:,} bytes: more than an index of its data file can hold ({limit:,}); not read"
        )
    path = cache.lookup(url, size, version) or download(
        cache, url, size, version, storage_options, recheck=size > _FIRST_CHUNK
    )
    if path is None and cache.disabled is None:  # another process is fetching it: its copy
        path = _fetched_elsewhere(cache, url, size, version)
    if path is not None:
        data = read_small(path, size, cache.access)  # (None: evicted meanwhile)
        if data is not None and len(data) == size:
            return data
    return read_bytes(url, storage_options)


def _fetched_elsewhere(cache: ShardCache, url: str, size: int, version: str) -> str | None:
    """The copy another process is fetching, once it has it (a small object: about one request's
    time; the ranks of a node starting together then fetch each index once, not once each); None
    when that process lets go without a copy. Waits on the download's lock, without polling (the
    kernel lets go of a dead process's lock; a live one's requests time out and are retried a
    bounded number of times)."""
    lock = cache.key_lock(cache_key(url))
    try:
        lock.acquire()
    except CacheWriteError:
        return None
    lock.release()
    return cache.lookup(url, size, version)


class _Downloads:
    """This process's background downloads (a few at once), started afresh after a fork."""

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None
        self._pid = -1
        self._lock = threading.Lock()

    def submit(self, call: Callable[[], str | None]) -> Future[str | None]:
        with self._lock:
            if self._pool is None or self._pid != os.getpid():
                self._pool = ThreadPoolExecutor(_DOWNLOADS_AT_ONCE, thread_name_prefix="torch-tfrecord-cache")
                self._pid = os.getpid()
            return self._pool.submit(call)


_DOWNLOADS = _Downloads()


class CachedFile:
    """Byte ranges of one remote object, through the node's :class:`ShardCache`.

    A :class:`~torch_tfrecord.records.entries.RangeSource`; pickles as its URL, size, version,
    options and cache (each process starts its own downloads).

    Args:
        url, size, version: the object, as looked up when the dataset was made.
        storage_options: for the file system.
        cache: the node's cache.
        counter: also counts this file's requests (downloads included).
        now: the reader's time in its epochs (for order-aware eviction), a function.
    """

    def __init__(
        self,
        url: str,
        size: int,
        version: str,
        storage_options: StorageOptions,
        cache: ShardCache,
        *,
        counter: RequestCounter | None = None,
        now: Callable[[], float] = lambda: float("inf"),
    ) -> None:
        self.url, self.size, self.version = url, size, version
        self.storage_options = dict(storage_options or {})
        self.cache = cache
        self.key = cache_key(url)
        self.counter = counter
        self._now = now
        self._future: Future[str | None] | None = None
        self._tried = -_RETRY_S
        self._direct: RemoteFile | None = None  # exact ranges, while a download runs
        self._merged: RemoteFile | None = None  # as without a cache, when the cache cannot take it
        self._changed: str | None = None  # why the object is not the one listed, once a download found it
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def local_path(self) -> str | None:
        """The complete copy's path, if there is one."""
        return self.cache.lookup(self.url, self.size, self.version)

    def start(self) -> None:
        """Starts fetching the object into the cache in the background (unless this process
        already is, or another one, or the cache could not take it a moment ago)."""
        if self.cache.disabled is not None:  # (read-only or full: reads go to the store)
            return
        with self._lock:
            if self._pid != os.getpid():  # forked: the parent's download thread is not here
                self._future, self._tried, self._pid = None, -_RETRY_S, os.getpid()
            if self._future is not None and not self._future.done():
                return
            if time.monotonic() - self._tried < _RETRY_S:
                return
            self._tried = time.monotonic()
            self._future = _DOWNLOADS.submit(self._download(self._now()))

    def _download(self, now: float) -> Callable[[], str | None]:
        return lambda: download(
            self.cache, self.url, self.size, self.version, self.storage_options, now, self.counter
        )

    def _promote(self) -> None:
        """Runs this process's download of the object now, in this thread, when it is only queued
        behind others (a global shuffle's first batches queue hundreds): a read waits for its own
        shard's download, never for the queue's."""
        with self._lock:
            future = self._future
            if future is None or self._pid != os.getpid() or not future.cancel():
                return
            promoted: Future[str | None] = Future()
            promoted.set_running_or_notify_cancel()  # (running: another reader's promote waits for it)
            self._future = promoted
        try:
            promoted.set_result(self._download(self._now())())
        except BaseException as error:  # (the readers meet it: they read from the store)
            promoted.set_exception(error)

    def fetching(self) -> bool:
        """Whether this process's download of the object is queued or running."""
        future = self._future
        return future is not None and not future.done() and self._pid == os.getpid()

    def finish(self) -> None:
        """Waits for this process's download of the object, if one runs (its errors are the
        readers' to meet)."""
        future = self._future
        if future is not None and self._pid == os.getpid():
            with contextlib.suppress(Exception):
                future.result()

    def _fetching_elsewhere(self) -> bool:
        """Whether another process (or thread) holds the shard's download lock."""
        lock = self.cache.try_lock(self.key)
        if lock is None:
            return True
        lock.release()
        return False

    def _fetching_here(self) -> bool:
        """Whether this process's download of the object runs now (one queued behind others is
        not waited for: a read then goes to the store, or runs it, see :meth:`_promote`)."""
        future = self._future
        return future is not None and future.running() and self._pid == os.getpid()

    def wait(self) -> str | None:
        """The complete copy's path, fetched now if need be (by this or another process); None
        when the cache cannot take it.

        Raises:
            RemoteIOError: this process's download failed.
        """
        while True:
            path = self.local_path()
            if path is not None or self.cache.disabled is not None:
                return path
            self._tried = -_RETRY_S
            self.start()
            assert self._future is not None
            result = self._future.result()
            if result is not None:
                return result
            lock = self.cache.try_lock(self.key)
            if lock is not None:  # nobody is fetching it: the cache could not take it
                lock.release()
                return self.local_path()
            time.sleep(0.01)  # another process is fetching it

    def read_ranges(self, starts: Sequence[int], sizes: Sequence[int]) -> list[bytes]:
        """The bytes of each ``[start, start + size)``: from the copy, the download under way,
        or the store."""
        if not len(starts):
            return []
        end = max(start + size for start, size in zip(starts, sizes, strict=True))
        written, since, rechecked = -1, time.monotonic(), False
        while True:
            path = self.local_path()
            if path is not None:
                data = _pread_all(path, starts, sizes)
                if data is not None:
                    return data
            self._raise_if_changed()  # (not read from the store instead: that would mix versions)
            self.start()
            if end <= _WAIT_AHEAD:  # (a read further in does not wait for a download to get there)
                self._promote()
            part = _size(self.cache.part_path(self.key))
            if part >= end:
                data = _pread_all(self.cache.part_path(self.key), starts, sizes)
                if data is not None:
                    return data
            if self.cache.disabled is not None:  # read as without a cache
                downloading = False
                break
            downloading = part >= 0 or self._fetching_here() or self._fetching_elsewhere()
            if not downloading and not rechecked and self.local_path() is not None:
                # The download ended between the first look and now (its copy appears by a rename
                # before its lock is let go): read the copy, not the store.
                rechecked = True
                continue
            if not downloading or end - max(part, 0) > _WAIT_AHEAD:
                break
            if part != written:
                written, since = part, time.monotonic()
            elif time.monotonic() - since > _STALL_S:
                break
            time.sleep(0.002)
        return self._remote(exact=downloading).read_ranges(starts, sizes)

    def _raise_if_changed(self) -> None:
        """Raises the error of a download that found the object changed (then and at every read)."""
        future = self._future
        if self._changed is None and future is not None and future.done() and not future.cancelled():
            error = future.exception()
            self._changed = str(error) if isinstance(error, ObjectChangedError) else None
        if self._changed is not None:
            raise ObjectChangedError(self._changed)

    def _remote(self, exact: bool) -> RemoteFile:
        if self._direct is None and self._merged is None and self.version:
            # The first read from the store, not from a download (which checks the version): the
            # object must still be the one listed, or the reads would mix two versions.
            try:
                check_version(self.url, self.size, self.version, self.storage_options, "read")
            except ObjectChangedError as error:
                self._changed = str(error)
                raise
        with self._lock:
            if exact:
                if self._direct is None:
                    self._direct = RemoteFile(
                        self.url,
                        self.size,
                        self.storage_options,
                        max_gap=0,
                        read_ahead=0,
                        counter=self.counter,
                    )
                return self._direct
            if self._merged is None:
                self._merged = RemoteFile(self.url, self.size, self.storage_options, counter=self.counter)
            return self._merged

    def close(self) -> None:
        for file in (self._direct, self._merged):
            if file is not None:
                file.close()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.update(_future=None, _tried=-_RETRY_S, _direct=None, _merged=None, _lock=None, _pid=-1)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return -1


def _pread_all(path: str, starts: Sequence[int], sizes: Sequence[int]) -> list[bytes] | None:
    """The ranges of a local file; None if it is gone or shorter (a copy evicted meanwhile)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)  # (a link: not the cache's)
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        out = [os.pread(fd, size, start) for start, size in zip(starts, sizes, strict=True)]
    finally:
        os.close(fd)
    if any(len(piece) != size for piece, size in zip(out, sizes, strict=True)):
        return None
    return out
