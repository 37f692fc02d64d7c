"""Train a small classifier with Ray Train (TorchTrainer, 2 CPU workers) on TFRecord shards.

The shards are read by torch-tfrecord's Ray datasource (``tt.ray.read_tfrecords``: read tasks
planned from the indexes, records decoded natively into Arrow blocks, no TensorFlow); Ray Train
splits the dataset between the workers, and each worker iterates its share with
``iter_torch_batches``.

    python examples/train_ray.py --data /tmp/ray-shards --epochs 3

With ``--data`` naming an empty or missing directory, a small synthetic dataset is written
there first (through ``tt.ray.write_tfrecords``), so the script runs anywhere. It starts a local
Ray cluster of 2 CPUs (``--address`` joins an existing one instead).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import ray
import ray.train
import torch
from ray.train import ScalingConfig
from ray.train.torch import TorchTrainer
from torch import nn

import torch_tfrecord as tt

FEATURES = 16
CLASSES = 4
SPEC = {"features": tt.FixedLen((FEATURES,), torch.float32), "label": tt.FixedLen((), torch.int64)}


def write_synthetic(folder: Path, records: int = 4000) -> None:
    """A linearly separable problem, written as 4 indexed shards by the Ray datasink."""
    rng = np.random.default_rng(0)
    weights = rng.standard_normal((FEATURES, CLASSES)).astype(np.float32)
    x = rng.standard_normal((records, FEATURES)).astype(np.float32)
    y = (x @ weights).argmax(1)
    dataset = ray.data.from_items([{"features": f, "label": int(label)} for f, label in zip(x, y)])
    tt.ray.write_tfrecords(dataset, folder / "train", num_shards=4)


def train_loop(config: dict[str, int]) -> None:
    """Runs on each Ray Train worker: its share of the dataset, every epoch."""
    model = ray.train.torch.prepare_model(nn.Linear(FEATURES, CLASSES))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    shard = ray.train.get_dataset_shard("train")
    for epoch in range(config["epochs"]):
        total, correct, loss_sum = 0, 0, 0.0
        for batch in shard.iter_torch_batches(batch_size=config["batch_size"]):
            logits = model(batch["features"])
            loss = nn.functional.cross_entropy(logits, batch["label"])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += len(batch["label"])
            correct += int((logits.argmax(1) == batch["label"]).sum())
            loss_sum += loss.item() * len(batch["label"])
        metrics = {"epoch": epoch, "records": total, "loss": loss_sum / total, "accuracy": correct / total}
        if ray.train.get_context().get_world_rank() == 0:
            print(f"worker 0: {metrics}", flush=True)
        ray.train.report(metrics)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, required=True, help="directory of shards (written when empty)")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=128, help="per worker (default: 128)")
    parser.add_argument("--address", help="an existing Ray cluster (default: start a local one)")
    args = parser.parse_args()

    if args.address:
        ray.init(address=args.address)
    else:
        ray.init(num_cpus=2, include_dashboard=False)
    data = args.data.resolve()
    if not any(data.glob("*.tfrecord")):
        write_synthetic(data)
    dataset = tt.ray.read_tfrecords(str(data / "*.tfrecord"), spec=SPEC)
    with tempfile.TemporaryDirectory() as storage:
        trainer = TorchTrainer(
            train_loop,
            train_loop_config={"epochs": args.epochs, "batch_size": args.batch_size},
            # Half a CPU per worker: the read tasks of Ray Data get the rest of the 2.
            scaling_config=ScalingConfig(num_workers=2, use_gpu=False, resources_per_worker={"CPU": 0.5}),
            run_config=ray.train.RunConfig(storage_path=storage),
            datasets={"train": dataset},
        )
        result = trainer.fit()
    if result.error is not None:
        raise result.error


if __name__ == "__main__":
    main()
