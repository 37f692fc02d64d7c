"""Remote reads that a slow request cannot stall: deadlines, hedged requests, and a fault matrix.

The pure policy (records/remote/deadlines.py) is checked by itself; hedging's bookkeeping
against a store in memory whose first answer comes late and wrong; then the fault matrix,
through the test proxy in front of moto's S3 server on 127.0.0.1: GETs never answered, answered
at 10 KB/s, bodies reset or cut short, a 503 storm, an object replaced mid-epoch, the cache's
disk full mid-download and a rank killed while writing to the cache. Each with 0 and 2 workers
(and all but the killed rank with 2 threads too), asserting the exact records of the same shards
read from local disk and a bound on the time.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from remote_servers import FaultProxy, moto_server, s3_options
from torch.utils.data import DataLoader

import torch_tfrecord as tt
from torch_tfrecord.records import remote
from torch_tfrecord.records.remote import cached as cached_module
from torch_tfrecord.records.remote import hedged
from torch_tfrecord.records.remote.cache import ShardCache
from torch_tfrecord.records.remote.cache_dir import CacheWriteError
from torch_tfrecord.records.remote.cached import download, file_version
from torch_tfrecord.records.remote.deadlines import (
    HedgeBudget,
    LatencyTracker,
    ReadPolicy,
    Timing,
    size_class,
)

pytest.importorskip("s3fs")

SPEC = {"id": tt.FixedLen((), torch.int64), "blob": tt.FixedLen((), bytes)}
SHARDS, PER_SHARD, BLOB = 12, 20, 4000  # 12 shards of ~80 KB: one GET each into the cache
BIG_SHARDS, BIG_PER_SHARD = 2, 80  # 2 shards of ~320 KB: two GETs each (256 KiB, then the rest)


def _records(count: int, salt: int = 0) -> Iterator[dict[str, Any]]:
    for i in range(count):
        yield {"id": i, "blob": bytes([(i + salt) % 251]) * BLOB}


def _write(prefix: str, shards: int, per_shard: int, options: dict[str, Any] | None = None) -> None:
    with tt.ShardedExampleWriter(prefix, max_records=per_shard, storage_options=options) as writer:
        for record in _records(shards * per_shard):
            writer.write(record)


def _epoch(dataset: tt.TFRecordDataset, workers: int) -> list[tuple[int, int, bytes]]:
    """(record id, id, blob) of every sample of one epoch, in loader order."""
    loader = DataLoader(dataset, batch_size=None, num_workers=workers)
    return [
        (rid, i, blob)
        for batch in loader
        for rid, i, blob in zip(
            batch[tt.RECORD_ID_KEY].tolist(), batch["id"].tolist(), batch["blob"], strict=True
        )
    ]


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """The S3 endpoint, with the shards under s3://faults/small/ and s3://faults/big/; and the
    local folder with the same shards."""
    import fsspec

    local = tmp_path_factory.mktemp("local")
    _write(str(local / "small" / "train"), SHARDS, PER_SHARD)
    _write(str(local / "big" / "train"), BIG_SHARDS, BIG_PER_SHARD)
    with moto_server() as endpoint:
        options = s3_options(endpoint)
        fsspec.filesystem("s3", **options).mkdir("faults")
        _write("s3://faults/small/train", SHARDS, PER_SHARD, options)
        _write("s3://faults/big/train", BIG_SHARDS, BIG_PER_SHARD, options)
        yield endpoint, str(local)


@pytest.fixture(autouse=True)
def fresh_latencies() -> Iterator[None]:
    """Each test starts with no latency measured (its first reads are not hedged, their deadline
    2 s and 1 s per MB)."""
    hedged.reset()
    yield
    hedged.reset()


@contextlib.contextmanager
def _policy(**changes: Any) -> Iterator[None]:
    previous = remote.set_read_policy(ReadPolicy(**changes))
    try:
        yield
    finally:
        remote.set_read_policy(previous)


def _dataset(source: str, options: dict[str, Any], **kwargs: Any) -> tt.TFRecordDataset:
    kwargs.setdefault("shuffle", "global")
    return tt.TFRecordDataset(source, spec=SPEC, seed=7, batch_size=16, storage_options=options, **kwargs)


def _options(proxy: FaultProxy) -> dict[str, Any]:
    # botocore's own retries off, so that every fault reaches ours (each proxy has a port of its
    # own, and so its own file system and connections).
    return s3_options(proxy.url, config_kwargs={"retries": {"total_max_attempts": 1}})


# ---------------------------------------------------------------- the pure policy


def test_size_classes() -> None:
    assert [size_class(n) for n in (None, 0, 64 << 10)] == [0, 0, 0]
    assert [size_class(n) for n in ((64 << 10) + 1, 256 << 10, (256 << 10) + 1, 1 << 20)] == [1, 1, 2, 2]
    assert [size_class(n) for n in ((1 << 20) + 1, 4 << 20, (4 << 20) + 1, 1 << 40)] == [3, 3, 4, 4]


def test_deadlines_follow_the_measured_latencies_within_floor_and_ceiling() -> None:
    policy = ReadPolicy(floor=0.5, ceiling=8.0, multiplier=4.0, min_hedge=0.01, min_samples=10)
    tracker = LatencyTracker(window=100)
    cold = policy.timing(tracker, "s3://b", 1_000_000)
    assert (cold.hedge_at, cold.deadline) == (None, 3.0)  # nothing measured: 2 s + 1 s per MB, no hedge
    for i in range(100):
        tracker.add("s3://b", 1000, 0.02 + i / 1000)  # 20 .. 119 ms
    warm = policy.timing(tracker, "s3://b", 1000)
    assert warm.hedge_at == pytest.approx(0.115) and warm.deadline == pytest.approx(0.5)  # 4 x 0.119: floored
    assert policy.timing(tracker, "s3://b", 1000, attempt=3).deadline == pytest.approx(
        2.0
    )  # doubled per retry
    assert policy.timing(tracker, "s3://b", 1000, attempt=9).deadline == 8.0  # never past the ceiling
    # A class with too few latencies of its own takes its deadline from the store's, and is not
    # hedged; another store has none.
    assert policy.timing(tracker, "s3://b", 10 << 20) == Timing(None, pytest.approx(0.5))
    assert policy.timing(tracker, "gs://other", 1000).deadline == pytest.approx(2.001)
    for _ in range(100):
        tracker.add("s3://b", 10 << 20, 1.5)
    big = policy.timing(tracker, "s3://b", 10 << 20)
    assert big.hedge_at == 1.5 and big.deadline == 6.0
    assert ReadPolicy(hedge=False).timing(tracker, "s3://b", 1000).hedge_at is None
    with pytest.raises(ValueError, match="floor"):
        ReadPolicy(floor=5, ceiling=1)
    with pytest.raises(ValueError, match="multiplier"):
        ReadPolicy(multiplier=0.5)


def test_the_hedge_budget_is_a_share_of_requests_and_bounded_in_flight() -> None:
    budget = HedgeBudget(share=0.05, burst=2, in_flight=1)
    assert budget.try_hedge() and not budget.try_hedge()  # one at a time
    budget.hedge_done()
    assert budget.try_hedge()
    budget.hedge_done()
    assert not budget.try_hedge()  # the burst is spent
    sent = 0
    for _ in range(1000):
        budget.requested()
        if budget.try_hedge():
            sent += 1
            budget.hedge_done()
    assert sent == 50  # 5% of the requests


def test_a_child_forked_while_the_latencies_are_locked_still_measures() -> None:
    """A DataLoader worker forked while another thread of its parent held the tracker's lock
    keeps the parent's latencies and a lock of its own."""
    tracker = hedged._PROCESS.tracker
    tracker.add("s3://b", 1000, 0.25)
    with tracker._lock:  # (another thread's read, at the moment of the fork)
        pid = os.fork()
        if pid == 0:  # the child: exits 0 if it can measure (a lock held forever: SIGALRM ends it)
            signal.alarm(10)
            tracker.add("s3://b", 1000, 0.25)
            os._exit(0 if tracker.quantiles("s3://b", 0, 2) == (0.25, 0.25) else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


# ---------------------------------------------------------------- hedging's bookkeeping


def test_a_hedge_wins_over_a_late_wrong_answer_that_reaches_neither_batch_nor_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fsspec.implementations.memory as memory

    data = bytes(range(256)) * 64
    fs = remote.filesystem("memory://")[0]
    fs.pipe_file("/hedge/blob", data)
    cat_file = memory.MemoryFileSystem.cat_file
    calls: list[float] = []
    loser_done = threading.Event()

    def first_slow_and_wrong(self: Any, path: str, start: Any = None, end: Any = None, **kw: Any) -> Any:
        calls.append(time.monotonic())
        if len(calls) % 2 == 1:  # each read's first copy: late, and not the object's bytes
            time.sleep(0.4)
            loser_done.set()
            return b"\xff" * ((end or len(data)) - (start or 0))
        return cat_file(self, path, start=start, end=end, **kw)

    with _policy(min_samples=1, min_hedge=0.01):
        assert remote.read_bytes("memory://hedge/blob") == data  # a latency measured: hedges from now on
        monkeypatch.setattr(memory.MemoryFileSystem, "cat_file", first_slow_and_wrong)
        before = remote.read_counts()
        file = remote.RemoteFile("memory://hedge/blob", len(data), read_ahead=0)
        start = time.monotonic()
        assert file.read_ranges([100], [1000]) == [data[100:1100]]
        assert time.monotonic() - start < 0.3 and file.requests == 2  # the hedge answered
        loser_done.wait(2)
        time.sleep(0.05)
        cache = ShardCache(tmp_path / "cache")
        path = download(cache, "memory://hedge/blob", len(data), "")
        loser_done.clear()
        assert loser_done.wait(2)  # the download's loser finished after the copy was made ...
        time.sleep(0.05)
        assert path is not None and Path(path).read_bytes() == data  # ... and wrote nothing into it
        after = remote.read_counts()
    assert after.hedges_sent - before.hedges_sent == 2 and after.hedges_won - before.hedges_won == 2


def test_with_hedging_off_a_read_past_its_deadline_is_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    import fsspec.implementations.memory as memory

    remote.filesystem("memory://")[0].pipe_file("/deadline/blob", b"0123456789")
    cat_file = memory.MemoryFileSystem.cat_file
    calls = []

    def first_stalls(self: Any, path: str, *args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            time.sleep(1.0)
        return cat_file(self, path, *args, **kwargs)

    monkeypatch.setattr(memory.MemoryFileSystem, "cat_file", first_stalls)
    with _policy(hedge=False, floor=0.1, ceiling=0.2):
        before = remote.read_counts()
        start = time.monotonic()
        assert remote.read_bytes("memory://deadline/blob") == b"0123456789"
        assert time.monotonic() - start < 0.9
        after = remote.read_counts()
    assert after.deadline_retries - before.deadline_retries == 1 and after.hedges_sent == before.hedges_sent
    assert len(calls) == 2


# ---------------------------------------------------------------- the fault matrix


# The loaders a fault meets: the main process, two DataLoader workers, two threads of ours.
LOADERS = pytest.mark.parametrize(
    ("workers", "threads"), [(0, 0), (2, 0), (0, 2)], ids=["main", "2-workers", "2-threads"]
)


@LOADERS
@pytest.mark.parametrize(
    ("fault", "bound_s"),
    [
        ({"hang_every": 5}, 8.0),  # never answered: s3fs waits 15 s for it, then retries
        ({"slow_every": 5, "slow_rate": 10_000}, 8.0),  # 10 KB/s: 8 s for one ~80 KB shard
        ({"reset_every": 4}, 8.0),
        ({"short_every": 4}, 8.0),
    ],
    ids=["never-answered", "10KB/s", "reset-mid-body", "short-body"],
)
def test_faults_lose_and_repeat_nothing_within_a_bound(
    stores: tuple[str, str], fault: dict[str, Any], bound_s: float, workers: int, threads: int
) -> None:
    endpoint, local = stores
    expected = _epoch(_dataset(os.path.join(local, "small"), {}), workers=0)
    with FaultProxy(endpoint, **fault) as proxy:
        dataset = _dataset("s3://faults/small/", _options(proxy), threads=threads)
        start = time.monotonic()
        got = _epoch(dataset, workers)
        seconds = time.monotonic() - start
        faults = proxy.faults
    assert got == expected
    assert faults >= 2, proxy.outcomes()
    assert seconds < bound_s, (seconds, proxy.log)
    if "hang_every" in fault or "slow_every" in fault:
        # Each stalled GET was let go by the reader (its hedge answered first, or its deadline
        # passed) long before s3fs's own 15 s read timeout. One begun in the epoch's last tenth of
        # a second (a shard's download into the node's cache, which goes on past the epoch, or a
        # read let go then: the proxy sees a client gone only when a write fails, a step or two
        # later) may still be open when the proxy stops: the epoch had ended without it. Such a one
        # is younger than a read's first deadline (by then the reader lets any read go).
        stalled = [entry for entry in proxy.log if entry[4].startswith(("hung", "slow"))]
        first_deadline = remote.ReadPolicy().first_deadline
        let_go = [
            entry
            for entry in stalled
            if "gone" in entry[4] or (entry[4].endswith("proxy stopped") and entry[1] < first_deadline)
        ]
        assert stalled and let_go == stalled and all(entry[1] < 5.0 for entry in stalled), stalled


@LOADERS
def test_a_slowdown_storm_of_two_seconds_is_waited_out(
    stores: tuple[str, str], workers: int, threads: int
) -> None:
    endpoint, local = stores
    expected = _epoch(_dataset(os.path.join(local, "small"), {}), workers=0)
    retries = remote.RetryPolicy(attempts=8, initial_delay=0.1, max_delay=1.0)  # ~2.2-4.5 s in all
    previous = remote.set_retry_policy(retries)
    try:
        with FaultProxy(endpoint) as proxy:
            dataset = _dataset("s3://faults/small/", _options(proxy), threads=threads)
            proxy.storm(2.0)  # from the epoch's first object GET on
            start = time.monotonic()
            got = _epoch(dataset, workers)
            seconds = time.monotonic() - start
            storm = proxy.outcomes().get("503", 0)
    finally:
        remote.set_retry_policy(previous)
    assert got == expected
    assert storm >= 2 and 2.0 <= seconds < 10.0, (storm, seconds)


@pytest.mark.usefixtures("fast_retries")
@LOADERS
def test_an_object_replaced_mid_epoch_is_an_error_naming_it_never_mixed_bytes(
    stores: tuple[str, str], workers: int, threads: int
) -> None:
    endpoint, local = stores
    options = s3_options(endpoint)
    prefix = f"s3://faults/replaced{workers}-{threads}/train"
    _write(prefix, SHARDS, PER_SHARD, options)
    original = {i: blob for _, i, blob in _epoch(_dataset(os.path.join(local, "small"), {}), workers=0)}
    new_prefix = f"s3://faults/new{workers}-{threads}/train"
    with tt.ShardedExampleWriter(new_prefix, max_records=PER_SHARD, storage_options=options) as writer:
        for record in _records(SHARDS * PER_SHARD, salt=1):  # the same sizes, other bytes
            writer.write(record)
    name = f"train-{SHARDS - 1:05d}-of-{SHARDS:05d}.tfrecord"
    last = f"{prefix.rpartition('/')[0]}/{name}"  # read last: not fetched after the first batch
    dataset = _dataset(f"{prefix}-*.tfrecord", options, shuffle=False, threads=threads)
    loader = iter(DataLoader(dataset, batch_size=None, num_workers=workers))
    delivered = []
    batch = next(loader)
    delivered += list(zip(batch["id"].tolist(), batch["blob"], strict=True))
    fs = remote.filesystem(last, options)[0]
    fs.copy(f"{new_prefix.rpartition('/')[0]}/{name}".removeprefix("s3://"), last.removeprefix("s3://"))
    replaced_at = time.monotonic()
    with pytest.raises(tt.TFRecordError) as info:
        for batch in loader:
            delivered += list(zip(batch["id"].tolist(), batch["blob"], strict=True))
    assert last in str(info.value), str(info.value)
    assert all(blob == original[i] for i, blob in delivered)  # the old bytes only, each whole
    assert time.monotonic() - replaced_at < 10


@pytest.mark.usefixtures("fast_retries")
@LOADERS
def test_the_cache_disk_full_mid_download_reads_on_from_the_store_with_one_warning(
    stores: tuple[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    workers: int,
    threads: int,
) -> None:
    endpoint, local = stores
    expected = _epoch(_dataset(os.path.join(local, "big"), {}), workers=0)
    writes = {"count": 0}
    real_writing = cached_module.writing

    @contextlib.contextmanager
    def full_after_the_first_chunk(what: str) -> Iterator[None]:
        writes["count"] += 1
        if writes["count"] >= 2:  # the second chunk of the first shard: the disk is full
            raise CacheWriteError(errno.ENOSPC, f"cannot write {what}: [Errno 28] No space left on device")
        with real_writing(what):
            yield

    monkeypatch.setattr(cached_module, "writing", full_after_the_first_chunk)
    with FaultProxy(endpoint) as proxy, caplog.at_level(logging.WARNING, "torch_tfrecord"):
        dataset = _dataset("s3://faults/big/", _options(proxy), cache_dir=tmp_path / "cache", threads=threads)
        start = time.monotonic()
        got = _epoch(dataset, workers)
    assert got == expected and time.monotonic() - start < 30
    if workers == 0:  # (a worker's warning is logged in the worker; threads log in this process)
        warnings = [r for r in caplog.records if "cannot be used" in r.getMessage()]
        assert len(warnings) == 1 and "No space left" in warnings[0].getMessage()
    assert not list((tmp_path / "cache" / "copies").iterdir())  # nothing half-written kept


_KILLED_RANK = """
import json, sys
import torch
import torch_tfrecord as tt
from torch.utils.data import DataLoader
source, options, cache_dir = json.loads(sys.argv[1])
spec = {"id": tt.FixedLen((), torch.int64), "blob": tt.FixedLen((), bytes)}
dataset = tt.TFRecordDataset(source, spec=spec, batch_size=16, storage_options=options, cache_dir=cache_dir)
print("ready", flush=True)
for batch in DataLoader(dataset, batch_size=None, num_workers=0):
    pass
"""


@pytest.mark.usefixtures("fast_retries")
@pytest.mark.parametrize("workers", [0, 2])
def test_a_rank_killed_while_writing_the_cache_leaves_a_cache_the_next_run_recovers(
    stores: tuple[str, str], tmp_path: Path, workers: int
) -> None:
    endpoint, local = stores
    cache_dir = tmp_path / "cache"
    partial = cache_dir / "partial"
    with FaultProxy(endpoint, slow_every=1, slow_rate=200_000) as proxy:  # ~1.6 s a big shard
        args = json.dumps(["s3://faults/big/", _options(proxy), str(cache_dir)])
        child = subprocess.Popen(
            [sys.executable, "-c", _KILLED_RANK, args], stdout=subprocess.PIPE, env=os.environ.copy()
        )
        try:
            assert child.stdout is not None and child.stdout.readline() == b"ready\n"
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not (
                partial.is_dir() and any(p.stat().st_size > 0 for p in partial.iterdir())
            ):
                time.sleep(0.01)
            assert partial.is_dir() and any(p.stat().st_size > 0 for p in partial.iterdir())
        finally:
            os.kill(child.pid, signal.SIGKILL)
            child.wait()
    expected = _epoch(_dataset(os.path.join(local, "big"), {}), workers=0)
    with FaultProxy(endpoint) as proxy:
        dataset = _dataset("s3://faults/big/", _options(proxy), cache_dir=cache_dir)
        start = time.monotonic()
        assert _epoch(dataset, workers) == expected
        assert time.monotonic() - start < 30
    assert not list(partial.iterdir())
    cache = ShardCache(cache_dir)
    assert len(cache.entries()) >= BIG_SHARDS and all(e.complete for e in cache.entries())
    for entry in cache.entries():
        if entry.url.endswith(".tfrecord"):
            name = entry.url.rpartition("/")[2]
            assert Path(entry.path).read_bytes() == Path(local, "big", name).read_bytes()
    assert all(
        file_version(remote.file_info(e.url, s3_options(endpoint))) == e.version for e in cache.entries()
    )
