"""A TFDS-prepared directory's metadata: where it is, its splits, shards and record counts.

Reads ``dataset_info.json`` (splits, ``shardLengths``, the file name template, the file format),
``features.json`` and the ``*.labels.txt`` files of a version directory such as
``~/tensorflow_datasets/mnist/3.0.1/``, local or behind a URL. No torch, no TensorFlow: the
torch-free command lines (``count``, ``verify``) use it too.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ...errors import SourceNotFoundError, TFRecordError
from ...records import remote
from ...records.io import StorageOptions, exists, is_url, join, local_path, open_binary
from ...records.listing import expand_sources

__all__ = [
    "DatasetInfo",
    "SplitInfo",
    "TFDSFormatError",
    "expand_with_tfds",
    "is_tfds_dir",
    "read_info",
    "resolve_version_dir",
]

_DEFAULT_TEMPLATE = "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}"
_VERSION = re.compile(r"^(\d+)\.(\d+)\.(\d+)$")
# The placeholders TFDS's naming.ShardedFileTemplate defines: nothing else is substituted (no
# format specs, attributes or indexes), and every name stays inside the dataset's directory.
_PLACEHOLDER = re.compile(r"\{([A-Z_]{1,20})\}")
_PLACEHOLDERS = ("DATASET", "SPLIT", "FILEFORMAT", "SHARD_INDEX", "NUM_SHARDS", "SHARD_X_OF_Y")
_MAX_NAME = 1024  # characters of a template, a dataset or split name, and a shard's name
# dataset_info.json and features.json are read whole: larger ones are not TFDS's.
MAX_JSON_BYTES = 64 << 20


class TFDSFormatError(TFRecordError, ValueError):
    """A TFDS directory whose metadata this library cannot read (names the file and the field)."""


@dataclasses.dataclass(frozen=True)
class SplitInfo:
    """One split of a prepared dataset: its name, records per shard and file name template."""

    name: str
    shard_lengths: tuple[int, ...]
    filepath_template: str = _DEFAULT_TEMPLATE
    num_bytes: int = 0

    @property
    def num_examples(self) -> int:
        return sum(self.shard_lengths)

    def shard_names(self, dataset: str, file_format: str) -> list[str]:
        """The shard file names, in order (``mnist-train.tfrecord-00000-of-00001``), relative to
        the dataset's directory.

        Raises:
            TFDSFormatError: the template uses something else than TFDS's placeholders, or a
                name would lie outside the dataset's directory (an absolute path, ``..``).
        """
        template = self.filepath_template
        shown = f"split {self.name[:80]!r}: file name template {template[:200]!r}"
        if len(template) > _MAX_NAME or len(dataset) > _MAX_NAME or len(self.name) > _MAX_NAME:
            raise TFDSFormatError(
                f"{shown}: the template, dataset or split name is over {_MAX_NAME} characters"
            )
        unknown = sorted({name for name in _PLACEHOLDER.findall(template) if name not in _PLACEHOLDERS})
        if unknown or "{" in _PLACEHOLDER.sub("", template) or "}" in _PLACEHOLDER.sub("", template):
            raise TFDSFormatError(
                f"{shown} uses {', '.join(unknown) or 'braces'} beyond TFDS's placeholders "
                f"({', '.join('{' + name + '}' for name in _PLACEHOLDERS)}, nothing more)"
            )
        total = len(self.shard_lengths)
        names = []
        for index in range(total):
            fields = {
                "DATASET": dataset,
                "SPLIT": self.name,
                "FILEFORMAT": file_format,
                "SHARD_INDEX": f"{index:05d}",
                "NUM_SHARDS": f"{total:05d}",
                "SHARD_X_OF_Y": f"{index:05d}-of-{total:05d}",
            }
            name = _fill(template, fields)
            problem = _outside(name)
            if problem is not None:
                raise TFDSFormatError(f"{shown}: shard {index} would be {name[:200]!r}, {problem}")
            names.append(name)
        return names


def _fill(template: str, fields: Mapping[str, str]) -> str:
    return _PLACEHOLDER.sub(lambda match: fields[match[1]], template)


def _outside(name: str) -> str | None:
    """Why a shard's name (relative to its dataset's directory) could lie outside it, or None."""
    if len(name) > _MAX_NAME:
        return f"a name of over {_MAX_NAME} characters"
    if not name or name.startswith(("/", "\\")) or "://" in name or "\0" in name:
        return "not a name inside the dataset's directory"
    if any(part in ("", ".", "..") for part in name.replace("\\", "/").split("/")):
        return "a path that leaves the dataset's directory (or names it by . or an empty part)"
    return None


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
    """What ``dataset_info.json`` (and ``features.json``) of a TFDS version directory say.

    Attributes:
        path: the version directory (a local path or a URL).
        name: the dataset's name (the first part of every shard's name).
        version: ``"1.0.0"``.
        file_format: ``"tfrecord"`` (the only one read here).
        splits: split name -> :class:`SplitInfo`, in the file's order.
        features_json: ``features.json`` as parsed JSON (None when the directory has none).
        supervised_keys: ``(input key, target key)`` when the dataset declares them.
        description: the dataset's description.
    """

    path: str
    name: str
    version: str
    file_format: str
    splits: dict[str, SplitInfo]
    features_json: dict[str, Any] | None = None
    supervised_keys: tuple[str, ...] | None = None
    description: str = ""

    def split(self, name: str) -> SplitInfo:
        """The split called ``name``; a KeyError naming the splits there are otherwise."""
        try:
            return self.splits[name]
        except KeyError:
            raise SourceNotFoundError(
                f"{self.name} {self.version} has no split {name!r}; it has {sorted(self.splits)}"
            ) from None

    def shard_paths(self, split: str) -> list[str]:
        """The shard files of a split, in record order.

        Raises:
            TFDSFormatError: a shard would lie outside the dataset's directory (its template, or a
                link in a local directory that points elsewhere).
        """
        info = self.split(split)
        paths = [join(self.path, name) for name in info.shard_names(self.name, self.file_format)]
        if not is_url(self.path):
            inside = os.path.realpath(self.path) + os.sep
            for path in paths:
                if not os.path.realpath(path).startswith(inside):
                    raise TFDSFormatError(
                        f"split {split!r}: shard {path!r} leads outside the dataset's directory "
                        f"{self.path!r} (through a link): file name template {info.filepath_template!r}"
                    )
        return paths

    def label_file(self, feature_path: str) -> str:
        """Where TFDS keeps a ClassLabel's names: ``<feature path with '/' as '-'>.labels.txt``."""
        return join(self.path, feature_path.replace("/", "-") + ".labels.txt")


def _read_text(path: str, storage_options: StorageOptions) -> str:
    chunks, size = [], 0
    with open_binary(path, storage_options) as file:
        while size <= MAX_JSON_BYTES and (chunk := file.read(1 << 20)):
            chunks.append(chunk)
            size += len(chunk)
    data = b"".join(chunks)
    if size > MAX_JSON_BYTES:
        raise TFDSFormatError(f"{path!r} is larger than {MAX_JSON_BYTES:,} bytes: not TFDS metadata")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise TFDSFormatError(f"{path!r} is not UTF-8 text: {error}") from None


def read_json(path: str, storage_options: StorageOptions = None) -> Any:
    """A JSON file (local or URL) of at most :data:`MAX_JSON_BYTES`; a damaged one is a
    :class:`TFDSFormatError` naming it."""
    return decode_json(_read_text(path, storage_options), path)


def decode_json(text: str, where: str) -> Any:
    """JSON text; a damaged document (nesting too deep, a number too long) is a
    :class:`TFDSFormatError` naming ``where``."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as error:
        raise TFDSFormatError(f"{where!r} is not valid JSON: {str(error)[:200]}") from None


def read_lines(path: str, storage_options: StorageOptions = None) -> list[str] | None:
    """The lines of a text file (a ``*.labels.txt``), or None when it does not exist."""
    if not exists(path, storage_options):
        return None
    return [line for line in _read_text(path, storage_options).splitlines() if line]


def is_tfds_dir(path: str, storage_options: StorageOptions = None) -> bool:
    """True when ``path`` is a directory holding ``dataset_info.json``."""
    return exists(join(str(path), "dataset_info.json"), storage_options)


def _int(value: Any, where: str) -> int:
    try:
        number = int(value)  # proto JSON writes 64-bit ints as strings
    except (TypeError, ValueError):
        raise TFDSFormatError(f"{where}: {value!r} is not an integer") from None
    if number < 0:
        raise TFDSFormatError(f"{where}: {number} is negative")
    return number


def parse_info(document: Mapping[str, Any], path: str, where: str = "dataset_info.json") -> DatasetInfo:
    """A :class:`DatasetInfo` from the parsed ``dataset_info.json`` (pure: no I/O).

    Raises:
        TFDSFormatError: a field is missing or malformed, naming it.
    """
    if not isinstance(document, Mapping):
        raise TFDSFormatError(f"{where}: expected a JSON object, found {type(document).__name__}")
    name = document.get("name")
    if not isinstance(name, str) or not name:
        raise TFDSFormatError(f"{where}: no dataset 'name'")
    splits: dict[str, SplitInfo] = {}
    entries = document.get("splits", [])
    if not isinstance(entries, list):
        raise TFDSFormatError(f"{where}: 'splits' is not a list")
    for i, entry in enumerate(entries):
        split_name = entry.get("name") if isinstance(entry, Mapping) else None
        if not isinstance(split_name, str):
            raise TFDSFormatError(f"{where}: splits[{i}] has no 'name'")
        if "shardLengths" not in entry:
            raise TFDSFormatError(
                f"{where}: split {split_name!r} has no 'shardLengths' (records per shard); this "
                "directory was prepared by a TFDS too old to say them"
            )
        if not isinstance(entry["shardLengths"], list):
            raise TFDSFormatError(f"{where}: split {split_name!r} has a 'shardLengths' that is not a list")
        lengths = tuple(
            _int(value, f"{where}: split {split_name!r} shardLengths[{k}]")
            for k, value in enumerate(entry["shardLengths"])
        )
        template = entry.get("filepathTemplate") or _DEFAULT_TEMPLATE
        if not isinstance(template, str):
            raise TFDSFormatError(f"{where}: split {split_name!r} has a 'filepathTemplate' that is not text")
        splits[split_name] = SplitInfo(
            split_name,
            lengths,
            template,
            _int(entry.get("numBytes", 0), f"{where}: split {split_name!r} numBytes"),
        )
    file_format = document.get("fileFormat") or "tfrecord"
    if not isinstance(file_format, str):
        raise TFDSFormatError(f"{where}: 'fileFormat' is not text")
    return DatasetInfo(
        path=path,
        name=name,
        version=str(document.get("version", ""))[:_MAX_NAME],
        file_format=file_format,
        splits=splits,
        supervised_keys=_supervised_keys(document.get("supervisedKeys")),
        description=str(document.get("description", "")),
    )


def _supervised_keys(supervised: Any) -> tuple[str, ...] | None:
    """``(input key, target key)`` of ``supervisedKeys`` (None when absent or unreadable)."""
    if not isinstance(supervised, Mapping):
        return None
    keys: list[Any] = []
    if isinstance(supervised.get("tuple"), Mapping) and isinstance(supervised["tuple"].get("items"), list):
        keys = [
            item.get("featureKey", "") if isinstance(item, Mapping) else None
            for item in supervised["tuple"]["items"]
        ]
    elif "input" in supervised:  # older TFDS: {"input": ..., "output": ...}
        keys = [supervised.get("input"), supervised.get("output")]
    return tuple(keys) if keys and all(isinstance(key, str) for key in keys) else None


def read_info(path: str, storage_options: StorageOptions = None) -> DatasetInfo:
    """Reads a TFDS version directory's ``dataset_info.json`` and ``features.json``.

    Raises:
        SourceNotFoundError: no ``dataset_info.json`` there.
        TFDSFormatError: malformed metadata, or shards in a format other than TFRecord.
    """
    path = str(path).rstrip("/") if is_url(str(path)) else local_path(path)
    info_path = join(path, "dataset_info.json")
    if not exists(info_path, storage_options):
        raise SourceNotFoundError(f"{path!r} is not a TFDS version directory: it has no dataset_info.json")
    info = parse_info(read_json(info_path, storage_options), path, info_path)
    if info.file_format != "tfrecord":
        raise TFDSFormatError(
            f"{info_path}: the shards are {info.file_format!r} files; only 'tfrecord' shards are read "
            "(prepare the dataset with file_format='tfrecord')"
        )
    features_path = join(path, "features.json")
    features = read_json(features_path, storage_options) if exists(features_path, storage_options) else None
    return dataclasses.replace(info, features_json=features)


def _listdir(path: str, storage_options: StorageOptions) -> list[str]:
    if is_url(path):
        fs, root = remote.filesystem(path, storage_options)
        return [os.path.basename(str(entry).rstrip("/")) for entry in fs.ls(root, detail=False)]
    return os.listdir(path) if os.path.isdir(path) else []


def resolve_version_dir(
    path: str | os.PathLike[str], name: str | None = None, storage_options: StorageOptions = None
) -> str:
    """The version directory meant by ``path`` (and ``name``).

    Args:
        path: a version directory (holding ``dataset_info.json``); with ``name``, the data_dir
            (``~/tensorflow_datasets``); without it, a dataset directory holding versions.
        name: ``"mnist"``, ``"mnist:3.0.1"``, ``"coco/2017:1.1.0"`` (a config as a subdirectory).
            Without a version, the latest one there.

    Raises:
        SourceNotFoundError: no such dataset or version, naming the versions found.
    """
    root = str(path).rstrip("/") if is_url(str(path)) else local_path(path)
    version = None
    if name:
        base, _, version = name.partition(":")
        for part in base.split("/"):
            root = join(root, part)
    if version is None or version == "":
        if is_tfds_dir(root, storage_options):
            return root
        found = sorted(
            (tuple(int(x) for x in match.groups()), entry)
            for entry in _listdir(root, storage_options)
            if (match := _VERSION.match(entry))
        )
        found = [item for item in found if is_tfds_dir(join(root, item[1]), storage_options)]
        if not found:
            raise SourceNotFoundError(
                f"{root!r} holds no prepared TFDS version (a directory such as 1.0.0/ with a "
                "dataset_info.json)"
            )
        return join(root, found[-1][1])
    candidate = join(root, version)
    if not is_tfds_dir(candidate, storage_options):
        versions = sorted(v for v in _listdir(root, storage_options) if _VERSION.match(v))
        raise SourceNotFoundError(f"no version {version!r} of {root!r}; found {versions or 'none'}")
    return candidate


def expand_with_tfds(
    paths: Sequence[str], storage_options: StorageOptions = None
) -> tuple[list[str], dict[str, int]]:
    """The data files of ``paths`` (files, globs, directories, URLs); a TFDS version directory
    stands for its shards, split by split, and a dataset's manifest for the shards it lists; the
    records ``dataset_info.json`` or the manifest says each holds are returned beside them
    (``{shard path: records}``)."""
    files: list[str] = []
    expected: dict[str, int] = {}
    for path in paths:
        if path.endswith(".manifest.json"):  # (records.manifest imports numpy: only for a manifest)
            from ...records.manifest import read_manifest

            manifest = read_manifest(path, storage_options)
            shards = list(manifest.paths)
            files.extend(shards)
            expected.update(zip(shards, (shard.records for shard in manifest.shards), strict=True))
            continue
        if not is_tfds_dir(path, storage_options):
            files.extend(expand_sources(path, storage_options))
            continue
        info = read_info(path, storage_options)
        for name, split in info.splits.items():
            shards = info.shard_paths(name)
            files.extend(shards)
            expected.update(zip(shards, split.shard_lengths, strict=True))
    return files, expected
