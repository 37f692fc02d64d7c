"""Ray Data: tt.ray.read_tfrecords / write_tfrecords against Ray's own read_tfrecords / write_tfrecords.

One local Ray cluster (``ray.init(num_cpus=2)``) runs both, in one run, on two datasets of
4 shards each: "small" (~81 B records: two int64 scalars and 4 floats) and "4KB" (an int64 and
1,000 floats). Reading: every row of the dataset through ``.iter_batches(batch_size=1024)``,
ours with the spec (fixed-shape columns, native decoder) and with ``spec=None`` (every feature
a list column, decoded with protobuf: what Ray's reader gives), Ray's with its defaults (it
imports TensorFlow in each read task and makes one Arrow table per record). Writing: the same
materialized dataset (list columns) written as 4 shards by each. The table gives the median of
the repeats (after one untimed warm-up of each, which also imports TensorFlow in the workers),
rows/s and the ratio to Ray's reader or writer measured in the same run.

Ray's reader and writer need TensorFlow in the workers, so this runs under a Python that has
TensorFlow, Ray Data and torch (a scratch venv; TensorFlow is never a dependency of ours):

    PYTHONPATH=$PWD /tmp/tfvenv-ray/bin/python benchmarks/bench_ray.py --dir /tmp/ttbench-ray
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import ray
import torch

import torch_tfrecord as tt

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_decode import example_features  # the same records as bench_decode's

SHARDS = 4
RECORDS = {"small": 6_000, "4KB": 2_000}  # per shard: Ray's own reader is slow
BATCH = 1024
SPECS = {
    "small": {
        "label": tt.FixedLen((), torch.int64),
        "id": tt.FixedLen((), torch.int64),
        "score": tt.FixedLen((4,), torch.float32),
    },
    "4KB": {"label": tt.FixedLen((), torch.int64), "embedding": tt.FixedLen((1000,), torch.float32)},
}
LIST_SPECS = {  # what both writers get: list columns, which both write as lists
    "small": {"label": "int", "id": "int", "score": "float"},
    "4KB": {"label": "int", "embedding": "float"},
}


def make_dataset(directory: str, name: str) -> list[str]:
    existing = sorted(glob.glob(os.path.join(directory, f"{name}-*-of-*.tfrecord")))
    if len(existing) == SHARDS:
        return existing
    rng = np.random.default_rng(0)
    with tt.ShardedExampleWriter(os.path.join(directory, name), max_records=RECORDS[name]) as writer:
        for i in range(SHARDS * RECORDS[name]):
            writer.write(example_features(name, i, rng))
    return writer.shard_paths


def line(name: str, label: str, count: int, seconds: float, base: float) -> str:
    rate = count / seconds
    return f"{name:8} {label:42} {count:8d} {seconds:9.3f} {rate:11,.0f} {rate / base:7.2f}"


def rows(dataset: Any) -> int:
    return sum(len(next(iter(batch.values()))) for batch in dataset.iter_batches(batch_size=BATCH))


def timed(run: Callable[[], int], repeats: int) -> tuple[float, int]:
    run()  # warm-up: workers started, TensorFlow imported in them, files in the page cache
    times, count = [], 0
    for _ in range(repeats):
        start = time.perf_counter()
        count = run()
        times.append(time.perf_counter() - start)
    return statistics.median(times), count


def write_ours(dataset: Any, directory: str) -> int:
    shutil.rmtree(directory, ignore_errors=True)
    paths = tt.ray.write_tfrecords(dataset, os.path.join(directory, "part"), num_shards=SHARDS)
    return sum(tt.count_records(path) for path in paths)


def write_ray(dataset: Any, directory: str) -> int:
    shutil.rmtree(directory, ignore_errors=True)
    dataset.repartition(SHARDS).write_tfrecords(directory)
    return sum(tt.count_records(path) for path in glob.glob(os.path.join(directory, "*")))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dir", default="/tmp/ttbench-ray", help="where the datasets are written")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    datasets = {name: make_dataset(args.dir, name) for name in RECORDS}

    ray.init(num_cpus=2, include_dashboard=False, logging_level="warning", log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    print(f"{'data':8} {'pipeline':42} {'rows':>8} {'median s':>9} {'rows/s':>11} {'x Ray':>7}")
    for name, paths in datasets.items():
        spec = SPECS[name]
        results: list[tuple[str, float, int]] = []
        results.append(
            (
                "Ray read_tfrecords (TensorFlow)",
                *timed(lambda: rows(ray.data.read_tfrecords(paths)), args.repeats),
            )
        )
        results.append(
            (
                "ours, spec (native)",
                *timed(lambda: rows(tt.ray.read_tfrecords(paths, spec=spec)), args.repeats),
            )
        )
        results.append(
            ("ours, spec=None (protobuf)", *timed(lambda: rows(tt.ray.read_tfrecords(paths)), args.repeats))
        )
        base = results[0][2] / results[0][1]
        for label, seconds, count in results:
            print(line(name, "read " + label, count, seconds, base))

        source = tt.ray.read_tfrecords(paths, spec=LIST_SPECS[name]).materialize()
        out = os.path.join(args.dir, "out")
        writes = [
            (
                "Ray Dataset.write_tfrecords (TensorFlow)",
                *timed(lambda: write_ray(source, out + "-ray"), args.repeats),
            ),
            ("ours, tt.ray.write_tfrecords", *timed(lambda: write_ours(source, out + "-ours"), args.repeats)),
        ]
        base = writes[0][2] / writes[0][1]
        for label, seconds, count in writes:
            print(line(name, "write " + label, count, seconds, base))
    ray.shutdown()


if __name__ == "__main__":
    main()
