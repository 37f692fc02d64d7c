"""A record as the page shows it, as JSON: its features by type (numbers, strings, lists, images
to fetch as thumbnails), a SequenceExample's feature lists, and for detection and segmentation
records the boxes with their class names and whether a class mask is there to lay over the image.

Pure: a payload in, a dict out.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Mapping
from typing import Any

from ..codec.inspect import describe_feature_lists, describe_record, doubt_keys
from ..vision.keys import DETECTION_KEYS, SEGMENTATION_KEYS
from .wire import Described

__all__ = ["SHOWN_VALUES", "image_key", "image_type", "json_value", "view_described", "view_record"]

SHOWN_VALUES = 32  # values of a list shown; the page says how many more there are
_SHOWN_TEXT = 200
_SAFE_INTEGER = 2**53  # larger int64 values are sent as strings: JavaScript numbers would round them
_MAGIC = (
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"BM", "image/bmp"),
)


def image_type(value: bytes) -> str | None:
    """The media type of an encoded image (JPEG, PNG, GIF, BMP, WebP), or None."""
    for magic, media_type in _MAGIC:
        if value.startswith(magic):
            return media_type
    if value.startswith(b"RIFF") and value[8:12] == b"WEBP":
        return "image/webp"
    return None


def image_key(features: Mapping[str, tuple[str, list[Any]]]) -> str | None:
    """The feature holding the record's image: image/encoded, else the first bytes feature with one
    encoded image."""
    key = DETECTION_KEYS["image"]
    if key in features and features[key][1] and image_type(features[key][1][0]):
        return key
    for name, (kind, values) in features.items():
        if kind == "bytes" and len(values) == 1 and image_type(values[0]):
            return name
    return None


def json_value(kind: str, value: Any) -> Any:
    """One value as JSON can carry it: big integers and non-finite floats as strings, bytes as
    text when they are UTF-8 (else ``{"bytes": size, "hex": the first bytes}``)."""
    if kind == "int64":
        return value if abs(value) < _SAFE_INTEGER else str(value)
    if kind == "float":  # float32 values, shown with the digits float32 holds
        return float(f"{value:.7g}") if math.isfinite(value) else str(value)
    size = getattr(value, "size", len(value))  # (a wire.Prefix: the first bytes of a larger value)
    try:
        text: str = value.decode("utf-8")
    except UnicodeDecodeError:
        if size > len(value):  # cut inside a character, perhaps: shown as the text it starts with
            text = value[:_SHOWN_TEXT].decode("utf-8", errors="ignore")
            if text and size > _SHOWN_TEXT:
                return {"text": text[:_SHOWN_TEXT], "bytes": size}
        return {"bytes": size, "hex": value[:16].hex()}
    if len(text) > _SHOWN_TEXT or size > len(value):
        return {"text": text[:_SHOWN_TEXT], "bytes": size}
    return text


def _feature(key: str, kind: str, values: list[Any], count: int | None = None) -> dict[str, Any]:
    images = [i for i, v in enumerate(values[:SHOWN_VALUES]) if kind == "bytes" and image_type(v)]
    return {
        "key": key,
        "kind": kind,
        "count": len(values) if count is None else count,
        "values": [None if i in images else json_value(kind, v) for i, v in enumerate(values[:SHOWN_VALUES])],
        "images": images,
    }


def _boxes(
    features: Mapping[str, tuple[str, list[Any]]], class_names: Mapping[int, str]
) -> list[dict[str, Any]]:
    corners = [features.get(DETECTION_KEYS[k], ("float", []))[1] for k in ("xmin", "ymin", "xmax", "ymax")]
    labels = features.get(DETECTION_KEYS["labels"], ("int64", []))[1]
    texts = features.get("image/object/class/text", ("bytes", []))[1]
    boxes = []
    for i, (x0, y0, x1, y1) in enumerate(zip(*corners)):
        label = int(labels[i]) if i < len(labels) else None
        if i < len(texts):
            name = texts[i].decode("utf-8", errors="replace")
        else:
            name = class_names.get(label, "") if label is not None else ""
        boxes.append({"xmin": x0, "ymin": y0, "xmax": x1, "ymax": y1, "label": label, "name": name})
    return boxes


def view_record(
    payload: bytes, class_names: Mapping[int, str] | None = None, inline_limit: int = 0
) -> dict[str, Any]:
    """What the page shows of one record.

    Args:
        payload: the serialized record.
        class_names: a label map's names of class ids, for boxes without image/object/class/text.
        inline_limit: the record's image comes along as a ``data:`` URL when it is at most this
            many bytes (one request fewer for the page); larger ones are fetched by key.

    Returns:
        ``{"kind": "example" | "sequence" | "raw", "features": [...], "feature_lists": [...],
        "image": key or None, "image_data": data URL or None, "boxes": [...], "mask": bool,
        "instance_masks": how many image/object/mask PNGs, "size": bytes}``; a record that is not
        an Example shows its first bytes (``"raw"``).
    """
    features = describe_record(payload)
    if features is None:
        return {
            **_empty(len(payload)),
            "kind": "raw",
            "image": None,
            "raw": json_value("bytes", payload[:64]),
        }
    lists = describe_feature_lists(payload)
    steps = {key: (kind, values, len(values)) for key, (kind, values) in (lists or {}).items()}
    return _view(features, {}, None if lists is None else steps, len(payload), class_names, inline_limit)


def view_described(
    described: Described | None, size: int, class_names: Mapping[int, str] | None = None
) -> dict[str, Any]:
    """What the page shows of a record too large to read whole (see :mod:`.wire`): as
    :func:`view_record` (``described`` None: not an Example), with ``"summarised": True``, each
    list's true count, bytes values by their first bytes, and no image inside the JSON."""
    if described is None:
        return {**_empty(size), "kind": "raw", "image": None, "raw": None, "summarised": True}
    lists = described.lists
    if lists is not None and doubt_keys(list(lists)):
        lists = None
    view = _view(described.features, described.counts, lists, size, class_names, 0)
    # (a class mask is drawn from the whole record: not for one this large)
    return {**view, "mask": False, "summarised": True, "partial": described.partial}


def _empty(size: int) -> dict[str, Any]:
    empty: dict[str, Any] = {"features": [], "feature_lists": [], "boxes": [], "image_data": None}
    return {"size": size, **empty, "mask": False, "instance_masks": 0}


def _view(
    features: Mapping[str, tuple[str, list[Any]]],
    counts: Mapping[str, int],
    lists: Mapping[str, tuple[str, list[list[Any]], int]] | None,
    size: int,
    class_names: Mapping[int, str] | None,
    inline_limit: int,
) -> dict[str, Any]:
    view: dict[str, Any] = _empty(size)
    view["kind"] = "sequence" if lists is not None else "example"
    view["features"] = [
        _feature(key, kind, values, counts.get(key)) for key, (kind, values) in features.items()
    ]
    for key, (kind, steps, count) in (lists or {}).items():
        view["feature_lists"].append(
            {
                "key": key,
                "kind": kind,
                "steps": count,
                "values": [
                    [json_value(kind, v) for v in step[:SHOWN_VALUES]] for step in steps[:SHOWN_VALUES]
                ],
            }
        )
    shown = image_key(features)
    view["image"] = shown
    if shown is not None:
        image = features[shown][1][0]
        if len(image) <= inline_limit:
            view["image_data"] = f"data:{image_type(image)};base64,{base64.b64encode(image).decode()}"
        view["boxes"] = _boxes(features, class_names or {})
        mask = features.get(SEGMENTATION_KEYS["class"], ("bytes", []))[1]
        view["mask"] = bool(mask) and image_type(mask[0]) is not None
        instances = features.get(DETECTION_KEYS["masks"], ("bytes", []))[1]
        if all(image_type(png) == "image/png" for png in instances):  # else shown as thumbnails only
            view["instance_masks"] = counts.get(DETECTION_KEYS["masks"], len(instances))
    return view
