"""What the converters need to know of an image, read from its header: format and size.

Images are stored as their original bytes; decoding them only to learn their size would cost
more than the whole conversion. Pillow (the ``convert`` extra) reads just the header.
EXIF orientation is not applied: like TensorFlow's ``decode_jpeg`` and ``torch_tfrecord``'s
decoder, the stored pixel grid is the image, and boxes are in its coordinates. ``reencode``
applies the orientation and writes the pixels anew, for data that must look upright anywhere.
"""

from __future__ import annotations

import dataclasses
import io
from typing import Any

from ..support.extras import install_hint

__all__ = ["ImageInfo", "pillow", "probe", "reencode"]

_FORMATS = {"JPEG": "jpeg", "PNG": "png", "GIF": "gif", "BMP": "bmp", "WEBP": "webp", "TIFF": "tiff"}


def pillow() -> Any:
    """PIL.Image, or an ImportError naming the extra."""
    try:
        import PIL.Image
    except ImportError as error:
        raise ImportError(f"converting images needs Pillow; {install_hint('convert')}") from error
    return PIL.Image


@dataclasses.dataclass(frozen=True)
class ImageInfo:
    """Format (``"jpeg"``, ``"png"`` ...), stored width and height, and EXIF orientation (1 = none)."""

    format: str
    width: int
    height: int
    orientation: int = 1


def probe(data: bytes) -> ImageInfo:
    """Format and size of an encoded image, from its header.

    Raises:
        ValueError: the bytes are not an image Pillow can read (the message says why).
    """
    image_module = pillow()
    try:
        with image_module.open(io.BytesIO(data)) as image:
            fmt = image.format or ""
            width, height = image.size
            orientation = int(image.getexif().get(0x0112, 1)) if fmt in ("JPEG", "TIFF", "WEBP", "PNG") else 1
    except Exception as error:  # Pillow raises several kinds for bad headers
        raise ValueError(f"not a readable image ({type(error).__name__}: {error})") from None
    if fmt not in _FORMATS:
        raise ValueError(f"image format {fmt or 'unknown'!r} is not one of {', '.join(sorted(_FORMATS))}")
    if width < 1 or height < 1:
        raise ValueError(f"image size {width}x{height} is empty")
    return ImageInfo(_FORMATS[fmt], width, height, orientation if 1 <= orientation <= 8 else 1)


def reencode(data: bytes, quality: int = 95) -> tuple[bytes, ImageInfo]:
    """Decodes, applies the EXIF orientation, and encodes again: JPEG stays JPEG (RGB or grey),
    anything else becomes PNG. Deterministic: the same input gives the same bytes."""
    image_module = pillow()
    from PIL import ImageOps

    try:
        with image_module.open(io.BytesIO(data)) as image:
            image.load()
            fmt = image.format
            upright = ImageOps.exif_transpose(image)
    except Exception as error:
        raise ValueError(f"not a readable image ({type(error).__name__}: {error})") from None
    out = io.BytesIO()
    if fmt == "JPEG":
        if upright.mode not in ("RGB", "L"):
            upright = upright.convert("RGB")
        upright.save(out, format="JPEG", quality=quality)
        name = "jpeg"
    else:
        if upright.mode not in ("RGB", "RGBA", "L", "LA", "I;16"):
            upright = upright.convert("RGBA" if "A" in upright.mode else "RGB")
        upright.save(out, format="PNG")
        name = "png"
    return out.getvalue(), ImageInfo(name, upright.width, upright.height, 1)
