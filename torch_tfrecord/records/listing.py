"""A dataset's sources listed: paths, globs, directories and URLs turned into the sorted data
files once, with what a listing of remote folders told about the objects in them (sizes,
versions, the index files beside the shards), so that nothing it said is looked up again.
"""

from __future__ import annotations

import dataclasses
import glob
import itertools
import logging
import os
import re
from collections.abc import Iterable
from typing import Any

from ..errors import SourceNotFoundError
from . import remote
from .io import PathLike, StorageOptions, exists, local_path
from .remote import is_url

__all__ = ["SourceListing", "expand_sources", "list_sources", "skip_reason"]

logger = logging.getLogger(__name__)

_LOGGED_SKIPS = 10

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


