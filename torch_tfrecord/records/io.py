"""Opening TFRecord files: paths and URLs, compression detection and decompressing streams.

Everything that touches a file starts here. Local paths (and ``file://`` URLs) use the
operating system directly; any other URL (``s3://``, ``gs://``, ``https://``, ``memory://``)
goes through fsspec (:mod:`torch_tfrecord.records.remote`), with ``storage_options`` passed to its file
system. Compressed files are read as streams: GZIP and ZLIB wrap the whole file, framing
included, so their byte offsets are offsets into the decompressed stream.
"""

from __future__ import annotations

import dataclasses
import glob
import itertools
import logging
import os
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, BinaryIO, Literal

from ..errors import SourceNotFoundError
from . import remote
from .framing import header_is_valid
from .inflating import InflatingReader
from .remote import StorageOptions, is_url

__all__ = [
    "Compression",
    "PathLike",
    "SourceListing",
    "StorageOptions",
    "detect_compression",
    "exists",
    "expand_sources",
    "file_size",
    "is_url",
    "join",
    "list_sources",
    "local_path",
    "open_binary",
    "open_records_stream",
    "resolve_compression",
    "skip_reason",
]

logger = logging.getLogger(__name__)

PathLike = str | os.PathLike[str]
Compression = Literal["gzip", "zlib"] | None
CompressionArg = Literal["auto", "gzip", "zlib"] | None

_GZIP_MAGIC = b"\x1f\x8b"
_SUFFIXES: dict[str, Compression] = {".gz": "gzip", ".gzip": "gzip", ".zz": "zlib", ".zlib": "zlib"}
_LOGGED_SKIPS = 10


def _zlib_header_is_valid(head: bytes) -> bool:
    # RFC 1950: CM=8 (deflate), CINFO<=7, and the 16-bit header is a multiple of 31.
    return len(head) >= 2 and head[0] & 0x0F == 8 and head[0] >> 4 <= 7 and (head[0] << 8 | head[1]) % 31 == 0


def detect_compression(head: bytes, path: PathLike = "") -> Compression:
    """Guesses how a file is compressed from its first bytes, then from its name.

    A valid TFRecord header (length plus matching CRC) wins over any magic number, because a
    plain file whose first record is 35,615 bytes long starts with the GZIP magic bytes.

    Args:
        head: the first 12 or more bytes of the file (fewer for a shorter file).
        path: the file name, used only when the bytes decide nothing.

    Returns:
        ``"gzip"``, ``"zlib"`` or ``None`` for an uncompressed file.
    """
    if not head or header_is_valid(head):
        return None
    if head[:2] == _GZIP_MAGIC:
        return "gzip"
    if _zlib_header_is_valid(head):
        return "zlib"
    return _SUFFIXES.get(os.path.splitext(os.fspath(path))[1].lower())


def local_path(path: PathLike) -> str:
    """The path as a string, without a ``file://`` prefix."""
    name = os.fspath(path)
    return name[len("file://") :] if name.startswith("file://") else name


def join(directory: str, name: str) -> str:
    """``directory/name`` for a local directory or a URL prefix."""
    return directory.rstrip("/") + "/" + name if is_url(directory) else os.path.join(directory, name)


def exists(path: PathLike, storage_options: StorageOptions = None) -> bool:
    """Whether a file exists at ``path``."""
    name = os.fspath(path)
    if is_url(name):
        return remote.exists(name, storage_options)
    return os.path.exists(local_path(name))


def resolve_compression(
    compression: CompressionArg, path: PathLike, storage_options: StorageOptions = None
) -> Compression:
    """Turns a ``compression=`` argument into the compression of the file at ``path``.

    Raises:
        ValueError: for an unknown compression name.
    """
    if compression is None or compression in ("gzip", "zlib"):
        return compression  # type: ignore[return-value]
    if compression != "auto":
        raise ValueError(f"{compression=} must be 'auto', 'gzip', 'zlib' or None")
    name = os.fspath(path)
    if is_url(name):
        head = remote.read_head(name, 16, storage_options)
    else:
        with open_binary(name) as f:
            head = f.read(16)
    return detect_compression(head, name)


# Files that sit beside shards in real datasets and never hold records: indexes, TFDS metadata
# (dataset_info.json, features.json, *.labels.txt), label maps, notes, checksums, configs.
_NOT_DATA_SUFFIX = re.compile(
    r"\.(c?idx|json|pbtxt|txt|md|rst|csv|tsv|ya?ml|py|proto|html|log|lock|sha256|md5|crc|npz)$", re.IGNORECASE
)
_NOT_DATA_NAMES = re.compile(r"^(readme|license|licence|notice|changelog|authors)(\..*)?$", re.IGNORECASE)


def skip_reason(relative_path: str) -> str | None:
    """Why a file found under a directory (or by a glob) is not a shard, or None if it is one.

    The rule, the same for every API and command line that takes a directory or glob: hidden
    or private names (``.x``, ``_SUCCESS``, files under ``.cache/`` or ``_temporary/``), index
    files, TFDS metadata, label maps, text and notes are not shards (see ``_NOT_DATA_SUFFIX``);
    every other file is. Only names are looked at, so the rule costs no request on remote storage.

    Args:
        relative_path: the path below the directory, ``/``-separated (or a file name).
    """
    parts = [part for part in relative_path.replace(os.sep, "/").split("/") if part]
    base = parts[-1] if parts else relative_path
    if any(part.startswith((".", "_")) for part in parts):
        return "hidden"
    if _NOT_DATA_SUFFIX.search(base):
        return os.path.splitext(base)[1].lower() + " file"
    if _NOT_DATA_NAMES.match(base):
        return "notes"
    return None


def _split_skipped(source: str, candidates: list[tuple[str, str]]) -> list[str]:
    """The shards among ``(full path, path below the source)``; the rest are logged at INFO."""
    matches: list[str] = []
    skipped: list[str] = []
    for full, relative in candidates:
        reason = skip_reason(relative)
        if reason is None:
            matches.append(full)
        else:
            skipped.append(f"{relative} ({reason})")
    if skipped:
        shown = ", ".join(sorted(skipped)[:_LOGGED_SKIPS])
        more = f" and {len(skipped) - _LOGGED_SKIPS} more" if len(skipped) > _LOGGED_SKIPS else ""
        logger.info("%s: %d files are not shards, skipped: %s%s", source, len(skipped), shown, more)
    return matches


def _fixed_prefix(pattern: str) -> str:
    """The folder of a glob pattern before its first wildcard (``.`` when it starts with one)."""
    fixed = itertools.takewhile(lambda part: not glob.has_magic(part), pattern.split(os.sep))
    return os.sep.join(fixed) or "."


@dataclasses.dataclass
class SourceListing:
    """The data files of some sources, and what listing them told about remote objects.

    Attributes:
        paths: the data files, sorted and without duplicates.
        infos: fsspec's ``info`` of each remote object seen by a listing (the data files and the
            files beside them: indexes, manifests), by URL.
        complete: remote folders listed whole: a name in one that is not in ``infos`` does not exist.
    """

    paths: list[str]
    infos: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    complete: set[str] = dataclasses.field(default_factory=set)

    def info(self, url: str) -> dict[str, Any] | None:
        """What a listing saw of ``url`` (with its size); None when no listing said it (some file
        systems, HTTP's, list names without sizes)."""
        info = self.infos.get(url)
        return info if info is not None and isinstance(info.get("size"), int) else None

    def exists(self, url: str, storage_options: StorageOptions = None) -> bool:
        """Whether ``url`` exists: known from a listing of its folder, else looked up."""
        if url in self.infos:
            return True
        if url.rsplit("/", 1)[0] in self.complete:
            return False
        return exists(url, storage_options)


def expand_sources(
    sources: PathLike | Iterable[PathLike], storage_options: StorageOptions = None
) -> list[str]:
    """Turns paths, globs and directories into a sorted list of data files (see :func:`list_sources`)."""
    return list_sources(sources, storage_options).paths


def list_sources(
    sources: PathLike | Iterable[PathLike], storage_options: StorageOptions = None
) -> SourceListing:
    """Turns paths, globs and directories into a sorted list of data files.

    A directory stands for the shards in it and in its subdirectories, at any depth (TFDS
    version folders, exports with ``train/`` and ``eval/`` below them: name the subdirectory to
    read one split only). A glob (``*``, ``?``, ``[``, ``**``) stands for the shards it matches.
    In both, files that are not shards by their names are left out and named in an INFO log
    line: hidden and private files and folders (``.x``, ``_SUCCESS``, ``_temporary/``), index
    files (``.idx``), metadata and notes (``.json``, ``.pbtxt``, ``.txt``, ``.md``, ``.csv``,
    ``.yaml``, ``README`` ...; see :func:`skip_reason`). A file named on its own is always read.
    URLs expand on their file system (``s3://bucket/train-*.tfrecord``, a bucket prefix), in one
    listing where they can: what it says of each object (size, version, the indexes beside the
    shards) spares a request per shard later.

    Args:
        sources: one source or several.
        storage_options: for the file system of URLs.

    Returns:
        The files, sorted and without duplicates, so every process sees the same list.

    Raises:
        SourceNotFoundError: a source names no file.
    """
    items = [sources] if isinstance(sources, str | os.PathLike) else list(sources)
    found: set[str] = set()
    listing = SourceListing([])
    for item in items:
        name = local_path(item)
        if is_url(name):
            listed = remote.expand(name, storage_options)
            listing.infos.update(listed.infos)
            listing.complete |= listed.complete
            kind = listed.kind
            if kind == "file":
                matches = [full for full, _ in listed.entries]
            else:
                matches = _split_skipped(name, listed.entries)
            what = {"glob": "glob matches no data file", "directory": "directory holds no data file"}.get(
                kind, ""
            )
        elif os.path.isdir(name):
            candidates = []
            for folder, folders, files in os.walk(name):
                folders[:] = [f for f in folders if not f.startswith((".", "_"))]
                for entry in files:
                    full = os.path.join(folder, entry)
                    candidates.append((full, os.path.relpath(full, name)))
            matches = _split_skipped(name, candidates)
            what = "directory holds no data file (nor do its subdirectories)"
        elif glob.has_magic(name):
            prefix = _fixed_prefix(name)
            globbed = [m for m in glob.glob(name, recursive=True) if os.path.isfile(m)]
            matches = _split_skipped(name, [(m, os.path.relpath(m, prefix)) for m in globbed])
            what = "glob matches no data file"
        elif os.path.isfile(name):
            matches = [name]
            what = ""
        else:
            raise SourceNotFoundError(f"no such file or directory: {name!r}")
        if not matches:
            raise SourceNotFoundError(f"{what}: {name!r}")
        found.update(matches)
    listing.paths = sorted(found)
    return listing


def file_size(path: PathLike, storage_options: StorageOptions = None) -> int:
    """Size of the file at ``path`` in bytes."""
    name = os.fspath(path)
    if is_url(name):
        return int(remote.file_info(name, storage_options)["size"])
    try:
        return os.stat(local_path(name)).st_size
    except FileNotFoundError:
        raise SourceNotFoundError(f"no such file: {os.fspath(path)!r}") from None


def open_binary(path: PathLike, storage_options: StorageOptions = None) -> BinaryIO:
    """Opens a file for reading, unbuffered; a missing file is a :class:`SourceNotFoundError`.

    A URL opens as a stream of ranged requests with read-ahead (:meth:`remote.RemoteFile.stream`).

    Raises:
        SourceNotFoundError: no file at ``path`` (also a FileNotFoundError).
    """
    name = os.fspath(path)
    if is_url(name):
        return remote.RemoteFile(name, file_size(name, storage_options), storage_options).stream()
    try:
        return open(local_path(name), "rb", buffering=0)
    except FileNotFoundError:
        raise SourceNotFoundError(f"no such file: {os.fspath(path)!r}") from None


@contextmanager
def open_records_stream(
    path: PathLike, compression: Compression, storage_options: StorageOptions = None
) -> Iterator[BinaryIO]:
    """Opens ``path`` for reading its (decompressed) record stream.

    Args:
        path: a local file path or a URL.
        compression: as returned by :func:`resolve_compression`.
        storage_options: for the file system of a URL.

    Yields:
        A binary stream positioned at the start of the (uncompressed) records.
    """
    raw = open_binary(path, storage_options)
    stream: BinaryIO = (
        raw if compression is None else InflatingReader(raw, compression)  # type: ignore[assignment]
    )
    try:
        yield stream
    finally:
        stream.close()
