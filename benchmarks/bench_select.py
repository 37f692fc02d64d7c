"""Selections: what reading a selection costs beside the whole dataset, and what a selection's scan
costs beside counting the records.

1. Records/s of a dataset reading a 50% selection against the same dataset unfiltered, same run:
   bench_decode.py's datasets (8 shards x 20,000 Examples of ~81 B and ~4 KB, from the page
   cache), ``TFRecordDataset(batch_size=256, prefetch=0)`` iterated in this process (DataLoader
   workers add the same hand-off to both, and their start-up's noise), in file order and with the
   global shuffle. Two selections of half the records: a random half (``subset=0.5``: every
   other record or so) and the first half of every shard (runs). Beside the whole dataset's
   epoch, an epoch of it as long as the selection's (``samples_per_epoch=80_000``): an epoch's
   fixed costs weigh the same on both, so the ratio to it is the stream's own. Each round
   times every pipeline back to back over one epoch (the datasets made once, outside the
   timing); one warm-up round, then ``--repeats`` rounds, the best of them (on a shared machine,
   the round least disturbed by other work). CPU microseconds per record beside them
   (other work disturbs it less than wall time).
2. ``tt.select(where="label == 3")`` over 10^6 small records (8 shards: label, id, 4 floats)
   against ``torch-tfrecord count`` over the same files, in this process (the command's own
   function; the command lines' start-up is the same for both and left out): without indexes
   (``count`` walks every record's header: it reads the records) and with them (``count`` reads
   only the indexes). The best of ``--repeats`` rounds, after a warm-up.
3. Filters with ``or``, ``in``, ``not`` and parentheses: ``tt.select`` over part 2's files (with
   their indexes) beside ``where="label == 3"`` in the same round, and the parse of filters of
   ``MAX_QUERY`` characters beside filters of a quarter of that (one pass: the ratio should be
   about 4, whatever the shape; a hostile nesting is refused at depth 32).

    python benchmarks/bench_select.py [--dir DIR] [--repeats 15] [--only read|scan|filters]
        [--scan-records 1000000]
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_decode import SPECS, example_features, make_dataset

import torch_tfrecord as tt
from torch_tfrecord.codec.query import MAX_QUERY, QueryError, parse_query

BATCH = 256
SCAN_RECORDS = 1_000_000
SCAN_SHARDS = 8


def _first_halves(paths: list[str]) -> list[range]:
    files = tt.TFRecordDataset(paths).files
    return [range(int(start), int(start + count // 2)) for start, count in zip(files.starts, files.counts)]


def read_table(directory: str, repeats: int) -> None:
    print("1. A 50% selection read beside the whole dataset (batch_size=256, in this process)")
    print("   records/s of the selection, of the whole dataset and of an epoch of it as long as the")
    print("   selection's (samples_per_epoch), the ratios; CPU microseconds per record of the selection")
    print("   and of that epoch")
    header = f"{'data':6} {'shuffle':7} {'selection':12} {'records/s':>10} {'whole':>10} {'ratio':>6}"
    print(f"{header} {'as long':>10} {'ratio':>6} {'cpu us':>7} {'as long':>7}")
    for name in ("small", "large"):
        paths = make_dataset(directory, name)
        halves = _first_halves(paths)
        for shuffle in (False, "global"):
            options = {"spec": SPECS[name], "batch_size": BATCH, "shuffle": shuffle, "prefetch": 0}
            made = {
                "whole": tt.TFRecordDataset(paths, **options),
                "as long": tt.TFRecordDataset(paths, samples_per_epoch=80_000, **options),
                "random half": tt.TFRecordDataset(paths, subset=0.5, **options),
                "first halves": tt.TFRecordDataset(paths, subset=halves, **options),
            }
            times: dict[str, list[tuple[float, float, int]]] = {key: [] for key in made}
            for round_ in range(repeats + 1):
                for key, dataset in made.items():
                    dataset.set_epoch(round_)
                    wall, cpu = time.perf_counter(), time.process_time()
                    records = sum(len(batch["label"]) for batch in dataset)
                    if round_:  # the first round warms up
                        times[key].append((time.perf_counter() - wall, time.process_time() - cpu, records))
            whole, same = _rates(times["whole"]), _rates(times["as long"])
            for key in ("random half", "first halves"):
                rate, cpu = _rates(times[key])
                row = f"{name:6} {shuffle!s:7} {key:12} {rate:>10,.0f} {whole[0]:>10,.0f}"
                compared = f"{rate / whole[0]:>6.3f} {same[0]:>10,.0f} {rate / same[0]:>6.3f}"
                print(f"{row} {compared} {cpu:>7.3f} {same[1]:>7.3f}")


def _rates(runs: list[tuple[float, float, int]]) -> tuple[float, float]:
    """The best records/s and CPU microseconds per record of the rounds: on a machine shared with
    other work, the round least disturbed by it is the closest to the pipeline's own cost."""
    return (
        max(records / wall for wall, _, records in runs),
        min(1e6 * cpu / records for _, cpu, records in runs),
    )


def _scan_data(directory: str) -> list[str]:
    folder = os.path.join(directory, f"scan-{SCAN_RECORDS}")
    paths = sorted(glob.glob(os.path.join(folder, "scan-*.tfrecord")))
    if len(paths) == SCAN_SHARDS:
        return paths
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(0)
    with tt.ShardedExampleWriter(
        os.path.join(folder, "scan"), max_records=SCAN_RECORDS // SCAN_SHARDS
    ) as writer:
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
    return min(seconds), result


def scan_table(directory: str, repeats: int) -> None:
    paths = _scan_data(directory)
    size = sum(os.path.getsize(path) for path in paths)
    print(f"\n2. tt.select(where='label == 3') beside torch-tfrecord count: {SCAN_RECORDS:,} records, "
          f"{size / 1e6:.0f} MB in {SCAN_SHARDS} shards (seconds, best of {repeats})")  # fmt: skip
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


FILTERS = (
    "label == 3",
    "label == 3 or label == 7",
    "label in [3, 7, 11, 13]",
    "not label < 500",
    "(label < 10 or score > 0.99) and not id < 1000",
)


def _shapes(size: int) -> dict[str, str]:
    """Filters of about ``size`` characters, by shape."""
    clauses = " or ".join(f"label == {i % 1000}" for i in range(size // 17 + 1))
    listed = "label in [" + ", ".join(str(i % 1000) for i in range(size // 5 + 1))
    return {
        "clauses joined by or": clauses[: clauses.rfind(" or ", 0, size)],
        "a list of values (in)": listed[: listed.rfind(", ", 0, size - 1)] + "]",
        "words": ("dog " * size)[: size - 1],
        "a quoted text": "text ~ '" + "x" * (size - 10) + "'",
        "not not ... (refused)": "not " * (size // 4),
        "((((... (refused)": "(" * size,
    }


def _parse_seconds(text: str, repeats: int) -> float:
    """The best of ``repeats`` rounds of 50 parses, per parse."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(200):
            try:
                parse_query(text)
            except QueryError:
                pass
        best = min(best, (time.perf_counter() - start) / 200)
    return best


def filter_table(directory: str, repeats: int) -> None:
    paths = _scan_data(directory)
    print(f"\n3. Filters: tt.select over {SCAN_RECORDS:,} records in {SCAN_SHARDS} shards with their "
          f"indexes, beside label == 3 in the same round (seconds, best of {repeats})")  # fmt: skip
    print(f"{'filter':48} {'select':>8} {'/ label == 3':>13} {'kept':>9} {'records/s':>11}")
    times: dict[str, list[float]] = {where: [] for where in FILTERS}
    kept: dict[str, int] = {}
    for round_ in range(repeats + 1):
        for where in FILTERS:
            start = time.perf_counter()
            kept[where] = len(tt.select(paths, where=where))
            if round_:  # the first round warms up
                times[where].append(time.perf_counter() - start)
    base = min(times[FILTERS[0]])
    for where in FILTERS:
        best = min(times[where])
        print(f"{where:48} {best:>8.3f} {best / base:>13.2f} {kept[where]:>9,} {SCAN_RECORDS / best:>11,.0f}")
    print(f"\n   parsing a filter of {MAX_QUERY:,} characters beside one of {MAX_QUERY // 4:,} "
          f"(microseconds a parse, best of {repeats} rounds of 200)")  # fmt: skip
    print(f"{'shape':24} {MAX_QUERY // 4:>8,} {MAX_QUERY:>8,} {'ratio':>6}")
    quarter, whole = _shapes(MAX_QUERY // 4), _shapes(MAX_QUERY)
    for shape, text in whole.items():
        assert len(text) <= MAX_QUERY, (shape, len(text))
        small, large = _parse_seconds(quarter[shape], repeats), _parse_seconds(text, repeats)
        print(f"{shape:24} {1e6 * small:>8.1f} {1e6 * large:>8.1f} {large / small:>6.2f}")


def main() -> None:
    global SCAN_RECORDS
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dir", help="where the data is written (and kept); default: a temporary folder")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--only", choices=("read", "scan", "filters"))
    parser.add_argument("--scan-records", type=int, default=SCAN_RECORDS, help="records of parts 2 and 3")
    args = parser.parse_args()
    SCAN_RECORDS = args.scan_records
    directory = args.dir or tempfile.mkdtemp(prefix="bench-select-")
    os.makedirs(directory, exist_ok=True)
    try:
        with open("/proc/loadavg") as handle:
            print(f"load average at the start: {handle.read().split()[:3]}")
    except OSError:
        pass
    if args.only in (None, "read"):
        read_table(directory, args.repeats)
    if args.only in (None, "scan"):
        scan_table(directory, args.repeats)
    if args.only in (None, "filters"):
        filter_table(directory, args.repeats)
    if not args.dir:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
