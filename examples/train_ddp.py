"""Train a small classifier with DistributedDataParallel on TFRecord shards.

Run on CPU (gloo) or GPUs (nccl, one process per GPU):

    torchrun --standalone --nproc_per_node=2 examples/train_ddp.py --data /path/to/shards --epochs 3

Run without a launcher (``python examples/train_ddp.py --data ...``), it trains in one process.
It works from any directory (a relative ``--data`` is relative to where you run it).

With ``--data`` naming an empty or missing directory, the script first writes a small synthetic
dataset there (uneven shards on purpose), so it runs anywhere. Each Example holds a float
vector ``features`` and an int ``label``. Every rank reads the same number of batches per epoch,
whatever the shard sizes, so DDP never waits on a rank that ran out of data; ``--resume`` shows
restoring the loader mid-epoch from a checkpoint.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader

import torch_tfrecord as tt

FEATURES = 16
CLASSES = 4


def write_synthetic(folder: Path, sizes: tuple[int, ...] = (700, 5, 1300, 37)) -> None:
    """Uneven shards of a linearly separable problem, with their indexes."""
    generator = torch.Generator().manual_seed(0)
    weights = torch.randn(FEATURES, CLASSES, generator=generator)
    folder.mkdir(parents=True, exist_ok=True)
    for shard, size in enumerate(sizes):
        x = torch.randn(size, FEATURES, generator=generator)
        y = (x @ weights).argmax(1)
        with tt.ExampleWriter(folder / f"train-{shard:05d}-of-{len(sizes):05d}.tfrecord") as writer:
            for features, label in zip(x.tolist(), y.tolist(), strict=True):
                writer.write({"features": features, "label": label})


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--data", type=Path, required=True, help="directory of .tfrecord shards (written there when empty)"
    )
    parser.add_argument("--epochs", type=int, default=2, help="train until this epoch (default: 2)")
    parser.add_argument("--batch-size", type=int, default=64, help="per rank (default: 64)")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers per rank (default: 2)")
    parser.add_argument("--checkpoint", type=Path, help="save model + data position here each epoch")
    parser.add_argument("--resume", action="store_true", help="start from the checkpoint in --checkpoint")
    args = parser.parse_args()
    if args.resume and args.checkpoint is None:
        parser.error("--resume needs --checkpoint DIR, the directory the checkpoint was saved in")

    cuda = torch.cuda.is_available()
    backend = "nccl" if cuda else "gloo"
    if "RANK" in os.environ:  # torchrun (or another launcher) says who is who
        dist.init_process_group(backend)
    else:
        print(
            "no launcher: training in one process (for several: "
            f"torchrun --standalone --nproc_per_node=2 {sys.argv[0]} --data ...)",
            flush=True,
        )
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    rank, world_size = dist.get_rank(), dist.get_world_size()
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)

    if rank == 0 and not any(args.data.glob("*.tfrecord")):
        write_synthetic(args.data)
    dist.barrier()  # the data exists before any rank opens it

    spec = {"features": tt.FixedLen((FEATURES,), torch.float32), "label": tt.FixedLen((), torch.int64)}
    dataset = tt.TFRecordDataset(args.data, spec=spec, batch_size=args.batch_size, seed=0, drop_last=True)
    loader = DataLoader(
        dataset,
        batch_size=None,
        num_workers=args.workers,
        persistent_workers=args.workers > 0,
        pin_memory=cuda,
    )
    torch.manual_seed(0)  # the same initial weights on every rank
    model = DistributedDataParallel(
        nn.Linear(FEATURES, CLASSES).to(device), device_ids=[device] if cuda else None
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)

    first_epoch = 0
    if args.resume:
        path = args.checkpoint / f"rank{rank}.pt"
        if not path.exists():
            raise SystemExit(f"--resume: no checkpoint of rank {rank} at {str(path)!r}")
        checkpoint = torch.load(path, map_location=device)
        model.module.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        dataset.load_state_dict(checkpoint["data"])
        first_epoch = dataset.epoch

    for epoch in range(first_epoch, args.epochs):
        dataset.set_epoch(epoch)  # keeps a loaded mid-epoch position for this epoch only
        steps, correct, seen = 0, 0, 0
        for batch in loader:
            features = batch["features"].to(device, non_blocking=True)
            labels = batch["label"].to(device, non_blocking=True)
            logits = model(features)
            loss = nn.functional.cross_entropy(logits, labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            steps += 1
            correct += int((logits.argmax(1) == labels).sum())
            seen += len(labels)
        totals = torch.tensor([steps, correct, seen], dtype=torch.int64, device=device)
        dist.all_reduce(totals)
        if rank == 0 and int(totals[0]):
            print(
                f"epoch {epoch}: {len(dataset)} batches per rank x {world_size} ranks, "
                f"train accuracy {int(totals[1]) / max(1, int(totals[2])):.3f}",
                flush=True,
            )
        if args.checkpoint is not None:
            args.checkpoint.mkdir(parents=True, exist_ok=True)
            state = {"model": model.module.state_dict(), "optimizer": optimizer.state_dict()}
            # The loader's workers read the data, so the main process says how far it got
            # (here: the whole epoch; a mid-epoch checkpoint passes the steps taken so far).
            data_state = dataset.state_dict(consumed=steps)
            torch.save({**state, "data": data_state}, args.checkpoint / f"rank{rank}.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
