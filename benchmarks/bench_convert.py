"""Converting an image folder to TFRecord: convert_image_folder against the scripts people copy.

A folder in torchvision's ImageFolder layout (10 classes, JPEGs of 320x240, made here with
Pillow) is converted to 8 shards with their indexes by ``convert_image_folder`` with 1 and 2
worker processes. Peers, run on the same folder in the same run, write the same seven features
per image (encoded bytes, format, height, width, filename, class label and text), reading the
size from the header as we do:

- the `tfrecord` package's TFRecordWriter, one process, one file, no index (the usual script);
- with --tf-python, TensorFlow's tf.io.TFRecordWriter + tf.train.Example, the size from
  tf.io.extract_jpeg_shape (header only), one process, one file.

The table gives the median of the repeats, images/s, MB/s of image bytes, and the ratio to the
`tfrecord` package in the same run.

    python benchmarks/bench_convert.py [--images 4000] [--repeats 5] [--tf-python /tmp/tfvenv/bin/python]

Needs Pillow; the `tfrecord` package (pip install tfrecord) for the first peer.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

import numpy as np
from _tensorflow import run_script

import torch_tfrecord as tt
from torch_tfrecord import convert

CLASSES = 10


def make_folder(root: str, images: int, seed: int = 0) -> int:
    """``images`` JPEGs in CLASSES class folders; returns their total size in bytes."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    total = 0
    for i in range(images):
        folder = os.path.join(root, f"class{i % CLASSES:02d}")
        os.makedirs(folder, exist_ok=True)
        blocks = rng.integers(0, 255, (31, 41, 3), dtype=np.uint8)
        pixels = np.kron(blocks, np.ones((8, 8, 1), dtype=np.uint8))[:240, :320]
        path = os.path.join(folder, f"{i:06d}.jpg")
        Image.fromarray(pixels).save(path, quality=90)
        total += os.path.getsize(path)
    return total


def files(root: str) -> list[tuple[str, int, str]]:
    """(path, label from 1, class name) in the order a script would walk them."""
    out = []
    for label, name in enumerate(sorted(os.listdir(root)), start=1):
        for file in sorted(os.listdir(os.path.join(root, name))):
            out.append((os.path.join(root, name, file), label, name))
    return out


def ours(root: str, out: str, jobs: int, reencode: bool = False) -> int:
    result = convert.convert_image_folder(root, out, shards=8, jobs=jobs, reencode=reencode)
    return result.total


def tfrecord_package(root: str, out: str) -> int:
    from PIL import Image
    from tfrecord.writer import TFRecordWriter

    os.makedirs(out, exist_ok=True)
    writer = TFRecordWriter(os.path.join(out, "data.tfrecord"))
    count = 0
    for path, label, name in files(root):
        with open(path, "rb") as f:
            data = f.read()
        with Image.open(io.BytesIO(data)) as image:  # the header only
            width, height = image.size
            kind = image.format.lower()
        writer.write(
            {
                "image/encoded": (data, "byte"),
                "image/format": (kind.encode(), "byte"),
                "image/height": (height, "int"),
                "image/width": (width, "int"),
                "image/filename": (os.path.basename(path).encode(), "byte"),
                "image/class/label": (label, "int"),
                "image/class/text": (name.encode(), "byte"),
            }
        )
        count += 1
    writer.close()
    return count


_TF_SCRIPT = """
import os, shutil, statistics, sys, time
import tensorflow as tf
root, out, repeats = sys.argv[1], sys.argv[2], int(sys.argv[3])
items = []
for label, name in enumerate(sorted(os.listdir(root)), start=1):
    for file in sorted(os.listdir(os.path.join(root, name))):
        items.append((os.path.join(root, name, file), label, name))
def b(v): return tf.train.Feature(bytes_list=tf.train.BytesList(value=[v]))
def i(v): return tf.train.Feature(int64_list=tf.train.Int64List(value=[v]))
times = []
for _ in range(repeats):
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    start = time.perf_counter()
    with tf.io.TFRecordWriter(os.path.join(out, "data.tfrecord")) as writer:
        for path, label, name in items:
            data = tf.io.gfile.GFile(path, "rb").read()
            height, width, _ = tf.io.extract_jpeg_shape(data).numpy().tolist()
            example = tf.train.Example(features=tf.train.Features(feature={
                "image/encoded": b(data), "image/format": b(b"jpeg"), "image/height": i(height),
                "image/width": i(width), "image/filename": b(os.path.basename(path).encode()),
                "image/class/label": i(label), "image/class/text": b(name.encode())}))
            writer.write(example.SerializeToString())
    times.append(time.perf_counter() - start)
print(len(items), statistics.median(times))
"""


def tensorflow(tf_python: str, root: str, out: str, repeats: int) -> tuple[float, int]:
    images, seconds = run_script(tf_python, _TF_SCRIPT, root, out, str(repeats))
    return float(seconds), int(images)


def timed(function: Callable[[str], int], out: str, repeats: int) -> tuple[float, int]:
    seconds, count = [], 0
    for _ in range(repeats):
        shutil.rmtree(out, ignore_errors=True)
        start = time.perf_counter()
        count = function(out)
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), count


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--images", type=int, default=4000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--tf-python", help="a Python with TensorFlow, to time its writer as a peer")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as scratch:
        root = os.path.join(scratch, "images")
        image_bytes = make_folder(root, args.images)
        out = os.path.join(scratch, "out")
        rows: list[tuple[str, float, int]] = []
        for reencode in (False, True):
            for jobs in (1, 2):
                seconds, count = timed(lambda o, j=jobs, r=reencode: ours(root, o, j, r), out, args.repeats)
                shards = sorted(p for p in os.listdir(out) if p.endswith(".tfrecord"))
                assert count == args.images and len(shards) == 8, (count, shards)
                assert sum(tt.count_records(os.path.join(out, p)) for p in shards) == args.images
                how = ", reencode" if reencode else ""
                rows.append((f"convert_image_folder{how}, jobs={jobs}", seconds, count))
        try:
            import tfrecord  # noqa: F401
        except ImportError:
            print("(the tfrecord package is not installed: no peer row for it)", file=sys.stderr)
        else:
            seconds, count = timed(lambda o: tfrecord_package(root, o), out, args.repeats)
            rows.append(("peer: tfrecord package script", seconds, count))
        if args.tf_python:
            seconds, count = tensorflow(args.tf_python, root, out, args.repeats)
            rows.append(("peer: TensorFlow script", seconds, count))

    peer = next((s for name, s, _ in rows if name.startswith("peer: tfrecord")), None)
    each = image_bytes / args.images / 1024
    print(f"{args.images} JPEGs of 320x240, {each:.1f} KiB each; median of {args.repeats}")
    print(f"{'method':44} {'images':>7} {'median s':>9} {'images/s':>9} {'MB/s':>7} {'vs tfrecord pkg':>16}")
    for name, seconds, count in rows:
        ratio = f"{peer / seconds:.2f}x" if peer else "-"
        print(
            f"{name:44} {count:>7} {seconds:>9.3f} {count / seconds:>9,.0f} "
            f"{image_bytes / seconds / 1e6:>7.1f} {ratio:>16}"
        )


if __name__ == "__main__":
    main()
