"""Resuming on another number of ranks, epochs of a chosen size, several nodes: in one process and for real.

The in-process tests make each rank's dataset with ``rank=`` / ``world_size=``; the gloo test runs
4 spawned ranks stopped mid-epoch, then 3 that resume from the 4's gathered state and stop again,
then 2 that finish the epoch, and checks that the union of what all of them read is every record
once. Then examples/train_elastic.py under torchrun: two agents as two nodes of two processes
each, and an elastic job (``--nnodes=1:2``) that loses a node mid-epoch and finishes on the other.
"""

from __future__ import annotations

import collections
import contextlib
import datetime
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import launch
import pytest
import torch.distributed as dist
from gloo import free_port, spawn
from id_shards import write_id_shards
from torch.utils.data import DataLoader

import torch_tfrecord as tt

TIMEOUT_S = 120
SIZES = (5, 40, 17, 1)  # 63 records, uneven shards


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> str:
    return write_id_shards(tmp_path_factory.mktemp("elastic"), SIZES)


def _make(shards: str, rank: int | None, world_size: int | None, **kwargs: Any) -> tt.TFRecordDataset:
    options = {"batch_size": 3, "seed": 5, "drop_last": False, **kwargs}
    return tt.TFRecordDataset(shards, spec={"id": "int"}, rank=rank, world_size=world_size, **options)


def _real(batches: list[dict[str, Any]]) -> list[int]:
    return [
        i
        for b in batches
        for i, p in zip(b["_record_id"].tolist(), b["_padding"].tolist(), strict=True)
        if not p
    ]


def _take(dataset: tt.TFRecordDataset, steps: int | None, workers: int) -> list[dict[str, Any]]:
    return list(itertools.islice(DataLoader(dataset, batch_size=None, num_workers=workers), steps))


def test_four_ranks_resume_on_three_then_two_in_one_process(shards: str) -> None:
    seen: list[int] = []
    states: list[Any] = []
    for rank in range(4):  # the ranks stop at different places, some with workers
        dataset = _make(shards, rank, 4)
        dataset.set_epoch(2)
        taken = _take(dataset, rank + 1, workers=rank % 2)
        seen += _real(taken)
        states.append(dataset.state_dict(consumed=len(taken)))
    states.reverse()  # any order
    lengths, states3 = [], []
    for rank in range(3):
        dataset = _make(shards, rank, 3)
        dataset.load_state_dict(states)
        assert dataset.epoch == 2
        lengths.append(len(dataset))
        taken = _take(dataset, 2, workers=2)
        seen += _real(taken)
        states3.append(dataset.state_dict(consumed=len(taken)))
    assert len(set(lengths)) == 1  # equal batches on every new rank
    json.dumps(states3)  # plain values
    finished = []
    for rank in range(2):
        dataset = _make(shards, rank, 2)
        dataset.load_state_dict(states3)
        rest = _take(dataset, None, workers=1)
        finished.append(len(rest))
        assert len(rest) == len(dataset)
        seen += _real(rest)
        # The next epoch is the new world's normal epoch.
        dataset.set_epoch(3)
        assert len(dataset) == 11  # ceil(63 / (2 x 3))
        fresh = _make(shards, rank, 2)
        fresh.set_epoch(3)
        assert _real(_take(dataset, None, 0)) == _real(_take(fresh, None, 0))
    assert finished[0] == finished[1]
    assert sorted(seen) == list(range(63))  # every record of epoch 2 once


def test_stateful_dataloader_states_of_all_ranks_resume_on_another_world_size(shards: str) -> None:
    stateful = pytest.importorskip("torchdata.stateful_dataloader")
    seen: list[int] = []
    states = []
    for rank in range(2):
        loader = stateful.StatefulDataLoader(_make(shards, rank, 2), batch_size=None, num_workers=2)
        taken = list(itertools.islice(loader, 3 + rank))
        seen += _real(taken)
        states.append(loader.state_dict())
    for rank in range(3):
        dataset = _make(shards, rank, 3)
        dataset.load_state_dict(states)  # the loaders' states, merged per rank, then combined
        seen += _real(_take(dataset, None, 1))
    assert sorted(seen) == list(range(63))


def test_next_epoch_after_a_resume_is_the_normal_one(shards: str) -> None:
    states = []
    for rank in range(2):
        dataset = _make(shards, rank, 2)
        states.append(dataset.state_dict(consumed=0))
    resumed = _make(shards, 0, 3)
    resumed.load_state_dict(states)
    resumed.set_epoch(1)
    fresh = _make(shards, 0, 3)
    fresh.set_epoch(1)
    assert _real(_take(resumed, None, 0)) == _real(_take(fresh, None, 0))


def test_a_single_rank_state_on_another_world_size_is_refused(shards: str) -> None:
    state = _make(shards, 1, 4).state_dict()
    with pytest.raises(ValueError, match="world_size 4.*states of all ranks"):
        _make(shards, 1, 3).load_state_dict(state)
    with pytest.raises(ValueError, match=r"missing ranks \[1, 2\]"):
        _make(shards, 0, 3).load_state_dict([_make(shards, r, 4).state_dict() for r in (0, 3)])
    with pytest.raises(ValueError, match="two states of rank 0"):
        _make(shards, 0, 3).load_state_dict([_make(shards, 0, 1).state_dict()] * 2)
    with pytest.raises(ValueError, match="seed"):
        _make(shards, 0, 3, seed=6).load_state_dict([_make(shards, r, 2).state_dict() for r in range(2)])


def test_drop_last_leaves_out_less_than_a_global_batch_of_the_new_world(shards: str) -> None:
    seen: list[int] = []
    states = []
    for rank in range(2):
        dataset = _make(shards, rank, 2, drop_last=True)  # 63 -> 10 batches of 3 per rank, 3 left out
        seen += _real(_take(dataset, 4, 0))
        states.append(dataset.state_dict())
    lengths = []
    for rank in range(4):
        dataset = _make(shards, rank, 4, drop_last=True)
        dataset.load_state_dict(states)
        rest = _take(dataset, None, 0)
        lengths.append(len(rest))
        seen += _real(rest)
    assert lengths == [3] * 4  # 36 left over 4 ranks x 3
    assert len(seen) == len(set(seen)) == 24 + 36


def test_samples_per_epoch_resumes_and_continues_through_the_pass(shards: str) -> None:
    make = lambda rank, world: _make(shards, rank, world, samples_per_epoch=24, batch_size=4)  # noqa: E731
    passes: list[int] = []
    for epoch in range(5):  # 5 x 24 = 120 samples: the first pass of 63, then 57 of the second
        states, seen = [], []
        for rank in range(2):
            dataset = make(rank, 2)
            dataset.set_epoch(epoch)
            seen.append(_real(_take(dataset, 1, 0)))
            states.append(dataset.state_dict())
        for rank in range(3):  # and the rest of each epoch on 3 ranks
            dataset = make(rank, 3)
            dataset.load_state_dict(states)
            assert dataset.epoch == epoch
            seen.append(_real(_take(dataset, None, 0)))
        passes += [i for part in seen for i in part]
    assert len(passes) == 120
    assert len(set(passes[:48])) == 48  # epochs 0 and 1: all within the first pass
    counts = collections.Counter(passes)  # the first pass whole, then 57 of the second
    assert sorted(counts) == list(range(63)) and sorted(collections.Counter(counts.values()).items()) == [
        (1, 6),
        (2, 57),
    ]


def _phase(rank: int, world_size: int, port: int, shards: str, state_path: str, steps: int, out: str) -> None:
    """One job: resume from the saved global state (if any), take ``steps`` batches (all if -1), save."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    dist.init_process_group(
        "gloo", rank=rank, world_size=world_size, timeout=datetime.timedelta(seconds=TIMEOUT_S)
    )
    try:
        dataset = _make(shards, None, None)  # rank and world size from the process group
        if Path(state_path).exists():
            dataset.load_state_dict(json.loads(Path(state_path).read_text()))
        else:
            dataset.set_epoch(1)
        length = len(dataset)
        taken = _take(dataset, None if steps < 0 else steps, workers=1)
        state = dataset.state_dict(consumed=len(taken), gather=True)  # the same on every rank
        gathered: list[Any] = [None] * world_size
        dist.all_gather_object(gathered, {"len": length, "taken": len(taken), "ids": _real(taken)})
        if rank == 0:
            Path(state_path).write_text(json.dumps(state))
            Path(out).write_text(json.dumps(gathered))
    finally:
        dist.destroy_process_group()


def test_gloo_four_ranks_resume_on_three_then_two(shards: str, tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    phases = []
    for world_size, steps in ((4, 2), (3, 1), (2, -1)):
        out = tmp_path / f"ranks{world_size}.json"
        spawn(_phase, world_size, (world_size, free_port(), shards, str(state), steps, str(out)), TIMEOUT_S)
        phases.append(json.loads(out.read_text()))
    four, three, two = phases
    assert [r["len"] for r in four] == [6] * 4  # ceil(63 / (4 x 3))
    assert [r["taken"] for r in four] == [2] * 4 and [r["taken"] for r in three] == [1] * 3
    assert len({r["len"] for r in three}) == 1 and len({r["len"] for r in two}) == 1  # equal batches
    assert {r["taken"] for r in two} == {two[0]["len"]}
    ids = [i for phase in phases for r in phase for i in r["ids"]]
    assert sorted(ids) == list(range(63))  # epoch 1: every record once over the three jobs
    assert json.loads(state.read_text())["rest"] == []  # and the epoch is over


ELASTIC = Path(__file__).resolve().parent.parent / "examples" / "train_elastic.py"
RECORDS = 1124  # what examples/train_elastic.py writes


def _torchrun(*launcher: str, work: Path, script_args: tuple[str, ...] = ()) -> list[str]:
    return [
        sys.executable, "-m", "torch.distributed.run", *launcher, str(ELASTIC), "--data", str(work / "data"),
        "--checkpoint", str(work / "ckpt"), "--id-log", str(work / "log"), *script_args,
    ]  # fmt: skip


def _logs(work: Path, attempt: int) -> dict[int, list[dict[str, Any]]]:
    """Each rank's log of one attempt: its header line, then one line per step."""
    return {
        int(path.stem.rpartition("rank")[2]): [json.loads(line) for line in path.read_text().splitlines()]
        for path in (work / "log").glob(f"attempt{attempt}-rank*.jsonl")
    }


def _env() -> dict[str, str]:
    root = str(ELASTIC.parent.parent)
    return {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]),
    }


def test_two_nodes_of_two_processes_read_every_record_once(tmp_path: Path) -> None:
    """Two torchrun agents as two nodes on 127.0.0.1: the dataset takes the global rank."""
    port = str(free_port())
    deadline = time.monotonic() + 3 * TIMEOUT_S  # a hang's limit, not a speed limit (pytest's: 600 s)
    with contextlib.ExitStack() as stack:
        agents = [
            stack.enter_context(  # each agent's whole tree is stopped when the block ends
                launch.tree(
                    _torchrun(
                        "--nnodes=2",
                        f"--node_rank={node}",
                        "--nproc_per_node=2",
                        "--master_addr=127.0.0.1",
                        f"--master_port={port}",
                        work=tmp_path,
                        script_args=("--epochs", "2"),
                    ),
                    stdout=(tmp_path / f"agent{node}.txt").open("w"),
                    stderr=subprocess.STDOUT,
                    env=_env(),
                    cwd=tmp_path,
                )
            )
            for node in (0, 1)
        ]
        for node, agent in enumerate(agents):
            try:
                agent.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                output = (tmp_path / f"agent{node}.txt").read_text()[-3000:]
                pytest.fail(f"agent {node} did not finish (a hang): {output}")
    outputs = [(tmp_path / f"agent{node}.txt").read_text() for node in (0, 1)]
    assert [agent.returncode for agent in agents] == [0, 0], "\n".join(o[-3000:] for o in outputs)
    logs = _logs(tmp_path, 0)
    assert sorted(logs) == [0, 1, 2, 3]
    headers = {rank: lines[0] for rank, lines in logs.items()}
    assert {(h["node"], h["local_rank"]) for h in headers.values()} == {
        ("0", "0"),
        ("0", "1"),
        ("1", "0"),
        ("1", "1"),
    }
    assert {rank for rank, h in headers.items() if h["node"] == "1"} == {2, 3}  # global ranks on node 1
    for epoch in (0, 1):
        steps = {rank: [line for line in lines[1:] if line["epoch"] == epoch] for rank, lines in logs.items()}
        assert len({len(s) for s in steps.values()}) == 1  # equal batches on every rank of both nodes
        assert len(steps[0]) == 36  # ceil(1124 / (4 ranks x 8))
        ids = [i for s in steps.values() for line in s for i in line["ids"]]
        assert sorted(ids) == list(range(RECORDS))  # once across both nodes
    assert "epoch 1: 36 steps per rank x 4 ranks" in outputs[0] + outputs[1]


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds the node's processes in /proc")
def test_torchrun_elastic_restarts_on_the_remaining_node_and_finishes_the_epoch(tmp_path: Path) -> None:
    """``--nnodes=1:2``: node B's processes are killed mid-epoch; node A restarts alone from the last
    checkpoint (saved by 4 ranks) and finishes the epoch on 2: nothing lost, nothing twice."""
    port = free_port()
    command = _torchrun(
        "--nnodes=1:2", "--nproc_per_node=2", "--max-restarts=5", "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=elastic-test",
        # Node B must join node A's first round: a late joiner makes torch 2.x restart the round, which
        # can stall in its rank assignment. So a long last call, which the restart alone waits out too.
        "--rdzv-conf=join_timeout=90,last_call_timeout=20,close_timeout=5",
        work=tmp_path,
        script_args=("--step-seconds", "0.15", "--checkpoint-every", "3", "--collective-timeout", "30"),
    )  # fmt: skip
    started, limit = time.monotonic(), 2.5 * TIMEOUT_S
    options: dict[str, Any] = {"stderr": subprocess.STDOUT, "text": True, "env": _env(), "cwd": tmp_path}
    node_a = launch.start(command, stdout=(tmp_path / "a.txt").open("w"), **options)
    node_b = None
    try:
        while True:  # node A hosts the rendezvous store (B, the node that dies, must not)
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() - started < limit and node_a.poll() is None
                time.sleep(0.1)
        node_b = launch.start(command, stdout=(tmp_path / "b.txt").open("w"), **options)
        log = tmp_path / "log" / "attempt0-rank0.jsonl"
        while True:  # until the 4 ranks have read a step past a checkpoint (every 3 steps) mid-epoch
            assert time.monotonic() - started < limit, (tmp_path / "a.txt").read_text()[-3000:]
            time.sleep(0.1)
            lines = log.read_text().splitlines()[1:] if log.exists() else []
            if lines and json.loads(lines[-1])["step"] >= 7 and json.loads(lines[-1])["step"] % 3 == 1:
                break
        for pid in launch.marked(node_b.tree):  # type: ignore[attr-defined]  # node B dies: all of it
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        assert node_a.wait(timeout=limit) == 0, (tmp_path / "a.txt").read_text()[-3000:]
    finally:
        for node in (node_a, node_b):
            if node is not None:
                launch.stop(node, grace_s=0.0)  # its whole tree, orphans included
    attempts = sorted(
        int(p.name[7:].partition("-")[0]) for p in (tmp_path / "log").glob("attempt*-rank0.jsonl")
    )
    logs = {attempt: _logs(tmp_path, attempt) for attempt in attempts}
    first, last = logs[attempts[0]], logs[attempts[-1]]
    assert sorted(first) == [0, 1, 2, 3] and sorted(last) == [0, 1]  # 2 nodes, then 1
    resumed = last[0][0]["resumed_from"]
    assert resumed["epoch"] == 0 and last[1][0]["resumed_from"] == resumed

    def kept(attempt: int, up_to: float) -> list[int]:
        """What an attempt read up to a step, and what the attempt it resumed from kept."""
        lines = logs[attempt]
        ids = [
            i for rank in lines.values() for line in rank[1:] if line["step"] <= up_to for i in line["ids"]
        ]
        origin = lines[0][0]["resumed_from"]
        return ids if origin is None else kept(origin["attempt"], origin["step"]) + ids

    everything = kept(attempts[-1], float("inf"))
    assert sorted(everything) == list(range(RECORDS))  # the epoch: nothing lost, nothing twice
    steps = [len(lines) - 1 for lines in last.values()]
    assert steps[0] == steps[1]  # equal batches on the ranks that finished
    before = kept(resumed["attempt"], resumed["step"])
    rest = [i for rank in last.values() for line in rank[1:] for i in line["ids"]]
    redone = [
        i
        for attempt in attempts[:-1]
        for rank in logs[attempt].values()
        for line in rank[1:]
        if attempt >= resumed["attempt"]
        and line["step"] > (resumed["step"] if attempt == resumed["attempt"] else 0)
        for i in line["ids"]
    ]
    assert set(redone) <= set(rest)  # what dead attempts read after the checkpoint came again
    assert resumed["world_size"] == 4 and resumed["step"] >= 6
    print(
        f"attempts {attempts}; the last resumed from {resumed}: {len(before)} records read before that "
        f"checkpoint, {len(redone)} read after it by attempts that died (rolled back with the model), "
        f"{len(rest)} read by the {len(last)} ranks that finished the epoch in {steps[0]} steps each; "
        f"{time.monotonic() - started:.0f} s"
    )
