"""Batches loaded in runs (data/transport/runs.py): several small batches to one hand-off.

The pace sets a run's length from what batches took; a run gives its tasks' items in order, an
error after the items before it; the datasets give the same batches, order and resumable state
whether their batches went to the loading thread one by one or in runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

import torch_tfrecord as tt
from torch_tfrecord.data.decoding import BatchDecoder
from torch_tfrecord.data.epoch import driver
from torch_tfrecord.data.telemetry.shared import Telemetry
from torch_tfrecord.data.transport import runs as runs_module
from torch_tfrecord.data.transport.runs import MAX_RUN, RUN_SECONDS, Pace, RaisedAfter, run_of, runs
from torch_tfrecord.data.transport.threaded import ahead

SPEC = {"id": tt.FixedLen((), torch.int64), "x": "float"}


def test_the_pace_runs_fast_batches_together_and_slow_ones_alone() -> None:
    pace = Pace()
    assert pace.run() == 1  # nothing measured: the first batch is not kept waiting
    pace.took(RUN_SECONDS / 4 * 3, RUN_SECONDS / 4 * 3, batches=3)  # a quarter of a run's time each
    assert pace.run() in (3, 4)  # (4, give or take the float's last bit)
    pace.took(0.0, 0.0, batches=1)
    assert 4 < pace.run() <= MAX_RUN
    for _ in range(30):
        pace.took(RUN_SECONDS * 5, RUN_SECONDS * 5, batches=1)  # each longer than a run alone
    assert pace.run() == 1
    waiting = Pace()
    for _ in range(30):  # little of the thread's CPU, but slow (the codec's threads, a remote read)
        waiting.took(RUN_SECONDS / 100, RUN_SECONDS * 20, batches=1)
    assert waiting.run() == 1


def test_runs_cover_every_place_once_in_order() -> None:
    pace = Pace()
    pace.took(RUN_SECONDS / 5, RUN_SECONDS / 5, batches=1)
    found = list(runs(23, pace))
    assert [place for run in found for place in run] == list(range(23))
    assert {len(run) for run in found[:-1]} == {5}
    assert [len(run) for run in runs(3, None)] == [1, 1, 1]


def test_a_run_gives_its_items_in_order_and_an_error_after_the_items_before_it() -> None:
    ran: list[int] = []

    def task(n: int) -> Callable[[], list[Any]]:
        def load() -> list[Any]:
            ran.append(n)
            if n == 2:
                raise KeyError(f"record {n}")
            return [n * 10, n * 10 + 1]

        return load

    pace = Pace()
    assert list(run_of([task(0), task(1)], pace)()) == [0, 1, 10, 11]
    assert pace.run() == MAX_RUN  # timed: two batches in next to no time
    loaded = run_of([task(0), task(1), task(2), task(3)], pace)()
    received = []
    with pytest.raises(KeyError, match="record 2"):
        for item in loaded:
            received.append(item)
    assert received == [0, 1, 10, 11] and ran[-3:] == [0, 1, 2]  # task 3 never ran
    with pytest.raises(KeyError, match="record 2"):  # failed first: raised at once
        run_of([task(2), task(3)], pace)()


@pytest.mark.parametrize("threads", [0, 2])
def test_no_task_starts_after_a_run_that_failed(threads: int) -> None:
    begun: list[int] = []

    def task(n: int) -> Callable[[], list[Any]]:
        def load() -> list[Any]:
            begun.append(n)
            if n == 3:  # a run whose second batch failed
                return RaisedAfter([n], KeyError(f"record {n}"))
            return [n]

        return load

    loads = ahead((task(n) for n in range(100)), threads=threads, prefetch=12, telemetry=Telemetry())
    try:
        received = [next(loads) for _ in range(4)]
        time.sleep(0.3)  # the loop is slow to reach the error: the loader is not to run on meanwhile
        assert len(begun) <= 4 + max(threads - 1, 0), begun  # (a second thread's task in flight)
        with pytest.raises(KeyError, match="record 3"):
            list(received[-1])
    finally:
        loads.close()


@pytest.mark.parametrize("mode", [{"prefetch": 3}, {"threads": 2}, {"threads": 2, "process": True}])
def test_batches_in_runs_are_those_of_one_by_one_and_resume_where_the_loop_was(
    id_shards: Callable[..., list[Path]], monkeypatch: pytest.MonkeyPatch, mode: dict[str, Any]
) -> None:
    paths = id_shards([200, 150, 90])
    lengths: list[int] = []

    def spied(tasks: Any, pace: Any, *rest: Any) -> Any:
        lengths.append(len(tasks))
        return run_of(tasks, pace, *rest)

    monkeypatch.setattr(driver, "run_of", spied)
    monkeypatch.setattr(runs_module, "RUN_SECONDS", 1.0)  # every batch far below it: runs of 16

    def ids(ds: tt.TFRecordDataset) -> list[list[int]]:
        return [batch["_record_id"].tolist() for batch in ds]

    one_by_one = ids(tt.TFRecordDataset(paths, spec=SPEC, batch_size=4, seed=3, prefetch=0))
    in_runs = tt.TFRecordDataset(paths, spec=SPEC, batch_size=4, seed=3, **mode)
    assert ids(in_runs) == one_by_one
    if not mode.get("process"):  # (a loading process makes its runs in the child)
        assert max(lengths) == MAX_RUN
    made = {process.name: process.batches for process in in_runs.stats().workers}  # batches, not runs
    assert made.get("loading process", len(one_by_one)) == made["main"] == len(one_by_one)
    iterator = iter(in_runs)  # the second epoch: a state taken inside a run made ahead
    first = [next(iterator)["_record_id"].tolist() for _ in range(21)]
    time.sleep(0.1)
    state = in_runs.state_dict()
    del iterator
    resumed = tt.TFRecordDataset(paths, spec=SPEC, batch_size=4, seed=3, **mode)
    resumed.load_state_dict(state)
    again = tt.TFRecordDataset(paths, spec=SPEC, batch_size=4, seed=3, prefetch=0)
    again.set_epoch(1)
    assert first + ids(resumed) == ids(again)


@pytest.mark.parametrize("mode", [{"prefetch": 3}, {"threads": 2}])
def test_runs_are_cut_from_blocks_of_several_runs_so_few_are_cut_short(
    id_shards: Callable[..., list[Path]], monkeypatch: pytest.MonkeyPatch, mode: dict[str, Any]
) -> None:
    """A run does not span two of the plan's blocks of ids: with blocks of one run's most (16
    batches) a pace of 13 made runs of 13 and 3, each short run a whole run's Python. Blocks of small
    batches are of 4 runs' most: 13, 13, 13, 13, 12 from each, the same batches."""
    paths = id_shards([200, 150, 90])  # 110 batches of 4: blocks of 64 and 46
    lengths: list[int] = []

    def spied(tasks: Any, pace: Any, *rest: Any) -> Any:
        lengths.append(len(tasks))
        return run_of(tasks, pace, *rest)

    monkeypatch.setattr(driver, "run_of", spied)
    monkeypatch.setattr(Pace, "run", lambda self: 13)
    one_by_one = tt.TFRecordDataset(paths, spec=SPEC, batch_size=4, seed=3, prefetch=0)
    expected = [batch["_record_id"].tolist() for batch in one_by_one]
    lengths.clear()  # (tasks of one batch: no pace with neither threads nor prefetch)
    in_runs = tt.TFRecordDataset(paths, spec=SPEC, batch_size=4, seed=3, **mode)
    assert [batch["_record_id"].tolist() for batch in in_runs] == expected
    assert lengths == [13, 13, 13, 13, 12, 13, 13, 13, 7]
    # Large batches: blocks of at most 65,536 ids, but never fewer batches than a run's most.
    assert [driver._plan_block(size) for size in (4, 256, 1024, 2048, 65_536)] == [64, 64, 64, 32, MAX_RUN]


def test_workers_ignore_prefetch_and_threads_and_give_the_same_batches(
    id_shards: Callable[..., list[Path]],
) -> None:
    """The fourth way of spreading the work: DataLoader workers ignore prefetch and threads (each
    worker makes its batches one by one, no thread hands them over), and give the same batches."""
    paths = id_shards([200, 150, 90])
    one_by_one = tt.TFRecordDataset(paths, spec=SPEC, batch_size=4, seed=3, prefetch=0)
    given = tt.TFRecordDataset(paths, spec=SPEC, batch_size=4, seed=3, prefetch=3, threads=2)
    expected = [batch["_record_id"].tolist() for batch in one_by_one]
    loader = DataLoader(given, batch_size=None, num_workers=2)
    assert [batch["_record_id"].tolist() for batch in loader] == expected


def test_a_run_of_small_batches_is_decoded_at_once_each_batch_in_its_own_memory(
    id_shards: Callable[..., list[Path]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run of small batches is read and decoded in one native call and cut into its batches: the
    same batches as one by one (every column), each tensor with memory of its own (a view would
    keep, pickle and send the whole run's); with a transform on the threads too."""
    paths = id_shards([200, 150, 90])
    monkeypatch.setattr(runs_module, "RUN_SECONDS", 1.0)  # runs of 16
    together: list[int] = []
    batches = BatchDecoder.batches

    def spied(self: BatchDecoder, parts: Any, seed: int, epoch: int) -> Any:
        made = batches(self, parts, seed, epoch)
        together.append(len(parts) if made is not None else 0)
        return made

    monkeypatch.setattr(BatchDecoder, "batches", spied)

    def doubled(batch: dict[str, Any], generator: torch.Generator | None = None) -> dict[str, Any]:
        return {**batch, "twice": batch["id"] * 2}

    # Columns of each kind: a scalar and a 2-D tensor (a default), a Ragged list, bytes rows.
    pair, tag = tt.FixedLen((2,), torch.float32, default=[0.5, 1.5]), tt.FixedLen((), bytes, default=b"t")
    spec = {**SPEC, "pair": pair, "tag": tag, "half": tt.FixedLen((), torch.bfloat16, default=0.5)}
    expected = list(tt.TFRecordDataset(paths, spec=spec, batch_size=4, seed=3, prefetch=0, transform=doubled))
    for mode in ({"prefetch": 3}, {"threads": 2, "transform_threads": True}):
        together.clear()
        found = list(tt.TFRecordDataset(paths, spec=spec, batch_size=4, seed=3, transform=doubled, **mode))
        assert max(together) == MAX_RUN and 0 not in together, mode
        assert len(found) == len(expected)
        for one, run in zip(expected, found, strict=True):
            assert one.keys() == run.keys()
            for key in ("id", "pair", "half", "twice", "_record_id", "_padding"):
                assert torch.equal(one[key], run[key]), key
                assert run[key].untyped_storage().nbytes() == run[key].numel() * run[key].element_size()
            assert one["x"].tolist() == run["x"].tolist()
            assert type(run["tag"]) is type(one["tag"]) and list(run["tag"]) == list(one["tag"]) == [b"t"] * 4
            assert run["x"].values.untyped_storage().nbytes() == run["x"].values.numel() * 4
    # The loading process (its threads run the same runs) and DataLoader workers (one by one): the same.
    common: dict[str, Any] = {"spec": spec, "batch_size": 4, "seed": 3, "transform": doubled}
    given = tt.TFRecordDataset(paths, threads=2, process=True, **common)
    spread = DataLoader(tt.TFRecordDataset(paths, **common), batch_size=None, num_workers=2)
    for found in (list(given), list(spread)):
        assert len(found) == len(expected)
        for one, run in zip(expected, found, strict=True):
            for key in ("id", "pair", "half", "twice", "_record_id", "_padding"):
                assert torch.equal(one[key], run[key]), key
            assert one["x"].tolist() == run["x"].tolist() and list(run["tag"]) == list(one["tag"])


def test_a_damaged_record_in_a_run_is_named_or_skipped_as_one_by_one(
    id_shards: Callable[..., list[Path]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run whose one-call decode finds a damaged record goes one by one: the batches before it
    come out, then the error naming the record (or, skipping, the same batches as one by one)."""
    paths = id_shards([200, 150, 90])
    monkeypatch.setattr(runs_module, "RUN_SECONDS", 1.0)
    data = bytearray(paths[1].read_bytes())
    data[len(data) // 2] ^= 0xFF  # a byte inside a record of the second shard
    paths[1].write_bytes(bytes(data))

    def until_error(prefetch: int) -> tuple[list[list[int]], str]:
        seen: list[list[int]] = []
        dataset = tt.TFRecordDataset(paths, spec=SPEC, batch_size=4, prefetch=prefetch, shuffle=False)
        with pytest.raises(tt.TFRecordError) as raised:
            for batch in dataset:
                seen.append(batch["_record_id"].tolist())
        return seen, str(raised.value)

    before, message = until_error(0)
    assert "shard-001" in message and until_error(3) == (before, message)

    def skipping(prefetch: int) -> list[list[int]]:
        dataset = tt.TFRecordDataset(
            paths, spec=SPEC, batch_size=4, prefetch=prefetch, shuffle=False, on_error="skip"
        )
        return [batch["_record_id"].tolist() for batch in dataset]

    assert skipping(3) == skipping(0)


def test_a_run_that_fails_at_once_says_so_and_goes_batch_by_batch(
    id_shards: Callable[..., list[Path]], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An unexpected error of a run's one-call load is not silent: logged, and the run's batches are
    loaded one by one (the same batches)."""
    paths = id_shards([200, 150, 90])
    monkeypatch.setattr(runs_module, "RUN_SECONDS", 1.0)
    def ids(prefetch: int) -> list[list[int]]:
        dataset = tt.TFRecordDataset(paths, spec=SPEC, batch_size=4, prefetch=prefetch)
        return [batch["_record_id"].tolist() for batch in dataset]

    expected = ids(0)

    def broken(self: Any, parts: Any, epoch: int) -> Any:
        raise RuntimeError("broken at once")

    monkeypatch.setattr(tt.TFRecordDataset, "load_batches", broken)
    with caplog.at_level("WARNING", logger=runs_module.__name__):
        found = ids(3)
    assert found == expected
    assert any("broken at once" in record.getMessage() for record in caplog.records)
