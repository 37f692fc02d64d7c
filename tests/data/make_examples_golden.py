"""Writes the codec golden files with real TensorFlow. Run once, in a scratch venv that also has
torch (our encoder is checked by TensorFlow here):

    python -m venv /tmp/tfvenv && /tmp/tfvenv/bin/pip install tensorflow-cpu torch==2.13.0 crc32c
    /tmp/tfvenv/bin/python tests/data/make_examples_golden.py

Writes tests/data/examples/: examples.tfrecord and sequences.tfrecord (built with tf.train
messages), ours.tfrecord (the same features encoded by torch_tfrecord.encode_example), rejects.json
(records TensorFlow's parser refuses under a spec), and expected.json: what tf.io.parse_example /
parse_sequence_example return for each file. The test suite never imports TensorFlow.
"""

from __future__ import annotations

import base64
import json
import os
import sys

import numpy as np
import tensorflow as tf

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
import torch_tfrecord as tt  # noqa: E402

HERE = os.path.join(ROOT, "tests", "data", "examples")

# Feature dicts in plain Python: int -> int64_list, float -> float_list, bytes -> bytes_list.
FEATURES = [
    {
        "label": [7],
        "neg": [-1, -(2**63)],
        "score": [0.5, -1.25, 3e38],
        "tokens": [1, 2, 3],
        "names": [b"cat", b"", b"\xff\x00"],
        "weights": [0.25],
        "seq": [1.0, 2.0, 3.0, 4.0],
    },
    {
        "neg": [2**63 - 1, 0],
        "score": [0.0, 1e-45, -0.0],
        "tokens": [],
        "names": [b"dog"],
        "weights": [],
        "seq": [],
    },
    {
        "label": [-3],
        "neg": [5, 6],
        "score": [1.0, 2.0, 3.0],
        "names": [],
        "weights": [1.5, 2.5, 3.5, 4.5],
        "seq": [5.0, 6.0],
    },
    {
        "label": [0],
        "neg": [0, 0],
        "score": [9.0, 8.0, 7.0],
        "tokens": [-9, 9],
        "names": [b"a", b"b", b"c", b"d"],
        "seq": [7.0, 8.0, 9.0, 10.0, 11.0, 12.0],
    },
]

SPEC = {
    "label": tf.io.FixedLenFeature([], tf.int64, default_value=-1),
    "neg": tf.io.FixedLenFeature([2], tf.int64),
    "score": tf.io.FixedLenFeature([3], tf.float32),
    "tokens": tf.io.VarLenFeature(tf.int64),
    "names": tf.io.VarLenFeature(tf.string),
    "weights": tf.io.VarLenFeature(tf.float32),
    "seq": tf.io.FixedLenSequenceFeature([2], tf.float32, allow_missing=True),
}

SEQUENCES = [
    (
        {"id": [b"first"], "length": [3]},
        {
            "frames": [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0], [6.0, 7.0, 8.0]],
            "words": [[b"a"], [b"bb"], [b"ccc"]],
            "ids": [[1], [2, 3], []],
        },
    ),
    (
        {"id": [b"second"], "length": [1]},
        {"frames": [[-1.0, -2.0, -3.0]], "ids": [[4, 5, 6]]},
    ),  # "words" missing
    ({"id": [b"third"], "length": [0]}, {"frames": [], "words": [], "ids": []}),
]
CONTEXT_SPEC = {"id": tf.io.FixedLenFeature([], tf.string), "length": tf.io.FixedLenFeature([], tf.int64)}
SEQUENCE_SPEC = {
    "frames": tf.io.FixedLenSequenceFeature([3], tf.float32),
    "words": tf.io.FixedLenSequenceFeature([], tf.string, allow_missing=True),
    "ids": tf.io.VarLenFeature(tf.int64),
}


# The list type of every key (an empty list still has a type on the wire).
KINDS = {
    "label": int,
    "neg": int,
    "score": float,
    "tokens": int,
    "names": bytes,
    "weights": float,
    "seq": float,
    "id": bytes,
    "length": int,
    "frames": float,
    "words": bytes,
    "ids": int,
}


def kind_of(key: str, values: list) -> type:
    return type(values[0]) if values else KINDS[key]


def tf_feature(values: list, kind: type) -> tf.train.Feature:
    if kind is bytes:
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=values))
    if kind is float:
        return tf.train.Feature(float_list=tf.train.FloatList(value=values))
    return tf.train.Feature(int64_list=tf.train.Int64List(value=values))


def tt_value(values: list, kind: type) -> object:
    if kind is bytes:
        return tt.BytesList(values)
    if kind is float:
        return tt.FloatList(values)
    return tt.Int64List(values)


def tf_features(features: dict) -> tf.train.Features:
    return tf.train.Features(feature={k: tf_feature(v, kind_of(k, v)) for k, v in features.items()})


def tt_features(features: dict) -> dict:
    return {k: tt_value(v, kind_of(k, v)) for k, v in features.items()}


def to_json(value: object) -> object:
    if isinstance(value, tf.SparseTensor):
        return {
            "indices": value.indices.numpy().tolist(),
            "values": to_json(value.values),
            "dense_shape": value.dense_shape.numpy().tolist(),
        }
    array = value.numpy() if hasattr(value, "numpy") else np.asarray(value)
    if array.dtype == object:
        return {
            "bytes": [base64.b64encode(b).decode() for b in array.reshape(-1).tolist()],
            "shape": list(array.shape),
        }
    return {"values": array.reshape(-1).tolist(), "shape": list(array.shape), "dtype": str(array.dtype)}


def write(name: str, records: list[bytes]) -> None:
    with tf.io.TFRecordWriter(os.path.join(HERE, name)) as writer:
        for record in records:
            writer.write(record)


def main() -> None:
    os.makedirs(HERE, exist_ok=True)
    theirs = [tf.train.Example(features=tf_features(f)).SerializeToString() for f in FEATURES]
    ours = [tt.encode_example(tt_features(f)) for f in FEATURES]
    write("examples.tfrecord", theirs)
    write("ours.tfrecord", ours)
    sequences = []
    for context, lists in SEQUENCES:
        message = tf.train.SequenceExample(
            context=tf_features(context),
            feature_lists=tf.train.FeatureLists(
                feature_list={
                    k: tf.train.FeatureList(feature=[tf_feature(step, KINDS[k]) for step in steps])
                    for k, steps in lists.items()
                }
            ),
        )
        sequences.append(message.SerializeToString())
    write("sequences.tfrecord", sequences)
    ours_sequences = [
        tt.encode_sequence_example(
            tt_features(context),
            {k: [tt_value(step, KINDS[k]) for step in steps] for k, steps in lists.items()},
        )
        for context, lists in SEQUENCES
    ]
    write("ours_sequences.tfrecord", ours_sequences)

    def parse(records: list[bytes]) -> dict:
        return {k: to_json(v) for k, v in tf.io.parse_example(tf.constant(records), SPEC).items()}

    def parse_sequences(records: list[bytes]) -> dict:
        context, lists, lengths = tf.io.parse_sequence_example(
            tf.constant(records), context_features=CONTEXT_SPEC, sequence_features=SEQUENCE_SPEC
        )
        return {
            "context": {k: to_json(v) for k, v in context.items()},
            "sequences": {k: to_json(v) for k, v in lists.items()},
            "lengths": {k: to_json(v) for k, v in lengths.items()},
        }

    # Records TensorFlow refuses under SPEC: each must be refused by us too.
    rejects = {
        "float for int64 (FixedLen)": {**FEATURES[0], "label": [1.5]},
        "bytes for float (FixedLen)": {**FEATURES[0], "score": [b"x", b"y", b"z"]},
        "int64 for bytes (VarLen)": {**FEATURES[0], "names": [1, 2]},
        "two values for a scalar": {**FEATURES[0], "label": [1, 2]},
        "missing required neg": {k: v for k, v in FEATURES[0].items() if k != "neg"},
        "3 values for seq of shape [2]": {**FEATURES[0], "seq": [1.0, 2.0, 3.0]},
    }
    reject_results = {}
    for name, features in rejects.items():
        record = tf.train.Example(features=tf_features(features)).SerializeToString()
        try:
            tf.io.parse_example(tf.constant([record]), SPEC)
            outcome = None
        except tf.errors.InvalidArgumentError as error:
            outcome = type(error).__name__
        reject_results[name] = {"record": base64.b64encode(record).decode(), "tf_error": outcome}
    not_an_example = b"\x0a\x05\x0a\x03"  # field 1 says 5 bytes follow, 2 do
    try:
        tf.io.parse_example(tf.constant([not_an_example]), SPEC)
        outcome = None
    except tf.errors.InvalidArgumentError as error:
        outcome = type(error).__name__
    reject_results["truncated message"] = {
        "record": base64.b64encode(not_an_example).decode(),
        "tf_error": outcome,
    }

    # tt.encode_example writes an empty Python list as a Feature with no list set.
    untyped_empty = tt.encode_example({**tt_features(FEATURES[0]), "tokens": [], "weights": []})
    untyped = {k: to_json(v) for k, v in tf.io.parse_example(tf.constant([untyped_empty]), SPEC).items()}

    expected = {
        "untyped_empty": {"record": base64.b64encode(untyped_empty).decode(), "parsed": untyped},
        "tensorflow": tf.__version__,
        "examples": parse(theirs),
        "ours": parse(ours),
        "sequences": parse_sequences(sequences),
        "ours_sequences": parse_sequences(ours_sequences),
        "empty_example": {
            k: to_json(v)
            for k, v in tf.io.parse_example(
                tf.constant([b""]),
                {
                    "tokens": tf.io.VarLenFeature(tf.int64),
                    "label": tf.io.FixedLenFeature([], tf.int64, default_value=42),
                },
            ).items()
        },
    }
    with open(os.path.join(HERE, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)
    with open(os.path.join(HERE, "rejects.json"), "w") as f:
        json.dump(reject_results, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
