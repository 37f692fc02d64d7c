"""integrations/ranges.py, the record ranges Spark and Beam read, without either engine: every record
is read exactly once, whether the plan comes from a manifest's zipped tables, its record counts
alone, the shards' .idx files, or a file with no index (read front to back)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

import torch_tfrecord as tt
from torch_tfrecord.integrations.ranges import DecodeOptions, ReadPlan, plan_read, plan_runs, read_range
from torch_tfrecord.records.index import index_from_sizes
from torch_tfrecord.records.manifest import read_manifest, write_manifest

SPEC = {"id": tt.FixedLen((), torch.int64), "x": tt.VarLen(torch.float32)}


def _write(prefix: Path, records: int, per_shard: int, compression: str | None = None) -> None:
    with tt.ShardedExampleWriter(prefix, max_records=per_shard, compression=compression) as writer:
        for i in range(records):
            writer.write({"id": i, "x": [float(i)] * (i % 5)})


def _ids(plan: ReadPlan, max_bytes: int) -> list[int]:
    options = DecodeOptions(SPEC)
    ids = []
    for group in plan.ranges(max_bytes):
        for rng in group:
            for decoded in read_range(rng, options):
                ids.extend(decoded.columns["id"].tolist())
    return ids


def test_plan_runs_covers_every_record_once_in_runs_of_equal_bytes() -> None:
    runs = plan_runs([10] * 100, 4)
    assert runs == [(0, 25), (25, 50), (50, 75), (75, 100)]
    assert plan_runs([], 3) == []
    with pytest.raises(ValueError, match="parallelism"):
        plan_runs([1], 0)


def test_ranges_from_the_manifest_its_counts_or_the_indexes_read_each_record_once(tmp_path: Path) -> None:
    _write(tmp_path / "d" / "train", 900, 400)
    plan = plan_read(str(tmp_path / "d"))
    assert plan.manifest is not None and plan.manifest.tables
    assert len(plan.ranges(2048)) > 3
    assert _ids(plan, 2048) == list(range(900))
    # A manifest without zipped tables (a dataset of millions of records): ranges by record count,
    # each task loading its shard's .idx.
    counted = dataclasses.replace(read_manifest(plan.manifest.location), tables="")
    by_count = ReadPlan(plan.paths, plan.counts, [None] * len(plan.paths), [True] * len(plan.paths), counted)
    groups = by_count.ranges(2048)
    assert all(rng.manifest == "" for group in groups for rng in group) and len(groups) > 3
    assert sorted(_ids(by_count, 2048)) == list(range(900))
    # No manifest: each shard's .idx.
    Path(plan.manifest.location).unlink()
    from_indexes = plan_read(str(tmp_path / "d"))
    assert from_indexes.manifest is None and all(from_indexes.indexed)
    assert _ids(from_indexes, 2048) == list(range(900))


def test_a_file_without_an_index_or_compressed_is_one_range_read_front_to_back(tmp_path: Path) -> None:
    _write(tmp_path / "gz" / "train", 300, 100, compression="gzip")
    plan = plan_read(str(tmp_path / "gz"))
    assert plan.indexed == [False, False, False]
    assert [[(r.start, r.stop) for r in group] for group in plan.ranges(64)] == [[(0, None)]] * 3
    assert _ids(plan, 64) == list(range(300))
    _write(tmp_path / "plain" / "train", 50, 50)
    for path in (tmp_path / "plain").glob("*.idx"):
        path.unlink()
    (tmp_path / "plain" / "train.manifest.json").unlink()
    assert _ids(plan_read(str(tmp_path / "plain")), 64) == list(range(50))


def test_a_damaged_record_is_raised_naming_it_or_skipped_and_counted(tmp_path: Path) -> None:
    _write(tmp_path / "bad" / "train", 100, 100)
    shard = tmp_path / "bad" / "train-00000-of-00001.tfrecord"
    offset = int(
        (tmp_path / "bad" / "train-00000-of-00001.tfrecord.idx").read_text().splitlines()[9].split()[0]
    )
    data = bytearray(shard.read_bytes())
    data[offset + 14] ^= 0xFF
    shard.write_bytes(bytes(data))
    plan = plan_read(str(tmp_path / "bad"))
    with pytest.raises(
        tt.CorruptRecordError, match=r"train-00000-of-00001\.tfrecord' at byte \d+ \(record 9\)"
    ):
        _ids(plan, 1 << 20)
    skipped, ids = 0, []
    for group in plan.ranges(1 << 20):
        for rng in group:
            for decoded in read_range(rng, DecodeOptions(SPEC, on_error="skip")):
                skipped += decoded.skipped
                keep = decoded.keep if decoded.keep is not None else [True] * decoded.num_rows
                ids.extend(i for i, kept in zip(decoded.columns["id"].tolist(), keep, strict=True) if kept)
    assert skipped == 1 and ids == [i for i in range(100) if i != 9]


def test_a_manifest_above_the_shards_of_the_folder_named_plans_the_read(tmp_path: Path) -> None:
    # A partitioned write's layout: shards in key=value folders, one manifest above them.
    shards, tables = [], []
    for folder in ("k=0", "k=1"):
        (tmp_path / folder).mkdir()
        path = tmp_path / folder / "part-0.tfrecord"
        with tt.RecordWriter(path) as writer:
            for i in range(3):
                writer.write(tt.encode_example({"id": i, "x": [0.5]}))
        shards.append(str(path))
        tables.append(index_from_sizes(writer.framed_sizes))
    write_manifest(str(tmp_path / "part.manifest.json"), shards, tables)
    plan = plan_read(str(tmp_path))
    assert plan.manifest is not None and plan.manifest.location == str(tmp_path / "part.manifest.json")
    assert sorted(plan.paths) == shards and _ids(plan, 1 << 20) == [0, 1, 2, 0, 1, 2]
    # A folder below it: its own shards, listed (that manifest lists others too).
    assert plan_read(str(tmp_path / "k=1")).manifest is None
    # One that lists other shards than the folder holds is not taken.
    write_manifest(str(tmp_path / "part.manifest.json"), shards[:1], tables[:1])
    assert plan_read(str(tmp_path)).manifest is None
