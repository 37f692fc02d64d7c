"""TFRecord framing: masked CRC32C and the layout of one record. Pure functions, no I/O.

A record is ``u64 length | u32 masked_crc32c(length bytes) | data | u32 masked_crc32c(data)``,
all little-endian. The CRC is CRC32C (Castagnoli), masked as TensorFlow does so that a CRC of
data that itself contains CRCs is not degenerate.
"""

from __future__ import annotations

import struct

import crc32c as _crc32c_module

__all__ = [
    "FOOTER_SIZE",
    "FRAME_OVERHEAD",
    "HEADER_SIZE",
    "crc32c",
    "decode_header",
    "encode_record",
    "header_is_valid",
    "mask_crc",
    "masked_crc32c",
]

HEADER_SIZE = 12
"""Bytes before the payload: the u64 length and its u32 masked CRC."""
FOOTER_SIZE = 4
"""Bytes after the payload: the u32 masked CRC of the payload."""
FRAME_OVERHEAD = HEADER_SIZE + FOOTER_SIZE
"""Framed size minus payload length (16): what an index's `framed_size` adds to the length."""

MASK_DELTA = 0xA282EAD8
_U32 = 0xFFFFFFFF

_HEADER = struct.Struct("<QI")
_LENGTH = struct.Struct("<Q")
_CRC = struct.Struct("<I")

crc32c = _crc32c_module.crc32c
"""Plain (unmasked) CRC32C of a bytes-like object."""


def mask_crc(crc: int) -> int:
    """Masks a CRC32C value the way TFRecord stores it.

    Args:
        crc: an unmasked CRC32C value.

    Returns:
        ``((crc >> 15) | (crc << 17)) + 0xA282EAD8`` modulo 2**32.
    """
    return ((((crc >> 15) | (crc << 17)) & _U32) + MASK_DELTA) & _U32


def masked_crc32c(data: bytes | bytearray | memoryview) -> int:
    """Returns the masked CRC32C of ``data``, as stored in a TFRecord frame."""
    return mask_crc(crc32c(data))


def encode_record(payload: bytes | bytearray | memoryview) -> bytes:
    """Frames one payload as a TFRecord record.

    Args:
        payload: the record's data (usually a serialized ``tf.train.Example``).

    Returns:
        ``len(payload) + 16`` bytes: header, payload, footer.

    Example:
        >>> encode_record(b"")
        b'\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00)\\x03\\x8e\\xa6\\xd8\\xea\\x82\\xa2'
    """
    length = _LENGTH.pack(len(payload))
    return b"".join((length, _CRC.pack(masked_crc32c(length)), payload, _CRC.pack(masked_crc32c(payload))))


def decode_header(buffer: bytes | bytearray | memoryview, position: int = 0) -> tuple[int, int]:
    """Reads a record header.

    Args:
        buffer: bytes holding at least 12 bytes from ``position``.
        position: where the header starts.

    Returns:
        ``(length, stored_length_crc)``; check the CRC with :func:`header_is_valid`.
    """
    length, stored_crc = _HEADER.unpack_from(buffer, position)
    return length, stored_crc


def header_is_valid(buffer: bytes | bytearray | memoryview, position: int = 0) -> bool:
    """True when the 12 bytes at ``position`` are a TFRecord header whose length CRC matches."""
    if len(buffer) - position < HEADER_SIZE:
        return False
    _, stored_crc = _HEADER.unpack_from(buffer, position)
    return bool(masked_crc32c(memoryview(buffer)[position : position + 8]) == stored_crc)
