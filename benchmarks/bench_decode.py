"""Batched decode of Examples into tensors, CRC checked, against peers in the same run.

Datasets (as the record benchmark: 8 shards x 20,000 records): ~50-byte Examples
{label: int64, id: int64, score: 4 floats} and ~4 KB Examples {label: int64, embedding:
1,000 floats}. Each is read and decoded in batches of 256 into tensors:

- ours, read+decode: TFRecordDataset(paths, spec, batch_size=256, shuffle=False) iterated in
  this process (CRC checked), with the native decoder and with the protobuf one
  (TORCH_TFRECORD_DECODER=python);
- ours, decode_batch: records already in memory as bytes, one call per batch of 256;
- the `tfrecord` package (pip install tfrecord): tfrecord_loader with a description, per record;
- TensorFlow (--tf-python, separate process, pinned to one core):
  TFRecordDataset(paths).batch(256).map(parse_example).

Also prints where the native pipeline's time goes per record (reading into the batch buffer,
framing + CRC, the wire-format walk, filling columns, making tensors, the dataset around it), the
protobuf pipeline's split, and decode throughput with 1 and 2 threads (the GIL is released).

    python benchmarks/bench_decode.py [--dir DIR] [--repeats 5] [--tf-python /tmp/tfvenv/bin/python]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import glob
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

import torch_tfrecord as tt
from torch_tfrecord.codec import native
from torch_tfrecord.codec.spec import normalize_spec
from torch_tfrecord.proto import Example
from torch_tfrecord.records.shards.files import RecordFiles

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
    with tt.ShardedExampleWriter(
        os.path.join(directory, f"ex-{name}"), max_records=RECORDS_PER_SHARD
    ) as writer:
        for i in range(SHARDS * RECORDS_PER_SHARD):
            writer.write(example_features(name, i, rng))
    return writer.shard_paths


def example_features(kind: str, i: int, rng: np.random.Generator) -> dict[str, Any]:
    """Record ``i`` of the "small" (~81 B: two int64 and 4 floats) or the ~4 KB dataset (an
    int64 and 1,000 floats); bench_ray.py writes the same records."""
    if kind == "small":
        return {"label": int(rng.integers(1000)), "id": i, "score": rng.random(4, dtype=np.float32)}
    return {"label": int(rng.integers(1000)), "embedding": rng.random(1000, dtype=np.float32)}


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


def dataset_pass(paths: list[str], spec: dict, decoder: str) -> int:  # type: ignore[type-arg]
    os.environ[native.ENV_VAR] = decoder
    try:
        dataset = tt.TFRecordDataset(paths, spec=spec, batch_size=BATCH, shuffle=False, drop_last=False)
        return sum(len(batch["label"]) for batch in dataset)
    finally:
        del os.environ[native.ENV_VAR]


def native_profile(paths: list[str], spec: dict, repeats: int, total_s: float) -> dict[str, float]:  # type: ignore[type-arg]
    """Seconds per stage of the native read+decode pipeline over all records."""
    files = RecordFiles.from_sources(paths)
    n = files.num_records
    id_batches = [np.arange(i, min(i + BATCH, n), dtype=np.int64) for i in range(0, n, BATCH)]
    normalized = normalize_spec(spec)
    assert normalized is not None and native._native is not None
    table = native._columns(tuple(normalized.items()), ())
    read_s, _ = timed(lambda: sum(len(files.read_framed(ids)[1]) for ids in id_batches), repeats)
    framed = [files.read_framed(ids) for ids in id_batches]

    def raw(columns: Any, verify: bool) -> int:
        for buffer, starts, sizes in framed:  # type: ignore[misc]
            native._native.decode(buffer, starts, sizes, columns, framed=True, verify_crc=verify)
        return n

    walk_s, _ = timed(lambda: raw((), False), repeats)
    crc_s, _ = timed(lambda: raw((), True), repeats)
    fill_s, _ = timed(lambda: raw(table, True), repeats)
    full_s, _ = timed(
        lambda: sum(
            len(native.decode_framed(b, st, sz, normalized, verify_crc=True)["label"])  # type: ignore[index]
            for b, st, sz in framed  # type: ignore[misc]
        ),
        repeats,
    )
    return {
        "read into buffer": read_s,
        "framing + CRC": crc_s - walk_s,
        "wire-format walk": walk_s,
        "fill columns": fill_s - crc_s,
        "tensors, Ragged": full_s - fill_s,
        "dataset around it": total_s - read_s - full_s,
    }


def threaded_decode(framed: list[Any], spec: dict, threads: int) -> int:  # type: ignore[type-arg]
    def work(chunk: list[Any]) -> int:
        return sum(
            len(native.decode_framed(b, st, sz, spec, verify_crc=True)["label"]) for b, st, sz in chunk
        )

    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        return sum(pool.map(work, [framed[i::threads] for i in range(threads)]))


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
    profiles = []
    python_split = []
    scaling = []
    for name in ["small", "large"]:
        paths = make_dataset(directory, name)
        size = sum(os.path.getsize(p) for p in paths)
        mean = size / (SHARDS * RECORDS_PER_SHARD)
        label = f"{name} (~{mean:,.0f} B)"
        spec = SPECS[name]
        dataset_pass(paths, spec, "native")  # warm the page cache
        native_s, n = timed(lambda: dataset_pass(paths, spec, "native"), args.repeats)
        data_rows = [(label, "ours read+decode, native", n, native_s)]
        python_s, n = timed(lambda: dataset_pass(paths, spec, "python"), args.repeats)
        data_rows.append((label, "ours read+decode, protobuf", n, python_s))
        in_memory = list(batches(paths))
        seconds, n = timed(lambda: decode_only(in_memory, spec), args.repeats)
        data_rows.append((label, "ours decode_batch, native (in mem)", n, seconds))
        try:
            seconds, n = timed(lambda: tfrecord_package(paths, TFRECORD_DESCRIPTIONS[name]), args.repeats)
            data_rows.append((label, "tfrecord package loader", n, seconds))
        except ImportError:
            pass
        tf_rate = None
        if args.tf_python:
            seconds, n = tensorflow(args.tf_python, name, paths, args.repeats)
            data_rows.append((label, "TensorFlow batch(256).map(parse)", n, seconds))
            tf_rate = n / seconds
        rows += [(*row, size, tf_rate) for row in data_rows]
        profiles.append((label, n, native_profile(paths, spec, args.repeats, native_s)))
        read_s, _ = timed(lambda: read_only(paths), args.repeats)
        parse_s, _ = timed(lambda: parse_only(in_memory), args.repeats)
        python_split.append((label, n, read_s, parse_s, python_s - read_s - parse_s))
        normalized = normalize_spec(spec)
        files = RecordFiles.from_sources(paths)
        framed = [
            files.read_framed(np.arange(i, min(i + BATCH, n), dtype=np.int64)) for i in range(0, n, BATCH)
        ]
        for threads in (1, 2):
            seconds, _ = timed(lambda: threaded_decode(framed, normalized, threads), args.repeats)  # type: ignore[arg-type]
            scaling.append((label, threads, n / seconds))
    header = f"{'data':16} {'pipeline':36} {'records':>8} {'median s':>9} {'records/s':>11}"
    print(f"{header} {'MB/s':>7} {'x TF':>6}")
    for label, pipeline, n, seconds, size, tf_rate in rows:
        ratio = f"{n / seconds / tf_rate:>6.2f}" if tf_rate else f"{'-':>6}"
        mb = size / seconds / 1e6 if "decode_batch" not in pipeline else float("nan")
        print(f"{label:16} {pipeline:36} {n:>8} {seconds:>9.3f} {n / seconds:>11,.0f} {mb:>7,.0f} {ratio}")
    print("\nnative read+decode, us per record:")
    stages = list(profiles[0][2])
    print(f"{'data':16} " + " ".join(f"{stage:>17}" for stage in stages))
    for label, n, profile in profiles:
        print(f"{label:16} " + " ".join(f"{profile[stage] / n * 1e6:>17.3f}" for stage in stages))
    print("\nprotobuf read+decode, us per record:")
    print(f"{'data':16} {'read + CRC':>11} {'protobuf parse':>15} {'columns, tensors':>17}")
    for label, n, read_s, parse_s, rest_s in python_split:
        print(f"{label:16} {read_s / n * 1e6:>11.2f} {parse_s / n * 1e6:>15.2f} {rest_s / n * 1e6:>17.2f}")
    print("\nnative decode_framed (batches in memory, CRC checked) in threads:")
    for label, threads, rate in scaling:
        print(f"{label:16} {threads} thread(s) {rate:>12,.0f} records/s")


if __name__ == "__main__":
    main()
