"""Inside the training frameworks: Accelerate, transformers.Trainer, Lightning's Trainer and
Fabric, torchdata's StatefulDataLoader and a plain torchrun loop, each for real on 2 CPU ranks
(gloo), started with torchrun (tests/framework_runs.py is what each rank runs).

Every configuration (sample and batch mode, 0 and 2 workers) of every framework, used as its own
docs use a dataset and never calling ``set_epoch``, must read every record exactly once per epoch
across the ranks, take exactly ``len(loader)`` steps on every rank, and use a new order in the
second epoch; and so must a mix of two datasets (``tt.mix``), each item of its epoch once (an
item: a source's record at its place in the source's stream), and the records' token sequences
packed into rows (``tt.pack``), each token once, and a selection of the records (``select=``), each
selected record once. In-process tests below check the pieces without a process group.
"""

from __future__ import annotations

import collections
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from framework_runs import (
    BATCH,
    DUMP_SIGNAL,
    MIX_ITEM,
    SELECTED,
    SHARD_SIZES,
    SPEC,
    STOP,
    make_mix,
    make_pack,
    record_tokens,
    write_data,
)
from launch import run as run_tree
from torch.utils.data import DataLoader

import torch_tfrecord as tt
from torch_tfrecord.data.frameworks import detect as frameworks

ROOT = Path(__file__).resolve().parent.parent
RECORDS = sum(SHARD_SIZES)
# A hang's limit, not a speed limit: a busy machine took 240 s once (below pytest's 600 s, whose
# thread method would end pytest before tests/launch.py stops the ranks).
TIMEOUT_S = 500
# What each framework's runs refuse (an error that names the fix) instead of losing records.
REFUSED = {
    "accelerate": {
        "shard-batch-0": "use dispatch_batches=None (the default)",
        "shard-batch-2": "use dispatch_batches=None (the default)",
        "dispatch-stateful": "resume with Accelerator.load_state and accelerator.skip_first_batches",
    }
}
# A mix's batches hold a sub-batch per source, which Accelerate's dispatcher would cut across ranks.
MIX_REFUSED = {
    "accelerate": {
        "dispatch-batch-0": "a mix in batch mode cannot be dispatched",
        "dispatch-batch-2": "a mix in batch mode cannot be dispatched",
    },
    "accelerate-resume": {"accelerate-batch-0": "a mix in batch mode cannot be dispatched"},
}


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("frameworks") / "data"
    write_data(folder)
    return folder


def launch(framework: str, data: Path, out: Path, kind: str = "dataset") -> list[dict[str, Any]]:
    """Runs tests/framework_runs.py FRAMEWORK on 2 ranks under torchrun; each rank's results."""
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
        str(ROOT / "tests" / "framework_runs.py"), framework, str(data), str(out), kind,
    ]  # fmt: skip
    path = os.pathsep.join([str(ROOT), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path, "TOKENIZERS_PARALLELISM": "false"}
    # torchrun and its ranks, all stopped; a hang's stacks in the failure
    done = run_tree(command, timeout_s=TIMEOUT_S, dump_signal=DUMP_SIGNAL, env=env, cwd=out)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return [json.loads((out / f"{framework}-rank{rank}.json").read_text()) for rank in range(2)]


def epoch_items(data: Path, kind: str, epoch: int) -> collections.Counter[int]:
    """The items an epoch must give, each as often as it must: every record once; for the mix,
    each source's next stretch of its stream (its passes through its own permutations)."""
    if kind in ("dataset", "threads", "process"):
        return collections.Counter(range(RECORDS))
    if kind == "select":
        return collections.Counter(SELECTED)
    if kind == "pack":
        return collections.Counter(token for record in range(RECORDS) for token in record_tokens(record))
    mix = make_mix(str(data), rank=0, world_size=1)
    items: collections.Counter[int] = collections.Counter()
    for number, (source, count) in enumerate(zip(mix.sources, mix.counts, strict=True)):
        ids = source.plan.stream(np.arange(epoch * count, (epoch + 1) * count))
        items.update((number * MIX_ITEM + ids).tolist())
    return items


def epoch_steps(data: Path, kind: str, epoch: int) -> int:
    """Steps each of 2 ranks takes in an epoch (a DataLoader batch or a dataset batch of BATCH)."""
    if kind == "select":
        return -(-len(SELECTED) // (2 * BATCH))
    if kind != "pack":
        return -(-RECORDS // (2 * BATCH))
    return -(-make_pack(str(data), rank=0, world_size=1).epoch_groups(epoch).groups.count // (2 * BATCH))


def check_epochs(
    name: str, ranks: list[dict[str, Any]], expected: list[collections.Counter[int]], steps_each: list[int]
) -> None:
    """Each item exactly as often as the epoch holds it, across ranks; len(loader) steps on each
    rank, the same on both; a new order in the second epoch."""
    for epoch in range(2):
        real = collections.Counter(i for rank in ranks for i, padding in rank["epochs"][epoch] if not padding)
        assert sorted(real) == sorted(expected[epoch]), f"{name} epoch {epoch}: missing records"
        assert real == expected[epoch], f"{name} epoch {epoch}: records read twice"
        steps = [rank["steps"][epoch] for rank in ranks]
        assert steps == [rank["len"][epoch] for rank in ranks], f"{name}: steps {steps} are not len(loader)"
        assert steps[0] == steps[1] == steps_each[epoch], name
    for rank in ranks:
        assert rank["epochs"][0] != rank["epochs"][1], f"{name}: the second epoch repeats the first's order"


@pytest.mark.parametrize("kind", ["dataset", "mix", "pack", "select"])
@pytest.mark.parametrize("framework", ["plain", "accelerate", "trainer", "lightning", "fabric"])
def test_every_record_once_per_epoch_inside_the_framework(
    framework: str, kind: str, data: Path, tmp_path: Path
) -> None:
    check_framework(framework, kind, data, tmp_path)


@pytest.mark.parametrize("framework", ["plain", "accelerate", "trainer", "lightning", "fabric"])
def test_every_record_once_per_epoch_with_loading_threads_inside_the_framework(
    framework: str, data: Path, tmp_path: Path
) -> None:
    """The loader axis: the dataset with threads=2 (used with num_workers=0, ignored by workers)."""
    check_framework(framework, "threads", data, tmp_path)


@pytest.mark.parametrize("framework", ["plain", "accelerate", "trainer", "lightning", "fabric"])
def test_every_record_once_per_epoch_with_a_loading_process_inside_the_framework(
    framework: str, data: Path, tmp_path: Path
) -> None:
    """The loader axis: the dataset with threads=2, process=True (num_workers=0; ignored by workers)."""
    check_framework(framework, "process", data, tmp_path)


def check_framework(framework: str, kind: str, data: Path, tmp_path: Path) -> None:
    """Each configuration of the framework's run: every item once per epoch, or the refusal expected."""
    ranks = launch(framework, data, tmp_path, kind)
    names = list(ranks[0])
    assert len(names) >= 2
    expected = [epoch_items(data, kind, epoch) for epoch in range(2)]
    steps = [epoch_steps(data, kind, epoch) for epoch in range(2)]
    refused = {**REFUSED.get(framework, {}), **(MIX_REFUSED.get(framework, {}) if kind == "mix" else {})}
    for name in names:
        results = [rank[name] for rank in ranks]
        fix = refused.get(name)
        if fix is not None:
            for result in results:
                assert fix in result["error"], result
            continue
        check_epochs(f"{framework} ({kind}): {name}", results, expected, steps)


@pytest.mark.parametrize("kind", ["dataset", "mix", "pack"])
@pytest.mark.parametrize("scenario", ["stateful", "accelerate", "trainer", "lightning"])
def test_resume_mid_epoch_through_the_framework(scenario: str, kind: str, data: Path, tmp_path: Path) -> None:
    """Stopped STOP steps into the second epoch and resumed through the framework's own
    checkpointing (Lightning and the StatefulDataLoader run load rank 0's state on both ranks):
    each rank goes on exactly where it stopped, and the epoch reads every record once."""
    check_resume(scenario, kind, data, tmp_path)


def test_resume_mid_epoch_with_loading_threads_through_a_stateful_dataloader(
    data: Path, tmp_path: Path
) -> None:
    """The loader axis: a state saved while the dataset's threads=2 ran ahead is where the loop was."""
    check_resume("stateful", "threads", data, tmp_path)


def test_resume_mid_epoch_with_a_loading_process_through_a_stateful_dataloader(
    data: Path, tmp_path: Path
) -> None:
    """The loader axis: a state saved while the loading process ran ahead is where the loop was."""
    check_resume("stateful", "process", data, tmp_path)


def check_resume(scenario: str, kind: str, data: Path, tmp_path: Path) -> None:
    """Each configuration of the scenario: before + after the stop is the full epoch, each item once."""
    ranks = launch(f"{scenario}-resume", data, tmp_path, kind)
    assert ranks[0]
    expected = epoch_items(data, kind, 1)
    refused = MIX_REFUSED.get(f"{scenario}-resume", {}) if kind == "mix" else {}
    for name in ranks[0]:
        results = [rank[name] for rank in ranks]
        if name in refused:
            assert all(refused[name] in result["error"] for result in results), results
            continue
        for result in results:
            assert len(result["before"]) == STOP * BATCH or (kind == "pack" and result["before"])
            assert result["before"] + result["after"] == result["full"], name
        real = collections.Counter(
            i for r in results for i, padding in r["before"] + r["after"] if not padding
        )
        assert real == expected, name


# In one process: the pieces, with rank= and world_size= standing in for a process group.


def _dataset(paths: str, rank: int, **kwargs: Any) -> tt.TFRecordDataset:
    return tt.TFRecordDataset(paths, spec=SPEC, seed=3, drop_last=False, rank=rank, world_size=2, **kwargs)


@pytest.mark.parametrize("batch", [1, 7, 10, 64, 100])
def test_len_of_a_sample_mode_loader_is_its_batches_with_workers(data: Path, batch: int) -> None:
    counts = []
    for rank in range(2):
        loader = DataLoader(
            _dataset(f"{data}/*.tfrecord", rank), batch_size=batch, num_workers=2, collate_fn=tt.collate
        )
        batches = list(loader)
        assert len(batches) == len(loader) == -(-(RECORDS + 1) // 2 // batch)
        counts.append(sum(len(b["_record_id"]) for b in batches))
    assert counts == [202, 202]


def test_epochs_advance_without_set_epoch_and_set_epoch_wins(data: Path) -> None:
    dataset = tt.TFRecordDataset(f"{data}/*.tfrecord", spec=SPEC, batch_size=BATCH, seed=3)
    loader = DataLoader(dataset, batch_size=None, num_workers=2, persistent_workers=True)
    orders = [[i for b in loader for i in b["_record_id"].tolist()] for _ in range(3)]
    assert len({tuple(order) for order in orders}) == 3  # three passes, three epochs
    assert dataset.epoch == 2
    fresh = tt.TFRecordDataset(f"{data}/*.tfrecord", spec=SPEC, batch_size=BATCH, seed=3)
    assert [[i for b in fresh for i in b["_record_id"].tolist()] for _ in range(2)] == orders[:2]
    dataset.set_epoch(1)  # explicit: every pass is epoch 1 until set again
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the repeated-epoch warning
        again = [[i for b in loader for i in b["_record_id"].tolist()] for _ in range(2)]
    assert again == [orders[1], orders[1]]


def test_a_loaded_state_continues_its_epoch_then_counts_on(data: Path) -> None:
    dataset = tt.TFRecordDataset(f"{data}/*.tfrecord", spec=SPEC, batch_size=BATCH, seed=3)
    passes = [[i for b in dataset for i in b["_record_id"].tolist()] for _ in range(3)]
    assert len({tuple(order) for order in passes}) == 3
    stopped = tt.TFRecordDataset(f"{data}/*.tfrecord", spec=SPEC, batch_size=BATCH, seed=3)
    list(stopped)  # epoch 0
    iterator = iter(stopped)  # epoch 1, stopped after 3 batches
    head = [i for _, b in zip(range(3), iterator, strict=False) for i in b["_record_id"].tolist()]
    state = stopped.state_dict()
    resumed = tt.TFRecordDataset(f"{data}/*.tfrecord", spec=SPEC, batch_size=BATCH, seed=3)
    resumed.load_state_dict(state)
    rest = [i for b in resumed for i in b["_record_id"].tolist()]
    assert head + rest == passes[1]
    assert [i for b in resumed for i in b["_record_id"].tolist()] == passes[2]


def test_iterable_dataset_shard_gets_each_rank_its_own_records(data: Path) -> None:
    from accelerate.data_loader import IterableDatasetShard

    seen = []
    for rank in range(2):
        shard = IterableDatasetShard(_dataset(f"{data}/*.tfrecord", rank), BATCH, False, 2, rank)
        for workers in (0, 2):
            loader = DataLoader(shard, batch_size=BATCH, num_workers=workers, collate_fn=tt.collate)
            batches = list(loader)
            assert len(batches) == len(loader) == 21
            own = _dataset(f"{data}/*.tfrecord", rank)
            ids = [
                i for b in batches for i, p in zip(b["_record_id"].tolist(), b["_padding"].tolist()) if not p
            ]
            assert sorted(ids) == sorted(s["_record_id"] for s in own if not s["_padding"])
        seen += ids
    assert sorted(seen) == list(range(RECORDS))


def test_wrappers_that_would_cut_records_raise_naming_the_fix(data: Path) -> None:
    from accelerate.data_loader import IterableDatasetShard

    batched = _dataset(f"{data}/*.tfrecord", 0, batch_size=BATCH)
    with pytest.raises(ValueError, match=r"use dispatch_batches=None \(the default\)"):
        len(DataLoader(IterableDatasetShard(batched, BATCH, False, 2, 0), batch_size=BATCH))
    split = IterableDatasetShard(_dataset(f"{data}/*.tfrecord", 0), BATCH, False, 2, 0, split_batches=True)
    with pytest.raises(ValueError, match=r"use split_batches=False"):
        list(DataLoader(split, batch_size=BATCH // 2))
    other_world = IterableDatasetShard(_dataset(f"{data}/*.tfrecord", 1), BATCH, False, 4, 1)
    with pytest.raises(ValueError, match=r"process 1 of 4, but the dataset is rank 1 of 2"):
        list(DataLoader(other_world, batch_size=BATCH))


def test_a_framework_version_not_known_warns(data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import accelerate  # noqa: F401  (loaded: its version is checked)

    monkeypatch.setitem(frameworks.KNOWN_MAJORS, "accelerate", ("accelerate", (0,)))
    monkeypatch.setattr(frameworks, "_warned", set())
    dataset = tt.TFRecordDataset(f"{data}/*.tfrecord", spec=SPEC, batch_size=BATCH)
    with pytest.warns(UserWarning, match=r"accelerate 1\.\d+\.\d+ is a version whose data loader wrappers"):
        next(iter(dataset))
