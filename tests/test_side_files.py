"""The side files of a dataset as untrusted input (issue 44): each parser allocates no more than
its data file can honestly describe, or a stated maximum, and fails with a TFRecordError that
names the file. The issue's cases as regression tests, and a property test per parser (the
label map's, the TFDS metadata's, the cache's and the viewer's are in their own test files).
"""

from __future__ import annotations

import json
import struct
import tracemalloc
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import torch_tfrecord as tt
from torch_tfrecord.codec.spec_file import MAX_SPEC_BYTES, decode_spec_json, encode_spec_json, read_spec_file
from torch_tfrecord.convert.parquet import SPEC_METADATA_KEY, decode_parquet_spec
from torch_tfrecord.records import remote
from torch_tfrecord.records.compressed.index import (
    MAGIC,
    decode_compressed_index,
    encode_compressed_index,
    load_compressed_index,
)
from torch_tfrecord.records.index import decode_index, encode_index, load_index, max_index_bytes

MB = 1 << 20


def _peak(call: Callable[[], Any]) -> int:
    tracemalloc.start()
    try:
        call()
    except tt.TFRecordError:
        pass
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


def _shard(path: Path, records: int = 5, compression: str | None = None) -> Path:
    with tt.RecordWriter(str(path), compression=compression) as writer:  # type: ignore[arg-type]
        for i in range(records):
            writer.write(tt.encode_example({"i": [i]}))
    return path


# ------------------------------------------------------------------ .idx


def test_an_offset_near_2_to_the_63_is_named_not_wrapped(tmp_path: Path) -> None:
    """Issue 44: `9223372036854775800` wrapped to a negative "ends at byte -9223..." message."""
    path = _shard(tmp_path / "a.tfrecord", records=1)
    Path(str(path) + ".idx").write_text(f"0 {path.stat().st_size}\n9223372036854775800 16\n")
    with pytest.raises(tt.StaleIndexError, match="lies past the end of the file") as caught:
        load_index(str(path) + ".idx", data_path=path)
    assert "9223372036854775800" in str(caught.value) and "-9223" not in str(caught.value)


def test_an_index_larger_than_its_file_can_need_is_not_read(tmp_path: Path) -> None:
    path = _shard(tmp_path / "a.tfrecord")
    index = Path(str(path) + ".idx")
    index.write_bytes(b"0 16\n" * (max_index_bytes(path.stat().st_size) // 5 + 1))
    with pytest.raises(tt.IndexFormatError, match="more than an index of its data file can hold"):
        load_index(index, data_path=path)
    with pytest.raises(tt.IndexFormatError, match="more than an index"):
        tt.TFRecordDataset(str(path), spec={"i": tt.FixedLen((), torch.int64)})
    remote.write_bytes("memory://side/a.tfrecord", path.read_bytes())
    remote.write_bytes("memory://side/a.tfrecord.idx", index.read_bytes())
    for cache_dir in (False, tmp_path / "cache"):  # by one ranged request, or refused before a download
        with pytest.raises(tt.IndexFormatError, match="more than an index"):
            tt.TFRecordDataset("memory://side/a.tfrecord", spec={"i": "int"}, cache_dir=cache_dir)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2**63 - 2), st.integers(0, 2**63 - 2)), max_size=20))
def test_index_text_round_trips(rows: list[tuple[int, int]]) -> None:
    """Property: encode_index then decode_index is the identity on non-negative int64 rows."""
    table = np.array(rows, dtype=np.int64).reshape(-1, 2)
    assert np.array_equal(decode_index(encode_index(table)), table)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200) | st.text(alphabet="0123456789 \t\r\n-+x", max_size=200).map(str.encode))
def test_any_index_text_is_a_table_or_an_index_format_error(data: bytes) -> None:
    try:
        table = decode_index(data, "prop.idx")
    except tt.IndexFormatError as error:
        assert "prop.idx" in str(error)
        return
    assert table.shape[1] == 2 and (table >= 0).all() and len(table) <= data.count(b"\n") + 1
    try:
        tt.check_index(table, "x", "prop.idx", size=1000)
    except tt.StaleIndexError as error:
        assert "byte -" not in str(error)


# ------------------------------------------------------------------ .cidx


def _bomb(index: bytes, records: int) -> bytes:
    """A compressed index whose record sizes inflate to ``8 * records`` bytes (all 16)."""
    at = len(MAGIC)
    (size,) = struct.unpack_from("<I", index, at)
    header = json.loads(index[at + 4 : at + 4 + size])
    seek = index[at + 4 + size + header["sizes_bytes"] : -4]
    deflater = zlib.compressobj(9)
    chunk = (b"\x10" + b"\0" * 7) * 125_000
    sizes = b"".join(deflater.compress(chunk) for _ in range(records // 125_000)) + deflater.flush()
    header.update(records=records, sizes_bytes=len(sizes))
    head = json.dumps(header, sort_keys=True).encode()
    body = MAGIC + struct.pack("<I", len(head)) + head + sizes + seek
    return body + struct.pack("<I", zlib.crc32(body))


def test_a_cidx_that_inflates_past_its_file_is_refused_before_inflating(tmp_path: Path) -> None:
    """Issue 44: a 408 KB .cidx inflated to 400 MB (840 MB peak) before its record count was
    checked. Its records are now bounded by what the data file can hold, first."""
    path = _shard(tmp_path / "a.tfrecord.gz", compression="gzip")
    true = encode_compressed_index(tt.build_compressed_index(path))
    bomb = _bomb(true, 50_000_000)
    assert len(bomb) < MB
    index = tmp_path / "a.tfrecord.gz.cidx"
    index.write_bytes(bomb)
    peak = _peak(lambda: load_compressed_index(index, data_path=path))
    assert peak < 4 * MB, peak
    with pytest.raises(tt.IndexFormatError, match="claims 50,000,000 records"):
        load_compressed_index(index, data_path=path)
    with pytest.raises(tt.IndexFormatError, match="claims 50,000,000 records"):
        decode_compressed_index(bomb, index)  # without the data file: the header's own size bounds it
    with pytest.raises(tt.IndexFormatError, match="claims"):
        tt.TFRecordDataset(str(path), spec={"i": "int"})
    # A header that claims few records but sizes that inflate to more: cut at what it claims.
    lie = bomb.replace(b'"records": 50000000', b'"records": 5'.ljust(len(b'"records": 50000000')))
    body = lie[:-4]
    with pytest.raises(tt.IndexFormatError, match="inflate past"):
        decode_compressed_index(
            body + struct.pack("<I", zlib.crc32(body)), index, data_size=path.stat().st_size
        )


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 10_000), st.integers(0, 255), st.integers(0, 400))
def test_a_damaged_cidx_is_refused_or_still_its_files(position: int, byte: int, cut: int) -> None:
    """Property: a compressed index with a byte changed and its end cut reads as the true index
    of its file, or is refused with IndexFormatError / StaleIndexError."""
    true = _CIDX["bytes"]
    damaged = bytearray(true)
    damaged[position % len(true)] = byte
    data = bytes(damaged[: len(damaged) - cut % len(damaged)])
    try:
        found = decode_compressed_index(data, "p.cidx", data_size=_CIDX["size"])
    except (tt.IndexFormatError, tt.StaleIndexError):
        return
    assert len(found.table) <= 1032 * _CIDX["size"] // 16 + 1


_CIDX: dict[str, Any] = {}


@pytest.fixture(autouse=True, scope="module")
def _cidx(tmp_path_factory: pytest.TempPathFactory) -> None:
    path = _shard(tmp_path_factory.mktemp("cidx") / "p.tfrecord.gz", records=20, compression="gzip")
    _CIDX.update(bytes=encode_compressed_index(tt.build_compressed_index(path)), size=path.stat().st_size)


# ------------------------------------------------------------------ spec.json and Parquet metadata


def test_a_spec_json_with_a_billion_default_values_is_refused_before_allocating(tmp_path: Path) -> None:
    """Issue 44: a FixedLen shape of 10**9 with a default was a MemoryError."""
    path = _shard(tmp_path / "a.tfrecord")
    entry = {"kind": "FixedLen", "shape": [10**9], "dtype": "float32", "default": 0.0}
    (tmp_path / "spec.json").write_text(
        json.dumps({"format": "torch-tfrecord-spec", "version": 1, "spec": {"x": entry}})
    )
    assert _peak(lambda: read_spec_file([str(path)])) < MB
    with pytest.raises(tt.SpecError, match="a default fills at most"):
        read_spec_file([str(path)])
    with pytest.raises(tt.SpecError, match="spec.json"):
        tt.TFRecordDataset(str(path))


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"[" * 100_000, "not JSON"),
        (b"\xff\xfe{}", "not UTF-8"),
        (b'{"format": "torch-tfrecord-spec", "version": 1, "spec": {"x": {"kind": ["FixedLen"]}}}', "kind"),
        (
            b'{"format": "torch-tfrecord-spec", "version": 1, "spec": {"x": {"kind": "VarLen", "oops": 1}}}',
            "oops",
        ),
        (b'{"format": "torch-tfrecord-spec", "version": 1, "context_spec": {}}', "neither"),
        (b" " * (MAX_SPEC_BYTES + 1), "more than a spec file holds"),
    ],
)
def test_malformed_spec_files_are_spec_errors(tmp_path: Path, content: bytes, match: str) -> None:
    path = _shard(tmp_path / "a.tfrecord")
    (tmp_path / "spec.json").write_bytes(content)
    with pytest.raises(tt.SpecError, match=match) as caught:
        read_spec_file([str(path)])
    assert "spec.json" in str(caught.value)


_SPEC_KINDS = st.sampled_from(["FixedLen", "VarLen", "FixedLenSequence", "RawTensor", "Image", "Other", 7])
_ENTRY = st.fixed_dictionaries(
    {"kind": _SPEC_KINDS},
    optional={
        "shape": st.lists(st.integers(-2, 2**40), max_size=3) | st.integers(-1, 5) | st.text(max_size=3),
        "dtype": st.sampled_from(["int64", "float32", "bytes", "str", "uint8", "complex64", "nope", 3]),
        "default": st.none()
        | st.integers(-(2**70), 2**70)
        | st.floats()
        | st.lists(st.integers(), max_size=3),
        "allow_missing": st.booleans(),
        "mode": st.sampled_from(["RGB", "L", "x"]),
    },
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=5), _ENTRY, max_size=3), st.sampled_from(["spec", "sequence_spec"]))
def test_any_spec_file_is_specs_or_a_spec_error(entries: dict[str, Any], part: str) -> None:
    """Property: a spec.json of any entries gives specs that write and read back equal, or a
    SpecError naming the file."""
    document = {"format": "torch-tfrecord-spec", "version": 1, part: entries}
    try:
        found = decode_spec_json(json.dumps(document), source="p/spec.json")
    except tt.SpecError as error:
        assert "p/spec.json" in str(error)
        return
    assert found is not None
    written = {"context_spec": {}, **found} if part == "sequence_spec" else found
    assert decode_spec_json(encode_spec_json(**found)) == written


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_any_parquet_spec_metadata_is_a_spec_or_a_spec_error(metadata: bytes) -> None:
    try:
        found = decode_parquet_spec({SPEC_METADATA_KEY: metadata}, "p.parquet")
    except tt.SpecError as error:
        assert "p.parquet" in str(error)
    else:
        assert found is None or isinstance(found, dict)


def test_a_crafted_parquet_file_is_named(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"x": [1, 2]}).replace_schema_metadata({SPEC_METADATA_KEY: b"\xff\xfe"}), path)
    with pytest.raises(tt.SpecError, match="in.parquet.*not UTF-8"):
        tt.from_parquet(str(path), str(tmp_path / "out"))
    path.write_bytes(b"PAR1" + b"\0" * 100 + b"PAR1")
    with pytest.raises(tt.TFRecordError, match="in.parquet.*not a Parquet file"):
        tt.from_parquet(str(path), str(tmp_path / "out2"))
