"""Threads in the loading process: OrderedThreads itself, and ``threads=N`` of the datasets end to end.

The loader axis of the datasets' promises: the batches of ``threads=N`` are those of ``threads=0``
and of DataLoader workers, in the same order; exactly once over ranks; ``state_dict`` mid-epoch
resumes on another thread count and world size; bad records and raising transforms stop the
epoch with their error and leave no thread running.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import loader_modes as modes
import pytest
import torch
from torch.utils.data import DataLoader

import torch_tfrecord as tt
from torch_tfrecord.data.transport.threaded import OrderedThreads
from torch_tfrecord.records.shards import pool as shard_pool

SPEC = {"id": tt.FixedLen((), torch.int64), "x": "float"}
# -- OrderedThreads ------------------------------------------------------------------------------


class _Tasks:
    """Tasks that sleep a little at random and return their place; counts the tasks begun."""

    def __init__(self, n: int, fail_at: int | None = None) -> None:
        self.n, self.fail_at, self.begun, self.running, self.most = n, fail_at, 0, 0, 0
        self.lock = threading.Lock()

    def __iter__(self) -> Iterator[Callable[[], int]]:
        for place in range(self.n):
            yield lambda place=place: self._run(place)

    def _run(self, place: int) -> int:
        with self.lock:
            self.begun += 1
            self.running += 1
            self.most = max(self.most, self.running)
        time.sleep((place * 7919 % 13) / 4000)
        with self.lock:
            self.running -= 1
        if place == self.fail_at:
            raise KeyError(f"feature 'x' of record {place}")
        return place


@pytest.mark.parametrize("threads", [1, 2, 5])
def test_results_in_the_tasks_order_at_most_depth_ahead(threads: int) -> None:
    tasks = _Tasks(120)
    made = OrderedThreads(iter(tasks), threads=threads, depth=threads + 2)
    assert next(made) == 0
    time.sleep(0.1)  # the threads fill what they may: depth tasks taken and not handed out
    assert tasks.begun <= 1 + threads + 2
    assert list(made) == list(range(1, 120))
    assert tasks.most <= threads
    modes.no_thread_left()


def test_an_error_is_raised_in_its_place_and_nothing_after_it_starts() -> None:
    tasks = _Tasks(200, fail_at=37)
    received = []
    with pytest.raises(KeyError, match="record 37"):
        for place in OrderedThreads(iter(tasks), threads=3, depth=5):
            received.append(place)
    assert received == list(range(37))
    assert tasks.begun <= 37 + 1 + 5  # those taken before the error was known, no more
    modes.no_thread_left()


def test_an_error_of_the_iterator_itself_comes_after_the_items_before_it() -> None:
    def tasks() -> Iterator[Callable[[], int]]:
        yield lambda: 1
        yield lambda: 2
        raise ValueError("the plan of epoch 3")

    made = OrderedThreads(tasks(), threads=2, depth=2)
    assert next(made) == 1 and next(made) == 2
    with pytest.raises(ValueError, match="epoch 3"):
        next(made)
    modes.no_thread_left()


def test_close_and_garbage_collection_stop_every_thread_and_close_the_tasks() -> None:
    closed = []

    def tasks() -> Iterator[Callable[[], int]]:
        try:
            for place in itertools.count():
                yield lambda place=place: place
        finally:
            closed.append(threading.current_thread().name)

    made = OrderedThreads(tasks(), threads=3, depth=4)
    assert [next(made) for _ in range(5)] == [0, 1, 2, 3, 4]
    del made  # abandoned mid-way: collected, its threads stopped
    modes.no_thread_left()
    assert len(closed) == 1  # the generator's cleanup ran once, in a thread that ran it
    unstarted = tasks()
    never = OrderedThreads(unstarted, threads=2, depth=2)
    never.close()  # never started: closed here
    assert unstarted.gi_frame is None and not modes.loading_threads()  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="depth=1"):
        OrderedThreads(tasks(), threads=2, depth=1)


def test_a_fork_waits_until_no_thread_is_inside_a_task() -> None:
    inside = threading.Event()
    release = threading.Event()

    def slow() -> int:
        inside.set()
        release.wait(5)
        return 1

    made = OrderedThreads(iter([slow]), threads=1, depth=1)
    consumer = threading.Thread(target=lambda: list(made))
    consumer.start()
    assert inside.wait(5)
    threading.Timer(0.3, release.set).start()
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    waited = time.monotonic() - start
    os.waitpid(pid, 0)
    consumer.join(5)
    assert waited >= 0.25  # the fork waited for the task in progress


# -- the datasets ----------------------------------------------------------------------------------


def _epoch_of(ds: tt.TFRecordDataset, workers: int = 0, loop_draws: list[float] | None = None) -> list[Any]:
    out = []
    for batch in DataLoader(ds, batch_size=None, num_workers=workers):
        out.append((modes.ids([batch])[0], batch["noise"].tolist() if "noise" in batch else None))
        if loop_draws is not None:
            loop_draws.append(float(torch.rand(())))  # the loop's own random numbers
    return out


@pytest.mark.parametrize("batch_size", [8, None])
def test_the_same_batches_in_the_same_order_whatever_the_threads_and_as_with_workers(
    id_shards: Callable[..., list[Path]], batch_size: int | None
) -> None:
    paths = id_shards([37, 5, 60, 21])

    def epoch(threads: int, workers: int = 0, **options: Any) -> tuple[list[Any], list[float]]:
        ds = tt.TFRecordDataset(
            paths, spec=SPEC, batch_size=batch_size, seed=3, threads=threads, loader_batch_size=None
            if batch_size else 4, **options,
        )  # fmt: skip
        ds.set_epoch(1)
        torch.manual_seed(1234)
        draws: list[float] = []
        if batch_size is None:  # samples, batched by the loader
            loader = DataLoader(ds, batch_size=4, num_workers=workers, collate_fn=tt.collate)
            return [(modes.ids([b])[0], None) for b in loader], draws
        return _epoch_of(ds, workers, draws), draws

    kind = {"transform": modes.augment} if batch_size else {}
    expected = epoch(0, **kind)
    for threads in (1, 2, 4):
        assert epoch(threads, **kind) == expected, threads
    assert epoch(0, workers=2, **kind)[0] == expected[0]  # the same as two DataLoader workers
    modes.no_thread_left()


def test_transforms_on_the_threads_are_seeded_through_their_generator(
    id_shards: Callable[..., list[Path]],
) -> None:
    paths = id_shards([40, 40])

    def epoch(threads: int, transform_threads: bool) -> list[Any]:
        ds = tt.TFRecordDataset(
            paths, spec=SPEC, batch_size=8, seed=9, transform=modes.augment_with, threads=threads,
            transform_threads=transform_threads,
        )  # fmt: skip
        return _epoch_of(ds)

    torch.manual_seed(7)
    expected = epoch(0, False)
    loop_after = torch.get_rng_state()
    torch.manual_seed(7)
    assert epoch(3, True) == expected
    assert torch.equal(torch.get_rng_state(), loop_after)  # the loop's RNG as without threads
    with pytest.raises(ValueError, match="generator="):
        tt.TFRecordDataset(paths, spec=SPEC, transform=modes.augment, threads=2, transform_threads=True)
    with pytest.raises(ValueError, match="threads >= 1"):
        tt.TFRecordDataset(paths, spec=SPEC, transform=modes.augment_with, transform_threads=True)
    with pytest.raises(ValueError, match="threads=-1"):
        tt.TFRecordDataset(paths, spec=SPEC, threads=-1)


def test_exactly_once_over_ranks_with_equal_batches(id_shards: Callable[..., list[Path]]) -> None:
    paths = id_shards([23, 40, 9])
    lengths, seen = [], []
    for rank in range(3):
        ds = tt.TFRecordDataset(
            paths, spec=SPEC, batch_size=4, seed=2, rank=rank, world_size=3, drop_last=False, threads=2
        )
        batches = list(DataLoader(ds, batch_size=None))
        lengths.append(len(batches))
        seen += [
            i for b in batches for i, p in zip(b["_record_id"].tolist(), b["_padding"].tolist()) if not p
        ]
    assert len(set(lengths)) == 1
    assert sorted(seen) == list(range(72))


@pytest.mark.parametrize("batch_size", [6, None])
def test_a_state_mid_epoch_describes_batches_received_and_resumes_on_other_threads(
    id_shards: Callable[..., list[Path]], batch_size: int | None
) -> None:
    paths = id_shards([50, 50, 28])

    def make(threads: int, rank: int = 0, world_size: int = 1) -> tt.TFRecordDataset:
        return tt.TFRecordDataset(
            paths, spec=SPEC, batch_size=batch_size, seed=5, threads=threads, rank=rank, world_size=world_size
        )

    full = [i for ids in modes.ids(iter(make(0))) for i in ids]
    ds = make(3)
    iterator = iter(ds)
    taken = 5 if batch_size else 37
    first = [i for _ in range(taken) for i in modes.ids(iter([next(iterator)]))[0]]
    time.sleep(0.1)  # the threads run ahead of the loop
    state = ds.state_dict()
    json.dumps(state)
    del iterator
    modes.no_thread_left()
    for threads in (0, 1, 4):
        resumed = make(threads)
        resumed.load_state_dict(state)
        rest = [i for ids in modes.ids(iter(resumed)) for i in ids]
        assert first + rest == full, threads  # nothing twice, nothing lost
    # Two ranks stopped mid-epoch with threads, resumed on one rank with other threads.
    if batch_size:
        states, seen = [], []
        for rank in range(2):
            ranked = make(2, rank, 2)
            loop = iter(ranked)
            seen += [i for _ in range(rank + 2) for i in modes.ids(iter([next(loop)]))[0]]
            states.append(ranked.state_dict())
            del loop
        one = make(3)
        one.load_state_dict(states)
        seen += [i for ids in modes.ids(iter(one)) for i in ids]
        assert len(seen) == len(set(seen)) >= 120 and set(seen) <= set(full)  # (drop_last: < 1 global batch)
    modes.no_thread_left()


def test_automatic_epochs_and_stats_per_thread_without_a_handoff(
    id_shards: Callable[..., list[Path]],
) -> None:
    paths = id_shards([30, 34])
    ds = tt.TFRecordDataset(paths, spec=SPEC, batch_size=8, seed=4, threads=2)
    first, second = modes.ids(iter(ds)), modes.ids(iter(ds))
    expected = tt.TFRecordDataset(paths, spec=SPEC, batch_size=8, seed=4)
    expected.set_epoch(1)
    assert first != second and second == modes.ids(iter(expected))
    stats = ds.stats()
    assert stats.records == 128 and stats.bytes > 0  # both threads' reads counted
    assert "read" in str(stats) and "handoff" not in str(stats)


# Threads in the main process, and the same threads in one loading process (whose errors and
# log records are carried to the main process).
IN_PROCESS = pytest.mark.parametrize("process", [False, True], ids=["main-process", "loading-process"])


@IN_PROCESS
def test_a_corrupt_record_under_threads_names_its_file_and_only_it_is_skipped(
    id_shards: Callable[..., list[Path]], caplog: pytest.LogCaptureFixture, process: bool
) -> None:
    paths = id_shards([20, 20])
    modes.damage_payload(paths[1], 3)  # global id 23
    raising = tt.TFRecordDataset(paths, spec=SPEC, batch_size=4, shuffle=False, threads=3, process=process)
    received = []
    named = r"shard-001\.tfrecord.* at byte \d+ \(record 3\)"
    with pytest.raises(tt.CorruptRecordError, match=named) as error:
        for batch in raising:
            received.append(batch["_record_id"].tolist())
    assert received == [list(range(at, at + 4)) for at in range(0, 20, 4)]
    assert error.value.path.endswith("shard-001.tfrecord") and error.value.record == 3
    if process:  # the child's traceback, added as a note
        assert "loading process" in "".join(getattr(error.value, "__notes__", []))
    modes.nothing_left()
    skipping = tt.TFRecordDataset(
        paths, spec=SPEC, batch_size=4, shuffle=False, threads=3, on_error="skip", process=process
    )
    with caplog.at_level(logging.WARNING):
        batches = list(skipping)
    assert "shard-001.tfrecord" in caplog.text and "record 3" in caplog.text  # (a child's logged here)
    real = [i for b in batches for i, p in zip(b["_record_id"].tolist(), b["_padding"].tolist()) if not p]
    assert sorted(real) == [i for i in range(40) if i != 23]
    modes.nothing_left()


@IN_PROCESS
@pytest.mark.parametrize("transform_threads", [False, True])
def test_a_raising_transform_stops_the_epoch_with_its_error(
    id_shards: Callable[..., list[Path]], transform_threads: bool, process: bool
) -> None:
    paths = id_shards([40])
    ds = tt.TFRecordDataset(
        paths, spec=SPEC, batch_size=4, shuffle=False, threads=2, transform_threads=transform_threads,
        transform=modes.raising_with if transform_threads else modes.raising, process=process,
    )  # fmt: skip
    received = []
    with pytest.raises(RuntimeError, match="record 17"):
        for batch in DataLoader(ds, batch_size=None):
            received.append(batch["_record_id"].tolist())
    assert received == [list(range(at, at + 4)) for at in range(0, 16, 4)]
    modes.nothing_left()


def test_shards_let_go_while_other_threads_read_stay_open_until_their_reads_end(
    id_shards: Callable[..., list[Path]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two shards open at most, ten read at random by four threads: each batch opens some and
    # lets others go while the other threads read from them (natively, without the GIL).
    monkeypatch.setitem(shard_pool.CAPS, "local", 2)
    paths = id_shards([30] * 10)
    expected = modes.ids(iter(tt.TFRecordDataset(paths, spec=SPEC, batch_size=16, seed=8)))
    for _ in range(3):
        ds = tt.TFRecordDataset(paths, spec=SPEC, batch_size=16, seed=8, threads=4, prefetch=4)
        batches = list(ds)
        assert modes.ids(iter(batches)) == expected
        assert all(b["id"].tolist() == b["_record_id"].tolist() for b in batches)  # each record's own bytes
        assert len(ds.files.pool.opened("local")) <= 2 and not ds.files.pool._retired
    modes.no_thread_left()


def test_mix_and_pack_with_threads_give_the_same_batches(
    id_shards: Callable[..., list[Path]], tmp_path: Path
) -> None:
    from id_shards import write_id_shards

    paths = id_shards([30, 31])
    other = write_id_shards(tmp_path / "other", (25,), first=1000)

    def mixed(threads: int) -> list[Any]:
        sources = {
            "a": tt.TFRecordDataset(paths, spec={"id": "int"}, seed=1),
            "b": tt.TFRecordDataset(other, spec={"id": "int"}, seed=2),
        }
        mix = tt.mix(sources, {"a": 2, "b": 1}, samples_per_epoch=90, batch_size=6, threads=threads)
        return [(b["_source"].tolist(), {k: b[k]["id"].tolist() for k in ("a", "b") if k in b}) for b in mix]

    assert mixed(3) == mixed(0)

    def packed(threads: int) -> list[list[int]]:
        source = tt.TFRecordDataset(paths, spec={"x": "float", "id": "int"}, seed=3)
        rows = tt.pack(source, length=8, keys=["id"], batch_size=2, threads=threads)
        return [b["id"].reshape(-1).tolist() for b in rows]

    assert packed(2) == packed(0)
    modes.no_thread_left()


def test_a_selection_with_threads_reads_its_records_as_without(id_shards: Callable[..., list[Path]]) -> None:
    paths = id_shards([40, 41, 39])

    def epoch(threads: int) -> list[list[int]]:
        ds = tt.TFRecordDataset(paths, spec=SPEC, subset=0.5, seed=6, batch_size=8, threads=threads)
        batches = list(ds)
        assert all(b["id"].tolist() == b["_record_id"].tolist() for b in batches)
        return modes.ids(iter(batches))

    expected = epoch(0)
    assert epoch(3) == expected and len({i for ids in expected for i in ids}) == 56  # 7 whole batches of 60
    modes.no_thread_left()


def test_workers_forked_while_threads_run_read_their_share_exactly(
    id_shards: Callable[..., list[Path]],
) -> None:
    paths = id_shards([40, 41, 39])
    ds = tt.TFRecordDataset(paths, spec=SPEC, batch_size=4, seed=2, shuffle=False, threads=2)
    ds.set_epoch(0)
    running = iter(ds)
    next(running)  # the threads run (and read the shards) while the workers are forked
    assert len(modes.loading_threads()) == 2
    loader = DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context="fork")
    ids = sorted(int(i) for batch in loader for i in batch["_record_id"])
    assert ids == list(range(120))
    rest = [i for batch in running for i in batch["_record_id"].tolist()]
    assert rest == list(range(4, 120))
    modes.no_thread_left()


def test_a_loop_left_open_at_exit_ends_quietly(tmp_path: Path) -> None:
    from id_shards import write_id_shards

    shards = write_id_shards(tmp_path, (50, 50))
    script = (
        "import sys, torch, torch_tfrecord as tt\n"
        "spec = {'id': tt.FixedLen((), torch.int64)}\n"
        "loop = iter(tt.TFRecordDataset(sys.argv[1], spec=spec, batch_size=4, threads=2))\n"
        "print(next(loop)['id'].tolist())\n"  # and the loop, still open, is left to the exit
    )
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, "-c", script, shards], capture_output=True, text=True, timeout=120, check=False
        )
        assert (done.returncode, done.stderr) == (0, "")
        ids = json.loads(done.stdout)
        assert len(set(ids)) == 4 and all(0 <= i < 100 for i in ids)
