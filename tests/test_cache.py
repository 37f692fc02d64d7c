"""The node-local cache of remote shards (records/remote/cache.py, cached.py; data/order/schedule.py).

The pure parts (sizes, eviction order, schedules) are checked by themselves; the rest against
real servers on 127.0.0.1 (moto's S3 server, the GCS emulator) behind a proxy that counts the
bytes of every GET the server answers: what the readers fetched. Ranks are real gloo processes
with real DataLoader workers; a killed download is a real SIGKILL.
"""

from __future__ import annotations

import gzip
import itertools
import json
import logging
import math
import os
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from gloo import gather_ranks
from remote_servers import FaultProxy, gcs_emulator, moto_server, s3_options
from torch.utils.data import DataLoader

import torch_tfrecord as tt
from torch_tfrecord.data.order.plan import EpochPlan, WorkerSlice
from torch_tfrecord.data.order.schedule import shard_uses
from torch_tfrecord.records import remote
from torch_tfrecord.records.remote import cache as cache_module
from torch_tfrecord.records.remote import cache_entries as cache_entries_module
from torch_tfrecord.records.remote.cache import ShardCache, cache_key, parse_size
from torch_tfrecord.records.remote.cache_dir import read_small
from torch_tfrecord.records.remote.cached import CachedFile, download, file_version
from torch_tfrecord.records.remote.eviction import choose_victims, next_use

pytest.importorskip("s3fs")
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")

SPEC = {"id": tt.FixedLen((), torch.int64), "blob": tt.FixedLen((), bytes)}
N = 2000
SHARD = 250  # records per shard: 8 shards of ~260 KB

# conftest: retries in milliseconds; no hedged reads, since these tests count the bytes fetched
pytestmark = pytest.mark.usefixtures("fast_retries", "no_hedges")


def _records(salt: int = 0) -> Iterator[dict[str, Any]]:
    for i in range(N):
        yield {"id": i, "blob": bytes([(i + salt) % 251]) * 1000}


def _options(proxy: FaultProxy) -> dict[str, Any]:
    return s3_options(proxy.url)


def _shard_bytes(by_path: dict[str, int], suffix: str = ".tfrecord") -> int:
    return sum(count for path, count in by_path.items() if path.endswith(suffix))


def _ids(dataset: tt.TFRecordDataset, workers: int = 2) -> list[int]:
    loader = DataLoader(dataset, batch_size=None, num_workers=workers)
    return [i for batch in loader for i in batch["id"].tolist()]


@pytest.fixture(scope="module")
def s3() -> Iterator[tuple[str, int]]:
    """The endpoint, with 8 shards (and indexes) under s3://bucket/c/; and their bytes."""
    import fsspec

    with moto_server() as endpoint:
        options = s3_options(endpoint)
        fs = fsspec.filesystem("s3", **options)
        fs.mkdir("bucket")
        with tt.ShardedExampleWriter(
            "s3://bucket/c/train", max_records=SHARD, storage_options=options
        ) as writer:
            for record in _records():
                writer.write(record)
        data = sum(fs.size(p) for p in fs.glob("bucket/c/*.tfrecord"))
        yield endpoint, data


# ---------------------------------------------------------------- pure parts


def test_parse_size() -> None:
    assert parse_size(4096) == parse_size("4096") == 4096
    assert parse_size("50GB") == 50 * 10**9
    assert parse_size("1.5 GiB") == int(1.5 * 2**30)
    assert parse_size("200M") == 200 * 10**6
    assert parse_size("3KiB") == 3072
    for bad in ("lots", "-5", "5 XB"):
        with pytest.raises(ValueError, match="size"):
            parse_size(bad)


def test_next_use_and_the_victims_follow_the_order() -> None:
    schedules = [{"a": [(0.0, 0.2), (1.5, 1.6)], "b": [(0.4, 0.5)]}, {"b": [(0.3, 0.35)], "c": [(0.9, 1.0)]}]
    assert next_use("a", schedules, 0.1) == 0.1  # in use
    assert next_use("a", schedules, 0.1, after_current=True) == 1.5  # the use after this one
    assert next_use("b", schedules, 0.1) == 0.3  # the sooner of two readers
    # Two readers' uses back to back are one visit: caching "b" for it gains nothing later.
    assert next_use("b", schedules, 0.28, after_current=True, ahead=0.06) == math.inf
    assert next_use("a", schedules, 0.1, after_current=True, ahead=0.05) == 1.5
    assert next_use("a", schedules, 0.3) == 1.5
    assert next_use("z", schedules, 0.3) == math.inf
    # (key, size, next use, last access): needed latest first, never one needed sooner than the incoming
    candidates = [("soon", 10, 0.5, 1.0), ("late", 10, 2.0, 1.0), ("never", 10, math.inf, 5.0)]
    assert choose_victims(candidates, 15, 0.4) == ["never", "late"]
    assert choose_victims(candidates, 15, 3.0) is None  # only "never" may go: not enough, do not cache
    assert choose_victims(candidates, 5, 1.0) == ["never"]
    assert choose_victims(candidates, 0, 9.0) == []
    # Among equals, the least recently used first.
    assert choose_victims([("new", 1, math.inf, 9.0), ("old", 1, math.inf, 1.0)], 1, 0.0) == ["old"]


@pytest.mark.parametrize("shuffle", ["global", "shards", "block:16"])
def test_shard_uses_cover_every_record_read(shuffle: str) -> None:
    sizes = (30, 50, 20, 40)
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    plan = EpochPlan(sizes, world_size=1, rank=0, batch_size=10, drop_last=True, shuffle=shuffle, seed=1)
    for workers in (WorkerSlice(1, 0, 1), WorkerSlice(2, 1, 1)):
        uses = shard_uses(plan, 3, workers, starts)
        assert set(uses) == set(range(4))
        for spans in uses.values():
            ((first, last),) = spans
            assert 3 <= first <= last < 4
    if shuffle == "shards":  # one shard after another: spans that do not overlap
        spans = sorted(span for (span,) in shard_uses(plan, 0, WorkerSlice(1, 0, 1), starts).values())
        assert all(a[1] < b[0] for a, b in itertools.pairwise(spans))


def test_the_limit_holds_while_downloads_are_reserved(tmp_path: Path) -> None:
    cache = ShardCache(tmp_path, 100)
    one, two = cache_key("s3://b/one"), cache_key("s3://b/two")
    lock = cache.try_lock(one)  # a download holds its shard's lock while it runs
    assert lock is not None and cache.try_lock(one) is None
    assert cache.reserve("s3://b/one", 60, "v1")
    assert not cache.reserve("s3://b/two", 60, "v1")  # one is still downloading: not evictable
    Path(cache.part_path(one)).write_bytes(b"x" * 60)
    cache.commit(one)
    lock.release()
    assert cache.lookup("s3://b/one", 60, "v1") is not None
    assert cache.reserve("s3://b/two", 60, "v1")  # evicts the complete one (least recently used)
    assert cache.lookup("s3://b/one", 60, "v1") is None and cache.usage() == 60
    # A copy of another version is no copy: removed on lookup.
    Path(cache.part_path(two)).write_bytes(b"y" * 60)
    cache.commit(two)
    assert cache.lookup("s3://b/two", 60, "v2") is None and cache.entries() == []
    # A reservation whose downloader died (its lock free) is no reservation.
    assert cache.reserve("s3://b/one", 60, "v1") and cache.reserve("s3://b/two", 60, "v1")


@pytest.mark.parametrize("limit", [None, "1GB"])
def test_a_reservation_reads_no_entrys_metadata_while_there_is_room(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, limit: str | None
) -> None:
    # Reading every entry's metadata at every reservation made a node caching 2,000 shards spend
    # minutes reserving (quadratic); with room, a reservation reads a fixed number of small files.
    cache = ShardCache(tmp_path, limit)

    def add(url: str) -> None:
        assert cache.reserve(url, 10, "v1")
        Path(cache.part_path(cache_key(url))).write_bytes(b"x" * 10)
        cache.commit(cache_key(url))

    for i in range(300):
        add(f"s3://b/s{i}")
    reads: list[str] = []

    def counted(path: str, *args: Any) -> bytes | None:
        reads.append(path)
        return read_small(path, *args)

    monkeypatch.setattr(cache_module, "read_small", counted)
    monkeypatch.setattr(cache_entries_module, "read_small", counted)
    for i in range(20):
        add(f"s3://b/new{i}")
    assert len(reads) <= 20 * 3, reads[:10]  # cache.json and the downloads under way (here: none)
    assert cache.usage() == 320 * 10


def test_a_read_does_not_wait_for_a_download_queued_behind_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A global shuffle's first batches queue hundreds of downloads; a read that waited for its
    # shard's turn in the queue (up to the stall limit, 30 s, each) made 8 ranks on one node take
    # minutes to their first batch. A download not yet running is not waited for: the read runs
    # it itself (the node still fetches the shard once).
    from concurrent.futures import Future

    from torch_tfrecord.records.remote import cached as cached_module

    url = "memory://queued/shard.bin"
    remote.write_bytes(url, bytes(range(256)) * 4)
    queued: list[Future[str | None]] = []

    class Backlog:
        def submit(self, call: Any) -> Future[str | None]:
            queued.append(Future())  # (never started: the pool is busy with others)
            return queued[-1]

    def no_waiting(seconds: float) -> None:
        raise AssertionError("the read waited for a download that had not started")

    monkeypatch.setattr(cached_module, "_DOWNLOADS", Backlog())
    monkeypatch.setattr(cached_module.time, "sleep", no_waiting)
    file = CachedFile(url, 1024, file_version(remote.file_info(url)), None, ShardCache(tmp_path / "c"))
    assert file.read_ranges([10, 500], [4, 3]) == [bytes([10, 11, 12, 13]), bytes([244, 245, 246])]
    assert len(queued) == 1 and queued[0].cancelled()  # taken out of the queue, and run here
    assert file.local_path() is not None


def test_an_index_another_process_is_fetching_is_read_from_its_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 8 ranks of a node starting together fetched every index once each (2,187 requests per rank
    # at 2,000 shards): one waiting for another's download read the store instead.
    from torch_tfrecord.records.remote import cached as cached_module
    from torch_tfrecord.records.remote.cached import read_through

    cache = ShardCache(tmp_path / "c")
    url, data = "memory://fetching/a.tfrecord.idx", b"0 20\n20 20\n"
    remote.write_bytes(url, data)
    key, version = cache_key(url), file_version(remote.file_info(url))
    lock = cache.try_lock(key)  # another process is fetching it
    assert lock is not None

    def other_process_finishes() -> None:
        assert cache.reserve(url, len(data), version)
        Path(cache.part_path(key)).write_bytes(data)
        cache.commit(key)
        lock.release()

    def no_store(*args: Any) -> bytes:
        raise AssertionError("read from the store while another process was fetching it")

    monkeypatch.setattr(cached_module, "read_bytes", no_store)
    monkeypatch.setattr(cached_module, "_fetch", no_store)
    finisher = threading.Timer(0.2, other_process_finishes)
    finisher.start()
    try:
        assert read_through(cache, url) == data
    finally:
        finisher.join()


def test_leftovers_of_dead_processes_are_removed_at_open(tmp_path: Path) -> None:
    cache = ShardCache(tmp_path, "1MB")
    for name in ("s3://b/dead", "s3://b/alive"):
        assert cache.reserve(name, 10, "v")
        Path(cache.part_path(cache_key(name))).write_bytes(b"part")
    held = cache.key_lock(cache_key("s3://b/alive"))
    ready = threading.Event()
    release = threading.Event()

    def hold() -> None:  # another holder of the lock (flock: another open file)
        with held:
            ready.set()
            release.wait(10)

    thread = threading.Thread(target=hold)
    thread.start()
    ready.wait(10)
    try:
        reopened = ShardCache(tmp_path, "1MB")
        assert [e.url for e in reopened.entries()] == ["s3://b/alive"]
        assert not os.path.exists(reopened.part_path(cache_key("s3://b/dead")))
        assert os.path.exists(reopened.part_path(cache_key("s3://b/alive")))
    finally:
        release.set()
        thread.join()
    ShardCache(tmp_path, "1MB")
    assert ShardCache(tmp_path).entries() == []


# ---------------------------------------------------------------- against the S3 server


@pytest.mark.parametrize("shuffle", ["global", "block:64"])
def test_the_default_fetches_each_shard_once_per_epoch(s3: tuple[str, int], shuffle: str) -> None:
    endpoint, data = s3
    with FaultProxy(endpoint) as proxy:
        ds = tt.TFRecordDataset(
            "s3://bucket/c/", spec=SPEC, batch_size=100, shuffle=shuffle, storage_options=_options(proxy)
        )
        assert ds.files.cache is not None and ds.files.cache.temporary
        ids = _ids(ds)
        assert sorted(ids) == list(range(N))
        fetched = _shard_bytes(proxy.get_bytes_by_path)
        assert data <= fetched <= 1.1 * data, (fetched, data)


def _job(prefix: str, options: dict[str, Any], cache_dir: str, counts_url: str, epochs: list[int]) -> Any:
    """One rank of a job: the ids of each epoch (2 DataLoader workers) and the proxy's counts after it."""
    import torch.distributed as dist

    ds = tt.TFRecordDataset(prefix, spec=SPEC, batch_size=50, storage_options=options, cache_dir=cache_dir)
    out = []
    for epoch in epochs:
        ds.set_epoch(epoch)
        ids = _ids(ds)
        dist.barrier()
        with urllib.request.urlopen(counts_url) as answer:
            counts = json.loads(answer.read())
        dist.barrier()
        out.append({"ids": ids, "by_path": counts["by_path"]})
    return out


def test_two_ranks_two_workers_share_one_download_and_a_second_job_fetches_nothing(
    s3: tuple[str, int], tmp_path: Path
) -> None:
    endpoint, data = s3
    cache_dir = str(tmp_path / "cache")
    with FaultProxy(endpoint) as proxy:
        args = ("s3://bucket/c/", _options(proxy), cache_dir, proxy.url + "/__counts__")
        ranks = gather_ranks(_job, 2, (*args, [0, 1]), 480, tmp_path / "out.json")
        for epoch in (0, 1):
            ids = ranks[0][epoch]["ids"] + ranks[1][epoch]["ids"]
            assert sorted(ids) == list(range(N))
        first, second = ranks[0][0]["by_path"], ranks[0][1]["by_path"]
        assert data <= _shard_bytes(first) <= 1.1 * data  # one download per shard for the node
        assert second == first  # the second epoch: nothing more from the store
        proxy.reset()
        job = gather_ranks(_job, 2, (*args, [2]), 480, tmp_path / "out2.json")
        assert sorted(job[0][0]["ids"] + job[1][0]["ids"]) == list(range(N))
        assert _shard_bytes(proxy.get_bytes_by_path) == 0  # a second job: no shard fetched
        assert _shard_bytes(proxy.get_bytes_by_path, ".idx") == 0  # nor an index
    assert {e.complete for e in ShardCache(cache_dir).entries()} == {True}


_EQUAL_IDS = range(128, 4128)  # every id a two-byte varint: every record, so every shard, one size


def test_a_quarter_of_the_data_in_the_cache_serves_a_fifth_of_the_next_epoch(
    s3: tuple[str, int], tmp_path: Path
) -> None:
    """40 shards of 100 records, all of one size (ids of one varint length), so a quarter of the
    data holds exactly 10 of them and the best second epoch fetches 0.75x; read in batches of 50
    by 2 workers, shards in a new order each epoch: the cache keeps, at the end of epoch 0, the
    shards epoch 1 needs first (and never lets a shard read once push them out)."""
    import fsspec

    endpoint, _ = s3
    options = s3_options(endpoint)
    with tt.ShardedExampleWriter("s3://bucket/q/train", max_records=100, storage_options=options) as writer:
        for i in _EQUAL_IDS:
            writer.write({"id": i, "blob": bytes([i % 251]) * 1000})
    sizes = {fsspec.filesystem("s3", **options).size(p) for p in writer.shard_paths}
    assert len(sizes) == 1, sizes  # equal shards: the limit below is exactly 10 of them
    data = sum(fsspec.filesystem("s3", **options).size(p) for p in writer.shard_paths)
    limit = data // 4
    cache_dir = tmp_path / "cache"
    peak = 0
    stop = threading.Event()

    def watch() -> None:  # the bytes on disk, every millisecond: never over the limit
        nonlocal peak
        while not stop.is_set():
            total = 0
            for folder in (cache_dir / "copies", cache_dir / "partial"):
                for name in os.listdir(folder) if folder.exists() else ():
                    try:
                        total += (folder / name).stat().st_size
                    except FileNotFoundError:
                        pass
            peak = max(peak, total)
            time.sleep(0.001)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        with FaultProxy(endpoint) as proxy:
            ds = tt.TFRecordDataset(
                "s3://bucket/q/",
                spec=SPEC,
                batch_size=50,
                shuffle="shards",
                storage_options=_options(proxy),
                cache_dir=cache_dir,
                cache_limit=limit,
            )
            fetched = []
            for epoch in (0, 1):
                proxy.reset()
                ds.set_epoch(epoch)
                assert sorted(_ids(ds)) == list(_EQUAL_IDS)
                fetched.append(_shard_bytes(proxy.get_bytes_by_path))
    finally:
        stop.set()
        watcher.join()
    assert 0 < peak <= limit
    assert ShardCache(cache_dir, limit).usage() <= limit
    assert fetched[0] <= 1.05 * data, (fetched, data)
    assert fetched[1] <= 0.8 * data, (fetched, data)  # at least 20% of the second epoch from disk


_KILLED_CHILD = """
import json, sys
from torch_tfrecord.records.remote.cache import ShardCache
from torch_tfrecord.records.remote.cached import download
options, root, url, size, version = json.loads(sys.argv[1])
cache = ShardCache(root)
print("ready", flush=True)
download(cache, url, size, version, options)
print("done", flush=True)
"""


def test_a_download_killed_at_any_moment_leaves_nothing_read_as_data(
    s3: tuple[str, int], tmp_path: Path
) -> None:
    endpoint, _ = s3
    url = "s3://bucket/c/train-00003-of-00008.tfrecord"
    options = s3_options(endpoint)
    truth = remote.read_bytes(url, options)
    version = file_version(remote.file_info(url, options))
    rng = random.Random(34)
    with FaultProxy(endpoint, latency=0.02) as proxy:
        for trial in range(20):
            root = str(tmp_path / f"cache{trial % 2}")  # a cache reused after kills, and another
            args = json.dumps([_options(proxy), root, url, len(truth), version])
            child = subprocess.Popen(
                [sys.executable, "-c", _KILLED_CHILD, args], stdout=subprocess.PIPE, env=os.environ.copy()
            )
            assert child.stdout is not None
            assert child.stdout.readline() == b"ready\n"
            time.sleep(rng.uniform(0, 0.12))
            os.kill(child.pid, signal.SIGKILL)
            child.wait()
            cache = ShardCache(root)  # opening it cleans up after the dead process
            names = os.listdir(root)
            assert not [n for n in names if n.endswith(".part")], (trial, names)
            for entry in cache.entries():
                assert entry.complete
                assert Path(entry.path).read_bytes() == truth
    path = download(ShardCache(str(tmp_path / "cache0")), url, len(truth), version, options)
    assert path is not None and Path(path).read_bytes() == truth


def test_downloads_ahead_start_a_bounded_number_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under a global shuffle every shard is needed from the epoch's start: the pool started a
    download of every one at once (20,000 queued in a rank before its first batch, ~1 s of CPU).
    Now at most FETCHES_STARTED are under way; more start as those end, until every shard
    needed is fetched, each once."""
    from remote_servers import RangedFileServer

    from torch_tfrecord.records.shard_access import ShardSpec, Storage
    from torch_tfrecord.records.shards import pool as shard_pool

    monkeypatch.setattr(shard_pool, "FETCHES_STARTED", 6)
    folder = tmp_path / "served"
    folder.mkdir()
    for i in range(40):
        (folder / f"s{i:02d}.tfrecord").write_bytes(bytes([i]) * 500)
    with RangedFileServer(str(folder), latency=0.05) as server:
        specs = [
            ShardSpec(f"{server.url}/s{i:02d}.tfrecord", 500, "cached", "", 500) for i in range(40)
        ]  # fmt: skip
        pool = shard_pool.ShardPool(specs, Storage(cache=ShardCache(str(tmp_path / "cache"))))
        order = random.Random(5).sample(range(40), 40)  # shard order[k] is first needed at k / 1000
        pool.plan({shard: [(k / 1000, 0.9)] for k, shard in enumerate(order)}, 0.0)
        assert sum(source.fetching() for source in pool.opened("cached").values()) == 6  # no more
        fetched: list[int] = []
        deadline = time.monotonic() + 60
        now = 0.0
        while len(fetched) < 40 and time.monotonic() < deadline:
            time.sleep(0.02)
            now += shard_pool.FETCH_AHEAD / 8
            pool.advance(now % 0.5)  # (within every shard's use)
            assert len(pool._fetching) <= 6
            fetched = [i for i in range(40) if pool.storage.cache.lookup(specs[i].path, 500, "") is not None]
        assert len(fetched) == 40
        assert server.requests == {"GET": 40}  # each shard once: one request, a byte longer than it
        assert server.most_at_once <= 6


def test_a_small_object_of_unknown_version_is_cached_with_one_request(tmp_path: Path) -> None:
    """One GET, a byte longer than the object, says its size: no second request to check it
    (a manifest written beside local files knows no versions); a version known is compared by a
    second request, as before; an object that grew or shrank since it was listed is refused."""
    from remote_servers import RangedFileServer

    folder = tmp_path / "served"
    folder.mkdir()
    truth = bytes(range(256)) * 12
    (folder / "a.tfrecord").write_bytes(truth)
    with RangedFileServer(str(folder)) as server:
        url = f"{server.url}/a.tfrecord"
        path = download(ShardCache(str(tmp_path / "c1")), url, len(truth), "", {})
        assert path is not None and Path(path).read_bytes() == truth
        assert server.requests == {"GET": 1}
        server.reset()
        version = file_version(remote.file_info(url, {}))
        assert version  # (the server's ETag)
        server.reset()
        path = download(ShardCache(str(tmp_path / "c2")), url, len(truth), version, {})
        assert path is not None and Path(path).read_bytes() == truth
        assert server.requests == {"GET": 1, "HEAD": 1}
        for listed, word in ((len(truth) - 1, "more"), (len(truth) + 1, "fewer")):
            cache = ShardCache(str(tmp_path / f"c{listed}"))
            with pytest.raises(tt.RemoteIOError, match=f"a.tfrecord.*has {word} than the {listed} bytes"):
                download(cache, url, listed, "", {})
            assert cache.lookup(url, listed, "") is None and not list(cache.entries())


def test_a_large_object_of_unknown_version_is_cached(tmp_path: Path) -> None:
    """An object fetched in several requests whose version nobody said (shards and a manifest
    written on a local disk, then copied to a bucket) is cached: its size checked, no version
    compared with a version the store made up since (it used to raise ObjectChangedError, '' ->
    the ETag, on every such shard larger than the first request)."""
    from remote_servers import RangedFileServer

    folder = tmp_path / "served"
    folder.mkdir()
    truth = bytes(range(256)) * 4096  # 1 MiB: four requests of the first chunk and more
    (folder / "a.tfrecord").write_bytes(truth)
    with RangedFileServer(str(folder)) as server:
        url = f"{server.url}/a.tfrecord"
        assert file_version(remote.file_info(url, {}))  # (the store has one: nobody told us)
        server.reset()
        path = download(ShardCache(str(tmp_path / "c")), url, len(truth), "", {})
        assert path is not None and Path(path).read_bytes() == truth
        assert "HEAD" not in server.requests and server.requests["GET"] > 1


def test_a_download_that_ends_while_a_reader_looks_is_read_from_the_copy(
    s3: tuple[str, int], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader that finds no copy, then no download (it ended just then: its copy appeared by a
    rename before its lock was let go), reads the copy. Before, it read from the store (through
    read-ahead: up to a whole shard again), the likely cause of the one failure seen of
    test_the_default_fetches_each_shard_once_per_epoch (more than 1.1x the data, under load)."""
    endpoint, _ = s3
    url = "s3://bucket/c/train-00000-of-00008.tfrecord"
    with FaultProxy(endpoint) as proxy:
        options = _options(proxy)
        info = remote.file_info(url, options)
        cache = ShardCache(tmp_path / "cache")
        shard = CachedFile(url, int(info["size"]), file_version(info), options, cache)
        assert shard.wait() is not None  # the copy, complete
        proxy.reset()
        local_path = shard.local_path
        looks = 0

        def racing() -> str | None:
            nonlocal looks
            looks += 1
            return None if looks == 1 else local_path()  # the first look: before the rename

        monkeypatch.setattr(shard, "local_path", racing)
        [data] = shard.read_ranges([0], [4096])
        assert _shard_bytes(proxy.get_bytes_by_path) == 0
    with open(local_path() or "", "rb") as copy:
        assert data == copy.read(4096)


def test_a_changed_object_is_fetched_again(s3: tuple[str, int], tmp_path: Path) -> None:
    endpoint, _ = s3
    options = s3_options(endpoint)
    with tt.RecordWriter("s3://bucket/chg/a.tfrecord", storage_options=options) as writer:
        for record in list(_records())[:100]:
            writer.write(tt.encode_example(record))
    cache_dir = tmp_path / "cache"
    with FaultProxy(endpoint) as proxy:
        ds = tt.TFRecordDataset(
            "s3://bucket/chg/a.tfrecord",
            spec=SPEC,
            batch_size=10,
            shuffle=False,
            storage_options=_options(proxy),
            cache_dir=cache_dir,
        )
        assert next(iter(ds))["blob"][0] == bytes([0]) * 1000
        with tt.RecordWriter("s3://bucket/chg/a.tfrecord", storage_options=options) as writer:
            for record in list(_records(salt=7))[:120]:
                writer.write(tt.encode_example(record))
        size = remote.file_info("s3://bucket/chg/a.tfrecord", options)["size"]
        proxy.reset()
        ds = tt.TFRecordDataset(
            "s3://bucket/chg/a.tfrecord",
            spec=SPEC,
            batch_size=10,
            shuffle=False,
            storage_options=_options(proxy),
            cache_dir=cache_dir,
        )
        batches = list(ds)
        assert len(batches) == 12 and batches[0]["blob"][0] == bytes([7]) * 1000
        assert _shard_bytes(proxy.get_bytes_by_path) == size  # the new object, once
    (entry,) = [e for e in ShardCache(cache_dir).entries() if e.url.endswith(".tfrecord")]
    assert entry.size == size


def test_a_damaged_copy_is_fetched_again_once_then_both_paths_are_named(
    s3: tuple[str, int], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    endpoint, _ = s3
    options = s3_options(endpoint)
    url = "s3://bucket/c/train-00001-of-00008.tfrecord"
    cache_dir = tmp_path / "cache"
    with FaultProxy(endpoint) as proxy:

        def dataset() -> tt.TFRecordDataset:
            return tt.TFRecordDataset(
                url,
                spec=SPEC,
                batch_size=50,
                shuffle=False,
                storage_options=_options(proxy),
                cache_dir=cache_dir,
            )

        first = dataset()
        assert sum(len(b["id"]) for b in first) == SHARD
        assert first.files.pool.fetch(0) is not None  # (the download may still be finishing)
        (copy,) = [e.path for e in ShardCache(cache_dir).entries() if e.url == url]
        with open(copy, "r+b") as f:  # one flipped byte in a record's payload
            f.seek(5000)
            byte = f.read(1)
            f.seek(5000)
            f.write(bytes([byte[0] ^ 0xFF]))
        proxy.reset()
        with caplog.at_level(logging.WARNING):
            ids = [i for b in dataset() for i in b["id"].tolist()]
        assert ids == list(range(SHARD, 2 * SHARD))
        assert any("fetching it again" in r.getMessage() and copy in r.getMessage() for r in caplog.records)
        assert _shard_bytes(proxy.get_bytes_by_path) == os.path.getsize(copy)  # fetched once more
        # The store's object itself damaged (its index still right): fetched again once, then named.
        damaged = bytearray(remote.read_bytes(url, options))
        damaged[5000] ^= 0xFF
        bad = "s3://bucket/bad/x.tfrecord"
        remote.write_bytes(bad, bytes(damaged), options)
        remote.write_bytes(bad + ".idx", remote.read_bytes(url + ".idx", options), options)
        proxy.reset()
        with pytest.raises(tt.errors.CorruptRecordError) as caught:
            list(
                tt.TFRecordDataset(
                    bad,
                    spec=SPEC,
                    batch_size=50,
                    shuffle=False,
                    storage_options=_options(proxy),
                    cache_dir=cache_dir,
                )
            )
        message = str(caught.value)
        assert bad in message and str(cache_dir) in message and "fetched again once" in message
        assert _shard_bytes(proxy.get_bytes_by_path) == 2 * len(damaged)


def test_shards_without_indexes_are_scanned_once_from_the_copy(s3: tuple[str, int], tmp_path: Path) -> None:
    """As TFDS directories are: no index beside the shards; plain and GZIP."""
    endpoint, _ = s3
    options = s3_options(endpoint)
    local = tmp_path / "plain.tfrecord"
    with tt.RecordWriter(str(local)) as writer:
        for record in list(_records())[:300]:
            writer.write(tt.encode_example(record))
    raw = local.read_bytes()
    remote.write_bytes("s3://bucket/noidx/a.tfrecord", raw, options)
    remote.write_bytes("s3://bucket/noidx/b.tfrecord.gz", gzip.compress(raw), options)
    cache_dir = tmp_path / "cache"
    for run in range(2):
        with FaultProxy(endpoint) as proxy:
            ds = tt.TFRecordDataset(
                "s3://bucket/noidx/",
                spec=SPEC,
                batch_size=50,
                shuffle="block:32",
                storage_options=_options(proxy),
                cache_dir=cache_dir,
            )
            ids = _ids(ds, workers=0)
            assert sorted(ids) == sorted(list(range(300)) * 2)
            by_path = proxy.get_bytes_by_path
            fetched = _shard_bytes(by_path) + _shard_bytes(by_path, ".gz")
            if run == 0:  # each downloaded once (scanned from the copy, then read from it)
                assert fetched == len(raw) + len(gzip.compress(raw))
            else:  # nothing downloaded, nothing scanned
                assert fetched == 0
    names = [e.url for e in ShardCache(cache_dir).entries()]
    assert "s3://bucket/noidx/a.tfrecord#scanned-index" in names
    assert "s3://bucket/noidx/b.tfrecord.gz#scanned-index" in names


def test_downloads_through_faults_give_the_same_records(s3: tuple[str, int], tmp_path: Path) -> None:
    endpoint, _ = s3
    with FaultProxy(endpoint, fail_every=4) as proxy:
        ds = tt.TFRecordDataset(
            "s3://bucket/c/",
            spec=SPEC,
            batch_size=100,
            seed=5,
            storage_options=_options(proxy),
            cache_dir=tmp_path / "cache",
        )
        assert sorted(_ids(ds)) == list(range(N))
        assert proxy.faults > 0


def test_the_indexed_dataset_reads_through_the_cache(s3: tuple[str, int], tmp_path: Path) -> None:
    endpoint, data = s3
    with FaultProxy(endpoint) as proxy:
        ds = tt.IndexedTFRecordDataset(
            "s3://bucket/c/",
            spec=SPEC,
            storage_options=_options(proxy),
            cache_dir=tmp_path / "cache",
            cache_limit="100MB",
        )
        loader = DataLoader(
            ds,
            batch_size=64,
            sampler=torch.utils.data.RandomSampler(ds),
            num_workers=2,
            collate_fn=tt.collate,
        )
        assert sorted(i for b in loader for i in b["id"].tolist()) == list(range(N))
        assert _shard_bytes(proxy.get_bytes_by_path) <= 1.1 * data


# ---------------------------------------------------------------- the GCS emulator


def test_gcs_shards_cached_and_a_new_generation_fetched_again(tmp_path: Path) -> None:
    pytest.importorskip("gcsfs")
    import fsspec

    with gcs_emulator() as endpoint, FaultProxy(endpoint) as proxy:
        direct = {"endpoint_url": endpoint, "token": "anon", "project": "test"}
        fsspec.filesystem("gs", **direct).mkdir("bucket")
        with tt.ShardedExampleWriter(
            "gs://bucket/g/train", max_records=500, storage_options=direct
        ) as writer:
            for record in _records():
                writer.write(record)
        options = {**direct, "endpoint_url": proxy.url, "skip_instance_cache": True}
        cache_dir = tmp_path / "cache"
        for run in range(2):
            proxy.reset()
            ds = tt.TFRecordDataset(
                "gs://bucket/g/", spec=SPEC, batch_size=100, storage_options=options, cache_dir=cache_dir
            )
            assert sorted(_ids(ds)) == list(range(N))
            fetched = sum(
                v for k, v in proxy.get_bytes_by_path.items() if ".tfrecord" in k and ".idx" not in k
            )
            if run == 0:
                sizes = sum(fsspec.filesystem("gs", **direct).size(p) for p in ds.files.paths)
                assert sizes <= fetched <= 1.1 * sizes
            else:
                assert fetched == 0
        old = [file_version(remote.file_info(path, direct)) for path in ds.files.paths]
        with tt.ShardedExampleWriter(
            "gs://bucket/g/train", max_records=500, storage_options=direct
        ) as writer:
            for record in _records(salt=3):  # other bytes, the same sizes: new generations
                writer.write(record)
        assert all(
            file_version(remote.file_info(p, direct)) != v for p, v in zip(ds.files.paths, old, strict=True)
        )
        proxy.reset()
        ds = tt.TFRecordDataset(
            "gs://bucket/g/", spec=SPEC, batch_size=100, storage_options=options, cache_dir=cache_dir
        )
        assert sorted(_ids(ds)) == list(range(N))
        first = next(iter(ds))
        assert first["blob"][0][0] == (int(first["id"][0]) + 3) % 251  # the new bytes, not the cached
        fetched = sum(v for k, v in proxy.get_bytes_by_path.items() if ".tfrecord" in k and ".idx" not in k)
        assert fetched == sizes  # every shard fetched again, once
