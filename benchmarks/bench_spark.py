"""Spark and Beam: tt.spark's write and read against Spark's own Parquet, tt.beam's read against Beam's
ReadFromTFRecord + protobuf parse, and the time to plan a read of many shards with and without the
manifest.

Spark runs in local mode (``local[2]``) on one DataFrame of ``--size-mb`` of Examples (an int64 id,
an int64 label, 16 floats, a 32-byte binary: ~200 B framed per record), made by ``spark.range``
and written twice: as TFRecord (``tt.spark.write_tfrecords``, indexed shards and the manifest)
and as Parquet (``df.write.parquet``, Spark's defaults: snappy). Each is then read back whole into
Spark's ``noop`` sink (every column materialized, nothing written), TFRecord through
``spark.read.format("tfrecord")`` on the manifest, Parquet through ``spark.read.parquet`` (its
vectorized reader). spark-tfrecord (linkedin's JVM jar) is not on PyPI, so Parquet is the bar.

Beam (``--parts beam``, under a Python with apache-beam: its pins differ from ours, so a scratch
venv) reads the TFRecord shards on the DirectRunner with 2 workers (multi_processing): ours with
``tt.beam.ReadExamples`` (one dict of NumPy values per record, and one Arrow table per decoded
batch), Beam's with ``ReadFromTFRecord`` and each record parsed by protobuf into a dict of lists,
what a pipeline without TensorFlow does. Every pipeline ends in a global count.

Planning (``--parts plan``): 2,000 shards of 10 records each, the Spark reader's partitions planned
from the manifest, and from the 2,000 ``.idx`` files when the manifest is moved away.

    PYTHONPATH=$PWD python benchmarks/bench_spark.py --size-mb 1024 --parts spark,plan
    PYTHONPATH=$PWD /tmp/beamenv/bin/python benchmarks/bench_spark.py --size-mb 1024 --parts beam
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch_tfrecord as tt

RECORD_BYTES = 200  # framed, about: sets the record count for --size-mb
COLUMNS = (
    "id",
    "id % 1000 as label",
    "transform(sequence(1, 16), k -> cast(id * k as float) / 7) as x",
    "cast(sha2(cast(id as string), 256) as binary) as blob",
)


def timed(action: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def row(name: str, records: int, seconds: float, size_bytes: int, bar: float | None) -> str:
    ratio = "" if bar is None else f"{bar / seconds:8.2f}x"
    return (
        f"{name:<46} {records:>10,} {seconds:>9.2f} {records / seconds:>12,.0f} "
        f"{size_bytes / seconds / 1e6:>8.1f} {ratio:>9}"
    )


def header() -> str:
    return f"{'operation':<46} {'records':>10} {'median s':>9} {'records/s':>12} {'MB/s':>8} {'vs bar':>9}"


def spark_part(directory: str, records: int, repeats: int, read_rounds: int, skip_writes: bool) -> None:
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    tt.spark.register(spark)
    frame = spark.range(records, numPartitions=4).selectExpr(*COLUMNS)
    tf_dir, pq_dir = os.path.join(directory, "tfrecord"), os.path.join(directory, "parquet")

    def write_tf() -> None:
        tt.spark.write_tfrecords(frame, tf_dir, mode="overwrite")

    def write_pq() -> None:
        frame.write.mode("overwrite").parquet(pq_dir)

    manifest = os.path.join(tf_dir, "part.manifest.json")
    written = os.path.exists(manifest) and os.path.isdir(pq_dir)
    if skip_writes and written:
        write_pq_s = write_tf_s = None  # the shards of an earlier run, read as they are
        with open(manifest) as handle:
            records = sum(shard["records"] for shard in json.load(handle)["shards"])
    else:
        if skip_writes:
            print(
                f"--skip-writes: no earlier shards in {directory} (a manifest and a Parquet folder): writing"
            )
        write_pq_s, write_tf_s = timed(write_pq, repeats), timed(write_tf, repeats)
    tf_bytes = sum(os.path.getsize(p) for p in glob.glob(os.path.join(tf_dir, "*.tfrecord")))
    pq_bytes = sum(os.path.getsize(p) for p in glob.glob(os.path.join(pq_dir, "*.parquet")))

    def read_tf() -> None:
        spark.read.format("tfrecord").load(manifest).write.format("noop").mode("overwrite").save()

    def read_pq() -> None:
        spark.read.parquet(pq_dir).write.format("noop").mode("overwrite").save()

    read_tf()  # (warm: the Python workers and the page cache)
    read_pq()
    # The reads alternate, round after round, in one session: each read in a session ran faster
    # than the one before for a few rounds (the JIT, the Python workers' imports), and the machine's
    # load moves, so the two are timed side by side (which goes first alternates too) and the
    # medians compared.
    read_times: dict[str, list[float]] = {"pq": [], "tf": []}
    for round_number in range(read_rounds):
        order = [("pq", read_pq), ("tf", read_tf)]
        for name, read in order if round_number % 2 == 0 else order[::-1]:
            start = time.perf_counter()
            read()
            read_times[name].append(time.perf_counter() - start)
    read_pq_s, read_tf_s = (statistics.median(read_times[name]) for name in ("pq", "tf"))
    print(
        f"\nSpark local[2]: {records:,} records; "
        f"TFRecord {tf_bytes / 1e6:.0f} MB, Parquet {pq_bytes / 1e6:.0f} MB"
    )
    print(header())
    if write_pq_s is not None and write_tf_s is not None:
        print(row("write: Parquet (spark df.write.parquet) [bar]", records, write_pq_s, tf_bytes, None))
        print(row("write: tt.spark.write_tfrecords", records, write_tf_s, tf_bytes, write_pq_s))
    print(row("read: Parquet (spark.read.parquet) [bar]", records, read_pq_s, tf_bytes, None))
    print(row("read: spark.read.format('tfrecord')", records, read_tf_s, tf_bytes, read_pq_s))
    ratios = [pq / tf for pq, tf in zip(read_times["pq"], read_times["tf"], strict=True)]
    listed = {name: " ".join(f"{t:.2f}" for t in times) for name, times in read_times.items()}
    print(
        f"reads, {read_rounds} alternating rounds after a warm read of each, s: Parquet {listed['pq']}; "
        f"ours {listed['tf']}; ratio per round {' '.join(f'{r:.2f}' for r in ratios)}"
    )
    spark.stop()


def beam_part(directory: str, repeats: int) -> None:
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from torch_tfrecord.proto.example_pb2 import Example

    tf_dir = os.path.join(directory, "tfrecord")
    manifest = os.path.join(tf_dir, "part.manifest.json")
    if not os.path.exists(manifest):
        raise SystemExit(f"{manifest} is missing: run --parts spark first (it writes the shards)")
    records = sum(1 for path in glob.glob(os.path.join(tf_dir, "*.tfrecord")) for _ in tt.read_records(path))
    size_bytes = sum(os.path.getsize(p) for p in glob.glob(os.path.join(tf_dir, "*.tfrecord")))

    def options() -> PipelineOptions:
        return PipelineOptions(
            runner="DirectRunner", direct_num_workers=2, direct_running_mode="multi_processing"
        )

    def parse(record: bytes) -> dict[str, list[Any]]:
        example = Example.FromString(record)
        out = {}
        for key, feature in example.features.feature.items():
            kind = feature.WhichOneof("kind")
            out[key] = list(getattr(feature, kind).value) if kind else []
        return out

    def ours() -> None:
        with beam.Pipeline(options=options()) as pipeline:
            _ = pipeline | tt.beam.ReadExamples(manifest) | beam.combiners.Count.Globally()

    def ours_arrow() -> None:
        with beam.Pipeline(options=options()) as pipeline:
            tables = pipeline | tt.beam.ReadExamples(manifest, output="arrow")
            _ = tables | beam.Map(lambda table: table.num_rows) | beam.CombineGlobally(sum)

    def theirs() -> None:
        with beam.Pipeline(options=options()) as pipeline:
            _ = (
                pipeline
                | beam.io.ReadFromTFRecord(os.path.join(tf_dir, "*.tfrecord"))
                | beam.Map(parse)
                | beam.combiners.Count.Globally()
            )

    theirs_s = timed(theirs, repeats)
    ours_s = timed(ours, repeats)
    arrow_s = timed(ours_arrow, repeats)
    print(f"\nBeam DirectRunner, 2 workers (multi_processing), apache-beam {beam.__version__}")
    print(header())
    print(row("read: beam ReadFromTFRecord + protobuf [bar]", records, theirs_s, size_bytes, None))
    print(row("read: tt.beam.ReadExamples (NumPy dicts)", records, ours_s, size_bytes, theirs_s))
    print(row("read: tt.beam.ReadExamples (Arrow tables)", records, arrow_s, size_bytes, theirs_s))


def plan_part(directory: str, shards: int, repeats: int) -> None:
    from torch_tfrecord.integrations.spark import TFRecordDataSource

    folder = os.path.join(directory, f"plan{shards}")
    prefix = os.path.join(folder, "train")
    manifest = prefix + ".manifest.json"
    if not os.path.exists(manifest) and not os.path.exists(manifest + ".away"):
        shutil.rmtree(folder, ignore_errors=True)
        with tt.ShardedExampleWriter(prefix, max_records=10) as writer:
            for i in range(shards * 10):
                writer.write({"id": i, "x": [float(i)] * 4})
    if os.path.exists(manifest + ".away"):
        os.replace(manifest + ".away", manifest)
    spec = json.dumps(
        {
            "id": {"kind": "FixedLen", "shape": [], "dtype": "int64"},
            "x": {"kind": "VarLen", "dtype": "float32"},
        }
    )

    def plan(path: str) -> Callable[[], None]:
        def run() -> None:
            source = TFRecordDataSource({"path": path, "spec": spec})
            partitions = source.reader(source.schema()).partitions()
            assert partitions

        return run

    with_manifest = timed(plan(manifest), repeats)
    os.replace(manifest, manifest + ".away")
    try:
        without = timed(plan(folder), repeats)
    finally:
        os.replace(manifest + ".away", manifest)
    print(f"\nPlanning a Spark read of {shards:,} shards (local files, page cache warm)")
    print(f"{'planned from':<46} {'median s':>9} {'vs manifest':>12}")
    print(f"{'the manifest (one file, zipped tables)':<46} {with_manifest:>9.3f} {'1.00x':>12}")
    print(
        f"{f'{shards:,} .idx files (no manifest)':<46} {without:>9.3f} "
        f"{f'{without / with_manifest:.2f}x':>12}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", default="/tmp/ttbench-spark")
    parser.add_argument("--size-mb", type=float, default=1024, help="TFRecord bytes to write and read")
    parser.add_argument(
        "--repeats", type=int, default=3, help="timed Spark writes, Beam reads and plans (median of these)"
    )
    parser.add_argument("--shards", type=int, default=2000, help="shards for the planning part")
    parser.add_argument("--parts", default="spark,plan", help="of spark, beam, plan")
    parser.add_argument(
        "--read-rounds", type=int, default=5, help="alternating Spark reads, after a warm one"
    )
    parser.add_argument(
        "--skip-writes", action="store_true", help="read the Spark part's shards of an earlier run in --dir"
    )
    args = parser.parse_args()
    if args.read_rounds < 1 or args.repeats < 1:
        parser.error("--read-rounds and --repeats must be at least 1")
    os.makedirs(args.dir, exist_ok=True)
    parts = set(args.parts.split(","))
    with open("/proc/loadavg") as handle:
        print(f"load average before: {handle.read().strip()}")
    records = int(args.size_mb * 1e6 / RECORD_BYTES)
    if "spark" in parts:
        spark_part(args.dir, records, args.repeats, args.read_rounds, args.skip_writes)
    if "beam" in parts:
        beam_part(args.dir, args.repeats)
    if "plan" in parts:
        plan_part(args.dir, args.shards, args.repeats)
    with open("/proc/loadavg") as handle:
        print(f"\nload average after: {handle.read().strip()}")


if __name__ == "__main__":
    main()
