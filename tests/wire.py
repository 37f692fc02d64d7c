"""Protobuf wire-format building blocks for tests that hand-craft serialized messages."""

from __future__ import annotations


def varint(value: int) -> bytes:
    """``value`` as a base-128 varint (negative numbers as their 64-bit two's complement)."""
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def tag(field: int, wire: int) -> bytes:
    return varint(field << 3 | wire)


def ld(field: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return tag(field, 2) + varint(len(payload)) + payload


def entry(key: bytes, *features: bytes) -> bytes:
    """A Features map entry (field 1 of Features): the key, then each Feature as a value field."""
    return ld(1, ld(1, key) + b"".join(ld(2, f) for f in features))


def example(*entries: bytes) -> bytes:
    """An Example whose Features hold the given map entries."""
    return ld(1, b"".join(entries))
