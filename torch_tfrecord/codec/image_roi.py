"""Region-of-interest JPEG decoding of a whole batch in one native call (the optional ``_jpeg`` extension).

Each JPEG's kept region is decoded alone: the iMCU rows and columns that cover it
(libjpeg-turbo's ``jpeg_crop_scanline`` and ``jpeg_skip_scanlines``), at the smallest DCT scale
that keeps at least the output's pixels across it, on native threads with the GIL released. The
pixels are those of a whole decode at that scale (simplejpeg's, value for value; or, asked,
TensorFlow's ``decode_and_crop_jpeg``'s), cut as
:func:`torch_tfrecord.codec.image_batch.resize` cuts them: one pixel of margin each side keeps
chroma upsampling the same at the region's edges. Asked to (``verify_full``), the rows below the
region are entropy-decoded too, so damage anywhere in the file fails as a whole decode does;
otherwise the decode stops after the region's last row, as TensorFlow's ``decode_and_crop_jpeg``
and DALI's stop (a progressive JPEG's scans are read whole either way). Given the batch's
output (``out``), the thread that decoded a region also resizes it into the
image's place there, byte for byte as :func:`~torch_tfrecord.codec.image_batch.resize` (torch's
uint8 antialiased bilinear), so one call returns the finished batch. setup.py builds the extension
where libjpeg's header is found (the portable wheels carry it, libjpeg-turbo inside); without it,
or where it cannot load, :func:`available` is False and :func:`warn_unavailable` warns once.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType

import torch

from ..support import extension

__all__ = [
    "Region",
    "available",
    "decode_regions",
    "read_sizes",
    "resize_into",
    "resizes_fast",
    "warn_unavailable",
]

compiled: ModuleType | None
load_error: ImportError | None  # why it is missing: not built (no libjpeg header), or cannot load
compiled, load_error = extension.load(__package__ + "._jpeg")

# top, left, height, width of the kept region in the image's pixels, then the pixels wanted
# across the whole image (the DCT scale is the smallest that keeps at least these).
Region = tuple[int, int, int, int, int, int]


def available() -> bool:
    """Whether the extension is built (tests and benchmarks switch it off by setting ``compiled``)."""
    return compiled is not None


def warn_unavailable() -> None:
    """Warns once that JPEGs decode whole (at a reduced scale) because the extension is missing,
    not where a test or benchmark switched it off (``compiled = None`` after it loaded)."""
    if compiled is None and load_error is not None:
        state = extension.unavailable(load_error)
        extension.warn_once(
            "roi_jpeg",
            f"the region-of-interest JPEG decoder (torch_tfrecord.codec._jpeg) {state}; "
            "JPEGs decode whole at a reduced scale, about half as fast for random crops",
        )


def read_sizes(encoded: Sequence[bytes | memoryview]) -> list[tuple[int, int] | ValueError]:
    """Each JPEG's ``(height, width)`` from its header, or the error libjpeg gave for it."""
    assert compiled is not None
    return [size if isinstance(size, tuple) else ValueError(size) for size in compiled.read_sizes(encoded)]


def decode_regions(
    encoded: Sequence[bytes | memoryview],
    regions: Sequence[Region],
    grey: bool,
    fast_dct: bool,
    threads: int,
    tf_crop: bool = False,
    out: torch.Tensor | None = None,
    slots: Sequence[int] | None = None,
    verify_full: bool = True,
) -> list[torch.Tensor | ValueError | None] | list[bool | ValueError]:
    """The regions of a batch of JPEGs, decoded on ``threads`` native threads (and resized into
    ``out`` when given).

    Args:
        encoded: the JPEGs.
        regions: one :data:`Region` per JPEG.
        grey: decode the luma plane (one channel) instead of RGB.
        fast_dct: libjpeg's fast integer inverse DCT (TensorFlow's default) instead of the accurate one.
        threads: native threads to decode on.
        tf_crop: decode each box as TensorFlow's ``decode_and_crop_jpeg`` does (the pixels of
            :func:`~torch_tfrecord.codec.tf_jpeg.decode_jpeg_crop_fast`: the crop's left and right
            edges upsampled as the image's), not as a whole decode.
        out: the batch, a contiguous uint8 ``[B, C, H, W]`` CPU tensor (C: 1 for ``grey``, else 3):
            each region is resized to its size on the thread that decoded it, straight into
            ``out[slots[k]]`` (no tensor and no Python per image).
        slots: with ``out``, each JPEG's index in it.
        verify_full: entropy-decode each JPEG to its end, so that damage below the region fails
            it as a whole decode would; False: stop after the region's last row (the pixels are
            the same).

    Returns:
        Per JPEG: its region as a uint8 ``[C, H, W]`` tensor (a channels-last view), or with
        ``out``, True once ``out[slot]`` holds it; the error libjpeg gave for it (corrupt data,
        warnings included); None (with ``out``: False, ``out[slot]`` left to the caller) for a
        CMYK / YCCK JPEG, which this path does not convert.
    """
    assert compiled is not None
    options = (grey, fast_dct, tf_crop, threads)
    if out is not None:
        batch = out.numpy()  # the tensor's own memory (shared memory in a DataLoader worker)
        results = compiled.decode_regions(encoded, regions, *options, batch, slots, verify_full)
        return [ValueError(result) if isinstance(result, str) else result is True for result in results]
    decoded: list[torch.Tensor | ValueError | None] = []
    for result in compiled.decode_regions(encoded, regions, *options, None, None, verify_full):
        if result is None or isinstance(result, str):
            decoded.append(None if result is None else ValueError(result))
            continue
        pixels, height, width, channels = result
        array = torch.frombuffer(pixels, dtype=torch.uint8)  # the decoder's own buffer: no copy
        decoded.append(array.view(height, width, channels).permute(2, 0, 1))
    return decoded


def resizes_fast() -> bool:
    """Whether :func:`decode_regions` should resize into ``out``: where its SIMD (AVX2) loops run.
    Elsewhere its portable loops measured 5x slower than them, slower than torch's own resize."""
    return compiled is not None and bool(compiled.simd())


def resize_into(image: torch.Tensor, out: torch.Tensor) -> None:
    """``image`` (uint8 ``[C, H, W]``) resized into ``out`` (contiguous uint8 ``[C, h, w]``) by the
    batch path's resize: torch's ``F.interpolate(bilinear, antialias=True)`` on uint8, byte for byte."""
    assert compiled is not None
    height, width = image.shape[-2:]
    compiled.resize(image.permute(1, 2, 0).contiguous().numpy(), height, width, out.numpy())
