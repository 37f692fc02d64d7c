"""Writes the compressed-shard golden files with real TensorFlow. Run once, in a scratch venv:

    python -m venv /tmp/tfvenv && /tmp/tfvenv/bin/pip install tensorflow-cpu
    /tmp/tfvenv/bin/python tests/data/make_compressed_golden.py

Everything lands in tests/data/compressed/: four shards of uneven sizes written by
``tf.io.TFRecordWriter`` (one plain, two GZIP, one ZLIB; the ZLIB one has no telling suffix),
of ``tf.train.Example`` records with a unique ``id``, a ``text`` and a ``vec``, and
``expected.json``: what ``tf.data.TFRecordDataset(compression_type=...)`` +
``tf.io.parse_example`` read from each file. The test suite never imports TensorFlow.
"""

from __future__ import annotations

import json
import os
import random

import tensorflow as tf

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "compressed")
SHARDS = [  # name, compression, records
    ("a-plain.tfrecord", "", 23),
    ("b-gzip.tfrecord.gz", "GZIP", 41),
    ("c-zlib.tfrecord", "ZLIB", 29),
    ("d-gzip.tfrecord.gz", "GZIP", 17),
]
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"]
FEATURES = {
    "id": tf.io.FixedLenFeature([], tf.int64),
    "text": tf.io.FixedLenFeature([], tf.string),
    "vec": tf.io.FixedLenFeature([3], tf.float32),
}


def example(record_id: int, rng: random.Random) -> bytes:
    text = " ".join(rng.choice(WORDS) for _ in range(rng.randrange(1, 12))).encode()
    vec = [rng.uniform(-1, 1) for _ in range(3)]
    features = {
        "id": tf.train.Feature(int64_list=tf.train.Int64List(value=[record_id])),
        "text": tf.train.Feature(bytes_list=tf.train.BytesList(value=[text])),
        "vec": tf.train.Feature(float_list=tf.train.FloatList(value=vec)),
    }
    return tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString()


def main() -> None:
    os.makedirs(HERE, exist_ok=True)
    rng = random.Random(20261123)
    expected = {}
    next_id = 1000
    for name, compression, count in SHARDS:
        path = os.path.join(HERE, name)
        with tf.io.TFRecordWriter(path, tf.io.TFRecordOptions(compression_type=compression)) as writer:
            for _ in range(count):
                writer.write(example(next_id, rng))
                next_id += 1
        parsed = {"id": [], "text": [], "vec": []}
        for batch in (
            tf.data.TFRecordDataset(path, compression_type=compression)
            .batch(256)
            .map(lambda records: tf.io.parse_example(records, FEATURES))
        ):
            parsed["id"] += batch["id"].numpy().tolist()
            parsed["text"] += [t.decode() for t in batch["text"].numpy().tolist()]
            parsed["vec"] += batch["vec"].numpy().tolist()
        expected[name] = {"compression": compression or None, **parsed}
    with open(os.path.join(HERE, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
