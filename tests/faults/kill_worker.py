"""Kills a DataLoader worker mid-epoch and reports what the training loop sees (tests/test_faults.py).

    python kill_worker.py SHARD

Prints one JSON line: the error's type and message and the seconds from the kill to the error.
Run in its own process: PyTorch's SIGCHLD handler raises wherever the main process happens to be.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import torch
from torch.utils.data import DataLoader

import torch_tfrecord as tt


def main() -> None:
    dataset = tt.TFRecordDataset(sys.argv[1], spec={"id": tt.FixedLen((), torch.int64)}, batch_size=4)
    loader = DataLoader(dataset, batch_size=None, num_workers=2, timeout=60)
    iterator = iter(loader)
    next(iterator)
    victim = iterator._workers[0].pid  # type: ignore[attr-defined]
    started = time.monotonic()
    batches = 0
    outcome: dict[str, object] = {"error": None}
    try:
        try:
            os.kill(victim, signal.SIGKILL)
            for _ in iterator:
                batches += 1
                time.sleep(0.01)
        except Exception as error:
            outcome = {"error": type(error).__name__, "message": str(error)}
            # PyTorch's SIGCHLD handler raises again for every worker that ends from here on.
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    except Exception:  # raised again by that handler while the first error was being handled
        pass
    outcome.update(victim=victim, seconds=time.monotonic() - started, batches_after_kill=batches)
    print(json.dumps(outcome), flush=True)
    # No loader teardown, as in a script killed by the error: the other worker sees its parent gone
    # (torch_tfrecord/_workers.py); the test kills this process group anyway.
    os._exit(0)


if __name__ == "__main__":
    main()
