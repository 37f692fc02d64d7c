"""Region-of-interest JPEG decoding (codec/_jpeg.c through codec/image_roi.py): the same pixels as a
scaled whole decode, the same crop boxes as before, a stated PSNR against a full decode, one native
call per batch with the GIL released, and libjpeg's errors as the image path's errors."""

from __future__ import annotations

import dataclasses
import io
import random
import threading
import time

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from test_imagecodec import photo as imagecodec_photo

import torch_tfrecord as tt
from torch_tfrecord.codec import image_batch, image_roi
from torch_tfrecord.errors import FeatureTypeError
from torch_tfrecord.support import extension
from torch_tfrecord.support.seeds import mix_seed
from torch_tfrecord.vision import decode_image

PIL = pytest.importorskip("PIL.Image")
JpegImageFile = pytest.importorskip("PIL.JpegImagePlugin").JpegImageFile
simplejpeg = pytest.importorskip("simplejpeg")
pytestmark = pytest.mark.skipif(
    not image_roi.available(),
    reason=f"the _jpeg extension {extension.unavailable(image_roi.load_error)} "
    "(setup.py builds it where libjpeg-turbo's headers are: apt-get install libjpeg62-turbo-dev)",
)


def photo(
    seed: int,
    width: int = 640,
    height: int = 480,
    subsampling: int = 2,
    progressive: bool = False,
    grey: bool = False,
    restart: bool = False,
) -> bytes:
    """A COCO-sized photo-like JPEG (test_imagecodec's gradients, discs and noise) encoded as asked
    (``restart``: a restart marker after every MCU row)."""
    pil = PIL.open(io.BytesIO(imagecodec_photo(seed, width, height, fmt="PNG")))
    buffer = io.BytesIO()
    options = {"restart_marker_rows": 1} if restart else {}
    (pil.convert("L") if grey else pil).save(
        buffer, format="JPEG", quality=85, subsampling=subsampling, progressive=progressive, **options
    )
    return buffer.getvalue()


def scaled_decode_cut(data: bytes, region: image_roi.Region, grey: bool, fast: bool) -> np.ndarray:
    """What the region must equal: simplejpeg's whole decode at the need's scale, cut as resize() cuts."""
    top, left, h, w, need_h, need_w = region
    height, width = simplejpeg.decode_jpeg_header(data)[:2]
    whole = simplejpeg.decode_jpeg(
        data, "GRAY" if grey else "RGB", fastdct=fast, fastupsample=False, min_height=need_h, min_width=need_w
    )
    fy, fx = whole.shape[0] / height, whole.shape[1] / width
    y0, x0 = max(0, round(top * fy)), max(0, round(left * fx))
    y1 = min(whole.shape[0], max(y0 + 1, round(top * fy + h * fy)))
    x1 = min(whole.shape[1], max(x0 + 1, round(left * fx + w * fx)))
    y0, x0 = min(y0, y1 - 1), min(x0, x1 - 1)  # a sliver that rounds away keeps its last pixel
    return whole[y0:y1, x0:x1]


def test_regions_are_a_scaled_whole_decode_cut_exactly() -> None:
    """4:2:0, 4:2:2, 4:4:4, grey, progressive, odd sizes, every DCT scale, boxes anywhere (edges included)."""
    rng = random.Random(0)
    checked = set()
    for case in range(160):
        width, height = rng.choice([(640, 480), (333, 217), (17, 9), (480, 640), (1001, 37)])
        subsampling, progressive, grey = rng.choice([0, 1, 2]), rng.random() < 0.3, rng.random() < 0.2
        data = photo(case, width, height, subsampling, progressive, grey)
        h, w = rng.randint(1, height), rng.randint(1, width)
        top = rng.choice([0, height - h, rng.randint(0, height - h)])
        left = rng.choice([0, width - w, rng.randint(0, width - w)])
        need = (rng.randint(1, height), rng.randint(1, width)) if rng.random() < 0.7 else (1, 1)
        out_grey, fast = grey or rng.random() < 0.2, rng.random() < 0.5
        region = (top, left, h, w, *need)
        [got] = image_roi.decode_regions([data], [region], out_grey, fast, 1)
        assert isinstance(got, torch.Tensor)
        expected = scaled_decode_cut(data, region, out_grey, fast)
        assert np.array_equal(got.permute(1, 2, 0).numpy(), expected), (
            case,
            width,
            height,
            subsampling,
            region,
        )
        checked.add((subsampling, progressive, grey, top == 0 or left == 0 or top + h == height))
    assert len(checked) >= 12  # the mix above really covered the kinds of JPEG and box


@pytest.mark.parametrize("mode", ["RGB", "L"])
@pytest.mark.parametrize("crop", ["resize", "center", "random"])
@pytest.mark.parametrize("dct", ["accurate", "fast"])
def test_batches_have_todays_pixels(monkeypatch: pytest.MonkeyPatch, mode: str, crop: str, dct: str) -> None:
    spec = tt.Image(mode, size=(100, 150), crop=crop, dct=dct)  # type: ignore[arg-type]
    encoded = [photo(i, 320 + 16 * i, 240 - 8 * i, subsampling=i % 3, progressive=i == 2) for i in range(6)]
    encoded.append(_png(9))  # not a JPEG: decoded whole, in Python
    ids = list(range(40, 47))
    calls: list[int] = []
    decode_regions = image_roi.decode_regions
    monkeypatch.setattr(image_roi, "decode_regions", lambda *a: calls.append(len(a[0])) or decode_regions(*a))
    with image_batch.seeded(11, ids):
        with_regions = image_batch.decode_images(encoded, spec)
    assert calls == [6]  # the batch's six JPEGs in one native call
    _skip_unless_todays_path_runs(crop, dct)
    monkeypatch.setattr(image_roi, "compiled", None)  # today's path: simplejpeg's scaled decode of it all
    with image_batch.seeded(11, ids):
        today = image_batch.decode_images(encoded, spec)
    assert isinstance(with_regions, torch.Tensor) and torch.equal(with_regions, today)


def _skip_unless_todays_path_runs(crop: str, dct: str) -> None:
    """Skips, naming what is missing, where the path without the extension (the comparison) cannot
    make the batch: TensorFlow's crop pixels (dct='fast') come from PyTurboJPEG there."""
    from test_tf_jpeg import crop_pixels_missing

    missing = crop_pixels_missing("cmyk")  # "cmyk": the question without the _jpeg extension
    if crop != "resize" and dct == "fast" and missing:
        pytest.skip(f"the comparison (the path without _jpeg): {missing}")


def _png(seed: int) -> bytes:
    buffer = io.BytesIO()
    PIL.open(io.BytesIO(photo(seed, 64, 48))).save(buffer, format="PNG")
    return buffer.getvalue()


def test_crop_boxes_are_the_same_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    """The boxes given to the native call, per (seed, record): those the code before it drew."""
    seen: list[tuple[int, int, int, int]] = []
    decode_regions = image_roi.decode_regions
    monkeypatch.setattr(
        image_roi,
        "decode_regions",
        lambda e, regions, *a: seen.extend(r[:4] for r in regions) or decode_regions(e, regions, *a),
    )
    spec = tt.Image(size=224, crop="random")
    with image_batch.seeded(7, list(range(6))):
        image_batch.decode_images([photo(i) for i in range(6)], spec)
    # Drawn by crop_box from mix_seed(7, record) before region decoding existed (main at e9e4ef6).
    assert seen == [
        (12, 106, 465, 410),
        (36, 26, 351, 456),
        (48, 91, 429, 447),
        (68, 5, 269, 328),
        (134, 7, 343, 311),
        (9, 163, 441, 360),
    ]
    generators = [torch.Generator().manual_seed(mix_seed(7, r)) for r in range(4)]
    small = tt.Image(size=(100, 150), crop="random", scale=(0.5, 1.0))
    assert [image_batch.crop_box(333, 217, small, g) for g in generators] == [
        (61, 0, 233, 213),
        (4, 12, 255, 200),
        (76, 16, 228, 200),
        (144, 18, 188, 198),
    ]
    assert image_batch.crop_box(333, 217, tt.Image(size=(100, 150), crop="center")) == (94, 0, 145, 217)


@pytest.mark.parametrize("width, height", [(640, 480), (641, 481), (500, 375), (217, 333)])
def test_sized_decodes_use_only_the_simd_dct_scales(
    monkeypatch: pytest.MonkeyPatch, width: int, height: int
) -> None:
    """A need between the DCT scales is rounded up to the next of 1/8, 1/4, 1/2 and 1 (libjpeg-turbo's
    3/8 to 7/8 IDCTs are plain C, slower than the next SIMD scale), the same scale for the native
    path, simplejpeg's and Pillow's ``draft`` (which rounds the other way), on sizes that 8 does
    not divide too."""
    needs: list[tuple[int, int]] = []
    decode_regions = image_roi.decode_regions
    monkeypatch.setattr(
        image_roi,
        "decode_regions",
        lambda e, regions, *a: needs.extend(r[4:] for r in regions) or decode_regions(e, regions, *a),
    )
    drafted: list[tuple[int, int]] = []
    draft = JpegImageFile.draft

    def spied(image: JpegImageFile, *args: object) -> object:
        found = draft(image, *args)  # type: ignore[arg-type]
        drafted.append(image.size[::-1])
        return found

    data = photo(0, width, height)
    assert image_batch.DCT_SCALES == (1, 2, 4, 8)
    for eighths in range(1, 9):
        size = (-(-height * eighths // 8), -(-width * eighths // 8))  # asks for exactly scale n/8
        used = next(n for n in (1, 2, 4, 8) if n >= eighths)
        expected = (-(-height * used // 8), -(-width * used // 8))
        spec = tt.Image(size=size)
        image = image_batch.decode_images([data], spec)
        assert needs.pop() == expected, eighths
        assert torch.equal(image[0], image_batch.reduced_decode(data, spec)), eighths  # simplejpeg's
        with monkeypatch.context() as without:  # the path without simplejpeg: Pillow's draft
            without.setattr(JpegImageFile, "draft", spied)
            without.setattr(image_batch, "_simplejpeg", lambda: None)
            image_batch.decode_images([data], spec)
            assert drafted.pop() == expected, eighths


@pytest.mark.parametrize("side", [(1, 1), (3, 5), (6, 6), (7, 7), (7, 12)])
@pytest.mark.parametrize("crop", ["resize", "center"])
@pytest.mark.parametrize("dct", ["accurate", "fast"])
def test_tiny_images_decode_as_the_python_path_does(side: tuple[int, int], crop: str, dct: str) -> None:
    """Sides under 8 pixels, where two DCT scales give the same size: the native path takes the
    larger, as TurboJPEG (simplejpeg, PyTurboJPEG) does for that size, so the same pixels; at its
    own size the image is its full decode."""
    _skip_unless_todays_path_runs(crop, dct)
    height, width = side
    pixels = np.random.default_rng(height * 100 + width).integers(0, 256, (height, width, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    PIL.fromarray(pixels).save(buffer, format="JPEG", quality=90)
    data = buffer.getvalue()
    for size in [(height, width), (max(1, height // 2), max(1, width // 2)), (2 * height, 2 * width)]:
        spec = tt.Image(size=size, dct=dct, crop=crop)  # type: ignore[arg-type]
        image = image_batch.decode_images([data], spec)
        assert torch.equal(image[0], image_batch.reduced_decode(data, spec)), size
    if dct == "accurate":
        whole = image_batch.decode_images([data], tt.Image(size=(height, width)))
        assert torch.equal(whole[0], decode_image(data, "RGB"))


def psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    mse = float(((a.float() - b.float()) ** 2).mean())
    return float("inf") if mse == 0 else float(10 * np.log10(255**2 / mse))


@pytest.mark.parametrize("kind", ["4:2:0", "4:4:4", "grey", "progressive", "odd"])
def test_psnr_against_full_decode_crop_resize(kind: str) -> None:
    """The stated bound: region decode + resize within 35 dB PSNR of full decode + crop + resize (float;
    measured: at least 39.1 dB, medians 44-56)."""
    width, height = (333, 251) if kind == "odd" else (640, 480)
    encoded = [
        photo(
            i,
            width,
            height,
            subsampling=0 if kind == "4:4:4" else 2,
            progressive=kind == "progressive",
            grey=kind == "grey",
        )
        for i in range(8)
    ]
    for crop in ("center", "random"):
        spec = tt.Image("L" if kind == "grey" else "RGB", size=224, crop=crop)  # type: ignore[arg-type]
        with image_batch.seeded(3, list(range(8))):
            batch = image_batch.decode_images(encoded, spec)
        for i, data in enumerate(encoded):
            box = image_batch.crop_box(height, width, spec, torch.Generator().manual_seed(mix_seed(3, i)))
            top, left, h, w = box
            full = decode_image(data, spec.mode)[None, :, top : top + h, left : left + w].float()
            reference = F.interpolate(full, size=(224, 224), mode="bilinear", antialias=True)[0]
            assert psnr(batch[i], reference.round().clamp(0, 255)) > 35, (kind, crop, i, box)


def test_cmyk_jpegs_take_the_python_path_with_the_same_box(monkeypatch: pytest.MonkeyPatch) -> None:
    buffer = io.BytesIO()
    PIL.open(io.BytesIO(photo(1, 160, 120))).convert("CMYK").save(buffer, format="JPEG", quality=90)
    encoded = [photo(0, 160, 120), buffer.getvalue()]
    assert image_roi.decode_regions(encoded[1:], [(0, 0, 120, 160, 1, 1)], False, False, 1) == [None]
    spec = tt.Image(size=48, crop="random")
    with image_batch.seeded(2, [0, 1]):
        with_regions = image_batch.decode_images(encoded, spec)
    monkeypatch.setattr(image_roi, "compiled", None)
    with image_batch.seeded(2, [0, 1]):
        assert torch.equal(with_regions, image_batch.decode_images(encoded, spec))


def test_corrupt_jpegs_fail_as_a_whole_decode_does(tmp_path) -> None:
    good = photo(0, 320, 240)
    truncated = good[: len(good) * 2 // 3]  # damage below any region near the top
    garbage = b"\xff\xd8\xff not really a jpeg"
    results = image_roi.decode_regions(
        [truncated, garbage, good], [(0, 0, 16, 16, 16, 16)] * 3, False, False, 1
    )
    assert [type(r) for r in results] == [ValueError, ValueError, torch.Tensor]
    with pytest.raises(ValueError):
        simplejpeg.decode_jpeg(truncated)  # what the whole decode says too
    assert isinstance(image_roi.read_sizes([garbage])[0], ValueError)
    spec = tt.Image(size=16, crop="center")
    with pytest.raises(image_batch.UndecodableImage) as failure:
        image_batch.decode_images([good, truncated, garbage], spec)
    assert failure.value.index == 1  # the first bad image of the batch
    path = tmp_path / "bad.tfrecord"
    with tt.ExampleWriter(path) as writer:
        writer.write({"image/encoded": good})
        writer.write({"image/encoded": truncated})
    dataset = tt.TFRecordDataset(path, spec={"image/encoded": spec}, batch_size=2, shuffle=False)
    with pytest.raises(FeatureTypeError, match=r"'image/encoded' of record 1 of .*is not a decodable"):
        next(iter(dataset))


def test_the_batch_decodes_with_the_gil_released() -> None:
    """Python runs in another thread while one native call decodes a batch (it could not holding the GIL)."""
    encoded = [photo(i % 4) for i in range(120)]
    window: list[float] = []

    def decode() -> None:
        window.append(time.perf_counter())
        image_roi.decode_regions(encoded, [(0, 0, 480, 640, 480, 640)] * len(encoded), False, False, 1)
        window.append(time.perf_counter())

    thread = threading.Thread(target=decode)
    ticks: list[float] = []
    thread.start()
    while thread.is_alive():
        ticks.append(time.perf_counter())
    thread.join()
    start, end = window
    assert end - start > 0.05
    inside = [t for t in ticks if start + 0.02 < t < end - 0.02]
    assert len(inside) > 100


def test_fast_crops_are_tensorflows_decode_and_crop() -> None:
    """``tf_crop``: the pixels of tf_jpeg.decode_jpeg_crop_fast (PyTurboJPEG's lossless cut, then a
    decode), which tests/test_tf_jpeg.py checks against TensorFlow, at full scale; at reduced scales
    the same but for a few pixels at a crop's right edge in rare boxes (no TensorFlow call to settle
    it: decode_and_crop_jpeg with ratio= crops in other coordinates)."""
    from test_tf_jpeg import crop_pixels_missing

    from torch_tfrecord.codec import tf_jpeg

    if crop_pixels_missing():  # the reference here is decode_jpeg_crop_fast: PyTurboJPEG
        pytest.skip(crop_pixels_missing())
    rng = random.Random(5)
    exact = close = 0
    for case in range(60):
        width, height = rng.choice([(640, 480), (333, 217), (480, 640)])
        data = photo(case, width, height, subsampling=rng.choice([0, 1, 2]), progressive=rng.random() < 0.2)
        h, w = rng.randint(8, height), rng.randint(8, width)
        top, left = rng.randint(0, height - h), rng.randint(0, width - w)
        full_scale = case % 2 == 0
        need = (height, width) if full_scale else (rng.randint(1, height), rng.randint(1, width))
        mode = rng.choice(["RGB", "L"])
        [got] = image_roi.decode_regions([data], [(top, left, h, w, *need)], mode == "L", True, 1, True)
        array, (y, x, hh, ww) = tf_jpeg.decode_jpeg_crop_fast(data, mode, (top, left, h, w), *need)  # type: ignore[arg-type]
        y0, x0 = max(0, round(y)), max(0, round(x))
        y1 = min(array.shape[0], max(y0 + 1, round(y + hh)))
        x1 = min(array.shape[1], max(x0 + 1, round(x + ww)))
        expected = torch.from_numpy(array[y0:y1, x0:x1]).permute(2, 0, 1)
        assert isinstance(got, torch.Tensor) and got.shape == expected.shape
        if full_scale:
            assert torch.equal(got, expected), (case, width, height, (top, left, h, w))
        else:
            assert psnr(got, expected) > 40
        exact += torch.equal(got, expected)
        close += 1
    assert exact >= close - 3


# ---- verify: crops stop after their last row (as decode_and_crop_jpeg), or check the whole file ----

KINDS = {  # every kind of JPEG these tests make, as photo()'s arguments
    "4:2:0": {},
    "4:2:2": {"subsampling": 1},
    "4:4:4": {"subsampling": 0},
    "grey": {"grey": True},
    "progressive": {"progressive": True},
    "restart markers": {"restart": True},
}


def damaged(data: bytes, fraction: float, damage: str) -> bytes:
    """``data`` damaged ``fraction`` of the way through its (first) scan's entropy-coded bytes:
    ``"cut"`` ends the file there (a download cut short), ``"marker"`` puts an end-of-image
    marker there (a stream that goes wrong). Both are errors libjpeg always reports (a bad
    Huffman code is not: libjpeg-turbo's fast path decodes it to zeros without a warning)."""
    sos = data.find(b"\xff\xda")
    start = sos + 2 + int.from_bytes(data[sos + 2 : sos + 4], "big")
    at = start + int((data.rfind(b"\xff\xd9") - start) * fraction)
    while data[at - 1] == 0xFF or data[at] == 0xFF:  # not inside a stuffed byte or a restart marker
        at += 1
    return data[:at] if damage == "cut" else data[:at] + b"\xff\xd9" + data[at:]


def both(data: bytes, region: image_roi.Region, grey: bool, fast: bool = False) -> list[object]:
    """The region decoded with verify_full True, then False (``fast``: decode_and_crop_jpeg's pixels)."""
    results: list[object] = []
    for verify_full in (True, False):
        [result] = image_roi.decode_regions([data], [region], grey, fast, 1, fast, None, None, verify_full)
        assert result is not None
        results.append(result)
    return results


@pytest.mark.parametrize("kind", KINDS)
def test_stopping_at_the_crop_keeps_the_pixels(kind: str) -> None:
    """Intact JPEGs: the same regions (every DCT scale, boxes anywhere, TensorFlow's crop too)
    whether the decode stops after the region or reads the whole file."""
    rng = random.Random(kind)
    grey = kind == "grey"
    for case in range(12):
        width, height = rng.choice([(640, 480), (333, 217), (480, 640)])
        data = photo(case, width, height, **KINDS[kind])  # type: ignore[arg-type]
        h, w = rng.randint(1, height), rng.randint(1, width)
        top, left = rng.choice([0, rng.randint(0, height - h)]), rng.randint(0, width - w)
        need = (rng.randint(1, height), rng.randint(1, width)) if case % 2 else (height, width)
        fast = case % 3 == 0
        full, stopped = both(data, (top, left, h, w, *need), grey, fast)
        assert isinstance(full, torch.Tensor) and torch.equal(full, stopped), (kind, case, (top, left, h, w))


@pytest.mark.parametrize("dct", ["accurate", "fast"])
@pytest.mark.parametrize("crop", ["center", "random"])
def test_verify_full_batches_have_the_same_pixels(crop: str, dct: str) -> None:
    """tt.Image(verify="full") and the default give the same batches, of every kind of JPEG, and
    those of the path without the extension (which decodes each JPEG whole)."""
    encoded = [photo(i, 320, 240 + 16 * i, **KINDS[kind]) for i, kind in enumerate(KINDS)]  # type: ignore[arg-type]
    batches = []
    for verify in ("crop", "full"):
        spec = tt.Image(size=(64, 96), crop=crop, dct=dct, verify=verify)  # type: ignore[arg-type]
        with image_batch.seeded(4, list(range(len(encoded)))):
            batches.append(image_batch.decode_images(encoded, spec))
    assert torch.equal(batches[0], batches[1])
    _skip_unless_todays_path_runs(crop, dct)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(image_roi, "compiled", None)
        with image_batch.seeded(4, list(range(len(encoded)))):
            assert torch.equal(batches[0], image_batch.decode_images(encoded, spec))


@pytest.mark.parametrize("damage", ["cut", "marker"])
@pytest.mark.parametrize("kind", KINDS)
def test_damage_below_the_crop(kind: str, damage: str) -> None:
    """Damage below a crop (its rows' data and the next iMCU row's decoded, the rest not): an
    error with verify_full, the crop's intact pixels without it, as decode_and_crop_jpeg gives;
    a progressive JPEG's every scan holds every row, so it fails either way."""
    grey = kind == "grey"
    for seed, fraction in ((0, 0.8), (1, 0.999)):
        data = photo(seed, **KINDS[kind])  # type: ignore[arg-type]
        bad = damaged(data, fraction, damage)
        for region, fast in (((0, 100, 120, 200, 480, 640), False), ((40, 0, 100, 640, 60, 80), True)):
            [intact] = image_roi.decode_regions([data], [region], grey, fast, 1, fast)
            full, stopped = both(bad, region, grey, fast)
            assert isinstance(full, ValueError) and "JPEG" in str(full), (kind, seed, region, full)
            if kind == "progressive":
                assert isinstance(stopped, ValueError), (seed, region)
            else:
                assert isinstance(stopped, torch.Tensor) and torch.equal(stopped, intact), (seed, region)


@pytest.mark.parametrize("damage", ["cut", "marker"])
@pytest.mark.parametrize("kind", KINDS)
def test_damage_inside_or_above_the_crop_fails_either_way(kind: str, damage: str) -> None:
    grey = kind == "grey"
    data = photo(2, **KINDS[kind])  # type: ignore[arg-type]
    for fraction, region in ((0.5, (200, 0, 80, 640, 480, 640)), (0.1, (300, 50, 100, 300, 60, 80))):
        for result in both(damaged(data, fraction, damage), region, grey):  # type: ignore[arg-type]
            assert isinstance(result, ValueError) and "JPEG" in str(result), (kind, fraction, result)


def test_a_batch_with_a_jpeg_damaged_below_its_crop() -> None:
    """Through tt.Image: a center crop (rows 160-320 of 480) of a JPEG cut at 90% of its data
    decodes to the intact crop by default; verify="full" names the image, as a whole decode."""
    encoded = [photo(i) for i in range(3)]
    cut = damaged(encoded[1], 0.9, "cut")
    spec = tt.Image(size=(64, 256), crop="center")
    assert image_batch.crop_box(480, 640, spec) == (160, 0, 160, 640)
    intact = image_batch.decode_images(encoded, spec)
    assert torch.equal(image_batch.decode_images([encoded[0], cut, encoded[2]], spec), intact)
    with pytest.raises(image_batch.UndecodableImage) as failure:
        image_batch.decode_images([encoded[0], cut, encoded[2]], dataclasses.replace(spec, verify="full"))
    assert failure.value.index == 1 and "JPEG" in str(failure.value.cause)
