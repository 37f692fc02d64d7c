"""A billion records: memory and time to the first batch of an epoch, per shuffle mode.

The dataset is 1,000 shards of 1,000,000 records each: one real shard file (an Example with an
"id" per record, 29 MB) that the 1,000 shard paths link to, and one index table that all 1,000
entries of the ``index=`` mapping share (16 MB, never written as text). So every layer runs at
full scale (the plan orders 10^9 record ids, the partition splits them over 8 ranks and the
workers, reads go through 1,000 paths and their index tables) in little memory and disk.

    python benchmarks/bench_scale.py [--shards 1000] [--records-per-shard 1000000] [--json]

Prints, per shuffle mode (and for a 70/30 ``tt.mix`` of the two halves of the shards, the
whole 10^9 records mixed): construction time (which includes checking all 10^9 index entries
against the files), time to the first batch in the main process and with 2 DataLoader workers,
and peak RSS (VmHWM) of the main process and of each worker, against the RSS of the interpreter
with torch imported, measured first.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader

import torch_tfrecord as tt


def _status(pid: int | str = "self") -> dict[str, int]:
    """VmRSS and VmHWM (peak) of a process, in MB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0]) // 1024
    return fields


def _make(directory: Path, shards: int, per_shard: int) -> dict[str, np.ndarray]:
    real = directory / "real.tfrecord"
    with tt.RecordWriter(real, write_index=False) as writer:
        for i in range(per_shard):
            writer.write(tt.encode_example({"id": i}))
    table = tt.build_index(real)
    for shard in range(shards):
        os.symlink(real, directory / f"shard-{shard:05d}.tfrecord")
    return {str(directory / f"shard-{shard:05d}.tfrecord"): table for shard in range(shards)}


def _dataset(directory: Path, index: dict[str, np.ndarray], shuffle: Any, mixed: bool) -> Any:
    """The 10^9 records as one dataset, or (``mixed``) as a 70/30 mix of two halves of the shards."""
    spec = {"id": tt.FixedLen((), torch.int64)}
    options = {"batch_size": 256, "world_size": 8, "rank": 3}
    if not mixed:
        return tt.TFRecordDataset(
            str(directory / "shard-*.tfrecord"), spec=spec, index=index, shuffle=shuffle, seed=1, **options
        )
    paths = sorted(index)
    half = len(paths) // 2
    sources = {
        name: tt.TFRecordDataset(part, spec=spec, index=index, shuffle=shuffle, seed=seed)
        for seed, (name, part) in enumerate((("web", paths[:half]), ("books", paths[half:])))
    }
    return tt.mix(sources, {"web": 0.7, "books": 0.3}, **options)


def measure(
    directory: Path, index: dict[str, np.ndarray], shuffle: Any, workers: int, mixed: bool = False
) -> dict[str, Any]:
    started = time.perf_counter()
    dataset = _dataset(directory, index, shuffle, mixed)
    built = time.perf_counter() - started
    started = time.perf_counter()
    loader = DataLoader(dataset, batch_size=None, num_workers=workers)
    iterator = iter(loader)
    first = next(iterator)
    to_first = time.perf_counter() - started
    gaps = []
    for _ in range(20):
        started = time.perf_counter()
        next(iterator)
        gaps.append(time.perf_counter() - started)
    worker_peaks = [_status(w.pid)["VmHWM"] for w in getattr(iterator, "_workers", [])]
    records = sum(source.num_records for source in dataset.sources) if mixed else dataset.num_records
    rows = first["_source"].shape if mixed else first["id"].shape
    assert rows == (256,) and records == len(index) * len(next(iter(index.values())))
    del iterator
    return {
        "shuffle": ("mix of 2, " if mixed else "") + str(shuffle),
        "workers": workers,
        "records": records,
        "construct_s": built,
        "first_batch_s": to_first,
        "next_batch_ms_median": 1000 * statistics.median(gaps),
        "main_peak_mb": _status()["VmHWM"],
        "worker_peak_mb": max(worker_peaks, default=None),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=1000)
    parser.add_argument("--records-per-shard", type=int, default=1_000_000)
    parser.add_argument("--json", action="store_true", help="one JSON object per line instead of a table")
    args = parser.parse_args()
    baseline = _status()["VmRSS"]
    with tempfile.TemporaryDirectory() as name:
        directory = Path(name)
        index = _make(directory, args.shards, args.records_per_shard)
        after_data = _status()["VmRSS"]
        rows = [
            measure(directory, index, shuffle, workers)
            for shuffle in ("global", "shards", False)
            for workers in (0, 2)
        ]
        rows += [measure(directory, index, "global", workers, mixed=True) for workers in (0, 2)]
    if args.json:
        print(json.dumps({"baseline_mb": baseline, "with_index_table_mb": after_data, "rows": rows}))
        return
    print(f"interpreter with torch: {baseline} MB RSS; after making the shard and its table: {after_data} MB")
    print(
        f"{'shuffle':18} {'workers':>7} {'records':>13} {'construct s':>11} {'1st batch s':>11} "
        f"{'next ms':>8} {'main peak MB':>12} {'worker peak MB':>14}"
    )
    for row in rows:
        print(
            f"{row['shuffle']:18} {row['workers']:>7} {row['records']:>13,} {row['construct_s']:>11.2f} "
            f"{row['first_batch_s']:>11.3f} {row['next_batch_ms_median']:>8.2f} {row['main_peak_mb']:>12} "
            f"{row['worker_peak_mb'] or '-':>14}"
        )


if __name__ == "__main__":
    main()
