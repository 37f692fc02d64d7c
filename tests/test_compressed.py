"""GZIP / ZLIB shards in the datasets: the compressed index, seek points, reads, damage.

Golden shards written by TensorFlow live in tests/data/compressed (tests/data/make_compressed_golden.py);
larger ones, to have many seek points, are written here with Python's gzip / zlib modules. The
``inflater`` fixture runs a test twice: with rapidgzip (the ``compressed`` extra: seek points in
the index) and with it hidden, as a plain install reads (Python's zlib, checkpoints in memory).
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import logging
import shutil
import sys
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader

import torch_tfrecord as tt
from torch_tfrecord.records.compressed.index import (
    COMPRESSED_INDEX_SUFFIX,
    decode_compressed_index,
    default_compressed_index_path,
    encode_compressed_index,
)
from torch_tfrecord.records.compressed.inflate import SEGMENT
from torch_tfrecord.records.compressed.shard import CompressedShard
from torch_tfrecord.records.framing import encode_record

GOLDEN = Path(__file__).parent / "data" / "compressed"
EXPECTED: dict[str, Any] = json.loads((GOLDEN / "expected.json").read_text())
SPEC = {
    "id": tt.FixedLen((), torch.int64),
    "text": tt.FixedLen((), bytes),
    "vec": tt.FixedLen((3,), torch.float32),
}
ID_SPEC = {"id": tt.FixedLen((), torch.int64)}
NAMES = sorted(EXPECTED)  # record ids count through the shards in this order


@pytest.fixture(params=["rapidgzip", "zlib"])
def inflater(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Reads with rapidgzip, or with it hidden (a plain install: Python's zlib only)."""
    if request.param == "rapidgzip":
        pytest.importorskip("rapidgzip")
    else:
        monkeypatch.setitem(sys.modules, "rapidgzip", None)
    return str(request.param)


def _needs_rapidgzip() -> None:
    pytest.importorskip("rapidgzip")


@pytest.fixture
def golden_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "golden"
    shutil.copytree(GOLDEN, folder)
    (folder / "expected.json").unlink()
    return folder


def _expected_ids() -> list[int]:
    return [i for name in NAMES for i in EXPECTED[name]["id"]]


def _samples(batches: list[dict[str, Any]]) -> dict[int, tuple[str, list[float], int, bool]]:
    """id -> (text, vec, record id, padding) for every sample of the batches."""
    out = {}
    for batch in batches:
        for i, text, vec, record, pad in zip(
            batch["id"].tolist(),
            batch["text"],
            batch["vec"].tolist(),
            batch["_record_id"].tolist(),
            batch["_padding"].tolist(),
            strict=True,
        ):
            if not pad:
                assert i not in out
                out[i] = (text.decode(), vec, record, pad)
    return out


@pytest.mark.parametrize("shuffle", [False, "shards", "block:7", "global"])
def test_tensorflow_written_shards_read_as_tensorflow_parses_them(
    golden_dir: Path, shuffle: Any, inflater: str
) -> None:
    ds = tt.TFRecordDataset(golden_dir, spec=SPEC, batch_size=8, shuffle=shuffle, drop_last=False, seed=3)
    assert ds.files.shard_sizes == tuple(len(EXPECTED[name]["id"]) for name in NAMES)
    assert [i for i, s in enumerate(ds.files.specs) if s.inflating] == [1, 2, 3]  # plain, GZIP, ZLIB, GZIP
    got = _samples(list(DataLoader(ds, batch_size=None, num_workers=2)))
    ids = _expected_ids()
    assert sorted(got) == sorted(ids)
    for name in NAMES:
        expected = EXPECTED[name]
        for i, text, vec in zip(expected["id"], expected["text"], expected["vec"], strict=True):
            assert got[i][0] == text and got[i][1] == pytest.approx(vec) and got[i][2] == ids.index(i)


def test_no_index_scans_once_and_logs(golden_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="torch_tfrecord.records.shards.index_files"):
        tt.TFRecordDataset(golden_dir / "b-gzip.tfrecord.gz", spec=SPEC)
    assert (
        "no index for" in caplog.text
        and "b-gzip.tfrecord.gz" in caplog.text
        and "(41 records)" in caplog.text
    )


def test_index_file_round_trip_and_is_not_a_plain_index(golden_dir: Path, inflater: str) -> None:
    path = golden_dir / "c-zlib.tfrecord"
    index = tt.build_compressed_index(path)
    assert bool(index.seek_points) == (inflater == "rapidgzip")
    assert (
        index.compression == "zlib"
        and len(index.table) == 29
        and index.compressed_size == path.stat().st_size
    )
    index_path = default_compressed_index_path(path)
    assert index_path.endswith(".tfrecord" + COMPRESSED_INDEX_SUFFIX) and not index_path.endswith(".idx")
    tt.save_compressed_index(index, index_path)
    loaded = tt.load_compressed_index(index_path, data_path=path)
    assert np.array_equal(loaded.table, index.table) and loaded.seek_points == index.seek_points
    # The other readers of index files refuse it rather than misread it.
    with pytest.raises(tt.IndexFormatError):
        tt.load_index(index_path)
    with pytest.raises(ValueError):  # the `tfrecord` package reads indexes with np.loadtxt
        np.loadtxt(index_path, dtype=np.int64)
    first = Path(index_path).read_bytes().split()[0]
    with pytest.raises(ValueError):  # DALI parses the first token as an integer offset
        int(first)
    # A damaged index file is an IndexFormatError, not a misread.
    data = bytearray(Path(index_path).read_bytes())
    data[len(data) // 2] ^= 1
    with pytest.raises(tt.IndexFormatError, match="checksum"):
        decode_compressed_index(bytes(data), index_path)
    # The dataset finds and uses it (no scan).
    ds = tt.TFRecordDataset(path, spec=SPEC, shuffle=False, batch_size=29)
    assert next(iter(ds))["id"].tolist() == EXPECTED["c-zlib.tfrecord"]["id"]


def test_stale_and_foreign_indexes_are_refused(golden_dir: Path) -> None:
    b, d = golden_dir / "b-gzip.tfrecord.gz", golden_dir / "d-gzip.tfrecord.gz"
    foreign = golden_dir / "other.cidx"
    tt.save_compressed_index(tt.build_compressed_index(d), foreign)
    with pytest.raises(tt.StaleIndexError, match=r"other\.cidx.*does not describe.*b-gzip\.tfrecord\.gz"):
        tt.TFRecordDataset(b, spec=SPEC, index={str(b): str(foreign)})
    # Same size, other content: the checksum trailer tells them apart.
    tt.save_compressed_index(tt.build_compressed_index(b), default_compressed_index_path(b))
    data = bytearray(b.read_bytes())
    data[-8:] = bytes(8)
    b.write_bytes(bytes(data))
    with pytest.raises(tt.StaleIndexError, match="checksum trailer"):
        tt.TFRecordDataset(b, spec=SPEC)
    # Appended to: the size differs.
    d_index = default_compressed_index_path(d)
    tt.save_compressed_index(tt.build_compressed_index(d), d_index)
    with open(d, "ab") as f:
        f.write(gzip.compress(encode_record(b"more")))
    with pytest.raises(tt.StaleIndexError, match="rebuild it"):
        tt.TFRecordDataset(d, spec=SPEC)


def _big_shard(path: Path, records: int, compression: str) -> list[bytes]:
    """A compressed shard of poorly compressible records (so it spans many seek points)."""
    rng = np.random.default_rng(len(path.name))
    payloads = [
        tt.encode_example({"id": i, "text": rng.bytes(int(rng.integers(200, 2000))), "vec": [0.0, 1.0, 2.0]})
        for i in range(records)
    ]
    raw = b"".join(encode_record(p) for p in payloads)
    path.write_bytes(gzip.compress(raw, 1) if compression == "gzip" else zlib.compress(raw, 1))
    return payloads


@pytest.fixture(scope="module")
def big_gzip_shard(tmp_path_factory: pytest.TempPathFactory) -> tuple[CompressedShard, bytes]:
    """A 3-4 MiB stream (several 1 MiB segments) and its uncompressed bytes."""
    path = tmp_path_factory.mktemp("big") / "big.tfrecord.gz"
    _big_shard(path, 3000, "gzip")
    index = tt.build_compressed_index(path, spacing=64 << 10)
    return CompressedShard(str(path), index), gzip.decompress(path.read_bytes())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_read_into_copies_what_read_ranges_reads(
    big_gzip_shard: tuple[CompressedShard, bytes], data: Any
) -> None:
    """Ranges in order (one slice per run), scattered (a slice each, or one numpy gather when a
    segment holds many), interleaved across segments, crossing segment ends, empty."""
    shard, stream = big_gzip_shard
    kind = data.draw(st.sampled_from(["in order", "in order, interleaved", "scattered", "many small"]))
    if kind.startswith("in order"):  # back to back from a random place, as records read in file order
        start = data.draw(st.integers(0, len(stream) - 1))
        sizes = data.draw(st.lists(st.integers(0, 40_000), min_size=1, max_size=80))
        starts = np.concatenate([[start], start + np.cumsum(sizes[:-1])]).astype(np.int64)
        sizes_array = np.minimum(np.asarray(sizes, dtype=np.int64), len(stream) - starts).clip(0)
        if kind == "in order, interleaved":  # ranges from anywhere between neighbours in the stream
            foreign = data.draw(st.lists(st.integers(0, len(stream) - 100), min_size=1, max_size=20))
            where = data.draw(
                st.lists(st.integers(1, len(starts)), min_size=len(foreign), max_size=len(foreign))
            )
            starts = np.insert(starts, where, foreign)
            sizes_array = np.insert(sizes_array, where, [50] * len(foreign))
    else:
        count = data.draw(st.integers(1, 300 if kind == "many small" else 40))
        largest = 64 if kind == "many small" else 30_000
        starts = np.asarray(
            data.draw(st.lists(st.integers(0, len(stream) - 1), min_size=count, max_size=count))
        )
        sizes_array = np.asarray(data.draw(st.lists(st.integers(0, largest), min_size=count, max_size=count)))
        sizes_array = np.minimum(sizes_array, len(stream) - starts)
    starts, sizes_array = starts.astype(np.int64), sizes_array.astype(np.int64)
    buffer = bytearray(b"\xee" * (int(sizes_array.sum()) + 7))
    shard.read_into(starts, sizes_array, buffer, 3)
    expected = b"".join(stream[a : a + n] for a, n in zip(starts.tolist(), sizes_array.tolist(), strict=True))
    assert bytes(buffer[3 : 3 + len(expected)]) == expected
    assert buffer[:3] == b"\xee" * 3 and buffer[3 + len(expected) :] == b"\xee" * 4  # nothing else written
    assert b"".join(shard.read_ranges(starts.tolist(), sizes_array.tolist())) == expected


@pytest.mark.parametrize("reader", ["native", "python"])
def test_read_into_keeps_neighbours_in_the_stream_apart_when_the_batch_puts_a_range_between(
    big_gzip_shard: tuple[CompressedShard, bytes], reader: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORCH_TFRECORD_DECODER", reader)  # the extension's copy, or runs in Python
    shard, stream = big_gzip_shard
    far = 3 * SEGMENT + 5  # another segment
    for starts, sizes in (
        ([100, far, 110], [10, 50, 20]),  # 100..110 and 110..130 follow each other in the stream only
        ([100, 110, far, 130, 140], [10, 20, 50, 10, 5]),
        ([SEGMENT - 10, SEGMENT, 7], [10, 30, 3]),  # runs on both sides of a segment end
        ([100, SEGMENT - 10, 110], [10, 20, 20]),  # the range between crosses a segment end
        ([100, 5, 110, 110], [10, 0, 20, 4]),  # an empty range between, bytes read twice
    ):
        buffer = bytearray(sum(sizes))
        shard.read_into(np.asarray(starts, dtype=np.int64), np.asarray(sizes, dtype=np.int64), buffer, 0)
        assert bytes(buffer) == b"".join(stream[a : a + n] for a, n in zip(starts, sizes, strict=True))


@pytest.mark.parametrize("compression", ["gzip", "zlib"])
def test_seek_points_reach_a_record_without_inflating_from_the_start(
    tmp_path: Path, compression: str
) -> None:
    _needs_rapidgzip()
    path = tmp_path / f"big.tfrecord.{'gz' if compression == 'gzip' else 'zz'}"
    payloads = _big_shard(path, 3000, compression)
    index = tt.build_compressed_index(path, spacing=64 << 10)
    assert index.uncompressed_size > 3 * SEGMENT and len(index.seek_points) > 0
    shard = CompressedShard(str(path), index)
    last = len(payloads) - 1
    offset, framed = (int(v) for v in index.table[last])
    (record,) = shard.read_ranges([offset], [framed])
    assert record[12:-4] == payloads[last]
    assert shard.segments_inflated == 1  # one segment, reached through a seek point
    shard.close()
    # The datasets: each segment is inflated once in file order, and once per block window.
    for shuffle in (False, "shards", "block:300"):
        ds = tt.TFRecordDataset(
            path,
            spec=ID_SPEC,
            index={str(path): index_path(tmp_path, path, index)},
            batch_size=100,
            shuffle=shuffle,
            drop_last=False,
        )
        ids = [i for batch in ds for i in batch["id"].tolist()]
        assert sorted(ids) == list(range(3000))
        inflated = sum(s.shard.segments_inflated for s in ds.files.pool.opened("inflating").values())
        assert inflated == -(-index.uncompressed_size // SEGMENT), shuffle
    # Random access (IndexedTFRecordDataset, "global"): correct, through the seek points.
    indexed = tt.IndexedTFRecordDataset(
        path, spec=ID_SPEC, index={str(path): index_path(tmp_path, path, index)}
    )
    order = np.random.default_rng(0).permutation(3000)[:50].tolist()
    assert [int(s["id"]) for s in indexed.__getitems__(order)] == order


def index_path(folder: Path, data: Path, index: tt.CompressedIndex) -> str:
    target = folder / (data.name + ".saved.cidx")
    tt.save_compressed_index(index, target)
    return str(target)


def test_plain_and_compressed_shards_mix_under_every_shuffle(golden_dir: Path) -> None:
    ids = sorted(_expected_ids())
    for shuffle in (False, "shards", "global", "block:5"):
        orders = []
        for epoch in (0, 0, 1, 2):
            ds = tt.TFRecordDataset(
                golden_dir, spec=SPEC, batch_size=5, shuffle=shuffle, seed=2, drop_last=False
            )
            ds.set_epoch(epoch)
            got = [i for b in ds for i, p in zip(b["id"].tolist(), b["_padding"].tolist()) if not p]
            assert sorted(got) == ids
            orders.append(got)
        assert orders[0] == orders[1]
        assert (orders[0] == orders[2] == orders[3]) == (shuffle is False)


def _damage(path: Path, at: float, length: int = 64) -> None:
    data = bytearray(path.read_bytes())
    start = int(len(data) * at)
    data[start : start + length] = bytes(b ^ 0x5A for b in data[start : start + length])
    path.write_bytes(bytes(data))


def test_truncated_gzip_shard_names_file_and_record_or_is_skipped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "cut.tfrecord.gz"
    _big_shard(path, 800, "gzip")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(tt.TFRecordError, match=r"cut\.tfrecord\.gz.*record \d+") as raised:
        tt.TFRecordDataset(path, spec=ID_SPEC)
    assert isinstance(raised.value, tt.CorruptRecordError) and 0 < raised.value.record < 800
    with caplog.at_level(logging.WARNING):
        ds = tt.TFRecordDataset(path, spec=ID_SPEC, on_error="skip", batch_size=50, shuffle=False)
    assert "skipping the rest of" in caplog.text and "cut.tfrecord.gz" in caplog.text
    kept = ds.num_records
    assert 0 < kept < 800
    assert [i for b in ds for i in b["id"].tolist()] == list(range(kept // 50 * 50))


def test_an_index_of_a_cut_shard_says_so_and_only_skipping_readers_take_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from index_tools.cli import main as index_main

    path = tmp_path / "cut.tfrecord.gz"
    _big_shard(path, 800, "gzip")
    intact = tt.build_compressed_index(path)
    assert not intact.damaged and b"damaged" not in encode_compressed_index(intact)  # bytes as before
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    stats = tt.ReadStats()
    index = tt.build_compressed_index(path, on_error="skip", stats=stats)
    kept = len(index.table)
    assert 0 < kept < 800 and f"(record {kept})" in index.damaged and "cut.tfrecord.gz" in index.damaged
    assert stats.files_skipped == 1 and stats.errors == [index.damaged]
    assert decode_compressed_index(encode_compressed_index(index)).damaged == index.damaged

    # tfrecord-index lists the damaged rest and fails, as for a plain file with damaged regions,
    # also when it finds that index again; a strict build sees it stale and fails on the damage.
    build = ["build", "-j", "1", "-q", str(path), "--on-error", "skip"]
    assert index_main(build) == 1
    err = capsys.readouterr().err
    assert f"after its first {kept} records: the rest is damaged and left out" in err
    assert index_main(build) == 1
    captured = capsys.readouterr()
    assert "1 already fresh" in captured.out and "the rest is damaged" in captured.err
    assert index_main(["check", str(path)]) == 1
    assert "built with on_error='skip'" in capsys.readouterr().out
    assert index_main(["build", "-j", "1", "-q", str(path)]) == 1
    assert f"(record {kept})" in capsys.readouterr().err

    # A strict dataset refuses that index, never stopping short silently; a skipping one reads it.
    with pytest.raises(tt.StaleIndexError, match="before its damage"):
        tt.TFRecordDataset(path, spec=ID_SPEC)
    skipping = tt.TFRecordDataset(path, spec=ID_SPEC, on_error="skip", batch_size=100, shuffle=False)
    assert skipping.num_records == kept
    assert [i for b in skipping for i in b["id"].tolist()] == list(range(kept // 100 * 100))


def test_corrupt_deflate_block_names_file_and_record_or_is_skipped(tmp_path: Path) -> None:
    _needs_rapidgzip()  # the records after the damage are reached through a seek point
    path = tmp_path / "bad.tfrecord.gz"
    _big_shard(path, 3000, "gzip")
    index = tt.build_compressed_index(path, spacing=64 << 10)
    tt.save_compressed_index(index, default_compressed_index_path(path))
    _damage(path, 0.5, 64)  # same size and trailer: the index still fits the file
    ds = tt.TFRecordDataset(path, spec=ID_SPEC, batch_size=500, shuffle=False)
    with pytest.raises(tt.TFRecordError, match=r"bad\.tfrecord\.gz.*record \d+"):
        list(ds)
    # The damage costs the records of the inflated segment (1 MiB) that holds it: ~900 here.
    skipping = tt.TFRecordDataset(path, spec=ID_SPEC, batch_size=1500, shuffle=False, on_error="skip")
    batches = list(skipping)
    assert len(batches) == len(skipping) == 2 and all(len(b["id"]) == 1500 for b in batches)
    padding = sum(int(b["_padding"].sum()) for b in batches)
    real = [i for b in batches for i, p in zip(b["id"].tolist(), b["_padding"].tolist()) if not p]
    assert 0 < padding <= SEGMENT // 1000 and len(real) == len(set(real)) == 3000 - padding
    assert max(real) == 2999  # the records after the damage are read through a later seek point
    assert skipping._decoder.skipped == padding


@pytest.mark.parametrize("compression", ["gzip", "zlib"])
def test_without_rapidgzip_checkpoints_reach_a_record_without_inflating_from_the_start(
    tmp_path: Path, compression: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / f"big.tfrecord.{'gz' if compression == 'gzip' else 'zz'}"
    payloads = _big_shard(path, 3000, compression)
    with_seek_points = None
    if "rapidgzip" in sys.modules or importlib.util.find_spec("rapidgzip") is not None:
        with_seek_points = tt.build_compressed_index(path, spacing=64 << 10)
    monkeypatch.setitem(sys.modules, "rapidgzip", None)
    index = tt.build_compressed_index(path)
    assert index.seek_points == b"" and index.uncompressed_size > 3 * SEGMENT
    if with_seek_points is not None:  # the same records whichever library inflated them
        assert np.array_equal(index.table, with_seek_points.table)
    shard = CompressedShard(str(path), index)
    stream = (gzip.decompress if compression == "gzip" else zlib.decompress)(path.read_bytes())
    for record in (len(payloads) - 1, 0, len(payloads) - 1, 1500):
        offset, framed = (int(v) for v in index.table[record])
        (got,) = shard.read_ranges([offset], [framed])
        assert got[12:-4] == payloads[record]
    # The far end once from byte 0; then each read starts at the checkpoint (every 4 MiB) before it.
    assert shard._file.inflated < 2 * len(stream) + 3 * SEGMENT
    shard.close()
    # An index with seek points (built with rapidgzip) is read with zlib too.
    if with_seek_points is not None:
        shard = CompressedShard(str(path), with_seek_points)
        offset, framed = (int(v) for v in index.table[-1])
        assert shard.read_ranges([offset], [framed])[0][12:-4] == payloads[-1]
        shard.close()
    # The datasets, under every shuffle.
    for shuffle in (False, "shards", "block:300", "global"):
        ds = tt.TFRecordDataset(path, spec=ID_SPEC, batch_size=100, shuffle=shuffle, drop_last=False)
        ids = [i for batch in ds for i in batch["id"].tolist()]
        assert sorted(ids) == list(range(3000))
        shards = [source.shard for source in ds.files.pool.opened("inflating").values()]
        inflated = sum(shard._file.inflated for shard in shards if shard._file is not None)
        if shuffle in (False, "shards"):
            assert inflated == len(stream)  # in order: once, front to back
    indexed = tt.IndexedTFRecordDataset(path, spec=ID_SPEC)
    order = np.random.default_rng(0).permutation(3000)[:50].tolist()
    assert [int(s["id"]) for s in indexed.__getitems__(order)] == order


def test_without_rapidgzip_damage_is_named_or_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "rapidgzip", None)
    path = tmp_path / "bad.tfrecord.gz"
    _big_shard(path, 3000, "gzip")
    tt.save_compressed_index(tt.build_compressed_index(path), default_compressed_index_path(path))
    _damage(path, 0.5, 64)  # same size and trailer: the index still fits the file
    with pytest.raises(tt.TFRecordError, match=r"bad\.tfrecord\.gz.*record \d+"):
        list(tt.TFRecordDataset(path, spec=ID_SPEC, batch_size=500, shuffle=False))
    # zlib cannot go past the damage: every record from its segment on is skipped, and counted.
    skipping = tt.TFRecordDataset(path, spec=ID_SPEC, batch_size=1500, shuffle=False, on_error="skip")
    batches = list(skipping)
    real = [i for b in batches for i, p in zip(b["id"].tolist(), b["_padding"].tolist()) if not p]
    assert real == list(range(len(real))) and 1000 < len(real) < 2000
    assert skipping._decoder.skipped == 3000 - len(real)


def test_without_rapidgzip_tfrecord_index_builds_compressed_indexes(
    golden_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from index_tools.cli import main

    monkeypatch.setitem(sys.modules, "rapidgzip", None)
    assert main(["build", str(golden_dir), "--jobs", "1"]) == 0
    for name in ("b-gzip.tfrecord.gz", "c-zlib.tfrecord", "d-gzip.tfrecord.gz"):
        index = tt.load_compressed_index(default_compressed_index_path(golden_dir / name))
        assert len(index.table) == len(EXPECTED[name]["id"]) and index.seek_points == b""
    assert main(["check", str(golden_dir)]) == 0
    assert "(GZIP: positions, no seek points)" in capsys.readouterr().out


def test_index_header_is_versioned(golden_dir: Path) -> None:
    index = tt.build_compressed_index(golden_dir / "d-gzip.tfrecord.gz")
    data = encode_compressed_index(index)
    assert data.startswith(b"\x89TFRecord compressed index\r\n\x1a\n")
    bumped = data.replace(b'"version": 1', b'"version": 9')
    bumped = bumped[:-4] + zlib.crc32(bumped[:-4]).to_bytes(4, "little")
    with pytest.raises(tt.IndexFormatError, match="version 9"):
        decode_compressed_index(bumped)


def test_compressed_shards_on_s3_read_as_local_ones(golden_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("s3fs")
    import fsspec
    from remote_servers import moto_server, s3_options

    big = golden_dir / "e-big.tfrecord.gz"
    _big_shard(big, 1500, "gzip")  # several segments and seek points
    tt.save_compressed_index(
        tt.build_compressed_index(big, spacing=64 << 10), default_compressed_index_path(big)
    )
    with moto_server() as endpoint:
        options = s3_options(endpoint)
        fs = fsspec.filesystem("s3", **options)
        fs.mkdir("bucket")
        for path in sorted(golden_dir.iterdir()):
            fs.put_file(str(path), f"bucket/c/{path.name}")
        spec = {"id": tt.FixedLen((), torch.int64)}
        for shuffle in (False, "block:64", "global"):
            remote_ds = tt.TFRecordDataset(
                "s3://bucket/c/", spec=spec, batch_size=64, shuffle=shuffle, storage_options=options
            )
            local_ds = tt.TFRecordDataset(golden_dir, spec=spec, batch_size=64, shuffle=shuffle)
            assert [i for i, spec in enumerate(remote_ds.files.specs) if spec.inflating] == [1, 2, 3, 4]
            remote = [b["id"].tolist() for b in DataLoader(remote_ds, batch_size=None, num_workers=2)]
            assert remote == [b["id"].tolist() for b in local_ds]
        # The saved index is found beside the object; one without is scanned in memory.
        url = "s3://bucket/c/d-gzip.tfrecord.gz"
        tt.save_compressed_index(
            tt.build_compressed_index(url, storage_options=options), url + ".cidx", options
        )
        indexed = tt.IndexedTFRecordDataset("s3://bucket/c/", spec=spec, storage_options=options)
        assert len(indexed) == 110 + 1500
        last = len(indexed) - 1
        assert [int(s["id"]) for s in indexed.__getitems__([109, 0, last, 60])] == [1109, 1000, 1499, 1060]
