"""Writes the golden files for Features that are present with no list set, with real TensorFlow.

TFX's CSV example gen writes ``tf.train.Feature()`` (no ``kind``) for every empty CSV cell.
Run once, in a scratch venv (the test suite never imports TensorFlow):

    python -m venv /tmp/tfvenv && /tmp/tfvenv/bin/pip install tensorflow-cpu
    /tmp/tfvenv/bin/python tests/data/make_empty_features_golden.py

Writes tests/data/empty_features/: records.tfrecord (three Examples built with tf.train
messages) and expected.json: for each spec case, what ``tf.io.parse_example`` returns for each
record alone and for the three as one batch (dense values, or the sparse values and row lengths
of a VarLen), or the error it raises (its class and message).
"""

from __future__ import annotations

import json
import os
import re

import tensorflow as tf

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "empty_features")

EMPTY = tf.train.Feature()  # present, no list set


def ints(*values: int) -> tf.train.Feature:
    return tf.train.Feature(int64_list=tf.train.Int64List(value=values))


def floats(*values: float) -> tf.train.Feature:
    return tf.train.Feature(float_list=tf.train.FloatList(value=values))


def strings(*values: bytes) -> tf.train.Feature:
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=values))


# i: int64, f: float, s: bytes, each with no list set in some records and missing in others;
# e: no list set in any record; l: an int64 list that is set but empty, unlike no list at all.
RECORDS = [
    {"i": EMPTY, "f": floats(1.5, 2.5), "s": EMPTY, "e": EMPTY, "l": ints()},
    {"i": ints(5), "f": EMPTY, "s": strings(b"x"), "e": EMPTY, "l": ints(3)},
    {"f": floats(3.5, 4.5), "s": EMPTY, "e": EMPTY, "l": EMPTY},
]

# name -> (key, kind, arguments); kind and arguments as torch_tfrecord writes them in the test.
CASES = {
    "fixed_int_default": ("i", "FixedLen", {"shape": [], "dtype": "int64", "default": -1}),
    "fixed_int_required": ("i", "FixedLen", {"shape": [], "dtype": "int64"}),
    "fixed_float2_default": ("f", "FixedLen", {"shape": [2], "dtype": "float32", "default": [0.25, 0.75]}),
    "fixed_float2_required": ("f", "FixedLen", {"shape": [2], "dtype": "float32"}),
    "fixed_bytes_default": ("s", "FixedLen", {"shape": [], "dtype": "bytes", "default": "none"}),
    "fixed_bytes_required": ("s", "FixedLen", {"shape": [], "dtype": "bytes"}),
    "fixed_always_empty_default": ("e", "FixedLen", {"shape": [], "dtype": "float32", "default": 9.0}),
    "fixed_always_empty_required": ("e", "FixedLen", {"shape": [], "dtype": "int64"}),
    "fixed_zero_values_required": ("e", "FixedLen", {"shape": [0], "dtype": "int64"}),
    "fixed_empty_list_default": ("l", "FixedLen", {"shape": [], "dtype": "int64", "default": -1}),
    "varlen_empty_list": ("l", "VarLen", {"dtype": "int64"}),
    "varlen_int": ("i", "VarLen", {"dtype": "int64"}),
    "varlen_float": ("f", "VarLen", {"dtype": "float32"}),
    "varlen_bytes": ("s", "VarLen", {"dtype": "bytes"}),
    "varlen_always_empty_int": ("e", "VarLen", {"dtype": "int64"}),
    "varlen_always_empty_bytes": ("e", "VarLen", {"dtype": "bytes"}),
    "sequence_int": ("i", "FixedLenSequence", {"shape": [], "dtype": "int64", "allow_missing": True}),
    "sequence_float": ("f", "FixedLenSequence", {"shape": [2], "dtype": "float32", "allow_missing": True}),
    "sequence_always_empty": (
        "e",
        "FixedLenSequence",
        {"shape": [], "dtype": "float32", "allow_missing": True},
    ),
}

TF_DTYPES = {"int64": tf.int64, "float32": tf.float32, "bytes": tf.string}


def tf_feature(kind: str, arguments: dict) -> object:
    dtype = TF_DTYPES[arguments["dtype"]]
    if kind == "FixedLen":
        default = arguments.get("default")
        if isinstance(default, str):
            default = default.encode()
        return tf.io.FixedLenFeature(arguments["shape"], dtype, default_value=default)
    if kind == "VarLen":
        return tf.io.VarLenFeature(dtype)
    return tf.io.FixedLenSequenceFeature(arguments["shape"], dtype, allow_missing=arguments["allow_missing"])


def plain(values: object) -> object:
    listed = values.tolist()
    if isinstance(listed, bytes):
        return listed.decode("latin-1")
    if isinstance(listed, list):
        return [plain_item(v) for v in listed]
    return listed


def plain_item(value: object) -> object:
    if isinstance(value, bytes):
        return value.decode("latin-1")
    if isinstance(value, list):
        return [plain_item(v) for v in value]
    return value


def parse(serialized: list[bytes], key: str, kind: str, arguments: dict) -> dict:
    try:
        out = tf.io.parse_example(tf.constant(serialized), {key: tf_feature(kind, arguments)})[key]
    except (tf.errors.InvalidArgumentError, ValueError) as error:
        message = re.sub(r"^\{\{function_node [^}]*\}\} | \[Op:\w+\]$", "", str(error).splitlines()[0])
        return {"error": type(error).__name__, "message": message}
    if isinstance(out, tf.sparse.SparseTensor):
        rows = out.indices.numpy()[:, 0].tolist()
        lengths = [rows.count(r) for r in range(len(serialized))]
        return {"values": plain(out.values.numpy()), "lengths": lengths}
    return {"values": plain(out.numpy()), "shape": list(out.shape)}


def main() -> None:
    os.makedirs(HERE, exist_ok=True)
    serialized = [
        tf.train.Example(features=tf.train.Features(feature=r)).SerializeToString() for r in RECORDS
    ]
    with tf.io.TFRecordWriter(os.path.join(HERE, "records.tfrecord")) as writer:
        for record in serialized:
            writer.write(record)
    expected = {"tensorflow": tf.__version__, "cases": {}}
    for name, (key, kind, arguments) in CASES.items():
        expected["cases"][name] = {
            "key": key,
            "kind": kind,
            "arguments": arguments,
            "per_record": [parse([record], key, kind, arguments) for record in serialized],
            "batch": parse(serialized, key, kind, arguments),
        }
    with open(os.path.join(HERE, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
