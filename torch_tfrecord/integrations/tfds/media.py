"""The media TFDS stores encoded beyond 8-bit images: 16-bit PNGs, float32 images (a float's four
bytes as the four channels of an 8-bit PNG), and audio files; decoded as ``tfds.as_numpy`` does,
in PyTorch's layout (images ``[channels, height, width]``).
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import torch

from ...codec.image import decode_image
from ...codec.tf_jpeg import DCT
from ...support.extras import install_hint

__all__ = ["decode_audio", "decode_tfds_image"]


def decode_tfds_image(data: bytes, dtype: str, channels: int | None, dct: DCT = "fast") -> torch.Tensor:
    """An image TFDS wrote with ``dtype`` uint8, uint16 or float32 (one channel); a JPEG's
    inverse DCT as ``dct`` says (``"fast"``: TensorFlow's default, as ``tfds.as_numpy``).

    Raises:
        ImportError: a 16-bit colour PNG without torchvision (Pillow reads it as 8 bits).
        ValueError: the bytes do not hold such an image.
    """
    if dtype == "uint8":
        mode = {3: "RGB", 1: "L"}.get(channels or 0, "unchanged")
        return decode_image(data, mode, dct)  # type: ignore[arg-type]
    if dtype == "float32":  # TFDS bitcasts the float's bytes to 4 channels of an 8-bit PNG
        rgba = decode_image(data, "unchanged")
        if rgba.dtype != torch.uint8 or rgba.shape[0] != 4:
            raise ValueError(f"a float32 image is stored as 4 channels of uint8, found {tuple(rgba.shape)}")
        return rgba.permute(1, 2, 0).contiguous().view(torch.float32).permute(2, 0, 1)
    pixels = _png16(data)
    if channels is not None and pixels.shape[0] != channels:
        raise ValueError(f"a {channels}-channel uint16 image, found {pixels.shape[0]} channels")
    return pixels


def _png16(data: bytes) -> torch.Tensor:
    try:
        import torchvision.io as tvio
    except ImportError:
        return _png16_pillow(data)
    encoded = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    pixels: torch.Tensor = tvio.decode_png(encoded, mode=tvio.ImageReadMode.UNCHANGED)
    if pixels.dtype != getattr(torch, "uint16", None):  # torch < 2.3 has no uint16
        raise ValueError(f"a uint16 image is stored as a 16-bit PNG, found {pixels.dtype}")
    return pixels


def _png16_pillow(data: bytes) -> torch.Tensor:
    try:
        from PIL import Image
    except ImportError as error:
        raise ImportError(
            f"decoding 16-bit images needs torchvision or Pillow; {install_hint('vision')}"
        ) from error
    with Image.open(io.BytesIO(data)) as image:
        if image.mode not in ("I;16", "I;16B", "I;16L"):
            raise ImportError(
                f"Pillow reads this 16-bit {image.mode} PNG as 8 bits; decoding it needs torchvision: "
                f"{install_hint('vision')}"
            )
        array = np.asarray(image).astype(np.uint16)
    return torch.from_numpy(array[None].copy())


# libsndfile's sample formats -> the integer / float type pydub (which TFDS uses) gives them in.
_SAMPLES = {"PCM_16": "int16", "PCM_32": "int32", "FLOAT": "float32", "DOUBLE": "float64"}


def decode_audio(data: bytes, dtype: str, channels: int | None) -> torch.Tensor:
    """An audio file's samples, ``[length]`` (or ``[length, channels]``), as ``dtype``.

    Raises:
        ImportError: soundfile (the ``audio`` extra) is not installed.
        ValueError: not an audio file libsndfile reads, or a sample format TFDS reads otherwise.
    """
    soundfile = _soundfile()
    try:
        info = soundfile.info(io.BytesIO(data))
        if info.subtype not in _SAMPLES:
            raise ValueError(f"samples of {info.subtype} (read here: {', '.join(_SAMPLES)})")
        samples, _ = soundfile.read(io.BytesIO(data), dtype=_SAMPLES[info.subtype], always_2d=True)
    except (RuntimeError, soundfile.LibsndfileError) as error:
        raise ValueError(f"not an audio file libsndfile reads: {error}") from None
    if channels is None and samples.shape[1] == 1:
        samples = samples[:, 0]
    elif samples.shape[1] != (channels or 1):  # pydub's mixing down or up is not reproduced here
        raise ValueError(f"{samples.shape[1]} channels where the feature has {channels}")
    return torch.from_numpy(np.ascontiguousarray(samples.astype(np.dtype(dtype), copy=False)))


def _soundfile() -> Any:
    try:
        import soundfile
    except (ImportError, OSError) as error:  # OSError: the library without its libsndfile
        raise ImportError(
            f"decoding TFDS audio stored encoded needs soundfile; {install_hint('audio')}"
        ) from error
    return soundfile
