"""Batch image decoding: threads (exact pixels), reduced-size decoding (bounded difference), crops, GPU."""

from __future__ import annotations

import io
from multiprocessing.reduction import ForkingPickler

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import torch_tfrecord as tt
from torch_tfrecord.codec import image_batch as _imagecodec
from torch_tfrecord.data.transport.handoff import pack_tensors
from torch_tfrecord.errors import FeatureTypeError, SpecError
from torch_tfrecord.vision import decode_image

PIL = pytest.importorskip("PIL.Image")


def photo(seed: int, width: int = 320, height: int = 240, fmt: str = "JPEG") -> bytes:
    """Smooth gradients, discs and noise: what JPEG photos look like to a codec (not flat colour)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    image = np.stack(
        [128 + 60 * np.sin(x / rng.uniform(20, 60) + c) * np.cos(y / rng.uniform(20, 60)) for c in range(3)],
        -1,
    )
    for _ in range(4):
        cx, cy, radius = rng.uniform(0, width), rng.uniform(0, height), rng.uniform(10, 60)
        inside = (x - cx) ** 2 + (y - cy) ** 2 < radius**2
        image[inside] = image[inside] * 0.5 + rng.uniform(0, 255, 3) * 0.5
    image += rng.normal(0, 8, image.shape)
    buffer = io.BytesIO()
    PIL.fromarray(image.clip(0, 255).astype(np.uint8)).save(buffer, format=fmt, quality=85)
    return buffer.getvalue()


def psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    mse = float(((a.float() - b.float()) ** 2).mean())
    return float("inf") if mse == 0 else 10 * np.log10(255**2 / mse)


def reference(data: bytes, spec: tt.Image, box: tuple[int, int, int, int]) -> torch.Tensor:
    """Full decode, crop, resize in float: what the reduced decode approximates."""
    top, left, h, w = box
    full = decode_image(data, spec.mode)[None, :, top : top + h, left : left + w].float()
    return F.interpolate(full, size=spec.size, mode="bilinear", antialias=True)[0].round().clamp(0, 255)


@pytest.fixture(params=["simplejpeg", "pillow"])
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "simplejpeg":
        pytest.importorskip("simplejpeg")
    else:
        monkeypatch.setattr(_imagecodec, "_simplejpeg", lambda: None)
    return str(request.param)


@pytest.fixture
def shard(tmp_path):
    path = tmp_path / "images.tfrecord"
    with tt.ExampleWriter(path) as writer:
        for i in range(12):
            writer.write({"image/encoded": photo(i, 160 + 8 * i, 120), "label": i})
    return path


def test_default_path_threaded_is_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_TFRECORD_IMAGE_THREADS", "3")
    encoded = [photo(i, 100 + i, 80) for i in range(7)] + [photo(9, fmt="PNG")]
    for mode in ("RGB", "L", "unchanged"):
        decoded = _imagecodec.decode_images(encoded, tt.Image(mode))
        assert isinstance(decoded, list)
        for data, image in zip(encoded, decoded, strict=True):
            assert torch.equal(image, decode_image(data, mode))


@pytest.mark.parametrize("crop", ["resize", "center", "random"])
@pytest.mark.parametrize("size", [(64, 64), (100, 150)])
def test_reduced_decode_is_close_to_full_decode_and_resize(
    backend: str, crop: str, size: tuple[int, int]
) -> None:
    spec = tt.Image("RGB", size=size, crop=crop)  # type: ignore[arg-type]
    for seed in range(4):
        data = photo(seed)
        image = _imagecodec.reduced_decode(data, spec, torch.Generator().manual_seed(seed))
        box = _imagecodec.crop_box(240, 320, spec, torch.Generator().manual_seed(seed))
        assert image.shape == (3, *size) and image.dtype == torch.uint8
        assert psnr(image, reference(data, spec, box)) > 35, (backend, crop, size, seed)


def test_reduced_grey_and_png(backend: str) -> None:
    spec = tt.Image("L", size=48)
    grey = _imagecodec.reduced_decode(photo(1), spec)
    assert grey.shape == (1, 48, 48)
    assert psnr(grey, reference(photo(1), spec, (0, 0, 240, 320))) > 35
    png = photo(2, fmt="PNG")  # not a JPEG: full decode, then the same resize (exactly)
    assert torch.equal(
        _imagecodec.reduced_decode(png, tt.Image(size=48)),
        F.interpolate(decode_image(png)[None], size=(48, 48), mode="bilinear", antialias=True)[0],
    )


def test_crop_boxes_follow_the_policy() -> None:
    assert _imagecodec.crop_box(240, 320, tt.Image(size=100)) == (0, 0, 240, 320)
    assert _imagecodec.crop_box(240, 320, tt.Image(size=100, crop="center")) == (0, 40, 240, 240)
    assert _imagecodec.crop_box(240, 320, tt.Image(size=(50, 200), crop="center")) == (80, 0, 80, 320)
    spec = tt.Image(size=32, crop="random", scale=(0.25, 0.5), ratio=(0.5, 2.0))
    generator = torch.Generator().manual_seed(0)
    for _ in range(200):
        top, left, h, w = _imagecodec.crop_box(240, 320, spec, generator)
        assert top >= 0 and top + h <= 240 and left >= 0 and left + w <= 320
        assert 0.23 <= h * w / (240 * 320) <= 0.52 and 0.45 <= w / h <= 2.1
    again = [_imagecodec.crop_box(240, 320, spec, torch.Generator().manual_seed(s)) for s in range(5)]
    assert again == [_imagecodec.crop_box(240, 320, spec, torch.Generator().manual_seed(s)) for s in range(5)]
    assert len(set(again)) > 1


def test_dataset_gives_stacked_batches_with_reproducible_crops(shard) -> None:
    spec = {"image/encoded": tt.Image(size=64, crop="random"), "label": tt.FixedLen((), torch.int64)}

    def by_record(**kwargs) -> dict[int, torch.Tensor]:
        dataset = tt.TFRecordDataset(shard, spec=spec, seed=3, **kwargs)
        out = {}
        for item in dataset:
            images = item["image/encoded"]
            labels = item["label"].reshape(-1).tolist()
            for label, image in zip(labels, images.reshape(-1, 3, 64, 64), strict=True):
                out[label] = image
        return out

    batched = by_record(batch_size=6)
    samples = by_record()  # sample mode: each record decoded in another batch, the same crop
    assert sorted(batched) == list(range(12))
    assert all(torch.equal(batched[i], samples[i]) for i in range(12))
    dataset = tt.TFRecordDataset(shard, spec=spec, seed=3, batch_size=4)
    assert next(iter(dataset))["image/encoded"].shape == (4, 3, 64, 64)
    dataset.set_epoch(1)
    other = {int(i): image for b in dataset for i, image in zip(b["label"], b["image/encoded"], strict=True)}
    assert sum(torch.equal(other[i], batched[i]) for i in range(12)) < 3  # new crops each epoch


@pytest.mark.parametrize(
    "mode",
    [{"prefetch": 0}, {}, {"threads": 2}, {"threads": 2, "process": True}, {"num_workers": 2}],
    ids=["inline", "prefetch", "threads", "process", "workers"],
)
def test_random_crops_are_the_same_however_the_work_is_spread(shard, mode: dict[str, int]) -> None:
    """Random crops at a size whose need falls between the SIMD DCT scales (decoded at full scale,
    see image_batch.DCT_SCALES): the same batches, in the same order, in the loop alone, on the
    prefetch thread, on threads, in the loading process and in DataLoader workers."""
    spec = {"image/encoded": tt.Image(size=(100, 100), crop="random"), "label": tt.FixedLen((), torch.int64)}
    workers = mode.pop("num_workers", 0)

    def batches(**kwargs: int) -> list[tuple[list[int], torch.Tensor]]:
        dataset = tt.TFRecordDataset(shard, spec=spec, seed=5, batch_size=3, **kwargs)
        loader = (
            torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=workers) if workers else dataset
        )
        return [(b["label"].tolist(), b["image/encoded"]) for b in loader]

    expected, found = batches(prefetch=0), batches(**mode)
    assert [labels for labels, _ in found] == [labels for labels, _ in expected]
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(expected, found, strict=True))


def test_workers_send_the_shared_batch_without_packing_it(shard) -> None:
    spec = {"image/encoded": tt.Image(size=32), "label": tt.FixedLen((), torch.int64)}
    dataset = tt.TFRecordDataset(shard, spec=spec, batch_size=4, shuffle=False)
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2)
    in_process = [
        b["image/encoded"] for b in tt.TFRecordDataset(shard, spec=spec, batch_size=4, shuffle=False)
    ]
    from_workers = sorted((b["label"][0].item(), b["image/encoded"]) for b in loader)
    assert all(torch.equal(a, b) for a, (_, b) in zip(in_process, from_workers, strict=True))
    # The shared image is sent as it is, by both transports; the other tensors are packed.
    shared = torch.zeros(4, 3, 8, 8, dtype=torch.uint8).share_memory_()
    small = pack_tensors({"image": shared, "a": torch.ones(3), "b": torch.ones(2)})
    sent = ForkingPickler.loads(ForkingPickler.dumps(small))  # what a worker's queue does
    assert small["image"] is shared and sent["image"].is_shared() and torch.equal(sent["image"], shared)
    assert not sent["b"].is_shared()  # inside the message: no segment per tensor
    assert sent["a"].tolist() == [1.0] * 3 and sent["b"].tolist() == [1.0] * 2
    assert not sent["a"].is_shared()  # a small batch travels inside the pickle
    large = pack_tensors({"image": shared, "a": torch.ones(1 << 17), "b": torch.ones(1 << 17)})
    assert (
        large["image"] is shared
        and large["a"].is_shared()
        and large["a"].untyped_storage().data_ptr() == large["b"].untyped_storage().data_ptr()
    )


def test_bad_image_names_record_and_key(shard, tmp_path) -> None:
    path = tmp_path / "bad.tfrecord"
    with tt.ExampleWriter(path) as writer:
        writer.write({"image/encoded": photo(0)})
        writer.write({"image/encoded": b"\xff\xd8\xff not really a jpeg"})
    for spec in (tt.Image(), tt.Image(size=16)):
        dataset = tt.TFRecordDataset(path, spec={"image/encoded": spec}, batch_size=2, shuffle=False)
        with pytest.raises(FeatureTypeError, match=r"'image/encoded' of record 1 of .*is not a decodable"):
            next(iter(dataset))


def test_spec_rejects_nonsense() -> None:
    for kwargs in (
        {"size": 0},
        {"size": (1, 2, 3)},
        {"mode": "unchanged", "size": 4},
        {"crop": "random"},
        {"size": 4, "crop": "zoom"},
        {"size": 4, "scale": (0.5, 2.0)},
        {"device": "tpu"},
    ):
        with pytest.raises(SpecError):
            tt.Image(**kwargs)  # type: ignore[arg-type]
    assert repr(tt.Image(size=8, crop="center")) == "tt.Image(mode='RGB', size=(8, 8), crop='center')"
