"""Each training framework, used as its own docs use a dataset, on 2 ranks: run by tests/test_frameworks.py.

``torchrun --nproc_per_node=2 tests/framework_runs.py FRAMEWORK DATA OUT`` runs, on each rank,
every configuration (sample and batch mode, 0 and 2 DataLoader workers) for two epochs, never
calling ``set_epoch``, and writes ``OUT/FRAMEWORK-rank<R>.json``: for each configuration the
``len`` of the loader each epoch and the (record id, padding) pairs the rank's training step saw.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

import torch_tfrecord as tt

BATCH = 10
EPOCHS = 2
SPEC = {"id": tt.FixedLen((), torch.int64)}
CONFIGS = [("sample", 0), ("sample", 2), ("batch", 0), ("batch", 2)]
SHARD_SIZES = (130, 70, 110, 93)  # 403 records, uneven

warnings.filterwarnings("ignore", message=".*(worker processes in total|set_vital|does not have many workers).*")


def write_data(folder: Path) -> None:
    """The records: 4 uneven shards whose feature "id" is the record id."""
    folder.mkdir(parents=True, exist_ok=True)
    record_id = 0
    for shard, size in enumerate(SHARD_SIZES):
        with tt.ExampleWriter(folder / f"train-{shard}.tfrecord") as writer:
            for _ in range(size):
                writer.write({"id": record_id})
                record_id += 1


def make_dataset(data: str, mode: str) -> tt.TFRecordDataset:
    return tt.TFRecordDataset(
        f"{data}/*.tfrecord",
        spec=SPEC,
        shuffle="global",
        seed=3,
        drop_last=False,
        batch_size=BATCH if mode == "batch" else None,
    )


def make_loader(dataset: tt.TFRecordDataset, mode: str, workers: int, cls: type = DataLoader) -> Any:
    if mode == "batch":
        return cls(dataset, batch_size=None, num_workers=workers)
    return cls(dataset, batch_size=BATCH, num_workers=workers, collate_fn=tt.collate)


def pairs(batch: dict[str, Any]) -> list[list[int]]:
    ids, padding = batch["_record_id"].tolist(), batch["_padding"].tolist()
    return [[int(i), int(p)] for i, p in zip(ids, padding, strict=True)]


def loss_of(model: torch.nn.Module, batch: dict[str, Any]) -> torch.Tensor:
    return model(batch["id"].float()[:, None] / 1000).pow(2).mean()


def loop(loader: Any, step: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """Two epochs of a loop that never calls set_epoch; the loader's len and the pairs per epoch."""
    lens, epochs, steps = [], [], []
    for _ in range(EPOCHS):
        lens.append(len(loader))
        seen: list[list[int]] = []
        count = 0
        for batch in loader:
            seen += pairs(batch)
            step(batch)
            count += 1
        epochs.append(seen)
        steps.append(count)
    return {"len": lens, "epochs": epochs, "steps": steps}


def sgd_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, backward: Callable[..., Any]) -> Any:
    def step(batch: dict[str, Any]) -> None:
        optimizer.zero_grad()
        backward(loss_of(model, batch))
        optimizer.step()

    return step


def run_plain(data: str) -> dict[str, Any]:
    """A torchrun loop with DDP: a plain DataLoader and torchdata's StatefulDataLoader."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    torch.distributed.init_process_group("gloo")
    results = {}
    for name, cls in (("plain", DataLoader), ("stateful", StatefulDataLoader)):
        for mode, workers in CONFIGS:
            model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(1, 1))
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            loader = make_loader(make_dataset(data, mode), mode, workers, cls)
            results[f"{name}-{mode}-{workers}"] = loop(loader, sgd_step(model, optimizer, torch.Tensor.backward))
    torch.distributed.destroy_process_group()
    return results


def run_accelerate(data: str) -> dict[str, Any]:
    """``accelerator.prepare(model, optimizer, loader)``: with Accelerate's default loader (its
    DataLoaderDispatcher), and with ``dispatch_batches=False`` (its IterableDatasetShard)."""
    from accelerate import Accelerator, DataLoaderConfiguration

    results: dict[str, Any] = {}
    for dispatch in (None, False):
        accelerator = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(dispatch_batches=dispatch))
        for mode, workers in CONFIGS:
            model, optimizer = torch.nn.Linear(1, 1), None
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            name = f"{'dispatch' if dispatch is None else 'shard'}-{mode}-{workers}"
            prepared = accelerator.prepare(model, optimizer, make_loader(make_dataset(data, mode), mode, workers))
            try:
                results[name] = loop(prepared[2], sgd_step(prepared[0], prepared[1], accelerator.backward))
            except ValueError as error:  # what the dataset refuses to be cut by
                results[name] = {"error": str(error)}
    return results


def run_trainer(data: str) -> dict[str, Any]:
    """``transformers.Trainer(train_dataset=dataset, data_collator=tt.collate)`` (sample mode)."""
    from transformers import Trainer, TrainerCallback, TrainingArguments

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(1, 1)
            self.epochs: list[list[list[int]]] = []

        def forward(self, **batch: Any) -> dict[str, torch.Tensor]:
            if self.training:
                self.epochs[-1] += pairs(batch)
            return {"loss": loss_of(self.linear, batch)}

    class Epochs(TrainerCallback):  # type: ignore[misc]
        def __init__(self, model: Model, lens: list[int]) -> None:
            self.model, self.lens = model, lens

        def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.model.epochs.append([])
            self.lens.append(len(kwargs["train_dataloader"]))

    results = {}
    for workers in (0, 2):
        model, lens = Model(), []
        args = TrainingArguments(
            output_dir=tempfile.mkdtemp(),
            per_device_train_batch_size=BATCH,
            num_train_epochs=EPOCHS,
            dataloader_num_workers=workers,
            use_cpu=True,
            ddp_backend="gloo",
            report_to=[],
            save_strategy="no",
            logging_strategy="no",
            remove_unused_columns=False,
            disable_tqdm=True,
        )
        trainer = Trainer(
            model=model,
            args=args,
            train_dataset=make_dataset(data, "sample"),
            data_collator=tt.collate,
            callbacks=[Epochs(model, lens)],
        )
        trainer.train()
        results[f"trainer-sample-{workers}"] = {"len": lens, "epochs": model.epochs}
    return results


def run_lightning(data: str) -> dict[str, Any]:
    """``lightning.Trainer(accelerator="cpu", devices=2, strategy="ddp")``, the loader from
    ``train_dataloader()``."""
    import lightning as L

    class Module(L.LightningModule):  # type: ignore[misc]
        def __init__(self, mode: str, workers: int) -> None:
            super().__init__()
            self.mode, self.workers = mode, workers
            self.linear = torch.nn.Linear(1, 1)
            self.lens: list[int] = []
            self.epochs: list[list[list[int]]] = []

        def train_dataloader(self) -> Any:
            return make_loader(make_dataset(data, self.mode), self.mode, self.workers)

        def on_train_epoch_start(self) -> None:
            self.lens.append(int(self.trainer.num_training_batches))
            self.epochs.append([])

        def training_step(self, batch: dict[str, Any], index: int) -> torch.Tensor:
            self.epochs[-1] += pairs(batch)
            return loss_of(self.linear, batch)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    results = {}
    for mode, workers in CONFIGS:
        module = Module(mode, workers)
        trainer = L.Trainer(
            accelerator="cpu", devices=2, strategy="ddp", max_epochs=EPOCHS, logger=False,
            enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        )  # fmt: skip
        trainer.fit(module)
        results[f"lightning-{mode}-{workers}"] = {"len": module.lens, "epochs": module.epochs}
    return results


def run_fabric(data: str) -> dict[str, Any]:
    """``fabric.setup_dataloaders(loader)`` with ``Fabric(accelerator="cpu", devices=2, strategy="ddp")``."""
    import lightning as L

    fabric = L.Fabric(accelerator="cpu", devices=2, strategy="ddp")
    fabric.launch()
    results = {}
    for mode, workers in CONFIGS:
        model = torch.nn.Linear(1, 1)
        model, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
        loader = fabric.setup_dataloaders(make_loader(make_dataset(data, mode), mode, workers))
        results[f"fabric-{mode}-{workers}"] = loop(loader, sgd_step(model, optimizer, fabric.backward))
    return results


RUNS = {
    "plain": run_plain,
    "accelerate": run_accelerate,
    "trainer": run_trainer,
    "lightning": run_lightning,
    "fabric": run_fabric,
}


def main(argv: Iterable[str]) -> None:
    framework, data, out = list(argv)
    results = RUNS[framework](data)
    rank = int(os.environ["RANK"])
    Path(out, f"{framework}-rank{rank}.json").write_text(json.dumps(results))


if __name__ == "__main__":
    main(sys.argv[1:])
