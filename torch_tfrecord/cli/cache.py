"""``torch-tfrecord cache ls|du|verify|clear DIR``: look after a node-local cache of remote shards."""

from __future__ import annotations

import argparse
import os
import shutil
from typing import Any

from ..errors import SourceNotFoundError, TFRecordError
from ..records.reader import read_records
from ..records.remote.cache import CacheEntry, ShardCache
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
    ):
        parser = add_command(actions, name, help, f"torch-tfrecord cache {name} /scratch/tfrecord-cache")
        parser.add_argument("dir", help="the cache directory")
        if name == "verify":
            parser.add_argument("--remove", action="store_true", help="remove the damaged copies")
        parser.set_defaults(run=run)
        parsers.append(parser)
    return parsers


def _open(args: argparse.Namespace) -> ShardCache:
    if not os.path.isdir(os.path.join(args.dir, "locks")):
        raise SourceNotFoundError(f"no cache of remote shards in {args.dir!r}")
    return ShardCache(args.dir)  # (which removes what dead processes left)


def _ls(args: argparse.Namespace) -> int:
    for entry in _open(args).entries():
        state = "complete" if entry.complete else "partial"
        print(f"{state:8}  {entry.size:>14,}  {entry.url}  {entry.key}")
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
    return 0


def _damage(entry: CacheEntry) -> str | None:
    """What is wrong with a complete copy, if anything."""
    size = os.path.getsize(entry.path)
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
    cache = _open(args)
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
    removed = _open(args).clear()
    print(f"removed {plural(removed, 'entry', 'entries')}")
    return 0
