"""COCO instance masks (polygons, uncompressed and compressed RLE) to PNGs, one per object.

The layout is the Object Detection API's (``create_coco_tf_record --include_masks``):
``image/object/mask``, a bytes list of PNG-encoded masks, one per box in the order of the
boxes, each a grey image of the image's size holding 1 on the object and 0 elsewhere.
Masks are rasterized by pycocotools (the ``coco`` extra), as its ``COCO.annToMask`` does, so
that they are the masks COCO's own tools and evaluation see. Its C code trusts its input (an
RLE whose counts do not add up to the image writes past the mask's end): every segmentation is
checked here first, and a bad one is a ``ValueError`` saying what is wrong with it.
"""

from __future__ import annotations

import io
import math
import warnings
from typing import Any

import numpy as np

from ..support.extras import install_hint
from ._images import pillow

__all__ = ["instance_mask", "mask_api", "mask_png", "rle_counts"]


def mask_api() -> Any:
    """pycocotools.mask, or an ImportError naming the extra."""
    try:
        import pycocotools.mask
    except ImportError as error:
        raise ImportError(f"COCO instance masks need pycocotools; {install_hint('coco')}") from error
    return pycocotools.mask


def instance_mask(segmentation: Any, height: int, width: int) -> np.ndarray:
    """The ``[height, width]`` uint8 mask (0 / 1) of one COCO annotation's ``segmentation``:
    a list of polygons ``[[x0, y0, x1, y1, ...], ...]`` (pixel coordinates), an uncompressed
    RLE ``{"size": [h, w], "counts": [n0, n1, ...]}`` (crowds) or a compressed one (``counts``
    a string, as ``pycocotools.mask.encode`` writes it).

    Polygons of fewer than 3 points enclose nothing and are left out, as COCO's tools do
    with them (some COCO annotations have one); an annotation with none left is an error.

    Raises:
        ValueError: a malformed segmentation, or an RLE of another size than the image.
    """
    api = mask_api()
    if segmentation is None:
        raise ValueError("no 'segmentation' to make its mask from")
    if isinstance(segmentation, list):
        polygons = _polygons(segmentation)
        rle = api.merge(api.frPyObjects(polygons, height, width))
    elif isinstance(segmentation, dict):
        size = segmentation.get("size")
        if not (isinstance(size, list) and len(size) == 2 and all(_is_int(v) for v in size)):
            raise ValueError(f"RLE 'size' {size!r} is not [height, width]")
        if tuple(size) != (height, width):
            raise ValueError(
                f"RLE size {size[1]}x{size[0]} (width x height) differs from the image's {width}x{height}"
            )
        counts = segmentation.get("counts")
        if isinstance(counts, str):
            _check_counts(rle_counts(counts), height * width)
            rle = {"size": [height, width], "counts": counts.encode("ascii")}
        elif isinstance(counts, list):
            if not all(_is_int(v) for v in counts):
                raise ValueError("RLE 'counts' must be integers (or a compressed string)")
            _check_counts(counts, height * width)
            rle = api.frPyObjects({"size": [height, width], "counts": counts}, height, width)
        else:
            raise ValueError(f"RLE 'counts' is a {type(counts).__name__}, not a list or a string")
    else:
        raise ValueError(
            f"segmentation is a {type(segmentation).__name__}: expected polygons (a list) or an RLE (a dict)"
        )
    with warnings.catch_warnings():
        # pycocotools 2.0.x's __array__ predates numpy 2's copy keyword: a DeprecationWarning per mask
        warnings.simplefilter("ignore", DeprecationWarning)
        mask: np.ndarray = api.decode(rle)
    return mask.astype(np.uint8, copy=False)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _polygons(segmentation: list[Any]) -> list[list[float]]:
    kept = []
    for number, polygon in enumerate(segmentation):
        if not isinstance(polygon, list) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in polygon
        ):
            raise ValueError(f"polygon {number} is not a list of finite numbers")
        if len(polygon) % 2:
            raise ValueError(f"polygon {number} has {len(polygon)} coordinates, not x, y pairs")
        if len(polygon) >= 6:
            kept.append([float(v) for v in polygon])
    if not kept:
        raise ValueError("segmentation has no polygon of 3 or more points")
    return kept


def _check_counts(counts: list[int], pixels: int) -> None:
    if any(c < 0 for c in counts):
        raise ValueError("RLE 'counts' holds a negative run length")
    if sum(counts) != pixels:
        raise ValueError(f"RLE run lengths add up to {sum(counts)} pixels, not the image's {pixels}")


def rle_counts(text: str) -> list[int]:
    """The run lengths of a compressed RLE string (COCO's ``rleFrString``: 5-bit groups, offset
    by 48, the 6th bit "more follows"; from the 3rd run on, each the difference to the run two
    before).

    Raises:
        ValueError: a character out of range, or a run cut off at the end.
    """
    counts: list[int] = []
    position = 0
    while position < len(text):
        value = shift = 0
        more = True
        while more:
            if position == len(text):
                raise ValueError("RLE 'counts' string ends inside a run length")
            code = ord(text[position]) - 48
            if not 0 <= code < 64:
                raise ValueError(f"RLE 'counts' string holds {text[position]!r} at {position}")
            value |= (code & 0x1F) << shift
            more = bool(code & 0x20)
            position += 1
            shift += 5
            if not more and code & 0x10:
                value -= 1 << shift  # sign-extend
        if len(counts) > 2:
            value += counts[-2]
        counts.append(value)
    return counts


def mask_png(mask: np.ndarray) -> bytes:
    """A 0 / 1 mask as a grey 8-bit PNG (lossless; the same bytes for the same mask)."""
    out = io.BytesIO()
    pillow().fromarray(np.ascontiguousarray(mask, dtype=np.uint8), mode="L").save(out, format="PNG")
    return out.getvalue()
