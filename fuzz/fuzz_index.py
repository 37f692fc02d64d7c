"""Fuzzing of the index loader and its check against the data file (atheris).

Each input is the text of an index file for one fixed data file of five records. Then:

- parsing gives an ``(n, 2)`` table or raises IndexFormatError;
- the check against the data file passes only for the file's true index (StaleIndexError
  otherwise, naming entries as they are: no offset + size wrapped past 2**63), and so does a
  dataset given the table;
- reading records by the (unchecked) entries returns exactly the records at those offsets, or
  raises a TFRecordError: an entry that is wrong is never read as data.

    python fuzz/fuzz_index.py fuzz/corpus/index -atheris_runs=100000
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from _harness import Rejected, attempt, main

_DATA: dict[str, Any] = {}


def _data() -> dict[str, Any]:
    if not _DATA:
        import torch_tfrecord as tt
        from torch_tfrecord.records import index as tt_index

        directory = Path(tempfile.mkdtemp(prefix="fuzz-index-"))
        path = directory / "data.tfrecord"
        payloads = [tt.encode_example({"i": [i], "pad": [b"x" * (7 * i)]}) for i in range(5)]
        path.write_bytes(b"".join(tt.encode_record(p) for p in payloads))
        table = tt.build_index(path)
        _DATA.update(path=path, payloads=payloads, table=table, text=(tt_index.encode_index(table)))
        _DATA["by_entry"] = {(int(o), int(s)): p for (o, s), p in zip(table, payloads, strict=True)}
    return _DATA


def check(data: bytes) -> None:
    """Raises AssertionError (or any non-library exception) on an index bug."""
    import numpy as np

    import torch_tfrecord as tt
    from torch_tfrecord.records.index import decode_index

    known = _data()
    table = attempt(lambda: decode_index(data, "fuzzed.idx"))
    if isinstance(table, Rejected):
        assert isinstance(table.error, tt.IndexFormatError), table
        assert "fuzzed.idx" in str(table.error)
        return
    assert table.dtype == np.int64 and table.ndim == 2 and table.shape[1] == 2 and (table >= 0).all()
    true = np.array_equal(table, known["table"])
    checked = attempt(lambda: tt.check_index(table, known["path"], "fuzzed.idx"))
    if true:
        assert not isinstance(checked, Rejected), checked
    elif isinstance(checked, Rejected):
        assert isinstance(checked.error, tt.StaleIndexError), checked
        assert "byte -" not in str(checked.error), checked  # (offset + size wrapped past 2**63)
        dataset = attempt(lambda: tt.IndexedTFRecordDataset(known["path"], index={str(known["path"]): table}))
        assert isinstance(dataset, Rejected) and isinstance(dataset.error, tt.StaleIndexError), dataset
    else:
        # check_index checks the geometry without reading records: entries that tile the file
        # exactly but cut it in the wrong places (one entry for two records) pass it, and must
        # then fail as a StaleIndexError when read, through the reader and the dataset alike.
        dataset = tt.IndexedTFRecordDataset(known["path"], index={str(known["path"]): table})
        wrong = [i for i, (o, s) in enumerate(table.tolist()) if (o, s) not in known["by_entry"]]
        assert wrong, table
        read_wrong = attempt(lambda: dataset[wrong[0]])
        assert isinstance(read_wrong, Rejected) and isinstance(read_wrong.error, tt.StaleIndexError), (
            read_wrong
        )
    read = attempt(lambda: list(tt.read_records(known["path"], entries=table[:64])))
    if not isinstance(read, Rejected):
        expected = [known["by_entry"].get((int(o), int(s))) for o, s in table[:64]]
        assert read == expected, "an index entry that is not a record was read as one"
    else:
        assert isinstance(read.error, tt.TFRecordError), read


def seeds() -> dict[str, bytes]:
    known = _data()
    text: bytes = known["text"]
    lines = text.splitlines(keepends=True)
    return {
        "true": text,
        "reordered": b"".join(lines[::-1]),
        "stale-appended": text + b"%d 16\n" % (sum(int(s) for _, s in known["table"])),
        "crlf-tabs": text.replace(b" ", b"\t").replace(b"\n", b"\r\n"),
        "overlap": lines[0] + b"1 16\n",
        "huge": b"9223372036854775806 9223372036854775806\n",
        "empty": b"",
    }


def load() -> None:
    import torch_tfrecord
    import torch_tfrecord.records.index  # noqa: F401


if __name__ == "__main__":
    main(check, seeds, load)
