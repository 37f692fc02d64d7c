"""Specs saved as JSON (``spec.json`` beside the shards), so a dataset reads back with no arguments.

The file holds ``{"format": "torch-tfrecord-spec", "version": 1, "spec": {...}}`` for Examples, or
``"context_spec"`` and ``"sequence_spec"`` for SequenceExamples; each feature an object with its
class (``"kind"``) and fields, dtypes by name (``"int64"``, ``"float32"``, ``"bytes"``, ``"str"``).
A ``spec.json`` without that ``format`` is someone else's file, and is not read as a spec.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from ..errors import SpecError
from ..records import remote
from ..records.atomic import atomic_write
from ..records.io import StorageOptions, exists, is_url, join, local_path
from .spec import FeatureSpec, FixedLen, FixedLenSequence, Image, RawTensor, VarLen, normalize_spec

__all__ = [
    "SPEC_FILE",
    "decode_spec_json",
    "encode_spec_json",
    "find_spec_file",
    "read_spec_file",
    "write_spec_file",
]

SPEC_FILE = "spec.json"
FORMAT = "torch-tfrecord-spec"
MAX_SPEC_BYTES = 16 << 20
"""The largest spec.json read (a spec of every feature of a wide dataset is a few hundred KB)."""
_KINDS: dict[str, Any] = {cls.__name__: cls for cls in (FixedLen, VarLen, FixedLenSequence, RawTensor, Image)}
_TUPLES = ("shape", "size", "scale", "ratio")


def _dtype_name(dtype: Any) -> str:
    if dtype is bytes or dtype is str:
        return dtype.__name__
    return str(dtype).removeprefix("torch.")


def _dtype(name: Any, where: str) -> Any:
    if name == "bytes":
        return bytes
    if name == "str":
        return str
    dtype = getattr(torch, name, None) if isinstance(name, str) else None
    if not isinstance(dtype, torch.dtype):
        raise SpecError(f"{where}: unknown dtype {name!r}")
    return dtype


def _feature_json(spec: FeatureSpec) -> dict[str, Any]:
    fields = {field.name: getattr(spec, field.name) for field in dataclasses.fields(spec)}
    entry: dict[str, Any] = {"kind": type(spec).__name__}
    for name, value in fields.items():
        if name == "dtype":
            value = _dtype_name(value)
        elif isinstance(value, tuple):
            value = list(value)
        entry[name] = value
    return entry


def _feature(entry: Any, where: str) -> FeatureSpec:
    if (
        not isinstance(entry, Mapping)
        or not isinstance(entry.get("kind"), str)
        or entry["kind"] not in _KINDS
    ):
        raise SpecError(f"{where}: expected an object with a 'kind' of {sorted(_KINDS)}, got {entry!r}")
    fields = {name: value for name, value in entry.items() if name != "kind"}
    if "dtype" in fields:
        fields["dtype"] = _dtype(fields["dtype"], where)
    for name in _TUPLES:
        if isinstance(fields.get(name), list):
            fields[name] = tuple(fields[name])
    try:
        return _KINDS[entry["kind"]](**fields)  # type: ignore[no-any-return]
    except (TypeError, ValueError, RecursionError) as error:  # (SpecError is both of the first two)
        raise SpecError(f"{where}: {str(error)[:300]}") from None


def _specs_json(spec: Mapping[str, Any]) -> dict[str, Any]:
    normalized = normalize_spec(spec) or {}
    return {key: _feature_json(value) for key, value in normalized.items()}


def encode_spec_json(
    spec: Mapping[str, Any] | None = None,
    *,
    context_spec: Mapping[str, Any] | None = None,
    sequence_spec: Mapping[str, Any] | None = None,
) -> str:
    """A spec (or a SequenceExample's context and sequence specs) as the JSON of ``spec.json``."""
    document: dict[str, Any] = {"format": FORMAT, "version": 1}
    if sequence_spec is not None:
        document["context_spec"] = _specs_json(context_spec or {})
        document["sequence_spec"] = _specs_json(sequence_spec)
    else:
        document["spec"] = _specs_json(spec or {})
    return json.dumps(document, indent=1, sort_keys=False) + "\n"


def decode_spec_json(text: str, source: str = "spec.json") -> dict[str, dict[str, FeatureSpec]] | None:
    """The dataset arguments a ``spec.json`` holds: ``{"spec": ...}`` or ``{"context_spec": ...,
    "sequence_spec": ...}``; None when the JSON is not a torch-tfrecord spec file.

    Raises:
        SpecError: a spec file (its ``format`` says so) that is malformed, naming the file and key.
    """
    if len(text) > MAX_SPEC_BYTES:
        raise SpecError(
            f"{source}: {len(text):,} characters, more than a spec file holds ({MAX_SPEC_BYTES:,})"
        )
    try:
        document = json.loads(text)
    except (ValueError, RecursionError) as error:
        raise SpecError(f"{source}: not JSON: {str(error)[:200]}") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        return None
    if document.get("version") != 1:
        raise SpecError(f"{source}: spec file version {document.get('version')!r} is not supported (1)")
    result: dict[str, dict[str, FeatureSpec]] = {}
    for part in ("spec", "context_spec", "sequence_spec"):
        if part in document:
            entries = document[part]
            if not isinstance(entries, dict):
                raise SpecError(f"{source}: {part!r} must be an object of feature key to spec")
            result[part] = {
                key: _feature(entry, f"{source} feature {key!r}") for key, entry in entries.items()
            }
    if (
        not result
        or ("spec" in result) == ("sequence_spec" in result)
        or ("context_spec" in result) > ("sequence_spec" in result)
    ):
        raise SpecError(
            f"{source}: holds neither 'spec' nor 'sequence_spec' (or both, or a context without it)"
        )
    return result


def write_spec_file(directory: str, text: str, storage_options: StorageOptions = None) -> str:
    """Writes ``text`` (from :func:`encode_spec_json`) as ``directory/spec.json``, atomically."""
    path = join(directory, SPEC_FILE)
    if is_url(path):
        remote.write_bytes(path, text.encode(), storage_options)
    else:
        with atomic_write(path) as f:
            f.write(text.encode())
    return path


def find_spec_file(paths: Sequence[str], storage_options: StorageOptions = None) -> str | None:
    """The ``spec.json`` beside a dataset's shards, when they all lie in one folder that has one."""
    if not paths:
        return None
    folders = {os.path.dirname(local_path(p)) if not is_url(p) else p.rsplit("/", 1)[0] for p in paths}
    if len(folders) != 1:
        return None
    path = join(folders.pop() or ".", SPEC_FILE)
    return path if exists(path, storage_options) else None


def read_spec_file(
    paths: Sequence[str], storage_options: StorageOptions = None
) -> dict[str, dict[str, FeatureSpec]] | None:
    """The specs of the ``spec.json`` beside ``paths`` (see :func:`decode_spec_json`), or None."""
    path = find_spec_file(paths, storage_options)
    if path is None:
        return None
    if is_url(path):
        data = remote.read_bytes(path, storage_options, MAX_SPEC_BYTES)
    elif os.path.getsize(path) > MAX_SPEC_BYTES:
        raise SpecError(f"{path}: more than {MAX_SPEC_BYTES:,} bytes, more than a spec file holds")
    else:
        with open(path, "rb") as f:
            data = f.read()
    if len(data) > MAX_SPEC_BYTES:
        raise SpecError(f"{path}: more than {MAX_SPEC_BYTES:,} bytes, more than a spec file holds")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise SpecError(f"{path}: not UTF-8 text: {error}") from None
    return decode_spec_json(text, source=path)
