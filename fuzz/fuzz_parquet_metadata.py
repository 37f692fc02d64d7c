"""Fuzzing of the Parquet metadata read back by ``from_parquet`` (atheris).

Each input is the bytes ``to_parquet`` keeps in a Parquet schema's metadata (the spec, as JSON);
the first byte also picks whether a real Parquet file is written with them (and a small column
of ints), then converted. Then:

- reading the metadata gives the spec, or a SpecError naming the file;
- converting the file writes its rows, or raises a TFRecordError naming it (never another
  error from the metadata).

    python fuzz/fuzz_parquet_metadata.py fuzz/corpus/parquet_metadata -atheris_runs=100000
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from _harness import Rejected, attempt, main

_FOLDER: list[Path] = []


def check(data: bytes) -> None:
    """Raises AssertionError (or any non-library exception) on a Parquet metadata bug."""
    import torch_tfrecord as tt
    from torch_tfrecord.convert.parquet import SPEC_METADATA_KEY, decode_parquet_spec

    metadata = data[1:]
    specs = attempt(lambda: decode_parquet_spec({SPEC_METADATA_KEY: metadata}, "fuzzed.parquet"))
    if isinstance(specs, Rejected):
        assert isinstance(specs.error, tt.SpecError) and "fuzzed.parquet" in str(specs.error), specs
    if not data[:1] or data[0] % 4:
        return
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not _FOLDER:
        _FOLDER.append(Path(tempfile.mkdtemp(prefix="fuzz-parquet-")))
    path = _FOLDER[0] / "in.parquet"
    table = pa.table({"x": [1, 2, 3]}).replace_schema_metadata({SPEC_METADATA_KEY: metadata})
    pq.write_table(table, path)
    result = attempt(lambda: tt.from_parquet(str(path), str(_FOLDER[0] / "out")))
    if isinstance(result, Rejected):
        assert "in.parquet" in str(result.error), result


def seeds() -> dict[str, bytes]:
    from torch_tfrecord.codec.spec_file import encode_spec_json

    return {
        "spec": b"\x00" + encode_spec_json({"x": "int"}).encode(),
        "no-write": b"\x01" + encode_spec_json({"x": "int"}).encode(),
        "not-utf8": b"\x00\xff\xfe",
        "wrong-column": b"\x00" + encode_spec_json({"y": "bytes"}).encode(),
        "junk": b"\x00{",
    }


def load() -> None:
    import torch_tfrecord
    import torch_tfrecord.convert.parquet  # noqa: F401


if __name__ == "__main__":
    main(check, seeds, load)
