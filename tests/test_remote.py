"""Remote storage through fsspec, against real servers on 127.0.0.1.

An S3-compatible server (moto) and a GCS emulator are started by the fixtures below and stopped
by their PIDs; a proxy in front of them injects dropped connections, 503s and 403s. Shards are
written to each store, indexed there, read back through the datasets with two workers and a
global shuffle, and compared record for record with the same shards read from local disk.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
from remote_servers import FaultProxy, gcs_emulator, moto_server, s3_options
from torch.utils.data import DataLoader

import torch_tfrecord as tt
from torch_tfrecord.records import remote
from torch_tfrecord.records.listing import expand_sources
from torch_tfrecord.support.extras import install_hint

pytest.importorskip("fsspec")
pytest.importorskip("s3fs")

os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")

SPEC = {
    "id": tt.FixedLen((), torch.int64),
    "x": tt.FixedLen((3,), torch.float32),
    "blob": tt.VarLen(bytes),
}
N = 700

# conftest: retries in milliseconds; no hedged reads, since tests here count requests and retries
# (a hedged copy is a request more, and one that meets a fault while its first copy answers needs no
# retry: tests/test_remote_faults.py has the hedges)
pytestmark = pytest.mark.usefixtures("fast_retries", "no_hedges")


def _records() -> Iterator[dict[str, Any]]:
    for i in range(N):
        yield {"id": i, "x": [i, -i, i / 7], "blob": [bytes([i % 251]) * (i % 97)]}


def _write(prefix: str, storage_options: dict[str, Any] | None = None) -> list[str]:
    with tt.ShardedExampleWriter(prefix, max_records=160, storage_options=storage_options) as writer:
        for record in _records():
            writer.write(record)
    return writer.shard_paths


def _epoch(dataset: tt.TFRecordDataset, workers: int = 2) -> list[tuple[int, int, bytes]]:
    """(record id, id feature, blob) of every sample of one epoch, in loader order."""
    loader = DataLoader(dataset, batch_size=None, num_workers=workers)
    out = []
    for batch in loader:
        blobs = batch["blob"].to_list() if hasattr(batch["blob"], "to_list") else batch["blob"]
        for rid, i, blob in zip(batch[tt.RECORD_ID_KEY].tolist(), batch["id"].tolist(), blobs, strict=True):
            out.append((rid, i, b"".join(blob)))
    return out


@pytest.fixture(scope="module")
def local_shards(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = tmp_path_factory.mktemp("local")
    _write(str(root / "train"))
    return str(root)


@pytest.fixture(scope="module")
def s3() -> Iterator[tuple[str, dict[str, Any]]]:
    import fsspec

    with moto_server() as endpoint:
        options = s3_options(endpoint)
        fsspec.filesystem("s3", **options).mkdir("bucket")
        _write("s3://bucket/data/train", options)
        yield endpoint, options


@pytest.fixture(scope="module")
def gcs() -> Iterator[dict[str, Any]]:
    pytest.importorskip("gcsfs")
    import fsspec

    with gcs_emulator() as endpoint:
        options = {"endpoint_url": endpoint, "token": "anon", "project": "test"}
        fsspec.filesystem("gs", **options).mkdir("bucket")
        yield options


# ---------------------------------------------------------------- pure parts


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("s3://b/k", True),
        ("gs://b/k", True),
        ("https://host/x.tfrecord", True),
        ("memory://x", True),
        ("file:///tmp/x", False),
        ("/tmp/x", False),
        ("relative/x.tfrecord", False),
        ("weird name://x", False),
    ],
)
def test_is_url(path: str, expected: bool) -> None:
    assert remote.is_url(path) is expected


class _Status(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status


def _chained(outer: Exception, cause: Exception) -> Exception:
    outer.__cause__ = cause
    return outer


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (ConnectionResetError(errno.ECONNRESET, "reset by peer"), True),
        (TimeoutError("read timed out"), True),
        (OSError(errno.EBUSY, "Please reduce your request rate."), True),
        (OSError(errno.EIO, "InternalError"), True),
        (_Status(503), True),
        (_Status(429), True),
        (_Status(500), True),
        (_Status(404), False),
        (_Status(403), False),
        (_chained(RuntimeError("wrapped"), ConnectionAbortedError()), True),
        (FileNotFoundError("no such key"), False),
        (PermissionError("Access Denied"), False),
        (ValueError("bad range"), False),
        (RuntimeError("something else"), False),
    ],
)
def test_is_transient(error: Exception, transient: bool) -> None:
    assert remote.is_transient(error) is transient


def test_coalesce_merges_neighbours_within_the_gap_and_keeps_the_asked_order() -> None:
    starts, ends = [500, 0, 100, 10_000], [600, 100, 200, 10_100]
    assert remote.coalesce(starts, ends, max_gap=300) == [(0, 600, [1, 2, 0]), (10_000, 10_100, [3])]
    assert remote.coalesce(starts, ends, max_gap=0) == [
        (0, 200, [1, 2]),
        (500, 600, [0]),
        (10_000, 10_100, [3]),
    ]


def test_retry_policy_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="attempts"):
        remote.RetryPolicy(attempts=0)
    with pytest.raises(ValueError, match="initial_delay"):
        remote.RetryPolicy(initial_delay=5, max_delay=1)


def test_retrying_gives_up_after_the_attempts_and_names_the_url(caplog: pytest.LogCaptureFixture) -> None:
    calls = []

    def flaky() -> bytes:
        calls.append(1)
        raise ConnectionResetError(errno.ECONNRESET, "reset")

    remote_logger = "torch_tfrecord.records.remote"
    with caplog.at_level(logging.WARNING, remote_logger), pytest.raises(tt.RemoteIOError) as info:
        remote.retrying(flaky, "s3://b/k", "reading bytes 0..10")
    assert len(calls) == 4
    assert (
        "s3://b/k" in str(info.value) and "bytes 0..10" in str(info.value) and "4 attempts" in str(info.value)
    )
    assert [r.getMessage().split(" of ")[0] for r in caplog.records] == [
        "retry 1/3",
        "retry 2/3",
        "retry 3/3",
    ]


def test_url_without_fsspec_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "fsspec", None)
    monkeypatch.setitem(sys.modules, "fsspec.core", None)
    with pytest.raises(ImportError, match=f"needs fsspec; {re.escape(install_hint('remote'))}$"):
        list(tt.read_records("s3://bucket/train.tfrecord"))


def test_file_urls_are_local_paths(local_shards: str) -> None:
    paths = tt.TFRecordDataset(f"file://{local_shards}", spec=SPEC).files.paths
    assert paths == sorted(
        os.path.join(local_shards, name) for name in os.listdir(local_shards) if name.endswith(".tfrecord")
    )


# ---------------------------------------------------------------- memory://


def test_memory_filesystem_end_to_end(local_shards: str) -> None:
    paths = _write("memory://roundtrip/train")
    assert len(paths) == 5 and all(p.startswith("memory://roundtrip/train-") for p in paths)
    assert sorted(remote.filesystem("memory://roundtrip")[0].ls("/roundtrip", detail=False)) == sorted(
        [f"/roundtrip/{os.path.basename(p)}" for p in paths]
        + [f"/roundtrip/{os.path.basename(p)}.idx" for p in paths]
        + ["/roundtrip/train.manifest.json", "/roundtrip/train.manifest.tables.npz"]  # the manifest
    )
    local = tt.TFRecordDataset(local_shards, spec=SPEC, shuffle="global", seed=5, batch_size=64)
    local.set_epoch(0)  # each pass below is epoch 0 (a pass alone would move on to the next epoch)
    for source in ("memory://roundtrip/", "memory://roundtrip/train-*.tfrecord"):
        ds = tt.TFRecordDataset(source, spec=SPEC, shuffle="global", seed=5, batch_size=64)
        assert [os.path.basename(p) for p in ds.files.paths] == [os.path.basename(p) for p in paths]
        assert _epoch(ds, workers=0) == _epoch(local, workers=0)
    assert list(tt.read_records(paths[1])) == list(
        tt.read_records(os.path.join(local_shards, os.path.basename(paths[1])))
    )
    assert tt.count_records(paths[0]) == 160


def test_memory_writer_abort_leaves_nothing() -> None:
    fs = remote.filesystem("memory://")[0]
    with (
        pytest.raises(RuntimeError, match="boom"),
        tt.RecordWriter("memory://aborted/one.tfrecord") as writer,
    ):
        writer.write(b"payload")
        raise RuntimeError("boom")
    with (
        pytest.raises(RuntimeError, match="boom"),
        tt.ShardedExampleWriter("memory://aborted/many", max_records=1) as sharded,
    ):
        for _ in range(3):
            sharded.write(b"payload")
        raise RuntimeError("boom")
    assert not fs.exists("/aborted") or fs.ls("/aborted") == []


def test_remote_file_reads_ahead_sequentially_and_merges_random_ranges() -> None:
    data = bytes(range(256)) * 4096  # 1 MiB
    fs = remote.filesystem("memory://")[0]
    fs.pipe_file("/ranges/blob", data)
    file = remote.RemoteFile("memory://ranges/blob", len(data), read_ahead=128 << 10, max_gap=16)
    stream = file.stream()
    pieces = []
    while chunk := stream.read(10_000):
        pieces.append(chunk)
    assert b"".join(pieces) == data
    assert file.requests <= len(data) // (128 << 10) + 2  # about one request per read-ahead window
    stream.close()

    file = remote.RemoteFile("memory://ranges/blob", len(data), read_ahead=0, max_gap=16)
    rng = np.random.default_rng(0)
    starts = sorted(rng.choice(len(data) - 100, size=50, replace=False).tolist())
    starts += [starts[0] + 100, starts[0] + 110]  # neighbours of the first: merged into its request
    sizes = [100] * 50 + [10, 10]
    order = rng.permutation(len(starts)).tolist()
    got = file.read_ranges([starts[i] for i in order], [sizes[i] for i in order])
    assert got == [data[starts[i] : starts[i] + sizes[i]] for i in order]
    assert file.requests == len(remote.coalesce(starts, [s + n for s, n in zip(starts, sizes)], 16)) <= 51


# ---------------------------------------------------------------- S3 (moto)


@pytest.mark.parametrize("shuffle", ["global", "shards"])
def test_s3_two_workers_match_local_record_for_record(
    s3: tuple[str, dict[str, Any]], local_shards: str, shuffle: str
) -> None:
    _, options = s3
    remote_ds = tt.TFRecordDataset(
        "s3://bucket/data/train-*.tfrecord",
        spec=SPEC,
        shuffle=shuffle,
        seed=11,
        batch_size=32,
        storage_options=options,
    )
    local_ds = tt.TFRecordDataset(local_shards, spec=SPEC, shuffle=shuffle, seed=11, batch_size=32)
    assert [os.path.basename(p) for p in remote_ds.files.paths] == [
        os.path.basename(p) for p in local_ds.files.paths
    ]
    got = _epoch(remote_ds)
    assert got == _epoch(local_ds)
    assert sorted(i for _, i, _ in got) == list(range(N))[: len(got)] or len(
        set(i for _, i, _ in got)
    ) == len(got)
    indexed = tt.IndexedTFRecordDataset("s3://bucket/data/", spec=SPEC, storage_options=options)
    assert [int(indexed[i]["id"]) for i in (0, 699, 350)] == [0, 699, 350]


def test_s3_raw_payloads_match_local_record_for_record(
    s3: tuple[str, dict[str, Any]], local_shards: str
) -> None:
    _, options = s3

    def epoch(source: str, **kwargs: Any) -> list[tuple[int, bytes]]:
        ds = tt.TFRecordDataset(source, spec="raw", seed=3, batch_size=32, drop_last=False, **kwargs)
        loader = DataLoader(ds, batch_size=None, num_workers=2)
        return [
            (i, r) for b in loader for i, r in zip(b[tt.RECORD_ID_KEY].tolist(), b["record"], strict=True)
        ]

    got = epoch("s3://bucket/data/train-*.tfrecord", storage_options=options)
    assert got == epoch(local_shards)
    assert all(int(tt.decode_example(record, SPEC)["id"]) == i for i, record in got)  # each its own bytes
    assert {i for i, _ in got} == set(range(N))


def test_s3_read_records_and_directory_listing(s3: tuple[str, dict[str, Any]], local_shards: str) -> None:
    _, options = s3
    paths = expand_sources("s3://bucket/data", options)
    assert [os.path.basename(p) for p in paths] == sorted(
        n for n in os.listdir(local_shards) if n.endswith(".tfrecord")
    )
    for path in paths[:2]:
        local = os.path.join(local_shards, os.path.basename(path))
        assert list(tt.read_records(path, storage_options=options)) == list(tt.read_records(local))
        entries = tt.load_index(tt.default_index_path(path), data_path=path, storage_options=options)
        picked = entries[[5, 2, 3, 100]]
        assert list(tt.read_records(path, entries=picked, storage_options=options)) == list(
            tt.read_records(local, entries=picked)
        )
    with pytest.raises(tt.SourceNotFoundError, match="glob matches no data file"):
        expand_sources("s3://bucket/data/valid-*.tfrecord", options)


def _cli(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=120)


def test_index_cli_builds_on_s3_beside_the_shards_and_into_out_dir(s3: tuple[str, dict[str, Any]]) -> None:
    _, options = s3
    fs = remote.filesystem("s3://bucket", options)[0]
    for path in _write("s3://bucket/noindex/train", options):
        fs.rm_file(path.removeprefix("s3://") + ".idx")
    flags = ["--storage-options", json.dumps(options)]
    out = _cli(
        "index_tools", "build", "s3://bucket/noindex/*.tfrecord", "--out-dir", "s3://bucket/indexes", *flags
    )
    assert out.returncode == 0, out.stderr
    assert "5 files: 5 indexed" in out.stdout
    fs.invalidate_cache()
    assert len(fs.glob("bucket/indexes/*.idx")) == 5 and not fs.glob("bucket/noindex/*.idx")
    out = _cli("index_tools", "build", "s3://bucket/noindex/", *flags)
    assert out.returncode == 0, out.stderr
    fs.invalidate_cache()
    assert len(fs.glob("bucket/noindex/*.idx")) == 5
    check = _cli("index_tools", "check", "s3://bucket/noindex/", "--index-dir", "s3://bucket/indexes", *flags)
    assert check.returncode == 0 and "all indexes are fresh" in check.stdout, check.stdout + check.stderr
    ds = tt.TFRecordDataset(
        "s3://bucket/noindex/", spec=SPEC, index="s3://bucket/indexes", storage_options=options
    )
    assert ds.num_records == N
    count = _cli("torch_tfrecord", "count", "s3://bucket/noindex/*.tfrecord", *flags)
    assert count.returncode == 0 and f"{N:>12,}  total" in count.stdout, count.stdout + count.stderr
    verify = _cli("torch_tfrecord", "verify", "s3://bucket/noindex/", *flags)
    assert verify.returncode == 0 and "5 of 5 files OK" in verify.stdout, verify.stdout + verify.stderr
    missing = _cli("torch_tfrecord", "count", "s3://bucket/nothing-here/*.tfrecord", *flags)
    assert missing.returncode == 2 and "glob matches no data file" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_s3_writer_abort_leaves_no_object_and_large_writes_go_multipart(
    s3: tuple[str, dict[str, Any]],
) -> None:
    _, options = s3
    fs = remote.filesystem("s3://bucket", options)[0]
    big = {**options, "default_block_size": 5 << 20}  # S3's smallest part: a 12 MB file is 3 parts
    with (
        pytest.raises(RuntimeError, match="boom"),
        tt.RecordWriter("s3://bucket/w/aborted.tfrecord", storage_options=big) as w,
    ):
        for i in range(12):
            w.write(bytes([i]) * (1 << 20))
        raise RuntimeError("boom")
    with (
        pytest.raises(RuntimeError, match="boom"),
        tt.ShardedExampleWriter("s3://bucket/w/part", max_records=2, storage_options=options) as s,
    ):
        for i in range(5):
            s.write(bytes([i]) * 100)
        raise RuntimeError("boom")
    fs.invalidate_cache()
    assert not fs.exists("bucket/w") or fs.ls("bucket/w") == []
    client_uploads = fs.call_s3("list_multipart_uploads", Bucket="bucket").get("Uploads", [])
    assert client_uploads == []  # the aborted multipart upload is gone, not left to bill
    with tt.RecordWriter("s3://bucket/w/big.tfrecord", storage_options=big) as w:
        for i in range(12):
            w.write(bytes([i]) * (1 << 20))
    fs.invalidate_cache()
    assert fs.info("bucket/w/big.tfrecord")["size"] == 12 * ((1 << 20) + 16)
    records = list(tt.read_records("s3://bucket/w/big.tfrecord", storage_options=options))
    assert [r[:1] for r in records] == [bytes([i]) for i in range(12)] and {len(r) for r in records} == {
        1 << 20
    }


def test_s3_missing_object_and_denied_access_fail_fast_naming_the_url(
    s3: tuple[str, dict[str, Any]], caplog: pytest.LogCaptureFixture
) -> None:
    endpoint, options = s3
    start = time.monotonic()
    with pytest.raises(tt.SourceNotFoundError, match="s3://bucket/data/nope.tfrecord"):
        list(tt.read_records("s3://bucket/data/nope.tfrecord", storage_options=options))
    remote_logger = "torch_tfrecord.records.remote"
    with FaultProxy(endpoint, deny=True) as proxy, caplog.at_level(logging.WARNING, remote_logger):
        denied = s3_options(proxy.url)
        with pytest.raises(
            tt.RemoteIOError, match=r"s3://bucket/data/train-00000-of-00005.tfrecord.*PermissionError"
        ):
            list(tt.read_records("s3://bucket/data/train-00000-of-00005.tfrecord", storage_options=denied))
    assert time.monotonic() - start < 10
    assert not [r for r in caplog.records if "retry" in r.getMessage()]  # permanent: never retried


@pytest.fixture
def s3_without_own_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """s3fs and botocore retry 5xx and resets themselves; turned off, every fault reaches ours."""
    import s3fs

    monkeypatch.setattr(s3fs.S3FileSystem, "retries", 1)


def test_s3_faults_are_retried_logged_and_the_data_is_right(
    s3: tuple[str, dict[str, Any]],
    local_shards: str,
    s3_without_own_retries: None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    endpoint, _ = s3
    local = _epoch(tt.TFRecordDataset(local_shards, spec=SPEC, seed=2, batch_size=50), workers=0)
    with (
        FaultProxy(endpoint, fail_every=3) as proxy,
        caplog.at_level(logging.WARNING, "torch_tfrecord.records.remote"),
    ):
        options = s3_options(
            proxy.url, config_kwargs={"retries": {"total_max_attempts": 1}}, skip_instance_cache=True
        )
        # Ranged reads (no cache): their retries are what is counted here; test_cache.py
        # has the cache's downloads through the same faults.
        ds = tt.TFRecordDataset(
            "s3://bucket/data/", spec=SPEC, seed=2, batch_size=50, storage_options=options, cache_dir=False
        )
        assert _epoch(ds, workers=0) == local
        retries = [r.getMessage() for r in caplog.records if r.getMessage().startswith("retry ")]
        assert proxy.faults >= 5
        # Every 503 is one logged retry. A dropped connection is retried once by aiohttp itself
        # (a persistent connection closed by the server), so only some of those reach us.
        assert proxy.faults // 2 <= len(retries) <= proxy.faults
        assert any("SlowDown" in m or "503" in m or "reduce your request rate" in m for m in retries)
        assert any("s3://bucket/data/train-" in m and "bytes" in m for m in retries)
        # Two workers through the same faults: the same epoch.
        proxy.reset()
        assert _epoch(ds, workers=2) == _epoch(
            tt.TFRecordDataset(local_shards, spec=SPEC, seed=2, batch_size=50), workers=2
        )
        assert proxy.faults >= 5


def test_a_worker_that_fails_names_the_shard_and_offset(
    s3: tuple[str, dict[str, Any]], s3_without_own_retries: None
) -> None:
    endpoint, _ = s3
    with FaultProxy(endpoint) as proxy:
        options = s3_options(
            proxy.url, config_kwargs={"retries": {"total_max_attempts": 1}}, skip_instance_cache=True
        )
        ds = tt.TFRecordDataset("s3://bucket/data/", spec=SPEC, batch_size=50, storage_options=options)
        proxy.fail_every = 1  # from now on every read fails
        with pytest.raises(tt.RemoteIOError) as info:
            next(iter(DataLoader(ds, batch_size=None, num_workers=2)))
    message = str(info.value)
    assert "s3://bucket/data/train-0000" in message and "failed after 4 attempts" in message
    assert "bytes" in message or "ranges from byte" in message


def test_https_style_urls_read_through_faults_with_logged_retries(
    s3: tuple[str, dict[str, Any]], local_shards: str, caplog: pytest.LogCaptureFixture
) -> None:
    pytest.importorskip("aiohttp")
    endpoint, options = s3
    name = "train-00002-of-00005.tfrecord"
    fs = remote.filesystem("s3://bucket", options)[0]
    for key in (f"bucket/data/{name}", f"bucket/data/{name}.idx"):
        fs.chmod(key, acl="public-read")  # readable by a plain GET, as a public dataset is
    with (
        FaultProxy(endpoint, fail_every=2) as proxy,
        caplog.at_level(logging.WARNING, "torch_tfrecord.records.remote"),
    ):
        url = f"{proxy.url}/bucket/data/{name}"  # moto serves objects over plain HTTP(S) GETs
        expected = list(tt.read_records(os.path.join(local_shards, name)))
        assert list(tt.read_records(url)) == expected
        ds = tt.IndexedTFRecordDataset(url, spec=SPEC)  # its index: <url>.idx
        assert [int(ds[i]["id"]) for i in range(0, 160, 40)] == [320, 360, 400, 440]
        assert proxy.faults >= 2
    # aiohttp retries a dropped persistent connection once, and fsspec's HTTP size lookup falls
    # back to other requests by itself: some faults never reach our retries, the rest are logged.
    retries = sum(r.getMessage().startswith("retry ") for r in caplog.records)
    assert 1 <= retries <= proxy.faults


# ---------------------------------------------------------------- GCS (emulator)


def test_gcs_write_index_and_read_with_two_workers_match_local(
    gcs: dict[str, Any], local_shards: str
) -> None:
    from index_tools import build_indexes

    paths = []
    for path in _write("gs://bucket/data/train", gcs):
        paths.append(path)
        remote.remove(path + ".idx", gcs)
    results = build_indexes(paths, jobs=1, storage_options=gcs)
    assert [r.status for r in results] == ["built"] * 5 and sum(r.records for r in results) == N
    remote_ds = tt.TFRecordDataset(
        "gs://bucket/data/*.tfrecord", spec=SPEC, seed=4, batch_size=25, storage_options=gcs
    )
    local_ds = tt.TFRecordDataset(local_shards, spec=SPEC, seed=4, batch_size=25)
    assert _epoch(remote_ds) == _epoch(local_ds)
    assert list(tt.read_records(paths[3], storage_options=gcs)) == list(
        tt.read_records(os.path.join(local_shards, os.path.basename(paths[3])))
    )


def test_s3_empty_shard_reads_as_no_records(s3: tuple[str, dict[str, Any]]) -> None:
    # S3 answers any byte range of an empty object with 416: the first-bytes probe must not ask.
    _, options = s3
    with tt.ShardedExampleWriter("s3://bucket/empty/part", max_records=5, storage_options=options) as writer:
        pass
    (path,) = writer.shard_paths
    assert list(tt.read_records(path, storage_options=options)) == []
    assert tt.count_records(path, storage_options=options) == 0
    assert len(tt.TFRecordDataset(path, storage_options=options)) == 0


def test_read_ahead_needs_a_pass_and_lets_go_at_its_end() -> None:
    data = bytes(range(256)) * 1024  # 256 KiB
    remote.filesystem("memory://")[0].pipe_file("/passes/blob", data)
    file = remote.RemoteFile("memory://passes/blob", len(data), read_ahead=64 << 10)
    # Two requests that happen to follow one another (a global shuffle does that by chance):
    # each fetches just its bytes.
    assert file.read_ranges([1000], [100]) == [data[1000:1100]]
    assert file.read_ranges([1100], [100]) == [data[1100:1200]]
    assert file.requests == 2 and file._window == (0, b"") and file._pool is None
    # A third in a row is a pass: 64 KiB are fetched, and the next 64 KiB in the background.
    assert file.read_ranges([1200], [100]) == [data[1200:1300]]
    assert len(file._window[1]) == 64 << 10 and file._pool is not None
    position = 1300
    while position < len(data):
        size = min(5000, len(data) - position)
        assert file.read_ranges([position], [size]) == [data[position : position + size]]
        position += size
    assert file._window == (0, b"") and file._pool is None  # the end of the pass frees both
    assert file.requests <= 3 + len(data) // (64 << 10) + 1


def test_remote_files_in_use_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """At most _MAX_OPEN_FILES remote files are kept, least recently used let go first; every
    request is counted, those made through a file let go while another thread still reads it too."""
    import fsspec.implementations.memory as memory

    from torch_tfrecord.records.shards import files as shards
    from torch_tfrecord.records.shards import pool as shard_pool

    monkeypatch.setitem(shard_pool.CAPS, "remote", 3)
    paths = []
    for i in range(5):
        with tt.RecordWriter(f"memory://bounded/{i}.tfrecord") as writer:
            writer.write(bytes([i]) * 10)
        paths.append(f"memory://bounded/{i}.tfrecord")
    served = []  # the data ranges the file system was asked for, from any thread
    cat_file = memory.MemoryFileSystem.cat_file

    def counted(self: Any, path: str, *args: Any, **kwargs: Any) -> Any:
        if path.endswith(".tfrecord"):  # not the indexes, read whole when the dataset is made
            served.append(path)
        return cat_file(self, path, *args, **kwargs)

    monkeypatch.setattr(memory.MemoryFileSystem, "cat_file", counted)
    files = shards.RecordFiles.from_sources(paths, cache_dir=False)
    for i in range(5):  # one shard at a time: the order they are let go in is known
        assert files.read([i]) == [bytes([i]) * 10]
    assert list(files.pool.opened("remote")) == [2, 3, 4]
    assert files.remote_requests == len(served) == 5  # those of the files let go are still counted
    # Shards read from several threads while each opening lets another go: none is lost.
    monkeypatch.setitem(shard_pool.CAPS, "remote", 1)
    crowded = shards.RecordFiles.from_sources(paths, cache_dir=False)
    served.clear()
    for _ in range(3):
        assert crowded.read(range(5)) == [bytes([i]) * 10 for i in range(5)]
    assert len(crowded.pool.opened("remote")) == 1 and crowded.remote_requests == len(served) >= 5


def test_the_parent_still_reads_after_dataloader_workers_forked_from_it(
    s3: tuple[str, dict[str, Any]], local_shards: str
) -> None:
    """A forked DataLoader worker drops the fsspec file systems it inherited on its first
    remote call; their finalizers closed the inherited connections there, which unregistered
    the parent's sockets from the epoll instance the two processes share: the parent's next
    request over that connection then waited for aiohttp's 300 s timeout."""
    pytest.importorskip("aiohttp")
    endpoint, options = s3
    fs = remote.filesystem("s3://bucket", options)[0]
    names = sorted(p.rpartition("/")[2] for p in fs.ls("bucket/data") if p.endswith(".tfrecord"))
    for name in names:
        for key in (f"bucket/data/{name}", f"bucket/data/{name}.idx"):
            fs.chmod(key, acl="public-read")
    expected = sorted(_epoch(tt.TFRecordDataset(local_shards, spec=SPEC, batch_size=50)))
    with FaultProxy(endpoint) as proxy:
        urls = [f"{proxy.url}/bucket/data/{name}" for name in names]
        for _ in range(3):
            made: list[tt.TFRecordDataset] = []
            maker = threading.Thread(
                target=lambda made=made: made.append(tt.TFRecordDataset(urls, spec=SPEC, batch_size=50)),
                daemon=True,
            )
            maker.start()
            maker.join(timeout=60)
            assert made, "making a dataset in the parent hung after its workers had run"
            assert sorted(_epoch(made[0])) == expected
