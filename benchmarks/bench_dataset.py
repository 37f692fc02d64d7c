"""DataLoader throughput of TFRecordDataset against the `tfrecord` package's DataLoader, same run.

Datasets: those of bench_decode.py (8 shards x 20,000 Examples, ~50 B and ~4 KB), read from the
page cache (one warm-up pass first). Every pipeline yields batches of 256 decoded tensors:

- ours, batch mode: TFRecordDataset(batch_size=256) + DataLoader(batch_size=None);
- ours, sample mode: TFRecordDataset() + DataLoader(batch_size=256, collate_fn=tt.collate);
- the `tfrecord` package: one tfrecord.torch.TFRecordDataset per shard (with its index, so
  workers split the records), chained, + DataLoader(batch_size=256) (its default collate).

Each with num_workers 0, 1 and 2; ours with shuffle="global", "shards" and False (to price the
global shuffle), with the native decoder, and once with the protobuf decoder for comparison.
Then peak RSS of one epoch (batch mode, 2 workers) over 160,000 and 1,600,000 records (the small
shards hard-linked 10 times), main process and workers.

    python benchmarks/bench_dataset.py [--dir DIR] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.utils.data import ChainDataset, DataLoader

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_decode import SPECS, TFRECORD_DESCRIPTIONS, make_dataset

import torch_tfrecord as tt

BATCH = 256
WORKERS = (0, 1, 2)


def count(loader: Iterable[dict[str, Any]]) -> int:
    return sum(len(batch["label"]) for batch in loader)


def ours_batches(paths: list[str], name: str, workers: int, shuffle: Any) -> int:
    ds = tt.TFRecordDataset(paths, spec=SPECS[name], batch_size=BATCH, shuffle=shuffle, drop_last=False)
    return count(DataLoader(ds, batch_size=None, num_workers=workers))


def ours_samples(paths: list[str], name: str, workers: int, shuffle: Any) -> int:
    ds = tt.TFRecordDataset(paths, spec=SPECS[name], shuffle=shuffle, drop_last=False)
    return count(DataLoader(ds, batch_size=BATCH, num_workers=workers, collate_fn=tt.collate))


def tfrecord_package(paths: list[str], name: str, workers: int) -> int:
    from tfrecord.torch.dataset import TFRecordDataset

    shards = ChainDataset(
        [TFRecordDataset(path, tt.default_index_path(path), TFRECORD_DESCRIPTIONS[name]) for path in paths]
    )
    return count(DataLoader(shards, batch_size=BATCH, num_workers=workers))


def timed(function: Callable[[], int], repeats: int) -> tuple[float, int]:
    seconds, n = [], 0
    for _ in range(repeats):
        start = time.perf_counter()
        n = function()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), n


_RSS_SCRIPT = """
import json, resource, sys, torch
from torch.utils.data import DataLoader
import torch_tfrecord as tt
torch.set_num_threads(1)
spec = {"label": tt.FixedLen((), torch.int64), "id": tt.FixedLen((), torch.int64),
        "score": tt.FixedLen((4,), torch.float32)}
ds = tt.TFRecordDataset(sys.argv[1], spec=spec, batch_size=256)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
n = sum(len(b["label"]) for b in DataLoader(ds, batch_size=None, num_workers=2))
print(json.dumps({"records": ds.num_records, "seen": n, "main_after_index_kb": before,
                  "main_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "worker_kb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))
"""


def peak_rss(directory: str, small: list[str]) -> list[dict[str, int]]:
    results = []
    for copies in (1, 10):
        folder = os.path.join(directory, f"rss-{copies}")
        os.makedirs(folder, exist_ok=True)
        for copy in range(copies):
            for path in small:
                for suffix in ("", ".idx"):
                    target = os.path.join(folder, f"c{copy:02d}-{os.path.basename(path)}{suffix}")
                    if not os.path.exists(target):
                        os.link(path + suffix, target)
        out = subprocess.run(
            [sys.executable, "-c", _RSS_SCRIPT, os.path.join(folder, "*.tfrecord")],
            capture_output=True,
            text=True,
            check=True,
        )
        results.append(json.loads(out.stdout))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    directory = args.dir or tempfile.mkdtemp(prefix="tt-bench-")
    os.makedirs(directory, exist_ok=True)
    torch.set_num_threads(1)
    rows = []
    datasets = {name: make_dataset(directory, name) for name in ("small", "large")}
    for name, paths in datasets.items():
        for path in paths:
            if not os.path.exists(tt.default_index_path(path)):
                tt.save_index(tt.build_index(path), tt.default_index_path(path))
        timed(lambda: ours_batches(paths, name, 0, False), 1)  # warm the page cache
        peer: dict[int, float] = {}
        for workers in WORKERS:
            seconds, n = timed(lambda: tfrecord_package(paths, name, workers), args.repeats)
            peer[workers] = n / seconds
            rows.append((name, "tfrecord package DataLoader", workers, n, seconds, peer[workers]))
        for label, function, shuffle, decoder in (
            ("ours batch mode, global shuffle", ours_batches, "global", "native"),
            ("ours batch mode, shards shuffle", ours_batches, "shards", "native"),
            ("ours batch mode, no shuffle", ours_batches, False, "native"),
            ("ours batch, global, protobuf decoder", ours_batches, "global", "python"),
            ("ours sample mode, global shuffle", ours_samples, "global", "native"),
        ):
            os.environ[tt.native.ENV_VAR] = decoder  # workers inherit it
            for workers in WORKERS:
                seconds, n = timed(lambda: function(paths, name, workers, shuffle), args.repeats)
                rows.append((name, label, workers, n, seconds, peer[workers]))
            del os.environ[tt.native.ENV_VAR]
    header = f"{'data':6} {'pipeline':34} {'workers':>7} {'records':>8} {'median s':>9} {'records/s':>10}"
    print(f"{header} {'x peer':>7}")
    for name, label, workers, n, seconds, peer_rate in rows:
        rate = n / seconds
        print(
            f"{name:6} {label:34} {workers:>7} {n:>8} {seconds:>9.3f} {rate:>10,.0f} {rate / peer_rate:>7.2f}"
        )
    by_key = {(name, label, workers): n / s for name, label, workers, n, s, _ in rows}
    for name in datasets:
        for workers in WORKERS:
            cost = (
                by_key[(name, "ours batch mode, no shuffle", workers)]
                / by_key[(name, "ours batch mode, global shuffle", workers)]
            )
            print(
                f"global shuffle cost, {name}, {workers} workers: {100 * (cost - 1):+.1f}% time vs no shuffle"
            )
    print(f"\n{'records':>10} {'main after index MB':>20} {'main peak MB':>13} {'worker peak MB':>15}")
    for row in peak_rss(directory, datasets["small"]):
        assert row["seen"] == row["records"]
        print(
            f"{row['records']:>10,} {row['main_after_index_kb'] / 1024:>20.0f} "
            f"{row['main_kb'] / 1024:>13.0f} {row['worker_kb'] / 1024:>15.0f}"
        )


if __name__ == "__main__":
    main()
