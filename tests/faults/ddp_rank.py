"""One rank of the kill-and-resume run of tests/test_faults.py (2 ranks x 2 DataLoader workers, gloo).

    python ddp_rank.py SHARDS OUT_DIR   # with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set

Trains through one epoch in lockstep with the other rank (an all_reduce per step), appending
each batch's record ids to OUT_DIR/rank-R.log as it goes and saving the dataset's place every
3 batches to OUT_DIR/rank-R-step-N.ckpt (atomically). Started again after a kill, the ranks
resume from the last step that both saved: a kill can fall between one rank's save and the
other's, and ranks resumed from different steps would take different numbers of steps (the
one that finishes first leaves the other waiting in all_reduce). The test kills it mid-epoch
with SIGKILL.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

import torch_tfrecord as tt

CHECKPOINT_EVERY = 3


def main() -> None:
    shards, out = sys.argv[1], Path(sys.argv[2])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    rank = dist.get_rank()
    dataset = tt.TFRecordDataset(shards, spec={"id": tt.FixedLen((), torch.int64)}, batch_size=8, seed=3)
    saved_steps = [int(p.stem.rpartition("-")[2]) for p in out.glob(f"rank-{rank}-step-*.ckpt")]
    common = torch.tensor([max(saved_steps, default=0)])
    dist.all_reduce(common, op=dist.ReduceOp.MIN)  # every rank saved every step up to its last
    done = int(common)
    if done:
        saved = torch.load(out / f"rank-{rank}-step-{done}.ckpt", weights_only=False)
        dataset.load_state_dict(saved["dataset"])
    else:
        dataset.set_epoch(0)
    loader = DataLoader(dataset, batch_size=None, num_workers=2)
    log = (out / f"rank-{rank}.log").open("a")
    log.write(json.dumps({"resumed_from": done, "run": os.environ["RUN"]}) + "\n")
    # consumed: batches taken from this loader (after the loaded place)
    for consumed, batch in enumerate(loader, start=1):
        step = torch.tensor([float(batch["id"].sum())])
        dist.all_reduce(step)  # the ranks move together, as in training
        time.sleep(float(os.environ.get("STEP_SECONDS", "0")))  # the step's compute
        log.write(json.dumps({"ids": batch["id"].tolist(), "run": os.environ["RUN"]}) + "\n")
        log.flush()
        os.fsync(log.fileno())
        if (done + consumed) % CHECKPOINT_EVERY == 0:
            checkpoint = out / f"rank-{rank}-step-{done + consumed}.ckpt"
            temporary = checkpoint.with_suffix(".tmp")
            torch.save({"dataset": dataset.state_dict(consumed=consumed)}, temporary)
            os.replace(temporary, checkpoint)
    log.write(json.dumps({"finished": True, "run": os.environ["RUN"]}) + "\n")
    log.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
