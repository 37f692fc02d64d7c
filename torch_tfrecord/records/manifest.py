"""A dataset's manifest: one small file that says what its shards are, so a reader starts with O(1)
requests instead of several per shard.

``<prefix>.manifest.json`` sits beside the shards (every writer of ours leaves one; ``tfrecord-index
manifest`` makes one for data that exists) and lists each shard by its name (relative to the
manifest's folder), its size in bytes, its version (ETag or generation, where the store has one),
its record count and its index file. When a dataset's index tables are small (up to
:data:`TABLES_LIMIT` records in all), they sit beside it too, zipped in ``<prefix>.manifest.tables.npz``
(each record's framed size: offsets follow, records being back to back); otherwise a reader
fetches a shard's index when it first reads the shard. A saved spec can ride along.

A manifest is checked as it is read (its form, names that stay in its folder, counts that fit the
sizes) and trusted for nothing it cannot show: a shard whose size or version differs when it is
read is an error that names the shard and the manifest, never a misread.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import IndexFormatError, StaleShardError
from . import remote
from .atomic import atomic_write
from .io import StorageOptions, file_size, is_url, local_path
from .remote.cached import file_version

__all__ = [
    "FORMAT",
    "MANIFEST_SUFFIX",
    "TABLES_LIMIT",
    "Manifest",
    "ManifestShard",
    "decode_manifest",
    "encode_manifest",
    "is_manifest",
    "manifest_for",
    "read_manifest",
    "read_tables",
    "write_manifest",
    "write_shards_manifest",
]

FORMAT = "torch_tfrecord.manifest/1"
MANIFEST_SUFFIX = ".manifest.json"
_TABLES_SUFFIX = ".manifest.tables.npz"
TABLES_LIMIT = 1 << 22
"""Records a manifest's zipped tables hold at most (about 4 million: a few MB)."""
_MAX_SHARDS = 10_000_000  # a manifest that claims more is not one


@dataclasses.dataclass(frozen=True)
class ManifestShard:
    """One shard as its manifest says it is.

    Attributes:
        name: its path relative to the manifest's folder (``/``-separated, never leaving it).
        size: its size in bytes, as stored.
        records: its record count.
        version: its ETag or generation, where the store has one ("" otherwise).
        index: its index file, relative to the manifest's folder ("" for none).
        compression: ``"gzip"`` or ``"zlib"`` for a compressed shard ("" otherwise).
    """

    name: str
    size: int
    records: int
    version: str = ""
    index: str = ""
    compression: str = ""


@dataclasses.dataclass(frozen=True)
class Manifest:
    """A dataset's shards, read from (or to be written to) ``location``.

    Attributes:
        paths: each shard's path or URL (its name joined to the manifest's folder).
        index_paths: each shard's index file, joined likewise (None for none).
        tables_path: the zipped tables', joined likewise (None for none).
    """

    location: str
    shards: tuple[ManifestShard, ...]
    tables: str = ""
    spec: dict[str, Any] | None = None
    paths: tuple[str, ...] = dataclasses.field(init=False, repr=False, compare=False)
    index_paths: tuple[str | None, ...] = dataclasses.field(init=False, repr=False, compare=False)
    tables_path: str | None = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        url = is_url(self.location)
        folder = self.location.rsplit("/", 1)[0] if url else os.path.dirname(self.location)

        def join(name: str) -> str:
            return f"{folder}/{name}" if url else os.path.join(folder, *name.split("/"))

        object.__setattr__(self, "paths", tuple(join(shard.name) for shard in self.shards))
        indexes = tuple(join(shard.index) if shard.index else None for shard in self.shards)
        object.__setattr__(self, "index_paths", indexes)
        object.__setattr__(self, "tables_path", join(self.tables) if self.tables else None)


def is_manifest(path: str) -> bool:
    """Whether ``path`` names a manifest (by its suffix)."""
    return os.fspath(path).endswith(MANIFEST_SUFFIX)


def manifest_for(prefix: str) -> str:
    """The manifest of shards named ``{prefix}-00000-of-00012...``: ``{prefix}.manifest.json``."""
    return f"{prefix}{MANIFEST_SUFFIX}"


def encode_manifest(manifest: Manifest) -> bytes:
    """The manifest as JSON (one shard a line: a diff shows what changed)."""
    shards = [
        json.dumps({k: v for k, v in dataclasses.asdict(shard).items() if v != ""}, sort_keys=True)
        for shard in manifest.shards
    ]
    # Written member by member, in the order of their names (a placeholder for the shards,
    # replaced after json.dumps, also replaced that text inside a saved spec).
    members = [f'"format": {json.dumps(FORMAT)}', '"shards": [\n  ' + ",\n  ".join(shards) + "\n]"]
    if manifest.spec is not None:
        members.append(f'"spec": {json.dumps(manifest.spec, sort_keys=True)}')
    if manifest.tables:
        members.append(f'"tables": {json.dumps(manifest.tables)}')
    return ("{" + ", ".join(members) + "}\n").encode()


def _name(value: Any, where: str, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise IndexFormatError(f"{where}: {what} {value!r} is not a file name")
    parts = value.split("/")
    if value.startswith("/") or "\\" in value or ":" in parts[0] or any(p in ("", ".", "..") for p in parts):
        raise IndexFormatError(f"{where}: {what} {value!r} does not stay in the manifest's folder")
    return value


def _count(value: Any, where: str, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 1 << 62:
        raise IndexFormatError(f"{where}: {what} {value!r} is not a count")
    return value


def decode_manifest(data: bytes, location: str) -> Manifest:
    """A manifest read from ``location``, checked.

    Raises:
        IndexFormatError: not a manifest of this format, truncated, or with a shard that is
            malformed, repeated, leaves the manifest's folder, or holds more records than bytes allow.
    """
    where = f"manifest {location!r}"
    try:
        parsed = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        raise IndexFormatError(f"{where} is not JSON (truncated?): {error}") from None
    if not isinstance(parsed, dict) or parsed.get("format") != FORMAT:
        found = parsed.get("format") if isinstance(parsed, dict) else type(parsed).__name__
        raise IndexFormatError(
            f"{where} is not a torch_tfrecord manifest (format {found!r}, expected {FORMAT!r})"
        )
    entries = parsed.get("shards")
    if not isinstance(entries, list) or not entries or len(entries) > _MAX_SHARDS:
        raise IndexFormatError(f"{where} lists no shards")
    shards = []
    for number, entry in enumerate(entries):
        what = f"shard {number}"
        if not isinstance(entry, dict):
            raise IndexFormatError(f"{where}: {what} is not an object")
        shard = ManifestShard(
            _name(entry.get("name"), where, f"{what}'s name"),
            _count(entry.get("size"), where, f"{what}'s size"),
            _count(entry.get("records"), where, f"{what}'s record count"),
            str(entry.get("version", "")),
            _name(entry["index"], where, f"{what}'s index") if entry.get("index") else "",
            str(entry.get("compression", "")),
        )
        if shard.compression not in ("", "gzip", "zlib"):
            raise IndexFormatError(f"{where}: {what}'s compression {shard.compression!r} is not gzip or zlib")
        if (
            not shard.compression and shard.records * 16 > shard.size
        ):  # every framed record is at least 16 bytes
            raise IndexFormatError(f"{where}: {what} ({shard.name!r}) cannot hold {shard.records} records")
        shards.append(shard)
    if len({shard.name for shard in shards}) != len(shards):
        raise IndexFormatError(f"{where} names a shard twice")
    tables = _name(parsed["tables"], where, "tables") if parsed.get("tables") else ""
    spec = parsed.get("spec")
    if spec is not None and not isinstance(spec, dict):
        raise IndexFormatError(f"{where}: its spec is not an object")
    return Manifest(location, tuple(shards), tables, spec)


def read_manifest(location: str, storage_options: StorageOptions = None) -> Manifest:
    """The manifest at ``location`` (a path or URL), checked (see :func:`decode_manifest`)."""
    if is_url(location):
        data = remote.read_bytes(location, storage_options)
    else:
        with open(local_path(location), "rb") as handle:
            data = handle.read()
    return decode_manifest(data, location)


def read_tables(
    manifest: Manifest, storage_options: StorageOptions = None
) -> list[npt.NDArray[np.int64]] | None:
    """Each shard's ``(offset, framed_size)`` table from the manifest's zipped tables; None without them.

    Raises:
        IndexFormatError: the tables file is damaged or describes other shards.
    """
    path = manifest.tables_path
    if path is None:
        return None
    if is_url(path):
        data = remote.read_bytes(path, storage_options)
    else:
        with open(local_path(path), "rb") as handle:
            data = handle.read()
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as loaded:
            counts, sizes = loaded["counts"].astype(np.int64), loaded["sizes"].astype(np.int64)
    except (OSError, ValueError, KeyError) as error:
        raise IndexFormatError(f"manifest tables {path!r} are damaged: {error}") from None
    expected = np.array([shard.records for shard in manifest.shards], dtype=np.int64)
    if not np.array_equal(counts, expected) or len(sizes) != int(expected.sum()) or (sizes < 16).any():
        raise IndexFormatError(
            f"manifest tables {path!r} do not describe the shards of {manifest.location!r}"
        )
    tables = []
    for shard, part in zip(manifest.shards, np.split(sizes, np.cumsum(counts)[:-1]), strict=True):
        offsets = np.concatenate([[0], np.cumsum(part)[:-1]]).astype(np.int64)
        if len(part) and int(part.sum()) != shard.size:
            raise IndexFormatError(
                f"manifest tables {path!r}: {shard.name!r}'s records do not end at its size"
            )
        tables.append(np.stack([offsets, part]).T.copy() if len(part) else np.zeros((0, 2), np.int64))
    return tables


WHOLE_BYTES = 64 << 10
"""A remote shard of a manifest (read without the cache) of at most this many bytes, whose version
the manifest does not know, is fetched whole when opened, by one request that also says its size:
in place of a request to check it, then one for its records (neighbouring ranges this far apart
share a request anyway)."""


def check_remote_shard(
    manifest_location: str, path: str, size: int, version: str, file: remote.RemoteFile
) -> None:
    """Checks a remote shard against what its manifest says of it (``size``, ``version``), with one
    request through ``file`` (its reader, whose requests it counts): a small shard of unknown
    version is fetched whole by it (``file`` then serves its reads), any other looked up.

    Raises:
        StaleIndexError: its size or version differs: the data changed since the manifest was written.
    """
    if not version and 0 < size <= WHOLE_BYTES:
        got = file.read_whole()
        if got != size:
            now = f"{got} bytes" if got < size else f"more than {size} bytes"
            raise StaleShardError(manifest_location, path, f"{now}, not {size}")
        return
    if file.counter is not None:
        file.counter.add(1)
    info = remote.file_info(path, file.storage_options)
    found = file_version(info)
    if int(info["size"]) != size:
        raise StaleShardError(manifest_location, path, f"{info['size']} bytes, not {size}")
    if version and found and found != version:
        raise StaleShardError(manifest_location, path, f"version {found!r}, not {version!r}")


def write_manifest(
    location: str,
    shard_paths: Sequence[str],
    tables: Sequence[npt.NDArray[np.int64]],
    storage_options: StorageOptions = None,
    *,
    index_paths: Sequence[str | None] | None = None,
    spec: dict[str, Any] | None = None,
    versions: Sequence[str] | None = None,
    compression: str | None = None,
) -> Manifest:
    """Writes the manifest of ``shard_paths`` (all in ``location``'s folder or below it) at ``location``,
    with their tables zipped beside it when they are small; both appear whole or not at all.

    Args:
        location: the manifest's path or URL (``...manifest.json``).
        shard_paths: the shards, in record-id order.
        tables: each shard's ``(offset, framed_size)`` table (of its uncompressed stream).
        index_paths: each shard's index file (None: none, the default).
        spec: the spec (as ``spec.json`` holds it) to keep with the shards.
        versions: each shard's version; default: looked up where the store has them (one request each).
        compression: the shards' compression (``"gzip"``, ``"zlib"``), None for none.
    """
    folder = location.rsplit("/", 1)[0] if is_url(location) else os.path.dirname(os.path.abspath(location))

    def relative(path: str) -> str:
        if is_url(path):
            if not path.startswith(folder + "/"):
                raise ValueError(f"{path!r} is not in the manifest's folder {folder!r}")
            return path[len(folder) + 1 :]
        name = os.path.relpath(os.path.abspath(path), folder)
        if name.startswith(".."):
            raise ValueError(f"{path!r} is not in the manifest's folder {folder!r}")
        return name.replace(os.sep, "/")

    if versions is None:
        versions = remote.for_each_path(lambda path: _version(path, storage_options), list(shard_paths))
    indexes = index_paths if index_paths is not None else [None] * len(shard_paths)
    shards = tuple(
        ManifestShard(
            relative(path),
            file_size(path, storage_options),
            len(table),
            version,
            relative(index) if index else "",
            compression or "",
        )
        for path, table, version, index in zip(shard_paths, tables, versions, indexes, strict=True)
    )
    total = sum(len(table) for table in tables)
    tables_name = ""
    if 0 < total <= TABLES_LIMIT and not compression:  # (a compressed shard's offsets are not its bytes')
        tables_name = relative(location.removesuffix(MANIFEST_SUFFIX) + _TABLES_SUFFIX)
        buffer = io.BytesIO()
        sizes = np.concatenate([np.asarray(t, dtype=np.int64).reshape(-1, 2)[:, 1] for t in tables])
        np.savez_compressed(buffer, counts=np.array([len(t) for t in tables], np.int64), sizes=sizes)
        _write(location.removesuffix(MANIFEST_SUFFIX) + _TABLES_SUFFIX, buffer.getvalue(), storage_options)
    manifest = Manifest(location, shards, tables_name, spec)
    _write(location, encode_manifest(manifest), storage_options)
    return manifest


def write_shards_manifest(
    prefix: str,
    shard_paths: Sequence[str],
    framed_sizes: Sequence[Sequence[int] | npt.NDArray[np.int64]],
    storage_options: StorageOptions = None,
    *,
    compression: str | None = None,
    indexed: bool = True,
) -> Manifest:
    """The manifest a writer of ours leaves at ``{prefix}.manifest.json``, beside the shards it
    just wrote (each with its records' framed sizes, and ``<shard>.idx`` when ``indexed``)."""
    from .index import default_index_path, index_from_sizes

    tables = [index_from_sizes(list(sizes)) for sizes in framed_sizes]
    with_index = indexed and compression is None
    return write_manifest(
        manifest_for(prefix),
        shard_paths,
        tables,
        storage_options,
        index_paths=[default_index_path(path) if with_index else None for path in shard_paths],
        compression=compression,
    )


def _version(path: str, storage_options: StorageOptions) -> str:
    if not is_url(path):
        return ""
    from .remote.cached import file_version

    return file_version(remote.file_info(path, storage_options))


def _write(path: str, data: bytes, storage_options: StorageOptions) -> None:
    if is_url(path):
        remote.write_bytes(path, data, storage_options)
    else:
        with atomic_write(local_path(path)) as handle:
            handle.write(data)
