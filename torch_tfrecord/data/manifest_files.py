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

import dataclasses
import logging
import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import IndexFormatError, StaleIndexError
from ..records.compressed.index import CompressedIndex, decode_compressed_index, is_compressed_index
from ..records.index import check_table, decode_index, max_index_bytes, read_index_bytes
from ..records.io import PathLike, SourceListing, StorageOptions, is_url, local_path
from ..records.manifest import MANIFEST_SUFFIX, Manifest, is_manifest, read_manifest, read_tables, stale_shard
from ..records.remote import for_each_path
from ..records.remote.cache import ShardCache
from ..records.remote.cached import read_through
from ..records.sources import ShardKind, ShardSpec
from .shard_tables import TableLoader

__all__ = ["LISTED_CHECK_SHARDS", "ManifestFiles", "find_manifest", "manifest_covering", "manifest_files"]

logger = logging.getLogger(__name__)

# A named remote manifest of at most this many shards, all in its own folder, is checked against
# one listing of that folder (a request per 1,000 objects on S3 and GCS) when a dataset is built,
# instead of one lookup per shard when each is first opened; larger ones keep the O(1) start.
LISTED_CHECK_SHARDS = 10_000


@dataclasses.dataclass
class ManifestFiles:
    """What a manifest gives a dataset: its shards' paths, specs, record counts and tables (or
    loaders of them), and the spec it saved."""

    manifest: Manifest
    paths: list[str]
    specs: list[ShardSpec]
    counts: list[int]
    tables: list[npt.NDArray[np.int64] | CompressedIndex | TableLoader]
    spec: dict[str, Any] | None


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
        if sorted(manifest.shard_paths()) == listing.paths:
            _check_against_listing(manifest, listing)
            logger.info("read the shards' sizes and counts from %r", candidate)
            return manifest
    return None


def manifest_covering(paths: Sequence[str], storage_options: StorageOptions) -> Manifest | None:
    """A manifest in the folder of ``paths`` that lists every one of them (for a TFDS directory,
    whose shards ``tfrecord-index manifest`` described); None where there is none (one listing)."""
    import glob as local_glob

    from ..records import remote

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
        if wanted <= set(manifest.shard_paths()):
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
    from ..records.remote.cached import file_version

    for path, shard in zip(manifest.shard_paths(), manifest.shards, strict=True):
        info = listing.info(path)
        if info is None:
            continue
        if int(info["size"]) != shard.size:
            raise stale_shard(manifest.location, path, f"{info['size']} bytes, not {shard.size}")
        version = file_version(info)
        if shard.version and version and version != shard.version:
            raise stale_shard(manifest.location, path, f"version {version!r}, not {shard.version!r}")


def manifest_files(
    manifest: Manifest,
    storage_options: StorageOptions,
    cache: ShardCache | None,
    listing: SourceListing | None = None,
) -> ManifestFiles:
    """The shards of ``manifest``: specs and counts from it (local sizes checked now), tables from its
    zipped tables, else fetched when each shard is first read (a compressed shard's index now).

    Raises:
        StaleIndexError: a local shard's size differs from the manifest's.
        SourceNotFoundError: a local shard is gone (moved since the manifest was written).
    """
    paths = manifest.shard_paths()
    if listing is None:
        listing = _listing_beside(manifest, storage_options)
    for path, shard in zip(paths, manifest.shards, strict=True):
        if not is_url(path):
            try:
                size = os.stat(local_path(path)).st_size
            except FileNotFoundError:
                from ..errors import SourceNotFoundError

                raise SourceNotFoundError(
                    f"{path!r}, a shard of manifest {manifest.location!r}, does not exist (moved?)"
                ) from None
            if size != shard.size:
                raise stale_shard(manifest.location, path, f"{size} bytes, not {shard.size}")
    compressed_at = [i for i, shard in enumerate(manifest.shards) if shard.compression]
    compressed = dict(
        zip(
            compressed_at,
            for_each_path(
                lambda p: _load(manifest, paths.index(p), storage_options, cache),
                [paths[i] for i in compressed_at],
            ),
            strict=True,
        )
    )
    read = read_tables(manifest, storage_options)
    tables: list[Any] = list(read) if read is not None else [None] * len(paths)
    specs = []
    for i, (path, shard) in enumerate(zip(paths, manifest.shards, strict=True)):
        kind: ShardKind = "local" if not is_url(path) else "cached" if cache is not None else "remote"
        index = compressed.get(i)
        if isinstance(index, CompressedIndex):
            tables[i] = index
            size = index.uncompressed_size
        else:
            size = shard.size
            if tables[i] is None:
                tables[i] = _loader(manifest, i, storage_options, cache)
        inflated = index if isinstance(index, CompressedIndex) else None
        vouched = listing is not None and listing.info(path) is not None  # (checked against the listing)
        described = "" if vouched else manifest.location
        specs.append(ShardSpec(path, size, kind, shard.version, shard.size, inflated, described))
    counts = [shard.records for shard in manifest.shards]
    return ManifestFiles(manifest, paths, specs, counts, tables, manifest.spec)


def _listing_beside(manifest: Manifest, storage_options: StorageOptions) -> SourceListing | None:
    """One listing of a named remote manifest's folder, its shards checked against it (see
    :data:`LISTED_CHECK_SHARDS`); None where that does not apply or the folder cannot be listed.

    Raises:
        StaleIndexError: a shard's size or version differs from the manifest's.
        SourceNotFoundError: a shard is not in its folder (moved since the manifest was written).
    """
    from ..errors import SourceNotFoundError
    from ..records import remote

    paths = manifest.shard_paths()
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


def _loader(manifest: Manifest, shard: int, options: StorageOptions, cache: ShardCache | None) -> TableLoader:
    def load() -> npt.NDArray[np.int64]:
        found = _load(manifest, shard, options, cache)
        assert not isinstance(found, CompressedIndex)
        return found

    return load


def _load(
    manifest: Manifest, shard: int, options: StorageOptions, cache: ShardCache | None
) -> npt.NDArray[np.int64] | CompressedIndex:
    """Shard ``shard``'s index, checked against what the manifest says of the shard."""
    entry = manifest.shards[shard]
    path = manifest.shard_paths()[shard]
    index_path = manifest.index_path(shard)
    if index_path is None:  # no index: the shard scanned once
        from ..records.compressed.inflate import build_compressed_index
        from ..records.index import build_index

        if entry.compression:
            found = build_compressed_index(path, storage_options=options)
            if len(found.table) != entry.records:
                raise stale_shard(manifest.location, path, f"{len(found.table)} records, not {entry.records}")
            return found
        table = build_index(path, storage_options=options)
        where = f"the scan of {path!r}"
    else:
        limit = max_index_bytes(entry.size)  # (what an honest index of the shard can hold)
        data = (
            read_through(cache, index_path, options, limit=limit)
            if cache is not None and is_url(index_path)
            else read_index_bytes(index_path, options, limit)
        )
        if is_compressed_index(data):
            found = decode_compressed_index(data, index_path, data_size=entry.size, data_path=path)
            if found.compressed_size != entry.size or len(found.table) != entry.records:
                raise stale_shard(manifest.location, path, f"its index {index_path!r} is of another file")
            return found
        table = decode_index(data, index_path)
        where = f"index {index_path!r}"
    if len(table) != entry.records:
        raise stale_shard(manifest.location, path, f"{where} has {len(table)} records, not {entry.records}")
    try:
        check_table(
            table, entry.size, f"{where} does not describe {path!r} as manifest {manifest.location!r} does"
        )
    except StaleIndexError as error:
        raise stale_shard(manifest.location, path, str(error)) from None
    return table
