"""Samples of any dataset as Examples, and the spec that reads them back; pure, no I/O.

A sample is a dict (nested dicts become ``a/b`` keys; a tuple is named by ``keys``). Values
become features by :func:`~torch_tfrecord.encode_example`'s rules, and each leaves a
*signature* (its kind, dtype and shape) from which :class:`SpecBuilder` makes the spec:

- numbers, numeric arrays and tensors: ``FixedLen(shape, dtype)`` while every row has the same
  shape (a 1-D one that varies, or a key some rows lack: ``VarLen``);
- str / bytes (and lists of them): ``FixedLen((), str)``, ``FixedLen((n,), bytes)``, ``VarLen``;
- uint8 (and other unsigned) arrays and tensors, ambiguous as a list of ints: their raw bytes,
  ``RawTensor(dtype, shape)`` (one shape for all rows);
- PIL images: encoded as PNG or JPEG, ``Image(mode)``.

A value of another kind than the same key of an earlier row, or nested deeper than a feature
can hold, is a :class:`ConversionError` naming the key and the row.
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
import torch

from ..codec.encode import BytesList, encode_example
from ..codec.spec import UNSIGNED_DTYPES, FeatureSpec, FixedLen, Image, RawTensor, VarLen, list_kind
from ._write import ConversionError

__all__ = ["ImageFormat", "SampleEncoder", "Signature", "SpecBuilder", "flatten_sample"]

ImageFormat = Literal["png", "jpeg"]
Signature = tuple[
    str, Any, "tuple[int, ...] | None"
]  # kind ("num", "text", "raw", "image", "empty"), dtype, shape

_NUMPY_TO_TORCH = {
    np.dtype(name): getattr(torch, name)
    for name in ("bool", "int8", "int16", "int32", "int64", "float16", "float32", "float64")
}
_RAW = {np.dtype(str(dtype).removeprefix("torch.")): dtype for dtype in (torch.uint8, *UNSIGNED_DTYPES)}


def _is_pil(value: Any) -> bool:
    return type(value).__module__.startswith("PIL.") and hasattr(value, "save")


def flatten_sample(sample: Any, row: int, keys: Sequence[str] | None = None) -> dict[str, Any]:
    """A sample as one flat dict, nested dicts joined with ``/``."""
    if isinstance(sample, tuple | list) and keys is not None:
        if len(sample) != len(keys):
            raise ConversionError(f"row {row}: a sample of {len(sample)} items, but {len(keys)} keys")
        sample = dict(zip(keys, sample, strict=True))
    if not isinstance(sample, Mapping):
        raise ConversionError(
            f"row {row}: a sample must be a dict of features, got {type(sample).__name__}"
            + ("; name a tuple's items with keys=(...)" if isinstance(sample, tuple | list) else "")
        )
    flat: dict[str, Any] = {}
    _flatten(sample, "", flat, row)
    return flat


def _flatten(sample: Mapping[Any, Any], prefix: str, flat: dict[str, Any], row: int) -> None:
    for key, value in sample.items():
        if not isinstance(key, str) or not key:
            raise ConversionError(f"row {row}: feature keys are non-empty str, got {prefix}{key!r}")
        name = prefix + key
        if isinstance(value, Mapping):
            _flatten(value, name + "/", flat, row)
        elif value is not None:
            flat[name] = value


@dataclasses.dataclass(frozen=True)
class SampleEncoder:
    """Turns one sample into a serialized Example and the signature of each of its features.

    Args:
        keys: names of a tuple sample's items (``("image", "label")``), None for dict samples.
        image_format: how PIL images are stored.
        jpeg_quality: the quality of JPEG images.
    """

    keys: tuple[str, ...] | None = None
    image_format: ImageFormat = "png"
    jpeg_quality: int = 95

    def __post_init__(self) -> None:
        if self.image_format not in ("png", "jpeg"):
            raise ValueError(f"{self.image_format=} must be 'png' or 'jpeg'")

    def __call__(self, sample: Any, row: int) -> tuple[bytes, dict[str, Signature]]:
        features: dict[str, Any] = {}
        signatures: dict[str, Signature] = {}
        for key, value in flatten_sample(sample, row, self.keys).items():
            try:
                features[key], signatures[key] = self._feature(value)
            except (TypeError, ValueError) as error:
                raise ConversionError(f"row {row} key {key!r}: {error}") from None
        try:
            return encode_example(features), signatures
        except (TypeError, ValueError) as error:
            raise ConversionError(f"row {row}: {error}") from None

    def _feature(self, value: Any) -> tuple[Any, Signature]:
        if _is_pil(value):
            return BytesList([self._image(value)]), ("image", _image_mode(value.mode), None)
        if isinstance(value, str | bytes | bytearray):
            return value, ("text", str if isinstance(value, str) else bytes, ())
        if isinstance(value, bool | int | np.integer | np.bool_):
            return value, ("num", torch.bool if isinstance(value, bool | np.bool_) else torch.int64, ())
        if isinstance(value, float | np.floating):
            return value, ("num", torch.float32, ())
        if isinstance(value, torch.Tensor):
            tensor = value.detach().cpu()
            value = (tensor.float() if tensor.dtype == torch.bfloat16 else tensor).numpy()
        elif isinstance(value, list | tuple):
            value = _list_array(value)
        if not isinstance(value, np.ndarray):
            raise TypeError(f"cannot store a {type(value).__name__} (not a number, text, array or PIL image)")
        return _array(value)

    def _image(self, image: Any) -> bytes:
        buffer = io.BytesIO()
        if self.image_format == "jpeg":
            image.save(buffer, format="JPEG", quality=self.jpeg_quality)
        else:
            image.save(buffer, format="PNG")
        return buffer.getvalue()


def _image_mode(mode: str) -> str:
    return mode if mode in ("RGB", "L") else "unchanged"


def _list_array(values: Sequence[Any]) -> np.ndarray[Any, Any]:
    if any(isinstance(v, Mapping) or _is_pil(v) for v in values):
        raise TypeError("a list of dicts or images is nested deeper than a feature can hold")
    if values and all(isinstance(v, str | bytes) for v in values):
        return np.array(values, dtype=object)
    try:
        array = np.asarray(values)
    except ValueError:
        raise TypeError(
            "a list of lists of different lengths is nested deeper than a feature can hold"
        ) from None
    if len(values) == 0:
        return np.zeros(0, dtype=object)
    # Python floats are float32 features, in a list as alone (numpy would make them float64).
    return array.astype(np.float32) if array.dtype == np.float64 else array


def _array(array: np.ndarray[Any, Any]) -> tuple[Any, Signature]:
    if array.dtype.kind in "USO":
        items = array.reshape(-1).tolist()
        if array.size == 0:
            return [], ("empty", None, (0,))
        if array.ndim > 1:
            raise TypeError(f"text of shape {array.shape} is nested deeper than a feature can hold (1-D)")
        if not all(isinstance(v, str | bytes) for v in items):
            raise TypeError("a list mixes text with other values")
        kind = str if all(isinstance(v, str) for v in items) else bytes
        return items, ("text", kind, array.shape)
    if array.dtype in _RAW:
        raw = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()
        return BytesList([raw]), ("raw", _RAW[array.dtype], array.shape)
    if array.dtype not in _NUMPY_TO_TORCH:
        raise TypeError(f"cannot store an array of dtype {array.dtype}")
    return array, ("num", _NUMPY_TO_TORCH[array.dtype], array.shape)


@dataclasses.dataclass
class _Seen:
    signature: Signature
    rows: int  # rows that have the key
    first_missing: int | None  # the first row without it


class SpecBuilder:
    """Merges the signatures of the rows written, in row order, into the spec that reads them."""

    def __init__(self) -> None:
        self._seen: dict[str, _Seen] = {}
        self.rows = 0

    def add(self, row: int, signatures: Mapping[str, Signature]) -> None:
        """Adds one row's signatures.

        Raises:
            ConversionError: a kind unlike earlier rows', or a key that only a fixed-shape
                feature can hold (a raw array, an image, an array of 2+ dimensions) missing from
                some rows; naming the key and the row.
        """
        for key, seen in self._seen.items():
            if key not in signatures:
                _check_optional(key, seen.signature, row)
                if seen.first_missing is None:
                    seen.first_missing = row
        for key, signature in signatures.items():
            found = self._seen.get(key)
            if found is None:
                if self.rows:
                    _check_optional(key, signature, 0)
                self._seen[key] = _Seen(signature, 1, 0 if self.rows else None)
            else:
                if found.first_missing is not None:
                    _check_optional(key, signature, found.first_missing)
                found.signature = _merge(found.signature, signature, key, row)
                found.rows += 1
        self.rows += 1

    def spec(self) -> dict[str, FeatureSpec]:
        """The spec of every key seen, in the order first seen."""
        return {key: self._feature(key, seen) for key, seen in self._seen.items()}

    def _feature(self, key: str, seen: _Seen) -> FeatureSpec:
        kind, dtype, shape = seen.signature
        if kind == "empty":
            return VarLen(torch.float32)
        if kind == "raw":
            return RawTensor(dtype, shape or ())
        if kind == "image":
            return Image(dtype)
        if shape is None or seen.rows < self.rows:
            return VarLen(dtype)
        return FixedLen(shape, dtype)


def _check_optional(key: str, signature: Signature, missing_row: int) -> None:
    kind, _, shape = signature
    if kind in ("raw", "image") or (kind in ("num", "text") and shape is not None and len(shape) > 1):
        raise ConversionError(
            f"row {missing_row} key {key!r}: missing, but other rows hold {_describe(signature)}"
            + ("" if kind == "image" else f" of shape {shape}")
            + " (a feature some rows lack is read as a flat list: only numbers, text and 1-D arrays)"
        )


def _describe(signature: Signature) -> str:
    kind, dtype, _ = signature
    if kind == "num":
        return f"{list_kind(dtype).removesuffix('_list')} numbers"
    return {"text": "text", "raw": "a raw array", "image": "an image", "empty": "an empty list"}[kind]


def _merge(old: Signature, new: Signature, key: str, row: int) -> Signature:
    if new[0] == "empty":
        if old[0] == "empty":
            return old
        new, old = old, new
    if old[0] == "empty":
        return (
            (new[0], new[1], new[2] if new[2] == (0,) else None)
            if new[0] in ("num", "text")
            else _refuse(old, new, key, row)
        )
    if old[0] != new[0] or (old[0] == "num" and list_kind(old[1]) != list_kind(new[1])):
        _refuse(old, new, key, row)
    kind, dtype, shape = old
    if kind == "image":
        return (kind, dtype if dtype == new[1] else "unchanged", None)
    if kind == "raw":
        if (dtype, shape) != new[1:]:
            raise ConversionError(
                f"row {row} key {key!r}: a {new[1]} array of shape {new[2]}, but earlier rows hold "
                f"{dtype} of shape {shape} (a raw array has one shape: store images as PIL images)"
            )
        return old
    if dtype != new[1]:
        dtype = (
            bytes if kind == "text" else torch.int64 if list_kind(dtype) == "int64_list" else torch.float32
        )
    if shape != new[2]:
        for found in (shape, new[2]):
            if found is not None and len(found) > 1:
                raise ConversionError(
                    f"row {row} key {key!r}: shape {new[2]}, but earlier rows have {shape}: a shape that "
                    "varies is 1-D only (a feature is a flat list; store the shape as another feature)"
                )
        shape = None
    return (kind, dtype, shape)


def _refuse(old: Signature, new: Signature, key: str, row: int) -> Signature:
    raise ConversionError(
        f"row {row} key {key!r}: {_describe(new)}, but earlier rows hold {_describe(old)} (one type per key)"
    )
