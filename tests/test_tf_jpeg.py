"""TensorFlow's JPEG pixels: ``dct="fast"`` against pixels written by TensorFlow itself.

tests/data/make_tf_jpeg_golden.py wrote tests/data/tf_jpeg/ with TensorFlow 2.21: small JPEGs
of every kind (baseline 4:2:0 / 4:2:2 / 4:4:4, odd sizes, progressive, grey, Adobe CMYK) and
TF's pixels for each: ``decode_jpeg`` by default (the fast DCT), ``INTEGER_ACCURATE``, one
channel, ``ratio=2`` / ``ratio=4``, ``decode_and_crop_jpeg`` and ``decode_image`` (TFDS's call).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import torch_tfrecord as tt
from torch_tfrecord.codec import image_batch, image_roi, tf_jpeg
from torch_tfrecord.errors import SpecError
from torch_tfrecord.vision import decode_image

pytest.importorskip("simplejpeg")

DATA = Path(__file__).parent / "data" / "tf_jpeg"
EXPECTED = dict(np.load(DATA / "expected.npz"))
KINDS = sorted({key.split("/")[0] for key in EXPECTED})
# decode_and_crop_jpeg's windows in make_tf_jpeg_golden.py: [top, left, height, width]
CROPS = {
    "baseline_420": (0, 8, 48, 48),
    "odd_420": (5, 3, 21, 30),
    "progressive": (8, 16, 24, 32),
    "baseline_444": (7, 9, 33, 41),
    "grey": (0, 8, 48, 48),
    "cmyk": (4, 4, 24, 24),
}


def jpeg(kind: str) -> bytes:
    return (DATA / f"{kind}.jpg").read_bytes()


def crop_pixels_missing(kind: str = "cmyk") -> str | None:
    """Why TensorFlow's crop pixels of a JPEG of ``kind`` cannot be made here (None: they can):
    they come from the _jpeg extension, or from PyTurboJPEG (CMYK JPEGs always)."""
    try:
        tf_jpeg.crop_library()
        return None
    except ImportError:
        pass
    if image_roi.available() and kind != "cmyk":
        return None
    other = "" if kind == "cmyk" else " or the _jpeg extension (built with libjpeg's headers)"
    return (
        "TensorFlow's crop pixels of this JPEG need PyTurboJPEG with the libturbojpeg shared library "
        f"(apt-get install libturbojpeg0){other}"
    )


def hwc(image: torch.Tensor) -> np.ndarray:
    return image.permute(1, 2, 0).numpy()


def test_the_golden_files_cover_every_kind() -> None:
    assert KINDS == ["baseline_420", "baseline_422", "baseline_444", "cmyk", "grey", "odd_420", "progressive"]
    assert set(CROPS) == {key.split("/")[0] for key in EXPECTED if key.endswith("/crop_fast")}


@pytest.mark.parametrize("kind", KINDS)
def test_fast_dct_gives_tensorflows_default_pixels(kind: str) -> None:
    ours = hwc(decode_image(jpeg(kind), "RGB", dct="fast"))
    np.testing.assert_array_equal(ours, EXPECTED[f"{kind}/fast"])
    np.testing.assert_array_equal(ours, EXPECTED[f"{kind}/decode_image"])  # what tfds.as_numpy gives
    # The two DCTs do differ here: the test would see a decoder that ignores dct.
    assert not np.array_equal(hwc(decode_image(jpeg(kind), "RGB")), ours)


@pytest.mark.parametrize("kind", [kind for kind in KINDS if kind != "cmyk"])
def test_fast_dct_grey_is_tensorflows_one_channel(kind: str) -> None:
    ours = hwc(decode_image(jpeg(kind), "L", dct="fast"))
    np.testing.assert_array_equal(ours, EXPECTED[f"{kind}/grey_fast"])
    if kind == "grey":
        np.testing.assert_array_equal(hwc(decode_image(jpeg(kind), "unchanged", dct="fast")), ours)


@pytest.mark.parametrize("kind", KINDS)
def test_accurate_dct_is_integer_accurate(kind: str) -> None:
    ours = hwc(decode_image(jpeg(kind), "RGB", dct="accurate")).astype(int)
    difference = np.abs(ours - EXPECTED[f"{kind}/accurate"].astype(int)).max()
    # CMYK: torchvision rounds its CMYK -> RGB product, TensorFlow truncates it (docs/tensorflow.md).
    assert difference == (1 if kind == "cmyk" else 0)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("ratio", [2, 4])
def test_size_at_a_dct_scale_is_tensorflows_ratio(kind: str, ratio: int) -> None:
    want = EXPECTED[f"{kind}/ratio{ratio}"]
    spec = tt.Image("RGB", size=want.shape[:2], dct="fast")
    batch = image_batch.decode_images([jpeg(kind)] * 2, spec)
    assert isinstance(batch, torch.Tensor) and batch.shape == (2, 3, *want.shape[:2])
    np.testing.assert_array_equal(hwc(batch[1]), want)


@pytest.mark.parametrize("kind", sorted(CROPS))
def test_a_crop_at_full_scale_is_tensorflows_decode_and_crop(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if crop_pixels_missing(kind):
        pytest.skip(crop_pixels_missing(kind))
    top, left, height, width = CROPS[kind]
    # Whatever region a crop policy draws, its pixels are TF's decode_and_crop_jpeg of it.
    monkeypatch.setattr(image_batch, "crop_box", lambda *args: (top, left, height, width))
    spec = tt.Image("RGB", size=(height, width), crop="random", dct="fast")
    ours = image_batch.decode_images([jpeg(kind)], spec)
    np.testing.assert_array_equal(hwc(ours[0]), EXPECTED[f"{kind}/crop_fast"])


def test_center_crop_in_a_dataset_is_tensorflows_decode_and_crop(tmp_path: Path) -> None:
    if crop_pixels_missing("baseline_420"):
        pytest.skip(crop_pixels_missing("baseline_420"))
    path = str(tmp_path / "images.tfrecord")
    with tt.ExampleWriter(path) as writer:
        writer.write({"image": jpeg("baseline_420")})
    spec = {"image": tt.Image("RGB", size=48, crop="center", dct="fast")}
    (batch,) = list(tt.TFRecordDataset(path, spec=spec, batch_size=1, shuffle=False))
    np.testing.assert_array_equal(hwc(batch["image"][0]), EXPECTED["baseline_420/crop_fast"])


def test_fast_dct_without_simplejpeg_names_the_extra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(tf_jpeg, "simplejpeg_module", lambda: None)
    with pytest.raises(ImportError, match="fastjpeg"):
        decode_image(jpeg("grey"), "RGB", dct="fast")
    path = str(tmp_path / "images.tfrecord")
    with tt.ExampleWriter(path) as writer:
        writer.write({"image": jpeg("grey")})
    for spec in (tt.Image(dct="fast"), tt.Image(size=8, dct="fast")):
        with pytest.raises(ImportError, match="fastjpeg"):  # never other pixels, never "not an image"
            next(iter(tt.TFRecordDataset(path, spec={"image": spec}, batch_size=1)))
    # The accurate DCT needs no simplejpeg.
    assert decode_image(jpeg("grey"), "RGB").shape == (3, 48, 64)


def test_the_spec_checks_dct() -> None:
    assert repr(tt.Image(dct="fast")) == "tt.Image(mode='RGB', dct='fast')"
    assert tt.Image() == tt.Image(dct="accurate") != tt.Image(dct="fast")
    with pytest.raises(SpecError, match="dct must be"):
        tt.Image(dct="islow")  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="nvJPEG"):
        tt.Image(dct="fast", device="cuda")
    with pytest.raises(ValueError, match="dct must be"):
        decode_image(jpeg("grey"), dct="exact")  # type: ignore[arg-type]


def test_adobe_marker_is_found_only_in_the_header() -> None:
    assert tf_jpeg._saw_adobe_marker(jpeg("cmyk"))
    assert not tf_jpeg._saw_adobe_marker(jpeg("baseline_420"))
    assert not tf_jpeg._saw_adobe_marker(b"\xff\xd8\xff")  # truncated: no marker to trust


def test_crops_without_pyturbojpeg_name_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without PyTurboJPEG's library TensorFlow's crops come from the _jpeg extension where it is
    built (tests/test_image_roi.py); with neither, the error names what to install."""
    monkeypatch.setattr(tf_jpeg, "_turbojpeg", lambda: None)
    monkeypatch.setattr(image_roi, "compiled", None)
    with pytest.raises(ImportError, match="libturbojpeg0.*fastjpeg"):
        image_batch.decode_images([jpeg("grey")], tt.Image(size=16, crop="center", dct="fast"))
    # Whole images (decode_jpeg, ratio=) need simplejpeg only.
    assert image_batch.decode_images([jpeg("grey")], tt.Image(size=16, dct="fast")).shape == (1, 3, 16, 16)


@pytest.mark.parametrize("mode", ["RGB", "L"])
def test_region_decoding_at_a_reduced_scale_is_close_to_full_decode_crop_resize(mode: str) -> None:
    if crop_pixels_missing():  # decode_jpeg_crop_fast itself: PyTurboJPEG
        pytest.skip(crop_pixels_missing())
    from test_imagecodec import photo, psnr, reference

    pytest.importorskip("turbojpeg")
    spec = tt.Image(mode, size=(40, 56), crop="random", scale=(0.1, 0.6), dct="fast")
    for seed in range(6):
        data = photo(seed)  # 320 x 240, 4:2:0: regions of 1/2 to 1/8 of it, decoded at 1/2 or 1/4
        ours = image_batch.reduced_decode(data, spec, torch.Generator().manual_seed(seed))
        box = image_batch.crop_box(240, 320, spec, torch.Generator().manual_seed(seed))  # the same box
        full = reference(data, spec, box)  # accurate full decode, crop, float resize
        assert ours.shape == full.shape == (3 if mode == "RGB" else 1, 40, 56)
        assert psnr(ours, full) > 38, (seed, box, psnr(ours, full))  # measured 40.9 ... 49.2 dB
