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


def _read_varint(data: bytes, position: int, end: int) -> tuple[int, int] | None:
    value = shift = 0
    while position < end and shift < 70:
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, position
    return None


Schema = dict[int, "Schema | None"]
_LIST: Schema = {1: None}
_FEATURE: Schema = {1: _LIST, 2: _LIST, 3: _LIST}
_FEATURES: Schema = {1: {2: _FEATURE}}
EXAMPLE_SCHEMA: Schema = {1: _FEATURES}
SEQUENCE_EXAMPLE_SCHEMA: Schema = {1: _FEATURES, 2: {1: {2: {1: _FEATURE}}}}


def _walk(data: bytes, start: int, end: int) -> tuple[list[tuple[int, int, int, int]], str]:
    """The fields of one message level, and how the level ends: "ok", "cut" (a value runs past
    ``end``) or "malformed" (a bad varint or wire type)."""
    out = []
    position = start
    while position < end:
        read = _read_varint(data, position, end)
        if read is None:
            return out, "malformed"
        key, position = read
        field, wire = key >> 3, key & 7
        begin = position
        if wire in (0, 2):
            read = _read_varint(data, position, end)
            if read is None:
                return out, "malformed"
            position = read[1]
            if wire == 2:
                begin, position = position, position + read[0]
        elif wire in (1, 5):
            position += 8 if wire == 1 else 4
        elif wire not in (3, 4):
            return out, "malformed"
        if position > end:
            return out, "cut"
        out.append((field, wire, begin, position))
    return out, "ok"


def fields(data: bytes, start: int = 0, end: int | None = None) -> list[tuple[int, int, int, int]] | None:
    """The fields of one message level as ``(field, wire type, value start, value end)``.

    For varints the span is the varint; for groups (wire types 3 and 4) it is empty. None when
    the level is malformed (a bad varint, or a value that runs past ``end``).
    """
    out, status = _walk(data, start, len(data) if end is None else end)
    return out if status == "ok" else None


def cut_short(data: bytes, schema: Schema, start: int = 0, end: int | None = None) -> bool:
    """Whether a message is cut short: a field whose length (or fixed width) runs past the end of
    the message that holds it, at any depth of ``schema`` (field number -> submessage schema).

    Only well-formed tags are followed; anything else (groups, bad varints) is not this damage.
    """
    out, status = _walk(data, start, len(data) if end is None else end)
    if status == "cut":
        return True
    return any(
        wire == 2 and schema.get(field) is not None and cut_short(data, schema[field] or {}, begin, stop)
        for field, wire, begin, stop in out
    )
