"""The protobuf decoder backend: serialized records through the protobuf runtime into columns.

It parses each record with the generated message classes, gathers every spec key over the batch
(checking types, counts and presence) and hands the columns to :mod:`torch_tfrecord.codec.assemble`.
It is the reference: whatever the native backend rejects is decoded again here, so the error a
user sees (class, key, record and message) always comes from this module or ``_assemble``.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from google.protobuf.message import DecodeError

from ..errors import ExampleDecodeError, FeatureTypeError, MissingFeatureError
from ..proto import BytesList, Example, FloatList, Int64List, SequenceExample
from .assemble import (
    Column,
    Locations,
    byte_rows,
    byte_scalars,
    fixed_tensor,
    images,
    ragged,
    ragged_steps,
    raw_tensor,
    stack_raw,
    text_steps,
    where,
)
from .packed import PACKED_MIN_AVERAGE, numeric_values
from .ragged import Ragged
from .spec import FeatureSpec, FixedLen, FixedLenSequence, Image, RawTensor, VarLen, list_kind

__all__ = ["decode_examples", "decode_sequences"]

_KINDS = ("int64_list", "float_list", "bytes_list")
_VALUES = {kind: operator.attrgetter(f"{kind}.value") for kind in _KINDS}
_LISTS = {kind: operator.attrgetter(kind) for kind in _KINDS}
_KIND_WORDS = {"int64_list": "int64", "float_list": "float", "bytes_list": "bytes", None: "no values"}
_DTYPE_OF_KIND: dict[str, Any] = {"int64_list": torch.int64, "float_list": torch.float32, "bytes_list": bytes}


_EMPTY: tuple[()] = ()  # a Feature with no list set: zero values of any type


def _count(values: Any, messages: bool) -> int:
    """Number of values in an entry of :meth:`_MapColumn.lists`."""
    if values is None or values is _EMPTY:
        return 0
    return len(values.value if messages else values)


def _default_entry(kind: str, default: tuple[Any, ...], messages: bool) -> Any:
    """A stand-in for a missing feature holding a spec's default: a list message or its values."""
    message = {"int64_list": Int64List, "float_list": FloatList, "bytes_list": BytesList}[kind]()
    if kind == "int64_list":
        message.value.extend([int(v) for v in default])
    else:  # a str spec's default is text: store it as the bytes it decodes from
        message.value.extend([v.encode() if isinstance(v, str) else v for v in default])
    return message if messages else message.value


def _numeric(lists: Sequence[Any], kind: str, total: int, messages: bool) -> np.ndarray[Any, Any]:
    """The values of the entries of :meth:`_MapColumn.lists` (None / ``_EMPTY``: none), concatenated."""
    present = [m for m in lists if m is not None and m is not _EMPTY]
    return numeric_values(present, kind, total, messages)


def _parse(records: Sequence[bytes], message: type[Any], locations: Locations) -> list[Any]:
    parse = message.FromString
    try:
        return [parse(record) for record in records]
    except DecodeError:
        pass
    # Find the bad one (rare path) to say which.
    for i, record in enumerate(records):
        try:
            parse(record)
        except DecodeError as error:
            raise ExampleDecodeError(
                f"{where(locations, i)} is not a valid serialized {message.__name__} "
                f"({len(record)} bytes, starting {bytes(record[:16])!r}): {error}",
                record=where(locations, i),
            ) from None
    raise AssertionError("unreachable: a record failed to parse only once")


def _values_of(key: str, feature: Any, kind: str, spec: Any, locations: Locations, i: int) -> Any:
    """The repeated values of ``feature`` if it holds ``kind``; a Feature with no kind is empty."""
    which = feature.WhichOneof("kind")
    if which == kind:
        return _VALUES[kind](feature)
    if which is None:
        return ()
    raise FeatureTypeError(
        f"feature {key!r} of {where(locations, i)}: expected {_KIND_WORDS[kind]} values for {spec!r}, "
        f"found {_KIND_WORDS[which]} values",
        key=key,
        record=where(locations, i),
    )


class _MapColumn(Column):
    """Gathers one feature over a batch of feature maps."""

    def missing_in(self, maps: Sequence[Any], i: int) -> MissingFeatureError:
        """:meth:`missing`, saying whether the key is absent or its Feature sets no list."""
        return self.missing(i, no_list=self.key in maps[i])

    def lists(self, maps: Sequence[Any], kind: str, messages: bool = False) -> list[Any]:
        """Per record: the repeated values (or, with ``messages``, the Int64List / FloatList /
        BytesList message), ``_EMPTY`` for an empty list, None where the key is missing or its
        Feature has no list set (TensorFlow's parser reads such a Feature as a missing key: the
        default, zero values, or an error for a required feature)."""
        key, spec, locations = self.key, self.spec, self.locations
        getter = _LISTS[kind] if messages else _VALUES[kind]
        out: list[Any] = []
        append = out.append
        for i, fmap in enumerate(maps):
            if key in fmap:
                feature = fmap[key]
                got = getter(feature)
                # Non-empty values can only come from the set member of the oneof; an empty
                # result needs a look at which member is set (another type is an error).
                if got.value if messages else got:
                    append(got)
                elif feature.WhichOneof("kind") is None:
                    append(None)
                else:
                    _values_of(key, feature, kind, spec, locations, i)  # raises unless empty
                    append(_EMPTY)
            else:
                append(None)
        return out


def _decode_fixed(column: _MapColumn, spec: FixedLen, maps: Sequence[Any]) -> Any:
    kind = list_kind(spec.dtype)
    numel = math.prod(spec.shape)
    messages = kind != "bytes_list" and numel >= PACKED_MIN_AVERAGE
    lists = column.lists(maps, kind, messages)
    default = None
    for i, entry in enumerate(lists):
        if entry is None:
            if spec.default is None:
                raise column.missing_in(maps, i)
            if default is None:
                default = _default_entry(kind, spec.default_values() or (), messages)
            lists[i] = default
        elif entry is _EMPTY:
            if numel:
                raise column.wrong_count(i, f"{numel} values for shape {spec.shape}", 0)
        elif len(entry.value if messages else entry) != numel:
            raise column.wrong_count(i, f"{numel} values for shape {spec.shape}", _count(entry, messages))
    if kind == "bytes_list":
        if spec.shape == ():  # every entry holds exactly one value
            return byte_scalars(column, [values[0] for values in lists])
        return byte_rows(column, [list(v) if v is not _EMPTY else [] for v in lists])
    flat = _numeric(lists, kind, numel * len(lists), messages)
    return fixed_tensor(column, spec, flat, len(lists))


def _flatten_ragged(
    column: Column,
    lists: Sequence[Any],
    kind: str,
    dtype: Any,
    inner: tuple[int, ...],
    messages: bool = True,
) -> Ragged:
    """``lists``: per record a list message (or ``()`` / None for none), or a list of values."""
    numel = math.prod(inner)
    lengths = np.fromiter((_count(v, messages) for v in lists), dtype=np.int64, count=len(lists))
    if numel != 1:
        bad = np.flatnonzero(lengths % max(numel, 1)) if numel else np.flatnonzero(lengths)
        if len(bad):
            i = int(bad[0])
            raise column.wrong_count(
                i, f"a multiple of {numel} values (steps of shape {inner})", int(lengths[i])
            )
    offsets = np.zeros(len(lists) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = _numeric(lists, kind, int(offsets[-1]), messages)
    return ragged(column, flat, offsets, dtype, inner)


def _decode_varlen(column: _MapColumn, spec: VarLen | FixedLenSequence, maps: Sequence[Any]) -> Any:
    kind = list_kind(spec.dtype)
    lists = column.lists(maps, kind)
    if isinstance(spec, FixedLenSequence) and not spec.allow_missing and spec.default is None:
        for i, values in enumerate(lists):
            if values is None:
                raise column.missing_in(maps, i)
    if kind == "bytes_list":
        return byte_rows(column, [[] if v is None or v is _EMPTY else list(v) for v in lists])
    inner = spec.shape if isinstance(spec, FixedLenSequence) else ()
    total = sum(_count(v, False) for v in lists)
    if total >= PACKED_MIN_AVERAGE * max(1, sum(v is not None and v is not _EMPTY for v in lists)):
        # Long lists: fetch the list messages again, to go through their packed bytes.
        return _flatten_ragged(column, column.lists(maps, kind, messages=True), kind, spec.dtype, inner)
    return _flatten_ragged(column, lists, kind, spec.dtype, inner, messages=False)


def _scalar_int(column: Column, fmap: Any, name: str, i: int) -> int:
    if name not in fmap:
        raise MissingFeatureError(
            f"feature {name!r}, which gives a dimension of {column.key!r} ({column.spec!r}), is missing "
            f"from {where(column.locations, i)}",
            key=name,
            record=where(column.locations, i),
        )
    values = _values_of(name, fmap[name], "int64_list", column.spec, column.locations, i)
    if len(values) != 1:
        raise column.wrong_count(i, f"one int64 in feature {name!r}", len(values))
    return int(values[0])


def _single_values(column: _MapColumn, maps: Sequence[Any], expected: str) -> list[bytes]:
    """Each record's only bytes value; a missing feature or another count is an error."""
    singles = []
    for i, values in enumerate(column.lists(maps, "bytes_list")):
        if values is None:
            raise column.missing_in(maps, i)
        if len(values) != 1:
            raise column.wrong_count(i, expected, len(values))
        singles.append(values[0])
    return singles


def _decode_raw(column: _MapColumn, spec: RawTensor, maps: Sequence[Any]) -> Any:
    tensors = []
    for i, data in enumerate(_single_values(column, maps, "exactly one bytes value")):
        dims = [d if isinstance(d, int) else _scalar_int(column, maps[i], d, i) for d in spec.shape]
        tensors.append(raw_tensor(column, spec, i, data, dims))
    return stack_raw(spec, tensors)


def _decode_image(column: _MapColumn, spec: Image, maps: Sequence[Any]) -> list[torch.Tensor] | torch.Tensor:
    return images(column, spec, lambda: _single_values(column, maps, "exactly one encoded image"))


def _decode_features(
    maps: Sequence[Any], spec: Mapping[str, FeatureSpec], locations: Locations
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, feature_spec in spec.items():
        column = _MapColumn(key, feature_spec, locations)
        if isinstance(feature_spec, FixedLen):
            out[key] = _decode_fixed(column, feature_spec, maps)
        elif isinstance(feature_spec, VarLen | FixedLenSequence):
            out[key] = _decode_varlen(column, feature_spec, maps)
        elif isinstance(feature_spec, RawTensor):
            out[key] = _decode_raw(column, feature_spec, maps)
        else:
            out[key] = _decode_image(column, feature_spec, maps)
    return out


def _infer_batch_spec(
    maps: Sequence[Any], locations: Locations, dtypes: Mapping[str, Any] | None = None
) -> dict[str, FeatureSpec]:
    """spec=None: every key of the batch, as a VarLen of the type its records hold; a key whose
    Features set no list in this batch takes its type from ``dtypes``, else float32."""
    kinds: dict[str, str | None] = {}
    for i, fmap in enumerate(maps):
        for key, feature in fmap.items():
            which = feature.WhichOneof("kind")
            known = kinds.get(key)
            if known is None:
                kinds[key] = which
            elif which is not None and which != known:
                raise FeatureTypeError(
                    f"feature {key!r} holds {_KIND_WORDS[which]} values in {where(locations, i)} but "
                    f"{_KIND_WORDS[known]} values in an earlier record; give a spec",
                    key=key,
                    record=where(locations, i),
                )
    sampled = dtypes or {}
    return {
        key: VarLen(_DTYPE_OF_KIND[kind] if kind is not None else sampled.get(key, torch.float32))
        for key, kind in sorted(kinds.items())
    }


def decode_examples(
    records: Sequence[bytes],
    spec: Mapping[str, FeatureSpec] | None,
    locations: Locations,
    dtypes: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """:func:`torch_tfrecord.decode_batch` with protobuf; ``spec`` None: every feature as it is."""
    examples = _parse(records, Example, locations)
    maps = [example.features.feature for example in examples]
    specs = spec if spec is not None else _infer_batch_spec(maps, locations, dtypes)
    return _decode_features(maps, specs, locations)


def _steps(column: Column, lmap: Any, kind: str, numel: int | None, i: int) -> list[Any]:
    """Record ``i``'s steps of one feature list, each holding ``numel`` values when given."""
    key, spec, locations = column.key, column.spec, column.locations
    steps = [_values_of(key, feature, kind, spec, locations, i) for feature in lmap[key].feature]
    if numel is not None:
        for step in steps:
            if len(step) != numel:
                raise column.wrong_count(i, f"{numel} values per step (shape {spec.shape})", len(step))
    return steps


def _decode_feature_lists(
    lists_maps: Sequence[Any], spec: Mapping[str, FixedLenSequence | VarLen], locations: Locations
) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """Per key: steps of every record as one Ragged (or per-record lists), and the step counts."""
    sequences: dict[str, Any] = {}
    lengths: dict[str, torch.Tensor] = {}
    for key, feature_spec in spec.items():
        column = Column(key, feature_spec, locations)
        kind = list_kind(feature_spec.dtype)
        inner = feature_spec.shape if isinstance(feature_spec, FixedLenSequence) else None
        numel = math.prod(inner) if inner is not None else None
        steps_per_record: list[list[Any]] = []
        for i, lmap in enumerate(lists_maps):
            if key in lmap:
                steps_per_record.append(_steps(column, lmap, kind, numel, i))
            elif isinstance(feature_spec, FixedLenSequence) and not feature_spec.allow_missing:
                raise column.missing(i)
            else:
                steps_per_record.append([])
        counts = np.fromiter(map(len, steps_per_record), dtype=np.int64, count=len(steps_per_record))
        lengths[key] = torch.from_numpy(counts)
        if kind == "bytes_list":
            rows = text_steps(column, [[list(step) for step in steps] for steps in steps_per_record])
            sequences[key] = [[step[0] for step in steps] for steps in rows] if inner == () else rows
        elif inner is not None:
            flat = [[x for step in steps for x in step] for steps in steps_per_record]
            sequences[key] = _flatten_ragged(column, flat, kind, feature_spec.dtype, inner, messages=False)
        else:
            steps = [step for record in steps_per_record for step in record]
            step_ends = np.zeros(len(steps) + 1, dtype=np.int64)
            np.cumsum(np.fromiter(map(len, steps), dtype=np.int64, count=len(steps)), out=step_ends[1:])
            record_steps = np.zeros(len(counts) + 1, dtype=np.int64)
            np.cumsum(counts, out=record_steps[1:])
            flat_values = _numeric(steps, kind, int(step_ends[-1]), messages=False)
            sequences[key] = ragged_steps(column, flat_values, step_ends, record_steps, feature_spec.dtype)
    return sequences, lengths


def decode_sequences(
    records: Sequence[bytes],
    context_spec: Mapping[str, FeatureSpec],
    sequence_spec: Mapping[str, FixedLenSequence | VarLen],
    locations: Locations,
) -> tuple[dict[str, Any], dict[str, Any], dict[str, torch.Tensor]]:
    """SequenceExamples with protobuf: context columns, feature lists (before padding), step counts."""
    messages = _parse(records, SequenceExample, locations)
    context = _decode_features([m.context.feature for m in messages], context_spec, locations)
    lists_maps = [m.feature_lists.feature_list for m in messages]
    sequences, lengths = _decode_feature_lists(lists_maps, sequence_spec, locations)
    return context, sequences, lengths
