"""One loading process (``threads=N, process=True``): the loader axis's third mode end to end.

The batches of the loading process are those of threads in the main process and of DataLoader
workers, in the same order; a state taken mid-epoch names what the loop received and resumes in
any mode; a corrupt record or a raising transform stops the epoch with its error in the main
process (tests/test_threaded.py, over both modes); the child ends with the epoch, its iterator or
its parent, and its death is an error raised within seconds, never a hang.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import loader_modes as modes
import pytest
import torch
from torch.utils.data import DataLoader

import torch_tfrecord as tt
from torch_tfrecord.data.transport import byte_ring, loading_process
from torch_tfrecord.data.transport.loading_process import LoadingProcessError

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="signals and /proc of a POSIX system")

SPEC = {"id": tt.FixedLen((), torch.int64), "x": "float"}


def _gone(pid: int) -> bool:
    """The process has ended (a zombie its new parent has not reaped yet counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _epoch(ds: tt.TFRecordDataset, workers: int = 0) -> list[Any]:
    return [
        (modes.ids(iter([b]))[0], b["noise"].tolist() if "noise" in b else None, b["x"].tolist())
        for b in DataLoader(ds, batch_size=None, num_workers=workers)
    ]


def test_the_same_batches_as_threads_in_the_main_process_and_as_workers(
    id_shards: Callable[..., list[Path]],
) -> None:
    paths = id_shards([37, 5, 60, 21])

    def make(**options: Any) -> tt.TFRecordDataset:
        ds = tt.TFRecordDataset(paths, spec=SPEC, batch_size=8, seed=3, **options)
        ds.set_epoch(1)
        return ds

    expected = _epoch(make(threads=2, transform=modes.augment))
    assert (
        _epoch(make(threads=2, process=True, transform=modes.augment)) == expected
    )  # the transform in the loop
    assert (
        _epoch(make(process=True, prefetch=3, transform=modes.augment)) == expected
    )  # a prefetch thread there
    without = [(ids, None, x) for ids, _, x in expected]
    assert _epoch(make(), workers=2) == without  # two DataLoader workers
    seeded = _epoch(make(threads=2, transform=modes.augment_with, transform_threads=True))
    assert (
        _epoch(make(threads=3, process=True, transform=modes.augment_with, transform_threads=True)) == seeded
    )

    # Samples, batched by the loader.
    def samples(process: bool, workers: int) -> list[Any]:
        ds = tt.TFRecordDataset(paths, spec=SPEC, seed=3, threads=2, process=process)
        loader = DataLoader(ds, batch_size=4, collate_fn=tt.collate, num_workers=workers)
        return [(b["_record_id"].tolist(), b["id"].tolist(), b["x"].tolist()) for b in loader]

    expected_samples = samples(False, 0)
    assert samples(True, 0) == expected_samples == samples(False, 2)
    # tt.loader(process=True): the same, with the loader's batch size told the public way.
    plain = tt.TFRecordDataset(paths, spec=SPEC, seed=3, threads=2)
    assert modes.ids(iter(tt.loader(plain, batch_size=4, process=True))) == [
        ids for ids, _, _ in expected_samples
    ]
    with pytest.raises(ValueError, match="num_workers=0"):
        tt.loader(make(), process=True, num_workers=2)
    with pytest.raises(ValueError, match="process='yes'"):
        tt.TFRecordDataset(paths, spec=SPEC, process="yes")  # type: ignore[arg-type]
    modes.no_process_left()


def test_mix_and_pack_in_the_loading_process_give_the_same_batches(
    id_shards: Callable[..., list[Path]], tmp_path: Path
) -> None:
    from id_shards import write_id_shards

    paths = id_shards([30, 31])
    other = write_id_shards(tmp_path / "other", (25,), first=1000)

    def mixed(process: bool) -> list[Any]:
        sources = {
            "a": tt.TFRecordDataset(paths, spec={"id": "int"}, seed=1),
            "b": tt.TFRecordDataset(other, spec={"id": "int"}, seed=2),
        }
        weights = {"a": 2, "b": 1}
        mix = tt.mix(sources, weights, samples_per_epoch=90, batch_size=6, threads=2, process=process)
        return [(b["_source"].tolist(), {k: b[k]["id"].tolist() for k in ("a", "b") if k in b}) for b in mix]

    assert mixed(True) == mixed(False)

    def packed(process: bool) -> list[list[int]]:
        source = tt.TFRecordDataset(paths, spec={"x": "float", "id": "int"}, seed=3)
        rows = tt.pack(source, length=8, keys=["id"], batch_size=2, threads=2, process=process)
        return [b["id"].reshape(-1).tolist() for b in rows]

    assert packed(True) == packed(False)
    modes.no_process_left()


def test_a_state_mid_epoch_names_what_the_loop_received_and_resumes_in_every_mode(
    id_shards: Callable[..., list[Path]],
) -> None:
    paths = id_shards([50, 50, 28])

    def make(**options: Any) -> tt.TFRecordDataset:
        return tt.TFRecordDataset(paths, spec=SPEC, batch_size=6, seed=5, **options)

    full = [i for ids in modes.ids(iter(make())) for i in ids]
    ds = make(threads=2, process=True)
    loop = iter(ds)
    first = [i for _ in range(5) for i in next(loop)["_record_id"].tolist()]
    time.sleep(0.3)  # the child runs ahead of the loop
    state = ds.state_dict()
    json.dumps(state)
    del loop
    modes.no_process_left()
    # process -> threads -> workers (and process again, and the loop in the main process)
    for options, workers in (({"threads": 2}, 0), ({}, 2), ({"threads": 2, "process": True}, 0), ({}, 0)):
        resumed = make(**options)
        resumed.load_state_dict(state)
        loader = DataLoader(resumed, batch_size=None, num_workers=workers)
        rest = [i for ids in modes.ids(iter(loader)) for i in ids]
        assert first + rest == full, (options, workers)  # nothing twice, nothing lost
    # threads -> process: a state taken under threads resumes in the loading process.
    threaded = make(threads=3)
    loop = iter(threaded)
    first = [i for _ in range(7) for i in next(loop)["_record_id"].tolist()]
    state = threaded.state_dict()
    del loop
    resumed = make(threads=2, process=True)
    resumed.load_state_dict(state)
    assert first + [i for ids in modes.ids(iter(resumed)) for i in ids] == full
    modes.no_process_left()


def test_automatic_epochs_and_stats_with_the_loading_process_and_its_handoff(
    id_shards: Callable[..., list[Path]],
) -> None:
    paths = id_shards([30, 34])
    ds = tt.TFRecordDataset(paths, spec=SPEC, batch_size=8, seed=4, threads=2, process=True)
    first, second = modes.ids(iter(ds)), modes.ids(iter(ds))
    expected = tt.TFRecordDataset(paths, spec=SPEC, batch_size=8, seed=4)
    expected.set_epoch(1)
    assert first != second and second == modes.ids(iter(expected))
    ds.set_epoch(7)
    expected.set_epoch(7)
    assert modes.ids(iter(ds)) == modes.ids(iter(expected))
    stats = ds.stats()
    assert stats.records == 3 * 64 and stats.bytes > 0  # the child's reads reach the main process
    text = str(stats)
    assert "read" in text and "handoff" in text and "loading process (pid" in text
    assert "a loading process" in text.splitlines()[0] and "threads in the loading process" in text
    assert stats.stage_seconds["decode"] > 0 and stats.stage_seconds["handoff"] > 0
    ds.set_epoch(8)
    with ds.trace(paths[0].parent / "trace.json"):  # the child's spans in the trace, named
        list(ds)
    events = json.loads((paths[0].parent / "trace.json").read_text())["traceEvents"]
    names = {e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert names == {"main process", "loading process"}
    assert {"read", "decode", "handoff"} <= {e["name"] for e in events}
    modes.no_process_left()


def test_a_child_killed_mid_epoch_is_an_error_within_seconds(id_shards: Callable[..., list[Path]]) -> None:
    paths = id_shards([200, 200])
    ds = tt.TFRecordDataset(paths, spec=SPEC, batch_size=4, seed=1, threads=2, process=True)
    loop = iter(ds)
    next(loop)
    (child,) = modes.children()
    os.kill(child.pid, signal.SIGKILL)  # type: ignore[arg-type]
    start = time.monotonic()
    with pytest.raises(LoadingProcessError, match=r"pid \d+\) ended before its epoch did \(SIGKILL\)"):
        for _ in loop:  # the batches already in the pipe, then the error
            pass
    assert time.monotonic() - start < 5
    modes.no_process_left()


def test_no_process_is_left_after_the_loop_breaks_or_ends(id_shards: Callable[..., list[Path]]) -> None:
    paths = id_shards([100, 100])
    ds = tt.TFRecordDataset(paths, spec=SPEC, batch_size=4, seed=1, threads=2, process=True)
    for number, _ in enumerate(DataLoader(ds, batch_size=None)):
        if number == 3:
            break
    modes.no_process_left()  # the loader's iterator collected: the child ended and joined
    loop = iter(ds)
    next(loop)
    pid = modes.children()[0].pid
    assert any(key[0] == pid for key in byte_ring._received)  # its ring, mapped here
    loop.close()  # type: ignore[attr-defined]
    assert not modes.children() and pid is not None and _gone(pid)
    assert not any(key[0] == pid for key in byte_ring._received)  # and let go of
    assert len(list(ds)) == 50 and not modes.children()  # the epoch's end ends it too


def test_the_loading_process_ends_when_its_parent_is_killed(tmp_path: Path) -> None:
    from id_shards import write_id_shards

    shards = write_id_shards(tmp_path, (300, 300))
    script = (
        "import multiprocessing, sys, time, torch, torch_tfrecord as tt\n"
        "spec = {'id': tt.FixedLen((), torch.int64)}\n"
        "ds = tt.TFRecordDataset(sys.argv[1], spec=spec, batch_size=4, threads=2, process=True)\n"
        "loop = iter(ds)\n"
        "next(loop)\n"
        "print(multiprocessing.active_children()[0].pid, flush=True)\n"
        "time.sleep(120)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script, shards], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert not _gone(child)
        parent.kill()
        parent.wait(30)
        deadline = time.monotonic() + 5
        while not _gone(child):
            assert time.monotonic() < deadline, "the loading process outlived its parent"
            time.sleep(0.05)
    finally:
        parent.kill()
        parent.wait(30)


def test_a_spawned_loading_process_gives_the_same_batches(
    id_shards: Callable[..., list[Path]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Where fork is not used (macOS, Windows): the dataset is pickled into a spawned child.
    paths = id_shards([30, 25])
    expected = modes.ids(iter(tt.TFRecordDataset(paths, spec=SPEC, batch_size=8, seed=2, threads=2)))
    monkeypatch.setattr(loading_process, "start_method", lambda: "spawn")
    ds = tt.TFRecordDataset(paths, spec=SPEC, batch_size=8, seed=2, threads=2, process=True)
    assert modes.ids(iter(ds)) == expected
    local = tt.TFRecordDataset(paths, spec=SPEC, batch_size=8, transform=lambda b: b, threads=2, process=True)
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError), match="pickle"):
        next(iter(local))  # a transform a spawned process cannot import: said at the start
    modes.no_process_left()
