"""Remote paths: which paths are URLs, their fsspec file system, and whole-object operations.

Any fsspec URL works (``s3://``, ``gs://``, ``https://``, ``memory://`` ...); fsspec and the
protocol packages are the optional extra ``remote``, imported only when a URL is used.
``file://`` URLs and plain paths never come here: they take the local fast path of ``io.py``.
Every request is retried (:mod:`torch_tfrecord.records.remote.retry`); reads, lookups and
listings are also hedged and under a deadline (:mod:`torch_tfrecord.records.remote.hedged`).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import itertools
import os
import posixpath
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from ...errors import SourceNotFoundError
from ...support.extras import install_hint
from . import hedged
from .retry import retrying

__all__ = [
    "Listed",
    "StorageOptions",
    "exists",
    "expand",
    "file_info",
    "filesystem",
    "for_each_path",
    "is_url",
    "make_dirs",
    "move",
    "read_bytes",
    "read_head",
    "remove",
    "write_bytes",
]

StorageOptions = Mapping[str, Any] | None
"""Keyword arguments for the fsspec file system of a URL (credentials, endpoint, ...)."""


_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")


def is_url(path: str) -> bool:
    """Whether ``path`` names remote (fsspec) storage; ``file://`` URLs are local paths."""
    match = _SCHEME.match(path)
    return match is not None and match[1].lower() not in ("file", "local")


# The fsspec file systems a forked child inherited, kept alive there (see _keep_inherited).
_INHERITED: list[Any] = []


def _keep_inherited() -> None:
    """In a forked child (a DataLoader worker), keeps the parent's fsspec file systems alive.

    fsspec drops them from its instance cache on the child's first call; their finalizers then
    close the inherited aiohttp connections, and closing a socket unregisters it from the event
    loop's epoll instance, which the child shares with the parent: the parent's next request
    over that connection would wait for its timeout (300 s). Never used in the child, they are
    simply not let go.
    """
    if "fsspec" not in sys.modules:
        return
    from fsspec.spec import AbstractFileSystem

    classes: list[type] = [AbstractFileSystem]
    while classes:
        cls = classes.pop()
        classes.extend(cls.__subclasses__())
        _INHERITED.extend(getattr(cls, "__dict__", {}).get("_cache", {}).values())


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_keep_inherited)


def filesystem(url: str, storage_options: StorageOptions = None) -> tuple[Any, str]:
    """The fsspec file system of ``url`` and the path within it.

    Raises:
        ImportError: fsspec or the protocol's package is missing; the message names the extra.
    """
    try:
        from fsspec.core import url_to_fs
    except ImportError as error:
        raise ImportError(f"reading or writing {url!r} needs fsspec; {install_hint('remote')}") from error
    try:
        return url_to_fs(url, **dict(storage_options or {}))  # type: ignore[no-any-return]
    except ImportError as error:
        protocol = url.partition("://")[0]
        raise ImportError(
            f"{url!r}: the {protocol}:// protocol needs a package that is not installed ({error}); "
            f"{install_hint('remote')}"
        ) from error


T = TypeVar("T")
# Objects looked up at once when a dataset is made (each lookup is a request or more).
_LOOKUPS_AT_ONCE = 64


def for_each_path(call: Callable[[str], T], paths: Sequence[str]) -> list[T]:
    """``call`` of each path, in order; concurrently when some are URLs (their requests overlap
    instead of adding up: a thousand shards' lookups take seconds, not minutes). The first
    path's error (in order) is raised."""
    if sum(is_url(path) for path in paths) < 2:
        return [call(path) for path in paths]
    threads = min(_LOOKUPS_AT_ONCE, len(paths))
    with ThreadPoolExecutor(threads, thread_name_prefix="torch-tfrecord-lookup") as pool:
        return list(pool.map(call, paths))


def file_info(url: str, storage_options: StorageOptions = None, *, fresh: bool = False) -> dict[str, Any]:
    """fsspec's ``info`` of ``url`` (retried); ``fresh``: asked of the store, not of what the file
    system remembers of an earlier listing (s3fs answers from it)."""
    fs, path = filesystem(url, storage_options)
    if fresh:
        fs.invalidate_cache(path)
    return hedged.call(fs, url, "looking up", "info", path)  # type: ignore[no-any-return]


def exists(url: str, storage_options: StorageOptions = None) -> bool:
    """Whether an object (or directory) exists at ``url``."""
    fs, path = filesystem(url, storage_options)
    return bool(hedged.call(fs, url, "looking up", "exists", path))


@dataclasses.dataclass
class Listed:
    """What listing a remote source found.

    Attributes:
        entries: the files it names, as ``(full URL, path below the source)``.
        kind: ``"glob"``, ``"directory"`` or ``"file"`` (for error messages).
        infos: fsspec's ``info`` of every object the listing saw, by full URL: the files named,
            and those beside them (indexes, manifests), with no request of their own.
        complete: the folders (full URLs) whose every object is in ``infos``: a name in one of
            them that is not in ``infos`` does not exist.
    """

    entries: list[tuple[str, str]]
    kind: str
    infos: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    complete: set[str] = dataclasses.field(default_factory=set)


def expand(url: str, storage_options: StorageOptions = None) -> Listed:
    """The files a remote source names (see :class:`Listed`), in one listing where it can.

    A directory (or bucket prefix) stands for the files in it and below it, at any depth; a
    glob for its matches (the path below the glob's fixed prefix: a glob whose wildcards are in
    its last part alone lists that folder, so the files beside the matches come with it);
    anything else for itself, if it exists.
    """
    fs, path = filesystem(url, storage_options)
    if any(char in path for char in "*?["):
        folder, _, pattern = path.rpartition("/")
        complete: set[str] = set()
        if folder and not any(char in folder for char in "*?["):
            listed = _ls_or_empty(fs, url, folder)
            seen = {e["name"]: e for e in listed if e.get("type") != "directory"}
            found = {p: e for p, e in seen.items() if fnmatch.fnmatchcase(posixpath.basename(p), pattern)}
            complete.add(fs.unstrip_protocol(folder))
        else:
            globbed = hedged.call(fs, url, "listing", "glob", path, detail=True)
            seen = found = {p: e for p, e in globbed.items() if e.get("type") != "directory"}
        prefix = _fixed_prefix(path)
        entries = [(fs.unstrip_protocol(p), _below(p, prefix)) for p in found]
        infos = {fs.unstrip_protocol(p): e for p, e in seen.items()}
        return Listed(entries, "glob", infos, complete)
    info = _info_or_none(fs, url, path)
    if info is None:
        raise SourceNotFoundError(f"no such file or directory: {url!r}")
    if info.get("type") == "directory":
        found = hedged.call(fs, url, "listing", "find", path, detail=True)
        root = path.rstrip("/")
        files = {p: e for p, e in found.items() if e.get("type") != "directory"}
        entries = [(fs.unstrip_protocol(p), _below(p, root)) for p in files]
        infos = {fs.unstrip_protocol(p): e for p, e in files.items()}
        folders = {fs.unstrip_protocol(posixpath.dirname(p)) for p in files} | {fs.unstrip_protocol(root)}
        return Listed(entries, "directory", infos, folders)
    return Listed([(url, posixpath.basename(path))], "file", {url: info})


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


def _ls_or_empty(fs: Any, url: str, folder: str) -> list[dict[str, Any]]:
    try:
        return hedged.call(fs, url, "listing", "ls", folder, detail=True)  # type: ignore[no-any-return]
    except FileNotFoundError:  # no such folder: a glob in it matches nothing
        return []


def _info_or_none(fs: Any, url: str, path: str) -> dict[str, Any] | None:
    try:
        return hedged.call(fs, url, "looking up", "info", path)  # type: ignore[no-any-return]
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
    return hedged.fetch(fs, url, path, 0, end, f"reading bytes 0..{end}")


def read_bytes(url: str, storage_options: StorageOptions = None, limit: int | None = None) -> bytes:
    """The whole object at ``url`` (retried), in one request: asked for as the range from byte 0
    on (asked for whole, s3fs first looks up the object's size); an empty object, whose ranges S3
    refuses, is then asked for whole. With ``limit``, at most ``limit + 1`` bytes of it: the caller
    tells an object larger than ``limit`` by the length."""
    fs, path = filesystem(url, storage_options)
    end = None if limit is None else limit + 1
    try:
        return hedged.fetch(fs, url, path, 0, end, "reading")
    except FileNotFoundError:
        raise
    except (OSError, ValueError):
        if limit is not None and int(file_info(url, storage_options)["size"]) != 0:
            raise  # (not the empty object's refused range: a whole read could be anything)
        return hedged.fetch(fs, url, path, None, None, "reading")


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
