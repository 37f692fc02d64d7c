"""Image decoding. Runs on the torchvision backend when torchvision imports, and on Pillow always;
the two must give the same pixels."""

from __future__ import annotations

import io
import re

import numpy as np
import pytest
import torch

import torch_tfrecord as tt
from torch_tfrecord.codec import image as vision
from torch_tfrecord.support.extras import install_hint

PIL = pytest.importorskip("PIL.Image")


def encode(array: np.ndarray, fmt: str) -> bytes:
    buffer = io.BytesIO()
    PIL.fromarray(array).save(buffer, format=fmt, quality=90)
    return buffer.getvalue()


@pytest.fixture
def picture() -> np.ndarray:
    rng = np.random.default_rng(0)
    return rng.integers(0, 256, (13, 17, 3), dtype=np.uint8)


BACKENDS = ["pillow"] + (["torchvision"] if vision._torchvision_io() is not None else [])


@pytest.mark.parametrize("backend", BACKENDS)
def test_png_decodes_exactly(backend: str, picture: np.ndarray, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_TFRECORD_IMAGE_BACKEND", backend)
    assert vision.image_backend() == backend
    out = vision.decode_image(encode(picture, "PNG"), "RGB")
    assert out.dtype == torch.uint8 and out.shape == (3, 13, 17)
    assert torch.equal(out, torch.from_numpy(picture).permute(2, 0, 1))
    grey = vision.decode_image(encode(picture[:, :, 0], "PNG"), "unchanged")
    assert torch.equal(grey, torch.from_numpy(picture[:, :, 0])[None])


@pytest.mark.skipif(len(BACKENDS) < 2, reason="torchvision does not import here: nothing to compare")
@pytest.mark.parametrize("mode", ["RGB", "L", "unchanged"])
def test_backends_give_the_same_pixels(
    mode: str, picture: np.ndarray, monkeypatch: pytest.MonkeyPatch
) -> None:
    for fmt in ["JPEG", "PNG"]:
        data = encode(picture, fmt)
        monkeypatch.setenv("TORCH_TFRECORD_IMAGE_BACKEND", "pillow")
        by_pillow = vision.decode_image(data, mode)
        monkeypatch.setenv("TORCH_TFRECORD_IMAGE_BACKEND", "torchvision")
        by_torchvision = vision.decode_image(data, mode)
        assert by_pillow.shape == by_torchvision.shape
        assert torch.equal(by_pillow, by_torchvision), (fmt, mode)


@pytest.mark.skipif(len(BACKENDS) < 2, reason="torchvision does not import here: nothing to compare")
def test_backends_agree_on_alpha_grey_and_palette_pngs(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(1)
    images = [
        PIL.fromarray(rng.integers(0, 256, (6, 7, 4), dtype=np.uint8), "RGBA"),
        PIL.fromarray(rng.integers(0, 256, (6, 7, 2), dtype=np.uint8), "LA"),
        PIL.fromarray(rng.integers(0, 256, (6, 7), dtype=np.uint8), "L"),
        PIL.fromarray(rng.integers(0, 256, (6, 7, 3), dtype=np.uint8)).convert("P"),
    ]
    for image in images:
        buffer = io.BytesIO()
        image.save(buffer, format="PNG")
        for mode in ["RGB", "L", "unchanged"]:
            results = []
            for backend in ["pillow", "torchvision"]:
                monkeypatch.setenv("TORCH_TFRECORD_IMAGE_BACKEND", backend)
                results.append(vision.decode_image(buffer.getvalue(), mode))
            assert torch.equal(results[0], results[1]), (image.mode, mode)


def test_image_spec_in_a_batch(picture: np.ndarray) -> None:
    records = [tt.encode_example({"img": tt.BytesList([encode(picture, "PNG")])}) for _ in range(2)]
    batch = tt.decode_batch(records, {"img": tt.Image("L")})
    assert [t.shape for t in batch["img"]] == [(1, 13, 17)] * 2


def test_not_an_image_names_key_and_record() -> None:
    record = tt.encode_example({"img": tt.BytesList([b"definitely not a picture"])})
    with pytest.raises(
        tt.FeatureTypeError, match="feature 'img' of record 0 of the batch is not a decodable image"
    ):
        tt.decode_batch([record], {"img": tt.Image()})


def test_no_image_library_is_an_import_error_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vision, "_torchvision_io", lambda: None)
    monkeypatch.setattr(vision, "_pillow", lambda: None)
    record = tt.encode_example({"img": tt.BytesList([b"\x89PNG"])})
    with pytest.raises(ImportError, match=f"; {re.escape(install_hint('vision'))}$"):
        tt.decode_batch([record], {"img": tt.Image()})


def test_backend_override_is_validated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_TFRECORD_IMAGE_BACKEND", "opencv")
    with pytest.raises(ValueError, match="TORCH_TFRECORD_IMAGE_BACKEND"):
        vision.image_backend()
