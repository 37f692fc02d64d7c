"""A dataset's shards from its manifest (:mod:`torch_tfrecord.records.manifest`): named as a source
(``"gs://bucket/train.manifest.json"``) or found beside the shards a glob or folder names.

With one, a dataset starts with O(1) requests: the shards' sizes, versions and record counts come
from the manifest, their index tables from the zipped tables beside it or, per shard, when the
shard is first read. What the manifest says is checked where it can be: a local shard's size at
once, a remote one's size and version against one listing of the manifest's folder when the
dataset is built (a manifest of at most :data:`LISTED_CHECK_SHARDS` shards, all beside it, on a
store that lists folders: not a plain HTTP server), else when the shard is first opened (a lookup
each), each table against its shard.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ...errors import IndexFormatError, StaleIndexError, StaleShardError
from ..compressed.index import CompressedIndex
from ..index import check_table
from ..io import PathLike, StorageOptions, is_url, local_path
from ..listing import SourceListing
from ..manifest import MANIFEST_SUFFIX, Manifest, is_manifest, read_manifest, read_tables
from ..remote import for_each_path
from ..remote.cache import ShardCache
from ..shard_access import ShardSpec, shard_kind
from .index import read_shard_index
from .index_files import IndexFiles
from .shard_set import ShardSet

__all__ = ["LISTED_CHECK_SHARDS", "find_manifest", "manifest_covering", "manifest_shards"]

logger = logging.getLogger(__name__)

# A named remote manifest of at most this many shards, all in its own folder, is checked against
# one listing of that folder (a request per 1,000 objects on S3 and GCS) when a dataset is built,
# instead of one lookup per shard when each is first opened; larger ones keep the O(1) start.
LISTED_CHECK_SHARDS = 10_000


def find_manifest(
    sources: PathLike | Sequence[PathLike], listing: SourceListing | None, storage_options: StorageOptions
) -> Manifest | None:
    """The manifest ``sources`` name, or the one beside the shards they name (every shard it lists
    and no other); None where there is none.

    Raises:
        IndexFormatError: a manifest named as a source that is not one; StaleIndexError: one
            found beside the shards whose sizes disagree with a listing's.
    """
    items = [sources] if isinstance(sources, str | os.PathLike) else list(sources)
    named = [os.fspath(item) for item in items if is_manifest(os.fspath(item))]
    if named:
        if len(named) != len(items) or len(named) > 1:
            raise ValueError(
                f"a manifest ({named[0]!r}) names a whole dataset: give it alone, not with other sources"
            )
        return read_manifest(named[0], storage_options)
    if listing is None or not listing.paths:
        return None
    for candidate, manifest in _readable(_candidates(listing), storage_options):
        if sorted(manifest.paths) == listing.paths:
            _check_against_listing(manifest, listing)
            logger.info("read the shards' sizes and counts from %r", candidate)
            return manifest
    return None


def manifest_covering(paths: Sequence[str], storage_options: StorageOptions) -> Manifest | None:
    """A manifest in the folder of ``paths`` that lists every one of them (for a TFDS directory,
    whose shards ``tfrecord-index manifest`` described); None where there is none (one listing)."""
    import glob as local_glob

    from .. import remote

    if not paths:
        return None
    first = paths[0]
    folder = first.rsplit("/", 1)[0] if is_url(first) else os.path.dirname(local_path(first))
    if is_url(first):
        found = [url for url, _ in remote.expand(f"{folder}/*{MANIFEST_SUFFIX}", storage_options).entries]
    else:
        found = local_glob.glob(os.path.join(local_glob.escape(folder), "*" + MANIFEST_SUFFIX))
    wanted = set(paths)
    for _, manifest in _readable(sorted(found), storage_options):
        if wanted <= set(manifest.paths):
            return manifest
    return None


def _readable(candidates: Sequence[str], storage_options: StorageOptions) -> Iterator[tuple[str, Manifest]]:
    """Each candidate that reads as a manifest, with it; the others named in an INFO line."""
    for candidate in candidates:
        try:
            yield candidate, read_manifest(candidate, storage_options)
        except (OSError, IndexFormatError) as error:
            logger.info("%r beside the shards is not used: %s", candidate, error)


def _candidates(listing: SourceListing) -> list[str]:
    """Manifests beside the shards whose name is a prefix of every shard's name."""
    names = {path.rsplit("/", 1)[-1] if is_url(path) else os.path.basename(path) for path in listing.paths}
    if any(is_url(path) for path in listing.paths):
        seen = [url for url in listing.infos if url.endswith(MANIFEST_SUFFIX)]
    else:
        folders = {os.path.dirname(local_path(path)) for path in listing.paths}
        seen = [
            os.path.join(folder, entry)
            for folder in folders
            for entry in sorted(os.listdir(folder or "."))
            if entry.endswith(MANIFEST_SUFFIX)
        ]
    stem = len(MANIFEST_SUFFIX)
    return [
        url
        for url in sorted(seen)
        if all(name.startswith(url.rsplit("/", 1)[-1].rsplit(os.sep, 1)[-1][:-stem]) for name in names)
    ]


def _check_against_listing(manifest: Manifest, listing: SourceListing) -> None:
    """Checks each shard's size and version against what the listing saw (no request): a shard the
    listing vouches for is not looked up again when it is first read."""
    from ..remote.cached import file_version

    for path, shard in zip(manifest.paths, manifest.shards, strict=True):
        info = listing.info(path)
        if info is None:
            continue
        if int(info["size"]) != shard.size:
            raise StaleShardError(manifest.location, path, f"{info['size']} bytes, not {shard.size}")
        version = file_version(info)
        if shard.version and version and version != shard.version:
            raise StaleShardError(manifest.location, path, f"version {version!r}, not {shard.version!r}")


def manifest_shards(
    manifest: Manifest,
    storage_options: StorageOptions,
    cache: ShardCache | None,
    files: IndexFiles,
    listing: SourceListing | None = None,
) -> ShardSet:
    """The shards of ``manifest``: specs and counts from it (local sizes checked now), tables from its
    zipped tables, else fetched when each shard is first read (a compressed shard's index now).

    Raises:
        StaleIndexError: a local shard's size differs from the manifest's.
        SourceNotFoundError: a local shard is gone (moved since the manifest was written).
    """
    paths = manifest.paths
    if listing is None:
        listing = _listing_beside(manifest, storage_options)
    for path, shard in zip(paths, manifest.shards, strict=True):
        if not is_url(path):
            try:
                size = os.stat(local_path(path)).st_size
            except FileNotFoundError:
                from ...errors import SourceNotFoundError

                raise SourceNotFoundError(
                    f"{path!r}, a shard of manifest {manifest.location!r}, does not exist (moved?)"
                ) from None
            if size != shard.size:
                raise StaleShardError(manifest.location, path, f"{size} bytes, not {shard.size}")
    compressed_at = [i for i, shard in enumerate(manifest.shards) if shard.compression]
    compressed = dict(
        zip(
            compressed_at,
            for_each_path(
                lambda p: _load(manifest, paths.index(p), storage_options, files),
                [paths[i] for i in compressed_at],
            ),
            strict=True,
        )
    )
    read = read_tables(manifest, storage_options)
    tables: list[Any] = list(read) if read is not None else [None] * len(paths)
    specs = []
    for i, (path, shard) in enumerate(zip(paths, manifest.shards, strict=True)):
        kind = shard_kind(path, cache)
        index = compressed.get(i)
        if isinstance(index, CompressedIndex):
            tables[i] = index
            size = index.uncompressed_size
        else:
            size = shard.size
            if tables[i] is None:
                tables[i] = functools.partial(_load_table, manifest, i, storage_options, files)
        inflated = index if isinstance(index, CompressedIndex) else None
        vouched = listing is not None and listing.info(path) is not None  # (checked against the listing)
        described = "" if vouched else manifest.location
        specs.append(ShardSpec(path, size, kind, shard.version, shard.size, inflated, described))
    counts = [shard.records for shard in manifest.shards]
    return ShardSet.of(paths, specs, tables, counts, storage_options, cache, manifest.spec)


def _listing_beside(manifest: Manifest, storage_options: StorageOptions) -> SourceListing | None:
    """One listing of a named remote manifest's folder, its shards checked against it (see
    :data:`LISTED_CHECK_SHARDS`); None where that does not apply or the folder cannot be listed.

    Raises:
        StaleIndexError: a shard's size or version differs from the manifest's.
        SourceNotFoundError: a shard is not in its folder (moved since the manifest was written).
    """
    from ...errors import SourceNotFoundError
    from .. import remote

    paths = manifest.paths
    folder = manifest.location.rsplit("/", 1)[0]
    if not is_url(manifest.location) or not paths or len(paths) > LISTED_CHECK_SHARDS:
        return None
    if any(path.rsplit("/", 1)[0] != folder for path in paths):
        return None
    fs, _ = remote.filesystem(folder, storage_options)
    protocols = fs.protocol if isinstance(fs.protocol, tuple | list) else (fs.protocol,)
    if {"http", "https"} & set(protocols):
        # A web server has no listing of a folder (at most a page of links, or a 404 that would
        # read as an empty folder): each shard is checked when opened.
        return None
    try:
        listed = remote.expand(f"{folder}/*", storage_options)
    except (OSError, ValueError, NotImplementedError) as error:
        logger.info("the folder of %r was not listed (each shard is checked when opened): %s", folder, error)
        return None

    def listed_as(url: str) -> str:  # (a listing spells a URL its file system's way)
        return fs.unstrip_protocol(fs._strip_protocol(url))  # type: ignore[no-any-return]

    infos = {path: listed.infos[listed_as(path)] for path in paths if listed_as(path) in listed.infos}
    if listed_as(folder) in listed.complete:
        for path in paths:
            if path not in infos:
                raise SourceNotFoundError(
                    f"{path!r}, a shard of manifest {manifest.location!r}, does not exist (moved?)"
                )
    listing = SourceListing(sorted(paths), infos)
    _check_against_listing(manifest, listing)
    return listing


def _load(
    manifest: Manifest, shard: int, options: StorageOptions, files: IndexFiles
) -> npt.NDArray[np.int64] | CompressedIndex:
    """Shard ``shard``'s index, checked against what the manifest says of the shard."""
    entry = manifest.shards[shard]
    path = manifest.paths[shard]
    index_path = manifest.index_paths[shard]
    if index_path is None:  # no index: the shard scanned once
        found = files.scan(path, "raise", compressed=bool(entry.compression))
        if isinstance(found, CompressedIndex):
            if len(found.table) != entry.records:
                what = f"{len(found.table)} records, not {entry.records}"
                raise StaleShardError(manifest.location, path, what)
            return found
        table, where = found, f"the scan of {path!r}"
    else:
        read = read_shard_index(index_path, path, entry.size, files)
        if isinstance(read, CompressedIndex):
            if read.compressed_size != entry.size or len(read.table) != entry.records:
                raise StaleShardError(manifest.location, path, f"its index {index_path!r} is of another file")
            return read
        table, where = read, f"index {index_path!r}"
    if len(table) != entry.records:
        what = f"{where} has {len(table)} records, not {entry.records}"
        raise StaleShardError(manifest.location, path, what)
    try:
        check_table(
            table, entry.size, f"{where} does not describe {path!r} as manifest {manifest.location!r} does"
        )
    except StaleIndexError as error:
        raise StaleShardError(manifest.location, path, str(error)) from None
    return table


def _load_table(
    manifest: Manifest, shard: int, options: StorageOptions, files: IndexFiles
) -> npt.NDArray[np.int64]:
    """A plain shard's table, loaded when the shard is first read."""
    found = _load(manifest, shard, options, files)
    assert not isinstance(found, CompressedIndex)
    return found
