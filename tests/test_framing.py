from __future__ import annotations

import struct
from pathlib import Path

import crc32c
from hypothesis import given
from hypothesis import strategies as st

from torch_tfrecord.records.framing import (
    FRAME_OVERHEAD,
    decode_header,
    encode_record,
    header_is_valid,
    mask_crc,
    masked_crc32c,
)


def test_mask_matches_tensorflow_definition() -> None:
    # TensorFlow's crc32c::Mask: rotate right by 15 bits, add 0xa282ead8.
    crc = crc32c.crc32c(b"hello")
    rotated = ((crc >> 15) | (crc << 17)) & 0xFFFFFFFF
    assert mask_crc(crc) == (rotated + 0xA282EAD8) & 0xFFFFFFFF
    # A known value from TensorFlow's crc32c tests: Value("a", 1) = 0xc1d04330.
    assert crc32c.crc32c(b"a") == 0xC1D04330


def test_empty_record_layout_matches_tensorflow_bytes(records_dir: Path) -> None:
    # Record 0 of TF's plain.tfrecord is the empty payload: 16 bytes we must reproduce.
    assert encode_record(b"") == (records_dir / "plain.tfrecord").read_bytes()[:16]


@given(st.binary(max_size=2000))
def test_encode_then_decode_header(payload: bytes) -> None:
    framed = encode_record(payload)
    assert len(framed) == len(payload) + FRAME_OVERHEAD
    length, stored = decode_header(framed)
    assert length == len(payload)
    assert stored == masked_crc32c(framed[:8])
    assert header_is_valid(framed)
    assert framed[12 : 12 + length] == payload
    (footer,) = struct.unpack("<I", framed[-4:])
    assert footer == masked_crc32c(payload)


@given(st.binary(min_size=12, max_size=12))
def test_header_validity_needs_matching_crc(header: bytes) -> None:
    expected = masked_crc32c(header[:8]) == struct.unpack("<I", header[8:])[0]
    assert header_is_valid(header) == expected


def test_short_buffer_is_not_a_header() -> None:
    assert not header_is_valid(encode_record(b"abc")[:11])
    assert header_is_valid(b"\x00" * 3 + encode_record(b"abc"), 3)
