"""Fuzzing of the dataset manifest's parser (atheris).

Each input is the bytes of a ``.manifest.json``. Then:

- decoding gives a Manifest (shards named inside its folder, once each, whose record counts fit
  their sizes) or raises IndexFormatError naming the manifest;
- an accepted manifest written back and read again is the same manifest.

    python fuzz/fuzz_manifest.py fuzz/corpus/manifest -atheris_runs=100000
"""

from __future__ import annotations

from _harness import Rejected, attempt, main

WHERE = "memory://fuzzed/train.manifest.json"


def check(data: bytes) -> None:
    """Raises AssertionError (or any non-library exception) on a manifest parser bug."""
    from torch_tfrecord.errors import IndexFormatError
    from torch_tfrecord.records.manifest import decode_manifest, encode_manifest

    found = attempt(lambda: decode_manifest(data, WHERE))
    if isinstance(found, Rejected):
        assert isinstance(found.error, IndexFormatError) and WHERE in str(found.error), found
        return
    names = [shard.name for shard in found.shards]
    assert names and len(set(names)) == len(names)
    for shard in found.shards:
        assert not shard.name.startswith("/") and ".." not in shard.name.split("/")
        assert shard.compression or shard.records * 16 <= shard.size
    assert all(path.startswith("memory://fuzzed/") for path in found.paths)
    assert decode_manifest(encode_manifest(found), WHERE) == found


def seeds() -> dict[str, bytes]:
    head = b'{"format": "torch_tfrecord.manifest/1", "shards": '
    shard = b'{"index": "a.tfrecord.idx", "name": "a.tfrecord", "records": 2, "size": 40, "version": "e"}'
    return {
        "one": b'{"format": "torch_tfrecord.manifest/1", "shards": [' + shard + b"]}",
        "tables-spec": b'{"format": "torch_tfrecord.manifest/1", "spec": {"format": "x"}, '
        b'"tables": "t.npz", "shards": [' + shard + b', {"name": "d/b.gz", "size": 9, "records": 3, '
        b'"compression": "gzip"}]}',
        "escape": head + b'[{"name": "../x", "size": 1, "records": 0}]}',
        "crowded": head + b'[{"name": "x", "size": 1, "records": 9}]}',
        "truncated": head + b'[{"name": "x", "si',
    }


def load() -> None:
    import torch_tfrecord.records.manifest  # noqa: F401


if __name__ == "__main__":
    main(check, seeds, load)
