"""TFDS feature connectors (``features.json``) as feature specs, and their values as PyTorch's.

:func:`parse_features` reads ``features.json`` into a tree of connectors (:class:`FeaturesDict`,
:class:`Sequence`, :class:`Tensor`, :class:`ClassLabel`, :class:`Text`, :class:`Image`); pure,
no I/O. :class:`FeatureDecoder` holds the flat spec the records are decoded with (one entry per
key TFDS wrote into each Example: nested names joined by ``/``) and turns decoded columns into
nested dicts with TFDS's values in PyTorch's conventions (images uint8 CHW, text str).

How TFDS stores each connector, and so how it is read back here:

- Tensor / Scalar / BBoxFeature / Audio / ClassLabel, ``encoding="none"``: the values in an
  int64 / float list (bool and small ints widened to int64, floats narrowed to float32), a
  fixed length when the shape has no None, a flat list reshaped around its one None otherwise.
- Tensor, ``encoding="bytes"`` / ``"zlib"``: the array's raw bytes (zlib-compressed), plus
  ``<key>/shape`` when more than one dimension is None.
- Image: the encoded PNG / JPEG; Video: a Sequence of Images; Text: UTF-8 bytes.
- Sequence / Dataset (RLDS steps) of a feature: each of its keys holds the values of all
  steps; two levels of Sequence write ``<key>/ragged_flat_values`` and
  ``<key>/ragged_row_lengths_0``.
"""

from __future__ import annotations

import dataclasses
import math
import zlib
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch

from ..errors import FeatureError, SpecError
from ..ragged import Ragged
from ..spec import FeatureSpec, FixedLen, FixedLenSequence, VarLen
from ..spec import Image as ImageSpec
from ..vision import decode_image

__all__ = [
    "ClassLabel",
    "Feature",
    "FeatureDecoder",
    "FeaturesDict",
    "Image",
    "Sequence",
    "Tensor",
    "Text",
    "UnsupportedFeatureError",
    "parse_features",
]

Shape = tuple[int | None, ...]

# numpy dtype names TFDS writes -> the torch dtype of the values given here.
_TORCH_DTYPES: dict[str, torch.dtype] = {
    "bool": torch.bool,
    "int8": torch.int8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "uint8": torch.uint8,
    "uint16": torch.uint16,
    "uint32": torch.uint32,
    "uint64": torch.uint64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
    "complex64": torch.complex64,
    "complex128": torch.complex128,
}
# Types an int64 / float list decodes to directly; others are read as int64 and converted.
_DIRECT = {"bool", "int8", "int16", "int32", "int64", "uint8", "float16", "bfloat16", "float32", "float64"}
_STRING = {"string", "str", "object", "bytes"}


class UnsupportedFeatureError(SpecError):
    """A feature connector (or a use of one) this library cannot decode; names the feature."""


@dataclasses.dataclass(frozen=True)
class Feature:
    """A TFDS feature connector: ``kind`` is its TFDS class (``"Scalar"``, ``"BBoxFeature"`` ...)."""

    kind: str

    def describe(self) -> str:
        return self.kind


@dataclasses.dataclass(frozen=True)
class Tensor(Feature):
    """Tensor, Scalar, BBoxFeature, Audio: an array of ``shape`` (None: any length) and ``dtype``.

    Attributes:
        dtype: numpy name (``"float32"``) or ``"string"``.
        encoding: ``"none"``, ``"bytes"`` or ``"zlib"``.
        sample_rate: Audio's sample rate (None for other kinds).
    """

    shape: Shape = ()
    dtype: str = "float32"
    encoding: str = "none"
    sample_rate: int | None = None

    def describe(self) -> str:
        extra = "" if self.encoding == "none" else f", encoding={self.encoding}"
        rate = "" if self.sample_rate is None else f", sample_rate={self.sample_rate}"
        return f"{self.kind}(shape={_shape_text(self.shape)}, dtype={self.dtype}{extra}{rate})"


@dataclasses.dataclass(frozen=True)
class ClassLabel(Tensor):
    """An int64 class id; ``names`` from ``<feature>.labels.txt`` (None when TFDS kept none)."""

    num_classes: int | None = None
    names: tuple[str, ...] | None = None

    def int2str(self, index: int) -> str:
        if self.names is None:
            raise ValueError("this ClassLabel has no names")
        return self.names[index]

    def str2int(self, name: str) -> int:
        if self.names is None:
            raise ValueError("this ClassLabel has no names")
        return self.names.index(name)

    def describe(self) -> str:
        shown = (
            ""
            if self.names is None
            else f", names={list(self.names[:5])}{'...' if len(self.names) > 5 else ''}"
        )
        return f"ClassLabel(num_classes={self.num_classes}{shown})"


@dataclasses.dataclass(frozen=True)
class Text(Tensor):
    """A UTF-8 string, given as ``str``."""

    def describe(self) -> str:
        return "Text()"


@dataclasses.dataclass(frozen=True)
class Image(Feature):
    """An encoded image (``encoding_format`` png / jpeg) of ``shape`` (height, width, channels)."""

    shape: Shape = (None, None, 3)
    dtype: str = "uint8"
    encoding_format: str | None = None

    def describe(self) -> str:
        return f"Image(shape={_shape_text(self.shape)}, dtype={self.dtype}, format={self.encoding_format})"


@dataclasses.dataclass(frozen=True)
class Sequence(Feature):
    """A Sequence (or RLDS ``Dataset``) of ``feature``, of ``length`` steps (None: any number)."""

    feature: Feature = dataclasses.field(default_factory=lambda: Feature("?"))
    length: int | None = None

    def __getitem__(self, key: str) -> Feature:
        if isinstance(self.feature, FeaturesDict):
            return self.feature[key]
        raise KeyError(key)

    def describe(self) -> str:
        length = "" if self.length is None else f", length={self.length}"
        inner = "{...}" if isinstance(self.feature, FeaturesDict) else self.feature.describe()
        return f"{self.kind}({inner}{length})"


@dataclasses.dataclass(frozen=True)
class FeaturesDict(Feature):
    """Named features; ``features["objects"]["label"]`` or ``features["objects/label"]``."""

    features: dict[str, Feature] = dataclasses.field(default_factory=dict)

    def __getitem__(self, key: str) -> Feature:
        head, _, rest = key.partition("/")
        feature = self.features[head]
        if not rest:
            return feature
        if isinstance(feature, FeaturesDict | Sequence):
            return feature[rest]
        raise KeyError(key)

    def __contains__(self, key: object) -> bool:
        return key in self.features

    def __iter__(self) -> Iterator[str]:
        return iter(self.features)

    def keys(self) -> Any:
        return self.features.keys()

    def items(self) -> Any:
        return self.features.items()

    def describe(self) -> str:
        return "FeaturesDict"


def _shape_text(shape: Shape) -> str:
    return (
        "("
        + ", ".join("None" if d is None else str(d) for d in shape)
        + ("," if len(shape) == 1 else "")
        + ")"
    )


# --- features.json -> connectors -------------------------------------------------------------


def _shape(body: Mapping[str, Any], where: str) -> Shape:
    dims = body.get("shape", {})
    if isinstance(dims, list):  # the older JSON form
        return tuple(None if d is None or int(d) < 0 else int(d) for d in dims)
    try:
        return tuple(None if int(d) < 0 else int(d) for d in dims.get("dimensions", []))
    except (TypeError, ValueError, AttributeError):
        raise SpecError(f"{where}: shape {dims!r} is not a list of dimensions") from None


def _dtype(body: Mapping[str, Any], where: str, default: str = "float32") -> str:
    dtype = str(body.get("dtype", default))
    if dtype not in _TORCH_DTYPES and dtype not in _STRING:
        raise UnsupportedFeatureError(f"{where}: dtype {dtype!r} is not supported")
    return "string" if dtype in _STRING else dtype


def _encoding(body: Mapping[str, Any]) -> str:
    return str(body.get("encoding") or "none").lower()


def parse_features(
    document: Mapping[str, Any], labels: Mapping[str, tuple[str, ...]] | None = None, path: str = ""
) -> Feature:
    """The connector tree of a parsed ``features.json`` (pure: no I/O).

    Args:
        document: the parsed JSON of a feature (the whole file for the top level).
        labels: ClassLabel names by feature path (``"objects/label"``), read from the
            ``*.labels.txt`` files.
        path: the feature's path, for names in errors.

    Raises:
        UnsupportedFeatureError: a connector not read here, named with its path.
    """
    labels = labels or {}
    where = f"feature {path!r}" if path else "features.json"
    class_name = str(document.get("pythonClassName", document.get("type", "")))
    kind = class_name.rsplit(".", 1)[-1]
    if "type" in document and "content" in document and "pythonClassName" not in document:
        raise UnsupportedFeatureError(
            f"{where}: this features.json is in the format of TFDS before 4.0 ('type' / 'content'); "
            "prepare the dataset again with a newer tensorflow-datasets"
        )
    fields = [key for key in document if key not in ("pythonClassName", "description", "valueRange")]
    if len(fields) != 1:
        raise UnsupportedFeatureError(
            f"{where}: connector {kind or '?'} has fields {fields}: not readable here"
        )
    field = fields[0]
    body = document[field] or {}
    if field == "featuresDict":
        return FeaturesDict(
            kind or "FeaturesDict",
            {
                key: parse_features(value, labels, f"{path}/{key}" if path else key)
                for key, value in body.get("features", {}).items()
            },
        )
    if field == "sequence":
        length = int(body.get("length", -1))
        inner = parse_features(body["feature"], labels, path)
        return Sequence(kind or "Sequence", inner, None if length < 0 else length)
    if field == "tensor":
        return Tensor(kind or "Tensor", _shape(body, where), _dtype(body, where), _encoding(body))
    if field == "boundingBox":
        return Tensor(
            kind or "BBoxFeature", _shape(body, where) or (4,), _dtype(body, where), _encoding(body)
        )
    if field == "classLabel":
        names = labels.get(path)
        count = int(body["numClasses"]) if "numClasses" in body else (len(names) if names else None)
        return ClassLabel("ClassLabel", (), "int64", num_classes=count, names=names)
    if field == "text":
        if body.get("encoder") or body.get("encoderCls"):
            raise UnsupportedFeatureError(
                f"{where}: Text with a TextEncoder (deprecated in TFDS) is not read here"
            )
        return Text("Text", (), "string")
    if field == "image":
        dtype = _dtype(body, where, "uint8")
        if dtype != "uint8":
            raise UnsupportedFeatureError(
                f"{where}: Image of dtype {dtype} (only uint8 images are read here)"
            )
        shape = _shape(body, where) or (None, None, 3)
        return Image(kind or "Image", shape, dtype, body.get("encodingFormat") or None)
    if field == "video":
        dtype = _dtype(body, where, "uint8")
        if dtype != "uint8":
            raise UnsupportedFeatureError(
                f"{where}: Video of dtype {dtype} (only uint8 frames are read here)"
            )
        shape = _shape(body, where)
        frame = Image("Image", shape[1:], dtype, body.get("encodingFormat") or None)
        return Sequence(kind or "Video", frame, shape[0] if shape else None)
    if field == "audio":
        if body.get("lazyDecode"):
            raise UnsupportedFeatureError(
                f"{where}: Audio stored encoded (lazy_decode=True) needs an audio decoder; only Audio "
                "stored as samples is read here"
            )
        rate = body.get("sampleRate")
        return Tensor(
            "Audio",
            _shape(body, where),
            _dtype(body, where, "int64"),
            _encoding(body),
            None if rate is None else int(rate),
        )
    raise UnsupportedFeatureError(
        f"{where}: the connector {kind or field} ({field!r} in features.json) is not supported by "
        "torch_tfrecord.tfds"
    )


# --- connectors -> the flat spec, and decoded columns -> nested values ------------------------


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
    read_as = _TORCH_DTYPES[dtype] if dtype in _DIRECT else torch.int64
    if None not in shape:
        return FixedLen(tuple(d for d in shape if d is not None), read_as)
    if shape[0] is None and None not in shape[1:]:
        return FixedLenSequence(tuple(d for d in shape[1:] if d is not None), read_as, allow_missing=True)
    return VarLen(read_as)


class _Converter:
    """Turns one leaf's decoded columns into its values, per sample and per batch."""

    def __init__(self, leaf: _Leaf) -> None:
        self.leaf = leaf
        self.spec: dict[str, FeatureSpec] = {}
        feature = leaf.feature
        steps = leaf.steps
        if len(steps) > 2:
            raise _unsupported(leaf, "more than two levels of Sequence are not read here")
        self.ragged = len(steps) == 2
        if isinstance(feature, Image):
            if self.ragged:
                raise _unsupported(leaf, "a Sequence of Sequences of images is not read here")
            self.kind = "image"
            self.full_shape: Shape = (*steps, *feature.shape)
            if not steps:
                self.spec[leaf.key] = ImageSpec(_mode(feature))
            else:
                self.spec[leaf.key] = _string_spec(steps)
            return
        self.text = isinstance(feature, Text)
        if feature.dtype == "string":
            if len(feature.shape) > 1 or self.ragged or (feature.shape and steps):
                raise _unsupported(leaf, "strings of more than one dimension are not read here")
            self.kind = "string"
            self.full_shape = (*steps, *feature.shape)
            self.spec[leaf.key] = _string_spec(self.full_shape, str if self.text else bytes)
            return
        if feature.encoding != "none":
            if self.ragged:
                raise _unsupported(leaf, "encoded tensors in two levels of Sequence are not read here")
            self.kind = "encoded"
            self.dynamic = feature.shape.count(None) > 1
            self.full_shape = (*steps, *feature.shape)
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
            self.spec[leaf.key + "/ragged_row_lengths_0"] = VarLen(torch.int64)
            self.full_shape = (*steps, *feature.shape)
            return
        self.full_shape = (*steps, *feature.shape)
        self.spec[leaf.key] = _numeric_spec(self.full_shape, feature.dtype)

    # -- values ---------------------------------------------------------------------------

    def _cast(self, tensor: torch.Tensor) -> torch.Tensor:
        dtype = self.leaf.feature.dtype
        if dtype in _DIRECT:
            return tensor
        if dtype == "uint64":  # written as the int64 of the same bits
            return tensor.view(torch.uint64)
        return tensor.to(_TORCH_DTYPES[dtype])

    def _shape_for(self, numel: int) -> list[int]:
        shape = self.full_shape
        known = math.prod(d for d in shape if d is not None)
        return [numel // known if known and d is None else (0 if d is None else d) for d in shape]

    def _image_stack(self, blobs: list[bytes]) -> torch.Tensor:
        image = self.leaf.feature
        assert isinstance(image, Image)
        frames = [decode_image(blob, _mode(image)) for blob in blobs]
        if frames:
            return torch.stack(frames)
        height, width, channels = (d or 0 for d in (image.shape[-3:] if len(image.shape) >= 3 else (0, 0, 0)))
        return torch.zeros((0, channels, height, width), dtype=torch.uint8)

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
        return torch.zeros((0, *(d or 0 for d in feature.shape)), dtype=_TORCH_DTYPES[feature.dtype])

    def sample(self, columns: Mapping[str, Any]) -> Any:
        key = self.leaf.key
        if self.kind == "image":
            return columns[key] if not self.leaf.steps else self._image_stack(list(columns[key]))
        if self.kind == "string":
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
        if self.ragged:
            values = self._cast(columns[key + "/ragged_flat_values"])
            lengths = columns[key + "/ragged_row_lengths_0"]
            offsets = torch.zeros(len(lengths) + 1, dtype=torch.int64)
            torch.cumsum(lengths, 0, out=offsets[1:])
            return Ragged(values, offsets)
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
        if self.kind == "string":
            return columns[key]
        if self.kind == "image" and not self.leaf.steps:
            images = columns[key]
            return torch.stack(images) if None not in self.leaf.feature.shape and images else images
        rows = [self.sample({k: columns[k][i] for k in self.spec}) for i in range(size)]
        static = None not in self.full_shape[len(self.leaf.steps) :]
        if self.leaf.steps and self.leaf.steps[0] is None and not self.ragged and static:
            return Ragged.from_rows(rows) if rows else rows  # steps vary: a Ragged of the steps
        if static and rows and all(isinstance(r, torch.Tensor) for r in rows):
            return torch.stack(rows)
        return rows


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
        features: the connector tree (:func:`parse_features`).
        batched: True when it is given decoded batches (the datasets' batch mode), False for
            samples.

    Raises:
        UnsupportedFeatureError: a connector (or a nesting of one) that is not read here.
    """

    def __init__(self, features: Feature, *, batched: bool) -> None:
        self.features = features
        self.batched = batched
        self.converters = [_Converter(leaf) for leaf in _leaves(features, (), ())]
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
