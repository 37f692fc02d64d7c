"""The node-local cache of remote shards: one directory shared by every process of a node.

Layout of a cache directory (every name derived from the object's URL, ``KEY``):

- ``KEY``: a complete, verified copy (it appears only by a rename);
- ``KEY.json``: what it is a copy of (URL, size, version: ETag or generation). Written before
  the download starts, it is the *reservation*: the cache's usage is the sum of its entries'
  sizes, so the limit holds while downloads run, not only after;
- ``KEY.part``: a download under way (the bytes below its size are the object's);
- ``locks/KEY.lock``: held (``flock``) by the one process downloading KEY; ``locks/cache.lock``
  around every reservation and eviction. The kernel lets go of a dead process's locks, so a
  crash leaves no lock that blocks anyone; its ``.part`` and reservation are removed by the next
  process that opens the cache or reserves;
- ``hints/PID.json``: when each process will need which shards (see :func:`.eviction.next_use`), so that
  eviction keeps what the node's readers need soonest.

filelock (the ``remote`` extra) does the locking.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import math
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ...support.extras import install_hint
from ...support.processes import pid_alive
from .eviction import FETCH_AHEAD, Schedule, choose_victims, next_use

__all__ = ["CacheEntry", "ShardCache", "parse_size"]


_UNITS = {"": 1, "b": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_SIZE = re.compile(r"\s*([0-9]*\.?[0-9]+)\s*([kmgt]?)(i?)b?\s*", re.IGNORECASE)
# With no limit, the cache leaves this much of its disk free (and 5% of it at least).
_FREE_MARGIN = 1 << 30


def parse_size(size: int | str) -> int:
    """Bytes of ``size``: an int, or a string like ``"50GB"``, ``"1.5 GiB"``, ``"200M"``.

    Raises:
        ValueError: not a size, or a negative one.
    """
    if isinstance(size, int):
        value = size
    else:
        match = _SIZE.fullmatch(size)
        if match is None:
            raise ValueError(f"{size!r} is not a size in bytes (e.g. 50GB, 1.5GiB, 200M or 4096)")
        number, prefix, binary = match.groups()
        scale = 1024 ** "kmgt".index(prefix.lower()) * 1024 if binary and prefix else _UNITS[prefix.lower()]
        value = int(float(number) * scale)
    if value < 0:
        raise ValueError(f"a cache size must not be negative, got {size!r}")
    return value


def cache_key(url: str) -> str:
    """The file name of ``url``'s copy: a digest of the URL and the object's own name."""
    digest = hashlib.sha256(url.encode()).hexdigest()[:16]
    name = re.sub(r"[^A-Za-z0-9._-]", "_", url.rstrip("/").rpartition("/")[2])[-80:]
    return f"{digest}-{name}"


@dataclass(frozen=True)
class CacheEntry:
    """One entry of a cache directory.

    Attributes:
        key: its file name in the directory.
        url: the object it copies.
        size: its size (reserved while it downloads).
        version: the object's ETag or generation when it was fetched ("" where the store has none).
        complete: whether the copy is complete (else a download is under way or was cut off).
        path: the copy's path.
    """

    key: str
    url: str
    size: int
    version: str
    complete: bool
    path: str


def _filelock() -> Any:
    try:
        import filelock
    except ImportError as error:
        raise ImportError(f"the cache of remote shards needs filelock; {install_hint('remote')}") from error
    return filelock


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)


class ShardCache:
    """A directory of complete copies of remote objects, bounded in size, shared by processes.

    Every method is safe to call from several processes (ranks, DataLoader workers, other jobs)
    on the same directory at once. The object pickles as its directory and limit.

    Args:
        root: the directory (created if missing); None: a new one under the temporary
            directory, removed when the process that made it exits.
        limit: the most bytes its entries take (``50_000_000_000`` or ``"50GB"``); None: what
            the disk has free, less a margin (1 GiB or 5% of the disk, the larger).

    Example:
        >>> cache = ShardCache("/scratch/cache", "50GB")  # doctest: +SKIP
        >>> cache.usage() <= cache.limit_bytes()  # doctest: +SKIP
        True
    """

    def __init__(self, root: str | os.PathLike[str] | None = None, limit: int | str | None = None) -> None:
        self.temporary = root is None
        if root is None:
            root = tempfile.mkdtemp(prefix="torch-tfrecord-cache-")
            atexit.register(_remove_tree, os.fspath(root), os.getpid())
        self.root = os.path.abspath(os.fspath(root))
        self.limit = None if limit is None else parse_size(limit)
        os.makedirs(os.path.join(self.root, "locks"), exist_ok=True)
        os.makedirs(os.path.join(self.root, "hints"), exist_ok=True)
        self._filelock = _filelock()
        self.recover()

    def __getstate__(self) -> dict[str, Any]:
        return {"temporary": self.temporary, "root": self.root, "limit": self.limit}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._filelock = _filelock()

    # ------------------------------------------------------------------ paths and locks

    def path(self, key: str) -> str:
        return os.path.join(self.root, key)

    def part_path(self, key: str) -> str:
        return os.path.join(self.root, key + ".part")

    def key_lock(self, key: str) -> Any:
        """The lock held by the one process downloading ``key`` (a ``filelock.FileLock``)."""
        return self._filelock.FileLock(os.path.join(self.root, "locks", key + ".lock"))

    def try_lock(self, key: str) -> Any:
        """:meth:`key_lock`, acquired, if no process holds it; else None."""
        lock = self.key_lock(key)
        try:
            lock.acquire(timeout=0)
        except self._filelock.Timeout:
            return None
        return lock

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with self._filelock.FileLock(os.path.join(self.root, "locks", "cache.lock")):
            yield

    # ------------------------------------------------------------------ entries

    def _meta(self, key: str) -> dict[str, Any] | None:
        try:
            with open(self.path(key) + ".json", encoding="utf-8") as f:
                return json.load(f)  # type: ignore[no-any-return]
        except (FileNotFoundError, ValueError):
            return None

    def entries(self) -> list[CacheEntry]:
        """Every entry, complete or not, sorted by URL."""
        found = []
        for name in os.listdir(self.root):
            if not name.endswith(".json"):
                continue
            key = name[: -len(".json")]
            meta = self._meta(key)
            if meta is None:
                continue
            complete = os.path.exists(self.path(key))
            found.append(
                CacheEntry(key, meta["url"], int(meta["size"]), meta["version"], complete, self.path(key))
            )
        return sorted(found, key=lambda entry: entry.url)

    def usage(self) -> int:
        """Bytes the entries take or have reserved."""
        return sum(entry.size for entry in self.entries())

    def limit_bytes(self) -> int:
        """The limit: as given, or the entries' bytes plus what the disk has free, less a margin."""
        if self.limit is not None:
            return self.limit
        disk = shutil.disk_usage(self.root)
        return self.usage() + max(0, disk.free - max(_FREE_MARGIN, disk.total // 20))

    def lookup(self, url: str, size: int | None, version: str) -> str | None:
        """The path of ``url``'s complete copy if it is of this size (None: any) and version; a
        copy of another version is removed (fetched again by the next download)."""
        key = cache_key(url)
        meta = self._meta(key)
        if meta is None or not os.path.exists(self.path(key)):
            return None
        if (size is not None and int(meta["size"]) != size) or meta["version"] != version:
            self.discard(key)
            return None
        with contextlib.suppress(OSError):  # the last access, for least-recently-used eviction
            os.utime(self.path(key))
        return self.path(key)

    def discard(self, key: str, *, incomplete_only: bool = False) -> bool:
        """Removes an entry unless a process is downloading it (or, with ``incomplete_only``,
        its copy is complete); whether it was removed."""
        lock = self.try_lock(key)
        if lock is None:
            return False
        try:
            if incomplete_only and os.path.exists(self.path(key)):
                return False
            self.remove(key)
        finally:
            lock.release()
        return True

    def remove(self, key: str) -> None:
        """Removes an entry: its copy first, then its reservation (usage never under-counts)."""
        _remove(self.path(key))
        _remove(self.part_path(key))
        _remove(self.path(key) + ".json")

    # ------------------------------------------------------------------ reservations

    def reserve(self, url: str, size: int, version: str, now: float = math.inf) -> bool:
        """Reserves ``size`` bytes for ``url``'s copy, evicting what :func:`choose_victims` allows;
        False (nothing reserved) when that is not enough. Call it holding :meth:`key_lock`.

        Args:
            now: the caller's time (``epoch + fraction``) for the order-aware eviction; infinity
                when it has no schedule (then the least recently used entries go first).
        """
        key = cache_key(url)
        with self._locked():
            self._clean_stale(skip=key)
            entries = [entry for entry in self.entries() if entry.key != key]
            needed = sum(entry.size for entry in entries) + size - self.limit_bytes()
            schedules = self._schedules() if needed > 0 and math.isfinite(now) else []
            if any(key in schedule for schedule in schedules):
                # Caching it pays off at its next use after the one under way (which reads its
                # bytes either way): Belady's rule, with the option not to cache.
                incoming = next_use(key, schedules, now, after_current=True, ahead=FETCH_AHEAD)
            else:  # a reader without a schedule: least recently used first
                incoming = now if math.isfinite(now) else -math.inf
            candidates = [
                (entry.key, entry.size, next_use(entry.key, schedules, now), _mtime(entry.path))
                for entry in entries
                if entry.complete
            ]
            victims = choose_victims(candidates, needed, incoming)
            if victims is None:
                return False
            for victim in victims:
                self.remove(victim)
            _remove(self.path(key))
            _write_json(self.path(key) + ".json", {"url": url, "size": size, "version": version})
            return True

    def get_bytes(self, name: str, version: str) -> bytes | None:
        """What :meth:`put_bytes` kept under ``name`` for this ``version``, if it is there."""
        path = self.lookup(name, None, version)
        if path is None:
            return None
        with contextlib.suppress(FileNotFoundError), open(path, "rb") as f:
            return f.read()
        return None

    def put_bytes(self, name: str, version: str, data: bytes) -> bool:
        """Keeps ``data`` (e.g. an index scanned from a shard) under ``name`` and ``version``;
        False when the limit leaves no room or another process is writing it."""
        key = cache_key(name)
        lock = self.try_lock(key)
        if lock is None:
            return False
        try:
            if not self.reserve(name, len(data), version):
                return False
            with open(self.part_path(key), "wb") as f:
                f.write(data)
            self.commit(key)
            return True
        finally:
            lock.release()

    def commit(self, key: str) -> str:
        """Makes a finished download the entry's copy (a rename); returns its path."""
        os.replace(self.part_path(key), self.path(key))
        return self.path(key)

    def recover(self) -> None:
        """Removes what dead processes left: cut-off downloads, their reservations, their hints."""
        with self._locked():
            self._clean_stale()

    def _clean_stale(self, skip: str = "") -> None:
        names = set(os.listdir(self.root))
        for name in names:
            if name.endswith(".json"):
                key = name[: -len(".json")]
                if key in names or key == skip:
                    continue
            elif name.endswith(".part"):
                key = name[: -len(".part")]
                if key == skip or key + ".json" in names:
                    continue
            else:
                continue
            self.discard(key, incomplete_only=True)
        hints = os.path.join(self.root, "hints")
        for name in os.listdir(hints):
            if name.split(".")[0].isdigit() and not pid_alive(int(name.split(".")[0])):
                _remove(os.path.join(hints, name))

    # ------------------------------------------------------------------ schedules

    def publish(self, schedule: Schedule) -> None:
        """Tells the node when this process will need which keys (replacing what it said before)."""
        _write_json(
            os.path.join(self.root, "hints", f"{os.getpid()}.json"),
            {key: [list(use) for use in uses] for key, uses in schedule.items()},
        )

    def _schedules(self) -> list[Schedule]:
        found: list[Schedule] = []
        hints = os.path.join(self.root, "hints")
        for name in os.listdir(hints):
            if name.endswith(".json"):
                with (
                    contextlib.suppress(FileNotFoundError, ValueError),
                    open(os.path.join(hints, name), encoding="utf-8") as f,
                ):
                    found.append({k: [(float(a), float(b)) for a, b in v] for k, v in json.load(f).items()})
        return found

    # ------------------------------------------------------------------ maintenance

    def clear(self) -> int:
        """Removes every entry no process is downloading, and the hints of dead processes;
        returns the entries removed."""
        removed = 0
        with self._locked():
            self._clean_stale()
            for entry in self.entries():
                if entry.complete:
                    self.remove(entry.key)
                    removed += 1
        return removed

    def __repr__(self) -> str:
        limit = "free disk" if self.limit is None else f"{self.limit} bytes"
        return f"ShardCache({self.root!r}, limit={limit})"


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except FileNotFoundError:
        return 0.0


def _write_json(path: str, value: Any) -> None:
    """Writes ``path`` whole or not at all (a temporary name, then a rename)."""
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "w", encoding="utf-8") as f:
        json.dump(value, f)
    os.replace(temporary, path)


def _remove_tree(root: str, owner: int) -> None:
    if os.getpid() == owner:  # not in a forked child that inherited the exit hook
        shutil.rmtree(root, ignore_errors=True)
