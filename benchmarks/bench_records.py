"""Record-layer throughput: reading with CRC checks, index building, index files.

Generates 8 shards x 20,000 records of ~4 KB and 8 x 20,000 of ~50 bytes (random payload
sizes around those means), then times each operation several times and prints medians.
Peers, measured in the same run on the same files: the `tfrecord` package's reader (when
installed; it checks no CRC) and TensorFlow's tf.data.TFRecordDataset (with --tf-python, a
Python that has TensorFlow, run as a separate process; it checks CRCs).

    python benchmarks/bench_records.py [--dir DIR] [--repeats 5] [--tf-python /tmp/tfvenv/bin/python]
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import tempfile
import time
from collections.abc import Callable

import numpy as np
from _tensorflow import run_script

import torch_tfrecord as tt
from torch_tfrecord.records.index import decode_index, encode_index, index_from_sizes

SHARDS = 8
RECORDS_PER_SHARD = 20_000


def make_dataset(directory: str, name: str, mean_size: int, seed: int, shards: int = SHARDS) -> list[str]:
    """``shards`` files of 20,000 records each, of random sizes around ``mean_size`` (made once)."""
    pattern = os.path.join(directory, f"{name}-*.tfrecord")
    existing = sorted(glob.glob(pattern))
    if len(existing) == shards:
        return existing
    rng = np.random.default_rng(seed)
    blob = rng.bytes(mean_size * 4)
    with tt.ShardedExampleWriter(os.path.join(directory, name), max_records=RECORDS_PER_SHARD) as writer:
        sizes = rng.integers(mean_size // 2, mean_size * 3 // 2, shards * RECORDS_PER_SHARD)
        starts = rng.integers(0, mean_size * 2, len(sizes))
        for start, size in zip(starts.tolist(), sizes.tolist()):
            writer.write(blob[start : start + size])
    return writer.shard_paths


def timed(function: Callable[[], tuple[int, int]], repeats: int) -> tuple[float, int, int]:
    seconds = []
    records = payload = 0
    for _ in range(repeats):
        start = time.perf_counter()
        records, payload = function()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), records, payload


def read_all(paths: list[str], verify_crc: bool) -> tuple[int, int]:
    records = payload = 0
    for path in paths:
        for data in tt.read_records(path, verify_crc=verify_crc):
            records += 1
            payload += len(data)
    return records, payload


def read_all_tfrecord_package(paths: list[str]) -> tuple[int, int]:
    from tfrecord.reader import tfrecord_iterator

    records = payload = 0
    for path in paths:
        for data in tfrecord_iterator(path):
            records += 1
            payload += len(bytes(data))  # it yields views of a reused buffer: copy, as users must
    return records, payload


_TF_SCRIPT = """
import statistics, sys, time
import tensorflow as tf
paths, repeats = sys.argv[1:-1], int(sys.argv[-1])
times = []
for _ in range(repeats):
    start = time.perf_counter()
    n = 0
    for batch in tf.data.TFRecordDataset(paths).batch(256):
        n += int(batch.shape[0])
    times.append(time.perf_counter() - start)
print(n, statistics.median(times))
"""


def read_all_tensorflow(tf_python: str, paths: list[str], repeats: int) -> tuple[float, int]:
    records, seconds = run_script(tf_python, _TF_SCRIPT, *paths, str(repeats))
    return float(seconds), int(records)


def index_all(paths: list[str]) -> tuple[int, int]:
    records = 0
    for path in paths:
        records += len(tt.build_index(path))
    return records, sum(os.path.getsize(p) for p in paths)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", help="where to keep the generated data (default: a temp dir)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--tf-python", help="a Python with TensorFlow, to time tf.data as a peer")
    args = parser.parse_args()
    try:
        import tfrecord  # noqa: F401

        has_tfrecord_package = True
    except ImportError:
        has_tfrecord_package = False
    directory = args.dir or tempfile.mkdtemp(prefix="tt-bench-")
    os.makedirs(directory, exist_ok=True)
    datasets = {
        "4KB": make_dataset(directory, "large", 4096, 1),
        "50B": make_dataset(directory, "small", 50, 2),
    }
    rows = []
    for name, paths in datasets.items():
        file_bytes = sum(os.path.getsize(p) for p in paths)
        for label, function in [
            ("read, CRC checked", lambda paths=paths: read_all(paths, True)),
            ("read, no CRC", lambda paths=paths: read_all(paths, False)),
            ("build index (headers)", lambda paths=paths: index_all(paths)),
        ]:
            seconds, records, _ = timed(function, args.repeats)
            rows.append((name, label, records, seconds, records / seconds, file_bytes / seconds / 1e6))
        if has_tfrecord_package:
            seconds, records, _ = timed(lambda paths=paths: read_all_tfrecord_package(paths), args.repeats)
            rows.append(
                (
                    name,
                    "peer: tfrecord pkg, no CRC",
                    records,
                    seconds,
                    records / seconds,
                    file_bytes / seconds / 1e6,
                )
            )
        if args.tf_python:
            seconds, records = read_all_tensorflow(args.tf_python, paths, args.repeats)
            rows.append(
                (
                    name,
                    "peer: TensorFlow tf.data",
                    records,
                    seconds,
                    records / seconds,
                    file_bytes / seconds / 1e6,
                )
            )
    # A 10-million-record index, as for a 40 GB shard of ~4 KB records (11-digit offsets).
    table = index_from_sizes(np.random.default_rng(3).integers(2048, 6144, 10_000_000))
    seconds, lines, _ = timed(lambda: (len(table), len(encode_index(table))), 3)
    text = encode_index(table)
    rows.append(("idx", "format 10M-line index", lines, seconds, lines / seconds, len(text) / seconds / 1e6))
    seconds, lines, _ = timed(lambda: (len(decode_index(text)), 0), args.repeats)
    rows.append(("idx", "parse 10M-line index", lines, seconds, lines / seconds, len(text) / seconds / 1e6))
    print(f"{'data':5} {'operation':28} {'records':>10} {'median s':>9} {'records/s':>12} {'MB/s':>8}")
    for name, label, records, seconds, rate, mbps in rows:
        print(f"{name:5} {label:28} {records:>10} {seconds:>9.3f} {rate:>12,.0f} {mbps:>8,.0f}")


if __name__ == "__main__":
    main()
