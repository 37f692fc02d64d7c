"""Fuzzing of the record reader: framing, CRCs, lengths, GZIP / ZLIB streams (atheris).

The first byte picks how the rest becomes a file: as is, GZIP- or ZLIB-compressed (valid
streams of fuzzed records), or as is but read as GZIP (fuzzed compressed streams). Then:

- a strict read either returns every record or raises a TFRecordError;
- ``on_error="skip"`` never raises, returns the records before the damage first, resumes past
  it (every byte of the stream is either in a record returned or in a damaged region), and
  counts it;
- for plain files, the header walk (the index builder) agrees with the strict read, and reading
  by the index it builds, in any order, gives the same payloads;
- the native framing and the Python loop (``TORCH_TFRECORD_DECODER=python``) give the same
  records, the same error (class and message) and the same skip counts.

    python fuzz/fuzz_reader.py fuzz/corpus/reader -atheris_runs=100000
"""

from __future__ import annotations

import gzip
import os
import tempfile
import zlib
from pathlib import Path

from _harness import Rejected, attempt, main

_MODES = [(None, ""), ("gzip", ".gz"), ("zlib", ".zz"), ("gzip", ".gz")]
_SCRATCH: list[Path] = []


def _scratch(suffix: str) -> Path:
    if not _SCRATCH:
        _SCRATCH.append(Path(tempfile.mkdtemp(prefix="fuzz-reader-")))
    return _SCRATCH[0] / f"data.tfrecord{suffix}"


def _prefix_before_error(path: Path, compression: str | None) -> tuple[list[bytes], Rejected | None]:
    from torch_tfrecord import read_records

    records: list[bytes] = []
    outcome = attempt(lambda: records.extend(read_records(path, compression=compression)))
    return records, outcome if isinstance(outcome, Rejected) else None


def _with_reader(reader: str, path: Path, compression: str | None, verify_crc: bool) -> tuple[object, ...]:
    """Strict and skipping reads with ``reader`` (``TORCH_TFRECORD_DECODER``): what each gives."""
    import torch_tfrecord as tt

    old = os.environ.get("TORCH_TFRECORD_DECODER")
    os.environ["TORCH_TFRECORD_DECODER"] = reader
    try:
        records: list[bytes] = []
        outcome = attempt(
            lambda: records.extend(tt.read_records(path, compression=compression, verify_crc=verify_crc))
        )
        error = (type(outcome.error), str(outcome.error)) if isinstance(outcome, Rejected) else None
        stats = tt.ReadStats()
        kept = list(
            tt.read_records(
                path, compression=compression, verify_crc=verify_crc, on_error="skip", stats=stats
            )
        )
        return records, error, kept, stats
    finally:
        if old is None:
            del os.environ["TORCH_TFRECORD_DECODER"]
        else:
            os.environ["TORCH_TFRECORD_DECODER"] = old


def check(data: bytes) -> None:
    """Raises AssertionError (or any non-library exception) on a reader bug."""
    import numpy as np

    import torch_tfrecord as tt
    from torch_tfrecord.records.index import index_from_sizes
    from torch_tfrecord.records.reader import read_framed_sizes

    if not data:
        return
    mode, body = data[0] % len(_MODES), data[1:]
    compression, suffix = _MODES[mode]
    content = {1: lambda b: gzip.compress(b, mtime=0), 2: zlib.compress}.get(mode, lambda b: b)(body)
    path = _scratch(suffix)
    path.write_bytes(content)

    from torch_tfrecord.support import extension as _extension

    if _extension.compiled is not None:
        for verify_crc in (True, False):
            native = _with_reader("native", path, compression, verify_crc)
            assert native == _with_reader("python", path, compression, verify_crc), "the readers disagree"
    records, error = _prefix_before_error(path, compression)
    stats = tt.ReadStats()
    kept = list(tt.read_records(path, compression=compression, on_error="skip", stats=stats))
    assert kept[: len(records)] == records, "skip mode returned other records before the first damage"
    assert stats.records == len(kept)
    if error is None:
        assert kept == records and not stats.damaged and not stats.files_skipped, stats
    else:
        assert isinstance(error.error, tt.CorruptRecordError), error
        assert str(path) in str(error.error), f"the message does not name the file: {error}"
        # A damaged region where the strict read stopped, or (a broken compressed stream) the
        # file abandoned there.
        assert stats.damaged or stats.files_skipped == 1, stats
        if stats.damaged:
            assert stats.damaged[0].start == error.error.offset and stats.damaged[0].error == str(error.error)
        starts = [region.start for region in stats.damaged]
        assert starts == sorted(starts) and all(region.size > 0 for region in stats.damaged), stats
    if not stats.files_skipped and mode != 3:  # the whole (uncompressed) stream was accounted for
        framed = sum(len(record) + 16 for record in kept)
        assert framed + stats.bytes_skipped == len(body), (framed, stats)
    if compression is not None:
        return

    sizes = attempt(lambda: read_framed_sizes(path))
    if error is None:
        assert not isinstance(sizes, Rejected), sizes
        assert len(sizes) == len(records) and int(sizes.sum()) == len(content)
        table = index_from_sizes(sizes)
        assert list(tt.read_records(path, entries=table)) == records
        backwards = table[::-1]
        numbers = np.arange(len(table))[::-1]
        assert list(tt.read_records(path, entries=backwards, record_numbers=numbers)) == records[::-1]
        assert list(tt.read_records(path, verify_crc=False)) == records
    elif not isinstance(sizes, Rejected):
        # Headers are sound (the damage is in a payload or its CRC): reads by this index meet
        # the same damage, as an error or, with skip, as exactly the damaged records.
        table = index_from_sizes(sizes)
        assert int(sizes.sum()) == len(content)
        by_index = attempt(lambda: list(tt.read_records(path, entries=table)))
        assert isinstance(by_index, Rejected), "a damaged file read cleanly by its index"
        skip_stats = tt.ReadStats()
        good = list(tt.read_records(path, entries=table, on_error="skip", stats=skip_stats))
        assert good[: len(records)] == records
        assert skip_stats.records_skipped >= 1 and len(good) + skip_stats.records_skipped == len(table)


def seeds() -> dict[str, bytes]:
    import torch_tfrecord as tt

    records = [tt.encode_example({"x": [i], "y": [b"v" * i]}) for i in range(3)]
    framed = b"".join(tt.encode_record(r) for r in records)
    return {
        "plain": bytes([0]) + framed,
        "gzip": bytes([1]) + framed,
        "zlib": bytes([2]) + framed,
        "gzip-raw": bytes([3]) + gzip.compress(framed, mtime=0),
        "empty-record": bytes([0]) + tt.encode_record(b""),
        "empty-file": bytes([0]),
    }


def load() -> None:
    import torch_tfrecord
    import torch_tfrecord.records.index  # noqa: F401


if __name__ == "__main__":
    main(check, seeds, load)
