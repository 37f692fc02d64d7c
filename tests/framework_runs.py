"""Each training framework, used as its own docs use a dataset, on 2 ranks: run by tests/test_frameworks.py.

``torchrun --nproc_per_node=2 tests/framework_runs.py FRAMEWORK DATA OUT [KIND]`` runs, on each
rank, every configuration (sample and batch mode, 0 and 2 DataLoader workers) for two epochs, never
calling ``set_epoch``, and writes ``OUT/FRAMEWORK-rank<R>.json``: for each configuration the
``len`` of the loader each epoch and the (item, padding) pairs the rank's training step saw. KIND
is ``dataset`` (a TFRecordDataset; an item is a record id), ``mix`` (two TFRecordDatasets of the
same records mixed 55/45 by ``tt.mix``; an item is ``source * MIX_ITEM + record id``) or ``pack``
(the records' token sequences packed into rows of PACK_LENGTH by ``tt.pack``, concatenated and cut
so that sequences span rows and ranks; an item is a token, ``record id * 100 + its place``) or
``select`` (a TFRecordDataset of the records a selection file keeps, ``select=``; an item is a
record id).
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
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
MIX_WEIGHTS = {"a": 550, "b": 450}
MIX_ITEM = 1_000_000  # a mix's item: source * MIX_ITEM + record id
PACK_LENGTH = 16  # tokens per packed row; record r has 1 + r % 9 tokens, r * 100 + j
# What make_dataset makes: "dataset", "mix", "pack", "select", "threads" (the dataset with
# threads=2: its loading threads in the main process, which workers ignore) or "process" (those
# threads in one loading process: process=True, which workers ignore too) (main's last argument).
KIND = {"kind": "dataset"}
# How Lightning's DataLoader workers start. CPython before 3.11.8 can deadlock a forked child at its
# start when another thread of the parent holds the interpreter's thread-state lock at the fork
# (gh-112275, fixed in 3.11.8 and 3.12), as a native thread making or dropping its Python thread
# state does. Lightning's DDP runs fork an epoch's workers while one does (a torch thread: in the
# stuck child, a thread state of the parent's without a Python frame): 6 hangs in ~310 runs of
# `lightning` here on 3.11.7, the stuck worker in os.fork() (gdb: PyOS_AfterFork_Child ->
# _PyThreadState_DeleteExcept -> PyThread_acquire_lock); the other frameworks' runs never hung. So
# there, workers start from a fork server (a process that forks nothing but workers); elsewhere, and
# on a fixed CPython, by fork as usual.
LIGHTNING_WORKERS = "forkserver" if sys.version_info < (3, 11, 8) else None
DUMP_SIGNAL = signal.SIGUSR1  # dumps every thread's stack of a rank or worker (see main)
SELECTED = [record for record in range(sum(SHARD_SIZES)) if record % 3]  # the selection file's records

warnings.filterwarnings(
    "ignore", message=".*(worker processes in total|set_vital|does not have many workers).*"
)


def write_data(folder: Path) -> None:
    """The records: 4 uneven shards whose feature "id" is the record id, and "tokens" its tokens."""
    folder.mkdir(parents=True, exist_ok=True)
    record_id = 0
    for shard, size in enumerate(SHARD_SIZES):
        with tt.ExampleWriter(folder / f"train-{shard}.tfrecord") as writer:
            for _ in range(size):
                writer.write({"id": record_id, "tokens": record_tokens(record_id)})
                record_id += 1
    files = tt.TFRecordDataset(f"{folder}/*.tfrecord").files
    tt.Selection.from_ids(files, SELECTED).write(folder / "selected.ttsel")


def record_tokens(record_id: int) -> list[int]:
    return [record_id * 100 + j for j in range(1 + record_id % 9)]


def make_dataset(data: str, mode: str) -> tt.TFRecordDataset | tt.MixedDataset | tt.PackedDataset:
    batch_size = BATCH if mode == "batch" else None
    if KIND["kind"] == "mix":
        return make_mix(data, batch_size)
    if KIND["kind"] == "pack":
        return make_pack(data, batch_size)
    select = f"{data}/selected.ttsel" if KIND["kind"] == "select" else None
    return tt.TFRecordDataset(
        f"{data}/*.tfrecord", spec=SPEC, shuffle="global", seed=3, drop_last=False, batch_size=batch_size,
        select=select, threads=2 if KIND["kind"] in ("threads", "process") else 0,
        process=KIND["kind"] == "process",
    )  # fmt: skip


def make_mix(data: str, batch_size: int | None = None, **world: Any) -> tt.MixedDataset:
    """Two datasets of the same records (their own seeds), mixed 55/45 into epochs of as many places."""
    sources = {
        name: tt.TFRecordDataset(f"{data}/*.tfrecord", spec=SPEC, shuffle="global", seed=seed, **world)
        for name, seed in (("a", 3), ("b", 5))
    }
    places = sum(SHARD_SIZES)
    return tt.mix(
        sources, MIX_WEIGHTS, samples_per_epoch=places, drop_last=False, batch_size=batch_size, **world
    )


def make_pack(data: str, batch_size: int | None = None, **world: Any) -> tt.PackedDataset:
    """The records' tokens concatenated and cut into rows of PACK_LENGTH (the same number of rows
    every epoch: a framework that reads len() once sees each epoch's)."""
    source = tt.TFRecordDataset(
        f"{data}/*.tfrecord", spec={"tokens": "int"}, shuffle="global", seed=3, **world
    )
    return tt.pack(source, PACK_LENGTH, ["tokens"], "concat", batch_size=batch_size)


def make_loader(
    dataset: tt.TFRecordDataset, mode: str, workers: int, cls: type = DataLoader, context: str | None = None
) -> Any:
    """The loader of a configuration; ``context``: its workers' start method (None: the default, fork)."""
    options: dict[str, Any] = {"num_workers": workers}
    if workers and context is not None:
        options["multiprocessing_context"] = context
    if mode == "batch":
        return cls(dataset, batch_size=None, **options)
    return cls(dataset, batch_size=BATCH, collate_fn=tt.collate, **options)


def pairs(batch: dict[str, Any]) -> list[list[int]]:
    """(item, padding) of each row; a mix's batch mode holds one sub-batch per source; a packed row
    holds tokens (its padding rows none)."""
    if "tokens_segment_ids" in batch:
        real = batch["tokens_segment_ids"] > 0
        padding = batch["_padding"].reshape(-1, 1).expand_as(real)
        return [
            [int(t), int(p)]
            for t, p in zip(batch["tokens"][real].tolist(), padding[real].tolist(), strict=True)
        ]
    if "_source" in batch and "_record_id" not in batch:  # a mix's batch: rows in place order
        parts = {s: iter(pairs(batch[name])) for s, name in enumerate(MIX_WEIGHTS) if name in batch}
        return [[s * MIX_ITEM + i, p] for s in batch["_source"].tolist() for i, p in [next(parts[s])]]
    ids, padding = batch["_record_id"].tolist(), batch["_padding"].tolist()
    sources = batch["_source"].tolist() if "_source" in batch else [0] * len(ids)
    return [[int(s) * MIX_ITEM + int(i), int(p)] for s, i, p in zip(sources, ids, padding, strict=True)]


def loss_of(model: torch.nn.Module, batch: dict[str, Any]) -> torch.Tensor:
    if "tokens" in batch:  # packed rows
        return model(batch["tokens"].float().mean(dim=1, keepdim=True) / 1e5).pow(2).mean()
    if "id" not in batch:  # a mix's batch mode
        ids = torch.cat([batch[name]["id"] for name in MIX_WEIGHTS if name in batch])
        return model(ids.float()[:, None] / 1000).pow(2).mean()
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
            results[f"{name}-{mode}-{workers}"] = loop(
                loader, sgd_step(model, optimizer, torch.Tensor.backward)
            )
    torch.distributed.destroy_process_group()
    return results


def run_accelerate(data: str) -> dict[str, Any]:
    """``accelerator.prepare(model, optimizer, loader)``: with Accelerate's default loader (its
    DataLoaderDispatcher), and with ``dispatch_batches=False`` (its IterableDatasetShard)."""
    from accelerate import Accelerator, DataLoaderConfiguration

    results: dict[str, Any] = {}
    for dispatch in (None, False):
        accelerator = Accelerator(
            cpu=True, dataloader_config=DataLoaderConfiguration(dispatch_batches=dispatch)
        )
        for mode, workers in CONFIGS:
            model, optimizer = torch.nn.Linear(1, 1), None
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            name = f"{'dispatch' if dispatch is None else 'shard'}-{mode}-{workers}"
            prepared = accelerator.prepare(
                model, optimizer, make_loader(make_dataset(data, mode), mode, workers)
            )
            try:
                results[name] = loop(prepared[2], sgd_step(prepared[0], prepared[1], accelerator.backward))
            except ValueError as error:  # what the dataset refuses to be cut by
                results[name] = {"error": str(error)}
    # The dispatcher's StatefulDataLoader would save a place the dataset does not keep there.
    config = DataLoaderConfiguration(use_stateful_dataloader=True)
    loader = Accelerator(cpu=True, dataloader_config=config).prepare(
        make_loader(make_dataset(data, "batch"), "batch", 0)
    )
    try:
        loop(loader, lambda batch: None)
        results["dispatch-stateful"] = {"error": "none"}
    except ValueError as error:
        results["dispatch-stateful"] = {"error": str(error)}
    return results


def trainer_parts() -> tuple[type, type]:
    """A model that records the batches of each epoch, and the callback that opens each epoch."""
    from transformers import TrainerCallback

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(1, 1)
            self.batches: list[list[list[list[int]]]] = []
            self.lens: list[int] = []

        def forward(self, **batch: Any) -> dict[str, torch.Tensor]:
            if self.training:
                self.batches[-1].append(pairs(batch))
            return {"loss": loss_of(self.linear, batch)}

    class Epochs(TrainerCallback):  # type: ignore[misc]
        def __init__(self, model: Model) -> None:
            self.model = model

        def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.model.batches.append([])
            self.model.lens.append(len(kwargs["train_dataloader"]))

    return Model, Epochs


def train(data: str, workers: int, resume_from: str | None = None, **arguments: Any) -> Any:
    """``Trainer(model, args, train_dataset=dataset, data_collator=tt.collate).train()``; the model."""
    from transformers import Trainer, TrainingArguments

    model_class, epochs = trainer_parts()
    model = model_class()
    args = TrainingArguments(
        per_device_train_batch_size=BATCH,
        num_train_epochs=EPOCHS,
        dataloader_num_workers=workers,
        use_cpu=True,
        ddp_backend="gloo",
        report_to=[],
        logging_strategy="no",
        remove_unused_columns=False,
        disable_tqdm=True,
        **{"output_dir": tempfile.mkdtemp(), "save_strategy": "no", **arguments},
    )
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=make_dataset(data, "sample"),
        data_collator=tt.collate,
        callbacks=[epochs(model)],
    )
    trainer.train(resume_from_checkpoint=resume_from)
    return model


def run_trainer(data: str) -> dict[str, Any]:
    """``transformers.Trainer(train_dataset=dataset, data_collator=tt.collate)`` (sample mode)."""
    results = {}
    for workers in (0, 2):
        model = train(data, workers)
        results[f"trainer-sample-{workers}"] = epochs_of(model.lens, model.batches)
    return results


def resume_trainer(data: str) -> dict[str, Any]:
    """A checkpoint STOP steps into the second epoch; ``train(resume_from_checkpoint=...)``: the
    Trainer skips the batches it had taken (the dataset loads no state of its own)."""
    output = str(Path(data).parent / "trainer-checkpoints")
    steps_per_epoch = -(-len(make_dataset(data, "sample")) // BATCH)  # the rank's samples, in batches
    step = steps_per_epoch + STOP
    first = train(data, 2, output_dir=output, save_strategy="steps", save_steps=step)
    again = train(data, 2, resume_from=f"{output}/checkpoint-{step}", output_dir=output)
    return {"trainer-sample-2": resumed_batches(first.batches[1], again.batches[-1])}


def lightning_module(data: str, mode: str, workers: int, loader_class: type = DataLoader) -> Any:
    """A LightningModule whose ``train_dataloader()`` makes the loader; it records each epoch's batches."""
    import lightning as L

    class Module(L.LightningModule):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(1, 1)
            self.lens: list[int] = []
            self.batches: list[list[list[list[int]]]] = []

        def train_dataloader(self) -> Any:
            return make_loader(make_dataset(data, mode), mode, workers, loader_class, LIGHTNING_WORKERS)

        def on_train_epoch_start(self) -> None:
            self.lens.append(int(self.trainer.num_training_batches))
            self.batches.append([])

        def training_step(self, batch: dict[str, Any], index: int) -> torch.Tensor:
            if not self.batches:  # resumed mid-epoch: Lightning does not start the epoch again
                self.batches.append([])
            self.batches[-1].append(pairs(batch))
            return loss_of(self.linear, batch)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return Module()


def lightning_trainer(**arguments: Any) -> Any:
    import lightning as L

    dump_stacks_on_signal()
    return L.Trainer(
        accelerator="cpu", devices=2, strategy="ddp", max_epochs=EPOCHS, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, **arguments,
    )  # fmt: skip


def run_lightning(data: str) -> dict[str, Any]:
    """``lightning.Trainer(accelerator="cpu", devices=2, strategy="ddp")``, the loader from
    ``train_dataloader()``."""
    results = {}
    for mode, workers in CONFIGS:
        module = lightning_module(data, mode, workers)
        lightning_trainer().fit(module)
        results[f"lightning-{mode}-{workers}"] = epochs_of(module.lens, module.batches)
    return results


def resume_lightning(data: str) -> dict[str, Any]:
    """``trainer.save_checkpoint`` STOP steps into the second epoch, ``fit(ckpt_path=...)`` in a new
    Trainer: Lightning saves rank 0's StatefulDataLoader state and loads it on every rank."""
    import lightning as L
    from torchdata.stateful_dataloader import StatefulDataLoader

    class Saver(L.Callback):  # type: ignore[misc]
        def __init__(self, path: str) -> None:
            self.path = path

        def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, index: int) -> None:
            if trainer.current_epoch == 1 and index == STOP - 1:
                trainer.save_checkpoint(self.path)

    results = {}
    for mode, workers in RESUME_CONFIGS:
        path = str(Path(data).parent / f"lightning-{mode}-{workers}.ckpt")
        first = lightning_module(data, mode, workers, StatefulDataLoader)
        lightning_trainer(callbacks=[Saver(path)]).fit(first)
        again = lightning_module(data, mode, workers, StatefulDataLoader)
        lightning_trainer().fit(again, ckpt_path=path)
        results[f"lightning-{mode}-{workers}"] = resumed_batches(first.batches[1], again.batches[-1])
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


# Resuming mid-epoch through each framework's own checkpointing: the second epoch stopped after
# STOP steps and resumed in new objects (a new dataset, loader, model and framework object).
STOP = 5
RESUME_CONFIGS = [("sample", 2), ("batch", 0)]


def resumed(full: list[list[int]], steps: list[dict[str, Any]], after: list[list[int]]) -> dict[str, Any]:
    """What the test compares: the second epoch whole, its first STOP steps, and the resumed rest."""
    return {"full": full, "before": [p for batch in steps[:STOP] for p in pairs(batch)], "after": after}


def resumed_batches(second: list[list[list[int]]], after: list[list[list[int]]]) -> dict[str, Any]:
    """:func:`resumed` of batches already turned into pairs."""
    return {
        "full": [p for batch in second for p in batch],
        "before": [p for batch in second[:STOP] for p in batch],
        "after": [p for batch in after for p in batch],
    }


def epochs_of(lens: list[int], batches: list[list[list[list[int]]]]) -> dict[str, Any]:
    """The results of a framework that recorded each epoch's ``len`` and batches (as pairs)."""
    return {
        "len": lens,
        "epochs": [[p for batch in epoch for p in batch] for epoch in batches],
        "steps": [len(epoch) for epoch in batches],
    }


def resume_stateful(data: str) -> dict[str, Any]:
    """torchdata's StatefulDataLoader: ``loader.state_dict()`` then ``load_state_dict`` in a new loader;
    rank 0's state is loaded on every rank (the ranks move in step)."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    torch.distributed.init_process_group("gloo")
    results = {}
    for mode, workers in RESUME_CONFIGS:
        loader = make_loader(make_dataset(data, mode), mode, workers, StatefulDataLoader)
        list(loader)  # epoch 0
        second, state = [], None
        for batch in loader:
            second.append(batch)
            if len(second) == STOP:
                state = loader.state_dict()
        shared = [state]
        torch.distributed.broadcast_object_list(shared, src=0)
        again = make_loader(make_dataset(data, mode), mode, workers, StatefulDataLoader)
        again.load_state_dict(shared[0])
        after = [p for batch in again for p in pairs(batch)]
        results[f"stateful-{mode}-{workers}"] = resumed([p for b in second for p in pairs(b)], second, after)
    torch.distributed.destroy_process_group()
    return results


def resume_accelerate(data: str) -> dict[str, Any]:
    """``accelerator.save_state`` mid-epoch; ``load_state`` and ``skip_first_batches`` (Accelerate's
    documented resume), the loader told its epoch with ``set_epoch``."""
    from accelerate import Accelerator

    results = {}
    folder = tempfile.mkdtemp() if int(os.environ["RANK"]) == 0 else ""
    shared = [folder]
    torch.distributed.init_process_group("gloo") if not torch.distributed.is_initialized() else None
    torch.distributed.broadcast_object_list(shared, src=0)
    for mode, workers in RESUME_CONFIGS:
        checkpoint = f"{shared[0]}/{mode}-{workers}"

        def prepared(accelerator: Any, mode: str = mode, workers: int = workers) -> Any:
            model = torch.nn.Linear(1, 1)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            return accelerator.prepare(model, optimizer, make_loader(make_dataset(data, mode), mode, workers))

        accelerator = Accelerator(cpu=True)
        model, optimizer, loader = prepared(accelerator)
        second = []
        try:
            loader.set_epoch(0)
        except ValueError as error:  # what the dataset refuses to be cut by
            results[f"accelerate-{mode}-{workers}"] = {"error": str(error)}
            continue
        for epoch in range(2):
            loader.set_epoch(epoch)
            for batch in loader:
                sgd_step(model, optimizer, accelerator.backward)(batch)
                if epoch == 1:
                    second.append(batch)
                    if len(second) == STOP:
                        accelerator.save_state(checkpoint)
        accelerator = Accelerator(cpu=True)
        model, optimizer, loader = prepared(accelerator)
        accelerator.load_state(checkpoint)
        loader.set_epoch(1)
        after = [p for batch in accelerator.skip_first_batches(loader, STOP) for p in pairs(batch)]
        results[f"accelerate-{mode}-{workers}"] = resumed(
            [p for b in second for p in pairs(b)], second, after
        )
    return results


RUNS = {
    "plain": run_plain,
    "accelerate": run_accelerate,
    "trainer": run_trainer,
    "lightning": run_lightning,
    "fabric": run_fabric,
    "stateful-resume": resume_stateful,
    "accelerate-resume": resume_accelerate,
    "trainer-resume": resume_trainer,
    "lightning-resume": resume_lightning,
}


def dump_stacks_on_signal() -> None:
    """A hung run's stacks: tests/launch.py sends DUMP_SIGNAL to every process of the tree before it
    stops them; this process then writes every thread's stack to its stderr (the handler is inherited
    by the DataLoader workers forked from it). Again before each Lightning fit: the previous fit's
    teardown set every signal back to what ``signal.getsignal`` said (SIG_DFL here), and faulthandler
    installs its handler again only once unregistered."""
    faulthandler.unregister(DUMP_SIGNAL)
    faulthandler.register(DUMP_SIGNAL, all_threads=True)


def main(argv: Iterable[str]) -> None:
    framework, data, out, *kind = list(argv)
    dump_stacks_on_signal()
    KIND["kind"] = kind[0] if kind else "dataset"
    results = RUNS[framework](data)
    rank = int(os.environ["RANK"])
    Path(out, f"{framework}-rank{rank}.json").write_text(json.dumps(results))
    # As torch's docs ask of every script: a process group left to the interpreter's exit (the
    # Trainer and Lightning leave theirs) can abort it (gloo's threads at finalization: SIGABRT,
    # "terminate called without an active exception"; pytorch/pytorch#190489).
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
