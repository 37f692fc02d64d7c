"""tt.spark against a real local-mode Spark 4 session (``local[2,4]``: 2 cores, a task tried up to 4
times), shared by the module; skipped, naming what is missing, without Java or pyspark 4.

A DataFrame written and read back equals the original (types, nulls as documented), and
``tt.TFRecordDataset`` reads it through the manifest; reads are planned as index ranges; a task
killed mid-write is retried and leaves no partial or duplicate shard; a corrupt shard fails the
read naming it, or is skipped and counted; bad options fail before any task runs.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from system_programs import missing

import torch_tfrecord as tt
from torch_tfrecord.codec.spec_file import encode_spec_json

pyspark = pytest.importorskip("pyspark", minversion="4.0", reason="tt.spark needs pyspark 4 (extra spark)")
if missing("java"):
    pytest.skip(missing("java") or "", allow_module_level=True)

from pyspark.sql import SparkSession  # noqa: E402

from torch_tfrecord.integrations.spark import (  # noqa: E402
    TFRecordDataSource,
    read_tfrecords,
    register,
    write_tfrecords,
)

N = 40


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    session = (
        SparkSession.builder.master("local[2,4]")  # (local mode retries a task only as local[N,F] says)
        .appName("torch-tfrecord-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.task.maxFailures", "4")
        .config("spark.speculation", "true")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "8")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


def _frame(spark: SparkSession, n: int = N, partitions: int = 2) -> Any:
    return spark.range(n, numPartitions=partitions).selectExpr(
        "id",
        "cast(id as int) as i",
        "id % 2 = 0 as flag",
        "cast(id as float) / 4 as f",
        "cast(id as double) / 8 as d",
        "if(id % 7 = 3, null, concat('s', id)) as s",
        "cast(concat('b', id) as binary) as blob",
        "array(id, id * 2) as pair",
        "if(id % 5 = 4, null, array(cast(id as float), 0.5f)) as floats",
        "if(id % 6 = 5, null, id * 3) as maybe",
        "cast(id % 3 as int) as label",
    )


def _listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def _manifest(root: Path, prefix: str = "part") -> dict[str, Any]:
    return json.loads((root / f"{prefix}.manifest.json").read_text())  # type: ignore[no-any-return]


def _expected_row(row: Any) -> dict[str, Any]:
    values = row.asDict()
    values["floats"] = [] if values["floats"] is None else values["floats"]  # (a null array reads back empty)
    return values


def test_write_then_read_gives_the_frame_back_and_the_manifest_its_shards(
    spark: SparkSession, tmp_path: Path
) -> None:
    frame = _frame(spark)
    out = tmp_path / "out"
    manifest_path = write_tfrecords(frame, out, max_records_per_shard=7)
    assert manifest_path == str(out / "part.manifest.json")
    manifest = _manifest(out)
    shards = [shard["name"] for shard in manifest["shards"]]
    # Each task of the 2 wrote ceil(20/7) = 3 shards; nothing else is in the folder, nothing hidden.
    assert shards == [f"part-{i:05d}-of-00006.tfrecord" for i in range(6)]
    assert _listing(out) == sorted(
        [*shards, *(f"{name}.idx" for name in shards), "part.manifest.json", "part.manifest.tables.npz"]
    )
    assert sum(shard["records"] for shard in manifest["shards"]) == N

    back = spark.read.format("tfrecord").load(str(out / "part.manifest.json"))
    assert back.dtypes == frame.dtypes  # every type comes back, the columns in their order
    assert manifest["spec"]["columns"] == frame.columns
    got = {row.id: row.asDict() for row in back.collect()}
    want = {row.id: _expected_row(row) for row in frame.collect()}
    assert got == want
    assert got[3]["s"] is None and got[5]["maybe"] is None and got[4]["floats"] == []
    dataset = tt.TFRecordDataset(str(out), spec={"id": tt.FixedLen((), torch.int64), "label": "int"})
    assert dataset.files.feature_spec == manifest["spec"]  # (the files came from the manifest)
    assert sorted(int(sample["id"]) for sample in dataset) == list(range(N))


def test_reads_are_index_ranges_a_large_shard_split_across_tasks(spark: SparkSession, tmp_path: Path) -> None:
    prefix = tmp_path / "big" / "train"
    with tt.ShardedExampleWriter(prefix, max_records=2000) as writer:
        for i in range(2000):
            writer.write({"id": i, "x": [float(i)] * 8})
    spec = {"id": tt.FixedLen((), torch.int64), "x": tt.FixedLen((8,), torch.float32)}
    size = (tmp_path / "big" / "train-00000-of-00001.tfrecord").stat().st_size
    ranges = -(-size // (16 << 10))  # one shard of ~170 KB in ranges of 16 KB
    options = {"path": str(tmp_path / "big"), "spec": encode_spec_json(spec), "max_partition_bytes": "16384"}
    source = TFRecordDataSource(options)
    planned = source.reader(source.schema()).partitions()
    assert len(planned) == ranges > 5
    bounds = [(r.start, r.stop) for partition in planned for r in partition.value]
    assert bounds[0][0] == 0 and bounds[-1][1] == 2000
    assert all(a[1] == b[0] for a, b in itertools.pairwise(bounds))
    # Without the manifest, from the shard's .idx: the same ranges (planning reads no record).
    (tmp_path / "big" / "train.manifest.json").rename(tmp_path / "train.manifest.json.away")
    source = TFRecordDataSource(options)
    assert [(r.start, r.stop) for p in source.reader(source.schema()).partitions() for r in p.value] == bounds
    frame = read_tfrecords(spark, str(tmp_path / "big"), spec=spec, max_partition_bytes=16 << 10)
    rows = frame.collect()
    assert sorted(row.id for row in rows) == list(range(2000))
    assert all(row.x == [float(row.id)] * 8 for row in rows)
    assert dict(frame.dtypes) == {"id": "bigint", "x": "array<float>"}


def test_partition_by_makes_folders_listed_by_one_manifest(spark: SparkSession, tmp_path: Path) -> None:
    out = tmp_path / "parted"
    write_tfrecords(_frame(spark).select("id", "label", "s"), out, partition_by=["label"])
    manifest = _manifest(out)
    names = [shard["name"] for shard in manifest["shards"]]
    assert {name.split("/")[0] for name in names} == {"label=0", "label=1", "label=2"}
    assert set(manifest["spec"]["spec"]) == {"id", "s"}  # the partition column is the folder
    for label in range(3):  # each folder holds its label's rows
        folder = tt.TFRecordDataset(str(out / f"label={label}"), spec={"id": "int"})
        assert sorted(int(sample["id"]) for sample in folder) == [i for i in range(N) if i % 3 == label]
    whole = read_tfrecords(spark, str(out / "part.manifest.json"))
    assert sorted(row.id for row in whole.collect()) == list(range(N))


def _countries(spark: SparkSession) -> Any:
    return spark.range(N, numPartitions=2).selectExpr(
        "id",
        "element_at(array('DE', 'FR', 'PL', null), cast(id % 4 as int) + 1) as country",
        "array(cast(id as float), 0.5f) as x",
        "id % 3 as k",
        "if(id % 7 = 3, null, concat('s', id)) as s",
    )


def test_a_partitioned_write_reads_back_with_its_folder_columns_as_parquet_does(
    spark: SparkSession, tmp_path: Path
) -> None:
    frame = _countries(spark)
    frame.write.partitionBy("country", "k").parquet(str(tmp_path / "parquet"))
    parquet = spark.read.parquet(str(tmp_path / "parquet"))
    out = tmp_path / "parted"
    writer = frame.write.format("tfrecord").mode("append").option("partition_by", "country,k")
    writer.save(str(out))
    assert (out / "country=__HIVE_DEFAULT_PARTITION__" / "k=2").is_dir()  # (a null's folder)

    back = spark.read.format("tfrecord").load(str(out))
    # The folders are columns again, last, typed as Spark's Parquet types them (k: a long written,
    # an int read, as there), the others in their order; the rows are the original's.
    assert (
        back.dtypes
        == parquet.dtypes
        == [
            ("id", "bigint"),
            ("x", "array<float>"),
            ("s", "string"),
            ("country", "string"),
            ("k", "int"),
        ]
    )

    def rows(df: Any) -> list[tuple[Any, ...]]:
        return sorted((tuple(row) for row in df.collect()), key=lambda row: row[0])

    assert rows(back) == rows(parquet) == rows(frame.select(*parquet.columns))
    assert back.filter("country is null").count() == N // 4
    # Naming the manifest, or reading through write_tfrecords' folder: the same.
    assert rows(read_tfrecords(spark, out / "part.manifest.json")) == rows(back)
    # Without the manifest, from the folder's listing: the same columns (the records' types
    # inferred from them: a string is bytes there), the folders' the same.
    (out / "part.manifest.json").rename(tmp_path / "moved.manifest.json")
    listed = spark.read.format("tfrecord").load(str(out))
    assert sorted(listed.columns[:3]) == sorted(back.columns[:3]) and listed.dtypes[3:] == back.dtypes[3:]
    assert sorted(tuple(row) for row in listed.select("id", "country", "k").collect()) == sorted(
        tuple(row) for row in frame.select("id", "country", "k").collect()
    )
    # One folder named: its rows, without its column (as Spark reads a Parquet folder of one value).
    one = spark.read.format("tfrecord").load(str(out / "country=FR"))
    assert sorted(one.columns[:3]) == ["id", "s", "x"] and one.dtypes[3] == ("k", "int")
    assert sorted(row.id for row in one.collect()) == [i for i in range(N) if i % 4 == 1]
    # A schema given: its types, the folder's values cast to them.
    given = spark.read.format("tfrecord").schema("id long, country string, k string").load(str(out))
    assert sorted(tuple(row) for row in given.filter("country = 'DE'").collect()) == [
        (i, "DE", str(i % 3)) for i in range(0, N, 4)
    ]


def test_tfrecorddataset_on_a_partitioned_write_reads_every_folder_without_its_columns(
    spark: SparkSession, tmp_path: Path
) -> None:
    out = tmp_path / "parted"
    write_tfrecords(_countries(spark), out, partition_by=["country"])
    spec = {"id": tt.FixedLen((), torch.int64), "x": tt.FixedLen((2,), torch.float32)}
    # The folder: every folder's shards, found by listing it (the datasets look for a manifest
    # beside the shards, and this one is above them: each shard's .idx is read instead).
    listed = tt.TFRecordDataset(str(out), spec=spec)
    assert listed.files.feature_spec is None
    # The manifest named: the same shards from it, with its saved spec.
    named = tt.TFRecordDataset(str(out / "part.manifest.json"), spec=spec)
    assert named.files.feature_spec == _manifest(out)["spec"]
    for dataset in (listed, named):
        samples = list(dataset)
        assert sorted(int(sample["id"]) for sample in samples) == list(range(N))
        assert "country" not in samples[0]  # (the folder's column is in no record)
    folder = tt.TFRecordDataset(str(out / "country=PL"), spec={"id": "int"})
    assert sorted(int(sample["id"]) for sample in folder) == [i for i in range(N) if i % 4 == 2]


def _folders_schema(root: Path, folders: list[str]) -> Any:
    for number, folder in enumerate(folders):
        (root / folder).mkdir(parents=True)
        with tt.RecordWriter(root / folder / f"part-{number}.tfrecord") as writer:
            writer.write(tt.encode_example({"id": number}))
    source = TFRecordDataSource(
        {"path": str(root), "spec": encode_spec_json({"id": tt.FixedLen((), torch.int64)})}
    )
    return source.schema()


def test_partition_folders_are_typed_as_spark_types_parquets(tmp_path: Path) -> None:
    def types(name: str, folders: list[str]) -> list[tuple[str, str]]:
        schema = _folders_schema(tmp_path / name, folders)
        return [(field.name, field.dataType.simpleString()) for field in schema.fields]

    assert types("ints", ["n=1", "n=-20", "n=__HIVE_DEFAULT_PARTITION__"]) == [("id", "bigint"), ("n", "int")]
    assert types("longs", ["n=1", "n=3000000000"]) == [("id", "bigint"), ("n", "bigint")]
    assert types("doubles", ["n=1", "n=0.5", "n=2e3"]) == [("id", "bigint"), ("n", "double")]
    assert types("strings", ["n=1", "n=DE", "n=true"]) == [("id", "bigint"), ("n", "string")]
    assert types("nested", ["a=x/b=1", "a=y/b=2"]) == [("id", "bigint"), ("a", "string"), ("b", "int")]
    assert types("escaped", ["a%3Db=x%2Fy"]) == [("id", "bigint"), ("a=b", "string")]
    assert types("plain", ["2024/v1"]) == [("id", "bigint")]  # (no key=value folder: no column)
    with pytest.raises(tt.TFRecordError, match="partition folders disagree: .*n=1.* in none"):
        _folders_schema(tmp_path / "mixed", ["n=1", "other"])


def test_gzip_shards_and_their_manifest(spark: SparkSession, tmp_path: Path) -> None:
    out = tmp_path / "gz"
    write_tfrecords(_frame(spark).select("id", "s"), out, compression="gzip")
    manifest = _manifest(out)
    assert [shard["compression"] for shard in manifest["shards"]] == ["gzip", "gzip"]
    assert not [name for name in _listing(out) if name.endswith(".idx")]
    with open(out / manifest["shards"][0]["name"], "rb") as handle:
        assert handle.read(2) == b"\x1f\x8b"
    back = spark.read.format("tfrecord").load(str(out))
    assert sorted((row.id, row.s) for row in back.collect()) == sorted(
        (row.id, row.s) for row in _frame(spark).collect()
    )


def _die_once(marker: str) -> Any:
    """Passes the rows on, but the first attempt of partition 1 dies (its process, abruptly) midway,
    leaving ``marker`` to show that it did."""

    def pass_or_die(batches: Iterator[Any]) -> Iterator[Any]:
        import time

        from pyspark import TaskContext

        context = TaskContext.get()
        for number, batch in enumerate(batches):
            yield batch
            if context.partitionId() == 1 and context.attemptNumber() == 0 and number == 2:
                time.sleep(1.0)  # (the writer takes what came so far)
                Path(marker).touch()
                os._exit(1)

    return pass_or_die


def test_a_task_killed_mid_write_is_retried_without_a_partial_or_duplicate_shard(
    spark: SparkSession, tmp_path: Path
) -> None:
    out = tmp_path / "retried"
    frame = _frame(spark, n=120, partitions=3).select("id", "s")
    marker = tmp_path / "died"
    frame = frame.mapInArrow(_die_once(str(marker)), frame.schema)
    write_tfrecords(frame, out)
    assert marker.exists()  # (the first attempt of partition 1 was killed: this is its retry's output)
    manifest = _manifest(out)
    shards = [shard["name"] for shard in manifest["shards"]]
    assert shards == [f"part-{i:05d}-of-00003.tfrecord" for i in range(3)]
    assert _listing(out) == sorted(
        [*shards, *(f"{name}.idx" for name in shards), "part.manifest.json", "part.manifest.tables.npz"]
    )  # no piece of the killed attempt is left, under any name
    ids = [int(sample["id"]) for sample in tt.TFRecordDataset(str(out), spec={"id": "int"})]
    assert sorted(ids) == list(range(120))  # each row once
    assert [shard["records"] for shard in manifest["shards"]] == [40, 40, 40]


def _corrupt(path: Path, record: int) -> None:
    """Flips a byte in the data of record ``record`` (its data CRC no longer matches); size unchanged."""
    index = [line.split() for line in (path.parent / (path.name + ".idx")).read_text().splitlines()]
    offset = int(index[record][0]) + 12 + 2
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_corrupt_shard_fails_the_read_naming_it_or_is_skipped_and_counted(
    spark: SparkSession, tmp_path: Path
) -> None:
    out = tmp_path / "damaged"
    with tt.ShardedExampleWriter(out / "part", max_records=N // 2) as writer:
        for i in range(N):
            writer.write({"id": i, "s": f"s{i}"})
    damaged = out / "part-00001-of-00002.tfrecord"
    _corrupt(damaged, 5)
    with pytest.raises(Exception, match=r"CRC mismatch in .*part-00001-of-00002\.tfrecord.* at byte \d+"):
        read_tfrecords(spark, out).collect()
    skipped = read_tfrecords(spark, out, on_error="skip").collect()
    assert len(skipped) == N - 1
    assert {row.id for row in skipped} == set(range(N)) - {N // 2 + 5}


def test_bad_options_fail_before_any_task_runs(spark: SparkSession, tmp_path: Path) -> None:
    out = tmp_path / "ok"
    with tt.ShardedExampleWriter(out / "part", max_records=4) as writer:
        writer.write({"id": 1})
    tracker = spark.sparkContext.statusTracker()
    spark.sparkContext.setJobGroup("bad-options", "bad options")
    try:

        def reader() -> Any:  # (a DataFrameReader keeps its options: a new one each time)
            return spark.read.format("tfrecord")

        with pytest.raises(Exception, match="'kind' of"):
            reader().option("spec", json.dumps({"id": {"kind": "Bogus"}})).load(str(out)).collect()
        with pytest.raises(Exception, match="no such file or directory: .*missing"):
            reader().load(str(tmp_path / "missing")).collect()
        with pytest.raises(Exception, match="record_type"):
            reader().option("record_type", "tensor").load(str(out)).collect()
        with pytest.raises(Exception, match="unknown option"):
            reader().option("spce", "{}").load(str(out)).collect()
        frame = _frame(spark, n=4)
        with pytest.raises(Exception, match="compression"):
            writer = frame.write.format("tfrecord").mode("append")
            writer.option("compression", "lz4").save(str(tmp_path / "w"))
        with pytest.raises(Exception, match="holds a dataset already"):
            write_tfrecords(frame.select("id"), out)
        with pytest.raises(Exception, match="'m' is map"):
            write_tfrecords(frame.selectExpr("map(id, id) as m"), tmp_path / "w2")
    finally:
        spark.sparkContext.setJobGroup("after", "after")
    assert tracker.getJobIdsForGroup("bad-options") == []
    assert not (tmp_path / "w").exists() or not _listing(tmp_path / "w")


def test_raw_records_and_sequence_examples(spark: SparkSession, tmp_path: Path) -> None:
    path = tmp_path / "seq.tfrecord"
    with tt.RecordWriter(path) as writer:
        for i in range(10):
            writer.write(tt.encode_sequence_example({"id": i}, {"frames": [[float(i), 1.0]] * (i % 3 + 1)}))
    raw = read_tfrecords(spark, str(path), spec="raw").collect()
    assert [len(row.record) > 0 for row in raw] == [True] * 10
    frame = read_tfrecords(
        spark,
        str(path),
        context_spec={"id": tt.FixedLen((), torch.int64)},
        sequence_spec={"frames": tt.FixedLenSequence((2,), torch.float32)},
    )
    rows = sorted(frame.collect(), key=lambda row: row.id)
    assert [row.frames for row in rows] == [[[float(i), 1.0]] * (i % 3 + 1) for i in range(10)]
