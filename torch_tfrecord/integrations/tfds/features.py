"""TFDS feature connectors (``features.json``): what each key of a TFDS record holds.

:func:`parse_features` reads ``features.json`` into a tree of connectors (:class:`FeaturesDict`,
:class:`Sequence`, :class:`Tensor`, :class:`ClassLabel`, :class:`Text`, :class:`Image`); pure,
no I/O. :class:`~.decoder.FeatureDecoder` reads the records they describe.

How TFDS stores each connector, and so how it is read back here:

- Tensor / Scalar / BBoxFeature / Audio / ClassLabel, ``encoding="none"``: the values in an
  int64 / float list (bool and small ints widened to int64, floats narrowed to float32), a
  fixed length when the shape has no None, a flat list reshaped around its one None otherwise.
- Tensor, ``encoding="bytes"`` / ``"zlib"``: the array's raw bytes (zlib-compressed), plus
  ``<key>/shape`` when more than one dimension is None.
- Image: the encoded PNG / JPEG (uint16: a 16-bit PNG; float32: its bytes as an RGBA PNG);
  LabeledImage: an Image of class ids; Video: a Sequence of Images; Text: UTF-8 bytes.
- Translation: a Text per language; TranslationVariableLanguages: Sequences of ``language`` and
  ``translation`` texts. Audio with ``lazy_decode``: the encoded file (wav, flac ...).
- Sequence / Dataset (RLDS steps) of a feature: each of its keys holds the values of all
  steps; two or more levels of Sequence write ``<key>/ragged_flat_values`` and
  ``<key>/ragged_row_lengths_0`` (``_1`` ... for each deeper level).
- features.json of TFDS before 4.0 (``type`` / ``content``) is read through :mod:`.legacy`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

import torch

from ...codec.spec import UNSIGNED_DTYPES
from ...errors import SpecError
from .legacy import from_legacy

__all__ = [
    "Audio",
    "ClassLabel",
    "Feature",
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
TORCH_DTYPES: dict[str, torch.dtype] = {
    "bool": torch.bool,
    "int8": torch.int8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "uint8": torch.uint8,
    **{str(dtype).removeprefix("torch."): dtype for dtype in UNSIGNED_DTYPES},  # torch >= 2.3
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
    "complex64": torch.complex64,
    "complex128": torch.complex128,
}
# Types an int64 / float list decodes to directly; others are read as int64 and converted.
DIRECT_DTYPES = {
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "float16",
    "bfloat16",
    "float32",
    "float64",
}
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
class Audio(Tensor):
    """Audio: samples of ``shape`` (``(length,)`` or ``(length, channels)``), stored as samples,
    or (``lazy_decode``) as the encoded file (``file_format``: wav, flac ...) decoded on reading."""

    file_format: str | None = None
    lazy_decode: bool = False

    def describe(self) -> str:
        text = super().describe()
        if self.lazy_decode:
            text = text[:-1] + f", file_format={self.file_format}, lazy_decode=True)"
        return text


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
    """An encoded image (``encoding_format`` png / jpeg) of ``shape`` (height, width, channels).

    ``dtype`` uint8, uint16 (16-bit PNG) or float32 (one channel, its bytes stored as the four
    channels of an 8-bit PNG). A LabeledImage (a segmentation mask) is an Image whose values are
    class ids: ``names`` from ``<feature>.labels.txt``.
    """

    shape: Shape = (None, None, 3)
    dtype: str = "uint8"
    encoding_format: str | None = None
    names: tuple[str, ...] | None = None

    def describe(self) -> str:
        return (
            f"{self.kind}(shape={_shape_text(self.shape)}, dtype={self.dtype}, format={self.encoding_format})"
        )


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
    if dtype not in TORCH_DTYPES and dtype not in _STRING:
        needs = " (torch >= 2.3 has it)" if dtype in ("uint16", "uint32", "uint64") else ""
        raise UnsupportedFeatureError(f"{where}: dtype {dtype!r} is not supported{needs}")
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
        SpecError: a malformed ``features.json``, named with the feature's path.
    """
    where = f"feature {path!r}" if path else "features.json"
    if not isinstance(document, Mapping):
        raise SpecError(f"{where}: expected a JSON object, found {type(document).__name__}")
    try:
        return _parse_features(document, labels or {}, path)
    except SpecError:
        raise
    except (TypeError, KeyError, AttributeError, ValueError, IndexError, RecursionError) as error:
        raise SpecError(f"{where} is malformed ({type(error).__name__}: {str(error)[:200]})") from None


def _parse_features(document: Mapping[str, Any], labels: Mapping[str, tuple[str, ...]], path: str) -> Feature:
    where = f"feature {path!r}" if path else "features.json"
    if "type" in document and "content" in document and "pythonClassName" not in document:
        document = from_legacy(document, where)  # TFDS before 4.0
    class_name = str(document.get("pythonClassName", document.get("type", "")))
    kind = class_name.rsplit(".", 1)[-1]
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
        shape = _shape(body, where) or (None, None, 3)
        if dtype not in ("uint8", "uint16", "float32") or (dtype == "float32" and shape[-1:] != (1,)):
            raise UnsupportedFeatureError(
                f"{where}: connector {kind or 'Image'} of dtype {dtype} and shape {_shape_text(shape)} "
                "(TFDS writes uint8, uint16 and one-channel float32 images)"
            )
        return Image(kind or "Image", shape, dtype, body.get("encodingFormat") or None, labels.get(path))
    if field == "translation":
        languages = [str(language) for language in body.get("languages", [])]
        if body.get("variableLanguagesPerExample"):
            text = Sequence("Sequence", Text("Text", (), "string"))
            return FeaturesDict(kind, {"language": text, "translation": text})
        return FeaturesDict(
            kind or "Translation", {language: Text("Text", (), "string") for language in languages}
        )
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
        rate = body.get("sampleRate")
        return Audio(
            "Audio",
            _shape(body, where),
            _dtype(body, where, "int64"),
            _encoding(body),
            None if rate is None else int(rate),
            body.get("fileFormat") or None,
            bool(body.get("lazyDecode")),
        )
    raise UnsupportedFeatureError(
        f"{where}: the connector {kind or field} ({field!r} in features.json) is not supported by "
        "torch_tfrecord.integrations.tfds"
    )


# --- connectors -> the flat spec, and decoded columns -> nested values ------------------------
