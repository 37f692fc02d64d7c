"""Random crops against TensorFlow's decode_and_crop_jpeg pipeline, in one run (issue 45 part 4).

Data (each made once, converted with `torch-tfrecord convert image-folder` into 4 shards, read
from the page cache): bench_images.py's photos (640x480, quality 85, sensor noise of sigma 10)
and noisy photos (the same scenes, quality 90, noise of sigma 20). Every pipeline decodes, brings
each image to 224x224 and makes batches of 32:

- ours: ``tt.Image(size=224, crop="random")`` in batch mode, with 0 DataLoader workers (the
  codec's threads only) and with 2: by default (the decode stops after the crop's last row, as
  decode_and_crop_jpeg's does) and with ``verify="full"`` (the rows below the crop
  entropy-decoded too: the whole-file check before issue 45);
- ours with ``threads=2`` (0 workers: issue 55's loader axis), and the whole-image resize
  (``tt.Image(size=224)``) with 0 and 2 workers and with ``threads=2``, crops and resizes in one run;
- TensorFlow (in --tf-python's interpreter): parse + sample_distorted_bounding_box +
  decode_and_crop_jpeg + tf.image.resize, batch 32, as bench_images.py writes it, in two modes:
  AUTOTUNE (parallel reads and map, prefetch) and serial (a plain map, prefetch); and its
  whole-image pipeline (decode_jpeg + tf.image.resize, AUTOTUNE), the peer of our resizes. On 2
  cores its AUTOTUNE settles in one of two speeds per process, so each mode runs --tf-passes passes in each
  of its processes, one process per mode per round; TensorFlow's figure is its best: the fastest
  pass of its faster mode over all rounds (its median is printed too).

Rounds are interleaved (every pipeline once per round, both data sets); ours are medians over
rounds (their best in brackets), set against TensorFlow's best, in images/s and in images per CPU
second (this process and its reaped workers; TensorFlow's process).

With --codec-only, only the region decodes are timed (no dataset, no resize), ms per image of CPU
time on one thread, best of --rounds: the random crops of 64 JPEGs of each data set and of a
progressive re-encoding of the noisy ones (quality 90), stopping after the crop against reading
the whole file. A progressive JPEG's scans each hold every row: libjpeg reads them all before the
first row, so there stopping saves only the rows' inverse DCTs, which were skipped anyway.

    python benchmarks/bench_crops.py [--images 1000] [--rounds 5] [--tf-passes 3]
        [--tf-python /tmp/tfvenv/bin/python] [--codec-only]
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _tensorflow import run_script
from bench_images import SIZE, TF_SCRIPT, cpu_seconds, make_data, ours, read_encoded

import torch_tfrecord as tt

DATA = {"photos (q85)": {"quality": 85, "noise": 10.0}, "noisy photos (q90)": {"quality": 90, "noise": 20.0}}

# bench_images.py's pipeline ("crop"), serial or AUTOTUNE: argv[2] names the mode.
TF_CROPS = TF_SCRIPT.replace(
    'decode = {"resize": resize, "ratio": ratio, "crop": random_crop}[kind]\n'
    "ds = ds.map(decode, num_parallel_calls=tf.data.AUTOTUNE)\n",
    'if kind == "serial": ds = tf.data.TFRecordDataset(shards).map(random_crop)\n'
    "else: ds = ds.map(random_crop, num_parallel_calls=tf.data.AUTOTUNE)\n",
)
assert TF_CROPS != TF_SCRIPT
TF_MODES = {
    "autotune": "TensorFlow: decode_and_crop_jpeg pipeline, AUTOTUNE",
    "serial": "TensorFlow: decode_and_crop_jpeg pipeline, serial map",
    "resize": "TensorFlow: decode_jpeg + resize pipeline (bench_images.py's), AUTOTUNE",
}
CROP_MODES = ("autotune", "serial")  # the peers of our crops; "resize" is our resizes' peer


def pipelines_for(shards: list[str]) -> dict[str, Callable[[], int]]:
    runs: dict[str, Callable[[], int]] = {}
    for workers in (0, 2):
        for verify in ("crop", "full"):
            spec = tt.Image("RGB", size=SIZE, crop="random", verify=verify)  # type: ignore[arg-type]
            name = f"ours: crop='random'{', verify=full' if verify == 'full' else ''}, {workers} workers"
            runs[name] = lambda spec=spec, workers=workers: ours(  # type: ignore[misc]
                shards, spec, workers=workers, batch_mode=True
            )
    # The loader axis (issue 55): 2 threads in the loading process, 0 workers; and the whole-image
    # resize the same ways, so that crops and resizes are set side by side in one run.
    crop, resize = tt.Image("RGB", size=SIZE, crop="random"), tt.Image("RGB", size=SIZE)
    runs["ours: crop='random', threads=2"] = lambda: ours(shards, crop, workers=0, batch_mode=True, threads=2)
    for workers in (0, 2):
        runs[f"ours: resize (size={SIZE}), {workers} workers"] = lambda workers=workers: ours(
            shards, resize, workers=workers, batch_mode=True
        )
    runs[f"ours: resize (size={SIZE}), threads=2"] = lambda: ours(
        shards, resize, workers=0, batch_mode=True, threads=2
    )
    return runs


def shards_of(args: argparse.Namespace) -> dict[str, list[str]]:
    """Each data set's shards (made once under --dir)."""
    made = {}
    for name, look in DATA.items():
        folder = os.path.join(args.dir, f"{name.split()[0]}-q{look['quality']}")
        made[name] = make_data(folder, args.images, int(look["quality"]), look["noise"])[1]
    return made


def compare(args: argparse.Namespace) -> None:
    shards = shards_of(args)
    runs = {(data, name): run for data, paths in shards.items() for name, run in pipelines_for(paths).items()}
    rates: dict[tuple[str, str], list[float]] = {key: [] for key in runs}
    cpu_rates: dict[tuple[str, str], list[float]] = {key: [] for key in runs}
    for key in [(data, mode) for data in shards for mode in TF_MODES]:
        rates[key], cpu_rates[key] = [], []
    for run in runs.values():  # warm-up: page cache, imports
        run()
    for round_ in range(args.rounds):
        for data, paths in shards.items():
            for (of, name), run in runs.items():
                if of == data:
                    start, cpu = time.perf_counter(), cpu_seconds()
                    seen = run()
                    rates[(data, name)].append(seen / (time.perf_counter() - start))
                    cpu_rates[(data, name)].append(seen / (cpu_seconds() - cpu))
            if os.path.exists(args.tf_python):
                for mode in TF_MODES:
                    script, kind = (TF_SCRIPT, "resize") if mode == "resize" else (TF_CROPS, mode)
                    found = run_script(args.tf_python, script, ",".join(paths), kind, str(args.tf_passes))
                    rates[(data, mode)] += [float(v) for v in found[0::2]]
                    cpu_rates[(data, mode)] += [float(v) for v in found[1::2]]
        load = os.getloadavg()[0]
        print(f"round {round_ + 1}/{args.rounds} done, load average {load:.1f}", file=sys.stderr)
    report(rates, cpu_rates, shards, args)


def report(
    rates: dict[tuple[str, str], list[float]],
    cpu_rates: dict[tuple[str, str], list[float]],
    shards: dict[str, list[str]],
    args: argparse.Namespace,
) -> None:
    print(
        f"\n{args.images} images per data set, 640x480 to {SIZE}x{SIZE}, batches of 32, "
        f"{os.cpu_count()} cores, {args.rounds} interleaved rounds "
        f"(TensorFlow: {args.tf_passes} passes per process and round)\n"
    )
    columns = (
        "images/s, median (best) | x TF's best (same pipeline) | per CPU second, median (best) "
        "| x TF's best per CPU s"
    )
    print(f"| data | pipeline | {columns} |")
    print("|---|---|---|---|---|---|")
    for data, paths in shards.items():
        kb = sum(os.path.getsize(path) for path in paths) / args.images / 1e3
        tf = {mode: rates[(data, mode)] for mode in TF_MODES if rates[(data, mode)]}
        crop_modes = [mode for mode in CROP_MODES if mode in tf]
        best_mode = max(crop_modes, key=lambda mode: max(tf[mode]), default=None)
        for (of, name), values in rates.items():
            if of != data or name in TF_MODES:
                continue
            # Each of ours against TensorFlow's best pass of the same pipeline: crops against its
            # faster crop mode, whole-image resizes against its resize.
            peer = "resize" if "resize" in name else best_mode
            tf_best = max(tf[peer]) if peer in tf else 0.0
            tf_cpu = max(cpu_rates[(data, peer)]) if peer in tf else 0.0
            wall, per_cpu = statistics.median(values), statistics.median(cpu_rates[(of, name)])
            best_wall, best_cpu = max(values), max(cpu_rates[(of, name)])
            versus = f"{wall / tf_best:.2f} ({best_wall / tf_best:.2f})" if tf_best else ""
            versus_cpu = f"{per_cpu / tf_cpu:.2f} ({best_cpu / tf_cpu:.2f})" if tf_cpu else ""
            rates_of = f"{wall:.0f} ({best_wall:.0f}) | {versus} | {per_cpu:.0f} ({best_cpu:.0f})"
            print(f"| {data}, ~{kb:.0f} KB | {name} | {rates_of} | {versus_cpu} |")
        for mode, values in tf.items():
            best = " (TF's best: its fastest pass)" if mode in (best_mode, "resize") else ""
            cpu = cpu_rates[(data, mode)]
            spread = f"median {statistics.median(values):.0f}, slowest {min(values):.0f}"
            print(
                f"| {data} | {TF_MODES[mode]}{best} | {max(values):.0f} ({spread}) | "
                f"| {max(cpu):.0f} (median {statistics.median(cpu):.0f}) | |"
            )


def progressive(data: bytes) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    with Image.open(io.BytesIO(data)) as image:
        image.save(buffer, format="JPEG", quality=90, progressive=True)
    return buffer.getvalue()


def codec_only(args: argparse.Namespace) -> None:
    """ms of CPU per random crop's region decode, one thread: stopping at the crop against the whole file."""
    from torch_tfrecord.codec import image_batch, image_roi

    sets = {name: read_encoded(paths)[:64] for name, paths in shards_of(args).items()}
    sets["noisy photos, progressive (q90)"] = [progressive(data) for data in sets["noisy photos (q90)"]]
    spec = tt.Image("RGB", size=SIZE, crop="random")
    print(f"\n64 JPEGs per data set, random crops, one thread, CPU time, best of {args.rounds} rounds\n")
    print("| data | stop after the crop, ms | whole file (verify='full'), ms | x | rows below the crop |")
    print("|---|---|---|---|---|")
    for name, encoded in sets.items():
        regions, below = [], []
        for i, data in enumerate(encoded):
            [(height, width)] = image_roi.read_sizes([data])  # type: ignore[misc]
            box = image_batch.crop_box(height, width, spec, torch.Generator().manual_seed(i))
            need = (min(height, -(-height * SIZE // box[2])), min(width, -(-width * SIZE // box[3])))
            regions.append((*box, *need))
            below.append(1 - (box[0] + box[2]) / height)
        best = {True: float("inf"), False: float("inf")}
        for _ in range(args.rounds):
            for verify_full in best:
                start = time.process_time()
                image_roi.decode_regions(encoded, regions, False, False, 1, False, None, None, verify_full)
                best[verify_full] = min(best[verify_full], (time.process_time() - start) / len(encoded) * 1e3)
        times = f"{best[False]:.3f} | {best[True]:.3f} | {best[True] / best[False]:.2f}"
        print(f"| {name} | {times} | {statistics.mean(below):.0%} (mean) |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "tt-bench-crops"))
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tf-passes", type=int, default=3)
    parser.add_argument("--tf-python", default="/tmp/tfvenv/bin/python")
    parser.add_argument("--codec-only", action="store_true", help="time only the region decodes")
    args = parser.parse_args()
    print(f"load average at the start: {' '.join(f'{v:.1f}' for v in os.getloadavg())}", file=sys.stderr)
    if args.codec_only:
        codec_only(args)
    else:
        compare(args)
    print(f"load average at the end: {' '.join(f'{v:.1f}' for v in os.getloadavg())}", file=sys.stderr)


if __name__ == "__main__":
    main()
