"""Writes TensorFlow's JPEG pixels for tests/test_tf_jpeg.py. Run once, in a scratch venv:

    python -m venv /tmp/tfvenv && /tmp/tfvenv/bin/pip install tensorflow-cpu pillow
    /tmp/tfvenv/bin/python tests/data/make_tf_jpeg_golden.py

Makes small JPEGs of every kind a TFRecord may hold (baseline 4:2:0, 4:2:2 and 4:4:4,
progressive, greyscale, Adobe CMYK; odd sizes, so that edge blocks and chroma upsampling are
exercised) with Pillow, and decodes each with TensorFlow the ways a TF pipeline does: its
default ``decode_jpeg`` (the fast integer DCT, as ``tfds.as_numpy`` gives), ``INTEGER_ACCURATE``,
one channel, ``ratio=2`` and ``ratio=4``, and ``decode_and_crop_jpeg`` with a window. Writes
tests/data/tf_jpeg/: the JPEG files and expected.npz (``<jpeg>/<way>`` -> uint8 HWC array).
The test suite never imports TensorFlow.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import numpy as np
import tensorflow as tf
from PIL import Image

OUT = Path(__file__).resolve().parent / "tf_jpeg"
SEED = 20261125

# name -> (height, width, Pillow mode, save options)
KINDS = {
    "baseline_420": (48, 64, "RGB", {"quality": 90, "subsampling": 2}),
    "baseline_422": (47, 61, "RGB", {"quality": 85, "subsampling": 1}),
    "baseline_444": (48, 64, "RGB", {"quality": 95, "subsampling": 0}),
    "odd_420": (37, 53, "RGB", {"quality": 75, "subsampling": 2}),
    "progressive": (48, 64, "RGB", {"quality": 90, "progressive": True, "subsampling": 2}),
    "grey": (48, 64, "L", {"quality": 90}),
    "cmyk": (40, 56, "CMYK", {"quality": 90}),
}
# decode_and_crop_jpeg windows: [top, left, height, width]
CROP = {
    "baseline_420": [0, 8, 48, 48],
    "odd_420": [5, 3, 21, 30],
    "progressive": [8, 16, 24, 32],
    "baseline_444": [7, 9, 33, 41],
    "grey": [0, 8, 48, 48],
    "cmyk": [4, 4, 24, 24],
}


def picture(rng: np.random.Generator, height: int, width: int, mode: str) -> Image.Image:
    """Smooth gradients, a disc and a little noise: what photos give a codec, small."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    channels = {"RGB": 3, "L": 1, "CMYK": 4}[mode]
    planes = []
    for c in range(channels):
        a, b = rng.uniform(4, 12, 2)
        plane = 128 + 70 * np.sin(x / a + c) * np.cos(y / b) + rng.normal(0, 6, (height, width))
        plane[(x - width / 2) ** 2 + (y - height / 2) ** 2 < (height / 4) ** 2] *= 0.6
        planes.append(plane)
    array = np.stack(planes, -1).clip(0, 255).astype(np.uint8)
    return Image.fromarray(array[..., 0] if channels == 1 else array, mode)


def decodings(data: bytes, crop: list[int] | None) -> dict[str, Callable[[], tf.Tensor]]:
    """TensorFlow's decodes of one JPEG, by name."""
    ways: dict[str, Callable[[], tf.Tensor]] = {
        "fast": lambda: tf.io.decode_jpeg(data, channels=3),
        "accurate": lambda: tf.io.decode_jpeg(data, channels=3, dct_method="INTEGER_ACCURATE"),
        "grey_fast": lambda: tf.io.decode_jpeg(data, channels=1),
        "ratio2": lambda: tf.io.decode_jpeg(data, channels=3, ratio=2),
        "ratio4": lambda: tf.io.decode_jpeg(data, channels=3, ratio=4),
        "decode_image": lambda: tf.image.decode_image(data, channels=3),  # what TFDS calls
    }
    if crop is not None:
        ways["crop_fast"] = lambda: tf.io.decode_and_crop_jpeg(data, crop, channels=3)
    return ways


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)
    expected: dict[str, np.ndarray] = {}
    for name, (height, width, mode, options) in KINDS.items():
        buffer = io.BytesIO()
        picture(rng, height, width, mode).save(buffer, format="JPEG", **options)
        data = buffer.getvalue()
        (OUT / f"{name}.jpg").write_bytes(data)
        ways = decodings(data, CROP.get(name))
        for way, decode in ways.items():
            try:
                expected[f"{name}/{way}"] = decode().numpy()
            except tf.errors.InvalidArgumentError as error:  # TF has no such decode of this JPEG
                print(f"{name}/{way}: TensorFlow refuses: {error.message.splitlines()[0]}")
    np.savez_compressed(OUT / "expected.npz", **expected)
    print(f"{len(expected)} arrays for {len(KINDS)} JPEGs in {OUT}")


if __name__ == "__main__":
    main()
