"""The public random access against TFRecordDataset, one thread, the same shuffled ids (issue 55).

Data: bench_dataset.py's data sets against TensorFlow (4 shards x 20,000 Examples of ~35 bytes
{label, score} and of ~4 KB {data: 4,096 bytes, label, floats: 16}), from the page cache. The ids:
one epoch of ``TFRecordDataset(shuffle="global", batch_size=256)`` (its ``_record_id`` batches),
read again by every other pipeline batch by batch, in the same order. Rows:

- ``TFRecordDataset`` itself, iterated in the main process with ``prefetch=0`` (one thread): the
  bar; and with its default ``prefetch=2`` (a thread loads ahead of the loop), for comparison;
- ``tt.read_records(path, entries=index[ids])`` per shard of each batch (payloads, not decoded),
  through the stream read (what it was: ``TORCH_TFRECORD_DECODER=python``'s path) and the batch
  read (now), and the batch read followed by ``tt.decode_batch`` (decoded columns); and one call
  per shard for the whole epoch's rows of it (many entries: the per-call costs spread out);
- ``IndexedTFRecordDataset.__getitems__`` + ``tt.collate`` (a DataLoader's map-style path);
- ``IndexedTFRecordDataset.read_batch`` (the batch API);
- the recipes of docs/guides/random-access.md over ``read_batch``: torchdata.nodes
  (``ParallelMapper``, one worker thread) and SPDL (``concurrency=1``, one worker thread), where
  installed (each has the loop's thread besides, as the dataset with prefetch has).

Each round times every row once, in turn (the order turning round by round); one warm-up round,
then ``--repeats`` rounds; records/s are medians, each row's ratio the median of its rounds' ratios
to TFRecordDataset. The load average is printed at the start and the end.

    python benchmarks/bench_random_access.py [--dir DIR] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator

import numpy as np
import numpy.typing as npt

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_dataset import VS_TF_SPECS, make_vs_tf_data

import torch_tfrecord as tt
from torch_tfrecord.records.entries import read_entries

BATCH = 256


class Data:
    """One data set: its shards, their index tables and one shuffled epoch of id batches."""

    def __init__(self, paths: list[str], name: str) -> None:
        self.paths = paths
        self.spec = VS_TF_SPECS[name]
        self.tables = [np.asarray(tt.load_index(tt.default_index_path(path))) for path in paths]
        self.starts = np.cumsum([0, *(len(table) for table in self.tables)])
        dataset = tt.TFRecordDataset(
            paths, spec=self.spec, batch_size=BATCH, shuffle="global", drop_last=False
        )
        self.batches = [batch["_record_id"].numpy() for batch in dataset]
        self.indexed = tt.IndexedTFRecordDataset(paths, spec=self.spec)

    def per_shard(self, ids: npt.NDArray[np.int64]) -> Iterator[tuple[str, npt.NDArray[np.int64]]]:
        """``(path, index rows)`` of each shard a batch reads, in the batch's order within it."""
        shards = np.searchsorted(self.starts, ids, side="right") - 1
        for shard in np.unique(shards).tolist():
            local = ids[shards == shard] - self.starts[shard]
            yield self.paths[shard], self.tables[shard][local]


def the_dataset(data: Data, prefetch: int = 0) -> int:
    dataset = tt.TFRecordDataset(
        data.paths, spec=data.spec, batch_size=BATCH, shuffle="global", drop_last=False, prefetch=prefetch
    )
    return sum(len(batch["label"]) for batch in dataset)


def the_dataset_prefetching(data: Data) -> int:
    return the_dataset(data, prefetch=2)


def read_records_stream(data: Data) -> int:
    n = 0
    for ids in data.batches:
        for path, rows in data.per_shard(ids):
            n += len(list(read_entries(path, rows, None, True, None, None)))
    return n


def read_records_batch(data: Data) -> int:
    n = 0
    for ids in data.batches:
        for path, rows in data.per_shard(ids):
            n += len(list(tt.read_records(path, entries=rows)))
    return n


def read_records_whole_shards(data: Data) -> int:
    """One call per shard: all of its rows of the epoch, in the epoch's order."""
    ids = np.concatenate(data.batches)
    return sum(len(list(tt.read_records(path, entries=rows))) for path, rows in data.per_shard(ids))


def read_records_decoded(data: Data) -> int:
    n = 0
    for ids in data.batches:
        for path, rows in data.per_shard(ids):
            n += len(tt.decode_batch(list(tt.read_records(path, entries=rows)), data.spec)["label"])
    return n


def getitems_collate(data: Data) -> int:
    return sum(len(tt.collate(data.indexed.__getitems__(ids.tolist()))["label"]) for ids in data.batches)


def read_batch(data: Data) -> int:
    return sum(len(data.indexed.read_batch(ids)["label"]) for ids in data.batches)


def torchdata_nodes(data: Data) -> int:
    import torchdata.nodes as nodes

    node = nodes.ParallelMapper(
        nodes.IterableWrapper(data.batches), map_fn=data.indexed.read_batch, num_workers=1, method="thread"
    )
    return sum(len(batch["label"]) for batch in nodes.Loader(node))


def spdl(data: Data) -> int:
    from spdl.pipeline import PipelineBuilder

    pipeline = (
        PipelineBuilder()
        .add_source(data.batches)
        .pipe(data.indexed.read_batch, concurrency=1, output_order="input")
        .add_sink(buffer_size=2)
        .build(num_threads=1)
    )
    with pipeline.auto_stop():
        return sum(len(batch["label"]) for batch in pipeline)


def _installed(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


ROWS: dict[str, Callable[[Data], int]] = {
    "TFRecordDataset(shuffle='global', prefetch=0): the bar": the_dataset,
    "TFRecordDataset(shuffle='global'), prefetch=2 (a loading thread)": the_dataset_prefetching,
    "read_records(entries=), stream read (before)": read_records_stream,
    "read_records(entries=), batch read (now)": read_records_batch,
    "read_records(entries=) + decode_batch": read_records_decoded,
    "read_records(entries=), batch read, a call per shard (20,000 rows)": read_records_whole_shards,
    "IndexedTFRecordDataset.__getitems__ + collate": getitems_collate,
    "IndexedTFRecordDataset.read_batch": read_batch,
}
if _installed("torchdata.nodes"):
    ROWS["torchdata.nodes ParallelMapper(read_batch), 1 thread"] = torchdata_nodes
if _installed("spdl.pipeline"):
    ROWS["SPDL pipe(read_batch), 1 thread"] = spdl


def run(data: Data, repeats: int) -> dict[str, tuple[float, float]]:
    """``{row: (records/s, ratio to the dataset)}``: medians over the rounds after a warm-up."""
    names = list(ROWS)
    rates: dict[str, list[float]] = {name: [] for name in names}
    ratios: dict[str, list[float]] = {name: [] for name in names}
    total = sum(len(ids) for ids in data.batches)
    for round_ in range(repeats + 1):
        turn = round_ % len(names)
        seconds: dict[str, float] = {}
        for name in names[turn:] + names[:turn]:
            start = time.perf_counter()
            n = ROWS[name](data)
            seconds[name] = time.perf_counter() - start
            if n != total:
                raise RuntimeError(f"{name} read {n} records, not {total}")
        if round_ == 0:
            continue  # warm-up: the page cache, the files' mappings, imports
        bar = seconds[names[0]]
        for name in names:
            rates[name].append(total / seconds[name])
            ratios[name].append(bar / seconds[name])
    return {name: (statistics.median(rates[name]), statistics.median(ratios[name])) for name in names}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=None, help="where the data sets are (made once)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    directory = args.dir or os.path.join(tempfile.gettempdir(), "torch-tfrecord-bench")
    os.makedirs(directory, exist_ok=True)
    loads = [" ".join(f"{v:.2f}" for v in os.getloadavg())]
    results = {name: run(Data(make_vs_tf_data(directory, name), name), args.repeats) for name in VS_TF_SPECS}
    loads.append(" ".join(f"{v:.2f}" for v in os.getloadavg()))
    print(f"one thread, shuffled ids, batches of {BATCH}; medians of {args.repeats} rounds after a warm-up")
    print(f"load average (1, 5, 15 min) at the start: {loads[0]}; at the end: {loads[1]}\n")
    names = list(ROWS)
    width = max(len(name) for name in names)
    header = f"| {'pipeline':<{width}} |" + "".join(f" {name} records/s | vs dataset |" for name in results)
    print(header)
    print("|" + "-" * (width + 2) + "|" + "--------------:|-----------:|" * len(results))
    for name in names:
        cells = "".join(
            f" {results[data][name][0]:>14,.0f} | {results[data][name][1]:>9.2f}x |" for data in results
        )
        print(f"| {name:<{width}} |{cells}")


if __name__ == "__main__":
    main()
