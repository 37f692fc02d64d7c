"""Writes the TensorFlow differential corpus. Run once, in a scratch venv with TensorFlow:

    python -m venv /tmp/tfvenv && /tmp/tfvenv/bin/pip install tensorflow-cpu
    /tmp/tfvenv/bin/python tests/data/make_tf_differential.py

Takes the records of the fuzz corpora (fuzz/corpus/{native,decoder}: one choice byte, then a
record) and a few Examples made with tf.train, mutates them with a seeded RNG (bit flips, byte
changes, insertions, deletions, repeats, truncations, splices) into a few thousand records, and
parses each one alone with tf.io.parse_example under three fixed specs and with
tf.io.parse_single_sequence_example under one. Writes tests/data/tf_differential/:
records.tfrecord (the records, framed by tf.io.TFRecordWriter) and expected.json (per record
and spec, TensorFlow's values, or the error it raised). tests/test_tf_differential.py checks
our decoders against it; the test suite never imports TensorFlow.
"""

from __future__ import annotations

import base64
import json
import random
import struct
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "data" / "tf_differential"
MUTANTS = 3000
SEED = 20261121

SPECS = {
    "varlen": {
        "x": tf.io.VarLenFeature(tf.int64),
        "y": tf.io.VarLenFeature(tf.float32),
        "z": tf.io.VarLenFeature(tf.string),
    },
    "fixed": {
        "x": tf.io.FixedLenFeature([2], tf.int64, default_value=[7, 8]),
        "y": tf.io.FixedLenFeature([], tf.float32, default_value=0.5),
        "z": tf.io.FixedLenFeature([], tf.string, default_value=b""),
    },
    "sequence_in_example": {
        "x": tf.io.FixedLenSequenceFeature([], tf.int64, allow_missing=True),
        "y": tf.io.FixedLenSequenceFeature([2], tf.float32, allow_missing=True),
    },
}
SEQUENCE_CONTEXT = {"x": tf.io.VarLenFeature(tf.int64)}
SEQUENCE_STEPS = {
    "y": tf.io.FixedLenSequenceFeature([2], tf.float32, allow_missing=True),
    "z": tf.io.VarLenFeature(tf.string),
}


def _feature(values: list[Any]) -> tf.train.Feature:
    if values and isinstance(values[0], bytes):
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=values))
    if values and isinstance(values[0], float):
        return tf.train.Feature(float_list=tf.train.FloatList(value=values))
    return tf.train.Feature(int64_list=tf.train.Int64List(value=values))


def bases() -> list[bytes]:
    made = [
        {"x": [1, 2], "y": [0.5], "z": [b"text"]},
        {"x": [-1, 2**62], "y": [1.0, -0.0, 2.5, 3.5], "z": [b""]},
        {"x": [3, 4, 5, 6], "y": [], "z": [b"a", b"b"]},
        {"y": [float("inf"), 1e-40]},
        {},
    ]
    records = [
        tf.train.Example(
            features=tf.train.Features(feature={k: _feature(v) for k, v in f.items()})
        ).SerializeToString()
        for f in made
    ]
    sequence = tf.train.SequenceExample(
        context=tf.train.Features(feature={"x": _feature([9])}),
        feature_lists=tf.train.FeatureLists(
            feature_list={
                "y": tf.train.FeatureList(feature=[_feature([1.0, 2.0]), _feature([3.0, 4.0])]),
                "z": tf.train.FeatureList(feature=[_feature([b"p"]), _feature([b"q", b"r"])]),
            }
        ),
    )
    records.append(sequence.SerializeToString())
    for name in ("native", "decoder"):
        for path in sorted((ROOT / "fuzz" / "corpus" / name).iterdir()):
            records.append(path.read_bytes()[1:])
    return records


def mutate(rng: random.Random, data: bytes, others: list[bytes]) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        kind = rng.randrange(8)
        at = rng.randrange(len(out) + 1)
        if kind == 0 and out:
            at = rng.randrange(len(out))
            out[at] ^= 1 << rng.randrange(8)
        elif kind == 1 and out:
            out[rng.randrange(len(out))] = rng.choice([0, 1, 0x7F, 0x80, 0xFF, rng.randrange(256)])
        elif kind == 2:
            out[at:at] = bytes([rng.randrange(256) for _ in range(rng.randint(1, 4))])
        elif kind == 3 and out:
            del out[at : at + rng.randint(1, 4)]
        elif kind == 4 and out:
            start = rng.randrange(len(out))
            out[at:at] = out[start : start + rng.randint(1, 12)]
        elif kind == 5:
            out = out[: rng.randrange(len(out) + 1)]
        elif kind == 6:
            other = rng.choice(others)
            out = out[:at] + other[rng.randrange(len(other) + 1) :]
        else:  # a plausible field: tag with a random wire type and a length or varint
            out[at:at] = bytes([rng.randrange(1, 32) << 3 | rng.randrange(6), rng.randrange(0, 12)])
    return bytes(out)


def _floats(values: np.ndarray) -> list[str]:
    """Float32 values as hex bit patterns: NaN payloads and -0.0 stay exact."""
    return [struct.pack("<f", float(v)).hex() for v in np.asarray(values, dtype=np.float32).reshape(-1)]


def _values(tensor: Any) -> dict[str, Any]:
    if isinstance(tensor, tf.SparseTensor):
        tensor = tensor.values
    array = tensor.numpy()
    entry: dict[str, Any] = {"shape": list(array.shape)}
    if array.dtype == np.float32:
        entry["float32"] = _floats(array)
    elif array.dtype == np.int64:
        entry["int64"] = [int(v) for v in array.reshape(-1)]
    else:
        entry["bytes"] = [base64.b64encode(v).decode() for v in array.reshape(-1)]
    return entry


def _outcome(parse: Any) -> dict[str, Any]:
    try:
        parsed = parse()
    except (tf.errors.InvalidArgumentError, tf.errors.DataLossError) as error:
        return {"rejected": type(error).__name__}
    except UnicodeDecodeError:  # an op error whose message quotes bytes that are not UTF-8
        return {"rejected": "InvalidArgumentError"}
    return {key: _values(value) for key, value in parsed.items()}


def main() -> None:
    rng = random.Random(SEED)
    originals = bases()
    records = list(dict.fromkeys(originals))
    seen = set(records)
    while len(records) < len(originals) + MUTANTS:
        mutant = mutate(rng, rng.choice(originals), originals)
        if mutant not in seen:
            seen.add(mutant)
            records.append(mutant)
    OUT.mkdir(parents=True, exist_ok=True)
    with tf.io.TFRecordWriter(str(OUT / "records.tfrecord")) as writer:
        for record in records:
            writer.write(record)
    expected = []
    for record in records:
        batch = tf.constant([record])
        entry = {
            name: _outcome(lambda spec=spec, batch=batch: tf.io.parse_example(batch, spec))
            for name, spec in SPECS.items()
        }

        def sequence(record: bytes = record) -> dict[str, Any]:
            context, steps = tf.io.parse_single_sequence_example(record, SEQUENCE_CONTEXT, SEQUENCE_STEPS)
            return {
                **{f"context/{k}": v for k, v in context.items()},
                **{f"steps/{k}": v for k, v in steps.items()},
            }

        entry["sequence"] = _outcome(sequence)
        expected.append(entry)
    document = {"tensorflow": tf.__version__, "seed": SEED, "records": len(records), "expected": expected}
    (OUT / "expected.json").write_text(json.dumps(document, separators=(",", ":")) + "\n")
    rejected = {name: sum("rejected" in e[name] for e in expected) for name in expected[0]}
    print(f"{len(records)} records; rejected per spec: {rejected}")


if __name__ == "__main__":
    main()
