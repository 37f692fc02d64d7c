"""Proposing a feature spec from the records themselves."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from google.protobuf.message import DecodeError

from .errors import ExampleDecodeError, FeatureTypeError
from .inspect import doubt_keys, show_key
from .io import PathLike, StorageOptions, expand_sources
from .proto import Example
from .reader import read_records
from .spec import FeatureSpec, FixedLen, Image, VarLen

__all__ = ["InferredSpec", "infer_spec", "infer_spec_from_records", "sample_dtypes"]

logger = logging.getLogger(__name__)

_DTYPES: dict[str, Any] = {"int64_list": torch.int64, "float_list": torch.float32, "bytes_list": bytes}
_IMAGE_MAGIC = (b"\xff\xd8\xff", b"\x89PNG\r\n\x1a\n", b"GIF87a", b"GIF89a", b"BM")


@dataclasses.dataclass
class _Seen:
    kind: str | None = None
    lengths: set[int] = dataclasses.field(default_factory=set)
    present: int = 0
    empty: int = 0  # records where the Feature is present with no list set
    images: int = 0


class InferredSpec(dict[str, FeatureSpec]):
    """A spec dict whose ``repr`` is code to paste (``import torch, torch_tfrecord as tt`` first).

    Attributes:
        notes: per key, what the spec alone does not say (e.g. the type was never seen).
        warnings: doubts about the records as a whole (e.g. they are probably not Examples).
    """

    def __init__(self) -> None:
        super().__init__()
        self.notes: dict[str, str] = {}
        self.warnings: list[str] = []

    def __repr__(self) -> str:
        lines = [f"    # warning: {show_key(warning)}" for warning in self.warnings]
        for key, spec in self.items():
            note = f"  # {self.notes[key]}" if key in self.notes else ""
            lines.append(f"    {key!r}: {spec!r},{note}")
        return "{\n" + "\n".join(lines) + "\n}" if lines else "{}"


def infer_spec_from_records(
    records: Iterable[bytes], *, describe: Callable[[int], str] = lambda n: f"record {n}"
) -> InferredSpec:
    """Proposes a spec for serialized Examples; see :func:`infer_spec`.

    Args:
        records: serialized Examples.
        describe: names the n-th record in error messages.
    """
    seen: dict[str, _Seen] = {}
    total = 0
    for number, record in enumerate(records):
        total += 1
        try:
            example = Example.FromString(record)
        except DecodeError as error:
            raise ExampleDecodeError(
                f"{describe(number)} is not a serialized Example: {error}; if the file holds another "
                "message type, read its records as raw bytes with tt.read_records(path)"
            ) from None
        for key, feature in example.features.feature.items():
            entry = seen.setdefault(key, _Seen())
            which = feature.WhichOneof("kind")
            if which is not None and entry.kind is not None and which != entry.kind:
                raise FeatureTypeError(
                    f"feature {key!r} holds {which} in {describe(number)} but {entry.kind} before",
                    key=key,
                    record=describe(number),
                )
            entry.kind = entry.kind or which
            values: Any = getattr(feature, which).value if which else ()
            entry.present += 1
            if which is None:
                entry.empty += 1  # no type to learn; TensorFlow reads it as zero values
                continue
            entry.lengths.add(len(values))
            if which == "bytes_list" and len(values) == 1 and values[0].startswith(_IMAGE_MAGIC):
                entry.images += 1
    spec = InferredSpec()
    for key in sorted(seen):
        entry = seen[key]
        if entry.kind is None:
            # Present with no list set wherever it was seen (an empty CSV cell in TFX): any
            # VarLen reads it as zero values; float32 is a placeholder, not a finding.
            spec[key] = VarLen(torch.float32)
            spec.notes[key] = (
                f"type unknown: no values in any of the {entry.present} records that have it; "
                "set the dtype the data will hold"
            )
            continue
        dtype = _DTYPES[entry.kind]
        if entry.present == total and entry.images == total:
            spec[key] = Image("RGB")
        elif entry.present == total and len(entry.lengths) == 1 and not entry.empty:
            (length,) = entry.lengths
            spec[key] = FixedLen(() if length == 1 else (length,), dtype)
        else:
            spec[key] = VarLen(dtype)  # lengths vary, or the key is optional (missing = no values)
            if entry.empty:
                spec.notes[key] = f"no values in {entry.empty} of {entry.present} records that have it"
    doubt = doubt_keys(sorted(seen))
    if doubt:
        spec.warnings.append(doubt)
        logger.warning("%s", doubt)
    return spec


def sample_dtypes(records: Iterable[bytes]) -> dict[str, Any]:
    """The type (torch.int64, torch.float32 or bytes) of each key, from the records that set a list.

    For ``spec=None`` decoding (:func:`torch_tfrecord.decode_batch`'s ``dtypes``): a key whose
    Features in one batch hold no list takes its type from here, so a column keeps one type from
    batch to batch. Forgiving, as a sample must be: records that are not Examples are passed
    over, and where records disagree the first wins (decoding such a batch raises anyway).
    """
    dtypes: dict[str, Any] = {}
    for record in records:
        try:
            example = Example.FromString(record)
        except DecodeError:
            continue
        for key, feature in example.features.feature.items():
            if key not in dtypes:
                which = feature.WhichOneof("kind")
                if which is not None:
                    dtypes[key] = _DTYPES[which]
    return dtypes


def infer_spec(
    paths: PathLike | Sequence[PathLike], max_records: int = 1000, storage_options: StorageOptions = None
) -> InferredSpec:
    """Reads up to ``max_records`` Examples and proposes a spec for them.

    A feature present in every record with the same number of values becomes a
    :class:`FixedLen` (shape ``()`` for one value); one whose length varies, or that some records
    lack, a :class:`VarLen`; a bytes feature whose every value is a JPEG / PNG / GIF / BMP, an
    :class:`Image`. A key whose Features set no list in any record read (TFX's empty CSV
    cells) has no type to find: it becomes ``VarLen(torch.float32)`` with a ``type unknown`` note
    (``result.notes``). Records whose feature names hold control characters are probably another
    message that parses as an Example by accident: ``result.warnings`` says so. The ``repr`` of
    the result is valid Python, notes and warnings as comments.

    Args:
        paths: files, globs or directories.
        max_records: how many records to look at, from the first files on.
        storage_options: for the fsspec file system of URLs.

    Example:
        >>> infer_spec("train-*.tfrecord")  # doctest: +SKIP
        {
            'image/encoded': tt.Image(mode='RGB'),
            'label': tt.FixedLen(shape=(), dtype=torch.int64),
        }
    """
    if max_records < 1:
        raise ValueError(f"{max_records=} must be positive")

    origins: list[tuple[str, int]] = []  # (file, record number in it), for error messages

    def records() -> Iterable[bytes]:
        for path in expand_sources(paths, storage_options):
            for number, record in enumerate(read_records(path, storage_options=storage_options)):
                origins.append((path, number))
                yield record
                if len(origins) >= max_records:
                    return

    return infer_spec_from_records(
        records(), describe=lambda n: f"record {origins[n][1]} of {origins[n][0]!r}"
    )
