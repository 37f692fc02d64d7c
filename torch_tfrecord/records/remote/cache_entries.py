"""What a cache directory's small files say, read as untrusted input: the entries' metadata, the
readers' hints, the directory's limit (``cache.json``); sizes and keys. Pure, but for
:func:`read_limit` and :func:`write_limit`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from dataclasses import dataclass
from typing import Any

from ...errors import TFRecordError
from .cache_dir import Access, read_small, regular_file, write_atomically
from .eviction import ShardUses

__all__ = [
    "CacheEntry",
    "CacheLimitError",
    "cache_key",
    "decode_limit",
    "entry_meta",
    "limit_conflict",
    "old_layout_files",
    "parse_size",
    "read_limit",
    "read_schedule",
    "read_schedules",
    "reserved_bytes",
    "write_limit",
]

_UNITS = {"": 1, "b": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_SIZE = re.compile(r"\s*([0-9]{1,30}(?:\.[0-9]{1,30})?|\.[0-9]{1,30})\s*([kmgt]?)(i?)b?\s*", re.IGNORECASE)
_FORMAT, _LAYOUT = "torch-tfrecord-cache", 2
META_BYTES = 1 << 16
"""The most bytes read of one small file of the cache (an entry's metadata, ``cache.json``)."""
_HINTS_BYTES = 64 << 20  # of one reader's hints
_OLD_LAYOUT = re.compile(r"[0-9a-f]{16}-")


def parse_size(size: int | str) -> int:
    """Bytes of ``size``: an int, or a string like ``"50GB"``, ``"1.5 GiB"``, ``"200M"``.

    Raises:
        ValueError: not a size, or a negative one.
    """
    if isinstance(size, int):
        value = size
    else:
        match = _SIZE.fullmatch(size) if len(size) <= 80 else None
        if match is None:
            raise ValueError(f"{size[:80]!r} is not a size in bytes (e.g. 50GB, 1.5GiB, 200M or 4096)")
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


class CacheLimitError(TFRecordError, ValueError):
    """A job asked for another limit than the one recorded in the cache directory."""


def limit_conflict(root: str, recorded: int | None, limit: int) -> CacheLimitError:
    """The error for a job that names another limit than the one the directory ``root`` recorded."""
    return CacheLimitError(
        f"the cache directory {root!r} has a limit of {recorded or 0:,} bytes (recorded in its "
        f"cache.json by the first job that named one); this job asks for {limit:,}. A "
        "directory has one limit, or jobs would evict each other's shards forever: give "
        f"the same cache_limit, or none (the recorded one), or change it with "
        f"`torch-tfrecord cache limit {root} {limit}`"
    )


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


def entry_meta(data: bytes | None) -> dict[str, Any] | None:
    """An entry's metadata, checked: ``{"url": str, "size": int >= 0, "version": str}``, or None."""
    if data is None:
        return None
    try:
        meta = json.loads(data)
    except (ValueError, RecursionError):
        return None
    if not isinstance(meta, dict):
        return None
    url, size, version = meta.get("url"), meta.get("size"), meta.get("version")
    if not isinstance(url, str) or not isinstance(version, str):
        return None
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        return None
    return meta


def reserved_bytes(root: str, access: Access, skip: str = "") -> int:
    """The bytes the entries of the cache at ``root`` take or have reserved (but ``skip``'s): a
    complete copy's by its size (one ``lstat``), a download under way's from its metadata. What
    the entries' sizes add up to, without reading every entry's metadata: a reservation costs
    O(entries) stats, not O(entries) files read (quadratic in the shards a node caches)."""
    total, copies = 0, set()
    with os.scandir(os.path.join(root, "copies")) as found:
        for entry in found:
            if entry.name.startswith(".") or entry.name == skip:
                continue
            try:
                info = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if stat.S_ISREG(info.st_mode) and access.trusts(info):
                total += info.st_size
                copies.add(entry.name)
    for name in os.listdir(os.path.join(root, "meta")):
        key = name[: -len(".json")]
        if name.endswith(".json") and not name.startswith(".") and key != skip and key not in copies:
            meta = entry_meta(read_small(os.path.join(root, "meta", name), META_BYTES, access))
            total += 0 if meta is None else meta["size"]
    return total


def read_schedule(data: bytes | None) -> ShardUses | None:
    """A reader's hints, checked: ``{key: [[first, last], ...]}`` of numbers, or None."""
    try:
        hints = json.loads(data) if data is not None else None
        if not isinstance(hints, dict):
            return None
        return {str(k): [(float(a), float(b)) for a, b in v] for k, v in hints.items()}
    except (ValueError, TypeError, RecursionError):
        return None


def decode_limit(data: bytes | None) -> tuple[bool, int | None]:
    """``(whether cache.json reads, the limit it records)``."""
    try:
        config = json.loads(data) if data is not None else None
    except (ValueError, RecursionError):
        return False, None
    if not isinstance(config, dict) or config.get("format") != _FORMAT:
        return False, None
    limit = config.get("limit")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 0):
        return False, None
    return True, limit


def read_limit(root: str, access: Access) -> tuple[bool, int | None]:
    """``(whether the directory records a limit, the limit: None for the disk's free space)``."""
    return decode_limit(read_small(os.path.join(root, "cache.json"), META_BYTES, access))


def write_limit(root: str, limit: int | None, access: Access) -> None:
    """Records the directory's limit (and layout) in its ``cache.json``."""
    document = {"format": _FORMAT, "layout": _LAYOUT, "limit": limit}
    write_atomically(os.path.join(root, "cache.json"), json.dumps(document).encode(), access)


def read_schedules(hints: str, access: Access) -> list[ShardUses]:
    """The hints of every reader in the directory ``hints`` (those that do not read left out)."""
    found: list[ShardUses] = []
    for name in os.listdir(hints):
        if name.endswith(".json") and not name.startswith("."):
            schedule = read_schedule(read_small(os.path.join(hints, name), _HINTS_BYTES, access))
            if schedule is not None:
                found.append(schedule)
    return found


def old_layout_files(root: str, access: Access) -> list[str]:
    """The files of the first layout (every entry's files at the top of ``root``)."""
    return sorted(
        os.path.join(root, name)
        for name in os.listdir(root)
        if _OLD_LAYOUT.match(name) and regular_file(os.path.join(root, name), access)
    )
