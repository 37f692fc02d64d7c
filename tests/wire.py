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


def cut_short(data: bytes, schema: Schema, start: int = 0, end: int | None = None) -> bool:
    """Whether a message is cut short: a field whose length (or fixed width) runs past the end of
    the message that holds it, at any depth of ``schema`` (field number -> submessage schema).

    Only well-formed tags are followed; anything else (groups, bad varints) is not this damage.
    """
    end = len(data) if end is None else end
    position = start
    while position < end:
        read = _read_varint(data, position, end)
        if read is None:
            return False
        key, position = read
        field, wire = key >> 3, key & 7
        if wire == 0:
            read = _read_varint(data, position, end)
            if read is None:
                return False
            position = read[1]
        elif wire in (1, 5):
            position += 8 if wire == 1 else 4
            if position > end:
                return True
        elif wire == 2:
            read = _read_varint(data, position, end)
            if read is None:
                return False
            length, position = read
            if position + length > end:
                return True
            inner = schema.get(field)
            if inner is not None and cut_short(data, inner, position, position + length):
                return True
            position += length
        else:
            return False
    return False


def fields(data: bytes, start: int = 0, end: int | None = None) -> list[tuple[int, int, int, int]] | None:
    """The fields of one message level as ``(field, wire type, value start, value end)``.

    For varints the span is the varint; for groups (wire types 3 and 4) it is empty. None when
    the level is malformed (a bad varint, or a value that runs past ``end``).
    """
    end = len(data) if end is None else end
    out = []
    position = start
    while position < end:
        read = _read_varint(data, position, end)
        if read is None:
            return None
        key, position = read
        field, wire = key >> 3, key & 7
        begin = position
        if wire == 0:
            read = _read_varint(data, position, end)
            if read is None:
                return None
            position = read[1]
        elif wire in (1, 5):
            position += 8 if wire == 1 else 4
        elif wire == 2:
            read = _read_varint(data, position, end)
            if read is None:
                return None
            length, begin = read
            position = begin + length
        elif wire not in (3, 4):
            return None
        if position > end:
            return None
        out.append((field, wire, begin, position))
    return out
