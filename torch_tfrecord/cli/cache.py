"""``torch-tfrecord cache ls|du|verify|clear|limit DIR``: look after a node-local cache of remote shards."""

from __future__ import annotations

import argparse
import os
import shutil
from typing import Any

from ..errors import SourceNotFoundError, TFRecordError
from ..records.reader import read_records
from ..records.remote.cache import CacheEntry, ShardCache
from ..records.remote.cache_dir import CacheDirectoryError
from ..support.text import plural
from .options import add_command

__all__ = ["add_cache_command"]

_NOT_RECORDS = ("#scanned-index", ".idx", ".cidx")


def add_cache_command(commands: Any) -> list[argparse.ArgumentParser]:
    """Adds ``cache`` and its actions to ``commands``; returns their parsers."""
    cache = add_command(
        commands,
        "cache",
        "list, measure, check or empty a cache of remote shards (a dataset's cache_dir)",
        "torch-tfrecord cache du /scratch/tfrecord-cache",
    )
    actions = cache.add_subparsers(dest="action", required=True)
    parsers = [cache]
    for name, help, run in (
        ("ls", "list the cached objects: state, bytes, URL and file name", _ls),
        ("du", "the bytes the cache takes, its entries and the disk's free space", _du),
        ("verify", "check every complete copy: its size, and the CRCs of its records", _verify),
        ("clear", "remove every entry that no process is downloading", _clear),
        ("limit", "show the directory's one limit, or record a new one", _limit),
    ):
        example = f"torch-tfrecord cache {name} /scratch/tfrecord-cache" + (
            " 50GB" if name == "limit" else ""
        )
        parser = add_command(actions, name, help, example)
        parser.add_argument("dir", help="the cache directory")
        if name == "verify":
            parser.add_argument("--remove", action="store_true", help="remove the damaged copies")
        if name == "limit":
            parser.add_argument(
                "size", nargs="?", help="the new limit (50GB, 1.5GiB, 4096 or 'free': the disk's free space)"
            )
        parser.set_defaults(run=run)
        parsers.append(parser)
    return parsers


def _open(args: argparse.Namespace, *, write: bool = False) -> ShardCache:
    if not os.path.isdir(os.path.join(args.dir, "locks")):
        raise SourceNotFoundError(f"no cache of remote shards in {args.dir!r}")
    cache = ShardCache(args.dir)  # (which removes what dead processes left)
    if write and cache.disabled is not None:
        raise CacheDirectoryError(f"cannot change the cache in {args.dir!r}: {cache.disabled}")
    return cache


def _notes(cache: ShardCache) -> None:
    """What the listing leaves out: metadata that does not read, files of the first layout."""
    for path in cache.unreadable():
        print(f"unreadable  {path} (not an entry: malformed, a link or another user's)")
    old = cache.old_layout_files()
    if old:
        size = sum(os.lstat(path).st_size for path in old)
        print(
            f"{plural(len(old), 'file')} ({size:,} bytes) of the first cache layout, ignored: "
            "`cache clear` removes them"
        )


def _ls(args: argparse.Namespace) -> int:
    cache = _open(args)
    for entry in cache.entries():
        state = "complete" if entry.complete else "partial"
        print(f"{state:8}  {entry.size:>14,}  {entry.url}  {entry.key}")
    _notes(cache)
    return 0


def _du(args: argparse.Namespace) -> int:
    cache = _open(args)
    entries = cache.entries()
    complete = [entry for entry in entries if entry.complete]
    free = shutil.disk_usage(cache.root).free
    print(
        f"{sum(e.size for e in entries):,} bytes in {plural(len(entries), 'entry', 'entries')} "
        f"({len(complete)} complete); {free:,} bytes free on its disk"
    )
    _notes(cache)
    return 0


def _damage(entry: CacheEntry) -> str | None:
    """What is wrong with a complete copy, if anything."""
    size = os.lstat(entry.path).st_size
    if size != entry.size:
        return f"{size:,} bytes, but the object has {entry.size:,}"
    if entry.url.endswith(_NOT_RECORDS):
        return None
    try:
        for _ in read_records(entry.path, verify_crc=True):
            pass
    except TFRecordError as error:
        return str(error)
    return None


def _verify(args: argparse.Namespace) -> int:
    cache = _open(args, write=args.remove)
    damaged = 0
    for entry in cache.entries():
        if not entry.complete:
            continue
        problem = _damage(entry)
        if problem is None:
            continue
        damaged += 1
        print(f"damaged: {entry.path} (copy of {entry.url}): {problem}")
        if args.remove:
            cache.discard(entry.key)
    complete = sum(entry.complete for entry in cache.entries())
    print(f"{plural(damaged, 'damaged copy', 'damaged copies')}; {complete} complete")
    return 1 if damaged else 0


def _clear(args: argparse.Namespace) -> int:
    removed = _open(args, write=True).clear()
    print(f"removed {plural(removed, 'entry', 'entries')}")
    return 0


def _limit(args: argparse.Namespace) -> int:
    cache = _open(args, write=args.size is not None)
    if args.size is not None:
        cache.set_limit(None if args.size == "free" else args.size)
    limit = "the disk's free space, less a margin" if cache.limit is None else f"{cache.limit:,} bytes"
    print(f"limit of {cache.root}: {limit}")
    return 0
