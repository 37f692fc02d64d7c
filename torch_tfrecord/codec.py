"""Decoding serialized Examples / SequenceExamples into tensors, batch first.

:func:`decode_batch` is the hot path: one call turns a batch of serialized records into
columns (one tensor, Ragged or list per feature), with no per-record dict built and thrown
away. :func:`decode_example` is that call with a batch of one.
"""

from __future__ import annotations

import logging
import math
import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np
import torch
from google.protobuf.message import DecodeError

from . import native
from .errors import (
    ExampleDecodeError,
    FeatureError,
    FeatureShapeError,
    FeatureTypeError,
    MissingFeatureError,
    SpecError,
)
from .proto import BytesList, Example, FloatList, Int64List, SequenceExample
from .ragged import Ragged
from .spec import FeatureSpec, FixedLen, FixedLenSequence, Image, RawTensor, VarLen, list_kind, normalize_spec

__all__ = [
    "decode_batch",
    "decode_example",
    "decode_sequence_batch",
    "decode_sequence_example",
]

logger = logging.getLogger(__name__)

SpecArg = Mapping[str, Any] | None
Locations = Sequence[str] | None

_NUMPY_OF_KIND = {"int64_list": np.int64, "float_list": np.float32}
_KINDS = ("int64_list", "float_list", "bytes_list")
_VALUES = {kind: operator.attrgetter(f"{kind}.value") for kind in _KINDS}
_LISTS = {kind: operator.attrgetter(kind) for kind in _KINDS}
_KIND_WORDS = {"int64_list": "int64", "float_list": "float", "bytes_list": "bytes", None: "no values"}
_DTYPE_OF_KIND: dict[str, Any] = {"int64_list": torch.int64, "float_list": torch.float32, "bytes_list": bytes}


_EMPTY: tuple[()] = ()  # a Feature with no list set: zero values of any type


def _count(values: Any, messages: bool) -> int:
    """Number of values in an entry of :meth:`_Column.lists`."""
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


def _packed_payload(serialized: bytes, count: int, kind: str) -> memoryview | None:
    """The packed values inside a re-serialized FloatList / Int64List, or None if not that shape.

    upb writes repeated scalars packed (proto3): one field-1 record whose payload is the raw
    little-endian float32s or the varints, so NumPy can take them without a Python object per
    value. Anything else (unknown fields kept from the input) returns None: the slow path.
    """
    if not serialized:
        return memoryview(b"") if count == 0 else None
    if serialized[0] != 0x0A:
        return None
    length = 0
    shift = 0
    position = 1
    while position < len(serialized) and position <= 10:
        byte = serialized[position]
        length |= (byte & 0x7F) << shift
        position += 1
        if byte < 0x80:
            break
        shift += 7
    if position + length != len(serialized) or (kind == "float_list" and length != 4 * count):
        return None
    return memoryview(serialized)[position:]


def _decode_varints(data: bytes | bytearray, count: int) -> np.ndarray[Any, Any] | None:
    """Vectorised decode of ``count`` concatenated varints as int64, or None if they are not that."""
    raw = np.frombuffer(data, dtype=np.uint8)
    ends = np.flatnonzero(raw < 0x80)
    if len(ends) != count or (len(raw) and ends[-1] != len(raw) - 1):
        return None
    if count == 0:
        return np.zeros(0, dtype=np.int64)
    starts = np.empty_like(ends)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    lengths = ends - starts + 1
    if lengths.max() > 10:
        return None
    position = np.arange(len(raw), dtype=np.int64) - np.repeat(starts, lengths)
    parts = (raw & 0x7F).astype(np.uint64) << (position.astype(np.uint64) * np.uint64(7))
    return np.add.reduceat(parts, starts).view(np.int64)


# Lists at least this long on average go through their packed bytes: below it, a Python object
# per value is cheaper than a serialization call per record.
_PACKED_MIN_AVERAGE = 48


def _numeric_values(lists: Sequence[Any], kind: str, total: int, messages: bool) -> np.ndarray[Any, Any]:
    """All values of the entries of :meth:`_Column.lists` (list messages with ``messages``,
    else value sequences), concatenated, as int64 / float32."""
    dtype = _NUMPY_OF_KIND[kind]
    present = [m for m in lists if m is not None and m is not _EMPTY]
    if messages:
        payloads = []
        for message in present:
            payload = _packed_payload(message.SerializeToString(), len(message.value), kind)
            if payload is None:
                break
            payloads.append(payload)
        else:
            joined = bytearray().join(payloads)  # writable: the tensor can own it without a copy
            if kind == "float_list":
                return np.frombuffer(joined, dtype="<f4", count=total).astype(np.float32, copy=False)
            decoded = _decode_varints(joined, total)
            if decoded is not None:
                return decoded
        present = [message.value for message in present]
    flat: list[Any] = []
    extend = flat.extend
    for values in present:
        extend(values)
    return np.array(flat, dtype=dtype) if flat else np.zeros(0, dtype=dtype)


def _where(locations: Locations, i: int) -> str:
    return locations[i] if locations is not None else f"record {i} of the batch"


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
                f"{_where(locations, i)} is not a valid serialized {message.__name__} "
                f"({len(record)} bytes, starting {bytes(record[:16])!r}): {error}",
                record=_where(locations, i),
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
        f"feature {key!r} of {_where(locations, i)}: expected {_KIND_WORDS[kind]} values for {spec!r}, "
        f"found {_KIND_WORDS[which]} values",
        key=key,
        record=_where(locations, i),
    )


def _cast(key: str, array: np.ndarray[Any, Any], dtype: Any, record_of: Callable[[int], str]) -> torch.Tensor:
    """Numpy int64 / float32 values to a tensor of ``dtype``; values that do not fit are an error."""
    tensor = torch.from_numpy(array)
    if dtype == tensor.dtype or tensor.numel() == 0:
        return tensor.to(dtype)
    if dtype == torch.bool:
        bad = np.flatnonzero((array != 0) & (array != 1))
        kind = "bool (0 or 1)"
    elif not dtype.is_floating_point:
        info = torch.iinfo(dtype)
        bad = np.flatnonzero((array < info.min) | (array > info.max))
        kind = f"{dtype} [{info.min}, {info.max}]"
    else:
        cast = tensor.to(dtype)
        bad = torch.nonzero(torch.isinf(cast) & ~torch.isinf(tensor)).reshape(-1).numpy()
        if not len(bad):
            return cast
        kind = str(dtype)
    if len(bad):
        position = int(bad[0])
        raise FeatureShapeError(
            f"feature {key!r} of {record_of(position)}: value {array[position].item()!r} does not fit {kind}",
            key=key,
            record=record_of(position),
        )
    return tensor.to(dtype)


def _record_of_flat(offsets: np.ndarray[Any, Any], locations: Locations) -> Callable[[int], str]:
    return lambda position: _where(locations, int(np.searchsorted(offsets, position, side="right")) - 1)


class _Column:
    """Gathers one feature over a batch of feature maps."""

    def __init__(self, key: str, spec: Any, locations: Locations) -> None:
        self.key = key
        self.spec = spec
        self.locations = locations

    def missing(self, i: int, maps: Sequence[Any] | None = None) -> MissingFeatureError:
        what, why = "is missing from", ""
        if maps is not None and self.key in maps[i]:  # a Feature with no list set
            what, why = (
                "has no values in",
                " (a Feature with no list set counts as missing, as in TensorFlow)",
            )
        where = _where(self.locations, i)
        return MissingFeatureError(
            f"feature {self.key!r} {what} {where} and {self.spec!r} has no default{why}",
            key=self.key,
            record=_where(self.locations, i),
        )

    def type_error(self, i: int, detail: str) -> FeatureTypeError:
        """``feature 'key' of <record><detail>``, as a FeatureTypeError."""
        where = _where(self.locations, i)
        return FeatureTypeError(f"feature {self.key!r} of {where}{detail}", key=self.key, record=where)

    def wrong_count(self, i: int, expected: str, found: int) -> FeatureShapeError:
        return FeatureShapeError(
            f"feature {self.key!r} of {_where(self.locations, i)}: {self.spec!r} expects {expected}, "
            f"found {found} values",
            key=self.key,
            record=_where(self.locations, i),
        )

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


def _decode_fixed(column: _Column, spec: FixedLen, maps: Sequence[Any]) -> Any:
    kind = list_kind(spec.dtype)
    numel = math.prod(spec.shape)
    messages = kind != "bytes_list" and numel >= _PACKED_MIN_AVERAGE
    lists = column.lists(maps, kind, messages)
    default = None
    for i, entry in enumerate(lists):
        if entry is None:
            if spec.default is None:
                raise column.missing(i, maps)
            if default is None:
                default = _default_entry(kind, spec.default_values() or (), messages)
            lists[i] = default
        elif entry is _EMPTY:
            if numel:
                raise column.wrong_count(i, f"{numel} values for shape {spec.shape}", 0)
        elif len(entry.value if messages else entry) != numel:
            raise column.wrong_count(i, f"{numel} values for shape {spec.shape}", _count(entry, messages))
    if kind == "bytes_list":
        values = [list(v) if v is not _EMPTY else [] for v in lists]
        rows = values if spec.dtype is bytes else _decode_str(column, values)
        return [row[0] for row in rows] if spec.shape == () else rows
    flat = _numeric_values(lists, kind, numel * len(lists), messages)
    tensor = _cast(column.key, flat, spec.dtype, lambda p: _where(column.locations, p // max(numel, 1)))
    return tensor.reshape(len(lists), *spec.shape)


def _decode_str(column: _Column, lists: Sequence[Any]) -> list[list[str]]:
    rows = []
    for i, values in enumerate(lists):
        try:
            rows.append([v if isinstance(v, str) else v.decode("utf-8") for v in values])
        except UnicodeDecodeError as error:
            raise column.type_error(i, f": bytes are not UTF-8 text ({error})") from None
    return rows


def _flatten_ragged(
    column: _Column,
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
    flat = _numeric_values(lists, kind, int(offsets[-1]), messages)
    values = _cast(column.key, flat, dtype, _record_of_flat(offsets, column.locations))
    rows = offsets // max(numel, 1) if numel else np.zeros_like(offsets)
    return Ragged(values.reshape(-1, *inner), torch.from_numpy(rows))


def _decode_varlen(column: _Column, spec: VarLen | FixedLenSequence, maps: Sequence[Any]) -> Any:
    kind = list_kind(spec.dtype)
    lists = column.lists(maps, kind)
    if isinstance(spec, FixedLenSequence) and not spec.allow_missing and spec.default is None:
        for i, values in enumerate(lists):
            if values is None:
                raise column.missing(i, maps)
    if kind == "bytes_list":
        present = [[] if v is None or v is _EMPTY else list(v) for v in lists]
        return present if spec.dtype is bytes else _decode_str(column, present)
    inner = spec.shape if isinstance(spec, FixedLenSequence) else ()
    total = sum(_count(v, False) for v in lists)
    if total >= _PACKED_MIN_AVERAGE * max(1, sum(v is not None and v is not _EMPTY for v in lists)):
        # Long lists: fetch the list messages again, to go through their packed bytes.
        return _flatten_ragged(column, column.lists(maps, kind, messages=True), kind, spec.dtype, inner)
    return _flatten_ragged(column, lists, kind, spec.dtype, inner, messages=False)


def _scalar_int(column: _Column, fmap: Any, name: str, i: int) -> int:
    if name not in fmap:
        raise MissingFeatureError(
            f"feature {name!r}, which gives a dimension of {column.key!r} ({column.spec!r}), is missing "
            f"from {_where(column.locations, i)}",
            key=name,
            record=_where(column.locations, i),
        )
    values = _values_of(name, fmap[name], "int64_list", column.spec, column.locations, i)
    if len(values) != 1:
        raise column.wrong_count(i, f"one int64 in feature {name!r}", len(values))
    return int(values[0])


def _raw_tensor(column: _Column, spec: RawTensor, i: int, data: Any, dims: list[int]) -> torch.Tensor:
    """Record ``i``'s RawTensor bytes ``data`` as a tensor of ``dims`` (with -1 resolved)."""
    itemsize = torch.empty((), dtype=spec.dtype).element_size()
    if any(d < -1 for d in dims):
        raise column.wrong_count(i, f"non-negative dimensions, got shape {dims}", len(data))
    if len(data) % itemsize:
        raise column.wrong_count(
            i, f"a whole number of {spec.dtype} items ({itemsize} bytes each)", len(data)
        )
    count = len(data) // itemsize
    known = math.prod(d for d in dims if d != -1)
    if -1 in dims:
        if known == 0 or count % known:
            raise column.wrong_count(i, f"items filling shape {tuple(dims)}", count)
        dims[dims.index(-1)] = count // known
    elif known != count:
        raise column.wrong_count(i, f"{known} {spec.dtype} items for shape {tuple(dims)}", count)
    if not count:  # an empty numpy array's stride cannot be viewed as a wider dtype
        return torch.empty(dims, dtype=spec.dtype)
    array = np.frombuffer(data, dtype=np.uint8).copy()  # writable, owned by the tensor
    return torch.from_numpy(array).view(spec.dtype).reshape(dims)


def _stack_raw(spec: RawTensor, tensors: list[torch.Tensor]) -> Any:
    return torch.stack(tensors) if spec.is_static and tensors else tensors


def _single_values(column: _Column, maps: Sequence[Any], expected: str) -> list[bytes]:
    """Each record's only bytes value; a missing feature or another count is an error."""
    singles = []
    for i, values in enumerate(column.lists(maps, "bytes_list")):
        if values is None:
            raise column.missing(i)
        if len(values) != 1:
            raise column.wrong_count(i, expected, len(values))
        singles.append(values[0])
    return singles


def _decode_raw(column: _Column, spec: RawTensor, maps: Sequence[Any]) -> Any:
    tensors = []
    for i, data in enumerate(_single_values(column, maps, "exactly one bytes value")):
        dims = [d if isinstance(d, int) else _scalar_int(column, maps[i], d, i) for d in spec.shape]
        tensors.append(_raw_tensor(column, spec, i, data, dims))
    return _stack_raw(spec, tensors)


def _image(column: _Column, spec: Image, i: int, data: bytes) -> torch.Tensor:
    """Record ``i``'s encoded image as a uint8 CHW tensor."""
    from .vision import decode_image

    try:
        return decode_image(data, spec.mode)
    except FeatureError:
        raise
    except Exception as error:  # a codec's own error type: say which record and key
        detail = f" is not a decodable image ({len(data)} bytes, starting {bytes(data[:8])!r})"
        raise column.type_error(i, f"{detail}: {error}") from error


def _decode_image(column: _Column, spec: Image, maps: Sequence[Any]) -> list[torch.Tensor]:
    from .vision import image_backend

    image_backend()  # no image library: an ImportError naming the extra, not "not an image"
    singles = _single_values(column, maps, "exactly one encoded image")
    return [_image(column, spec, i, data) for i, data in enumerate(singles)]


def _decode_features(
    maps: Sequence[Any], spec: Mapping[str, FeatureSpec], locations: Locations
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, feature_spec in spec.items():
        column = _Column(key, feature_spec, locations)
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
                    f"feature {key!r} holds {_KIND_WORDS[which]} values in {_where(locations, i)} but "
                    f"{_KIND_WORDS[known]} values in an earlier record; give a spec",
                    key=key,
                    record=_where(locations, i),
                )
    sampled = dtypes or {}
    return {
        key: VarLen(_DTYPE_OF_KIND[kind] if kind is not None else sampled.get(key, torch.float32))
        for key, kind in sorted(kinds.items())
    }


def decode_batch(
    records: Sequence[bytes],
    spec: SpecArg = None,
    *,
    locations: Locations = None,
    dtypes: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Decodes a batch of serialized Examples into columns.

    Args:
        records: serialized ``tf.train.Example`` messages.
        spec: feature key -> :class:`FixedLen` / :class:`VarLen` / :class:`FixedLenSequence` /
            :class:`RawTensor` / :class:`Image` or a shorthand (``"int"``, ``"float"``,
            ``"bytes"``); None decodes every feature as a VarLen of the type it holds.
        locations: a description of each record for error messages, e.g.
            ``"record 17 of 'train.tfrecord'"`` (default: its position in the batch).
        dtypes: with ``spec=None``, the type of keys whose Features in this batch hold no list
            (present, no kind set: an empty CSV cell in TFX), e.g. from
            :func:`torch_tfrecord.schema.sample_dtypes` over other records; a key typed by
            neither comes back as an empty float32 VarLen. The datasets sample their shards.

    Returns:
        Per feature: FixedLen numeric -> tensor ``[B, *shape]``; VarLen / FixedLenSequence numeric
        -> :class:`Ragged`; bytes / str -> a list per record; RawTensor -> a stacked tensor when its
        shape is static, else a list of tensors; Image -> a list of uint8 CHW tensors.

    Raises:
        ExampleDecodeError: a record is not a valid Example.
        MissingFeatureError, FeatureTypeError, FeatureShapeError: naming the key and record.

    Example:
        >>> spec = {"label": FixedLen((), torch.int64), "tokens": "int"}
        >>> batch = decode_batch(records, spec)  # doctest: +SKIP
        >>> batch["label"].shape, len(batch["tokens"])  # doctest: +SKIP
        (torch.Size([256]), 256)
    """
    if locations is not None and len(locations) != len(records):
        raise ValueError(f"{len(locations)} locations for {len(records)} records")
    normalized = normalize_spec(spec)

    def reference() -> dict[str, Any]:
        examples = _parse(records, Example, locations)
        maps = [example.features.feature for example in examples]
        specs = normalized if normalized is not None else _infer_batch_spec(maps, locations, dtypes)
        return _decode_features(maps, specs, locations)

    if normalized is None or not records:
        return reference()
    return _native_else_reference(lambda: native.decode_examples(records, normalized, locations), reference)


_T = TypeVar("_T")


def _native_else_reference(native_call: Callable[[], _T | None], reference: Callable[[], _T]) -> _T:
    """The native decoder's result when it runs and takes the batch; else the protobuf decoder's.

    A batch the native decoder rejects goes to the protobuf decoder, which raises the exact
    error (class, key, record, message). Should protobuf accept it, the two disagree: that is
    logged loudly, and the protobuf result is used.
    """
    rejected = None
    if native.decoder() == "native":
        try:
            decoded = native_call()
        except (native.Rejected, FeatureError) as error:
            rejected = error
        else:
            if decoded is not None:
                return decoded
    result = reference()
    if rejected is not None:
        logger.warning(
            "the native decoder rejected a batch that the protobuf decoder accepts (%s); using the "
            "protobuf result. Please report this with the records.",
            rejected,
        )
    return result


def _unbatch(value: Any) -> Any:
    if isinstance(value, torch.Tensor | Ragged | list):
        return value[0]
    raise AssertionError(f"unexpected column type {type(value).__name__}")


def decode_example(record: bytes, spec: SpecArg = None, *, location: str | None = None) -> dict[str, Any]:
    """Decodes one serialized Example: :func:`decode_batch` with a batch of one.

    Returns:
        Per feature: FixedLen -> tensor of ``shape`` (``bytes`` / ``str`` for shape ``()``);
        VarLen / FixedLenSequence -> 1-D (or ``[steps, *shape]``) tensor, or a list of bytes / str;
        RawTensor / Image -> a tensor.

    Example:
        >>> decode_example(encode_example({"label": 3}), {"label": FixedLen((), torch.int64)})
        {'label': tensor(3)}
    """
    batch = decode_batch([record], spec, locations=None if location is None else [location])
    return {key: _unbatch(value) for key, value in batch.items()}


def _sequence_spec(spec: Mapping[str, Any]) -> dict[str, FixedLenSequence | VarLen]:
    normalized = normalize_spec(spec) or {}
    for key, value in normalized.items():
        if not isinstance(value, FixedLenSequence | VarLen):
            raise SpecError(f"sequence feature {key!r}: use FixedLenSequence or VarLen, got {value!r}")
    return normalized  # type: ignore[return-value]


def _decode_feature_lists(
    lists_maps: Sequence[Any], spec: Mapping[str, FixedLenSequence | VarLen], locations: Locations
) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """Per key: steps of every record as one Ragged (or per-record lists), and the step counts."""
    sequences: dict[str, Any] = {}
    lengths: dict[str, torch.Tensor] = {}
    for key, feature_spec in spec.items():
        column = _Column(key, feature_spec, locations)
        kind = list_kind(feature_spec.dtype)
        inner = feature_spec.shape if isinstance(feature_spec, FixedLenSequence) else None
        numel = math.prod(inner) if inner is not None else None
        steps_per_record: list[list[Any]] = []
        for i, lmap in enumerate(lists_maps):
            if key not in lmap:
                if isinstance(feature_spec, FixedLenSequence) and not feature_spec.allow_missing:
                    raise column.missing(i)
                steps_per_record.append([])
                continue
            steps = [_values_of(key, f, kind, feature_spec, locations, i) for f in lmap[key].feature]
            if numel is not None:
                for step in steps:
                    if len(step) != numel:
                        raise column.wrong_count(i, f"{numel} values per step (shape {inner})", len(step))
            steps_per_record.append(steps)
        lengths[key] = torch.tensor([len(s) for s in steps_per_record], dtype=torch.int64)
        if kind == "bytes_list":
            rows = [[list(step) for step in steps] for steps in steps_per_record]
            if feature_spec.dtype is str:
                rows = [_decode_str(column, steps) for steps in rows]
            sequences[key] = [[step[0] for step in steps] for steps in rows] if inner == () else rows
        elif inner is not None:
            flat = [[x for step in steps for x in step] for steps in steps_per_record]
            sequences[key] = _flatten_ragged(column, flat, kind, feature_spec.dtype, inner, messages=False)
        else:
            sequences[key] = [
                _flatten_ragged(column, steps, kind, feature_spec.dtype, (), messages=False)
                for steps in steps_per_record
            ]
    return sequences, lengths


def _parse_sequences(
    records: Sequence[bytes],
    context_spec: SpecArg,
    sequence_spec: Mapping[str, Any],
    locations: Locations,
) -> tuple[dict[str, Any], dict[str, Any], dict[str, torch.Tensor]]:
    if locations is not None and len(locations) != len(records):
        raise ValueError(f"{len(locations)} locations for {len(records)} records")
    context_specs = normalize_spec(context_spec or {}) or {}
    sequence_specs = _sequence_spec(sequence_spec)

    def reference() -> tuple[dict[str, Any], dict[str, Any], dict[str, torch.Tensor]]:
        messages = _parse(records, SequenceExample, locations)
        context_maps = [m.context.feature for m in messages]
        context = _decode_features(context_maps, context_specs, locations)
        lists_maps = [m.feature_lists.feature_list for m in messages]
        sequences, lengths = _decode_feature_lists(lists_maps, sequence_specs, locations)
        return context, sequences, lengths

    if not records:
        return reference()
    return _native_else_reference(
        lambda: native.decode_sequences(records, context_specs, sequence_specs, locations), reference
    )


def decode_sequence_example(
    record: bytes,
    context_spec: SpecArg,
    sequence_spec: Mapping[str, Any],
    *,
    location: str | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Decodes one serialized SequenceExample.

    Args:
        record: a serialized ``tf.train.SequenceExample``.
        context_spec: specs of the context features (as for :func:`decode_example`).
        sequence_spec: feature list key -> :class:`FixedLenSequence` (each step ``shape``) or
            :class:`VarLen` (steps of any length).

    Returns:
        ``(context, sequences)``: a FixedLenSequence becomes a ``[steps, *shape]`` tensor (a list
        of bytes / str per step for those dtypes), a VarLen a :class:`Ragged` of its steps.
    """
    context, sequences, _ = _parse_sequences(
        [record], context_spec, sequence_spec, None if location is None else [location]
    )
    return {k: _unbatch(v) for k, v in context.items()}, {k: _unbatch(v) for k, v in sequences.items()}


def decode_sequence_batch(
    records: Sequence[bytes],
    context_spec: SpecArg,
    sequence_spec: Mapping[str, Any],
    *,
    locations: Locations = None,
) -> tuple[dict[str, Any], dict[str, Any], dict[str, torch.Tensor]]:
    """Decodes a batch of SequenceExamples, padded like TensorFlow's ``parse_sequence_example``.

    Returns:
        ``(context, sequences, lengths)``: context columns as :func:`decode_batch`; each
        FixedLenSequence numeric feature as a ``[B, max_steps, *shape]`` tensor padded with its
        default (0 when None); bytes / str features as per-record lists of steps; VarLen
        features as a list of per-record :class:`Ragged`; ``lengths[key]`` the int64 step count
        of each record.
    """
    context, sequences, lengths = _parse_sequences(records, context_spec, sequence_spec, locations)
    spec = _sequence_spec(sequence_spec)
    for key, value in sequences.items():
        feature_spec = spec[key]
        if isinstance(value, Ragged) and isinstance(feature_spec, FixedLenSequence):
            padding = 0 if feature_spec.default is None else feature_spec.default[0]
            sequences[key] = value.to_padded(padding)
    return context, sequences, lengths
