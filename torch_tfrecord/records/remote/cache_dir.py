"""The node cache's directory as an attack surface: who may write it, and how its files are made.

Anyone who can write a cache directory can serve its readers poisoned shards, so a cache trusts
a directory (and each file it reads there) only when this user owns it, or a group the user
named shares it, and nobody else can write it. Every file is created with
``O_CREAT | O_EXCL | O_NOFOLLOW`` (a link planted at its name makes the creation fail instead of
writing where the link points); files written whole go to an unpredictable temporary name first.
Locks are ``flock`` on files opened with ``O_NOFOLLOW``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import grp
import os
import pwd
import secrets
import shutil
import stat
import time
from collections.abc import Iterator
from typing import Any

from ...errors import TFRecordError

__all__ = [
    "GROUP_ENV",
    "Access",
    "CacheDirectoryError",
    "CacheWriteError",
    "FileLock",
    "LockTimeout",
    "create_exclusive",
    "ensure_directory",
    "modified",
    "read_small",
    "regular_file",
    "remove_quietly",
    "remove_tree",
    "temporary_name_pid",
    "write_atomically",
    "writing",
]

GROUP_ENV = "TORCH_TFRECORD_CACHE_GROUP"
"""The environment variable naming the group that shares a cache directory (see :class:`Access`)."""

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
_TEMPORARY = ".tmp-"
_HOW = (
    "use a directory of your own (the default, cache_dir=None, makes a new private one), or share "
    "one between users through a group: `mkdir -m 2770 DIR && chgrp GROUP DIR`, then give "
    f"ShardCache(..., group='GROUP') or set {GROUP_ENV}=GROUP in every job that uses it"
)


class CacheDirectoryError(TFRecordError, PermissionError):
    """A cache directory that another user could write (so serve poisoned shards from), or a
    file in it that this user did not make: names the path, its owner and mode, and how to
    make a safe one."""


class CacheWriteError(OSError):
    """Writing into the cache directory failed (read-only, full, no permission): the cache
    degrades to reading without it (never raised to the reader)."""


class LockTimeout(Exception):
    """:meth:`FileLock.acquire` with ``timeout=0`` found the lock held."""


@dataclasses.dataclass(frozen=True)
class Access:
    """Who shares a cache directory: this user alone (``gid`` None: directories 0700, files
    0600), or the members of group ``gid`` (directories 2770, files 0660)."""

    gid: int | None = None

    @classmethod
    def of(cls, group: str | int | None) -> Access:
        """The access for ``group`` (a name or number; None: :data:`GROUP_ENV`, else private).

        Raises:
            CacheDirectoryError: no such group.
        """
        if group is None:
            group = os.environ.get(GROUP_ENV) or None
        if group is None or isinstance(group, int):
            return cls(group)
        if group.isdigit():
            return cls(int(group))
        try:
            return cls(grp.getgrnam(group).gr_gid)
        except KeyError:
            raise CacheDirectoryError(f"no group {group!r} to share the cache directory with") from None

    @property
    def directory_mode(self) -> int:
        return 0o700 if self.gid is None else 0o2770

    @property
    def file_mode(self) -> int:
        return 0o600 if self.gid is None else 0o660

    def trusts(self, info: os.stat_result) -> bool:
        """Whether a file or directory with this owner is this user's, or the group's."""
        return info.st_uid == os.geteuid() or (self.gid is not None and info.st_gid == self.gid)


def _name(uid: int) -> str:
    with contextlib.suppress(KeyError):
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    return f"uid {uid}"


def _private_group(gid: int) -> bool:
    """Whether ``gid`` is this user's own group (Debian's user private groups: umask 002)."""
    try:
        group, user = grp.getgrgid(gid), pwd.getpwuid(os.geteuid())
    except KeyError:
        return False
    return group.gr_name == user.pw_name and set(group.gr_mem) <= {user.pw_name}


def _unsafe(info: os.stat_result, access: Access, top: bool) -> str | None:
    """Why a directory with this owner and mode is not safe to cache in, or None."""
    mode = info.st_mode
    if not access.trusts(info):
        return f"is owned by {_name(info.st_uid)}, not by you ({_name(os.geteuid())})"
    if mode & stat.S_IWOTH and not (top and mode & stat.S_ISVTX):
        return f"is writable by every user (mode {stat.S_IMODE(mode):04o})"
    shared = access.gid is not None and info.st_gid == access.gid
    if mode & stat.S_IWGRP and not shared and not _private_group(info.st_gid):
        return f"is writable by the group with gid {info.st_gid} (mode {stat.S_IMODE(mode):04o})"
    return None


def ensure_directory(path: str, access: Access, *, top: bool = False) -> None:
    """Makes ``path`` (mode :attr:`Access.directory_mode`) unless it exists, then checks that
    it is a directory that only this user (or the group) can write. The top directory may be
    reached through a link (the user named it) and be writable by all with the sticky bit (as
    /tmp), since everything in it is made and checked here; the ones inside may not.

    Raises:
        CacheDirectoryError: the directory is not safe, naming why and how to make one.
        CacheWriteError: it could not be made (a read-only or full file system, no permission).
    """
    if not os.path.lexists(path):
        try:
            if top:
                os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            os.mkdir(path, access.directory_mode)
            if access.gid is not None:
                os.chown(path, -1, access.gid)
            os.chmod(path, access.directory_mode)  # past the umask (and the group's setgid bit)
        except FileExistsError:
            pass  # another process made it meanwhile: checked below as any other
        except OSError as error:
            raise CacheWriteError(error.errno, f"cannot make the cache directory {path!r}: {error}") from None
    if top and os.path.islink(path) and not access.trusts(os.lstat(path)):
        raise CacheDirectoryError(
            f"the cache directory {path!r} is a link made by {_name(os.lstat(path).st_uid)}: {_HOW}"
        )
    info = os.stat(path) if top else os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise CacheDirectoryError(f"{path!r} is not a directory (a link or a file): {_HOW}")
    problem = _unsafe(info, access, top)
    if problem is not None:
        raise CacheDirectoryError(
            f"the cache directory {path!r} {problem}: another user could serve you poisoned shards "
            f"from it; {_HOW}"
        )


@contextlib.contextmanager
def writing(what: str) -> Iterator[None]:
    """Turns an OSError of a write into the cache directory into :class:`CacheWriteError`."""
    try:
        yield
    except CacheWriteError:
        raise
    except OSError as error:
        raise CacheWriteError(error.errno, f"cannot write {what}: {error}") from None


def create_exclusive(path: str, access: Access) -> int:
    """A descriptor of a new file at ``path``, open for writing: never an existing file, nor
    where a link there points.

    Raises:
        CacheWriteError: it could not be made (it exists, a link is there, the disk is full ...).
    """
    with writing(repr(path)):
        descriptor = os.open(path, _CREATE, access.file_mode)
        if access.gid is not None:
            os.fchmod(descriptor, access.file_mode)  # past the umask: the group reads it too
        return descriptor


def temporary_name_pid(name: str) -> int | None:
    """The process that wrote the temporary file ``name`` (None: ``name`` is no such file)."""
    if not name.startswith(_TEMPORARY):
        return None
    pid = name[len(_TEMPORARY) :].partition("-")[0]
    return int(pid) if pid.isdigit() else None


def write_atomically(path: str, data: bytes, access: Access) -> None:
    """Writes ``path`` whole or not at all: an unpredictable temporary name beside it, made
    with :func:`create_exclusive`, then a rename (which replaces a link, never follows it).

    Raises:
        CacheWriteError: the write failed.
    """
    directory = os.path.dirname(path)
    temporary = os.path.join(directory, f"{_TEMPORARY}{os.getpid()}-{secrets.token_hex(8)}")
    descriptor = create_exclusive(temporary, access)
    try:
        with writing(repr(path)):
            with os.fdopen(descriptor, "wb") as out:
                out.write(data)
            os.replace(temporary, path)
    except BaseException:
        remove_quietly(temporary)
        raise


def regular_file(path: str, access: Access) -> os.stat_result | None:
    """``lstat`` of ``path`` when it is a regular file of this user (or the group), else None."""
    try:
        info = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return info if stat.S_ISREG(info.st_mode) and access.trusts(info) else None


def read_small(path: str, limit: int, access: Access) -> bytes | None:
    """The bytes of a small file the cache wrote; None when it is missing, larger than
    ``limit``, a link, or not this user's (or the group's)."""
    try:
        descriptor = os.open(path, _READ)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as error:
        if error.errno == errno.ELOOP:  # a link: not made by the cache
            return None
        raise
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode) or not access.trusts(info) or info.st_size > limit:
            return None
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(descriptor, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        return None if len(data) > limit else data
    finally:
        os.close(descriptor)


def modified(path: str) -> float:
    """When a file (a link itself) was last modified; 0 when it is gone."""
    try:
        return os.lstat(path).st_mtime
    except FileNotFoundError:
        return 0.0


def remove_quietly(path: str) -> None:
    """Removes a file (a link itself, never its target) if it is there."""
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)


def remove_tree(root: str, owner: int) -> None:
    """Removes a temporary cache directory at exit, in the process ``owner`` that made it (not
    in a forked child that inherited the exit hook)."""
    if os.getpid() == owner:
        shutil.rmtree(root, ignore_errors=True)


class FileLock:
    """An exclusive ``flock`` on a file of the cache's ``locks/`` directory, shared by every
    process (and thread: each holds its own open file) that names it; the kernel lets go of a
    dead process's lock. A context manager, like ``filelock.FileLock``.

    Raises (from :meth:`acquire`):
        LockTimeout: ``timeout`` ran out.
        CacheWriteError: the lock file could not be opened or made.
    """

    def __init__(self, path: str, access: Access) -> None:
        self.path = path
        self.access = access
        self._descriptor: int | None = None

    def acquire(self, timeout: float | None = None) -> None:
        """Waits for the lock (``timeout`` seconds at most; None: as long as it takes)."""
        with writing(f"the lock {self.path!r}"):
            descriptor = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            info = os.fstat(descriptor)
            if not stat.S_ISREG(info.st_mode) or not self.access.trusts(info):
                raise CacheDirectoryError(f"the lock file {self.path!r} is not one the cache made: {_HOW}")
            if self.access.gid is not None and info.st_uid == os.geteuid():
                os.fchmod(descriptor, self.access.file_mode)
            self._lock(descriptor, timeout)
        except BaseException:
            os.close(descriptor)
            raise
        self._descriptor = descriptor

    @staticmethod
    def _lock(descriptor: int, timeout: float | None) -> None:
        if timeout is None:
            fcntl.flock(descriptor, fcntl.LOCK_EX)  # (releases the GIL while it waits)
            return
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LockTimeout("the lock is held by another process or thread") from None
                time.sleep(0.005)

    def release(self) -> None:
        descriptor, self._descriptor = self._descriptor, None
        if descriptor is not None:
            os.close(descriptor)  # (which lets go of the flock)

    @property
    def is_locked(self) -> bool:
        return self._descriptor is not None

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


class NoLock(FileLock):
    """The lock of a cache that degraded to reading without it: always free, locks nothing."""

    def __init__(self) -> None:
        super().__init__("", Access())

    def acquire(self, timeout: float | None = None) -> None:
        self._descriptor = -1

    def release(self) -> None:
        self._descriptor = None
