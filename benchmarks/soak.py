"""Soak: many epochs with persistent DataLoader workers; does any process's memory grow?

    python benchmarks/soak.py [--epochs 20] [--records 20000] [--workers 2] [--json]

Writes a small dataset (4 shards of Examples with an image-sized bytes feature, a float
vector and a label), then runs ``--epochs`` epochs over it in batch mode with global shuffle,
``persistent_workers=True`` and ``set_epoch`` before each, with a seeded transform. After each
epoch it records VmRSS of the main process and of every worker. Prints a table, and the growth
from epoch 2 to the last epoch per process.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

import torch_tfrecord as tt


def _rss_mb(pid: int | str = "self") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def _jitter(batch: dict[str, Any]) -> dict[str, Any]:
    batch["x"] = batch["x"] + torch.randn_like(batch["x"]) * 0.01  # draws from the seeded global RNG
    return batch


def run(epochs: int, records: int, workers: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as name:
        with tt.ShardedExampleWriter(Path(name) / "soak", max_records=records // 4) as writer:
            for i in range(records):
                writer.write({"label": i % 10, "x": tt.FloatList([i / records] * 16), "blob": [bytes(1024)]})
        spec = {
            "label": tt.FixedLen((), torch.int64),
            "x": tt.FixedLen((16,), torch.float32),
            "blob": "bytes",
        }
        dataset = tt.TFRecordDataset(name, spec=spec, batch_size=64, transform=_jitter, seed=5)
        loader = DataLoader(dataset, batch_size=None, num_workers=workers, persistent_workers=workers > 0)
        rows = []
        for epoch in range(epochs):
            dataset.set_epoch(epoch)
            started = time.perf_counter()
            seen = 0
            iterator = iter(loader)
            for batch in iterator:
                seen += len(batch["label"])
            pids = [w.pid for w in getattr(iterator, "_workers", [])]
            rows.append(
                {
                    "epoch": epoch,
                    "records": seen,
                    "seconds": time.perf_counter() - started,
                    "main_mb": _rss_mb(),
                    "worker_mb": [_rss_mb(pid) for pid in pids],
                }
            )
        del loader
    first, last = rows[min(1, len(rows) - 1)], rows[-1]  # epoch 2 (index 1) against the last
    growth = {"main": last["main_mb"] / first["main_mb"] - 1}
    for w, (a, b) in enumerate(zip(first["worker_mb"], last["worker_mb"], strict=True)):
        growth[f"worker{w}"] = b / a - 1
    return {"rows": rows, "growth_epoch2_to_last": growth}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--records", type=int, default=20000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = run(args.epochs, args.records, args.workers)
    if args.json:
        print(json.dumps(result))
        return
    print(f"{'epoch':>5} {'records':>8} {'seconds':>8} {'main MB':>8}  worker MB")
    for row in result["rows"]:
        workers = " ".join(f"{mb:7.1f}" for mb in row["worker_mb"])
        epoch, seconds = row["epoch"] + 1, row["seconds"]
        print(f"{epoch:>5} {row['records']:>8} {seconds:>8.2f} {row['main_mb']:>8.1f}  {workers}")
    print(
        "growth from epoch 2 to the last:",
        {k: f"{v:+.2%}" for k, v in result["growth_epoch2_to_last"].items()},
    )


if __name__ == "__main__":
    main()
