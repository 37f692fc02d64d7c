"""A contact sheet of decoded images with their labels, and boxes with class names for
detection data (the Object Detection API layout that ``torch_tfrecord.convert`` writes);
segmentation masks (image/segmentation/class/encoded) as translucent colours, with a legend;
instance masks (image/object/mask) tinted in their box's colour.

Pure apart from Pillow: serialized Examples in, a PIL image out. Needs Pillow (the ``convert``
or ``vision`` extra).
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..codec.inspect import describe_record
from ..errors import FeatureError
from ..support.extras import install_hint
from .keys import DETECTION_KEYS, SEGMENTATION_KEYS, VOID

__all__ = ["mask_layer", "render_grid"]

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


_MASK_KEY = SEGMENTATION_KEYS["class"]
_INSTANCE_KEY = DETECTION_KEYS["masks"]
_VOID = VOID  # Pascal VOC's boundary / unlabelled value: drawn white
_MASK_ALPHA = 0.5
_LEGEND_ROW = 16


def _mask(features: dict[str, tuple[str, list[Any]]], size: tuple[int, int], where: str) -> Any:
    """The record's class mask as a PIL "L" image of indices, or None when it has none."""
    if _MASK_KEY not in features or not features[_MASK_KEY][1]:
        return None
    return _grey(features[_MASK_KEY][1][0], _MASK_KEY, "", size, where)


def _open_image(data: bytes, key: str, which: str, where: str, what: str) -> Any:
    """The PIL image stored in a feature, loaded, or a FeatureError naming ``key`` (``which``:
    the item of a list) and the record."""
    from PIL import Image

    try:
        image = Image.open(io.BytesIO(data))
        image.load()
    except Exception as error:  # Pillow raises several kinds for bad image data
        raise FeatureError(
            f"feature {key!r}{which} of {where} is not a decodable {what} ({type(error).__name__}: {error})",
            key=key,
            record=where,
        ) from None
    return image


def _grey(data: bytes, key: str, which: str, size: tuple[int, int], where: str) -> Any:
    """A mask PNG's stored values (indices, not palette colours) as a PIL "L" image of ``size``,
    or a FeatureError naming ``key`` (``which``: the mask of a list) and the record."""
    from PIL import Image

    mask = _open_image(data, key, which, where, "mask")
    if mask.mode not in ("L", "P") or mask.size != size:
        raise FeatureError(
            f"feature {key!r}{which} of {where} is a {mask.mode} {mask.size[0]}x{mask.size[1]} image, "
            f"not a mask of class indices the size of its image ({size[0]}x{size[1]})",
            key=key,
            record=where,
        )
    return (
        mask if mask.mode == "L" else Image.frombytes("L", mask.size, mask.tobytes())
    )  # indices, not colours


def _instances(picture: Any, features: dict[str, tuple[str, list[Any]]], where: str) -> Any:
    """``picture`` with each object's pixels of image/object/mask (non-zero) tinted, translucent,
    in the colour of its box."""
    from PIL import Image

    pngs = features.get(_INSTANCE_KEY, ("bytes", []))[1]
    labels = features.get("image/object/class/label", ("int64", []))[1]
    for i, png in enumerate(pngs):
        mask = _grey(png, _INSTANCE_KEY, f" (mask {i})", picture.size, where)
        colour = _PALETTE[(int(labels[i]) if i < len(labels) else i) % len(_PALETTE)]
        tinted = Image.blend(picture, Image.new("RGB", picture.size, colour), _MASK_ALPHA)
        picture = Image.composite(tinted, picture, mask.point([0] + [255] * 255))
    return picture


def _mask_colour(index: int) -> tuple[int, int, int]:
    """Pascal VOC's colour of a class index (bits of the index spread over R, G, B: distinct
    for all 255), the boundary white."""
    if index == _VOID:
        return (255, 255, 255)
    rgb = [0, 0, 0]
    for bit in range(8):
        for channel in range(3):
            rgb[channel] |= ((index >> (3 * bit + channel)) & 1) << (7 - bit)
    return rgb[0], rgb[1], rgb[2]


def _colours(mask: Any, present: Iterable[int]) -> Any:
    """``mask`` as a "P" image whose palette gives each class in ``present`` its colour."""
    from PIL import Image

    palette = [0] * 256 * 3
    for index in present:
        palette[index * 3 : index * 3 + 3] = _mask_colour(index)
    colours = Image.frombytes("P", mask.size, mask.tobytes())
    colours.putpalette(palette)
    return colours


def _overlay(picture: Any, mask: Any) -> tuple[Any, set[int]]:
    """``picture`` with the pixels of each class of ``mask`` (not background 0) tinted in its colour."""
    from PIL import Image

    present = {index for _, index in mask.getcolors(256) or []} - {0}
    if not present:
        return picture, present
    tinted = Image.blend(picture, _colours(mask, present).convert("RGB"), _MASK_ALPHA)
    return Image.composite(tinted, picture, mask.point([0] + [255] * 255)), present


def mask_layer(payload: bytes, where: str = "the record") -> tuple[Any, list[int]] | None:
    """The class mask of a segmentation record as a layer to lay over its image: an RGBA image
    of the image's size, each class's pixels in its colour (the colours :func:`render_grid`
    uses), half opaque, background 0 transparent; and the class ids present (not 0).

    Args:
        payload: a serialized Example.
        where: the record, for error messages.

    Returns:
        ``(layer, classes)``, or None when the record has no class mask
        (image/segmentation/class/encoded) or no image.

    Raises:
        FeatureError: the image or the mask does not decode, or their sizes differ.
        ImportError: Pillow is missing.
    """
    try:
        import PIL  # noqa: F401
    except ImportError as error:
        raise ImportError(f"masks need Pillow; {install_hint('vision')}") from error
    features = describe_record(payload)
    key = None if features is None else _image_key(features)
    if features is None or key is None:
        return None
    size = _open_image(features[key][1][0], key, "", where, "image").size
    mask = _mask(features, size, where)
    if mask is None:
        return None
    present = sorted({index for _, index in mask.getcolors(256) or []} - {0})
    layer = _colours(mask, present).convert("RGBA")
    layer.putalpha(mask.point([0] + [round(255 * _MASK_ALPHA)] * 255))
    return layer, present


def render_grid(
    records: Sequence[bytes],
    *,
    locations: Sequence[str] | None = None,
    cell: int = 256,
    columns: int | None = None,
    class_names: Mapping[int, str] | None = None,
) -> Any:
    """A grid of the records' images (each fitted into ``cell`` x ``cell``), captioned with the
    label or file name, boxes drawn in a colour per class with the class name, class masks
    laid over their image, translucent, a colour per class, with a legend below the grid;
    instance masks (image/object/mask) tinted in their box's colour.

    Args:
        records: serialized Examples; those without an image feature are left out.
        locations: where each record came from, for error messages.
        class_names: names of the mask's class ids for the legend (a label map's ``names``).

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
    classes: set[int] = set()
    for number, payload in enumerate(records):
        features = describe_record(payload)
        if features is None:
            continue
        key = _image_key(features)
        if key is None:
            continue
        where = locations[number] if locations is not None else f"record {number}"
        picture = _open_image(features[key][1][0], key, "", where, "image").convert("RGB")
        mask = _mask(features, picture.size, where)
        if mask is not None:
            picture, present = _overlay(picture, mask)
            classes |= present
        picture = _instances(picture, features, where)
        tiles.append((picture, _caption(features, number), _boxes(features)))
    if not tiles:
        raise FeatureError(
            f"none of the {len(records)} records holds an image (a bytes feature such as 'image/encoded')"
        )
    columns = columns or math.ceil(math.sqrt(len(tiles)))
    rows = math.ceil(len(tiles) / columns)
    pitch_x, pitch_y = cell + _GAP, cell + _CAPTION_HEIGHT + _GAP
    legend_top = _GAP + rows * pitch_y
    legend = sorted(classes)
    per_row = max(1, (columns * pitch_x) // 120)
    legend_height = -(-len(legend) // per_row) * _LEGEND_ROW + (_GAP if legend else 0)
    sheet = Image.new("RGB", (_GAP + columns * pitch_x, legend_top + legend_height), _BACKGROUND)
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
    for i, index in enumerate(legend):  # a swatch and the class of each colour in the masks
        x, y = _GAP + (i % per_row) * 120, legend_top + (i // per_row) * _LEGEND_ROW
        draw.rectangle((x, y + 2, x + 10, y + 12), fill=_mask_colour(index), outline=_FRAME)
        name = "boundary" if index == _VOID else (class_names or {}).get(index, "")
        draw.text((x + 14, y + 1), f"{index} {name}"[:18], fill=(235, 235, 235), font=font)
    return sheet
