"""Dies (os._exit) while one of its two DataLoader workers is still starting or busy (tests/test_faults.py).

    python orphan_workers.py SHARD DIR iterable|indexed starting|busy fork|forkserver|spawn

Each worker writes its pid to ``DIR/worker-<id>.pid`` as it starts. Worker 1 is then held up:
``starting``: in a slow ``worker_init_fn``, so it begins after this process is gone; ``busy``:
in a transform that runs for minutes. This process takes one batch (from worker 0), waits
until worker 1 is held up, prints ``exiting`` and ends without tearing the loader down, as a
training script killed by an error would. The test then checks that no worker outlives it.
The last argument is the workers' start method (``multiprocessing_context``).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, get_worker_info

import torch_tfrecord as tt

DIRECTORY = Path(sys.argv[2])
HELD_UP = DIRECTORY / "held-up"


def start_worker(worker_id: int) -> None:
    (DIRECTORY / f"worker-{worker_id}.pid").write_text(str(os.getpid()))
    if worker_id == 1 and sys.argv[4] == "starting":
        HELD_UP.touch()
        time.sleep(2)


def transform(item: Any) -> Any:
    info = get_worker_info()
    if info is not None and info.id == 1 and sys.argv[4] == "busy":
        HELD_UP.touch()
        time.sleep(300)
    return item


def main() -> None:
    shard, kind, context = sys.argv[1], sys.argv[3], sys.argv[5]
    spec = {"id": tt.FixedLen((), torch.int64)}
    loader: DataLoader[Any]
    if kind == "iterable":
        dataset = tt.TFRecordDataset(shard, spec=spec, batch_size=4, transform=transform)
        loader = DataLoader(
            dataset,
            batch_size=None,
            num_workers=2,
            worker_init_fn=start_worker,
            multiprocessing_context=context,
        )
    else:
        indexed = tt.IndexedTFRecordDataset(shard, spec=spec, transform=transform)
        loader = DataLoader(
            indexed, batch_size=4, num_workers=2, worker_init_fn=start_worker, multiprocessing_context=context
        )
    iterator = iter(loader)
    next(iterator)
    while not HELD_UP.exists():
        time.sleep(0.01)
    print("exiting", flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
