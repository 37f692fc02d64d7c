"""A dataset's manifest (torch_tfrecord/records/manifest.py, records/shards/manifest_shards.py):
written by the writers, read as a source or found beside the shards, checked as it is read and
against the shards, and what it saves: the requests a rank makes to start."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import torch_tfrecord as tt
from torch_tfrecord.records import manifest as manifest_module
from torch_tfrecord.records import remote
from torch_tfrecord.records.manifest import decode_manifest, read_manifest
from torch_tfrecord.records.shards import manifest_shards as manifest_files_module

# conftest: no hedged reads, since tests here count the requests a listing and its shards cost (a
# hedged copy is one more)
pytestmark = pytest.mark.usefixtures("no_hedges")

SPEC = {"id": tt.FixedLen((), torch.int64)}


def _write(prefix: Path | str, shards: int = 4, per_shard: int = 25, **options: Any) -> list[str]:
    with tt.ShardedExampleWriter(str(prefix), max_records=per_shard, **options) as writer:
        for i in range(shards * per_shard):
            writer.write({"id": i, "pad": b"x" * (i % 17)})
    return writer.shard_paths


def _ids(dataset: tt.TFRecordDataset) -> list[int]:
    """The ids read, padding left out."""
    ids, padding = [], []
    for batch in dataset:
        ids += torch.as_tensor(batch["id"]).reshape(-1).tolist()
        padding += torch.as_tensor(batch["_padding"]).reshape(-1).tolist()
    return [i for i, pad in zip(ids, padding, strict=True) if not pad]


def test_a_writer_leaves_a_manifest_and_a_reader_starts_from_it(tmp_path: Path) -> None:
    paths = _write(tmp_path / "train")
    found = read_manifest(str(tmp_path / "train.manifest.json"))
    assert list(found.paths) == paths and [s.records for s in found.shards] == [25] * 4
    assert [s.size for s in found.shards] == [os.path.getsize(p) for p in paths]
    assert found.tables == "train.manifest.tables.npz"
    for path in paths:  # the zipped tables stand in for the indexes: none is read
        os.remove(path + ".idx")
    named = tt.TFRecordDataset(str(tmp_path / "train.manifest.json"), spec=SPEC, batch_size=10, shuffle=False)
    beside = tt.TFRecordDataset(str(tmp_path / "train-*.tfrecord"), spec=SPEC, batch_size=10, shuffle=False)
    assert _ids(named) == _ids(beside) == list(range(100))
    assert named.files.fingerprint == beside.files.fingerprint


def test_without_tables_each_index_is_fetched_when_its_shard_is_first_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(manifest_module, "TABLES_LIMIT", 0)
    _write(tmp_path / "train")
    assert read_manifest(str(tmp_path / "train.manifest.json")).tables == ""
    dataset = tt.TFRecordDataset(
        str(tmp_path / "train.manifest.json"), spec=SPEC, batch_size=5, shuffle=False, prefetch=0
    )  # no loading thread: one that reads ahead may have opened the next shard by now
    assert dataset.files.tables.pending == 4 and dataset.num_records == 100  # counts from the manifest
    first = next(iter(dataset))
    assert first["id"].tolist() == [0, 1, 2, 3, 4] and dataset.files.tables.pending == 3
    assert sorted(_ids(tt.TFRecordDataset(str(tmp_path / "train.manifest.json"), spec=SPEC))) == list(
        range(100)
    )


def test_a_stale_manifest_names_the_shard(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    paths = _write(tmp_path / "train")
    with open(paths[2], "ab") as handle:  # a shard that grew since the manifest was written
        handle.write(b"\0" * 16)
    with pytest.raises(tt.StaleIndexError, match=r"train-00002-of-00004.*train\.manifest\.json"):
        tt.TFRecordDataset(str(tmp_path / "train.manifest.json"), spec=SPEC)
    # Remote, without tables: found in the listing of the manifest's folder when the dataset is
    # built; beyond LISTED_CHECK_SHARDS, when the shard's index is fetched or it is first opened.
    monkeypatch.setattr(manifest_module, "TABLES_LIMIT", 0)
    urls = _write("memory://stale/train")
    remote.write_bytes(urls[1], remote.read_bytes(urls[1]) + b"\0" * 16)
    named = "memory://stale/train.manifest.json"
    with pytest.raises(tt.StaleIndexError, match=r"train-00001-of-00004.*manifest"):
        tt.TFRecordDataset(named, spec=SPEC, batch_size=5, shuffle=False, cache_dir=False)
    monkeypatch.setattr(manifest_files_module, "LISTED_CHECK_SHARDS", 0)
    dataset = tt.TFRecordDataset(named, spec=SPEC, batch_size=5, shuffle=False, cache_dir=False)
    with pytest.raises(tt.StaleIndexError, match=r"train-00001-of-00004.*manifest"):
        _ids(dataset)
    monkeypatch.setattr(manifest_files_module, "LISTED_CHECK_SHARDS", 10_000)
    moved = _write("memory://moved/train")
    remote.remove(moved[3])
    with pytest.raises(tt.SourceNotFoundError, match=r"train-00003-of-00004.*does not exist"):
        tt.TFRecordDataset("memory://moved/train.manifest.json", spec=SPEC, cache_dir=False)


def test_a_manifest_of_other_data_or_a_bad_one_is_refused_clearly(tmp_path: Path) -> None:
    _write(tmp_path / "train")
    _write(tmp_path / "eval", shards=2)
    # Beside a glob, the manifest of other shards is not used (the glob's shards are read as they are).
    only_eval = tt.TFRecordDataset(str(tmp_path / "eval-*.tfrecord"), spec=SPEC, shuffle=False)
    assert only_eval.num_records == 50
    location = str(tmp_path / "train.manifest.json")
    text = Path(location).read_text()
    with pytest.raises(tt.IndexFormatError, match="not JSON"):
        decode_manifest(text[: len(text) // 2].encode(), location)  # truncated
    with pytest.raises(tt.IndexFormatError, match="not a torch_tfrecord manifest"):
        decode_manifest(b'{"format": "something/else"}', location)
    escaping = json.loads(text)
    escaping["shards"][0]["name"] = "../elsewhere.tfrecord"
    with pytest.raises(tt.IndexFormatError, match="does not stay in the manifest's folder"):
        decode_manifest(json.dumps(escaping).encode(), location)
    crowded = json.loads(text)
    crowded["shards"][0]["records"] = 10**9
    with pytest.raises(tt.IndexFormatError, match="cannot hold"):
        decode_manifest(json.dumps(crowded).encode(), location)
    moved = tmp_path / "moved"
    moved.mkdir()
    shutil.copy(location, moved / "train.manifest.json")  # the shards stayed behind
    with pytest.raises(tt.SourceNotFoundError, match="does not exist"):
        tt.TFRecordDataset(str(moved / "train.manifest.json"), spec=SPEC)
    with pytest.raises(ValueError, match="give it alone"):
        tt.TFRecordDataset([location, str(tmp_path / "eval-00000-of-00002.tfrecord")], spec=SPEC)


def test_the_manifest_keeps_the_shards_compression_and_the_converters_leave_one(tmp_path: Path) -> None:
    paths = _write(tmp_path / "gz" / "train", compression="gzip")
    found = read_manifest(str(tmp_path / "gz" / "train.manifest.json"))
    assert {s.compression for s in found.shards} == {"gzip"} and found.tables == ""
    dataset = tt.TFRecordDataset(str(tmp_path / "gz" / "train.manifest.json"), spec=SPEC, shuffle=False)
    assert [int(s["id"]) for s in dataset] == list(range(100)) and len(paths) == 4
    result = tt.write_dataset([{"id": i} for i in range(30)], tmp_path / "converted", spec=SPEC)
    manifests = sorted(p.name for p in (tmp_path / "converted").glob("*.manifest.json"))
    assert manifests and read_manifest(str(tmp_path / "converted" / manifests[0])).shards
    assert result is not None


def test_the_command_line_writes_one_for_data_that_exists(tmp_path: Path) -> None:
    paths = _write(tmp_path / "data" / "train")
    (tmp_path / "data" / "train.manifest.json").unlink()
    (tmp_path / "data" / "train.manifest.tables.npz").unlink()
    done = subprocess.run(
        [sys.executable, "-m", "index_tools", "manifest", str(tmp_path / "data" / "train-*.tfrecord")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "4 shards, 100 records" in done.stdout
    found = read_manifest(str(tmp_path / "data" / "train.manifest.json"))
    assert list(found.paths) == paths and all(s.index.endswith(".idx") for s in found.shards)


def _requests(proxy: Any) -> int:
    return sum(proxy.requests.values())


def test_a_rank_starts_with_a_few_requests_from_a_manifest_and_one_a_shard_without(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("s3fs")
    import fsspec
    from remote_servers import FaultProxy, moto_server, s3_options

    local = _write(tmp_path / "train", shards=60, per_shard=5)
    with moto_server() as endpoint, FaultProxy(endpoint) as proxy:
        options = s3_options(endpoint)
        fs = fsspec.filesystem("s3", **options)
        fs.mkdir("bucket")
        for path in sorted(tmp_path.iterdir()):
            fs.put_file(str(path), f"bucket/d/{path.name}")
        via = s3_options(proxy.url)
        expected = sorted(_ids(tt.TFRecordDataset(local, spec=SPEC)))

        def start(source: str) -> tuple[int, tt.TFRecordDataset]:
            proxy.reset()
            fsspec.AbstractFileSystem.clear_instance_cache()
            before = tt.remote.read_counts()
            dataset = tt.TFRecordDataset(
                source, spec=SPEC, batch_size=8, drop_last=False, storage_options=via, cache_dir=False
            )
            after = tt.remote.read_counts()
            # A hedge or a deadline's retry (a slow answer on a loaded machine) is a request more,
            # not one of the plan's: the plan's requests are counted without them.
            extra = after.hedges_sent - before.hedges_sent + after.deadline_retries - before.deadline_retries
            return _requests(proxy) - extra, dataset

        named, dataset = start("s3://bucket/d/train.manifest.json")
        assert named <= 3, proxy.requests  # the manifest, its tables, one listing of its folder
        assert sorted(_ids(dataset)) == expected
        assert "HEAD" not in proxy.requests, proxy.requests  # no shard looked up: the listing vouched
        found, dataset = start("s3://bucket/d/train-*.tfrecord")
        assert found <= 3, proxy.requests  # one listing, the manifest found in it, its tables
        fs.rm("bucket/d/train.manifest.json")
        listed, dataset = start("s3://bucket/d/train-*.tfrecord")
        assert listed <= 60 + 2, proxy.requests  # one listing, then one request per shard: its index
        assert sorted(_ids(dataset)) == expected


@pytest.mark.parametrize("whole", [True, False])
def test_a_manifest_over_plain_http_is_read_and_checked_shard_by_shard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, whole: bool
) -> None:
    """A web server has no folder listing: the 404 for the manifest's folder read as an empty
    folder, so every shard "did not exist (moved?)" and a manifest on a static host or a
    bucket's HTTPS endpoint could not be read. Now each shard is checked when first opened: a
    small one (``whole``) by the one request that fetches it whole (its size said by asking a
    byte more), a larger one by a HEAD before its ranges are read."""
    pytest.importorskip("aiohttp")
    from remote_servers import RangedFileServer

    from torch_tfrecord.records import manifest

    if not whole:
        monkeypatch.setattr(manifest, "WHOLE_BYTES", 16)  # (every shard larger)
    _write(tmp_path / "train")
    with RangedFileServer(str(tmp_path)) as server:
        named = f"{server.url}/train.manifest.json"
        dataset = tt.TFRecordDataset(named, spec=SPEC, batch_size=8, drop_last=False, cache_dir=False)
        assert server.requests == {"GET": 2}, server.requests  # the manifest, its tables: no listing
        assert sorted(_ids(dataset)) == list(range(100))
        if whole:  # each shard fetched whole, once, when first opened: nothing else asked
            assert server.requests == {"GET": 2 + 4}, server.requests
        else:  # each shard checked once, when first opened
            assert server.requests["HEAD"] == 4, server.requests
        with open(tmp_path / "train-00002-of-00004.tfrecord", "ab") as handle:  # it grew since
            handle.write(b"\0" * 16)
        stale = tt.TFRecordDataset(named, spec=SPEC, batch_size=8, shuffle=False, cache_dir=False)
        with pytest.raises(
            tt.StaleIndexError, match=r"train-00002-of-00004.*train\.manifest\.json"
        ) as caught:
            _ids(stale)
        assert ("more than" in str(caught.value)) == whole
        with open(tmp_path / "train-00002-of-00004.tfrecord", "r+b") as handle:  # shorter than it was
            handle.truncate(os.path.getsize(tmp_path / "train-00002-of-00004.tfrecord") - 40)
        stale = tt.TFRecordDataset(named, spec=SPEC, batch_size=8, shuffle=False, cache_dir=False)
        with pytest.raises(tt.StaleIndexError, match=r"train-00002-of-00004.*train\.manifest\.json"):
            _ids(stale)


def test_the_shards_of_a_batch_are_opened_at_the_same_time(tmp_path: Path) -> None:
    """Opening a shard of an HTTP manifest takes a request (its check, or the small shard fetched
    whole); the pool opened each under its lock, so the threads reading a batch's shards took
    turns (64 shards at 20 ms: 1.3 s before their reads). Now the opens overlap."""
    pytest.importorskip("aiohttp")
    from remote_servers import RangedFileServer

    _write(tmp_path / "train", shards=8, per_shard=5)
    with RangedFileServer(str(tmp_path), latency=0.2) as server:  # time to overlap, on a busy machine
        named = f"{server.url}/train.manifest.json"
        dataset = tt.TFRecordDataset(named, spec=SPEC, batch_size=40, cache_dir=False, prefetch=0)
        server.reset()
        assert sorted(_ids(dataset)) == list(range(40))  # one batch: a record of every shard
        assert server.requests == {"GET": 8} and server.most_at_once >= 4, (
            server.requests,
            server.most_at_once,
        )


def test_from_tfds_and_the_viewer_take_a_manifest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A TFDS directory described by `tfrecord-index manifest`: from_tfds reads its shards' sizes and
    counts from it (each index fetched, or scanned, when its shard is first read); the viewer lists
    what a manifest names."""
    from torch_tfrecord.integrations.tfds import from_tfds
    from torch_tfrecord.viewer.sources import expand_paths

    source = Path(__file__).resolve().parent / "data" / "tfds" / "golden_features" / "1.0.0"
    folder = tmp_path / "golden_features" / "1.0.0"
    shutil.copytree(source, folder)
    plain = from_tfds(folder, "train", shuffle=False, drop_last=False)
    expected = [int(s["id"]) for s in plain]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "index_tools",
            "manifest",
            str(folder),
            "--out",
            str(folder / "all.manifest.json"),
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    scans: list[str] = []
    from torch_tfrecord.records import index as index_module

    original = index_module.build_index
    monkeypatch.setattr(
        index_module, "build_index", lambda path, **kw: scans.append(str(path)) or original(path, **kw)
    )
    described = from_tfds(folder, "train", shuffle=False, drop_last=False)
    assert scans == [] and described.files.tables.pending == 0  # its zipped tables: nothing scanned
    assert [int(s["id"]) for s in described] == expected
    files, counts = expand_paths([str(folder / "all.manifest.json")])
    assert (
        files == list(read_manifest(str(folder / "all.manifest.json")).paths) and sum(counts.values()) > 0
    )


_names = st.text(alphabet="abcdefghij0123456789-_.", min_size=1, max_size=12).filter(
    lambda name: name not in (".", "..")
)


@settings(max_examples=200, deadline=None)
@given(
    shards=st.lists(
        st.tuples(
            st.lists(_names, min_size=1, max_size=3).map("/".join),
            st.integers(0, 1 << 40),
            st.integers(0, 1 << 20),
            st.sampled_from(["", "etag-1", '"x"']),
            st.sampled_from(["", "gzip", "zlib"]),
        ),
        min_size=1,
        max_size=6,
        unique_by=lambda shard: shard[0],
    ),
    cut=st.integers(0, 400),
)
def test_a_manifest_round_trips_and_any_cut_of_it_is_refused_by_name(
    shards: list[tuple[str, int, int, str, str]], cut: int
) -> None:
    from torch_tfrecord.records.manifest import Manifest, ManifestShard, encode_manifest

    entries = tuple(
        ManifestShard(
            name, max(size, records * 16), records, version, f"{name}.idx" if not kind else "", kind
        )
        for name, size, records, version, kind in shards
    )
    location = "memory://bucket/data/train.manifest.json"
    manifest = Manifest(location, entries, "train.manifest.tables.npz" if len(entries) % 2 else "")
    data = encode_manifest(manifest)
    assert decode_manifest(data, location) == manifest
    assert all(path.startswith("memory://bucket/data/") for path in manifest.paths)
    if cut < len(data) - 2:  # a manifest cut short (its end is a newline after the closing brace)
        with pytest.raises(tt.IndexFormatError, match="train.manifest.json"):
            decode_manifest(data[:cut], location)


@pytest.mark.parametrize("spec", [{"label": "@"}, {"@": {"format": "@"}}, {"keys": ["@", '"@"']}])
def test_a_saved_spec_is_written_as_it_is_whatever_it_holds(spec: dict[str, object]) -> None:
    """The shards were written in place of a placeholder string, "@", replaced after the JSON was
    made: a saved spec holding that string got the shard list in its place (found by fuzz_manifest)."""
    from torch_tfrecord.records.manifest import Manifest, ManifestShard, encode_manifest

    location = "memory://bucket/data/train.manifest.json"
    manifest = Manifest(
        location, (ManifestShard("a.tfrecord", 40, 2, "e", "a.tfrecord.idx", ""),), "t.npz", spec
    )
    assert decode_manifest(encode_manifest(manifest), location) == manifest
