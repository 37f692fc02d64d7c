"""A contact sheet of decoded images with their labels, and boxes with class names for
detection data (the Object Detection API layout that ``torch_tfrecord.convert`` writes).

Pure apart from Pillow: serialized Examples in, a PIL image out. Needs Pillow (the ``convert``
or ``vision`` extra).
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from typing import Any

from ._extras import install_hint
from .errors import FeatureError
from .inspect import describe_record

__all__ = ["render_grid"]

_IMAGE_MAGIC = (b"\xff\xd8\xff", b"\x89PNG\r\n\x1a\n", b"GIF87a", b"GIF89a", b"BM", b"RIFF")
_LABEL_KEYS = ("image/class/text", "label_text", "class", "image/class/label", "label")
# Tiles sit _GAP pixels apart on a dark background, each image in a light frame, so that
# neighbouring images of one colour (dark or light) never read as one band.
_GAP = 8
_CAPTION_HEIGHT = 16
_BACKGROUND = (24, 24, 24)
_FRAME = (150, 150, 150)
_PALETTE = [
    (230, 25, 75),
    (60, 180, 75),
    (255, 225, 25),
    (0, 130, 200),
    (245, 130, 48),
    (145, 30, 180),
    (70, 240, 240),
    (240, 50, 230),
    (210, 245, 60),
    (250, 190, 212),
]


def _image_key(features: dict[str, tuple[str, list[Any]]]) -> str | None:
    if "image/encoded" in features:
        return "image/encoded"
    for key, (kind, values) in features.items():
        if kind == "bytes" and len(values) == 1 and values[0].startswith(_IMAGE_MAGIC):
            return key
    return None


def _caption(features: dict[str, tuple[str, list[Any]]], number: int) -> str:
    for key in _LABEL_KEYS:
        if key in features and features[key][1]:
            value = features[key][1][0]
            return f"#{number} {value.decode(errors='replace') if isinstance(value, bytes) else value}"
    if "image/filename" in features and features["image/filename"][1]:
        return f"#{number} {features['image/filename'][1][0].decode(errors='replace')}"
    return f"#{number}"


def _boxes(features: dict[str, tuple[str, list[Any]]]) -> list[tuple[float, float, float, float, str, int]]:
    keys = [f"image/object/bbox/{k}" for k in ("xmin", "ymin", "xmax", "ymax")]
    if not all(k in features for k in keys):
        return []
    columns = [features[k][1] for k in keys]
    texts = features.get("image/object/class/text", ("bytes", []))[1]
    labels = features.get("image/object/class/label", ("int64", []))[1]
    out = []
    for i, (x0, y0, x1, y1) in enumerate(zip(*columns)):
        text = (
            texts[i].decode(errors="replace") if i < len(texts) else str(labels[i]) if i < len(labels) else ""
        )
        out.append((x0, y0, x1, y1, text, int(labels[i]) if i < len(labels) else i))
    return out


def render_grid(
    records: Sequence[bytes],
    *,
    locations: Sequence[str] | None = None,
    cell: int = 256,
    columns: int | None = None,
) -> Any:
    """A grid of the records' images (each fitted into ``cell`` x ``cell``), captioned with the
    label or file name, boxes drawn in a colour per class with the class name.

    Args:
        records: serialized Examples; those without an image feature are left out.
        locations: where each record came from, for error messages.

    Raises:
        FeatureError: an image feature that does not decode (naming the key and the record),
            or no record with an image at all.
        ImportError: Pillow is missing.
    """
    try:
        from PIL import Image, ImageDraw, ImageFont
    except ImportError as error:
        raise ImportError(f"preview needs Pillow; {install_hint('convert')}") from error
    tiles = []
    for number, payload in enumerate(records):
        features = describe_record(payload)
        if features is None:
            continue
        key = _image_key(features)
        if key is None:
            continue
        try:
            image = Image.open(io.BytesIO(features[key][1][0]))
            image.load()
        except Exception as error:  # Pillow raises several kinds for bad image data
            where = locations[number] if locations is not None else f"record {number}"
            raise FeatureError(
                f"feature {key!r} of {where} is not a decodable image ({type(error).__name__}: {error})",
                key=key,
                record=where,
            ) from None
        tiles.append((image.convert("RGB"), _caption(features, number), _boxes(features)))
    if not tiles:
        raise FeatureError(
            f"none of the {len(records)} records holds an image (a bytes feature such as 'image/encoded')"
        )
    columns = columns or math.ceil(math.sqrt(len(tiles)))
    rows = math.ceil(len(tiles) / columns)
    pitch_x, pitch_y = cell + _GAP, cell + _CAPTION_HEIGHT + _GAP
    sheet = Image.new("RGB", (_GAP + columns * pitch_x, _GAP + rows * pitch_y), _BACKGROUND)
    font = ImageFont.load_default()
    draw = ImageDraw.Draw(sheet)
    for i, (picture, caption, boxes) in enumerate(tiles):
        cell_left, cell_top = _GAP + (i % columns) * pitch_x, _GAP + (i // columns) * pitch_y
        scale = min(cell / picture.width, cell / picture.height)
        size = (max(1, round(picture.width * scale)), max(1, round(picture.height * scale)))
        left = cell_left + (cell - size[0]) // 2
        top = cell_top + (cell - size[1]) // 2
        draw.rectangle((left - 1, top - 1, left + size[0], top + size[1]), outline=_FRAME)
        sheet.paste(picture.resize(size), (left, top))
        for x0, y0, x1, y1, text, label in boxes:
            colour = _PALETTE[label % len(_PALETTE)]
            box = (left + x0 * size[0], top + y0 * size[1], left + x1 * size[0], top + y1 * size[1])
            draw.rectangle(box, outline=colour, width=3)
            if text:  # the class name on a tab of the box's colour, legible on any image
                tab = draw.textbbox((box[0] + 3, box[1] + 3), text, font=font)
                draw.rectangle((tab[0] - 2, tab[1] - 2, tab[2] + 2, tab[3] + 2), fill=colour)
                draw.text((box[0] + 3, box[1] + 3), text, fill=(0, 0, 0), font=font)
        draw.text(
            (cell_left + 2, cell_top + cell + 2),
            caption[:40],
            fill=(235, 235, 235),
            font=font,
        )
    return sheet
