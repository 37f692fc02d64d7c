"""Image pipelines, images/s, side by side in one run: decode -> 224x224 -> batches of 32.

Data: N synthetic COCO-sized photos (640x480 JPEG, quality 85: smooth gradients, discs and
sensor noise, ~70 KB each, not flat colour) in an image folder of 10 classes, converted with
`torch-tfrecord convert image-folder` into 4 shards. Every pipeline reads them from the page
cache (a warm-up pass first) and yields uint8 batches [32, 3, 224, 224] (TensorFlow: float
[32, 224, 224, 3], what tf.image.resize returns):

- ours: tt.Image(size=224) with crop "resize", "center" and "random" (RandomResizedCrop),
  and resize and random with dct="fast" (TensorFlow's decode settings, 0 workers),
  batch mode, with 0 DataLoader workers (the codec's threads only) and with 2; JPEGs go through
  the region-of-interest decoder (torch_tfrecord.codec._jpeg: only the kept region is decoded,
  a batch per native call) where it is built, and the center and random crops once more
  without it ("whole-image decode": today's path before it, the same pixels);
- TensorFlow tf.data (in --tf-python's interpreter), as its users write it (tf.image.resize's
  defaults, no shuffle buffer), num_parallel_calls=AUTOTUNE, batch, prefetch: parse +
  decode_jpeg + resize; the same with decode_jpeg(ratio=2); sample_distorted_bounding_box +
  decode_and_crop_jpeg + resize (random crops, decoding only the region kept);
- the codec's limit: the same reduced-size decodes (each crop policy, random crops also without
  region decoding) of the same JPEGs, held in memory, in batches through the codec's thread pool
  on every core, with no reading, parsing or DataLoader; and the Huffman floor: each JPEG decoded
  at 1/8 scale on every core;
- with --others: a full decode + resize in the transform, torchvision ImageFolder + Pillow, and
  the `tfrecord` package + Pillow (--tfrecord-path), 2 workers each.

With --resize-alone, only the resize is timed instead, ms per image on one thread: the regions
that each crop decodes (at 1/2 scale, 320x240 for "resize"), resized to 224x224 by torch's
F.interpolate and copied into the batch's planes (the path before issue 33 part 6), and by the
native resize straight into the planes (in a batch it runs on the decoder's thread).

Each pipeline is also timed in CPU seconds (this process's and its reaped workers', TensorFlow's
process's, every thread counted): images per CPU second hold where other work on a shared
machine makes the wall-clock rates swing.

Rounds are interleaved (every pipeline once per round); medians over rounds are printed, with
each of ours against TensorFlow's faster pipeline for the same output (resize and center crop:
the faster of resize and ratio=; random crops: decode_and_crop_jpeg) and its share of the
codec's limit for its spec.

    python benchmarks/bench_images.py [--images 2000] [--rounds 5] [--tf-python /tmp/tfvenv/bin/python]
        [--others] [--tfrecord-path /tmp/tfrecord-pkg] [--resize-alone]
"""

from __future__ import annotations

import argparse
import glob
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _tensorflow import run_script

import torch_tfrecord as tt

BATCH = 32
SIZE = 224


def photo(seed: int, width: int = 640, height: int = 480, quality: int = 85, noise: float = 10) -> bytes:
    """A JPEG that codecs treat like a photo: gradients, shapes, noise."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    image = np.empty((height, width, 3), np.float32)
    for c in range(3):
        a, b, phase = rng.uniform(-1, 1, 3)
        image[..., c] = (
            128
            + 60 * np.sin(x / (40 + 30 * a) + phase) * np.cos(y / (50 + 20 * b))
            + 40 * np.sin((x + y) / (25 + 10 * c))
        )
    for _ in range(6):
        cx, cy, radius = rng.uniform(0, width), rng.uniform(0, height), rng.uniform(20, 120)
        inside = (x - cx) ** 2 + (y - cy) ** 2 < radius**2
        image[inside] = image[inside] * 0.5 + rng.uniform(0, 255, 3) * 0.5
    image += rng.normal(0, noise, image.shape)
    buffer = io.BytesIO()
    Image.fromarray(image.clip(0, 255).astype(np.uint8)).save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()


def make_data(root: str, count: int, quality: int = 85, noise: float = 10) -> tuple[str, list[str]]:
    folder, out = os.path.join(root, "photos"), os.path.join(root, "records")
    if not os.path.isdir(out):
        for i in range(count):
            os.makedirs(os.path.join(folder, f"class{i % 10}"), exist_ok=True)
            with open(os.path.join(folder, f"class{i % 10}", f"{i:05d}.jpg"), "wb") as file:
                file.write(photo(i, quality=quality, noise=noise))
        subprocess.run(
            [
                sys.executable,
                "-m",
                "torch_tfrecord",
                "convert",
                "image-folder",
                folder,
                "--out",
                out,
                "--shards",
                "4",
                "--quiet",
            ],
            check=True,
        )
    shards = sorted(glob.glob(os.path.join(out, "**", "*.tfrecord"), recursive=True))
    for path in shards:
        if not os.path.exists(tt.default_index_path(path)):
            tt.save_index(tt.build_index(path), tt.default_index_path(path))
    return folder, shards


def count_images(batches: Iterable[Any], key: Callable[[Any], torch.Tensor]) -> int:
    seen = 0
    for batch in batches:
        images = key(batch)
        assert images.shape[-2:] == (SIZE, SIZE) or images.shape[1:3] == (SIZE, SIZE), images.shape
        seen += len(images)
    return seen


def full_decode_then_resize(batch: dict[str, Any]) -> dict[str, Any]:
    from torchvision.transforms.v2 import functional as F

    batch["image/encoded"] = torch.stack(
        [F.resize(image, [SIZE, SIZE], antialias=True) for image in batch["image/encoded"]]
    )
    return batch


def ours(
    shards: list[str],
    spec: tt.Image,
    *,
    workers: int,
    batch_mode: bool,
    transform: Any = None,
    threads: int = 0,
) -> int:
    features = {"image/encoded": spec, "image/class/label": tt.FixedLen((), torch.int64)}
    if batch_mode:
        dataset = tt.TFRecordDataset(
            shards, spec=features, batch_size=BATCH, transform=transform, seed=0, threads=threads
        )
        loader = DataLoader(dataset, batch_size=None, num_workers=workers)
    else:
        dataset = tt.TFRecordDataset(shards, spec=features, seed=0)
        loader = DataLoader(dataset, batch_size=BATCH, num_workers=workers, collate_fn=tt.collate)
    return count_images(loader, lambda batch: batch["image/encoded"])


class _PillowResize:
    def __call__(self, sample: dict[str, Any]) -> dict[str, Any]:
        from PIL import Image

        with Image.open(io.BytesIO(sample["image/encoded"])) as image:
            resized = image.convert("RGB").resize((SIZE, SIZE), Image.BILINEAR)
        return {"image": torch.from_numpy(np.asarray(resized).copy()).permute(2, 0, 1)}


def tfrecord_package(shards: list[str], tfrecord_path: str) -> int:
    sys.path.insert(0, tfrecord_path)
    from tfrecord.torch.dataset import TFRecordDataset  # the `tfrecord` package

    chained = torch.utils.data.ChainDataset(
        [
            TFRecordDataset(
                path, tt.default_index_path(path), {"image/encoded": "byte"}, transform=_PillowResize()
            )
            for path in shards
        ]
    )
    loader = DataLoader(chained, batch_size=BATCH, num_workers=2)
    return count_images(loader, lambda batch: batch["image"])


def image_folder(folder: str) -> int:
    from torchvision import datasets, transforms

    dataset = datasets.ImageFolder(
        folder, transforms.Compose([transforms.Resize((SIZE, SIZE)), transforms.PILToTensor()])
    )
    loader = DataLoader(dataset, batch_size=BATCH, num_workers=2, shuffle=True)
    return count_images(loader, lambda batch: batch[0])


TF_SCRIPT = r"""
import sys, time, tensorflow as tf
shards, kind = sys.argv[1].split(","), sys.argv[2]
features = {
    "image/encoded": tf.io.FixedLenFeature([], tf.string),
    "image/class/label": tf.io.FixedLenFeature([], tf.int64),
}
def resize(record):  # what a TensorFlow user writes: tf.image.resize's defaults (no antialias)
    example = tf.io.parse_single_example(record, features)
    image = tf.io.decode_jpeg(example["image/encoded"], channels=3)
    return tf.image.resize(image, [224, 224]), example["image/class/label"]
def ratio(record):  # libjpeg-turbo's 1/2 scale, then resize
    example = tf.io.parse_single_example(record, features)
    image = tf.io.decode_jpeg(example["image/encoded"], channels=3, ratio=2)
    return tf.image.resize(image, [224, 224]), example["image/class/label"]
def random_crop(record):  # decodes only the region kept
    example = tf.io.parse_single_example(record, features)
    shape = tf.io.extract_jpeg_shape(example["image/encoded"])
    begin, size, _ = tf.image.sample_distorted_bounding_box(
        shape, tf.zeros([0, 0, 4]), area_range=(0.08, 1.0), aspect_ratio_range=(3 / 4, 4 / 3),
        min_object_covered=0.0, max_attempts=10, use_image_if_no_bounding_boxes=True)
    window = tf.stack([begin[0], begin[1], size[0], size[1]])
    image = tf.io.decode_and_crop_jpeg(example["image/encoded"], window, channels=3)
    return tf.image.resize(image, [224, 224]), example["image/class/label"]
ds = tf.data.TFRecordDataset(shards, num_parallel_reads=len(shards))
decode = {"resize": resize, "ratio": ratio, "crop": random_crop}[kind]
ds = ds.map(decode, num_parallel_calls=tf.data.AUTOTUNE)
ds = ds.batch(32).prefetch(tf.data.AUTOTUNE)
for _ in ds.take(4): pass
for _ in range(int(sys.argv[3])):
    start, cpu, seen = time.perf_counter(), time.process_time(), 0
    for images, _ in ds:
        seen += int(images.shape[0])
    print(seen / (time.perf_counter() - start), seen / (time.process_time() - cpu))
"""


def without_regions(run: Callable[[], int]) -> Callable[[], int]:
    """``run`` with the region-of-interest decoder switched off (forked workers inherit the switch)."""
    from torch_tfrecord.codec import image_roi

    def whole_image() -> int:
        compiled, image_roi.compiled = image_roi.compiled, None
        try:
            return run()
        finally:
            image_roi.compiled = compiled

    return whole_image


def read_encoded(shards: list[str]) -> list[bytes]:
    """Every JPEG of the shards, in memory: what the codec's limit decodes."""
    spec = {"image/encoded": tt.FixedLen((), bytes)}
    return [bytes(sample["image/encoded"]) for sample in tt.TFRecordDataset(shards, spec=spec, shuffle=False)]


def codec_limit(encoded: list[bytes], spec: tt.Image) -> int:
    """The reduced-size decodes alone: batches of 32 through the codec's thread pool (every
    core), crops seeded per image as in a dataset; no reading, no parsing, no DataLoader."""
    from torch_tfrecord.codec import image_batch

    for start in range(0, len(encoded), BATCH):
        ids = list(range(start, min(start + BATCH, len(encoded))))
        with image_batch.seeded(0, ids):
            image_batch.decode_images(encoded[ids[0] : ids[-1] + 1], spec)
    return len(encoded)


def huffman_floor(encoded: list[bytes]) -> int:
    """Each JPEG decoded at 1/8 scale on every core: entropy (Huffman) decoding of the whole
    image plus DC-only inverse DCTs of 1/64 of the pixels; no JPEG decode needs less."""
    from concurrent.futures import ThreadPoolExecutor

    import simplejpeg

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    with ThreadPoolExecutor(cores) as pool:
        list(pool.map(lambda data: simplejpeg.decode_jpeg(data, min_height=1, min_width=1), encoded))
    return len(encoded)


def resize_alone(encoded: list[bytes], rounds: int, count: int = 64) -> None:
    """Per crop: ms per image of torch's resize + the copy into planes against the native resize."""
    import torch.nn.functional as F

    from torch_tfrecord.codec import image_batch, image_roi

    torch.set_num_threads(1)
    out = torch.empty((3, SIZE, SIZE), dtype=torch.uint8)
    print(f"\n{count} images, one thread, best of {rounds} rounds, ms per image\n")
    print("| crop | regions (mean) | torch F.interpolate + copy to planes | native resize into planes | x |")
    print("|---|---|---|---|---|")
    for crop, spec in OURS.items():
        regions = []
        for i, data in enumerate(encoded[:count]):
            [(height, width)] = image_roi.read_sizes([data])  # type: ignore[misc]
            box = image_batch.crop_box(height, width, spec, torch.Generator().manual_seed(i))
            need = (min(height, -(-height * SIZE // box[2])), min(width, -(-width * SIZE // box[3])))
            [region] = image_roi.decode_regions([data], [(*box, *need)], False, False, 1)
            assert isinstance(region, torch.Tensor)
            regions.append(region)

        def with_torch() -> None:
            for region in regions:
                resized = F.interpolate(region[None], size=(SIZE, SIZE), mode="bilinear", antialias=True)
                out.copy_(resized[0])

        def native() -> None:
            for region in regions:
                image_roi.resize_into(region, out)

        best = {with_torch: float("inf"), native: float("inf")}
        for _ in range(rounds):
            for run in best:
                start = time.process_time()
                run()
                best[run] = min(best[run], (time.process_time() - start) / len(regions) * 1e3)
        mean_h = sum(r.shape[1] for r in regions) / len(regions)
        mean_w = sum(r.shape[2] for r in regions) / len(regions)
        times = f"{best[with_torch]:.3f} | {best[native]:.3f} | {best[with_torch] / best[native]:.2f}"
        print(f"| {crop} | {mean_w:.0f}x{mean_h:.0f} | {times} |")


OURS = {
    "resize": tt.Image("RGB", size=SIZE),
    "center": tt.Image("RGB", size=SIZE, crop="center"),
    "random": tt.Image("RGB", size=SIZE, crop="random"),
}
TF_NAMES = {
    "resize": "TensorFlow: parse + decode_jpeg + tf.image.resize, AUTOTUNE, prefetch",
    "ratio": "TensorFlow: the same with decode_jpeg(ratio=2)",
    "crop": "TensorFlow: sample_distorted_bounding_box + decode_and_crop_jpeg + resize",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "tt-bench-images"))
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tf-python", default="/tmp/tfvenv/bin/python")
    parser.add_argument("--tfrecord-path", default="/tmp/tfrecord-pkg")
    parser.add_argument("--others", action="store_true", help="also ImageFolder, full decode, `tfrecord`")
    parser.add_argument("--resize-alone", action="store_true", help="time only the resize, torch's and ours")
    args = parser.parse_args()
    folder, shards = make_data(args.dir, args.images)
    encoded = read_encoded(shards)
    if args.resize_alone:
        resize_alone(encoded, args.rounds)
        return
    pipelines: dict[str, Callable[[], int]] = {}
    for crop, spec in OURS.items():
        for workers in (0, 2):
            name = f"ours: tt.Image(size=224, crop={crop!r}), batch mode, {workers} workers"
            pipelines[name] = lambda spec=spec, workers=workers: ours(  # type: ignore[misc]
                shards, spec, workers=workers, batch_mode=True
            )
    for crop in ("resize", "random"):  # TensorFlow's decode settings (fast IDCT, no fancy upsampling)
        fast = tt.Image("RGB", size=SIZE, crop=crop, dct="fast")  # type: ignore[arg-type]
        name = f"ours: tt.Image(size=224, crop={crop!r}, dct='fast'), batch mode, 0 workers"
        pipelines[name] = lambda spec=fast: ours(shards, spec, workers=0, batch_mode=True)  # type: ignore[misc]
    from torch_tfrecord.codec import image_roi

    if image_roi.available():
        for crop in ("center", "random"):
            for workers in (0, 2):
                name = f"ours: tt.Image(size=224, crop={crop!r}), whole-image decode, {workers} workers"
                pipelines[name] = without_regions(
                    lambda spec=OURS[crop], workers=workers: ours(  # type: ignore[misc]
                        shards, spec, workers=workers, batch_mode=True
                    )
                )
    for crop, spec in OURS.items():
        pipelines[f"codec's limit: crop={crop!r}, decodes alone on every core"] = (
            lambda spec=spec: codec_limit(encoded, spec)  # type: ignore[misc]
        )
    if image_roi.available():
        pipelines["codec's limit: crop='random', whole-image decode, on every core"] = without_regions(
            lambda: codec_limit(encoded, OURS["random"])
        )
    pipelines["Huffman floor: decode at 1/8 on every core"] = lambda: huffman_floor(encoded)
    if args.others:
        pipelines["ours, full decode + resize in the transform, 2 workers"] = lambda: ours(
            shards, tt.Image("RGB"), workers=2, batch_mode=True, transform=full_decode_then_resize
        )
        pipelines["torchvision ImageFolder + Pillow resize, 2 workers"] = lambda: image_folder(folder)
        if os.path.isdir(args.tfrecord_path):
            pipelines["`tfrecord` package + Pillow decode/resize, 2 workers"] = lambda: tfrecord_package(
                shards, args.tfrecord_path
            )
    rates: dict[str, list[float]] = {name: [] for name in [*pipelines, *TF_NAMES.values()]}
    cpu_rates: dict[str, list[float]] = {name: [] for name in rates}
    for run in pipelines.values():  # warm-up: page cache, imports
        run()
    for round_ in range(args.rounds):
        for name, run in pipelines.items():
            start, cpu = time.perf_counter(), cpu_seconds()
            seen = run()
            rates[name].append(seen / (time.perf_counter() - start))
            cpu_rates[name].append(seen / (cpu_seconds() - cpu))
        if os.path.exists(args.tf_python):
            for kind, name in TF_NAMES.items():
                wall, per_cpu = run_script(args.tf_python, TF_SCRIPT, ",".join(shards), kind, "1")
                rates[name].append(float(wall))
                cpu_rates[name].append(float(per_cpu))
        print(f"round {round_ + 1}/{args.rounds} done", file=sys.stderr)
    report(rates, cpu_rates, args.images, args.rounds, shards)


def cpu_seconds() -> float:
    """CPU time of this process (all its threads) and of its children that have ended (workers)."""
    import resource

    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def report(
    rates: dict[str, list[float]],
    cpu_rates: dict[str, list[float]],
    images: int,
    rounds: int,
    shards: list[str],
) -> None:
    """The table: medians, each of ours against TensorFlow's faster pipeline for the same output
    (resize and center crop: the faster of resize and ratio=; random: decode_and_crop_jpeg) and
    against the codec's limit for the same spec; then images per CPU second, ours against TF's."""
    median = {name: statistics.median(values) for name, values in rates.items() if values}
    per_cpu = {name: statistics.median(values) for name, values in cpu_rates.items() if values}
    tf_resize = max((median.get(TF_NAMES[k], 0.0) for k in ("resize", "ratio")), default=0.0)
    tf_faster = {"resize": tf_resize, "center": tf_resize, "random": median.get(TF_NAMES["crop"], 0.0)}
    average_kb = sum(os.path.getsize(path) for path in shards) / images / 1e3
    print(
        f"\n{images} images 640x480 (~{average_kb:.0f} KB), batches of {BATCH} at {SIZE}x{SIZE}, "
        f"{os.cpu_count()} cores, median of {rounds} interleaved rounds\n"
    )
    tf_cpu_resize = max((per_cpu.get(TF_NAMES[k], 0.0) for k in ("resize", "ratio")), default=0.0)
    tf_cpu = {"resize": tf_cpu_resize, "center": tf_cpu_resize, "random": per_cpu.get(TF_NAMES["crop"], 0.0)}
    print(
        "| pipeline | images/s | x TF's faster, same output | share of the codec's limit "
        "| images per CPU second | x TF's, per CPU second |"
    )
    print("|---|---|---|---|---|---|")
    for name, value in median.items():
        crop = next((c for c in OURS if f"crop={c!r}" in name), None)
        versus_tf = share = versus_tf_cpu = ""
        if crop and name.startswith("ours"):
            versus_tf = f"{value / tf_faster[crop]:.2f}" if tf_faster[crop] else ""
            versus_tf_cpu = f"{per_cpu[name] / tf_cpu[crop]:.2f}" if tf_cpu[crop] else ""
            whole = "whole-image" in name
            limit = median.get(
                f"codec's limit: crop={crop!r}, whole-image decode, on every core"
                if whole
                else f"codec's limit: crop={crop!r}, decodes alone on every core"
            )
            share = f"{value / limit:.0%}" if limit and "dct='fast'" not in name else ""
        print(f"| {name} | {value:.0f} | {versus_tf} | {share} | {per_cpu[name]:.0f} | {versus_tf_cpu} |")


if __name__ == "__main__":
    main()
