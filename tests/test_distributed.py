"""Real process groups: 2 ranks (gloo on CPU) x 2 DataLoader workers each, uneven shards.

Every rank all-gathers the record ids it saw; rank 0 writes what it gathered to a JSON file
that the test then checks. Also runs examples/train_ddp.py under torchrun.
"""

from __future__ import annotations

import collections
import functools
import json
import os
import sys
from pathlib import Path
from typing import Any

import launch
import pytest
import torch
from gloo import gather_ranks
from torch.utils.data import ChainDataset, DataLoader

import torch_tfrecord as tt

WORLD_SIZE = 2
TIMEOUT_S = 240
SPEC = {"id": tt.FixedLen((), torch.int64), "x": "float"}
ROOT = Path(__file__).resolve().parent.parent


def _ids(batches: list[dict[str, Any]]) -> list[tuple[int, bool]]:
    return [
        (i, p) for b in batches for i, p in zip(b["_record_id"].tolist(), b["_padding"].tolist(), strict=True)
    ]


def _example_results(shards: str) -> dict[str, Any]:
    results: dict[str, Any] = {}
    make = lambda: tt.TFRecordDataset(shards, spec=SPEC, batch_size=4, seed=7, drop_last=False)  # noqa: E731
    ds = make()  # rank and world size come from the process group
    results["len"] = len(ds)
    loader = DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True)
    for name, epoch in (("epoch0", 0), ("epoch0_again", 0), ("epoch1", 1)):
        ds.set_epoch(epoch)
        results[name] = _ids(list(loader))

    # Stop mid-epoch, save, resume in a new dataset and loader (another worker count).
    stopped = make()
    stopped.set_epoch(1)
    taken = []
    for step, batch in enumerate(DataLoader(stopped, batch_size=None, num_workers=2)):
        taken.append(batch)
        if step == 2:
            break
    state = stopped.state_dict(consumed=len(taken))
    resumed = make()
    resumed.load_state_dict(state)
    rest = list(DataLoader(resumed, batch_size=None, num_workers=1))
    results["resume_taken"], results["resume_rest"] = _ids(taken), _ids(rest)

    # A DDP training loop on uneven shards: every rank takes the same number of steps.
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(1, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
    steps = 0
    for epoch in range(2):
        ds.set_epoch(epoch)
        for batch in loader:
            target = batch["id"].float().unsqueeze(1)
            loss = torch.nn.functional.mse_loss(model(target), target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            steps += 1
    results["train_steps"] = steps
    results["weights"] = [p.detach().flatten().tolist() for p in model.parameters()]
    return results


@pytest.fixture(scope="module")
def gathered(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    folder = tmp_path_factory.mktemp("ddp")
    shards = folder / "shards"
    shards.mkdir()
    record_id = 0
    for shard, size in enumerate([1, 7, 50, 3]):  # 61 records, very uneven
        with tt.ExampleWriter(shards / f"part-{shard}.tfrecord") as writer:
            for _ in range(size):
                writer.write({"id": record_id, "x": [1.0]})
                record_id += 1
    return gather_ranks(_example_results, WORLD_SIZE, (str(shards),), TIMEOUT_S, folder / "gathered.json")


def _real(pairs: list[list[Any]]) -> list[int]:
    return [i for i, padding in pairs if not padding]


def test_every_record_exactly_once_with_equal_batches(gathered: list[dict[str, Any]]) -> None:
    assert [r["len"] for r in gathered] == [8, 8]  # ceil(61 / (2 ranks x 4))
    for name in ("epoch0", "epoch1"):
        per_rank = [r[name] for r in gathered]
        assert [len(pairs) for pairs in per_rank] == [32, 32]  # 8 batches of 4 on each rank
        real = [i for pairs in per_rank for i in _real(pairs)]
        assert sorted(real) == list(range(61))  # exactly once across ranks and workers
        padding = [i for pairs in per_rank for i, p in pairs if p]
        assert len(padding) == 3


def test_deterministic_and_reshuffled_each_epoch(gathered: list[dict[str, Any]]) -> None:
    for rank in gathered:
        assert rank["epoch0"] == rank["epoch0_again"]
        assert rank["epoch0"] != rank["epoch1"]


def test_resume_mid_epoch_loses_and_repeats_nothing(gathered: list[dict[str, Any]]) -> None:
    for rank in gathered:
        assert len(rank["resume_taken"]) == 12
        assert rank["resume_taken"] + rank["resume_rest"] == rank["epoch1"]
    real = [i for rank in gathered for i in _real(rank["resume_taken"] + rank["resume_rest"])]
    assert sorted(real) == list(range(61))


def test_ddp_training_finishes_in_step_on_uneven_shards(gathered: list[dict[str, Any]]) -> None:
    assert [rank["train_steps"] for rank in gathered] == [16, 16]
    assert gathered[0]["weights"] == gathered[1]["weights"]  # gradients were all-reduced every step


def test_train_ddp_example_runs_under_torchrun(tmp_path: Path) -> None:
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
        str(ROOT / "examples" / "train_ddp.py"), "--data", str(tmp_path / "data"), "--epochs", "2",
        "--workers", "1", "--checkpoint", str(tmp_path / "ckpt"),
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = launch.run(command, timeout_s=TIMEOUT_S, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("epoch")]
    assert len(lines) == 2 and "batches per rank x 2 ranks" in lines[0]
    assert float(lines[1].rsplit(" ", 1)[1]) > 0.5  # it learns
    assert (tmp_path / "ckpt" / "rank1.pt").exists()
    resumed = launch.run([*command, "--resume", "--epochs", "3"], timeout_s=TIMEOUT_S, env=env, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert [line.split(":")[0] for line in resumed.stdout.splitlines() if line.startswith("epoch")] == [
        "epoch 2"
    ]


def test_train_ddp_example_runs_in_one_process_without_a_launcher(tmp_path: Path) -> None:
    script = str(ROOT / "examples" / "train_ddp.py")
    env = {key: value for key, value in os.environ.items() if key not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env["OMP_NUM_THREADS"] = "1"
    command = [sys.executable, script, "--data", "data", "--epochs", "1", "--workers", "0"]
    done = launch.run(command, timeout_s=TIMEOUT_S, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "no launcher: training in one process (for several: torchrun" in done.stdout
    assert "batches per rank x 1 ranks" in done.stdout
    assert any((tmp_path / "data").glob("*.tfrecord"))  # --data relative to where it runs
    refused = launch.run([*command, "--resume"], timeout_s=TIMEOUT_S, env=env, cwd=tmp_path)
    assert refused.returncode == 2 and "--resume needs --checkpoint" in refused.stderr
    missing = launch.run(
        [*command, "--resume", "--checkpoint", "nowhere"], timeout_s=TIMEOUT_S, env=env, cwd=tmp_path
    )
    assert (
        missing.returncode == 1
        and "--resume: no checkpoint of rank 0 at 'nowhere/rank0.pt'" in missing.stderr
    )


# Raw payloads and SequenceExamples over plain and compressed shards: the same promises, every
# shuffle mode.
SHUFFLES: tuple[tt.order.Shuffle, ...] = ("global", "shards", "block:8", False)
PAYLOADS: dict[str, dict[str, Any]] = {
    "raw": {"spec": "raw"},
    "sequence": {
        "context_spec": {"id": tt.FixedLen((), torch.int64)},
        "sequence_spec": {"steps": tt.FixedLenSequence((1,), torch.float32)},
    },
}


def _payload_ids(batch: dict[str, Any]) -> list[int]:
    """The record ids that the records' own contents give (their "id" context feature)."""
    if "record" in batch:  # raw: the transform's own parsing
        return [int(tt.decode_sequence_example(r, {"id": "int"}, {})[0]["id"][0]) for r in batch["record"]]
    steps, lengths = batch["steps"], batch["_lengths"]["steps"]
    ids = batch["id"].tolist()
    for row, count, record_id in zip(steps, lengths.tolist(), ids, strict=True):
        assert count == record_id % 4 and row[:count].flatten().tolist() == [float(record_id)] * count
        assert not row[count:].any()  # padded with 0 as TensorFlow pads
    return ids  # type: ignore[no-any-return]


def _tagged(name: str, batch: dict[str, Any]) -> dict[str, Any]:
    """The transform: names the dataset a batch comes from, and the ids its records hold."""
    return {**batch, "dataset": name, "contents": _payload_ids(batch)}


def _payload_results(shards: str) -> dict[str, Any]:
    """Every (payload, shuffle) dataset chained in one loader: one start of the workers, not 12."""

    def make(name: str) -> tt.TFRecordDataset:
        kind, shuffle = name.split("-")
        return tt.TFRecordDataset(
            shards,
            batch_size=4,
            seed=7,
            drop_last=False,
            shuffle=False if shuffle == "False" else shuffle,  # type: ignore[arg-type]
            transform=functools.partial(_tagged, name),
            **PAYLOADS[kind],
        )

    names = [f"{kind}-{shuffle}" for kind in PAYLOADS for shuffle in SHUFFLES]
    whole: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for batch in DataLoader(ChainDataset([make(name) for name in names]), batch_size=None, num_workers=2):
        whole[batch["dataset"]].append(batch)
    # Stopped after 3 batches of a 2-worker loader; the rest with 1 worker.
    resumed = []
    for name in names:
        dataset = make(name)
        dataset.load_state_dict(make(name).state_dict(consumed=3))
        resumed.append(dataset)
    rest: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for batch in DataLoader(ChainDataset(resumed), batch_size=None, num_workers=1):
        rest[batch["dataset"]].append(batch)
    return {
        name: {
            "len": len(make(name)),
            "epoch": _ids(whole[name]),
            "contents": [i for b in whole[name] for i in b["contents"]],
            "resumed": _ids(whole[name][:3]) + _ids(rest[name]),
        }
        for name in names
    }


@pytest.fixture(scope="module")
def payloads_gathered(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    folder = tmp_path_factory.mktemp("ddp_payloads")
    shards = folder / "shards"
    shards.mkdir()
    record_id = 0
    # 61 SequenceExamples, very uneven, in plain, GZIP and ZLIB shards.
    layout = [(1, "", None), (7, ".gz", "gzip"), (50, "", None), (3, "", "zlib")]
    for shard, (size, suffix, compression) in enumerate(layout):
        with tt.RecordWriter(shards / f"part-{shard}.tfrecord{suffix}", compression=compression) as writer:
            for _ in range(size):
                steps = [[float(record_id)]] * (record_id % 4)
                writer.write(tt.encode_sequence_example({"id": [record_id]}, {"steps": steps}))
                record_id += 1
    return gather_ranks(_payload_results, WORLD_SIZE, (str(shards),), TIMEOUT_S, folder / "gathered.json")


@pytest.mark.parametrize("shuffle", SHUFFLES)
@pytest.mark.parametrize("kind", PAYLOADS)
def test_payloads_exactly_once_equal_batches_and_resume(
    payloads_gathered: list[dict[str, Any]], kind: str, shuffle: tt.order.Shuffle
) -> None:
    per_rank = [rank[f"{kind}-{shuffle}"] for rank in payloads_gathered]
    assert [r["len"] for r in per_rank] == [8, 8]
    assert [len(r["epoch"]) for r in per_rank] == [32, 32]  # 8 batches of 4 on each rank
    real = [i for r in per_rank for i in _real(r["epoch"])]
    assert sorted(real) == list(range(61))  # exactly once across ranks and workers
    for r in per_rank:
        assert r["contents"] == [i for i, _ in r["epoch"]]  # each record's content is its id's
        assert r["resumed"] == r["epoch"]  # 3 batches with 2 workers, the rest with 1
    ascending = [_real(r["epoch"]) == sorted(_real(r["epoch"])) for r in per_rank]
    if shuffle is False:
        assert all(ascending)  # file order
    elif shuffle == "global":
        assert not any(ascending)


# Weighted mixing: two sources of their own (files, seed, transform) mixed 70/30 over ranks and
# workers in real processes; the smaller source is read again in new passes; the state gathered
# over the process group mid-epoch resumes the rest.
MIX_SPEC = {"id": tt.FixedLen((), torch.int64), "x": tt.FixedLen((1,), torch.float32)}
MIX_SIZES = {"web": 40, "books": 9}  # ids 0-39 and 1000-1008
MIX_EPOCH = 40  # 28 web + 12 books per epoch: books goes through 4 passes in 3 epochs


def _double_x(batch: dict[str, Any]) -> dict[str, Any]:
    return {**batch, "x": batch["x"] * 2}


def _mix(folder: str) -> tt.MixedDataset:
    sources = {
        "web": tt.TFRecordDataset(f"{folder}/web", spec=MIX_SPEC, seed=1),
        "books": tt.TFRecordDataset(f"{folder}/books", spec=MIX_SPEC, seed=2, transform=_double_x),
    }
    weights = {"web": 0.7, "books": 0.3}
    return tt.mix(sources, weights, samples_per_epoch=MIX_EPOCH, batch_size=4, drop_last=False)


def _mixed_places(batches: list[dict[str, Any]], names: tuple[str, ...]) -> list[list[Any]]:
    """[source, id, padding, x] of each place of each mixed batch, in order."""
    places = []
    for batch in batches:
        parts = {
            name: iter(zip(b["id"].tolist(), b["_padding"].tolist(), b["x"][:, 0].tolist(), strict=True))
            for name, b in batch.items()
            if name != "_source"
        }
        for source in batch["_source"].tolist():
            record_id, padding, x = next(parts[names[source]])
            places.append([names[source], record_id, padding, x])
    return places


def _mix_results(folder: str) -> dict[str, Any]:
    results: dict[str, Any] = {}
    mixed = _mix(folder)
    results["len"] = len(mixed)
    loader = DataLoader(mixed, batch_size=None, num_workers=2, persistent_workers=True)
    for epoch in range(3):
        mixed.set_epoch(epoch)
        results[f"epoch{epoch}"] = _mixed_places(list(loader), mixed.names)
    # Epoch 2 stopped after 2 batches of a 2-worker loader; the state gathered over the group;
    # the rest read by a new mix with 1 worker.
    stopped = _mix(folder)
    stopped.set_epoch(2)
    taken = []
    for step, batch in enumerate(DataLoader(stopped, batch_size=None, num_workers=2)):
        taken.append(batch)
        if step == 1:
            break
    state = stopped.state_dict(consumed=len(taken), gather=True)
    resumed = _mix(folder)
    resumed.load_state_dict(json.loads(json.dumps(state)))
    results["taken"] = _mixed_places(taken, stopped.names)
    results["rest"] = _mixed_places(list(DataLoader(resumed, batch_size=None, num_workers=1)), resumed.names)
    return results


@pytest.fixture(scope="module")
def mix_gathered(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    folder = tmp_path_factory.mktemp("ddp_mix")
    for name, first, shard_sizes in (("web", 0, [25, 2, 13]), ("books", 1000, [5, 4])):
        (folder / name).mkdir()
        record_id = first
        for shard, size in enumerate(shard_sizes):
            with tt.ExampleWriter(folder / name / f"part-{shard}.tfrecord") as writer:
                for _ in range(size):
                    writer.write({"id": record_id, "x": [1.0]})
                    record_id += 1
    return gather_ranks(_mix_results, WORLD_SIZE, (str(folder),), TIMEOUT_S, folder / "gathered.json")


def test_mix_in_real_processes_exact_proportions_each_pass_once_and_resume(
    mix_gathered: list[dict[str, Any]],
) -> None:
    assert [r["len"] for r in mix_gathered] == [5, 5]  # 40 places / (2 ranks x 4)
    seen: dict[str, list[int]] = {"web": [], "books": []}
    for epoch in range(3):
        per_rank = [r[f"epoch{epoch}"] for r in mix_gathered]
        assert [len(places) for places in per_rank] == [20, 20]  # equal batches, no padding needed
        places = [p for rank in per_rank for p in rank]
        assert not any(padding for _, _, padding, _ in places)
        assert collections.Counter(source for source, *_ in places) == {"web": 28, "books": 12}
        for source, record_id, _, x in places:
            assert (record_id >= 1000) == (source == "books")  # tagged with the right source
            assert x == (2.0 if source == "books" else 1.0)  # each source's own transform
            seen[source].append(record_id)
    # Each source's passes over ranks and workers: every record once per pass. books (9 records,
    # 12 places an epoch) is read in new permutations: 36 places = exactly 4 passes.
    assert collections.Counter(seen["books"]) == {1000 + i: 4 for i in range(9)}
    web = collections.Counter(seen["web"])  # 84 places = 2 passes of 40 and 4 of a third
    assert set(web) == set(range(40)) and sorted(web.values()) == [2] * 36 + [3] * 4
    assert seen["web"][:28] != sorted(seen["web"][:28])  # shuffled
    # Resumed from the gathered state: epoch 2's places, each once, equal batches on both ranks.
    assert len({len(r["rest"]) for r in mix_gathered}) == 1
    resumed = sorted(p[:2] for r in mix_gathered for p in r["taken"] + r["rest"] if not p[2])
    assert resumed == sorted(p[:2] for r in mix_gathered for p in r["epoch2"])
