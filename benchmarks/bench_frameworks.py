"""What reading through a training framework's loader costs against a plain DataLoader, same run.

One process (the frameworks' loaders with one rank; their multi-rank behaviour is tested by
tests/test_frameworks.py, not timed here). Data: 4 shards x 20,000 small Examples
{label: int64, score: float}. Every pipeline reads the same epoch of ``TFRecordDataset`` in
batches of 256, batch mode (``DataLoader(batch_size=None)``) and sample mode
(``DataLoader(batch_size=256, collate_fn=tt.collate)``), with 0 and 2 workers, and does nothing
with the batches:

- plain: the ``DataLoader`` itself;
- accelerate: ``Accelerator(cpu=True).prepare(loader)`` (its DataLoaderShard: one batch of
  look-ahead, a move to the device);
- fabric: ``Fabric(accelerator="cpu", devices=1).setup_dataloaders(loader)``;
- stateful: torchdata's ``StatefulDataLoader`` (a snapshot of each worker's place every batch).

One warm-up pass, then ``--repeats`` rounds, each timing every pipeline back to back; medians of
records/s and the ratio to the plain loader of the same configuration.

    python benchmarks/bench_frameworks.py [--dir DIR] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

import torch_tfrecord as tt

SHARDS, PER_SHARD, BATCH = 4, 20_000, 256
SPEC = {"label": tt.FixedLen((), torch.int64), "score": tt.FixedLen((), torch.float32)}
Wrap = Callable[[DataLoader[Any]], Any]


def write_data(folder: Path) -> None:
    for shard in range(SHARDS):
        path = folder / f"bench-{shard}.tfrecord"
        if path.exists():
            continue
        with tt.ExampleWriter(path) as writer:
            for i in range(PER_SHARD):
                writer.write({"label": i, "score": i / 7})


def wrappers() -> dict[str, Callable[[str, int, str], Any]]:
    """Each pipeline as (mode, workers, folder) -> an iterable of batches."""
    from accelerate import Accelerator
    from lightning import Fabric
    from torchdata.stateful_dataloader import StatefulDataLoader

    accelerator = Accelerator(cpu=True)
    fabric = Fabric(accelerator="cpu", devices=1)

    def loader(mode: str, workers: int, folder: str, cls: type = DataLoader) -> Any:
        dataset = tt.TFRecordDataset(
            f"{folder}/bench-*.tfrecord", spec=SPEC, batch_size=BATCH if mode == "batch" else None
        )
        if mode == "batch":
            return cls(dataset, batch_size=None, num_workers=workers)
        return cls(dataset, batch_size=BATCH, num_workers=workers, collate_fn=tt.collate)

    return {
        "plain": loader,
        "accelerate": lambda *a: accelerator.prepare(loader(*a)),
        "fabric": lambda *a: fabric.setup_dataloaders(loader(*a)),
        "stateful": lambda *a: loader(*a, cls=StatefulDataLoader),
    }


def one_pass(make: Callable[[str, int, str], Any], mode: str, workers: int, folder: str) -> float:
    """Records per second of one epoch, the loader's construction and worker start included."""
    start = time.perf_counter()
    records = 0
    for batch in make(mode, workers, folder):
        records += len(batch["label"])
    return records / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", default=None, help="where the data is written (default: a temporary one)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    folder = args.dir or tempfile.mkdtemp(prefix="bench-frameworks-")
    Path(folder).mkdir(parents=True, exist_ok=True)
    write_data(Path(folder))
    pipelines = wrappers()
    configs = [(mode, workers) for mode in ("batch", "sample") for workers in (0, 2)]
    rates: dict[tuple[str, str, int], list[float]] = {}
    for round_ in range(args.repeats + 1):  # round 0 warms up
        for mode, workers in configs:
            for name, make in pipelines.items():
                rate = one_pass(make, mode, workers, folder)
                if round_:
                    rates.setdefault((name, mode, workers), []).append(rate)
    print(f"{SHARDS * PER_SHARD:,} records, batches of {BATCH}, median of {args.repeats} rounds")
    print("| mode | workers | loader | records/s | against plain |")
    print("|---|---|---|---|---|")
    for mode, workers in configs:
        plain = statistics.median(rates[("plain", mode, workers)])
        for name in pipelines:
            rate = statistics.median(rates[(name, mode, workers)])
            print(f"| {mode} | {workers} | {name} | {rate:,.0f} | {rate / plain:.2f}x |")


if __name__ == "__main__":
    main()
