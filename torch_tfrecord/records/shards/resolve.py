"""A dataset's shards resolved from the user's sources, once: the one way from ``sources`` to a
:class:`~torch_tfrecord.records.shards.shard_set.ShardSet`.

The sources are listed once (paths, globs, directories, URLs; sorted) and a manifest is looked for
once: named as the source, or beside the listed shards (:mod:`.manifest_shards`, where every check
of a shard against its manifest lives). With a manifest, the shards' specs, counts and tables come
from it; without, each shard's index is found or built (:mod:`.index`) and its spec looked up
(:func:`~torch_tfrecord.records.shard_access.shard_specs`). Used by the datasets, TFDS loading,
selections' scans, Ray, Spark and Beam.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Literal

from ..compressed.index import CompressedIndex
from ..io import PathLike, StorageOptions, is_url
from ..listing import SourceListing, list_sources
from ..manifest import Manifest, is_manifest
from ..reader import OnError
from ..remote import for_each_path
from ..remote.cache import ShardCache
from ..shard_access import shard_specs
from .index import IndexArg, ShardIndex, resolve_index
from .index_files import index_files
from .manifest_shards import find_manifest, manifest_covering, manifest_shards
from .shard_set import ShardSet

__all__ = [
    "CacheDir",
    "Listed",
    "check_sources",
    "list_shards",
    "make_cache",
    "resolve_paths",
    "resolve_shards",
    "shards_of_tables",
]

CacheDir = str | os.PathLike[str] | None | Literal[False]
"""Where remote shards are cached: a directory (shared by every process that names it, kept),
None (a temporary directory, removed when the process that made it exits), or False (no cache)."""


def check_sources(sources: object) -> None:
    """Refuses an empty list of sources: a dataset of 0 files is a mistake, not an empty epoch."""
    if isinstance(sources, (str, bytes, os.PathLike)):
        return
    if isinstance(sources, Sequence) and len(sources) == 0:
        raise ValueError(
            f"sources={sources!r} is empty: give at least one file, glob, directory or URL "
            "(a glob that matches nothing is an error of its own)"
        )


def make_cache(paths: Sequence[str], cache_dir: CacheDir, cache_limit: int | str | None) -> ShardCache | None:
    """The cache of ``paths``' remote files: None when none is remote or ``cache_dir`` is False."""
    if cache_dir is False or not any(is_url(path) for path in paths):
        return None
    return ShardCache(cache_dir, cache_limit)


@dataclasses.dataclass(frozen=True)
class Listed:
    """The user's sources, listed once: the listing (None for a named manifest) and the manifest
    that describes the listed shards (None where there is none, or where indexes were given)."""

    listing: SourceListing | None
    manifest: Manifest | None


def list_shards(
    sources: PathLike | Sequence[PathLike], index: IndexArg, storage_options: StorageOptions
) -> Listed:
    """Lists ``sources`` and finds their manifest (one listing, one manifest read).

    Raises:
        ValueError: ``sources`` is an empty list, or names a manifest together with ``index``.
    """
    check_sources(sources)
    named = isinstance(sources, str | os.PathLike) and is_manifest(os.fspath(sources))
    if named and index is not None:
        raise ValueError(f"{sources!r} is a manifest: give index=None to read it")
    listing = None if named else list_sources(sources, storage_options)
    manifest = None if index is not None else find_manifest(sources, listing, storage_options)
    return Listed(listing, manifest)


def resolve_shards(
    sources: PathLike | Sequence[PathLike],
    *,
    index: IndexArg = None,
    storage_options: StorageOptions = None,
    on_error: OnError = "raise",
    cache_dir: CacheDir = None,
    cache_limit: int | str | None = None,
    listed: Listed | None = None,
) -> ShardSet:
    """The shards of ``sources`` (paths / globs / directories / URLs, sorted; or a manifest), with
    every shard's index resolved (``on_error``: see :func:`~.index.resolve_index`); remote shards
    are cached in ``cache_dir`` (see :data:`CacheDir`), at most ``cache_limit`` bytes.

    Args:
        listed: what :func:`list_shards` found of ``sources`` (listed now when None).

    Raises:
        ValueError: ``sources`` is an empty list.
    """
    if listed is None:
        listed = list_shards(sources, index, storage_options)
    manifest, listing = listed.manifest, listed.listing
    paths = manifest.paths if manifest is not None else listing.paths  # type: ignore[union-attr]
    cache = make_cache(paths, cache_dir, cache_limit)
    files = index_files(storage_options, cache)  # (one per dataset)
    if manifest is not None:
        return manifest_shards(manifest, storage_options, cache, files, listing)
    indexes = for_each_path(
        lambda path: resolve_index(path, index, storage_options, on_error, listing=listing, files=files),
        paths,
    )
    return _with_specs(paths, indexes, storage_options, cache, listing)


def resolve_paths(
    paths: Sequence[str],
    *,
    index: IndexArg,
    storage_options: StorageOptions,
    cache_dir: CacheDir = None,
    cache_limit: int | str | None = None,
) -> ShardSet:
    """The shards at ``paths`` exactly (no listing: a TFDS split's files, known by name), from a
    manifest in their folder that lists them all where there is one and ``index`` is None, else
    each shard's index resolved."""
    cache = make_cache(paths, cache_dir, cache_limit)
    manifest = manifest_covering(paths, storage_options) if index is None else None
    if manifest is not None:  # (written by `tfrecord-index manifest`): no shard read to start
        described = manifest_shards(manifest, storage_options, cache, index_files(storage_options, cache))
        at = {path: number for number, path in enumerate(described.paths)}
        return described.pick([at[path] for path in paths])
    indexes = [resolve_index(path, index, storage_options, "raise", cache) for path in paths]
    return _with_specs(paths, indexes, storage_options, cache)


def shards_of_tables(
    paths: Sequence[str],
    tables: Sequence[ShardIndex],
    storage_options: StorageOptions = None,
    cache: ShardCache | None = None,
) -> ShardSet:
    """The shards at ``paths`` with index tables already known (a range of records planned
    elsewhere: Ray, Spark, Beam); each shard's spec looked up (one request per remote shard)."""
    return _with_specs(paths, tables, storage_options, cache)


def _with_specs(
    paths: Sequence[str],
    indexes: Sequence[ShardIndex],
    storage_options: StorageOptions,
    cache: ShardCache | None,
    listing: SourceListing | None = None,
) -> ShardSet:
    compressed = [table if isinstance(table, CompressedIndex) else None for table in indexes]
    specs = shard_specs(paths, compressed, storage_options, cache, listing)
    return ShardSet.of(paths, specs, indexes, None, storage_options, cache)
