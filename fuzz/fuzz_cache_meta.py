"""Fuzzing of what the node cache reads from its directory: an entry's metadata, a reader's
hints, the directory's limit (atheris).

Each input is the bytes of one such file. Then each reader gives a checked value or None
(ignored: the cache trusts nothing it did not write in the form it writes), never an error.

    python fuzz/fuzz_cache_meta.py fuzz/corpus/cache_meta -atheris_runs=100000
"""

from __future__ import annotations

from _harness import main


def check(data: bytes) -> None:
    """Raises AssertionError (or any exception) on a reader that does not check what it reads."""
    from torch_tfrecord.records.remote.cache_entries import decode_limit, entry_meta, read_schedule

    meta = entry_meta(data)
    if meta is not None:
        assert isinstance(meta["url"], str) and isinstance(meta["version"], str)
        assert type(meta["size"]) is int and meta["size"] >= 0
    schedule = read_schedule(data)
    if schedule is not None:
        for key, uses in schedule.items():
            assert isinstance(key, str)
            assert all(isinstance(a, float) and isinstance(b, float) for a, b in uses)
    known, limit = decode_limit(data)
    assert limit is None or (type(limit) is int and limit >= 0)
    assert known or limit is None


def seeds() -> dict[str, bytes]:
    return {
        "meta": b'{"url": "s3://b/x.tfrecord", "size": 123, "version": "abc"}',
        "hints": b'{"0123456789abcdef-x": [[0.0, 0.5], [1.0, 1.25]]}',
        "limit": b'{"format": "torch-tfrecord-cache", "layout": 2, "limit": 1000}',
        "nested": b"[" * 2000,
        "bad-size": b'{"url": "u", "size": -1, "version": ""}',
    }


def load() -> None:
    import torch_tfrecord.records.remote.cache_entries  # noqa: F401


if __name__ == "__main__":
    main(check, seeds, load)
