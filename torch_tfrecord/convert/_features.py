"""The Example layout of the TensorFlow Object Detection API, shared by the image converters."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ..codec.encode import BytesList, FloatList, Int64List, encode_example
from ._images import ImageInfo, probe, reencode

__all__ = ["Box", "encode_detection", "load_image"]


@dataclasses.dataclass(frozen=True)
class Box:
    """One object: a box in pixels (``x0 <= x1``, ``y0 <= y1``) and its class."""

    x0: float
    y0: float
    x1: float
    y1: float
    label: int
    text: str
    area: float | None = None
    is_crowd: int = 0
    difficult: int = 0
    truncated: int = 0
    polygons: tuple[tuple[float, ...], ...] = ()


def load_image(path: str, reencode_it: bool) -> tuple[bytes, ImageInfo]:
    """The bytes to store for an image file and their format and size (raises OSError / ValueError)."""
    with open(path, "rb") as f:
        data = f.read()
    if reencode_it:
        return reencode(data)
    return data, probe(data)


def encode_detection(
    data: bytes,
    info: ImageInfo,
    filename: str,
    source_id: str,
    boxes: Sequence[Box],
    *,
    with_polygons: bool = False,
    masks: Sequence[bytes] | None = None,
) -> bytes:
    """A serialized Example in the Object Detection API layout, boxes normalized to [0, 1];
    ``masks``: one PNG per box, stored as image/object/mask."""
    w, h = float(info.width), float(info.height)
    features = {
        "image/encoded": BytesList([data]),
        "image/format": BytesList([info.format.encode()]),
        "image/height": Int64List([info.height]),
        "image/width": Int64List([info.width]),
        "image/filename": BytesList([filename.encode()]),
        "image/source_id": BytesList([source_id.encode()]),
        "image/object/bbox/xmin": FloatList([b.x0 / w for b in boxes]),
        "image/object/bbox/xmax": FloatList([b.x1 / w for b in boxes]),
        "image/object/bbox/ymin": FloatList([b.y0 / h for b in boxes]),
        "image/object/bbox/ymax": FloatList([b.y1 / h for b in boxes]),
        "image/object/class/label": Int64List([b.label for b in boxes]),
        "image/object/class/text": BytesList([b.text.encode() for b in boxes]),
        "image/object/area": FloatList(
            [(b.x1 - b.x0) * (b.y1 - b.y0) if b.area is None else b.area for b in boxes]
        ),
        "image/object/is_crowd": Int64List([b.is_crowd for b in boxes]),
        "image/object/difficult": Int64List([b.difficult for b in boxes]),
        "image/object/truncated": Int64List([b.truncated for b in boxes]),
    }
    if with_polygons:
        vertices: list[float] = []
        counts: list[int] = []
        owners: list[int] = []
        for i, box in enumerate(boxes):
            for polygon in box.polygons:
                vertices.extend(v / (w if k % 2 == 0 else h) for k, v in enumerate(polygon))
                counts.append(len(polygon) // 2)
                owners.append(i)
        features["image/object/polygon/vertices"] = FloatList(vertices)
        features["image/object/polygon/num_vertices"] = Int64List(counts)
        features["image/object/polygon/object"] = Int64List(owners)
    if masks is not None:
        if len(masks) != len(boxes):
            raise ValueError(f"{len(masks)} masks for {len(boxes)} boxes")
        features["image/object/mask"] = BytesList(list(masks))
    return encode_example(features)
