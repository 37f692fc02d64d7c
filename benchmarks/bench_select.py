"""Selections: what reading a selection costs beside the whole dataset, and what a selection's scan
costs beside counting the records.

1. Records/s of a dataset reading a 50% selection against the same dataset unfiltered, same run:
   bench_decode.py's datasets (8 shards x 20,000 Examples of ~81 B and ~4 KB, from the page
   cache), ``TFRecordDataset(batch_size=256)`` in the main process (``num_workers=0``) and with 2
   DataLoader workers, in file order and with the global shuffle. Two selections of half the
   records: a random half (``subset=0.5``: a bitmap, every other record or so) and the first
   half of every shard (runs). Each round times every pipeline back to back over one epoch (the
   dataset made once, outside the timing); one warm-up round, then ``--repeats`` rounds, medians;
   the ratio is selected records/s over unfiltered records/s. CPU seconds of the main process
   per 1,000 records beside it (a machine loaded by others disturbs it less than wall time).
2. ``tt.select(where="label == 3")`` over 10^6 small records (8 shards: label, id, 4 floats)
   against ``torch-tfrecord count`` over the same files, in this process (the command's own
   function; the command lines' start-up is the same for both and left out): without indexes
   (``count`` walks every record's header: it reads the records) and with them (``count`` reads
   only the indexes). Medians of ``--repeats``, after a warm-up.

    python benchmarks/bench_select.py [--dir DIR] [--repeats 3] [--only read|scan]
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from torch.utils.data import DataLoader

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_decode import SPECS, example_features, make_dataset

import torch_tfrecord as tt

BATCH = 256
SCAN_RECORDS = 1_000_000
SCAN_SHARDS = 8


def _epoch(dataset: tt.TFRecordDataset, workers: int) -> int:
    loader = DataLoader(dataset, batch_size=None, num_workers=workers)
    return sum(len(batch["label"]) for batch in loader)


def _first_halves(paths: list[str]) -> list[range]:
    files = tt.TFRecordDataset(paths).files
    return [range(int(start), int(start + count // 2)) for start, count in zip(files.starts, files.counts)]


def read_table(directory: str, repeats: int) -> None:
    print("1. A 50% selection read beside the whole dataset (batch_size=256)")
    print("   records/s of each, their ratio; CPU seconds of the main process per 1,000 records of each")
    header = f"{'data':7} {'shuffle':8} {'workers':>7} {'selection':13} {'records/s':>11} {'whole':>11}"
    print(f"{header} {'ratio':>6} {'cpu/1k':>7} {'whole':>7}")
    for name in ("small", "large"):
        paths = make_dataset(directory, name)
        halves = _first_halves(paths)
        for shuffle in (False, "global"):
            for workers in (0, 2):
                made = {
                    "whole": tt.TFRecordDataset(paths, spec=SPECS[name], batch_size=BATCH, shuffle=shuffle),
                    "random half": tt.TFRecordDataset(
                        paths, spec=SPECS[name], batch_size=BATCH, shuffle=shuffle, subset=0.5
                    ),
                    "first halves": tt.TFRecordDataset(
                        paths, spec=SPECS[name], batch_size=BATCH, shuffle=shuffle, subset=halves
                    ),
                }
                times: dict[str, list[tuple[float, float, int]]] = {key: [] for key in made}
                for round_ in range(repeats + 1):
                    for key, dataset in made.items():
                        dataset.set_epoch(round_)
                        wall, cpu = time.perf_counter(), time.process_time()
                        records = _epoch(dataset, workers)
                        if round_:  # the first round warms up
                            times[key].append(
                                (time.perf_counter() - wall, time.process_time() - cpu, records)
                            )
                whole = _rates(times["whole"])
                for key in ("random half", "first halves"):
                    rate, cpu = _rates(times[key])
                    row = f"{name:7} {shuffle!s:8} {workers:>7} {key:13} {rate:>11,.0f} {whole[0]:>11,.0f}"
                    print(f"{row} {rate / whole[0]:>6.3f} {cpu:>7.4f} {whole[1]:>7.4f}")


def _rates(runs: list[tuple[float, float, int]]) -> tuple[float, float]:
    """Median records/s and CPU seconds per 1,000 records."""
    return (
        statistics.median(records / wall for wall, _, records in runs),
        statistics.median(1000 * cpu / records for _, cpu, records in runs),
    )


def _scan_data(directory: str) -> list[str]:
    folder = os.path.join(directory, "scan")
    paths = sorted(glob.glob(os.path.join(folder, "scan-*.tfrecord")))
    if len(paths) == SCAN_SHARDS:
        return paths
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(0)
    with tt.ShardedWriter(os.path.join(folder, "scan"), max_records=SCAN_RECORDS // SCAN_SHARDS) as writer:
        for i in range(SCAN_RECORDS):
            writer.write(example_features("small", i, rng))
    return writer.shard_paths


def _count(paths: list[str]) -> int:
    """What ``torch-tfrecord count`` does for each file."""
    return sum(tt.count_records(path) for path in paths)


def _timed(function: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    function()  # warm-up: the page cache, the imports
    seconds, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = function()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), result


def scan_table(directory: str, repeats: int) -> None:
    paths = _scan_data(directory)
    size = sum(os.path.getsize(path) for path in paths)
    print(f"\n2. tt.select(where='label == 3') beside torch-tfrecord count: {SCAN_RECORDS:,} records, "
          f"{size / 1e6:.0f} MB in {SCAN_SHARDS} shards (seconds, median of {repeats})")  # fmt: skip
    bare = os.path.join(directory, "scan-bare")
    os.makedirs(bare, exist_ok=True)
    for path in paths:  # the same shards without their indexes or manifest
        target = os.path.join(bare, os.path.basename(path))
        if not os.path.exists(target):
            os.link(path, target)
    bare_paths = sorted(glob.glob(os.path.join(bare, "*.tfrecord")))
    print(
        f"{'files':22} {'count':>8} {'select':>8} {'select/count':>13} {'kept':>9} {'records/s (select)':>19}"
    )
    for label, chosen in (("without indexes", bare_paths), ("with their indexes", paths)):
        counted, total = _timed(lambda chosen=chosen: _count(chosen), repeats)
        selected, selection = _timed(lambda chosen=chosen: tt.select(chosen, where="label == 3"), repeats)
        assert total == SCAN_RECORDS == selection.num_records
        print(f"{label:22} {counted:>8.3f} {selected:>8.3f} {selected / counted:>13.2f} {len(selection):>9,} "
              f"{SCAN_RECORDS / selected:>19,.0f}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dir", help="where the data is written (and kept); default: a temporary folder")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", choices=("read", "scan"))
    args = parser.parse_args()
    directory = args.dir or tempfile.mkdtemp(prefix="bench-select-")
    os.makedirs(directory, exist_ok=True)
    try:
        with open("/proc/loadavg") as handle:
            print(f"load average at the start: {handle.read().split()[:3]}")
    except OSError:
        pass
    if args.only != "scan":
        read_table(directory, args.repeats)
    if args.only != "read":
        scan_table(directory, args.repeats)
    if not args.dir:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
