from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from torch_tfrecord import (
    CompressedIndexError,
    IndexFormatError,
    StaleIndexError,
    TruncatedRecordError,
    build_index,
    check_index,
    default_index_path,
    load_index,
    save_index,
)
from torch_tfrecord.records.index import count_records, decode_index, encode_index, index_from_sizes


def test_index_of_tensorflow_file_equals_dali_tfrecord2idx(records_dir: Path, golden: dict) -> None:
    table = build_index(records_dir / "plain.tfrecord")
    dali = (records_dir / "plain.tfrecord.dali.idx").read_bytes()
    assert encode_index(table) == dali
    assert (decode_index(dali) == table).all()
    assert table[:, 0].tolist() == golden["record_offsets"]
    assert (build_index(records_dir / "plain.tfrecord", verify_crc=True) == table).all()


def test_dali_index_loads_and_checks(records_dir: Path) -> None:
    table = load_index(records_dir / "plain.tfrecord.dali.idx", data_path=records_dir / "plain.tfrecord")
    assert table.dtype == np.int64 and table.shape == (11, 2)


def test_empty_and_single_record_files(write_raw: Callable[..., Path], tmp_path: Path) -> None:
    empty = write_raw([], "empty.tfrecord")
    assert build_index(empty).shape == (0, 2)
    save_index(build_index(empty), default_index_path(empty))
    assert load_index(default_index_path(empty), data_path=empty).shape == (0, 2)
    one = write_raw([b"only"], "one.tfrecord")
    save_index(build_index(one), default_index_path(one))
    assert load_index(default_index_path(one), data_path=one).tolist() == [[0, 20]]


@given(st.lists(st.integers(min_value=16, max_value=1 << 40), max_size=50))
def test_encode_decode_round_trip(sizes: list[int]) -> None:
    table = index_from_sizes(sizes)
    assert (decode_index(encode_index(table)) == table).all()


_INDEX_TEXT = st.lists(
    st.one_of(
        st.tuples(st.integers(0, 10**19), st.integers(0, 10**19)).map(lambda r: f"{r[0]} {r[1]}\n"),
        st.sampled_from(["\n", " ", "\t", "\r\n", "-", "+", "x", "0", "1 ", " 2", "007 010\n", "5 6"]),
    ),
    max_size=30,
).map(lambda parts: "".join(parts).encode())


@given(_INDEX_TEXT)
def test_the_compiled_index_parser_agrees_with_numpy_and_the_strict_parser(text: bytes) -> None:
    from torch_tfrecord.records import index

    def parse(native: object) -> object:
        saved, index._native = index._native, native
        try:
            return decode_index(text).tolist()
        except IndexFormatError as error:
            return str(error)
        finally:
            index._native = saved

    if index._native is None:
        pytest.skip("the extension is not built")
    assert parse(index._native) == parse(None)
    room = np.empty((text.count(b"\n"), 2), dtype=np.int64)  # a row short when the last line has no newline
    count = index._native.parse_index(text, room)
    assert count <= len(room)


def test_encode_matches_plain_formatting_at_digit_boundaries() -> None:
    values = [0, 9, 10, 99, 100, 16, 12345, 10**17 - 1, 10**18, (1 << 63) - 1]
    table = np.array([[v, w] for v in values for w in values[::-1]], dtype=np.int64)
    assert encode_index(table) == "".join(f"{a} {b}\n" for a, b in table.tolist()).encode()
    assert encode_index(np.zeros((0, 2))) == b""
    with pytest.raises(ValueError, match="non-negative"):
        encode_index([[0, -16]])


def test_lenient_whitespace_and_strict_errors(tmp_path: Path) -> None:
    assert decode_index(b"0 16\r\n16  20\n\n36\t5").tolist() == [[0, 16], [16, 20], [36, 5]]
    assert decode_index(b"0 16\n16 20").tolist() == [[0, 16], [16, 20]]
    path = tmp_path / "bad.idx"
    for text, line in [(b"0 16\n16 x\n", 2), (b"0 16 3\n", 1), (b"-5 16\n", 1), (b"0 1.5\n", 1)]:
        path.write_bytes(text)
        with pytest.raises(IndexFormatError, match=rf"bad.idx' line {line}"):
            load_index(path)
    path.write_bytes(b"0 99999999999999999999\n")
    with pytest.raises(IndexFormatError, match="out of range"):
        load_index(path)


def test_stale_index_cases(write_raw: Callable[..., Path], tmp_path: Path) -> None:
    path = write_raw([b"a" * 10, b"b" * 20, b"c" * 30])
    table = build_index(path)
    index_path = tmp_path / "data.tfrecord.idx"
    save_index(table, index_path)
    check_index(table, path, index_path)
    cases = {
        "grew": table[:2],  # as if the file was appended to after indexing
        "overlaps": np.array([[0, 26], [20, 36], [62, 46]]),
        "leaves a gap": np.array([[0, 26], [30, 36], [62, 46]]),
        "not 0": table + np.array([[5, 0]]),
        "below the minimum": np.array([[0, 26], [26, 3], [29, 79]]),
        "shrank": np.vstack([table, [[108, 16]]]),
        "index is empty": np.zeros((0, 2), np.int64),
    }
    for words, bad in cases.items():
        save_index(bad, index_path)
        with pytest.raises(StaleIndexError, match=words) as info:
            load_index(index_path, data_path=path)
        assert "data.tfrecord.idx" in str(info.value) and "'" + str(path) + "'" in str(info.value)


def test_index_of_another_file_is_stale(write_raw: Callable[..., Path], tmp_path: Path) -> None:
    first = write_raw([b"a" * 10, b"b" * 20], "first.tfrecord")
    second = write_raw([b"a" * 15, b"b" * 20], "second.tfrecord")
    save_index(build_index(first), tmp_path / "first.idx")
    with pytest.raises(StaleIndexError):
        load_index(tmp_path / "first.idx", data_path=second)


def test_building_refuses_compressed_and_reports_damage(records_dir: Path) -> None:
    with pytest.raises(CompressedIndexError, match="GZIP-compressed.*compressed index"):
        build_index(records_dir / "gzip.tfrecord.gz")
    with pytest.raises(CompressedIndexError, match="ZLIB"):
        build_index(records_dir / "zlib_nosuffix.tfrecord")
    with pytest.raises(TruncatedRecordError, match=r"at byte 56 \(record 3\)"):
        build_index(records_dir / "truncated_payload.tfrecord")
    with pytest.raises(TruncatedRecordError, match=r"5 of 12 header bytes"):
        build_index(records_dir / "truncated_header.tfrecord")
    # Only headers are read: a flipped payload byte is found only with verify_crc.
    assert len(build_index(records_dir / "flipped_payload.tfrecord")) == 11
    with pytest.raises(Exception, match="data CRC mismatch"):
        build_index(records_dir / "flipped_payload.tfrecord", verify_crc=True)


def test_header_walk_skips_over_large_records(write_raw: Callable[..., Path]) -> None:
    payloads = [b"x" * (3 << 20), b"", b"y" * 5, b"z" * (2 << 20)]
    table = build_index(write_raw(payloads))
    assert table[:, 1].tolist() == [len(p) + 16 for p in payloads]


def test_count_records(records_dir: Path, golden_copy: Callable[[str], Path], write_raw) -> None:
    assert count_records(records_dir / "gzip.tfrecord.gz") == 11
    assert count_records(records_dir / "empty.tfrecord") == 0
    path = golden_copy("plain.tfrecord")
    assert count_records(path) == 11
    save_index(build_index(path)[:4], default_index_path(path))  # stale: ignored, data counted
    assert count_records(path) == 11


def test_save_is_atomic(tmp_path: Path) -> None:
    index_path = tmp_path / "a.idx"
    save_index([[0, 16]], index_path)
    assert index_path.read_bytes() == b"0 16\n"
    assert [p.name for p in tmp_path.iterdir()] == ["a.idx"]


def test_build_index_reports_its_progress(write_raw: Callable[..., Path]) -> None:
    # records larger than a read chunk: the walk reads header after header, and says how far it got
    path = write_raw([bytes([n]) * (700 << 10) for n in range(6)])
    seen: list[int] = []
    table = build_index(str(path), progress=seen.append)
    assert len(table) == 6 and seen == sorted(seen) and len(seen) >= 3
    assert seen[0] == 0 and 0 < seen[-1] < path.stat().st_size
