"""Decoding one image: torchvision.io when it imports, Pillow otherwise; same pixels either way.

Both are optional (the ``vision`` extra) and imported on first use.
Set ``TORCH_TFRECORD_IMAGE_BACKEND=pillow`` (or ``torchvision``) to force one.
"""

from __future__ import annotations

import functools
import io
import os
from typing import Any, Literal

import numpy as np
import torch

from ..support.extras import install_hint
from .tf_jpeg import DCT, decode_jpeg_fast

__all__ = ["Mode", "decode_image", "image_backend"]

Mode = Literal["RGB", "L", "unchanged"]


@functools.cache
def _torchvision_io() -> Any:
    try:
        import torchvision.io
    except (ImportError, RuntimeError, OSError):
        # RuntimeError / OSError: a torchvision built for another torch fails at import time.
        return None
    return torchvision.io


@functools.cache
def _pillow() -> Any:
    try:
        import PIL.Image
    except ImportError:
        return None
    return PIL.Image


def image_backend() -> Literal["torchvision", "pillow"]:
    """The library that decodes images here.

    Raises:
        ImportError: neither torchvision nor Pillow is installed (names the extra to install).
    """
    forced = os.environ.get("TORCH_TFRECORD_IMAGE_BACKEND", "").lower()
    if forced not in ("", "torchvision", "pillow"):
        raise ValueError(f"TORCH_TFRECORD_IMAGE_BACKEND={forced!r}: use 'torchvision' or 'pillow'")
    if forced != "pillow" and _torchvision_io() is not None:
        return "torchvision"
    if forced != "torchvision" and _pillow() is not None:
        return "pillow"
    wanted = forced or "torchvision or Pillow"
    raise ImportError(f"decoding images needs {wanted}; {install_hint('vision')}")


def _luma(rgb: torch.Tensor) -> torch.Tensor:
    """Grey levels from uint8 RGB with Pillow's ITU-R 601-2 fixed-point formula, so both backends agree."""
    r, g, b = rgb.to(torch.int32)
    grey: torch.Tensor = (r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16
    return grey.to(torch.uint8)[None]


def decode_image(data: bytes, mode: Mode = "RGB", dct: DCT = "accurate") -> torch.Tensor:
    """Decodes JPEG / PNG / ... bytes to a uint8 ``[channels, height, width]`` tensor.

    Args:
        data: the encoded image.
        mode: ``"RGB"`` (3 channels), ``"L"`` (1 channel) or ``"unchanged"`` (as stored).
        dct: a JPEG's inverse DCT: ``"accurate"`` (TensorFlow's ``INTEGER_ACCURATE``) or
            ``"fast"`` (TensorFlow's default pixels; needs simplejpeg, the ``fastjpeg`` extra).

    Raises:
        ImportError: no image library is installed, or none that can do ``dct="fast"``.
        Exception: the library's own error for bytes that are not an image.
    """
    if dct not in ("accurate", "fast"):
        raise ValueError(f"dct must be 'accurate' or 'fast', got {dct!r}")
    is_jpeg = data[:3] == b"\xff\xd8\xff"
    if dct == "fast" and is_jpeg:
        array = decode_jpeg_fast(data, mode)
        return torch.from_numpy(array).permute(2, 0, 1).contiguous()
    if image_backend() == "torchvision":
        tvio = _torchvision_io()
        encoded = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        if mode == "unchanged":
            return tvio.decode_image(encoded, mode=tvio.ImageReadMode.UNCHANGED)  # type: ignore[no-any-return]
        if mode == "L" and is_jpeg:
            return tvio.decode_image(encoded, mode=tvio.ImageReadMode.GRAY)  # type: ignore[no-any-return]
        rgb: torch.Tensor = tvio.decode_image(encoded, mode=tvio.ImageReadMode.RGB)
        # Grey from RGB with Pillow's formula (libpng's differs by a level here and there).
        return rgb if mode == "RGB" else _luma(rgb)
    pil = _pillow()
    with pil.open(io.BytesIO(data)) as image:
        if mode == "L" and is_jpeg:
            # Decode the luma plane directly, as libjpeg does for torchvision's GRAY mode; a
            # decode to RGB and back differs by a few levels where chroma is subsampled.
            image.draft("L", image.size)
        if mode != "unchanged":
            image = image.convert(mode)
        array = np.asarray(image)
    if array.ndim == 2:
        array = array[:, :, None]
    if array.dtype != np.uint8:
        array = array.astype(np.uint8)
    return torch.from_numpy(array.transpose(2, 0, 1).copy())
