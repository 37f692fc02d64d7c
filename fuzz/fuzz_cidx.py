"""Fuzzing of the compressed index loader (``.cidx``) against one fixed GZIP file (atheris).

Each input is the bytes of a compressed index file. Then:

- decoding (given the data file's size) gives a CompressedIndex or raises IndexFormatError /
  StaleIndexError, and never inflates more than its data file can hold: a table of at most
  ``1032 * size / 16`` records, seek points of at most ``32 * size + 1 MiB``;
- an index that also passes the check against the file gives exactly the file's records when
  read by record number through the datasets' inflating reader (or a TFRecordError).

    python fuzz/fuzz_cidx.py fuzz/corpus/cidx -atheris_runs=100000
"""

from __future__ import annotations

import functools
import os
import tempfile
from typing import Any

from _harness import Rejected, attempt, main


@functools.cache
def _data() -> dict[str, Any]:
    """The GZIP file (made once per process), its records and its true compressed index."""
    import torch_tfrecord as tt
    from torch_tfrecord.records.compressed.index import encode_compressed_index

    payloads = [tt.encode_example({"i": [i], "pad": [b"x" * (11 * i)]}) for i in range(6)]
    path = tempfile.mkdtemp(prefix="fuzz-cidx-") + "/data.tfrecord.gz"
    with tt.RecordWriter(path, compression="gzip") as writer:
        for payload in payloads:
            writer.write(payload)
    index = tt.build_compressed_index(path)
    size = os.path.getsize(path)
    return {
        "path": path,
        "payloads": payloads,
        "size": size,
        "index": index,
        "encoded": encode_compressed_index(index),
    }


def check(data: bytes) -> None:
    """Raises AssertionError (or any non-library exception) on a compressed index bug."""
    import torch_tfrecord as tt
    from torch_tfrecord.records.compressed.index import check_compressed_index, decode_compressed_index

    known = _data()
    size = known["size"]
    found = attempt(
        lambda: decode_compressed_index(data, "fuzzed.cidx", data_size=size, data_path=known["path"])
    )
    if isinstance(found, Rejected):
        assert isinstance(found.error, tt.IndexFormatError | tt.StaleIndexError), found
        assert "fuzzed.cidx" in str(found.error), found
        return
    assert len(found.table) <= 1032 * size // 16 + 1
    assert len(found.seek_points) <= 32 * size + (1 << 20)
    checked = attempt(lambda: check_compressed_index(found, known["path"], "fuzzed.cidx", size=size))
    if isinstance(checked, Rejected):
        assert isinstance(checked.error, tt.StaleIndexError), checked
        return
    import numpy as np

    from torch_tfrecord.records.compressed.shard import CompressedShard
    from torch_tfrecord.records.entries import read_entries_at

    shard = CompressedShard(str(known["path"]), found)
    truth = {
        int(offset): payload
        for (offset, _), payload in zip(known["index"].table, known["payloads"], strict=True)
    }
    try:
        rows = found.table[:8]
        numbers = np.arange(len(rows), dtype=np.int64)
        read = attempt(lambda: read_entries_at(shard, "fuzzed", found.uncompressed_size, rows, numbers))
        if isinstance(read, Rejected):
            assert isinstance(read.error, tt.TFRecordError), read
        else:
            for (offset, _), payload in zip(rows.tolist(), read, strict=True):
                assert truth.get(offset) == payload, "a record the index points to was misread"
    finally:
        shard.close()


def seeds() -> dict[str, bytes]:
    import zlib

    encoded = _data()["encoded"]
    cut = encoded[: len(encoded) // 2]
    flipped = bytearray(encoded)
    flipped[len(encoded) // 3] ^= 0x40
    return {
        "true": encoded,
        "cut": cut,
        "flipped": bytes(flipped),
        "empty": b"",
        "crc-ok-junk": b"x" + zlib.crc32(b"x").to_bytes(4, "little"),
    }


def load() -> None:
    import torch_tfrecord
    import torch_tfrecord.records.compressed.index
    import torch_tfrecord.records.compressed.shard  # noqa: F401


if __name__ == "__main__":
    main(check, seeds, load)
