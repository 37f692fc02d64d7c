"""JPEG decoding on a CUDA device against the CPU path: images/s and pixels (needs a GPU).

Data: N synthetic COCO-sized photos (640x480 JPEG, quality 85; bench_images.py's), 4 shards
converted by ``torch-tfrecord convert image-folder``, read from the page cache. Batches of
``--batch`` at 224x224, num_workers=0. Rows, in interleaved rounds (medians, images/s):

- CPU: ``tt.Image("RGB", size=224, crop=...)``: the native decoder on every core of the machine;
- GPU: the same with ``device="cuda"`` (torchvision's nvJPEG, a batch per call, then the resize
  on the device), each batch synchronised;
- peer, GPU: ``torchvision.io.decode_jpeg(list, device="cuda")`` and ``F.interpolate`` per
  image (what a user writes without this library), on the same bytes held in memory, no reading;
- ours, GPU, in memory: our batch decode on the same bytes (the dataset's reading left out).

Pixels: the GPU's whole decodes against the CPU's (libjpeg-turbo, accurate DCT), and the 224x224
batches (the same crop boxes: the same seed and records), PSNR (min, median) and the largest
absolute difference.

    python benchmarks/bench_gpu.py [--images 2048] [--rounds 5] [--batch 64]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_images import make_data, read_encoded

import torch_tfrecord as tt
from torch_tfrecord.codec import image_batch


def psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    mse = float(((a.float() - b.float()) ** 2).mean())
    return float("inf") if mse == 0 else float(10 * np.log10(255**2 / mse))


def dataset_rate(shards: list[str], crop: str, device: str, batch: int) -> Callable[[], float]:
    spec = {"image/encoded": tt.Image("RGB", size=224, crop=crop, device=device)}  # type: ignore[arg-type]

    def run() -> float:
        ds = tt.TFRecordDataset(shards, spec=spec, batch_size=batch)
        count, start = 0, time.perf_counter()
        for item in torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0):
            count += item["image/encoded"].shape[0]
        if device != "cpu":
            torch.cuda.synchronize()
        return count / (time.perf_counter() - start)

    return run


def in_memory_rate(
    encoded: list[bytes], batch: int, decode: Callable[[list[bytes]], torch.Tensor]
) -> Callable[[], float]:
    def run() -> float:
        start = time.perf_counter()
        for i in range(0, len(encoded) - batch + 1, batch):
            decode(encoded[i : i + batch])
        torch.cuda.synchronize()
        return (len(encoded) // batch * batch) / (time.perf_counter() - start)

    return run


def torchvision_peer(chunk: list[bytes]) -> torch.Tensor:
    import torchvision.io as tvio

    tensors = [torch.frombuffer(bytearray(data), dtype=torch.uint8) for data in chunk]
    images = tvio.decode_jpeg(tensors, mode=tvio.ImageReadMode.RGB, device="cuda")
    return torch.stack(
        [
            F.interpolate(image[None].float(), size=(224, 224), mode="bilinear", antialias=True)[0]
            for image in images
        ]
    ).to(torch.uint8)


def pixels(encoded: list[bytes]) -> None:
    print("\npixels, GPU against CPU (PSNR dB: min / median; largest absolute difference)")
    sample = encoded[:256]
    gpu_full = image_batch.decode_images(sample, tt.Image(device="cuda"))
    cpu_full = image_batch.decode_images(sample, tt.Image())
    values = [psnr(g.cpu(), c) for g, c in zip(gpu_full, cpu_full, strict=True)]
    largest = max(int((g.cpu().int() - c.int()).abs().max()) for g, c in zip(gpu_full, cpu_full, strict=True))
    print(f"  whole decodes        {min(values):6.1f} / {statistics.median(values):6.1f}   {largest}")
    ids = list(range(len(sample)))
    for crop in ("resize", "center", "random"):
        out = {}
        for device in ("cpu", "cuda"):
            with image_batch.seeded(1, ids):
                out[device] = image_batch.decode_images(sample, tt.Image(size=224, crop=crop, device=device))  # type: ignore[arg-type]
        values = [psnr(g.cpu(), c) for g, c in zip(out["cuda"], out["cpu"], strict=True)]
        largest = int((out["cuda"].cpu().int() - out["cpu"].int()).abs().max())  # type: ignore[union-attr]
        print(f"  224x224, {crop:10}  {min(values):6.1f} / {statistics.median(values):6.1f}   {largest}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--images", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--dir")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench_gpu needs a CUDA device")
    directory = args.dir or tempfile.mkdtemp(prefix="tt-bench-gpu-")
    _, shards = make_data(directory, args.images)
    encoded = read_encoded(shards)
    print(f"{torch.cuda.get_device_name()}, {os.cpu_count()} CPU cores, torch {torch.__version__}")
    ours_in_memory = tt.Image("RGB", size=224, device="cuda")
    rows: dict[str, Callable[[], float]] = {}
    for crop in ("resize", "random"):
        rows[f"CPU, dataset, {crop}"] = dataset_rate(shards, crop, "cpu", args.batch)
        rows[f"GPU, dataset, {crop}"] = dataset_rate(shards, crop, "cuda", args.batch)
    rows["GPU, ours in memory, resize"] = in_memory_rate(
        encoded,
        args.batch,
        lambda chunk: image_batch.decode_images(chunk, ours_in_memory),  # type: ignore[arg-type,return-value]
    )
    rows["GPU, torchvision peer in memory, resize"] = in_memory_rate(encoded, args.batch, torchvision_peer)
    for run in rows.values():  # warm-up: page cache, CUDA context, nvJPEG handles, codec threads
        run()
    rates: dict[str, list[float]] = {label: [] for label in rows}
    for _ in range(args.rounds):
        for label, run in rows.items():
            rates[label].append(run())
    print(
        f"\n{args.images} images 640x480 -> 224x224, batches of {args.batch}, {args.rounds} rounds, medians"
    )
    print(f"{'pipeline':42} {'images/s':>9}")
    for label, values in rates.items():
        print(f"{label:42} {statistics.median(values):>9,.0f}")
    for crop in ("resize", "random"):
        gpu, cpu = (statistics.median(rates[f"{d}, dataset, {crop}"]) for d in ("GPU", "CPU"))
        print(f"GPU / CPU, {crop}: {gpu / cpu:.2f}x")
    pixels(encoded)


if __name__ == "__main__":
    main()
