"""Checks that TensorFlow reads what tt.spark writes. Not part of the test suite (which never runs
TensorFlow): run it by hand with this project's Python, naming a Python that has TensorFlow (a
scratch venv):

    PYTHONPATH=$PWD python tests/data/tf_reads_spark_writes.py /tmp/tfvenv/bin/python

A local[2] Spark session writes 200 rows of every column type tt.spark writes (long, int, bool,
float, double, string, binary, array<long>, array<float>, array<string>, a long and a string with
nulls, a null array) with ``tt.spark.write_tfrecords``: plain indexed shards, GZIP and ZLIB shards,
and a write partitioned by a column (its folders). TensorFlow 2.x parses every shard the manifest
lists with ``tf.data.TFRecordDataset`` (``compression_type`` for the compressed ones) and
``tf.io.parse_example``; the values must equal the rows (a float's and a double's as float32, what
a float_list holds; a null: the feature absent, so the parse's default; a partitioned row: in its
folder). Prints one line per check and exits non-zero on a difference.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from typing import Any

import numpy as np
from pyspark.sql import SparkSession

import torch_tfrecord as tt

TF_SCRIPT = r"""
import json, sys
import tensorflow as tf
files, compression = json.loads(sys.argv[1]), sys.argv[2]
spec = {
    "id": tf.io.FixedLenFeature([], tf.int64),
    "i": tf.io.FixedLenFeature([], tf.int64),
    "flag": tf.io.FixedLenFeature([], tf.int64),
    "f": tf.io.FixedLenFeature([], tf.float32),
    "d": tf.io.FixedLenFeature([], tf.float32),
    "s": tf.io.FixedLenFeature([], tf.string),
    "blob": tf.io.FixedLenFeature([], tf.string),
    "longs": tf.io.VarLenFeature(tf.int64),
    "floats": tf.io.VarLenFeature(tf.float32),
    "strings": tf.io.VarLenFeature(tf.string),
    "maybe": tf.io.FixedLenFeature([], tf.int64, default_value=-1),
    "maybe_s": tf.io.FixedLenFeature([], tf.string, default_value=b"<null>"),
}
rows = []
for name in files:
    for batch in tf.data.TFRecordDataset([name], compression_type=compression).batch(64):
        parsed = tf.io.parse_example(batch, spec)
        lists = {}
        for key in ("longs", "floats", "strings"):
            rows_of, values = parsed[key].indices.numpy()[:, 0], parsed[key].values.numpy()
            lists[key] = [values[rows_of == i].tolist() for i in range(len(parsed["id"]))]
        for i in range(len(parsed["id"])):
            row = {"file": name}
            for key in ("id", "i", "flag", "maybe"):
                row[key] = int(parsed[key][i])
            for key in ("f", "d"):
                row[key] = float(parsed[key][i])
            row["s"] = parsed["s"][i].numpy().decode()
            row["maybe_s"] = parsed["maybe_s"][i].numpy().decode()
            row["blob"] = parsed["blob"][i].numpy().hex()
            row["longs"] = [int(v) for v in lists["longs"][i]]
            row["floats"] = [float(v) for v in lists["floats"][i]]
            row["strings"] = [v.decode() for v in lists["strings"][i]]
            rows.append(row)
print(tf.__version__)
print(json.dumps(rows))
"""

COLUMNS = [
    "id",
    "cast(id as int) - 100 as i",
    "id % 2 = 0 as flag",
    "cast(cast(id as float) / 4 as float) as f",
    "cast(id as double) / 3 as d",
    "concat('s', id) as s",
    "cast(concat('b', id) as binary) as blob",
    "array(id, -id, id * 1000000000000) as longs",
    "if(id % 5 = 4, null, array(cast(id as float) / 3, 0.5f)) as floats",
    "array_repeat(concat('w', id), cast(id % 3 as int)) as strings",
    "if(id % 6 = 5, null, id * 3) as maybe",
    "if(id % 7 = 3, null, concat('n', id)) as maybe_s",
    "element_at(array('DE', 'FR', 'PL'), cast(id % 3 as int) + 1) as country",
]


def float32(value: float) -> float:
    return float(np.float32(value))


def expected_row(row: Any) -> dict[str, Any]:
    """What TensorFlow's parse of ``row``'s Example gives (a null: the parse's default)."""
    return {
        "id": row.id,
        "i": row.i,
        "flag": int(row.flag),
        "f": float32(row.f),
        "d": float32(row.d),
        "s": row.s,
        "blob": bytes(row.blob).hex(),
        "longs": list(row.longs),
        "floats": [] if row.floats is None else [float32(v) for v in row.floats],
        "strings": list(row.strings),
        "maybe": -1 if row.maybe is None else row.maybe,
        "maybe_s": "<null>" if row.maybe_s is None else row.maybe_s,
    }


def main() -> None:
    tf_python = sys.argv[1]
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    frame = spark.range(200, numPartitions=2).selectExpr(*COLUMNS)
    originals = {row.id: row for row in frame.collect()}
    failed = False
    with tempfile.TemporaryDirectory() as directory:
        checks: list[tuple[str, str | None, list[str]]] = [
            ("plain", None, []),
            ("gzip", "gzip", []),
            ("zlib", "zlib", []),
            ("partitioned by country", None, ["country"]),
        ]
        for name, compression, partition_by in checks:
            written = frame if partition_by else frame.drop("country")
            out = os.path.join(directory, name.replace(" ", "-"))
            manifest = tt.spark.write_tfrecords(
                written, out, compression=compression, partition_by=partition_by, max_records_per_shard=60
            )
            with open(manifest) as handle:
                shards = [os.path.join(out, shard["name"]) for shard in json.load(handle)["shards"]]
            result = subprocess.run(
                [tf_python, "-c", TF_SCRIPT, json.dumps(shards), (compression or "").upper()],
                capture_output=True,
                text=True,
                check=True,
                env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""},
            )
            tf_version, printed = result.stdout.splitlines()[-2:]
            rows = sorted(json.loads(printed), key=lambda row: row["id"])
            folders_right = all(
                f"country={originals[row['id']].country}/" in row["file"] if partition_by else True
                for row in rows
            )
            parsed = [{key: value for key, value in row.items() if key != "file"} for row in rows]
            same = parsed == [expected_row(originals[i]) for i in sorted(originals)] and folders_right
            if not same:
                for got, row_id in zip(parsed, sorted(originals), strict=False):
                    if got != expected_row(originals[row_id]):
                        print(
                            f"  first difference: TensorFlow {got}\n  rows {expected_row(originals[row_id])}"
                        )
                        break
            failed |= not same
            folders = sorted({os.path.relpath(os.path.dirname(path), out) for path in shards})
            print(
                f"{name}: TensorFlow {tf_version} parsed {len(rows)} rows of {len(shards)} shards"
                f"{' in ' + str(folders) if partition_by else ''}: equal={same}"
            )
    spark.stop()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
