"""Checks that TensorFlow reads what tt.ray.write_tfrecords writes. Not part of the test suite
(which never runs TensorFlow): run it by hand with this project's Python, naming a Python that
has TensorFlow (a scratch venv):

    PYTHONPATH=$PWD python tests/data/tf_reads_ray_writes.py /tmp/tfvenv/bin/python

A local Ray cluster writes 200 rows of every column type the datasink takes (int, bool, float,
str, bytes, list of ints, a 2x2 float tensor, a column with nulls) as plain indexed shards and as
GZIP shards; TensorFlow 2.x parses every shard with ``tf.io.parse_example`` and the values must
equal the rows. Prints one line per check and exits non-zero on a difference.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import ray

import torch_tfrecord as tt

TF_SCRIPT = r"""
import json, sys
import tensorflow as tf
files, compression = json.loads(sys.argv[1]), sys.argv[2]
spec = {
    "id": tf.io.FixedLenFeature([], tf.int64),
    "flag": tf.io.FixedLenFeature([], tf.int64),
    "score": tf.io.FixedLenFeature([], tf.float32),
    "text": tf.io.FixedLenFeature([], tf.string),
    "raw": tf.io.FixedLenFeature([], tf.string),
    "values": tf.io.VarLenFeature(tf.int64),
    "vector": tf.io.FixedLenFeature([2, 2], tf.float32),
    "maybe": tf.io.FixedLenFeature([], tf.int64, default_value=-1),
}
rows = []
for batch in tf.data.TFRecordDataset(files, compression_type=compression).batch(64):
    parsed = tf.io.parse_example(batch, spec)
    values = tf.sparse.to_dense(parsed["values"], default_value=-9).numpy().tolist()
    for i in range(len(parsed["id"])):
        rows.append({
            "id": int(parsed["id"][i]), "flag": int(parsed["flag"][i]), "score": float(parsed["score"][i]),
            "text": parsed["text"][i].numpy().decode(), "raw": parsed["raw"][i].numpy().hex(),
            "values": [v for v in values[i] if v != -9], "vector": parsed["vector"][i].numpy().tolist(),
            "maybe": int(parsed["maybe"][i]),
        })
print(json.dumps(rows))
"""


def expected_row(i: int) -> dict[str, object]:
    return {
        "id": i,
        "flag": int(i % 2 == 0),
        "score": i / 4,
        "text": f"t{i}",
        "raw": bytes([i % 256, 7]).hex(),
        "values": list(range(i % 4)),
        "vector": [[float(i), 0.5], [-1.0, float(i)]],
        "maybe": -1 if i % 3 else i,
    }


def main() -> None:
    tf_python = sys.argv[1]
    items = [
        {
            "id": i,
            "flag": i % 2 == 0,
            "score": i / 4,
            "text": f"t{i}",
            "raw": bytes([i % 256, 7]),
            "values": list(range(i % 4)),
            "vector": np.array([[i, 0.5], [-1, i]], dtype=np.float32),
            "maybe": None if i % 3 else i,
        }
        for i in range(200)
    ]
    ray.init(num_cpus=2, include_dashboard=False, logging_level="warning")
    failed = False
    with tempfile.TemporaryDirectory() as directory:
        for compression in [None, "gzip"]:
            dataset = ray.data.from_items(items)
            paths = tt.ray.write_tfrecords(
                dataset, os.path.join(directory, f"rows-{compression}"), num_shards=3, compression=compression
            )
            result = subprocess.run(
                [tf_python, "-c", TF_SCRIPT, json.dumps(paths), "GZIP" if compression else ""],
                capture_output=True,
                text=True,
                check=True,
                env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""},
            )
            rows = sorted(json.loads(result.stdout.splitlines()[-1]), key=lambda row: row["id"])
            same = rows == [expected_row(i) for i in range(200)]
            failed |= not same
            names = [os.path.basename(p) for p in paths]
            print(f"compression={compression}: TensorFlow parsed {len(rows)} rows of {names}: equal={same}")
    ray.shutdown()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
