"""Decoded columns into what users get: tensors, :class:`Ragged`, text, RawTensor and images.

Both decoder backends (:mod:`torch_tfrecord.codec.protobuf` and :mod:`torch_tfrecord.codec.native`) turn a
batch of records into the same intermediate columns: per feature the values of every record
concatenated (a NumPy int64 / float32 array, or the bytes values) and int64 offsets saying where
each record's values start. This module turns such columns into the output types, once for both,
so the two give the same values and raise the same errors (class, key, record and message).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from ..errors import FeatureShapeError, FeatureTypeError, MissingFeatureError
from ..support.stages import IMAGE_DECODE, begin, end
from .ragged import Ragged
from .spec import FixedLen, Image, RawTensor

__all__ = [
    "Column",
    "Locations",
    "byte_rows",
    "byte_scalars",
    "cast",
    "fixed_tensor",
    "images",
    "ragged",
    "ragged_steps",
    "raw_tensor",
    "record_of_flat",
    "stack_raw",
    "text_steps",
    "where",
]

Locations = Sequence[str] | None


def where(locations: Locations, i: int) -> str:
    """Record ``i`` of the batch as error messages name it."""
    return locations[i] if locations is not None else f"record {i} of the batch"


class Column:
    """One feature of a batch: its key, spec and record names, and the errors that name them."""

    def __init__(self, key: str, spec: Any, locations: Locations) -> None:
        self.key = key
        self.spec = spec
        self.locations = locations

    def missing(self, i: int, no_list: bool = False) -> MissingFeatureError:
        """Record ``i`` lacks the key (or, ``no_list``, its Feature sets no list) and the spec
        has no default."""
        what, why = "is missing from", ""
        if no_list:
            what = "has no values in"
            why = " (a Feature with no list set counts as missing, as in TensorFlow)"
        at = where(self.locations, i)
        return MissingFeatureError(
            f"feature {self.key!r} {what} {at} and {self.spec!r} has no default{why}",
            key=self.key,
            record=at,
        )

    def type_error(self, i: int, detail: str) -> FeatureTypeError:
        """``feature 'key' of <record><detail>``, as a FeatureTypeError."""
        at = where(self.locations, i)
        return FeatureTypeError(f"feature {self.key!r} of {at}{detail}", key=self.key, record=at)

    def wrong_count(self, i: int, expected: str, found: int) -> FeatureShapeError:
        return FeatureShapeError(
            f"feature {self.key!r} of {where(self.locations, i)}: {self.spec!r} expects {expected}, "
            f"found {found} values",
            key=self.key,
            record=where(self.locations, i),
        )


def cast(key: str, array: np.ndarray[Any, Any], dtype: Any, record_of: Callable[[int], str]) -> torch.Tensor:
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
        converted = tensor.to(dtype)
        if tensor.dtype.is_floating_point and torch.finfo(dtype).max >= torch.finfo(tensor.dtype).max:
            return converted  # a wider float (float32 -> float64): every value fits
        bad = torch.nonzero(torch.isinf(converted) & ~torch.isinf(tensor)).reshape(-1).numpy()
        if not len(bad):
            return converted
        kind = str(dtype)
    if len(bad):
        position = int(bad[0])
        raise FeatureShapeError(
            f"feature {key!r} of {record_of(position)}: value {array[position].item()!r} does not fit {kind}",
            key=key,
            record=record_of(position),
        )
    return tensor.to(dtype)


def record_of_flat(offsets: npt.NDArray[np.int64], locations: Locations) -> Callable[[int], str]:
    """The record holding flat value ``position``, given each record's first value offset."""
    return lambda position: where(locations, int(np.searchsorted(offsets, position, side="right")) - 1)


def fixed_tensor(column: Column, spec: FixedLen, flat: np.ndarray[Any, Any], n: int) -> torch.Tensor:
    """A FixedLen numeric column (``n`` records of ``numel`` values each) as ``[n, *shape]``."""
    numel = max(math.prod(spec.shape), 1)
    tensor = cast(column.key, flat, spec.dtype, lambda p: where(column.locations, p // numel))
    return tensor.reshape(n, *spec.shape)


def ragged(
    column: Column,
    flat: np.ndarray[Any, Any],
    offsets: npt.NDArray[np.int64],
    dtype: Any,
    inner: tuple[int, ...],
) -> Ragged:
    """Records of whole steps of shape ``inner``: ``offsets[i]`` is record ``i``'s first value."""
    numel = math.prod(inner)
    values = cast(column.key, flat, dtype, record_of_flat(offsets, column.locations))
    rows = offsets // max(numel, 1) if numel else np.zeros_like(offsets)
    return Ragged(values.reshape(-1, *inner), torch.from_numpy(rows))


def ragged_steps(
    column: Column,
    flat: np.ndarray[Any, Any],
    step_ends: npt.NDArray[np.int64],
    record_steps: npt.NDArray[np.int64],
    dtype: Any,
) -> list[Ragged]:
    """Per record a :class:`Ragged` of its steps (a VarLen feature list).

    ``step_ends``: 0 then the end of every step's values, all records together; record ``i``
    holds steps ``record_steps[i]`` to ``record_steps[i + 1]``.
    """
    tensor = cast(column.key, flat, dtype, record_of_flat(step_ends[record_steps], column.locations))
    out = []
    for i in range(len(record_steps) - 1):
        a, b = int(record_steps[i]), int(record_steps[i + 1])
        base = int(step_ends[a])
        out.append(Ragged(tensor[base : int(step_ends[b])], torch.from_numpy(step_ends[a : b + 1] - base)))
    return out


def _text(column: Column, i: int, values: Sequence[Any]) -> list[str]:
    try:
        return [v if isinstance(v, str) else v.decode("utf-8") for v in values]
    except UnicodeDecodeError as error:
        raise column.type_error(i, f": bytes are not UTF-8 text ({error})") from None


def byte_rows(column: Column, rows: list[list[bytes]], scalar: bool = False) -> list[Any]:
    """Per record its bytes values (``str`` specs: UTF-8 text); with ``scalar`` its only value."""
    if column.spec.dtype is str:
        rows = [_text(column, i, values) for i, values in enumerate(rows)]  # type: ignore[misc]
    return [row[0] for row in rows] if scalar else rows


def byte_scalars(column: Column, values: list[bytes]) -> list[Any]:
    """Each record's only bytes value (``str`` specs: UTF-8 text)."""
    if column.spec.dtype is str:
        return [_text(column, i, (value,))[0] for i, value in enumerate(values)]
    return values


def text_steps(column: Column, records: list[list[list[bytes]]]) -> list[list[list[Any]]]:
    """Per record its steps of bytes values, as UTF-8 text for ``str`` specs."""
    if column.spec.dtype is not str:
        return records  # type: ignore[return-value]
    return [[_text(column, i, step) for step in steps] for i, steps in enumerate(records)]


def raw_tensor(column: Column, spec: RawTensor, i: int, data: Any, dims: list[int]) -> torch.Tensor:
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


def stack_raw(spec: RawTensor, tensors: list[torch.Tensor]) -> Any:
    """A static shape's tensors stacked into one; otherwise the list."""
    return torch.stack(tensors) if spec.is_static and tensors else tensors


def images(
    column: Column, spec: Image, encoded: Callable[[], Sequence[bytes]]
) -> list[torch.Tensor] | torch.Tensor:
    """Each record's image (one ``[B, C, H, W]`` tensor when the spec has a size); ``encoded()``
    gives their bytes once an image library is known to exist."""
    token = begin()  # (the image library's first import included)
    from .image import image_backend
    from .image_batch import UndecodableImage, decode_images

    image_backend()  # no image library: an ImportError naming the extra, not "not an image"
    if spec.dct == "fast":  # no library for TF's pixels: an ImportError naming the extra
        from . import image_roi
        from .tf_jpeg import crop_library, fast_dct_library

        fast_dct_library()
        if spec.crop != "resize" and not image_roi.available():  # with _jpeg only CMYK JPEGs need it
            crop_library()
    data = encoded()
    try:
        decoded = decode_images(data, spec)
        end(IMAGE_DECODE, token, sum(map(len, data)))
        return decoded
    except UndecodableImage as failure:  # say which record and key
        raw = data[failure.index]
        detail = f" is not a decodable image ({len(raw)} bytes, starting {bytes(raw[:8])!r})"
        raise column.type_error(failure.index, f"{detail}: {failure.cause}") from failure.cause
