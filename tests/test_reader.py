from __future__ import annotations

import gzip
import hashlib
import itertools
import re
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import torch_tfrecord.records.scan as scan_module
from torch_tfrecord import (
    CompressedIndexError,
    CorruptRecordError,
    ReadStats,
    StaleIndexError,
    TFRecordError,
    TruncatedRecordError,
    build_index,
    read_records,
)
from torch_tfrecord.records.framing import encode_record

READABLE = [
    "plain.tfrecord",
    "gzip.tfrecord.gz",
    "zlib.tfrecord.zz",
    "gzip_nosuffix.tfrecord",
    "zlib_nosuffix.tfrecord",
    "empty.tfrecord",
    "gzip_magic_plain.tfrecord",
]


def sha(records: list[bytes]) -> list[str]:
    return [hashlib.sha256(r).hexdigest() for r in records]


@pytest.mark.parametrize("name", READABLE)
def test_reads_every_tensorflow_file_record_for_record(name: str, records_dir: Path, golden: dict) -> None:
    ours = list(read_records(records_dir / name))
    assert sha(ours) == golden["tf_reads"][name]["records"]
    assert golden["tf_reads"][name]["error"] is None
    if name in READABLE[:5]:
        assert ours == golden["payloads"]


@pytest.mark.parametrize("compression", ["gzip", "zlib"])
def test_explicit_compression_argument(compression: str, records_dir: Path, golden: dict) -> None:
    name = f"{compression}_nosuffix.tfrecord"
    assert list(read_records(records_dir / name, compression=compression)) == golden["payloads"]  # type: ignore[arg-type]


def test_payloads_are_independent_bytes(records_dir: Path) -> None:
    records = list(read_records(records_dir / "plain.tfrecord"))
    assert all(type(r) is bytes for r in records)


# Damaged TF files: (file, our error, byte offset we must name). TF reads the partial trailing
# header as end of file; we refuse it, because that silently drops a half-written record.
DAMAGED = [
    ("truncated_header.tfrecord", TruncatedRecordError, "record 3", "5 of 12 header bytes"),
    ("truncated_payload.tfrecord", TruncatedRecordError, "record 3", "file ends inside a record"),
    ("truncated_footer.tfrecord", TruncatedRecordError, "record 3", "file ends inside a record"),
    ("flipped_payload.tfrecord", CorruptRecordError, "record 3", "data CRC mismatch"),
    ("flipped_data_crc.tfrecord", CorruptRecordError, "record 3", "data CRC mismatch"),
    ("flipped_length.tfrecord", CorruptRecordError, "record 3", "length CRC mismatch"),
    ("huge_length.tfrecord", CorruptRecordError, "record 3", "length CRC mismatch"),
]


@pytest.mark.parametrize(("name", "error", "record", "words"), DAMAGED)
def test_damaged_tensorflow_files_raise_with_offset(
    name: str, error: type[Exception], record: str, words: str, records_dir: Path, golden: dict
) -> None:
    offset = golden["record_offsets"][3]
    records = []
    with pytest.raises(error) as info:
        for payload in read_records(records_dir / name):
            records.append(payload)
    message = str(info.value)
    assert name in message and f"at byte {offset} ({record})" in message and words in message
    assert info.value.offset == offset and info.value.record == 3  # type: ignore[attr-defined]
    # Everything before the damage was read, exactly what TensorFlow read.
    assert sha(records) == golden["tf_reads"][name]["records"][:3]
    assert records == golden["payloads"][:3]
    if "truncated_header" not in name:
        assert golden["tf_reads"][name]["error"] == "DataLossError"
        # TF names the header offset, or the payload's (offset + 12) for a data CRC error.
        tf_message = golden["tf_reads"][name]["message"]
        assert re.search(rf"record at ({offset}|{offset + 12})\D", tf_message)


def test_crc_message_names_stored_and_computed(records_dir: Path) -> None:
    with pytest.raises(CorruptRecordError, match=r"stored 0x[0-9a-f]{8}, computed 0x[0-9a-f]{8}"):
        list(read_records(records_dir / "flipped_payload.tfrecord"))


def test_without_crc_checks_flipped_payload_passes_but_lengths_are_still_checked(records_dir: Path) -> None:
    records = list(read_records(records_dir / "flipped_payload.tfrecord", verify_crc=False))
    assert len(records) == 11
    with pytest.raises(CorruptRecordError, match="length CRC mismatch"):
        list(read_records(records_dir / "huge_length.tfrecord", verify_crc=False))
    with pytest.raises(TruncatedRecordError):
        list(read_records(records_dir / "truncated_payload.tfrecord", verify_crc=False))


def test_truncated_gzip_stream(records_dir: Path, golden: dict) -> None:
    records = []
    with pytest.raises(TruncatedRecordError, match="gzip_truncated.tfrecord.gz"):
        for payload in read_records(records_dir / "gzip_truncated.tfrecord.gz"):
            records.append(payload)
    assert records == golden["payloads"][: len(records)]


def test_damaged_zlib_stream(tmp_path: Path, records_dir: Path) -> None:
    data = bytearray((records_dir / "zlib.tfrecord.zz").read_bytes())
    data[100] ^= 0xFF
    path = tmp_path / "bad.zz"
    path.write_bytes(bytes(data))
    with pytest.raises(TFRecordError, match="bad.zz"):
        list(read_records(path))


def test_gzip_read_as_plain_is_an_error(records_dir: Path) -> None:
    with pytest.raises(CorruptRecordError, match="length CRC mismatch"):
        list(read_records(records_dir / "gzip.tfrecord.gz", compression=None))


def test_on_error_skip_resumes_after_the_damaged_record_and_counts(records_dir: Path, golden: dict) -> None:
    stats = ReadStats()
    records = list(read_records(records_dir / "flipped_payload.tfrecord", on_error="skip", stats=stats))
    assert records == golden["payloads"][:3] + golden["payloads"][4:]
    assert stats.files_skipped == 0 and stats.records == 10 and len(stats.errors) == 1
    [region] = stats.damaged
    assert region.records == 1 and region.first_record == 3 and stats.records_skipped == 1
    assert region.size == stats.bytes_skipped == len(encode_record(golden["payloads"][3]))
    assert "record 3" in stats.errors[0] and f"bytes {region.start}..{region.end}" in stats.errors[0]


def test_on_error_skip_with_index_skips_only_the_damaged_record(records_dir: Path, golden: dict) -> None:
    table = build_index(records_dir / "plain.tfrecord")
    stats = ReadStats()
    records = list(
        read_records(records_dir / "flipped_payload.tfrecord", entries=table, on_error="skip", stats=stats)
    )
    assert records == golden["payloads"][:3] + golden["payloads"][4:]
    assert stats.records_skipped == 1 and stats.records == 10


def test_invalid_on_error() -> None:
    with pytest.raises(ValueError, match="on_error"):
        read_records("x", on_error="ignore")  # type: ignore[arg-type]


def test_entries_in_any_order(records_dir: Path, golden: dict) -> None:
    table = build_index(records_dir / "plain.tfrecord")
    order = [7, 2, 3, 4, 10, 0, 1]
    records = list(read_records(records_dir / "plain.tfrecord", entries=table[order]))
    assert records == [golden["payloads"][i] for i in order]


def test_entries_are_read_in_coalesced_requests(records_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The stream read (without the native extension, and for remote files); the native batch
    # read's requests: test_entries_are_gathered_a_batch_per_native_call.
    monkeypatch.setenv("TORCH_TFRECORD_DECODER", "python")
    table = build_index(records_dir / "plain.tfrecord")
    reads: list[int] = []
    original = scan_module.read_stream

    def spy(stream: Any, span: Any, offset: int, size: int, ordinal: int) -> bytes:
        reads.append(size)
        return original(stream, span, offset, size, ordinal)

    monkeypatch.setattr(scan_module, "read_stream", spy)
    list(read_records(records_dir / "plain.tfrecord", entries=table[[2, 3, 4, 8]]))
    # Records 2-4 lie back to back: one read of exactly their bytes; record 8 another.
    assert reads == [int(table[2:5, 1].sum()), int(table[8, 1])]


def test_entry_that_does_not_match_the_file_is_a_stale_index(records_dir: Path) -> None:
    table = build_index(records_dir / "plain.tfrecord")
    wrong = table[[3]].copy()
    wrong[0, 1] += 1
    with pytest.raises(StaleIndexError, match="record 0 of .*plain.tfrecord"):
        list(read_records(records_dir / "plain.tfrecord", entries=wrong))
    past_end = np.array([[table[-1, 0], table[-1, 1] + 100]])
    with pytest.raises(StaleIndexError, match="runs past the end"):
        list(read_records(records_dir / "plain.tfrecord", entries=past_end, record_numbers=[10]))
    misaligned = np.array([[table[3, 0] + 1, table[3, 1]]])
    with pytest.raises(CorruptRecordError, match="record 3"):
        list(read_records(records_dir / "plain.tfrecord", entries=misaligned, record_numbers=[3]))


def test_bad_entries_arguments(records_dir: Path) -> None:
    with pytest.raises(ValueError, match="pairs"):
        list(read_records(records_dir / "plain.tfrecord", entries=[1, 2, 3]))
    with pytest.raises(ValueError, match="impossible"):
        list(read_records(records_dir / "plain.tfrecord", entries=[(0, 3)]))
    with pytest.raises(ValueError, match="record_numbers"):
        list(read_records(records_dir / "plain.tfrecord", entries=[(0, 16)], record_numbers=[1, 2]))
    with pytest.raises(ValueError, match="not both"):
        list(read_records(records_dir / "plain.tfrecord", entries=[(0, 16)], byte_range=(0, 1)))
    assert list(read_records(records_dir / "plain.tfrecord", entries=[])) == []


def test_byte_range(records_dir: Path, golden: dict) -> None:
    offsets = golden["record_offsets"]
    path = records_dir / "plain.tfrecord"
    # Records that begin in [start, end): a range may end inside a record.
    assert list(read_records(path, byte_range=(offsets[2], offsets[5]))) == golden["payloads"][2:5]
    assert list(read_records(path, byte_range=(offsets[2], offsets[5] + 1))) == golden["payloads"][2:6]
    # Ranges between record offsets that split the file give every record exactly once.
    cuts = [0, offsets[2], offsets[5], offsets[8], path.stat().st_size]
    pieces = [list(read_records(path, byte_range=(a, b))) for a, b in itertools.pairwise(cuts)]
    assert [r for piece in pieces for r in piece] == golden["payloads"]
    with pytest.raises(CorruptRecordError, match=r"record 0 after byte 57"):
        list(read_records(path, byte_range=(offsets[3] + 1, offsets[5])))
    with pytest.raises(ValueError):
        list(read_records(path, byte_range=(10, 5)))


def test_offsets_refused_for_compressed_files(records_dir: Path) -> None:
    with pytest.raises(CompressedIndexError, match="GZIP"):
        read_records(records_dir / "gzip.tfrecord.gz", entries=[(0, 16)])
    with pytest.raises(CompressedIndexError, match="ZLIB"):
        read_records(records_dir / "zlib.tfrecord.zz", byte_range=(0, 10))


def test_huge_length_is_rejected_before_allocating(write_raw: Callable[..., Path]) -> None:
    import struct

    from torch_tfrecord.records.framing import masked_crc32c

    length = struct.pack("<Q", (1 << 63) - 1)
    path = write_raw([b"ok"], tail=length + struct.pack("<I", masked_crc32c(length)) + b"xx")
    # A valid length CRC, so this is a header whose record runs past the end of the file.
    with pytest.raises(TruncatedRecordError, match=r"record 1\).*past|record 1\).*ends at byte"):
        list(read_records(path, verify_crc=False))


def test_huge_length_in_compressed_stream_does_not_allocate(tmp_path: Path) -> None:
    import struct

    from torch_tfrecord.records.framing import masked_crc32c

    length = struct.pack("<Q", 1 << 62)
    path = tmp_path / "big.gz"
    path.write_bytes(gzip.compress(length + struct.pack("<I", masked_crc32c(length)) + b"x" * 100))
    with pytest.raises(TruncatedRecordError, match="record 0"):
        list(read_records(path, verify_crc=False))


def test_multi_member_gzip_and_nul_padding(tmp_path: Path) -> None:
    first = b"".join(encode_record(b"a" * n) for n in range(5))
    second = b"".join(encode_record(b"b" * n) for n in range(3))
    path = tmp_path / "multi.gz"
    path.write_bytes(gzip.compress(first) + gzip.compress(second) + b"\x00" * 10)
    assert len(list(read_records(path))) == 8


def test_trailing_garbage_after_zlib_stream(tmp_path: Path) -> None:
    path = tmp_path / "x.zz"
    path.write_bytes(zlib.compress(encode_record(b"a")) + b"junk")
    with pytest.raises(CorruptRecordError, match="after the end"):
        list(read_records(path))


@settings(max_examples=60, deadline=None)
@given(
    payloads=st.lists(st.binary(max_size=300), max_size=30),
    chunk=st.sampled_from([7, 13, 64, 1 << 20]),
    compression=st.sampled_from([None, "gzip", "zlib"]),
)
def test_round_trip_across_chunk_boundaries(
    payloads: list[bytes], chunk: int, compression: str | None, tmp_path_factory: pytest.TempPathFactory
) -> None:
    data = b"".join(encode_record(p) for p in payloads)
    if compression == "gzip":
        data = gzip.compress(data)
    elif compression == "zlib":
        data = zlib.compress(data)
    path = tmp_path_factory.mktemp("rt") / "f.tfrecord"
    path.write_bytes(data)
    original = scan_module.CHUNK
    scan_module.CHUNK = chunk
    try:
        assert list(read_records(path, compression=compression)) == payloads  # type: ignore[arg-type]
        if compression is None:
            table = build_index(path)
            assert list(read_records(path, entries=table[::-1])) == payloads[::-1]
    finally:
        scan_module.CHUNK = original


def reader_outcome(path: Path, reader: str, **kwargs: Any) -> tuple[Any, ...]:
    """What a read gives with ``reader`` (``TORCH_TFRECORD_DECODER``): records, error, skip stats."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TORCH_TFRECORD_DECODER", reader)
        records: list[bytes] = []
        error = None
        try:
            records.extend(read_records(path, **kwargs))
        except TFRecordError as caught:
            error = (type(caught), str(caught), caught.path, caught.offset, caught.record)
        stats = ReadStats()
        skipped = list(read_records(path, on_error="skip", stats=stats, **kwargs))
    assert all(type(r) is bytes for r in records + skipped)
    return records, error, skipped, stats


@pytest.mark.skipif(scan_module._extension.compiled is None, reason="the native extension is not built")
@settings(deadline=None, max_examples=150)
@given(
    payloads=st.lists(st.binary(max_size=300), max_size=25),
    chunk=st.sampled_from([7, 13, 64, 1 << 20]),
    compression=st.sampled_from([None, "gzip"]),
    damage=st.one_of(
        st.none(),
        st.tuples(st.just("flip"), st.integers(0, 1 << 16), st.integers(0, 7)),
        st.tuples(st.just("cut"), st.integers(0, 1 << 16), st.just(0)),
    ),
    verify_crc=st.booleans(),
)
def test_native_and_python_readers_agree(
    payloads: list[bytes],
    chunk: int,
    compression: str | None,
    damage: tuple[str, int, int] | None,
    verify_crc: bool,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Records, errors (class, message, file, offset, record) and skip counts are the same
    with the native framing and the Python loop, across chunk boundaries and damage."""
    data = bytearray(b"".join(encode_record(p) for p in payloads))
    if damage is not None and data:
        kind, where, bit = damage
        where %= len(data)
        if kind == "flip":
            data[where] ^= 1 << bit
        else:
            del data[where:]
    path = tmp_path_factory.mktemp("agree") / "f.tfrecord"
    path.write_bytes(gzip.compress(bytes(data)) if compression else bytes(data))
    original = scan_module.CHUNK
    scan_module.CHUNK = chunk
    try:
        kwargs: dict[str, Any] = {"compression": compression, "verify_crc": verify_crc}
        assert reader_outcome(path, "native", **kwargs) == reader_outcome(path, "python", **kwargs)
        if compression is None and len(data) > 8:
            kwargs["byte_range"] = (0, len(data) // 2)
            assert reader_outcome(path, "native", **kwargs) == reader_outcome(path, "python", **kwargs)
    finally:
        scan_module.CHUNK = original


def test_the_native_reader_runs_and_can_be_turned_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if scan_module._extension.compiled is None:
        pytest.skip("the native extension is not built")
    path = tmp_path / "f.tfrecord"
    path.write_bytes(b"".join(encode_record(bytes([i]) * i) for i in range(50)))
    calls = []
    frame = scan_module._extension.compiled.frame

    def spy(*args: Any) -> Any:
        calls.append(args[1:])
        return frame(*args)

    monkeypatch.setattr(scan_module._extension.compiled, "frame", spy)
    assert list(read_records(path)) == [bytes([i]) * i for i in range(50)]
    assert calls == [(0, path.stat().st_size, True)]
    monkeypatch.setenv("TORCH_TFRECORD_DECODER", "python")
    assert list(read_records(path, verify_crc=False)) == [bytes([i]) * i for i in range(50)]
    assert len(calls) == 1
    monkeypatch.setenv("TORCH_TFRECORD_DECODER", "fast")
    with pytest.raises(ValueError, match="TORCH_TFRECORD_DECODER"):
        list(read_records(path))


def test_stats_count_records_and_bytes(records_dir: Path, golden: dict) -> None:
    stats = ReadStats()
    list(read_records(records_dir / "plain.tfrecord", stats=stats))
    assert stats.records == 11
    assert stats.payload_bytes == sum(len(p) for p in golden["payloads"])
