"""Remote storage through fsspec: URLs, retries, ranged and coalesced reads, read-ahead, uploads.

Any fsspec URL works (``s3://``, ``gs://``, ``https://``, ``memory://`` ...); fsspec and the
protocol packages are the optional extra ``remote``, imported only when a URL is used.
``file://`` URLs and plain paths never come here: they take the local fast path of ``io.py``.

Reads of a file go through :class:`RemoteFile`: index entries are read as byte ranges,
neighbouring ranges merged into one request, and requests that follow one another through a
file (the sequential shuffle modes) read ahead in the background. Transient failures
(connection resets, timeouts, 5xx, throttling) are retried with exponential backoff, each retry
logged; a missing object or a permission error fails at once, naming the URL.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import io
import itertools
import logging
import os
import posixpath
import random
import re
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, BinaryIO, TypeVar

from .errors import RemoteIOError, SourceNotFoundError

__all__ = [
    "RemoteFile",
    "RetryPolicy",
    "StorageOptions",
    "coalesce",
    "filesystem",
    "is_transient",
    "is_url",
    "retrying",
    "set_retry_policy",
]

logger = logging.getLogger(__name__)

StorageOptions = Mapping[str, Any] | None
"""Keyword arguments for the fsspec file system of a URL (credentials, endpoint, ...)."""

EXTRA = "pip install 'torch-tfrecord[remote]'"

T = TypeVar("T")


_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")


def is_url(path: str) -> bool:
    """Whether ``path`` names remote (fsspec) storage; ``file://`` URLs are local paths."""
    match = _SCHEME.match(path)
    return match is not None and match[1].lower() not in ("file", "local")


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """How transient failures of remote storage are retried.

    Args:
        attempts: tries per request in all (1 means no retry).
        initial_delay: seconds before the first retry; doubled for each further one.
        max_delay: cap on one delay. Each delay is jittered by up to a half of it.
    """

    attempts: int = 6
    initial_delay: float = 0.2
    max_delay: float = 8.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"{self.attempts=} must be at least 1")
        if not 0 <= self.initial_delay <= self.max_delay:
            raise ValueError(
                f"need 0 <= initial_delay <= max_delay, got {self.initial_delay}, {self.max_delay}"
            )

    def delay(self, retry: int) -> float:
        """Seconds to wait before retry number ``retry`` (from 1)."""
        base = min(self.max_delay, self.initial_delay * 2 ** (retry - 1))
        return float(base * (0.5 + random.random() / 2))


_policy = RetryPolicy()


def set_retry_policy(policy: RetryPolicy) -> RetryPolicy:
    """Sets how remote reads are retried in this process; returns the previous policy."""
    global _policy
    previous, _policy = _policy, policy
    return previous


# Errors that say the request itself is wrong: retrying cannot help.
_PERMANENT = (
    FileNotFoundError,
    PermissionError,
    IsADirectoryError,
    NotADirectoryError,
    ValueError,
    TypeError,
)
_TRANSIENT_ERRNOS = {
    errno.EIO,
    errno.EBUSY,
    errno.EAGAIN,
    errno.ECONNRESET,
    errno.ECONNABORTED,
    errno.ECONNREFUSED,
    errno.EPIPE,
    errno.ETIMEDOUT,
    getattr(errno, "EREMOTEIO", 121),
}
# Transport errors of aiohttp, botocore, requests and http.client, matched by name so that none
# of them is imported here.
_TRANSIENT_NAMES = {
    "ClientConnectionError",
    "ClientOSError",
    "ClientPayloadError",
    "ServerDisconnectedError",
    "ServerTimeoutError",
    "EndpointConnectionError",
    "ConnectionClosedError",
    "ReadTimeoutError",
    "ConnectTimeoutError",
    "ResponseStreamingError",
    "IncompleteReadError",
    "IncompleteRead",
    "RemoteDisconnected",
    "ChunkedEncodingError",
    "ProtocolError",
}
_TRANSIENT_WORDS = (
    "SlowDown",
    "Throttl",
    "TooManyRequests",
    "ServiceUnavailable",
    "InternalError",
    "RequestTimeout",
)


def _status(error: BaseException) -> int | None:
    for name in ("status", "code", "status_code"):
        value = getattr(error, name, None)
        if isinstance(value, int) and 100 <= value < 600:
            return value
    return None


def is_transient(error: BaseException) -> bool:
    """Whether a failed request is worth retrying: a dropped connection, a timeout, a 5xx
    answer or throttling (429, SlowDown), here or anywhere in the error's chain of causes."""
    if isinstance(error, _PERMANENT) and not isinstance(error, ConnectionError):
        return False
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        status = _status(current)
        if status is not None:
            return status >= 500 or status in (408, 429)
        if isinstance(current, ConnectionError | TimeoutError | asyncio.TimeoutError | EOFError):
            return True
        if any(cls.__name__ in _TRANSIENT_NAMES for cls in type(current).__mro__):
            return True
        if isinstance(current, OSError) and current.errno in _TRANSIENT_ERRNOS:
            return True
        if any(word in str(current) for word in _TRANSIENT_WORDS):
            return True
        current = current.__cause__ or current.__context__
    return False


def retrying(call: Callable[[], T], url: str, what: str, policy: RetryPolicy | None = None) -> T:
    """Runs ``call``, retrying transient failures with backoff; each retry is logged.

    Raises:
        SourceNotFoundError: the object does not exist (at once, no retry).
        RemoteIOError: a permission error (at once), or a transient failure that outlasted
            every attempt; the message names the URL, what was being done and the attempts.
    """
    policy = policy or _policy
    for attempt in range(1, policy.attempts + 1):
        try:
            return call()
        except SourceNotFoundError:
            raise
        except FileNotFoundError as error:
            raise SourceNotFoundError(f"no such object: {url!r} ({what}): {error}") from error
        except Exception as error:
            if not is_transient(error):
                raise RemoteIOError(f"{what} of {url!r} failed: {type(error).__name__}: {error}") from error
            if attempt == policy.attempts:
                raise RemoteIOError(
                    f"{what} of {url!r} failed after {attempt} attempts: {type(error).__name__}: {error}"
                ) from error
            pause = policy.delay(attempt)
            logger.warning(
                "retry %d/%d of %s of %r in %.2fs after %s: %s",
                attempt,
                policy.attempts - 1,
                what,
                url,
                pause,
                type(error).__name__,
                error,
            )
            time.sleep(pause)
    raise AssertionError("unreachable")


def filesystem(url: str, storage_options: StorageOptions = None) -> tuple[Any, str]:
    """The fsspec file system of ``url`` and the path within it.

    Raises:
        ImportError: fsspec or the protocol's package is missing; the message names the extra.
    """
    try:
        from fsspec.core import url_to_fs
    except ImportError as error:
        raise ImportError(f"reading or writing {url!r} needs fsspec: {EXTRA}") from error
    try:
        return url_to_fs(url, **dict(storage_options or {}))  # type: ignore[no-any-return]
    except ImportError as error:
        protocol = url.partition("://")[0]
        raise ImportError(
            f"{url!r}: the {protocol}:// protocol needs a package that is not installed ({error}); {EXTRA}"
        ) from error


def file_info(url: str, storage_options: StorageOptions = None) -> dict[str, Any]:
    """fsspec's ``info`` of ``url`` (retried)."""
    fs, path = filesystem(url, storage_options)
    return retrying(lambda: fs.info(path), url, "looking up")  # type: ignore[no-any-return]


def exists(url: str, storage_options: StorageOptions = None) -> bool:
    """Whether an object (or directory) exists at ``url``."""
    fs, path = filesystem(url, storage_options)
    return bool(retrying(lambda: fs.exists(path), url, "looking up"))


def expand(url: str, storage_options: StorageOptions = None) -> tuple[list[tuple[str, str]], str]:
    """The files a remote source names, as ``(full URL, path below the source)``, and what it
    was (for error messages).

    A directory (or bucket prefix) stands for the files in it and below it, at any depth; a
    glob for its matches (the path below the glob's fixed prefix); anything else for itself, if
    it exists.
    """
    fs, path = filesystem(url, storage_options)
    if any(char in path for char in "*?["):
        found = retrying(lambda: fs.glob(path, detail=True), url, "listing")
        prefix = _fixed_prefix(path)
        return [
            (fs.unstrip_protocol(p), _below(p, prefix))
            for p, info in found.items()
            if info.get("type") != "directory"
        ], "glob"
    info = retrying(lambda: _info_or_none(fs, path), url, "looking up")
    if info is None:
        raise SourceNotFoundError(f"no such file or directory: {url!r}")
    if info.get("type") == "directory":
        entries = retrying(lambda: fs.find(path, detail=True), url, "listing")
        root = path.rstrip("/")
        return [
            (fs.unstrip_protocol(p), _below(p, root))
            for p, e in entries.items()
            if e.get("type") != "directory"
        ], "directory"
    return [(url, posixpath.basename(path))], "file"


def _fixed_prefix(pattern: str) -> str:
    """The folders of a glob pattern before its first wildcard."""
    parts = pattern.split("/")
    return "/".join(itertools.takewhile(lambda part: not any(c in part for c in "*?["), parts))


def _below(path: str, root: str) -> str:
    """``path`` relative to ``root`` (``/``-separated); its base name if it is not below it."""
    root = root.rstrip("/")
    if root and path.startswith(root + "/"):
        return path[len(root) + 1 :]
    return posixpath.basename(path)


def _info_or_none(fs: Any, path: str) -> dict[str, Any] | None:
    try:
        return fs.info(path)  # type: ignore[no-any-return]
    except FileNotFoundError:
        return None


def read_head(url: str, count: int, storage_options: StorageOptions = None) -> bytes:
    """The first ``count`` bytes of the object (fewer for a shorter one; an empty object, whose
    byte ranges S3 refuses as unsatisfiable, gives ``b""``)."""
    size = int(file_info(url, storage_options)["size"])
    if size == 0:
        return b""
    fs, path = filesystem(url, storage_options)
    end = min(count, size)
    return retrying(lambda: fs.cat_file(path, start=0, end=end), url, f"reading bytes 0..{end}")  # type: ignore[no-any-return]


def read_bytes(url: str, storage_options: StorageOptions = None) -> bytes:
    """The whole object at ``url`` (retried)."""
    fs, path = filesystem(url, storage_options)
    return retrying(lambda: fs.cat_file(path), url, "reading")  # type: ignore[no-any-return]


def write_bytes(url: str, data: bytes, storage_options: StorageOptions = None) -> None:
    """Writes a small object in one request (atomic on object stores; retried)."""
    fs, path = filesystem(url, storage_options)
    retrying(lambda: fs.pipe_file(path, data), url, "writing")


def remove(url: str, storage_options: StorageOptions = None) -> None:
    """Removes the object at ``url``, if there is one."""
    fs, path = filesystem(url, storage_options)
    try:
        retrying(lambda: fs.rm_file(path), url, "removing")
    except SourceNotFoundError:
        pass


def move(source: str, target: str, storage_options: StorageOptions = None) -> None:
    """Moves an object: a server-side copy, then the source removed.

    Object stores have no rename; the copy is what every backend (and its emulators) does the
    same way, and the target appears whole, at once.
    """
    fs, source_path = filesystem(source, storage_options)
    _, target_path = filesystem(target, storage_options)
    retrying(lambda: fs.copy(source_path, target_path), source, f"copying to {target!r}")
    remove(source, storage_options)


def make_dirs(url: str, storage_options: StorageOptions = None) -> None:
    """Creates a directory where the file system has them (a no-op on object stores)."""
    fs, path = filesystem(url, storage_options)
    if path:
        fs.makedirs(path, exist_ok=True)


def _protocols(fs: Any) -> tuple[str, ...]:
    protocol = fs.protocol
    return (protocol,) if isinstance(protocol, str) else tuple(protocol)


class Upload:
    """A write-only stream to an object that appears under its name only on :meth:`commit`.

    Uses fsspec's transactional files (``autocommit=False``): on S3 a multipart upload that
    is completed at commit and aborted on :meth:`discard`, on GCS a resumable upload, locally
    a temporary file. A process that dies mid-write leaves no object under the name.
    """

    def __init__(self, url: str, storage_options: StorageOptions = None) -> None:
        self.url = url
        fs, path = filesystem(url, storage_options)
        self._spool: tuple[Any, str] | None = None
        self._file: Any
        if "memory" in _protocols(fs):
            # Its files are live from the moment they open: spool, and put the bytes on commit.
            self._spool = (fs, path)
            self._file = tempfile.SpooledTemporaryFile(max_size=64 << 20)  # noqa: SIM115 (closed on commit)
        else:
            self._file = retrying(lambda: fs.open(path, "wb", autocommit=False), url, "opening for writing")

    def write(self, data: bytes | bytearray | memoryview) -> int:
        return int(self._file.write(data))

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        """Uploads what is buffered; the object still does not exist until :meth:`commit`."""
        if self._spool is None:
            self._file.close()

    def commit(self) -> None:
        if self._spool is None:
            self._file.commit()
            return
        fs, path = self._spool
        self._file.seek(0)
        data = self._file.read()
        self._file.close()
        retrying(lambda: fs.pipe_file(path, data), self.url, "writing")

    def discard(self) -> None:
        """Abandons the upload (an S3 multipart upload is aborted); a failure here is only logged,
        as the upload then never completes and the object never appears."""
        if self._spool is not None:
            self._file.close()
            return
        try:
            self._file.discard()
        except Exception as error:
            logger.warning("could not abort the upload to %r: %s", self.url, error)
        finally:
            with contextlib.suppress(AttributeError):  # (memory files have no such flag, nor need it)
                self._file.closed = True  # so that garbage collection never commits it


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
    """

    def __init__(
        self,
        url: str,
        size: int,
        storage_options: StorageOptions = None,
        *,
        read_ahead: int = _READ_AHEAD,
        max_gap: int = _MAX_GAP,
    ) -> None:
        self.url = url
        self.size = size
        self.storage_options = dict(storage_options or {})
        self.read_ahead = read_ahead
        self.max_gap = max_gap
        self.requests = 0  # made by this process, for benchmarks and tests
        self._fs: tuple[Any, str] | None = None
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
        """One ranged request, retried; short answers (a shrunken object) are returned as they are."""
        fs, path = self._filesystem()
        what = f"reading bytes {start}..{end}"

        def call() -> bytes:
            self.requests += 1
            return fs.cat_file(path, start=start, end=end)  # type: ignore[no-any-return]

        return retrying(call, self.url, what)

    def _get_many(self, spans: list[tuple[int, int]]) -> list[bytes]:
        """Several ranged requests at once (concurrently where the file system is async)."""
        if len(spans) == 1:
            return [self._get(*spans[0])]
        fs, path = self._filesystem()
        results: list[bytes | None] = [None] * len(spans)
        missing = list(range(len(spans)))

        def call() -> None:
            nonlocal missing
            self.requests += len(missing)
            answers = fs.cat_ranges(
                [path] * len(missing),
                [spans[i][0] for i in missing],
                [spans[i][1] for i in missing],
                on_error="return",
            )
            failed = []
            for i, answer in zip(missing, answers, strict=True):
                if isinstance(answer, BaseException):
                    failed.append((i, answer))
                else:
                    results[i] = answer
            missing = [i for i, _ in failed]
            if failed:  # retried by `retrying` for only the ranges that failed
                raise failed[0][1]

        first = spans[0][0]
        retrying(call, self.url, f"reading {len(spans)} ranges from byte {first}")
        return results  # type: ignore[return-value]

    def read_ranges(self, starts: Sequence[int], sizes: Sequence[int]) -> list[bytes]:
        """The bytes of each range ``[start, start + size)``, in the order asked.

        Neighbouring ranges share a request; a run of requests through the file is served
        from a read-ahead window fetched in the background.
        """
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
