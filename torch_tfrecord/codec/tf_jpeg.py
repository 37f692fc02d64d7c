"""JPEG pixels as TensorFlow decodes them by default: libjpeg-turbo's fast integer DCT.

``tf.io.decode_jpeg`` (and so ``tf.image.decode_image``, ``tfds.as_numpy``, the Object Detection
API) uses libjpeg-turbo with ``JDCT_IFAST`` and fancy upsampling, and converts CMYK to RGB
itself. simplejpeg (the ``fastjpeg`` extra, also in ``vision``) runs the same libjpeg-turbo
code with the same options, so the pixels here equal TensorFlow's value for value, whole or at
a reduced DCT scale (``decode_jpeg(ratio=...)``); tests/test_tf_jpeg.py checks it against
pixels written by TensorFlow.

A crop is TensorFlow's ``decode_and_crop_jpeg``, whose pixels differ from a full decode's at
the region's left and right edges (libjpeg-turbo's ``jpeg_crop_scanline`` upsamples chroma there
as at the image's edges). PyTurboJPEG (``fastjpeg`` extra, with the libturbojpeg library) gives
the same: the region is cut from the JPEG losslessly (from its iMCU column to its right edge,
an iMCU row of context above and below) and that is decoded.
"""

from __future__ import annotations

import functools
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from ..support import optional
from ..support.extras import install_hint

__all__ = [
    "DCT",
    "crop_library",
    "decode_jpeg_crop_fast",
    "decode_jpeg_fast",
    "fast_dct_library",
    "simplejpeg_module",
]

Box = tuple[int, int, int, int]  # top, left, height, width

DCT = Literal["accurate", "fast"]

_ADOBE = 0xEE  # APP14, where Adobe's CMYK JPEGs say their ink is stored inverted
_START_OF_SCAN = 0xDA
_STANDALONE = frozenset([0x01, *range(0xD0, 0xD9)])  # markers with no length (TEM, RSTn, SOI, EOI)


@functools.cache
def simplejpeg_module() -> Any:
    """simplejpeg when it is installed, else None."""
    try:
        import simplejpeg
    except ImportError:
        return None
    return simplejpeg


def fast_dct_library() -> Any:
    """simplejpeg, the library that decodes JPEGs with TensorFlow's fast DCT.

    Raises:
        ImportError: it is not installed (names the extra to install).
    """
    simplejpeg = simplejpeg_module()
    if simplejpeg is None:
        raise ImportError(
            "Image(dct='fast') (TensorFlow's JPEG pixels) needs simplejpeg, which decodes with "
            f"libjpeg-turbo's fast integer DCT; {install_hint('fastjpeg')}"
        )
    return simplejpeg


@functools.cache
def _turbojpeg() -> tuple[Any, Any] | None:
    try:
        import turbojpeg

        return turbojpeg, turbojpeg.TurboJPEG()
    except (ImportError, RuntimeError, OSError):  # RuntimeError: no libturbojpeg on this machine
        return None


def crop_library() -> tuple[Any, Any]:
    """PyTurboJPEG's module and decoder, which crop JPEGs as ``decode_and_crop_jpeg`` does.

    Raises:
        ImportError: PyTurboJPEG or the libturbojpeg shared library is missing (names both).
    """
    found = _turbojpeg()
    if found is None:
        hidden = f" ({optional.ENV_VAR} hides it here)" if optional.hidden("turbojpeg") else ""
        raise ImportError(
            "Image(dct='fast') with a crop (TensorFlow's decode_and_crop_jpeg pixels) needs PyTurboJPEG "
            f"and the libturbojpeg shared library{hidden} (Debian/Ubuntu: apt-get install libturbojpeg0; "
            f"macOS: brew install jpeg-turbo); {install_hint('fastjpeg')}"
        )
    return found


def _saw_adobe_marker(data: bytes | memoryview) -> bool:
    """Whether the JPEG's header has an Adobe APP14 segment (libjpeg's ``saw_Adobe_marker``)."""
    at = 2
    while at + 4 <= len(data):
        if data[at] != 0xFF:
            return False  # not a marker where one must be: no Adobe segment we can trust
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte before a marker
            at += 1
            continue
        if marker == _START_OF_SCAN:
            return False
        if marker in _STANDALONE:
            at += 2
            continue
        if marker == _ADOBE and bytes(data[at + 4 : at + 9]) == b"Adobe":
            return True
        at += 2 + int.from_bytes(data[at + 2 : at + 4], "big")
    return False


def _cmyk_to_rgb(cmyk: npt.NDArray[np.uint8], adobe: bool) -> npt.NDArray[np.uint8]:
    """TensorFlow's conversion (core/lib/jpeg/jpeg_mem.cc), integer division included."""
    ink = cmyk.astype(np.int32)
    colour, black = ink[..., :3], ink[..., 3:]
    rgb = colour * black // 255 if adobe else (255 - colour) * (255 - black) // 255
    return rgb.astype(np.uint8)


def _luma(rgb: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8]:
    """Pillow's ITU-R 601-2 fixed-point grey, as :mod:`.image` uses for RGB to L."""
    r, g, b = (rgb[..., c].astype(np.int32) for c in range(3))
    return ((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16).astype(np.uint8)[..., None]


def decode_jpeg_fast(
    data: bytes | memoryview,
    mode: Literal["RGB", "L", "unchanged"] = "RGB",
    min_height: int = 0,
    min_width: int = 0,
) -> npt.NDArray[np.uint8]:
    """A JPEG decoded as ``tf.io.decode_jpeg`` decodes it by default, as a uint8 HWC array.

    Args:
        data: the JPEG.
        mode: ``"RGB"`` (``channels=3``), ``"L"`` (``channels=1``: the luma plane; from a CMYK
            JPEG, which TensorFlow refuses, the grey of its RGB) or ``"unchanged"`` (grey JPEGs
            one channel, all others RGB).
        min_height, min_width: decode at the smallest DCT scale (1/8 ... 1) that keeps at
            least these: ``decode_jpeg(ratio=...)``'s pixels.

    Raises:
        ImportError: simplejpeg is not installed.
        ValueError: simplejpeg's error for bytes that are not a JPEG it can decode.
    """
    simplejpeg = fast_dct_library()
    colorspace = simplejpeg.decode_jpeg_header(data)[2]
    options = {"fastdct": True, "fastupsample": False, "min_height": min_height, "min_width": min_width}
    if colorspace in ("CMYK", "YCCK"):
        cmyk = simplejpeg.decode_jpeg(data, colorspace="CMYK", **options)
        rgb = _cmyk_to_rgb(cmyk, _saw_adobe_marker(data))
        return _luma(rgb) if mode == "L" else rgb
    grey = mode == "L" or (mode == "unchanged" and colorspace == "Gray")
    array: npt.NDArray[np.uint8] = simplejpeg.decode_jpeg(data, "GRAY" if grey else "RGB", **options)
    return array


def _smallest_scale(
    factors: Any, height: int, width: int, min_height: int, min_width: int
) -> tuple[int, int]:
    """The smallest DCT scale (at most 1) that keeps at least ``min_height`` x ``min_width``; of
    scales that give the same size (sides under 8 pixels), the largest, as TurboJPEG takes it
    for that size."""

    def size(factor: tuple[int, int]) -> tuple[int, int]:
        return -(-height * factor[0] // factor[1]), -(-width * factor[0] // factor[1])

    ordered = sorted((f for f in factors if f[0] <= f[1]), key=lambda f: f[0] / f[1])
    for at, factor in enumerate(ordered):
        if size(factor)[0] >= min_height and size(factor)[1] >= min_width:
            num, denom = [f for f in ordered[at:] if size(f) == size(factor)][-1]
            return int(num), int(denom)
    return 1, 1


def decode_jpeg_crop_fast(
    data: bytes | memoryview,
    mode: Literal["RGB", "L", "unchanged"],
    box: Box,
    min_height: int = 0,
    min_width: int = 0,
) -> tuple[npt.NDArray[np.uint8], tuple[float, float, float, float]]:
    """The part of a JPEG around ``box`` as ``tf.io.decode_and_crop_jpeg`` decodes ``box``.

    Only the iMCU rows and columns that cover the box are decoded (after a lossless cut), at
    the smallest DCT scale that keeps at least ``min_height`` x ``min_width`` over the whole
    image (so ``box`` at least its share of them). ``mode`` as for :func:`decode_jpeg_fast`.

    Returns:
        The decoded pixels (uint8 HWC) and ``box`` within them, in their (scaled) pixels.

    Raises:
        ImportError: PyTurboJPEG or libturbojpeg is missing.
        OSError: libturbojpeg's error for bytes it cannot decode.
    """
    turbojpeg, decoder = crop_library()
    width, height, subsample, colorspace = decoder.decode_header(data)
    top, left, h, w = box
    mcu_w, mcu_h = turbojpeg.tjMCUWidth[subsample], turbojpeg.tjMCUHeight[subsample]
    x0 = left // mcu_w * mcu_w  # jpeg_crop_scanline: from the iMCU column to the box's right edge
    y0 = max(0, (top // mcu_h - 1) * mcu_h)  # rows: an iMCU row of context each side, as a full decode
    y1 = min(height, (-(-(top + h) // mcu_h) + 1) * mcu_h)
    region = decoder.crop(bytes(data), x0, y0, left + w - x0, y1 - y0, preserve=True)
    num, denom = _smallest_scale(decoder.scaling_factors, height, width, min_height, min_width)
    cmyk = colorspace in (turbojpeg.TJCS_CMYK, turbojpeg.TJCS_YCCK)
    grey = mode == "L" or (mode == "unchanged" and colorspace == turbojpeg.TJCS_GRAY)
    pixel_format = turbojpeg.TJPF_CMYK if cmyk else turbojpeg.TJPF_GRAY if grey else turbojpeg.TJPF_RGB
    array: npt.NDArray[np.uint8] = decoder.decode(
        region, pixel_format=pixel_format, scaling_factor=(num, denom), flags=turbojpeg.TJFLAG_FASTDCT
    )
    if cmyk:
        array = _cmyk_to_rgb(array, _saw_adobe_marker(data))
        array = _luma(array) if mode == "L" else array
    scale = num / denom
    return array, ((top - y0) * scale, (left - x0) * scale, h * scale, w * scale)
