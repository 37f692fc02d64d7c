"""The node-local cache of remote shards: one directory shared by every process of a node.

Layout of a cache directory (``KEY`` derived from the object's URL; each kind of file in a
directory of its own, so no object's name can collide with the cache's own files):

- ``cache.json``: the layout and the directory's one limit (see :class:`ShardCache`);
- ``copies/KEY``: a complete copy (it appears only by a rename);
- ``meta/KEY.json``: what it is a copy of (URL, size, version: ETag or generation). Written before
  the download starts, it is the *reservation*: the cache's usage is the sum of its entries'
  sizes, so the limit holds while downloads run, not only after;
- ``partial/KEY``: a download under way (the bytes below its size are the object's);
- ``locks/KEY.lock``: held (``flock``) by the one process downloading KEY; ``locks/cache.lock``
  around every reservation and eviction. The kernel lets go of a dead process's locks, so a
  crash leaves no lock that blocks anyone; its partial download and reservation are removed by
  the next process that opens the cache, or reserves (every 10 s at most, unless space is short);
- ``hints/PID.json``: when each process will need which shards (see :func:`.eviction.next_use`),
  so that eviction keeps what the node's readers need soonest.

Everything read from the directory must be this user's (or a named group's): :mod:`.cache_dir`.
A directory of the first layout (files at the top) is ignored; ``cache clear`` removes them.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import math
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from typing import Any

from ...support.processes import pid_alive
from .cache_dir import (
    Access,
    CacheWriteError,
    FileLock,
    LockTimeout,
    NoLock,
    create_exclusive,
    ensure_directory,
    modified,
    read_small,
    regular_file,
    remove_quietly,
    remove_tree,
    temporary_name_pid,
    write_atomically,
    writing,
)
from .cache_entries import (
    META_BYTES,
    CacheEntry,
    CacheLimitError,
    cache_key,
    entry_meta,
    limit_conflict,
    old_layout_files,
    parse_size,
    read_limit,
    read_schedules,
    reserved_bytes,
    write_limit,
)
from .eviction import FETCH_AHEAD, ShardUses, choose_victims, next_use

__all__ = ["CacheEntry", "CacheLimitError", "ShardCache", "cache_key", "parse_size"]

logger = logging.getLogger(__name__)

# With no limit, the cache leaves this much of its disk free (and 5% of it at least).
_FREE_MARGIN = 1 << 30
_CLEAN_EVERY_S = 10.0  # what dead processes left is looked for at most this often, unless space is short
_SUBDIRECTORIES = ("copies", "meta", "partial", "locks", "hints")
_WARNED: set[tuple[int, str]] = set()  # (process, directory): warned that it reads without the cache


class ShardCache:
    """A directory of complete copies of remote objects, bounded in size, shared by processes.

    Every method is safe to call from several processes (ranks, DataLoader workers, other jobs)
    on the same directory at once. The object pickles as its directory, limit and access.

    The directory must be this user's and writable by nobody else (or shared through ``group``);
    it is made 0700 (2770 with a group). A directory that cannot be written (read-only, full)
    makes the cache read without it, with one warning; a copy is trusted when its recorded
    size and version match the object, and the readers check its records' CRCs.

    Args:
        root: the directory (created if missing); None: a new one under the temporary
            directory, removed when the process that made it exits.
        limit: the most bytes its entries take (``50_000_000_000`` or ``"50GB"``). A directory
            has one limit, recorded in its ``cache.json`` by the first job that names one; a job
            naming another is refused (:class:`CacheLimitError`): leave it out to use the
            recorded one, or change it with ``torch-tfrecord cache limit DIR SIZE``. None with
            none recorded: what the disk has free, less a margin (1 GiB or 5% of the disk).
        group: the group (name or id) that shares the directory; None: the environment variable
            ``TORCH_TFRECORD_CACHE_GROUP``, else this user alone.

    Raises:
        CacheDirectoryError: the directory (or one inside it) is another user's or writable
            by others; the message says how to make a safe one.
        CacheLimitError: ``limit`` differs from the directory's recorded limit.

    Example:
        >>> cache = ShardCache("/scratch/cache", "50GB")  # doctest: +SKIP
        >>> cache.usage() <= cache.limit_bytes()  # doctest: +SKIP
        True
    """

    _cleaned = -math.inf  # when this process last removed what dead processes left

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        limit: int | str | None = None,
        *,
        group: str | int | None = None,
    ) -> None:
        self.access = Access.of(group)
        self.temporary = root is None
        if root is None:
            root = tempfile.mkdtemp(prefix="torch-tfrecord-cache-")
            atexit.register(remove_tree, os.fspath(root), os.getpid())
        self.root = os.path.abspath(os.fspath(root))
        self.limit = None if limit is None else parse_size(limit)
        self.disabled: str | None = None  # why the cache is not used, once it cannot be written
        try:
            ensure_directory(self.root, self.access, top=True)
            for name in _SUBDIRECTORIES:
                ensure_directory(os.path.join(self.root, name), self.access)
            self.limit = self._settle_limit(self.limit)
            self.recover()
        except CacheWriteError as error:
            self.degrade(error)

    def __getstate__(self) -> dict[str, Any]:
        keep = ("temporary", "root", "limit", "access", "disabled")
        return {name: self.__dict__[name] for name in keep}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def degrade(self, error: OSError) -> None:
        """Reads without the cache from now on (in this process): its directory cannot be
        written. Warns once per process and directory."""
        self.disabled = str(error)
        if (os.getpid(), self.root) not in _WARNED:
            _WARNED.add((os.getpid(), self.root))
            logger.warning("the cache directory %r cannot be used (%s): reading without it", self.root, error)

    # ------------------------------------------------------------------ paths and locks

    def path(self, key: str) -> str:
        """Where ``key``'s complete copy is."""
        return os.path.join(self.root, "copies", key)

    def part_path(self, key: str) -> str:
        """Where ``key``'s download under way is."""
        return os.path.join(self.root, "partial", key)

    def meta_path(self, key: str) -> str:
        return os.path.join(self.root, "meta", key + ".json")

    def key_lock(self, key: str) -> FileLock:
        """The lock held by the one process downloading ``key``."""
        if self.disabled is not None:
            return NoLock()
        return FileLock(os.path.join(self.root, "locks", key + ".lock"), self.access)

    def try_lock(self, key: str) -> FileLock | None:
        """:meth:`key_lock`, acquired, if no process holds it; else None."""
        lock = self.key_lock(key)
        try:
            lock.acquire(timeout=0)
        except LockTimeout:
            return None
        return lock

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with FileLock(os.path.join(self.root, "locks", "cache.lock"), self.access):
            yield

    def _settle_limit(self, limit: int | None) -> int | None:
        with self._locked():
            known, recorded = read_limit(self.root, self.access)
            if not known or (recorded is None and limit is not None):
                write_limit(self.root, limit, self.access)
                return limit
            if limit is not None and limit != recorded:
                raise limit_conflict(self.root, recorded, limit)
            return recorded

    def set_limit(self, limit: int | str | None) -> None:
        """Records a new limit for the directory (None: the disk's free space); jobs that use it
        follow at their next reservation."""
        self.limit = None if limit is None else parse_size(limit)
        with self._locked():
            write_limit(self.root, self.limit, self.access)

    # ------------------------------------------------------------------ entries

    def _meta(self, key: str) -> dict[str, Any] | None:
        return entry_meta(read_small(self.meta_path(key), META_BYTES, self.access))

    def _keys(self, folder: str, suffix: str = "") -> set[str]:
        names = os.listdir(os.path.join(self.root, folder))
        return {n[: len(n) - len(suffix)] for n in names if n.endswith(suffix) and not n.startswith(".")}

    def entries(self) -> list[CacheEntry]:
        """Every entry, complete or not, sorted by URL (metadata that does not read is left out:
        see :meth:`unreadable`)."""
        found = []
        for key in self._keys("meta", ".json"):
            meta = self._meta(key)
            if meta is None:
                continue
            complete = regular_file(self.path(key), self.access) is not None
            found.append(
                CacheEntry(key, meta["url"], meta["size"], meta["version"], complete, self.path(key))
            )
        return sorted(found, key=lambda entry: entry.url)

    def unreadable(self) -> list[str]:
        """The metadata files that are not an entry's (malformed, a link, another user's)."""
        return sorted(self.meta_path(key) for key in self._keys("meta", ".json") if self._meta(key) is None)

    def old_layout_files(self) -> list[str]:
        """Files of the first layout (every entry's files at the top), ignored by this one."""
        return old_layout_files(self.root, self.access)

    def usage(self) -> int:
        """Bytes the entries take or have reserved."""
        return sum(entry.size for entry in self.entries())

    def limit_bytes(self) -> int:
        """The limit: as recorded, or the entries' bytes plus what the disk has free, less a margin."""
        limit = self._limit()
        return limit if limit is not None else self.usage() + self._room("")

    def _limit(self) -> int | None:
        known, recorded = read_limit(self.root, self.access) if self.disabled is None else (False, None)
        if known:
            self.limit = recorded
        return self.limit

    def _room(self, skip: str) -> int:
        """What can still be reserved beside ``skip``'s entry: the limit less the entries' bytes or,
        with none, what the disk has free less the margin (then no entry is read)."""
        limit = self._limit()
        if limit is not None:
            return limit - reserved_bytes(self.root, self.access, skip)
        disk = shutil.disk_usage(self.root)
        return max(0, disk.free - max(_FREE_MARGIN, disk.total // 20))

    def lookup(self, url: str, size: int | None, version: str) -> str | None:
        """The path of ``url``'s complete copy if it is of this size (None: any) and version, and of the
        size recorded; a copy of another version is removed (fetched again by the next download)."""
        if self.disabled is not None:
            return None
        key = cache_key(url)
        meta = self._meta(key)
        copy = regular_file(self.path(key), self.access) if meta is not None else None
        if meta is None or copy is None or meta["url"] != url:
            return None
        stale = (size is not None and meta["size"] != size) or meta["version"] != version
        if stale or copy.st_size != meta["size"]:
            self.discard(key)
            return None
        with contextlib.suppress(OSError):  # the last access, for least-recently-used eviction
            os.utime(self.path(key), follow_symlinks=False)
        return self.path(key)

    def discard(self, key: str, *, incomplete_only: bool = False) -> bool:
        """Removes an entry unless a process is downloading it (or, ``incomplete_only``, it is complete)."""
        lock = self.try_lock(key)
        if lock is None:
            return False
        try:
            if incomplete_only and os.path.lexists(self.path(key)):
                return False
            self.remove(key)
        finally:
            lock.release()
        return True

    def remove(self, key: str) -> None:
        """Removes an entry: its copy first, then its reservation (usage never under-counts)."""
        remove_quietly(self.path(key))
        remove_quietly(self.part_path(key))
        remove_quietly(self.meta_path(key))

    # ------------------------------------------------------------------ reservations

    def reserve(self, url: str, size: int, version: str, now: float = math.inf) -> bool:
        """Reserves ``size`` bytes for ``url``'s copy, evicting what :func:`choose_victims` allows;
        False (nothing reserved) when that is not enough. Call it holding :meth:`key_lock`.

        Args:
            now: the caller's time (``epoch + fraction``) for the order-aware eviction; infinity
                when it has no schedule (then the least recently used entries go first).

        Raises:
            CacheWriteError: the directory cannot be written (:meth:`degrade` then).
        """
        if self.disabled is not None:
            return False
        key = cache_key(url)
        with self._locked():
            if time.monotonic() - self._cleaned > _CLEAN_EVERY_S or size > self._room(key):
                self._clean_stale(skip=key)  # (a scan of the directory: not at every reservation)
            needed = size - self._room(key)
            entries = [entry for entry in self.entries() if entry.key != key] if needed > 0 else []
            schedules = self._schedules() if needed > 0 and math.isfinite(now) else []
            if any(key in schedule for schedule in schedules):
                # Caching it pays off at its next use after the one under way (which reads its
                # bytes either way): Belady's rule, with the option not to cache.
                incoming = next_use(key, schedules, now, after_current=True, ahead=FETCH_AHEAD)
            else:  # a reader without a schedule: least recently used first
                incoming = now if math.isfinite(now) else -math.inf
            candidates = [
                (entry.key, entry.size, next_use(entry.key, schedules, now), modified(entry.path))
                for entry in entries
                if entry.complete
            ]
            victims = choose_victims(candidates, needed, incoming)
            if victims is None:
                return False
            for victim in victims:
                self.remove(victim)
            remove_quietly(self.path(key))
            remove_quietly(self.part_path(key))
            meta = {"url": url, "size": size, "version": version}
            write_atomically(self.meta_path(key), json.dumps(meta).encode(), self.access)
            return True

    def create_part(self, key: str) -> int:
        """A descriptor of ``key``'s new partial download, open for writing (call it holding
        :meth:`key_lock`, after :meth:`reserve`); a CacheWriteError where it cannot be made."""
        return create_exclusive(self.part_path(key), self.access)

    def get_bytes(self, name: str, version: str) -> bytes | None:
        """What :meth:`put_bytes` kept under ``name`` for this ``version``, if it is there."""
        path = self.lookup(name, None, version)
        if path is None:
            return None
        meta = self._meta(cache_key(name))
        return read_small(path, meta["size"] if meta else 0, self.access)

    def put_bytes(self, name: str, version: str, data: bytes) -> bool:
        """Keeps ``data`` (e.g. an index scanned from a shard) under ``name`` and ``version``; False
        when the limit leaves no room, another process is writing it, or the cache cannot be written."""
        key = cache_key(name)
        lock = self.try_lock(key)
        if lock is None or self.disabled is not None:
            return False
        try:
            if not self.reserve(name, len(data), version):
                return False
            try:
                descriptor = self.create_part(key)
                with writing(repr(self.part_path(key))), os.fdopen(descriptor, "wb") as out:
                    out.write(data)
                self.commit(key)
            except BaseException:
                self.remove(key)
                raise
            return True
        except CacheWriteError as error:
            self.degrade(error)
            return False
        finally:
            lock.release()

    def commit(self, key: str) -> str:
        """Makes a finished download the entry's copy (a rename); returns its path."""
        with writing(repr(self.path(key))):
            os.replace(self.part_path(key), self.path(key))
        return self.path(key)

    def recover(self) -> None:
        """Removes what dead processes left: cut-off downloads, reservations, hints, temporary files."""
        if self.disabled is None:
            with self._locked():
                self._clean_stale()

    def _clean_stale(self, skip: str = "") -> None:
        self._cleaned = time.monotonic()
        reserved, copies, parts = self._keys("meta", ".json"), self._keys("copies"), self._keys("partial")
        for key in (reserved - copies) | (parts - reserved):  # a download, under way or cut off
            if key != skip:
                self.discard(key, incomplete_only=True)
        for key in copies - reserved:  # a copy whose reservation is gone
            if key != skip:
                self.discard(key)
        for folder in ("", "meta", "hints"):
            directory = os.path.join(self.root, folder)
            for name in os.listdir(directory):
                pid = temporary_name_pid(name)
                if pid is not None and not pid_alive(pid):
                    remove_quietly(os.path.join(directory, name))
        hints = os.path.join(self.root, "hints")
        for name in os.listdir(hints):
            if name.split(".")[0].isdigit() and not pid_alive(int(name.split(".")[0])):
                remove_quietly(os.path.join(hints, name))

    # ------------------------------------------------------------------ schedules

    def publish(self, schedule: ShardUses) -> None:
        """Tells the node when this process will need which keys (replacing what it said before)."""
        if self.disabled is not None:
            return
        hints = {key: [list(use) for use in uses] for key, uses in schedule.items()}
        try:
            path = os.path.join(self.root, "hints", f"{os.getpid()}.json")
            write_atomically(path, json.dumps(hints).encode(), self.access)
        except CacheWriteError as error:
            self.degrade(error)

    def _schedules(self) -> list[ShardUses]:
        return read_schedules(os.path.join(self.root, "hints"), self.access)

    # ------------------------------------------------------------------ maintenance

    def clear(self) -> int:
        """Removes every entry no process is downloading, the hints of dead processes and the
        files of the first layout; returns the entries removed."""
        removed = 0
        with self._locked():
            self._clean_stale()
            for entry in self.entries():
                if entry.complete:
                    self.remove(entry.key)
                    removed += 1
            for key in self._keys("meta", ".json"):
                if self._meta(key) is None:  # (its copy too)
                    self.remove(key)
            for path in self.old_layout_files():
                remove_quietly(path)
        return removed

    def __repr__(self) -> str:
        limit = "free disk" if self.limit is None else f"{self.limit} bytes"
        return f"ShardCache({self.root!r}, limit={limit})"
