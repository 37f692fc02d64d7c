"""TFDS records decoded as ``tfds.as_numpy`` gives them, in PyTorch's conventions.

:class:`FeatureDecoder` holds the flat spec the records are decoded with (one entry per key
TFDS wrote into each Example: nested names joined by ``/``) and turns decoded columns into
nested dicts with TFDS's values (images uint8 CHW, text str). How each connector is stored is
told in :mod:`.features`.
"""

from __future__ import annotations

import dataclasses
import math
import zlib
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch

from ...codec.ragged import Ragged
from ...codec.spec import FeatureSpec, FixedLen, FixedLenSequence, VarLen
from ...codec.spec import Image as ImageSpec
from ...codec.tf_jpeg import DCT
from ...errors import FeatureError
from .features import (
    DIRECT_DTYPES,
    TORCH_DTYPES,
    Audio,
    Feature,
    FeaturesDict,
    Image,
    Sequence,
    Shape,
    Tensor,
    Text,
    UnsupportedFeatureError,
)
from .media import decode_audio, decode_tfds_image

__all__ = ["FeatureDecoder"]


@dataclasses.dataclass(frozen=True)
class _Leaf:
    """One leaf connector, where it sits, and the Example keys it reads."""

    path: tuple[str, ...]
    feature: Tensor | Image
    steps: tuple[int | None, ...]  # the lengths of the Sequences around it, outermost first
    containers: tuple[str, ...] = ()  # their kinds: Sequence, Dataset (RLDS steps), Video

    @property
    def key(self) -> str:
        return "/".join(self.path)


def _leaves(
    feature: Feature, path: tuple[str, ...], steps: tuple[int | None, ...], containers: tuple[str, ...] = ()
) -> Iterator[_Leaf]:
    if isinstance(feature, FeaturesDict):
        for key, child in feature.features.items():
            yield from _leaves(child, (*path, key), steps, containers)
    elif isinstance(feature, Sequence):
        yield from _leaves(feature.feature, path, (*steps, feature.length), (*containers, feature.kind))
    elif isinstance(feature, Tensor | Image):
        yield _Leaf(path, feature, steps, containers)
    else:
        raise UnsupportedFeatureError(
            f"feature {'/'.join(path)!r}: connector {feature.kind} is not supported"
        )


def _unsupported(leaf: _Leaf, why: str) -> UnsupportedFeatureError:
    return UnsupportedFeatureError(f"feature {leaf.key!r} ({leaf.feature.describe()}): {why}")


def _mode(image: Image) -> Any:
    channels = image.shape[-1] if image.shape else None
    return {3: "RGB", 1: "L"}.get(channels, "unchanged")  # type: ignore[arg-type]


def _numeric_spec(shape: Shape, dtype: str) -> FeatureSpec:
    """The spec of a list of numbers TFDS wrote for ``shape`` (with at most one None)."""
    read_as = TORCH_DTYPES[dtype] if dtype in DIRECT_DTYPES else torch.int64
    if None not in shape:
        return FixedLen(tuple(d for d in shape if d is not None), read_as)
    if shape[0] is None and None not in shape[1:]:
        return FixedLenSequence(tuple(d for d in shape[1:] if d is not None), read_as, allow_missing=True)
    return VarLen(read_as)


class _Converter:
    """Turns one leaf's decoded columns into its values, per sample and per batch."""

    def __init__(self, leaf: _Leaf, dct: DCT = "fast") -> None:
        self.leaf = leaf
        self.dct = dct
        self.spec: dict[str, FeatureSpec] = {}
        feature = leaf.feature
        steps = leaf.steps
        self.ragged = len(steps) >= 2  # written as flat values and the row lengths of each level
        self.levels = [f"{leaf.key}/ragged_row_lengths_{level}" for level in range(len(steps) - 1)]
        self.full_shape: Shape = (*steps, *feature.shape)
        if isinstance(feature, Image):
            self.kind = "image"
            if not steps and feature.dtype == "uint8":
                self.spec[leaf.key] = ImageSpec(_mode(feature), dct=dct)  # decoded by the codec, in threads
            else:
                self._bytes_spec()
            return
        self.text = isinstance(feature, Text)
        if feature.dtype == "string":
            if self.ragged or (feature.shape and steps) or None in feature.shape[1:]:
                raise _unsupported(
                    leaf, "strings in Sequences, or with a None dimension after the first, are not read here"
                )
            self.kind = "string"
            self.spec[leaf.key] = _string_spec(_flat(self.full_shape), str if self.text else bytes)
            return
        if isinstance(feature, Audio) and feature.lazy_decode:
            if steps:
                raise _unsupported(leaf, "Audio stored encoded in a Sequence is not read here")
            self.kind = "audio"
            self.spec[leaf.key] = FixedLen((), bytes)
            return
        if feature.encoding != "none":
            if self.ragged:
                raise _unsupported(leaf, "encoded tensors in two levels of Sequence are not read here")
            self.kind = "encoded"
            self.dynamic = feature.shape.count(None) > 1
            value_key = leaf.key + "/value" if self.dynamic else leaf.key
            self.spec[value_key] = _string_spec(steps)
            if self.dynamic:
                self.spec[leaf.key + "/shape"] = _numeric_spec((*steps, len(feature.shape)), "int64")
            return
        self.kind = "numeric"
        if (*steps, *feature.shape).count(None) > 1 and not self.ragged:
            raise _unsupported(
                leaf, "more than one None dimension needs encoding='bytes' (TFDS cannot write it)"
            )
        if self.ragged:
            if None in feature.shape:
                raise _unsupported(leaf, "a None dimension inside two levels of Sequence is not read here")
            self.spec[leaf.key + "/ragged_flat_values"] = _numeric_spec((None, *feature.shape), feature.dtype)
            self.spec.update(dict.fromkeys(self.levels, VarLen(torch.int64)))
            return
        self.spec[leaf.key] = _numeric_spec(self.full_shape, feature.dtype)

    def _bytes_spec(self) -> None:
        """Encoded values (images) read as bytes: per level of Sequence as TFDS wrote them."""
        if not self.ragged:
            self.spec[self.leaf.key] = _string_spec(self.leaf.steps)
            return
        self.spec[self.leaf.key + "/ragged_flat_values"] = FixedLenSequence((), bytes, allow_missing=True)
        self.spec.update(dict.fromkeys(self.levels, VarLen(torch.int64)))

    # -- values ---------------------------------------------------------------------------

    def _cast(self, tensor: torch.Tensor) -> torch.Tensor:
        dtype = self.leaf.feature.dtype
        if dtype in DIRECT_DTYPES:
            return tensor
        if dtype == "uint64":  # written as the int64 of the same bits
            return tensor.view(torch.uint64)
        return tensor.to(TORCH_DTYPES[dtype])

    def _shape_for(self, numel: int) -> list[int]:
        shape = self.full_shape
        known = math.prod(d for d in shape if d is not None)
        return [numel // known if known and d is None else (0 if d is None else d) for d in shape]

    def _image(self, blob: bytes) -> torch.Tensor:
        image = self.leaf.feature
        assert isinstance(image, Image)
        channels = image.shape[-1] if image.shape else None
        try:
            return decode_tfds_image(blob, image.dtype, channels, self.dct)
        except ValueError as error:
            raise FeatureError(
                f"feature {self.leaf.key!r} ({image.describe()}): {error}", key=self.leaf.key
            ) from None

    def _image_stack(self, blobs: list[bytes]) -> torch.Tensor:
        image = self.leaf.feature
        assert isinstance(image, Image)
        frames = [self._image(blob) for blob in blobs]
        if frames:
            return torch.stack(frames)
        height, width, channels = (d or 0 for d in (image.shape[-3:] if len(image.shape) >= 3 else (0, 0, 0)))
        return torch.zeros((0, channels, height, width), dtype=TORCH_DTYPES[image.dtype])

    def _levels(self, columns: Mapping[str, Any]) -> list[list[int]]:
        return [torch.as_tensor(columns[key]).tolist() for key in self.levels]

    def _audio(self, blob: bytes) -> torch.Tensor:
        audio = self.leaf.feature
        assert isinstance(audio, Audio)
        try:
            return decode_audio(blob, audio.dtype, audio.shape[1] if len(audio.shape) > 1 else None)
        except ValueError as error:
            raise FeatureError(
                f"feature {self.leaf.key!r} ({audio.describe()}): {error}", key=self.leaf.key
            ) from None

    def _decode_tensor(self, blob: bytes, shape: list[int] | None) -> torch.Tensor:
        feature = self.leaf.feature
        assert isinstance(feature, Tensor)
        if feature.encoding == "zlib":
            blob = zlib.decompress(blob)
        dtype = np.dtype(feature.dtype) if feature.dtype != "bfloat16" else np.dtype(np.uint16)
        array = np.frombuffer(bytearray(blob), dtype=dtype.newbyteorder("<"))
        if shape is None:
            dims = feature.shape
            known = math.prod(d for d in dims if d is not None)
            shape = [array.size // known if d is None and known else (d or 0) for d in dims]
        try:
            tensor = torch.from_numpy(array.astype(dtype.newbyteorder("="), copy=False).reshape(shape))
        except ValueError:
            raise FeatureError(
                f"{array.size} values of {feature.dtype} do not fit the shape {shape}", key=self.leaf.key
            ) from None
        return tensor.view(torch.bfloat16) if feature.dtype == "bfloat16" else tensor

    def _stack(self, tensors: list[torch.Tensor]) -> Any:
        """The steps' tensors as one ``[steps, ...]`` tensor (a list when their shapes differ)."""
        if tensors and all(t.shape == tensors[0].shape for t in tensors):
            return torch.stack(tensors)
        if tensors:
            return tensors
        feature = self.leaf.feature
        assert isinstance(feature, Tensor)
        return torch.zeros((0, *(d or 0 for d in feature.shape)), dtype=TORCH_DTYPES[feature.dtype])

    def sample(self, columns: Mapping[str, Any]) -> Any:
        key = self.leaf.key
        if self.kind == "image":
            if self.ragged:  # Sequences of Sequences of images: lists of [frames, C, H, W]
                *outer, inner = self._levels(columns)
                nested: Any = [
                    self._image_stack(blobs) for blobs in _group(columns[key + "/ragged_flat_values"], inner)
                ]
                for lengths in reversed(outer):
                    nested = _group(nested, lengths)
                return nested
            if self.leaf.steps:
                return self._image_stack(list(columns[key]))
            return columns[key] if self.leaf.feature.dtype == "uint8" else self._image(columns[key])
        if self.kind == "audio":
            return self._audio(columns[key])
        if self.kind == "string":
            if len(self.leaf.feature.shape) > 1:  # [rows, *inner] as nested lists
                return _nested(list(columns[key]), self.full_shape[1:])
            return columns[key]
        if self.kind == "encoded":
            if self.dynamic:
                blobs, shapes = columns[key + "/value"], columns[key + "/shape"]
                if not self.leaf.steps:
                    return self._decode_tensor(blobs, shapes.tolist())
                return self._stack(
                    [self._decode_tensor(b, s) for b, s in zip(blobs, shapes.tolist(), strict=True)]
                )
            if not self.leaf.steps:
                return self._decode_tensor(columns[key], None)
            return self._stack([self._decode_tensor(blob, None) for blob in columns[key]])
        if self.ragged:  # two levels: a Ragged of the steps; each level more: a list around it
            values = self._cast(columns[key + "/ragged_flat_values"])
            *outer, inner = self._levels(columns)
            offsets = torch.zeros(len(inner) + 1, dtype=torch.int64)
            torch.cumsum(torch.tensor(inner, dtype=torch.int64), 0, out=offsets[1:])
            rows: Any = Ragged(values, offsets)
            for lengths in reversed(outer):
                rows = _group(rows, lengths)
            return rows
        value = self._cast(columns[key])
        return value.reshape(self._shape_for(value.numel())) if isinstance(self.spec[key], VarLen) else value

    def batch(self, columns: Mapping[str, Any], size: int) -> Any:
        key = self.leaf.key
        spec = next(iter(self.spec.values()))
        if self.kind == "numeric" and not self.ragged and not isinstance(spec, VarLen):
            column = columns[key]
            if isinstance(column, Ragged):
                return Ragged(self._cast(column.values), column.offsets)
            return self._cast(column)
        if self.kind == "string" and len(self.leaf.feature.shape) <= 1:
            return columns[key]
        if self.kind == "image" and not self.leaf.steps and self.leaf.feature.dtype == "uint8":
            images = columns[key]
            return torch.stack(images) if None not in self.leaf.feature.shape and images else images
        rows = [self.sample({k: columns[k][i] for k in self.spec}) for i in range(size)]
        static = None not in self.full_shape[len(self.leaf.steps) :]
        if self.leaf.steps and self.leaf.steps[0] is None and not self.ragged and static:
            return Ragged.from_rows(rows) if rows else rows  # steps vary: a Ragged of the steps
        if static and rows and all(isinstance(r, torch.Tensor) for r in rows):
            return torch.stack(rows)
        return rows


def _flat(shape: Shape) -> Shape:
    """The shape of the flat list TFDS writes for values of ``shape``: one dimension or none."""
    if len(shape) <= 1:
        return shape
    return (None,) if None in shape else (math.prod(d for d in shape if d is not None),)


def _nested(values: list[Any], inner: Shape) -> list[Any]:
    """A flat list as nested lists of ``[len // prod(inner), *inner]``."""
    for size in reversed(inner):
        values = [values[i : i + size] for i in range(0, len(values), size)] if size else []
    return values


def _group(items: Any, lengths: list[int]) -> list[Any]:
    """``items`` (a list or a Ragged) cut into consecutive groups of ``lengths``."""
    groups, at = [], 0
    for length in lengths:
        groups.append(items[at : at + length])
        at += length
    return groups


def _string_spec(shape: Shape, dtype: type[bytes] | type[str] = bytes) -> FeatureSpec:
    if not shape:
        return FixedLen((), dtype)
    if shape[0] is None:
        return FixedLenSequence((), dtype, allow_missing=True)
    return FixedLen((shape[0],), dtype)


def _nest(flat: Mapping[tuple[str, ...], Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    nested: dict[str, Any] = {}
    for path, value in flat.items():
        node = nested
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
    nested.update(extra)
    return nested


class FeatureDecoder:
    """The flat spec of a TFDS feature tree, and the step from its decoded columns to TFDS's values.

    Args:
        features: the connector tree (:func:`.features.parse_features`).
        batched: True when it is given decoded batches (the datasets' batch mode), False for
            samples.
        dct: the inverse DCT of JPEG images: ``"fast"`` (TensorFlow's default, so the pixels
            equal ``tfds.as_numpy``'s) or ``"accurate"`` (``INTEGER_ACCURATE``).

    Raises:
        UnsupportedFeatureError: a connector (or a nesting of one) that is not read here.
    """

    def __init__(self, features: Feature, *, batched: bool, dct: DCT = "fast") -> None:
        self.features = features
        self.batched = batched
        self.converters = [_Converter(leaf, dct) for leaf in _leaves(features, (), ())]
        self.spec: dict[str, FeatureSpec] = {}
        for converter in self.converters:
            self.spec.update(converter.spec)

    def __call__(self, columns: dict[str, Any]) -> dict[str, Any]:
        """Nested values from decoded columns (a sample's or a batch's); other keys pass through."""
        extra = {key: value for key, value in columns.items() if key not in self.spec}
        if self.batched:
            size = len(next(iter(columns.values()))) if columns else 0
            flat = {c.leaf.path: c.batch(columns, size) for c in self.converters}
        else:
            flat = {c.leaf.path: c.sample(columns) for c in self.converters}
        return _nest(flat, extra)

    def rows(self) -> list[tuple[str, str, str]]:
        """``(feature path, connector, spec it is read with)`` per leaf: what ``schema`` prints."""
        rows = []
        for converter in self.converters:
            specs = ", ".join(
                repr(spec) if key == converter.leaf.key else f"{key[len(converter.leaf.key) :]}: {spec!r}"
                for key, spec in converter.spec.items()
            )
            rows.append((converter.leaf.key, _steps_text(converter.leaf), specs))
        return rows


def _steps_text(leaf: _Leaf) -> str:
    text = leaf.feature.describe()
    for length, kind in zip(reversed(leaf.steps), reversed(leaf.containers), strict=True):
        text = f"{kind}({text}{'' if length is None else f', length={length}'})"
    return text
