"""Load telemetry: ``dataset.stats()`` names the stage the loop waits on, and ``dataset.trace()``.

The stage counters (torch_tfrecord/support/stages.py) and the verdict (data/telemetry/stats.py) are
tested on a fake clock and on made-up counters. The synthetic cases run real loops, with 0 and 2
DataLoader workers, each built so that its bottleneck is unambiguous on a loaded machine: a sleep
or a request latency of tens of milliseconds per batch against work of well under one.
"""

from __future__ import annotations

import io
import itertools
import json
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import torch_tfrecord as tt
from torch_tfrecord.data.frameworks import internals
from torch_tfrecord.data.telemetry.counters import SLOTS, buckets
from torch_tfrecord.data.telemetry.shared import ENV_VAR
from torch_tfrecord.data.telemetry.stats import BOTTLENECKS, WAIT_SHARE_NONE, summarize
from torch_tfrecord.support import stages
from torch_tfrecord.support.stages import (
    BUCKETS,
    BYTES,
    DECODE,
    FIELDS,
    FIRST_COUNT,
    FIRST_NS,
    HISTOGRAM,
    IMAGE_DECODE,
    LOOP_COUNT,
    LOOP_NS,
    READ,
    RECORDS,
    REMOTE,
    REQUESTS,
    TRANSFORM,
    Helpers,
    ThreadRecord,
)

_trace_dirs: set[str] = set()
SPEC = {"id": tt.FixedLen((), torch.int64), "x": tt.FixedLen((4,), torch.float32)}
MS = 1_000_000


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The stages' clock, moved by hand: ``clock[0]`` nanoseconds."""
    now = [1_000 * MS]
    monkeypatch.setattr(stages, "perf_counter_ns", lambda: now[0])
    return now


@pytest.fixture
def record() -> Iterator[ThreadRecord]:
    record = ThreadRecord()
    previous = stages.swap(record)
    yield record
    stages.swap(previous)


def _own(record: ThreadRecord, stage: int) -> int:
    return record.counts[stage]


# ------------------------------------------------------------------------------ the counters


def test_nested_stages_each_count_their_own_time(clock: list[int], record: ThreadRecord) -> None:
    outer = stages.begin()
    clock[0] += 2 * MS
    inner = stages.begin()
    clock[0] += 5 * MS
    stages.end(IMAGE_DECODE, inner, 1000)
    clock[0] += 3 * MS
    stages.end(DECODE, outer)
    assert _own(record, IMAGE_DECODE) == 5 * MS
    assert _own(record, DECODE) == 5 * MS  # 10 ms in all, 5 of them image decoding
    assert record.counts[IMAGE_DECODE + 1] == 1000  # (its amount)
    # lap: one stage ends and the next begins at once
    token = stages.begin()
    clock[0] += 1 * MS
    token = stages.lap(READ, token)
    clock[0] += 4 * MS
    stages.end(DECODE, token)
    assert (_own(record, READ), _own(record, DECODE)) == (1 * MS, 9 * MS)


def test_a_stage_that_raises_is_left_out_and_breaks_nothing(clock: list[int], record: ThreadRecord) -> None:
    outer = stages.begin()
    stages.begin()  # its end never comes (the stage raised)
    clock[0] += 7 * MS
    stages.end(READ, outer)
    assert _own(record, READ) == 7 * MS
    assert sum(record.counts) == 7 * MS


def test_nothing_is_counted_where_no_record_is_current(clock: list[int]) -> None:
    # (A dataset iterated earlier in this thread, by another test, leaves its loop's record
    # current, paused between batches, by design: set none, and put it back after.)
    previous = stages.swap(None)
    try:
        assert stages.current() is None
        assert stages.begin() is None
        stages.end(READ, None)
        stages.count(RECORDS, 5)  # no error, nowhere to count
        assert stages.lap(READ, None) is None
    finally:
        stages.swap(previous)


def test_helpers_share_out_the_wait_over_their_stages(clock: list[int], record: ThreadRecord) -> None:
    def fetch(ms: int) -> int:
        token = stages.begin()
        clock[0] += ms * MS
        stages.end(REMOTE, token, 100)
        stages.count(REQUESTS, 1)
        clock[0] += MS  # outside any stage: stays with the waiting thread's own stage
        return ms

    read = stages.begin()
    with Helpers() as helpers:
        assert [helpers.wrap(fetch)(ms) for ms in (3, 5)] == [3, 5]
        clock[0] = clock[0] - 10 * MS + 5 * MS  # they ran side by side: the wait was 5 ms, not 10
    stages.end(READ, read)
    # 8 of the helpers' 10 busy ms were remote: 80% of the 5 ms waited
    assert _own(record, REMOTE) == 4 * MS
    assert _own(record, READ) == 1 * MS
    assert record.counts[REQUESTS] == 2 and record.counts[REMOTE + 1] == 200


def test_helpers_without_a_current_record_run_the_work_as_it_is() -> None:
    previous = stages.swap(None)
    try:
        with Helpers() as helpers:
            assert helpers.wrap(len) is len
    finally:
        stages.swap(previous)


def test_each_duration_lies_in_its_bucket() -> None:
    for ns in [0, 1, 1023, 1024, 1500, 2047, 2048, 3 * MS, 999 * MS, 10**10, 10**13]:
        low, high = stages.bucket_bounds(stages.bucket(ns))
        assert low <= ns < high or stages.bucket(ns) == BUCKETS - 1
    durations = [0, 1, 1023, 1024, 1500, 2047, 2048, *(int(1.37**k) for k in range(20, 120)), 2**52]
    assert buckets(durations).tolist() == [stages.bucket(ns) for ns in durations]  # (all at once)
    edges = [stages.bucket_bounds(i) for i in range(BUCKETS)]
    assert all(a[1] == b[0] for a, b in itertools.pairwise(edges))  # no gaps, no overlaps


# ------------------------------------------------------------------------------ the verdict


def _counts(rows: int = SLOTS) -> np.ndarray:
    return np.zeros((rows, FIELDS), dtype=np.int64)


def _loop(counts: np.ndarray, row: int, batches: int, each_ns: int) -> None:
    counts[row, FIRST_COUNT], counts[row, FIRST_NS] = 1, 500 * MS
    counts[row, LOOP_COUNT], counts[row, LOOP_NS] = batches - 1, (batches - 1) * each_ns
    counts[row, HISTOGRAM + stages.bucket(each_ns)] = batches - 1


def _verdict(counts: np.ndarray, seconds: float) -> tt.LoadStats:
    return summarize(counts, counts, np.arange(SLOTS), seconds)


def test_a_loop_that_rarely_waits_has_no_bottleneck() -> None:
    counts = _counts()
    _loop(counts, 0, 101, 1 * MS)  # 100 waits of 1 ms in 10.5 s
    counts[0, TRANSFORM] = 100 * 30 * MS  # a costly transform that the loop never waits for
    stats = _verdict(counts, 10.5)
    assert stats.wait_share == pytest.approx(0.1 / 10.0)
    assert stats.bottleneck == "none" and "keeps up" in stats.advice
    assert stats.wait_p50 == pytest.approx(1e-3, rel=0.2) and stats.startup_seconds == 0.5


def test_the_costliest_stage_per_batch_is_the_bottleneck_workers_side_by_side() -> None:
    counts = _counts()
    _loop(counts, 0, 101, 20 * MS)
    counts[0, stages.HANDOFF] = 101 * 3 * MS  # the main process's part: 3 ms a batch
    for worker in (1, 2, 3, 4):  # 4 workers: a batch each 4 of theirs
        _loop(counts, worker, 26, 80 * MS)
        counts[worker, DECODE] = 26 * 8 * MS  # 8 ms a batch, 2 ms for the loop
        counts[worker, READ] = 26 * 1 * MS
        counts[worker, RECORDS] = 26 * 256
    stats = _verdict(counts, 3.0)
    assert stats.bottleneck == "handoff"  # 3 ms a batch beats 8 ms in each of 4 workers
    assert stats.stage_per_batch["decode"] == pytest.approx(8e-3)
    counts[1:5, DECODE] *= 2  # 16 ms each: 4 ms for the loop
    assert _verdict(counts, 3.0).bottleneck == "decode"
    assert [p.name for p in _verdict(counts, 3.0).workers] == ["main", *(f"worker {k}" for k in range(4))]


def test_nothing_measured_is_unknown_and_says_so() -> None:
    stats = _verdict(_counts(), 0.0)
    assert stats.bottleneck == "unknown" and "no batch" in stats.advice
    off = summarize(None, None, None, 0.0)
    assert off.bottleneck == "unknown" and ENV_VAR in off.advice
    assert set(BOTTLENECKS) >= {stats.bottleneck, "none", "remote", "image_decode", "transform"}


def test_the_cache_hit_ratio_is_the_share_of_bytes_not_fetched_from_the_store() -> None:
    counts = _counts()
    _loop(counts, 0, 11, 5 * MS)
    counts[0, READ] = 11 * MS
    counts[0, BYTES] = 1000
    counts[0, REMOTE + 1] = 250
    assert _verdict(counts, 1.0).cache_hit_ratio is None  # no cache: no ratio
    counts[0, stages.CACHED] = 2
    assert _verdict(counts, 1.0).cache_hit_ratio == pytest.approx(0.75)


# ------------------------------------------------------------------------------ real loops


def _shards(root: Path, records: int = 512, per_shard: int = 128) -> list[str]:
    with tt.ShardedExampleWriter(str(root / "data"), max_records=per_shard) as writer:
        for i in range(records):
            writer.write({"id": i, "x": [float(i)] * 4})
    return writer.shard_paths


def _run(dataset: Any, workers: int, step_s: float = 0.0, batches: int | None = None) -> tt.LoadStats:
    loader = DataLoader(dataset, batch_size=None, num_workers=workers)
    for seen, _ in enumerate(loader, 1):
        time.sleep(step_s)  # the training step
        if batches is not None and seen >= batches:
            break
    return dataset.stats()  # type: ignore[no-any-return]


def _sleepy(batch: dict[str, Any]) -> dict[str, Any]:
    time.sleep(0.03)
    return batch


@pytest.mark.parametrize("workers", [0, 2])
def test_a_transform_that_sleeps_is_the_bottleneck(tmp_path: Path, workers: int) -> None:
    dataset = tt.TFRecordDataset(_shards(tmp_path), spec=SPEC, batch_size=32, transform=_sleepy)
    stats = _run(dataset, workers)
    assert stats.bottleneck == "transform", stats
    assert stats.wait_share is not None and stats.wait_share > 0.5
    assert stats.stage_per_batch["transform"] >= 0.03
    assert stats.batches == 16 and stats.records == 512
    assert "transform" in stats.advice and "<- bottleneck" in str(stats)
    assert len([p for p in stats.workers if p.name != "main"]) == workers


@pytest.mark.parametrize("workers", [0, 2])
def test_a_training_step_slower_than_loading_means_no_bottleneck(tmp_path: Path, workers: int) -> None:
    dataset = tt.TFRecordDataset(_shards(tmp_path, 384), spec=SPEC, batch_size=32)
    stats = _run(dataset, workers, step_s=0.15)  # (loading a batch: well under a ms, idle)
    assert stats.bottleneck == "none", stats
    assert stats.wait_share is not None and stats.wait_share < WAIT_SHARE_NONE
    assert stats.batches == 12


def _noise_jpeg(seed: int, side: int = 1024) -> bytes:
    from PIL import Image as PILImage

    pixels = np.random.default_rng(seed).integers(0, 256, (side, side, 3), dtype=np.uint8)
    out = io.BytesIO()
    # Progressive: about 3x the decoding of a baseline JPEG for the same pixels (the same bytes to
    # hand off), so the decode outweighs the hand-off by far even on a loaded machine.
    PILImage.fromarray(pixels).save(out, format="JPEG", quality=95, progressive=True)
    return out.getvalue()


@pytest.fixture(scope="module")
def jpeg_shards(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    pytest.importorskip("PIL")
    root = tmp_path_factory.mktemp("jpegs")
    with tt.ShardedExampleWriter(str(root / "images"), max_records=6) as writer:
        for i in range(12):  # noise: the slowest thing to decode, a few MB in all to read
            writer.write({"image": _noise_jpeg(i), "label": i})
    return writer.shard_paths


@pytest.mark.parametrize("workers", [0, 2])
def test_decoding_big_jpegs_is_the_bottleneck(jpeg_shards: list[str], workers: int) -> None:
    spec = {"image": tt.Image(), "label": tt.FixedLen((), torch.int64)}
    dataset = tt.TFRecordDataset(jpeg_shards, spec=spec, batch_size=2, shuffle=False)
    stats = _run(dataset, workers)
    assert stats.bottleneck == "image_decode", stats
    assert stats.stage_seconds["image_decode"] > 5 * stats.stage_seconds["read"]
    assert "tt.Image(size=" in stats.advice
    assert stats.stage_seconds["decode"] < stats.stage_seconds["image_decode"]


def test_stats_windows_and_reset(tmp_path: Path) -> None:
    dataset = tt.TFRecordDataset(_shards(tmp_path), spec=SPEC, batch_size=32)
    assert dataset.stats().bottleneck == "unknown"  # nothing loaded yet
    _run(dataset, 0, batches=4)
    first = dataset.stats(reset=True)
    assert first.batches == 4 and first.records >= 4 * 32  # (and what was read ahead)
    again = dataset.stats()
    assert again.batches == 0 and again.records == 0
    dataset.set_epoch(1)
    whole = _run(dataset, 2)
    assert whole.batches == 16 and whole.records == 512


def test_workers_of_each_pass_add_to_the_totals(tmp_path: Path) -> None:
    """Workers that start afresh every epoch go on from their slot's totals."""
    dataset = tt.TFRecordDataset(_shards(tmp_path), spec=SPEC, batch_size=32)
    for epoch in range(2):
        dataset.set_epoch(epoch)
        _run(dataset, 2)
    stats = dataset.stats()
    assert stats.records == 2 * 512 and stats.batches == 2 * 16
    assert sum(p.batches for p in stats.workers if p.name != "main") == 32


def test_a_mix_and_a_packed_stream_have_stats(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = tt.TFRecordDataset(_shards(tmp_path / "a", 128), spec=SPEC, transform=lambda s: s)
    b = tt.TFRecordDataset(_shards(tmp_path / "b", 128), spec=SPEC)
    mixed = tt.mix({"a": a, "b": b}, batch_size=16)
    stats = _run(mixed, 0)
    assert stats.records == 256 and stats.batches == 16
    assert stats.stage_seconds["decode"] > 0 and stats.stage_seconds["transform"] > 0
    assert a.stats().records == 0  # the mix counts, not its sources
    with tt.ShardedExampleWriter(str(tmp_path / "tokens"), max_records=64) as writer:
        for i in range(128):
            writer.write({"tokens": [i] * 4})
    tokens = tt.TFRecordDataset(writer.shard_paths, spec={"tokens": tt.VarLen(torch.int64)})
    packed = tt.pack(tokens, length=16, keys=["tokens"], batch_size=4)
    stats = _run(packed, 0)
    assert stats is not None and packed.stats().records == 128  # (the packing's figures: pack_stats())
    assert packed.pack_stats().rows == 32  # 128 sequences of 4 values in rows of 16


def test_a_selection_of_records_has_stats(tmp_path: Path) -> None:
    """Reading through a selection (the native batch read of its base files) counts its bytes."""
    dataset = tt.TFRecordDataset(_shards(tmp_path), spec=SPEC, batch_size=32, subset=range(0, 128))
    stats = _run(dataset, 0)
    assert stats.records == 128 and stats.batches == 4
    assert stats.bytes > 0 and stats.stage_seconds["decode"] > 0


def test_samples_count_one_wait_per_loader_batch(tmp_path: Path) -> None:
    dataset = tt.TFRecordDataset(_shards(tmp_path, 256), spec=SPEC, loader_batch_size=32)
    for _ in DataLoader(dataset, batch_size=32, collate_fn=tt.collate):
        pass
    stats = dataset.stats()
    assert stats.batches == 8 and stats.records == 256


def test_telemetry_off_counts_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, "0")
    seen = []

    def look(batch: dict[str, Any]) -> dict[str, Any]:
        seen.append(stages.begin())  # no thread records anything
        return batch

    dataset = tt.TFRecordDataset(_shards(tmp_path), spec=SPEC, batch_size=32, transform=look)
    assert dataset._telemetry.shared is None
    _run(dataset, 0)
    assert seen == [None] * 16
    stats = dataset.stats()
    assert stats.bottleneck == "unknown" and ENV_VAR in stats.advice
    with pytest.raises(ValueError, match=ENV_VAR), dataset.trace(tmp_path / "t.json"):
        pass


def test_the_loaders_next_is_as_the_telemetry_reads_it() -> None:
    assert internals.next_data_found()


@pytest.mark.parametrize("workers", [0, 2])
def test_the_trace_is_valid_trace_json_with_every_worker(tmp_path: Path, workers: int) -> None:
    dataset = tt.TFRecordDataset(_shards(tmp_path), spec=SPEC, batch_size=16, transform=_short_sleep)
    path = tmp_path / "trace.json"
    with dataset.trace(path):
        _trace_dirs.update(
            n for n in os.listdir(tempfile.gettempdir()) if n.startswith("torch-tfrecord-trace-")
        )
        stats = _run(dataset, workers)
    trace = json.loads(path.read_text())
    events = trace["traceEvents"]
    spans = [e for e in events if e["ph"] == "X"]
    assert spans and all(
        isinstance(e["name"], str) and e["ts"] >= 0 and e["dur"] >= 0 and isinstance(e["pid"], int)
        for e in spans
    )
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    expected = {"main process"} | {f"worker {k}" for k in range(workers)}
    assert {names[e["pid"]] for e in spans} == expected
    assert {"transform", "decode", "next() wait"} <= {e["name"] for e in spans}
    assert os.getpid() in {e["pid"] for e in spans}
    assert stats.records == 512  # (counted as ever)
    assert not [name for name in os.listdir(tempfile.gettempdir()) if name in _trace_dirs], "left behind"


def _short_sleep(batch: dict[str, Any]) -> dict[str, Any]:
    time.sleep(0.01)
    return batch


def test_a_spawned_worker_is_timed_too(tmp_path: Path) -> None:
    dataset = tt.TFRecordDataset(_shards(tmp_path, 256), spec=SPEC, batch_size=32)
    loader = DataLoader(dataset, batch_size=None, num_workers=1, multiprocessing_context="spawn")
    assert sum(len(batch["id"]) for batch in loader) == 256
    stats = dataset.stats()
    assert stats.batches == 8 and stats.wait_share is not None
    assert [p.name for p in stats.workers] == ["main", "worker 0"]


# ------------------------------------------------------------------------------ remote shards


@pytest.fixture(scope="module")
def s3_shards() -> Iterator[tuple[str, list[str]]]:
    """A local S3 server holding 4 shards; yields its endpoint and their URLs."""
    pytest.importorskip("s3fs")
    import fsspec
    from remote_servers import moto_server, s3_options

    with moto_server() as endpoint:
        options = s3_options(endpoint)
        fsspec.filesystem("s3", **options).mkdir("bucket")
        with tt.ShardedExampleWriter("s3://bucket/t/data", max_records=96, storage_options=options) as writer:
            for i in range(384):
                writer.write({"id": i, "x": [float(i)] * 4})
        yield endpoint, writer.shard_paths


@pytest.mark.usefixtures("fast_retries")
@pytest.mark.parametrize("workers", [0, 2])
def test_remote_shards_behind_a_slow_store_are_the_bottleneck(
    s3_shards: tuple[str, list[str]], workers: int
) -> None:
    from remote_servers import FaultProxy, s3_options

    endpoint, urls = s3_shards
    with FaultProxy(endpoint, latency=0.02) as proxy:  # 20 ms a request, as object stores answer
        options = s3_options(proxy.url)
        dataset = tt.TFRecordDataset(urls, spec=SPEC, batch_size=32, storage_options=options, cache_dir=False)
        stats = _run(dataset, workers)
    assert stats.bottleneck == "remote", stats
    assert stats.stage_per_batch["remote"] >= 0.02 and stats.records == 384
    assert stats.remote_requests >= stats.batches and stats.remote_bytes > 0
    assert stats.cache_hit_ratio is None and "cache_dir=" in stats.advice


@pytest.mark.usefixtures("fast_retries")
def test_a_second_epoch_from_the_node_cache_is_all_hits(
    s3_shards: tuple[str, list[str]], tmp_path: Path
) -> None:
    from remote_servers import s3_options

    endpoint, urls = s3_shards
    dataset = tt.TFRecordDataset(
        urls, spec=SPEC, batch_size=32, storage_options=s3_options(endpoint), cache_dir=tmp_path / "cache"
    )
    _run(dataset, 0)  # fetches every shard into the cache (and waits for the downloads at the end)
    first = dataset.stats(reset=True)
    assert first.cache_hit_ratio is not None
    dataset.set_epoch(1)
    second = _run(dataset, 0)
    assert second.cache_hit_ratio == 1.0 and second.remote_bytes == 0 and second.records == 384
