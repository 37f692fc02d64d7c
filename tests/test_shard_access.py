"""The open shards (torch_tfrecord/records/shard_access.py) and their pool: the same contract over
every kind: local, ranged remote, cached remote, and inflating over a local and a cached file.

Remote objects live in fsspec's ``memory://`` file system (a forked child has a copy of it).
"""

from __future__ import annotations

import dataclasses
import gzip
import multiprocessing
import os
import pickle
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import torch_tfrecord as tt
from torch_tfrecord.records import remote
from torch_tfrecord.records.entries import read_entries_at
from torch_tfrecord.records.remote.cache import ShardCache, cache_key
from torch_tfrecord.records.shard_access import (
    BatchReadFailed,
    CachedShard,
    InflatingShard,
    LocalShard,
    OpenShard,
    RemoteShard,
    ShardSpec,
    Storage,
    open_shard,
    shard_specs,
)
from torch_tfrecord.records.shards.pool import ShardPool

KINDS = ["local", "remote", "cached", "inflating-local", "inflating-cached"]
PAYLOADS = [bytes([i % 251]) * (37 + 13 * i) for i in range(40)]


@dataclasses.dataclass
class Shard:
    """A shard of one kind, its spec and storage, and the record stream it must read."""

    spec: ShardSpec
    storage: Storage
    stream: bytes
    table: np.ndarray[Any, Any]
    store: str  # where the stored bytes are (a path or URL): the test damages them there


@pytest.fixture(params=KINDS)
def shard(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Shard]:
    kind: str = request.param
    compressed = kind.startswith("inflating")
    local = tmp_path / ("data.tfrecord.gz" if compressed else "data.tfrecord")
    with tt.RecordWriter(local, compression="gzip" if compressed else None) as writer:
        for payload in PAYLOADS:
            writer.write(payload)
    stream = gzip.decompress(local.read_bytes()) if compressed else local.read_bytes()
    index = tt.build_compressed_index(local) if compressed else None
    path = str(local)
    cache = None
    if kind in ("remote", "cached", "inflating-cached"):
        path = f"memory://sources-{uuid.uuid4().hex}/{local.name}"
        remote.write_bytes(path, local.read_bytes())
    if kind.endswith("cached"):
        cache = ShardCache(tmp_path / "cache", None)
    (spec,) = shard_specs([path], [index], None, cache)
    table = tt.build_index(local) if not compressed else index.table  # type: ignore[union-attr]
    yield Shard(spec, Storage(cache=cache), stream, np.asarray(table, dtype=np.int64), path)
    if path.startswith("memory://"):
        remote.remove(path)


def test_the_spec_says_what_the_shard_is(shard: Shard) -> None:
    expected = {
        "local": (LocalShard, "local"),
        "remote": (RemoteShard, "remote"),
        "cached": (CachedShard, "cached"),
        "inflating-local": (InflatingShard, "local"),
        "inflating-cached": (InflatingShard, "cached"),
    }
    source = open_shard(shard.spec, shard.storage)
    kind = next(k for k, (cls, where) in expected.items() if type(source) is cls and shard.spec.kind == where)
    assert shard.spec.size == len(shard.stream)
    assert shard.spec.inflating == kind.startswith("inflating")
    assert pickle.loads(pickle.dumps(shard.spec)) == shard.spec
    source.close()


def test_ranges_and_reads_into_a_buffer(shard: Shard) -> None:
    source = open_shard(shard.spec, shard.storage)
    rng = np.random.default_rng(0)
    starts = rng.integers(0, len(shard.stream) - 50, 30)
    sizes = rng.integers(0, 50, 30)
    assert source.read_ranges(starts.tolist(), sizes.tolist()) == [
        shard.stream[a : a + n] for a, n in zip(starts.tolist(), sizes.tolist(), strict=True)
    ]
    buffer = bytearray(7 + int(sizes.sum()))
    source.read_into(starts, sizes, buffer, 7)
    assert bytes(buffer[7:]) == b"".join(shard.stream[a : a + n] for a, n in zip(starts, sizes, strict=True))
    records = read_entries_at(source, shard.spec.path, shard.spec.size, shard.table, np.arange(len(PAYLOADS)))
    assert records == PAYLOADS
    source.close()


def test_a_read_past_the_end_is_short_and_fails_a_batch_read(shard: Shard) -> None:
    source = open_shard(shard.spec, shard.storage)
    end = len(shard.stream)
    starts, sizes = np.array([end - 10], dtype=np.int64), np.array([30], dtype=np.int64)
    try:
        pieces = source.read_ranges(starts.tolist(), sizes.tolist())
    except tt.TFRecordError:  # an inflating source names the record instead
        pass
    else:
        assert pieces == [shard.stream[end - 10 :]]
    with pytest.raises(BatchReadFailed):
        source.read_into(starts, sizes, bytearray(30), 0)
    table = shard.table.copy()
    table[-1, 1] += 100  # an index entry past the end: a stale index, named
    with pytest.raises(tt.StaleIndexError):
        read_entries_at(source, shard.spec.path, shard.spec.size, table[-1:], np.array([len(table) - 1]))
    source.close()


def _damage(shard: Shard) -> None:
    """One flipped byte where the shard is stored: in the payload of record 3, or of a compressed
    shard's deflate stream."""
    data = bytearray(remote.read_bytes(shard.store))
    if shard.spec.inflating:  # a byte of the deflate stream: the same size, a damaged stream
        data[len(data) // 2] ^= 0xFF
    else:
        data[int(shard.table[3, 0]) + 14] ^= 0xFF
    remote.write_bytes(shard.store, bytes(data))


def test_damage_is_named_and_a_cached_copy_is_fetched_again_once(shard: Shard) -> None:
    pool = ShardPool([shard.spec], shard.storage)
    source = pool.source(0)
    numbers = np.arange(len(PAYLOADS))
    assert read_entries_at(source, shard.spec.path, shard.spec.size, shard.table, numbers) == PAYLOADS
    if isinstance(source, CachedShard):
        copy = source.fetch()
        assert copy is not None
        with open(copy, "r+b") as handle:  # the copy damaged, the store intact
            handle.seek(int(shard.table[3, 0]) + 14)
            handle.write(b"\x00\xff")
        with pytest.raises(tt.CorruptRecordError) as raised:
            read_entries_at(source, shard.spec.path, shard.spec.size, shard.table, numbers)
        recovery = source.recovery()
        assert recovery.again(raised.value)  # removed and fetched again
        assert read_entries_at(source, shard.spec.path, shard.spec.size, shard.table, numbers) == PAYLOADS
        _damage(shard)  # the store itself: fetched again once, then the damage is the data's
        source.discard_copy()
        source.fetch()
        with pytest.raises(tt.CorruptRecordError) as raised:
            read_entries_at(source, shard.spec.path, shard.spec.size, shard.table, numbers)
        recovery = source.recovery()
        assert recovery.again(raised.value)
        with pytest.raises(tt.CorruptRecordError) as again:
            read_entries_at(source, shard.spec.path, shard.spec.size, shard.table, numbers)
        assert not recovery.again(again.value)
        assert "its cached copy, fetched again once" in str(again.value)
        return
    source.close()
    _damage(shard)
    if shard.storage.cache is not None:  # a compressed shard's copy: fetched again, damaged
        shard.storage.cache.discard(cache_key(shard.spec.path))
    pool = ShardPool([shard.spec], shard.storage)
    source = pool.source(0)
    named = "record" if shard.spec.inflating else "record 3"
    with pytest.raises(tt.TFRecordError, match=named) as raised:
        read_entries_at(source, shard.spec.path, shard.spec.size, shard.table, numbers)
    assert not source.recovery().again(raised.value)  # the data's own damage
    pool.close()


def test_the_pool_pickles_its_specs_only_and_reopens(shard: Shard) -> None:
    pool = ShardPool([shard.spec], shard.storage)
    first = pool.source(0).read_ranges([0], [40])
    kind = "inflating" if shard.spec.inflating else shard.spec.kind
    assert list(pool.opened(kind)) == [0]
    clone = pickle.loads(pickle.dumps(pool))
    assert clone.opened(kind) == {} and clone.specs == pool.specs
    assert clone.source(0).read_ranges([0], [40]) == first == [shard.stream[:40]]
    pool.close()
    assert pool.opened(kind) == {}
    assert pool.source(0).read_ranges([0], [40]) == first


def _read_in_child(pool: ShardPool, stream: bytes, out: Any) -> None:
    out.put(pool.source(0).read_ranges([5, 100], [30, 60]) == [stream[5:35], stream[100:160]])


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork: POSIX only")
def test_a_forked_child_reads_through_what_it_inherited(shard: Shard) -> None:
    pool = ShardPool([shard.spec], shard.storage)
    assert pool.source(0).read_ranges([0], [10]) == [shard.stream[:10]]  # opened before the fork
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    child = context.Process(target=_read_in_child, args=(pool, shard.stream, out))
    child.start()
    assert out.get(timeout=60) is True
    child.join(60)
    assert child.exitcode == 0
    assert pool.source(0).read_ranges([1], [10]) == [shard.stream[1:11]]  # the parent reads on


def test_the_native_batch_read_takes_local_files_only(shard: Shard) -> None:
    pool = ShardPool([shard.spec], shard.storage)
    local = not shard.spec.inflating and (
        shard.spec.kind == "local" or (shard.spec.kind == "cached" and pool.fetch(0) is not None)
    )
    assert pool.open_local(0) is local
    assert bool(pool.fds[0] >= 0) is local
    if local:
        source: OpenShard = pool.source(0)
        assert source.local() is not None and pool.fds[0] == source.local().fd  # type: ignore[union-attr]
        pool.forget_local(0)
        assert pool.fds[0] == -1 and pool.maps[0] is None
