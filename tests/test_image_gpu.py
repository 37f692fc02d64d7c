"""Images decoded on a CUDA device (tt.Image(device="cuda"): torchvision's nvJPEG, a batch per
call), against the CPU path: the same shapes, the same crop boxes for the same (seed, record),
pixels within a stated PSNR (nvJPEG's IDCT and chroma upsampling are not libjpeg's), equal-size
images resized in one call, bad images named. Skipped where there is no CUDA device; run on a
GPU machine (the project's CI has none); the check before nvJPEG runs everywhere."""

from __future__ import annotations

import io
import os

import numpy as np
import PIL.Image
import pytest
import torch
import torch.nn.functional as F
from test_imagecodec import photo, psnr

import torch_tfrecord as tt
from torch_tfrecord.codec import image_batch
from torch_tfrecord.vision import decode_image

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
pytest.importorskip("torchvision")

# Measured on an H200 (torchvision 0.26's nvJPEG against libjpeg-turbo): see the closing note.
FULL_PSNR = 35.0  # whole decodes
RESIZED_PSNR = 33.0  # after a resize (the GPU resizes floats, the CPU uint8 with int16 weights)


@needs_cuda
def test_gpu_decode_matches_cpu_closely() -> None:
    encoded = [photo(i) for i in range(4)] + [photo(5, fmt="PNG")]
    on_gpu = image_batch.decode_images(encoded, tt.Image(device="cuda"))
    for data, image in zip(encoded, on_gpu, strict=True):
        assert image.device.type == "cuda"
        assert psnr(image.cpu(), decode_image(data)) > FULL_PSNR
    resized = image_batch.decode_images(encoded, tt.Image(size=64, device="cuda"))
    assert isinstance(resized, torch.Tensor) and resized.shape == (5, 3, 64, 64) and resized.is_cuda


@needs_cuda
@pytest.mark.parametrize("crop", ["resize", "center", "random"])
def test_gpu_batches_are_the_cpus_within_the_bound(crop: str) -> None:
    """The same crop boxes for the same seed and records (the same generator draws), so the GPU
    batch is the CPU batch up to the codecs' pixel differences."""
    encoded = [photo(i, 320 + 32 * (i % 3), 240) for i in range(12)]
    ids = list(range(100, 112))
    outputs = {}
    for device in ("cpu", "cuda"):
        with image_batch.seeded(7, ids):
            outputs[device] = image_batch.decode_images(encoded, tt.Image(size=96, crop=crop, device=device))
    cpu, gpu = outputs["cpu"], outputs["cuda"]
    assert isinstance(gpu, torch.Tensor) and gpu.is_cuda and gpu.dtype == torch.uint8
    assert gpu.shape == cpu.shape == (12, 3, 96, 96)
    for i in range(12):
        assert psnr(gpu[i].cpu(), cpu[i]) > RESIZED_PSNR, i


@needs_cuda
def test_equal_sizes_are_resized_in_one_call_with_the_per_image_pixels(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    encoded = [photo(i, 320 if i % 2 else 200, 240 if i % 2 else 150) for i in range(8)]
    spec = tt.Image(size=(64, 80), crop="center", device="cuda")
    calls: list[int] = []
    interpolate = F.interpolate

    def counted(batch: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
        calls.append(batch.shape[0])
        return interpolate(batch, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(F, "interpolate", counted)
    batch = image_batch.decode_images(encoded, spec)
    assert sorted(calls) == [4, 4]  # two sizes: two calls
    monkeypatch.undo()
    full = image_batch.decode_images(encoded, tt.Image(device="cuda"))
    for i, image in enumerate(full):
        box = image_batch.crop_box(image.shape[-2], image.shape[-1], spec)
        assert torch.equal(batch[i], image_batch.resize(image, box, (64, 80)))


@needs_cuda
def test_a_bad_jpeg_is_named_by_its_index() -> None:
    encoded = [photo(0), photo(1)[:2000] + bytes(3000), photo(2)]
    with pytest.raises(image_batch.UndecodableImage) as caught:
        image_batch.decode_images(encoded, tt.Image(size=32, device="cuda"))
    assert caught.value.index == 1


@needs_cuda
def test_a_dataset_yields_batches_on_the_device(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(tmp_path, "images.tfrecord")
    with tt.ExampleWriter(path) as writer:
        for i in range(40):
            writer.write({"image": photo(i), "label": i})
    batches = {}
    for device in ("cpu", "cuda"):
        spec = {
            "image": tt.Image(size=64, crop="random", device=device),
            "label": tt.FixedLen((), torch.int64),
        }
        ds = tt.TFRecordDataset(path, spec=spec, batch_size=16, drop_last=False, seed=3)
        batches[device] = list(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0))
    assert [b["label"].tolist() for b in batches["cpu"]] == [b["label"].tolist() for b in batches["cuda"]]
    for cpu, gpu in zip(batches["cpu"], batches["cuda"], strict=True):
        assert gpu["image"].is_cuda
        assert psnr(gpu["image"].cpu(), cpu["image"]) > RESIZED_PSNR


@pytest.mark.parametrize("progressive", [False, True])
def test_jpegs_cut_short_are_refused_before_nvjpeg(progressive: bool) -> None:
    """nvJPEG decodes a truncated JPEG without a word; the check before it runs on any machine."""
    image = PIL.Image.fromarray(np.random.default_rng(0).integers(0, 256, (120, 160, 3), dtype=np.uint8))
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", progressive=progressive, quality=90)
    data = buffer.getvalue()
    assert image_batch._cut_short(data) is None
    assert image_batch._cut_short(data + bytes(16)) is None  # bytes after the end: still whole
    for cut in (len(data) // 3, len(data) - 2):
        error = image_batch._cut_short(data[:cut] + bytes(100))
        assert isinstance(error, ValueError) and "Premature end of JPEG file" in str(error)
