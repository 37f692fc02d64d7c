"""Batched decode of Examples into tensors, CRC checked, against peers in the same run.

Datasets (as the record benchmark: 8 shards x 20,000 records): ~50-byte Examples
{label: int64, id: int64, score: 4 floats} and ~4 KB Examples {label: int64, embedding:
1,000 floats}. Each is read and decoded in batches of 256 into tensors:

- ours: read_records (CRC checked) + decode_batch(spec) per batch of 256;
- the `tfrecord` package (pip install tfrecord): tfrecord_loader with a description, per record;
- TensorFlow (--tf-python, separate process): TFRecordDataset(paths).batch(256).map(parse_example).

Also prints where our time goes per record: reading, protobuf parsing, and the rest of decode_batch.

    python benchmarks/bench_decode.py [--dir DIR] [--repeats 5] [--tf-python /tmp/tfvenv/bin/python]
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable

import numpy as np
import torch

import torch_tfrecord as tt
from torch_tfrecord.proto import Example

SHARDS = 8
RECORDS_PER_SHARD = 20_000
BATCH = 256

SPECS = {
    "small": {
        "label": tt.FixedLen((), torch.int64),
        "id": tt.FixedLen((), torch.int64),
        "score": tt.FixedLen((4,), torch.float32),
    },
    "large": {"label": tt.FixedLen((), torch.int64), "embedding": tt.FixedLen((1000,), torch.float32)},
}
TFRECORD_DESCRIPTIONS = {
    "small": {"label": "int", "id": "int", "score": "float"},
    "large": {"label": "int", "embedding": "float"},
}
TF_SPECS = {
    "small": "{'label': tf.io.FixedLenFeature([], tf.int64), 'id': tf.io.FixedLenFeature([], tf.int64),"
    " 'score': tf.io.FixedLenFeature([4], tf.float32)}",
    "large": "{'label': tf.io.FixedLenFeature([], tf.int64),"
    " 'embedding': tf.io.FixedLenFeature([1000], tf.float32)}",
}


def make_dataset(directory: str, name: str) -> list[str]:
    existing = sorted(glob.glob(os.path.join(directory, f"ex-{name}-*.tfrecord")))
    if len(existing) == SHARDS:
        return existing
    rng = np.random.default_rng(0)
    with tt.ShardedWriter(os.path.join(directory, f"ex-{name}"), max_records=RECORDS_PER_SHARD) as writer:
        for i in range(SHARDS * RECORDS_PER_SHARD):
            if name == "small":
                features = {
                    "label": int(rng.integers(1000)),
                    "id": i,
                    "score": rng.random(4, dtype=np.float32),
                }
            else:
                features = {"label": int(rng.integers(1000)), "embedding": rng.random(1000, dtype=np.float32)}
            writer.write(features)
    return writer.shard_paths


def batches(paths: list[str]):  # type: ignore[no-untyped-def]
    batch: list[bytes] = []
    for path in paths:
        for record in tt.read_records(path):
            batch.append(record)
            if len(batch) == BATCH:
                yield batch
                batch = []
    if batch:
        yield batch


def ours(paths: list[str], spec: dict) -> int:  # type: ignore[type-arg]
    n = 0
    for batch in batches(paths):
        columns = tt.decode_batch(batch, spec)
        n += len(columns["label"])
    return n


def read_only(paths: list[str]) -> int:
    return sum(len(batch) for batch in batches(paths))


def parse_only(in_memory: list[list[bytes]]) -> int:
    return sum(len([Example.FromString(r) for r in batch]) for batch in in_memory)


def decode_only(in_memory: list[list[bytes]], spec: dict) -> int:  # type: ignore[type-arg]
    return sum(len(tt.decode_batch(batch, spec)["label"]) for batch in in_memory)


def tfrecord_package(paths: list[str], description: dict) -> int:  # type: ignore[type-arg]
    from tfrecord.reader import tfrecord_loader

    n = 0
    for path in paths:
        for _ in tfrecord_loader(path, None, description):
            n += 1
    return n


_TF_SCRIPT = """
import statistics, sys, time
import tensorflow as tf
spec = eval(sys.argv[1])
paths, repeats = sys.argv[2:-1], int(sys.argv[-1])
times = []
for _ in range(repeats):
    start = time.perf_counter()
    n = 0
    dataset = tf.data.TFRecordDataset(paths).batch(256).map(lambda x: tf.io.parse_example(x, spec))
    for batch in dataset:
        n += int(batch['label'].shape[0])
    times.append(time.perf_counter() - start)
print(n, statistics.median(times))
"""


def tensorflow(tf_python: str, name: str, paths: list[str], repeats: int) -> tuple[float, int]:
    env = {
        **os.environ,
        "TF_CPP_MIN_LOG_LEVEL": "3",
        "CUDA_VISIBLE_DEVICES": "",
        "TF_NUM_INTEROP_THREADS": "1",
        "TF_NUM_INTRAOP_THREADS": "1",
    }
    result = subprocess.run(
        ["taskset", "-c", "0", tf_python, "-c", _TF_SCRIPT, TF_SPECS[name], *paths, str(repeats)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    records, seconds = result.stdout.split()
    return float(seconds), int(records)


def timed(function: Callable[[], int], repeats: int) -> tuple[float, int]:
    seconds = []
    n = 0
    for _ in range(repeats):
        start = time.perf_counter()
        n = function()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--tf-python")
    args = parser.parse_args()
    directory = args.dir or tempfile.mkdtemp(prefix="tt-bench-")
    os.makedirs(directory, exist_ok=True)
    torch.set_num_threads(1)
    rows = []
    profile = []
    for name in ["small", "large"]:
        paths = make_dataset(directory, name)
        size = sum(os.path.getsize(p) for p in paths)
        mean = size / (SHARDS * RECORDS_PER_SHARD)
        label = f"{name} (~{mean:,.0f} B)"
        seconds, n = timed(lambda: ours(paths, SPECS[name]), args.repeats)
        ours_rate = n / seconds
        rows.append((label, "torch-tfrecord decode_batch", n, seconds))
        # Where the time goes: each stage timed on its own (decoding on records already in memory).
        read_s, _ = timed(lambda: read_only(paths), args.repeats)
        in_memory = list(batches(paths))
        parse_s, _ = timed(lambda: parse_only(in_memory), args.repeats)
        decode_s, _ = timed(lambda: decode_only(in_memory, SPECS[name]), args.repeats)
        profile.append((label, read_s / n * 1e6, parse_s / n * 1e6, (decode_s - parse_s) / n * 1e6))
        try:
            seconds, n = timed(lambda: tfrecord_package(paths, TFRECORD_DESCRIPTIONS[name]), args.repeats)
            rows.append((label, "tfrecord package loader", n, seconds))
        except ImportError:
            pass
        if args.tf_python:
            seconds, n = tensorflow(args.tf_python, name, paths, args.repeats)
            rows.append((label, "TensorFlow batch(256).map(parse)", n, seconds))
        for i, row in enumerate(rows):
            if row[0] == label:
                rows[i] = (*row, ours_rate / (row[2] / row[3]))
    print(f"{'data':16} {'pipeline':34} {'records':>8} {'median s':>9} {'records/s':>11} {'ours/this':>9}")
    for label, pipeline, n, seconds, ratio in rows:
        print(f"{label:16} {pipeline:34} {n:>8} {seconds:>9.3f} {n / seconds:>11,.0f} {ratio:>9.2f}")
    print()
    print(f"{'data':16} {'read+CRC us/rec':>16} {'protobuf parse':>15} {'columns+tensors':>16}")
    for label, read_us, parse_us, rest_us in profile:
        print(f"{label:16} {read_us:>16.2f} {parse_us:>15.2f} {rest_us:>16.2f}")


if __name__ == "__main__":
    main()
