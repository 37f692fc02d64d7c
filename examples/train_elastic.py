"""DDP training that survives nodes coming and going: torchrun elastic, multi-node, exact resumes.

Every ``--checkpoint-every`` steps all ranks gather the dataset's place into one global state
(``state_dict(consumed=..., gather=True)``), and rank 0 saves it with the model. When the job
restarts (a node lost or added: torchrun restarts every process), the script loads the last
checkpoint, whatever the new number of ranks: the rest of the epoch is split over the ranks it
now has, each record read once, every rank the same number of batches.

Two nodes (here both on one machine; on real nodes use the first node's address)::

    torchrun --nnodes=2 --node_rank=0 --nproc_per_node=2 --master_addr=127.0.0.1 --master_port=29500 \\
        examples/train_elastic.py --data /tmp/elastic-data --checkpoint /tmp/elastic-ckpt
    torchrun --nnodes=2 --node_rank=1 --nproc_per_node=2 --master_addr=127.0.0.1 --master_port=29500 \\
        examples/train_elastic.py --data /tmp/elastic-data --checkpoint /tmp/elastic-ckpt

Elastic (one or two nodes, restarted up to 3 times; the same command on every node)::

    torchrun --nnodes=1:2 --nproc_per_node=2 --max-restarts=3 --rdzv-backend=c10d \\
        --rdzv-endpoint=127.0.0.1:29400 --rdzv-id=job1 examples/train_elastic.py --data ... --checkpoint ...

``--id-log DIR`` writes, per rank and attempt, each step's record ids (JSON lines), which shows
that every record is read once across nodes and restarts. With ``--data`` naming an empty or
missing directory, a small dataset with uneven shards is written there first.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader

import torch_tfrecord as tt

FEATURES = 8


def write_synthetic(folder: Path, sizes: tuple[int, ...] = (400, 3, 650, 71)) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    generator = torch.Generator().manual_seed(0)
    record_id = 0
    for shard, size in enumerate(sizes):
        with tt.ExampleWriter(folder / f"train-{shard:05d}.tfrecord") as writer:
            for _ in range(size):
                x = torch.randn(FEATURES, generator=generator)
                writer.write({"features": x.tolist(), "target": float(x.sum()), "id": record_id})
                record_id += 1


def save(path: Path, checkpoint: dict[str, Any]) -> None:
    """Atomically: a kill mid-save leaves the previous checkpoint."""
    temporary = path.with_suffix(".tmp")
    torch.save(checkpoint, temporary)
    os.replace(temporary, path)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, required=True, help="directory of shards (written when empty)")
    parser.add_argument("--checkpoint", type=Path, required=True, help="directory of the checkpoint")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=8, help="per rank (default: 8)")
    parser.add_argument("--workers", type=int, default=1, help="DataLoader workers per rank (default: 1)")
    parser.add_argument("--checkpoint-every", type=int, default=5, help="steps (default: 5)")
    parser.add_argument("--step-seconds", type=float, default=0.0, help="extra time per step (slow compute)")
    parser.add_argument(
        "--collective-timeout", type=float, default=300.0,
        help="seconds a rank waits for the others (default: 300); a restart that cannot form fails then",
    )  # fmt: skip
    parser.add_argument("--id-log", type=Path, help="directory for each rank's record ids per step")
    args = parser.parse_args()

    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))
    timeout = datetime.timedelta(seconds=args.collective_timeout)
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])  # global: all nodes
    # torchrun keeps one store across restarts; the keys of each attempt's process group under a
    # prefix of their own, so that a restarted rank never reads the address of a rank that died.
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world_size,
        is_master=rank == 0 and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True", timeout=timeout,
    )  # fmt: skip
    # nccl on GPUs; gloo keeps the example on any machine.
    dist.init_process_group(
        "gloo", store=dist.PrefixStore(f"attempt{attempt}", store), rank=rank, world_size=world_size,
        timeout=timeout,
    )  # fmt: skip
    if rank == 0 and not any(args.data.glob("*.tfrecord")):
        write_synthetic(args.data)
    args.checkpoint.mkdir(parents=True, exist_ok=True)
    dist.barrier()

    spec = {
        "features": tt.FixedLen((FEATURES,), torch.float32),
        "target": tt.FixedLen((), torch.float32),
        "id": tt.FixedLen((), torch.int64),
    }
    # The rank and world size come from the process group: the global rank (RANK), not LOCAL_RANK.
    dataset = tt.TFRecordDataset(args.data, spec=spec, batch_size=args.batch_size, seed=0, drop_last=False)
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Linear(FEATURES, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    path = args.checkpoint / "checkpoint.pt"
    resumed_from = None
    if path.exists():
        checkpoint = torch.load(path, weights_only=False)
        model.module.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        dataset.load_state_dict(checkpoint["data"])  # saved by any number of ranks
        resumed_from = checkpoint["at"]
    log = None
    if args.id_log is not None:
        args.id_log.mkdir(parents=True, exist_ok=True)
        log = (args.id_log / f"attempt{attempt}-rank{rank}.jsonl").open("a")
        header = {
            "world_size": world_size,
            "node": os.environ.get("GROUP_RANK"),
            "resumed_from": resumed_from,
        }
        log.write(json.dumps({**header, "local_rank": os.environ.get("LOCAL_RANK")}) + "\n")
        log.flush()

    for epoch in range(dataset.epoch, args.epochs):
        dataset.set_epoch(epoch)  # keeps a loaded place in this epoch
        steps = 0
        for batch in DataLoader(dataset, batch_size=None, num_workers=args.workers):
            prediction = model(batch["features"]).squeeze(1)
            loss = nn.functional.mse_loss(prediction, batch["target"])
            optimizer.zero_grad()
            loss.backward()  # all-reduces the gradients: the ranks move in step
            optimizer.step()
            steps += 1
            time.sleep(args.step_seconds)
            if log is not None:
                real = batch["id"][~batch["_padding"]].tolist()
                log.write(json.dumps({"epoch": epoch, "step": steps, "ids": real}) + "\n")
                log.flush()
            if steps % args.checkpoint_every == 0 or steps == len(dataset):
                data = dataset.state_dict(consumed=steps, gather=True)  # every rank, together
                if rank == 0:
                    at = {"attempt": attempt, "epoch": epoch, "step": steps, "world_size": world_size}
                    state = {"model": model.module.state_dict(), "optimizer": optimizer.state_dict()}
                    save(path, {**state, "data": data, "at": at})
        # A checkpoint at the end of an epoch holds nothing left of it: a restart then goes on
        # with the next epoch.
        if rank == 0:
            print(f"epoch {epoch}: {steps} steps per rank x {world_size} ranks", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
