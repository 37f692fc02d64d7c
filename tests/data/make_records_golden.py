"""Writes the record-layer golden files with real TensorFlow. Run once, in a scratch venv:

    python -m venv /tmp/tfvenv && /tmp/tfvenv/bin/pip install tensorflow-cpu
    /tmp/tfvenv/bin/python tests/data/make_records_golden.py

Everything lands in tests/data/records/: TF-written files (plain, GZIP, ZLIB, empty, a plain
file whose first bytes look like the GZIP magic), damaged copies of the plain file, the payloads
(base64 JSON), what TensorFlow reads from every file (SHA-256 per record, then its error), and the index that
DALI's tfrecord2idx algorithm writes for the plain file. The test suite never imports TensorFlow.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import random
import struct

import tensorflow as tf

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "records")


def payloads() -> list[bytes]:
    rng = random.Random(20261121)
    sizes = [0, 1, 7, 100, 1000, 4096, 3, 20000, 12, 0, 500]
    return [bytes(rng.getrandbits(8) for _ in range(n)) for n in sizes]


def write(name: str, records: list[bytes], compression: str = "") -> str:
    path = os.path.join(HERE, name)
    options = tf.io.TFRecordOptions(compression_type=compression)
    with tf.io.TFRecordWriter(path, options) as writer:
        for record in records:
            writer.write(record)
    return path


def tf_read(path: str, compression: str = "") -> dict[str, object]:
    """What TensorFlow reads from a file: SHA-256 of each record it returned, then its error."""
    records = []
    try:
        for record in tf.data.TFRecordDataset(path, compression_type=compression):
            records.append(hashlib.sha256(record.numpy()).hexdigest())
    except tf.errors.OpError as error:
        return {"records": records, "error": type(error).__name__, "message": error.message}
    return {"records": records, "error": None, "message": None}


def dali_tfrecord2idx(path: str) -> str:
    """The algorithm of DALI's tools/tfrecord2idx: offset and framed size of each record."""
    lines = []
    with open(path, "rb") as f:
        while True:
            current = f.tell()
            byte_len = f.read(8)
            if len(byte_len) == 0:
                break
            f.read(4)
            (proto_len,) = struct.unpack("q", byte_len)
            f.read(proto_len)
            f.read(4)
            lines.append(f"{current} {f.tell() - current}\n")
    return "".join(lines)


def main() -> None:
    os.makedirs(HERE, exist_ok=True)
    records = payloads()
    files = {
        "plain.tfrecord": (write("plain.tfrecord", records), ""),
        "gzip.tfrecord.gz": (write("gzip.tfrecord.gz", records, "GZIP"), "GZIP"),
        "zlib.tfrecord.zz": (write("zlib.tfrecord.zz", records, "ZLIB"), "ZLIB"),
        # Suffixes that say nothing: compression must be found from the bytes.
        "gzip_nosuffix.tfrecord": (write("gzip_nosuffix.tfrecord", records, "GZIP"), "GZIP"),
        "zlib_nosuffix.tfrecord": (write("zlib_nosuffix.tfrecord", records, "ZLIB"), "ZLIB"),
        "empty.tfrecord": (write("empty.tfrecord", []), ""),
        # First record of 35,615 bytes: the length field starts with 1f 8b, the GZIP magic.
        "gzip_magic_plain.tfrecord": (write("gzip_magic_plain.tfrecord", [b"\x2a" * 35615, b"x"]), ""),
    }
    with open(files["plain.tfrecord"][0], "rb") as f:
        plain = f.read()
    offsets = [int(line.split()[0]) for line in dali_tfrecord2idx(files["plain.tfrecord"][0]).splitlines()]
    third = offsets[3]  # record 3 (100 bytes) starts here
    damaged = {
        "truncated_header.tfrecord": plain[: third + 5],
        "truncated_payload.tfrecord": plain[: third + 12 + 50],
        "truncated_footer.tfrecord": plain[: third + 12 + 100 + 2],
        "flipped_payload.tfrecord": _flip(plain, third + 12 + 10),
        "flipped_length.tfrecord": _flip(plain, third + 1),
        "flipped_data_crc.tfrecord": _flip(plain, third + 12 + 100 + 1),
        "huge_length.tfrecord": plain[:third] + struct.pack("<Q", 1 << 63) + plain[third + 8 :],
    }
    with open(files["gzip.tfrecord.gz"][0], "rb") as f:
        gz = f.read()
    damaged_gz = {"gzip_truncated.tfrecord.gz": gz[: len(gz) // 2]}
    for name, data in {**damaged, **damaged_gz}.items():
        with open(os.path.join(HERE, name), "wb") as f:
            f.write(data)
        files[name] = (os.path.join(HERE, name), "GZIP" if name.endswith(".gz") else "")
    expected = {
        "payloads": [base64.b64encode(r).decode() for r in records],
        "record_offsets": offsets,
        "damage_at_record": 3,
        "tensorflow": tf.__version__,
        "tf_reads": {name: tf_read(path, compression) for name, (path, compression) in files.items()},
    }
    with open(os.path.join(HERE, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)
    with open(os.path.join(HERE, "plain.tfrecord.dali.idx"), "w") as f:
        f.write(dali_tfrecord2idx(files["plain.tfrecord"][0]))


def _flip(data: bytes, position: int) -> bytes:
    return data[:position] + bytes([data[position] ^ 0x10]) + data[position + 1 :]


if __name__ == "__main__":
    main()
