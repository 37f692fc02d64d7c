"""A record too large to read whole, described from its wire format a window at a time: each
feature's kind, how many values it holds, its first values (a bytes value by its first bytes and
its size), and where one value lies, so that the page shows the record and fetches one image
of it without the record ever being in memory.

Reads go forward only, through ``read(offset, size)`` over the record's payload: a file read
by offsets and an inflating stream serve it alike. Memory is a window, plus what is kept:
:data:`KEEP` values of a list, :data:`PREFIX` bytes of a bytes value, :data:`KEPT_BYTES` in all.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from typing import Any

__all__ = ["KEEP", "PREFIX", "Described", "Prefix", "WireError", "describe_payload", "find_value"]

KEEP = 1024  # values of a list kept (the page shows 32; boxes need them all, within reason)
PREFIX = 256  # bytes kept of a bytes value
KEPT_BYTES = 4 << 20  # of all values kept; past it, values are counted, not kept
COUNTED_BYTES = 64 << 20  # of packed int64 values read to count them; past it, a lower bound
WINDOW = 64 << 10
_MAX_STEPS = 2_000_000  # wire fields walked; past it the description is partial
_MAX_DEPTH = 100  # nested groups, as protobuf
_KIND = {1: "bytes", 2: "float", 3: "int64"}
_LOW = bytes(range(128))
Read = Callable[[int, int], bytes]


class WireError(Exception):
    """The payload is not a serialized Example (or SequenceExample)."""


class Prefix(bytes):
    """The first bytes of a bytes value; ``size`` is the value's."""

    size: int


@dataclasses.dataclass
class Described:
    """What :func:`describe_payload` found.

    Attributes:
        features: ``{key: (kind, values kept)}`` as ``describe_record`` gives (bytes values may be
            :class:`Prefix`).
        counts: each feature's number of values.
        lists: ``{key: (kind, steps kept, number of steps)}`` of a SequenceExample's feature lists;
            None when the record sets none, or sets a field 2 that is not FeatureLists (then it
            reads as an Example, whose field 2 is unknown: skipped whole, as protobuf does).
        partial: a limit stopped the walk or the counting: counts may be lower bounds.
    """

    features: dict[str, tuple[str, list[Any]]] = dataclasses.field(default_factory=dict)
    counts: dict[str, int] = dataclasses.field(default_factory=dict)
    lists: dict[str, tuple[str, list[list[Any]], int]] | None = None
    partial: bool = False
    kept: int = 0


class _Cursor:
    """Forward reads of ``size`` bytes through ``read``, a window at a time."""

    def __init__(self, read: Read, size: int) -> None:
        self._read, self.size = read, size
        self.position, self._start, self._buffer = 0, 0, b""
        self.steps = 0

    def _fill(self, count: int) -> None:
        end = self._start + len(self._buffer)
        if self._start <= self.position and self.position + count <= end:
            return
        if self.position + count > self.size:
            raise WireError(f"a field runs past the end of the record (byte {self.position})")
        want = min(max(count, WINDOW), self.size - self.position)
        if self._start <= self.position < end:  # keep what is there: reads never go back
            more = self._read(end, want - (end - self.position))
            self._buffer = self._buffer[self.position - self._start :] + more
        else:
            self._buffer = self._read(self.position, want)
        self._start = self.position
        if len(self._buffer) < count:
            raise WireError(f"the record ends early (byte {self.position})")

    def varint(self) -> int:
        self._fill(min(10, self.size - self.position))
        at = self.position - self._start
        result = shift = 0
        for i in range(min(10, len(self._buffer) - at)):
            byte = self._buffer[at + i]
            result |= (byte & 0x7F) << shift
            if byte < 0x80:
                self.position += i + 1
                return result
            shift += 7
        raise WireError(f"a varint runs past 10 bytes or the record's end (byte {self.position})")

    def take(self, count: int) -> bytes:
        self._fill(count)
        at = self.position - self._start
        self.position += count
        return self._buffer[at : at + count]

    def skip(self, count: int) -> None:
        if self.position + count > self.size:
            raise WireError(f"a field runs past the end of the record (byte {self.position})")
        self.position += count

    def length(self, end: int) -> int:
        """A length-delimited field's length (in at most 5 bytes, as protobuf reads it), checked
        to end by ``end``."""
        before = self.position
        count = self.varint()
        if self.position - before > 5 or count >= 1 << 31:
            raise WireError(f"a length of {self.position - before} bytes (byte {before})")
        if self.position + count > end:
            raise WireError(f"a length of {count} runs past its message (byte {self.position})")
        return count

    def fields(self, end: int) -> Any:
        """``(field number, wire type)`` of each field up to ``end``; the caller reads or skips it."""
        while self.position < end:
            self.steps += 1
            if self.steps > _MAX_STEPS:
                raise _Stop
            before = self.position
            tag = self.varint()
            if tag >> 3 == 0 or tag >= 1 << 32 or self.position - before > 5:
                raise WireError(f"field number {tag >> 3} (byte {self.position})")
            yield tag >> 3, tag & 7
        if self.position != end:
            raise WireError(f"a message runs past its end (byte {self.position})")

    def skip_value(self, field: int, wire_type: int, end: int, depth: int = 0) -> None:
        """Steps over field ``field``'s value (a group up to its own end-group tag)."""
        if wire_type == 0:
            self.varint()
        elif wire_type == 1:
            self.skip(8)
        elif wire_type == 2:
            self.skip(self.length(end))
        elif wire_type == 5:
            self.skip(4)
        elif wire_type == 3 and depth < _MAX_DEPTH:
            while self.position < end:
                tag = self.varint()
                if tag & 7 == 4:
                    if tag >> 3 != field:
                        raise WireError(f"a group ends with another field's tag (byte {self.position})")
                    return
                self.skip_value(tag >> 3, tag & 7, end, depth + 1)
            raise WireError(f"a group runs past its message (byte {self.position})")
        else:
            raise WireError(f"wire type {wire_type} (byte {self.position})")


class _Stop(Exception):
    """The walk reached :data:`_MAX_STEPS`."""


def _int64(value: int) -> int:
    value &= (1 << 64) - 1  # (a 10-byte varint carries 70 bits: protobuf keeps the low 64)
    return value - (1 << 64) if value >= 1 << 63 else value


def _values(cursor: _Cursor, kind: str, end: int, found: Described, keep: int) -> tuple[list[Any], int]:
    """The values of a BytesList / FloatList / Int64List message ending at ``end``: those kept,
    and how many there are."""
    values: list[Any] = []
    count = 0
    for field, wire_type in cursor.fields(end):
        room = keep - len(values) if found.kept < KEPT_BYTES else 0
        if field != 1:
            cursor.skip_value(field, wire_type, end)
        elif kind == "bytes" and wire_type == 2:
            size = cursor.length(end)
            count += 1
            if room > 0:
                prefix = Prefix(cursor.take(min(size, PREFIX)))
                prefix.size = size
                values.append(prefix)
                found.kept += len(prefix)
                cursor.skip(size - len(prefix))
            else:
                cursor.skip(size)
        elif kind == "float" and wire_type == 2:
            size = cursor.length(end)
            if size % 4:
                raise WireError(f"packed floats of {size} bytes (byte {cursor.position})")
            shown = min(size // 4, max(room, 0))
            values.extend(struct.unpack(f"<{shown}f", cursor.take(4 * shown)))
            cursor.skip(size - 4 * shown)
            count += size // 4
        elif kind == "float" and wire_type == 5:
            value = struct.unpack("<f", cursor.take(4))[0]
            values.extend([value] if room > 0 else [])
            count += 1
        elif kind == "int64" and wire_type == 2:
            count += _packed_varints(cursor, cursor.length(end), values, max(room, 0), found)
        elif kind == "int64" and wire_type == 0:
            value = _int64(cursor.varint())
            values.extend([value] if room > 0 else [])
            count += 1
        else:  # a value of another wire type: an unknown field to protobuf, which keeps it aside
            cursor.skip_value(field, wire_type, end)
    found.kept += 8 * len(values) if kind != "bytes" else 0
    return values, count


def _packed_varints(cursor: _Cursor, size: int, values: list[Any], room: int, found: Described) -> int:
    """Reads ``room`` packed varints into ``values`` and counts all of them (each ends with a byte
    below 0x80), reading at most :data:`COUNTED_BYTES` (past it, a lower bound)."""
    end = cursor.position + size
    count = counted = 0
    while count < room and cursor.position < end:
        values.append(_int64(cursor.varint()))
        count += 1
    if cursor.position > end:
        raise WireError(f"a packed varint runs past its list (byte {cursor.position})")
    while cursor.position < end:
        if counted >= COUNTED_BYTES:
            found.partial = True
            cursor.skip(end - cursor.position)
            break
        chunk = cursor.take(min(WINDOW, end - cursor.position))
        count += len(chunk) - len(chunk.translate(None, _LOW))
        counted += len(chunk)
    return count


def _feature(
    cursor: _Cursor, end: int, found: Described, keep: int, before: tuple[str, list[Any], int] | None = None
) -> tuple[str, list[Any], int]:
    """A Feature message ending at ``end``: its kind, the values kept, how many there are; merged
    into ``before`` (the same Feature met earlier in its map entry), as protobuf merges them."""
    kind, values, count = before or ("empty", [], 0)  # (a list of its own: it is handed out)
    for field, wire_type in cursor.fields(end):
        if field in _KIND and wire_type == 2:
            inner = cursor.length(end)
            # A oneof: another list clears the one set; the same list again is merged with it.
            same = _KIND[field] == kind
            kind = _KIND[field]
            more, more_count = _values(
                cursor, kind, cursor.position + inner, found, keep - len(values) if same else keep
            )
            values, count = (values + more, count + more_count) if same else (more, more_count)
        else:
            cursor.skip_value(field, wire_type, end)
    return kind, values, count


def _map(
    cursor: _Cursor, end: int, value: Callable[[int, Any], Any], commit: Callable[[str, Any], None]
) -> None:
    """A map field's entries: each one's value read by ``value(end of the value, value so far)``
    (an entry may hold its value in pieces, which protobuf merges), then ``commit(key, value or
    None)``; an entry holding other fields is left out, as upb does."""
    for field, wire_type in cursor.fields(end):
        if field != 1 or wire_type != 2:
            cursor.skip_value(field, wire_type, end)
            continue
        entry_end = cursor.length(end) + cursor.position
        key, found, unknown = "", None, False
        for inner, inner_type in cursor.fields(entry_end):
            if inner == 1 and inner_type == 2:
                size = cursor.length(entry_end)
                if size > 4096:
                    raise WireError(f"a key of {size} bytes (byte {cursor.position})")
                try:
                    key = cursor.take(size).decode("utf-8")
                except UnicodeDecodeError:
                    raise WireError(f"a key that is not UTF-8 (byte {cursor.position})") from None
            elif inner == 2 and inner_type == 2:
                size = cursor.length(entry_end)
                found = value(cursor.position + size, found)
            else:
                unknown = True
                cursor.skip_value(inner, inner_type, entry_end)
        if not unknown:
            commit(key, found)


def describe_payload(read: Read, size: int, keep: int = KEEP) -> Described:
    """Walks a serialized Example or SequenceExample of ``size`` bytes, read through ``read``.

    Raises:
        WireError: it is not one.
    """
    cursor, found = _Cursor(read, size), Described()

    def feature(key: str, value: tuple[str, list[Any], int] | None) -> None:
        kind, values, count = value or ("empty", [], 0)
        found.features[key], found.counts[key] = (kind, values), count

    def feature_list(
        end: int, before: tuple[str, list[list[Any]], int] | None
    ) -> tuple[str, list[list[Any]], int]:
        kinds = before[0].split("/") if before and before[0] != "empty" else []
        steps = list(before[1]) if before else []
        count = before[2] if before else 0
        for field, wire_type in cursor.fields(end):
            if field == 1 and wire_type == 2:
                inner = cursor.length(end)
                kind, values, _ = _feature(cursor, cursor.position + inner, found, min(keep, 32))
                count += 1
                if kind != "empty" and kind not in kinds:
                    kinds.append(kind)
                if len(steps) < 32:
                    steps.append(values)
            else:
                cursor.skip_value(field, wire_type, end)
        return "/".join(kinds) or "empty", steps, count

    def steps(key: str, value: tuple[str, list[list[Any]], int] | None) -> None:
        lists[key] = value or ("empty", [], 0)

    lists: dict[str, tuple[str, list[list[Any]], int]] = {}
    sequence = None  # whether field 2 reads as FeatureLists (None: the record has none)

    try:
        for field, wire_type in cursor.fields(size):
            if field == 1 and wire_type == 2:
                inner = cursor.length(size)
                _map(
                    cursor,
                    cursor.position + inner,
                    lambda end, before: _feature(cursor, end, found, keep, before),
                    feature,
                )
            elif field == 2 and wire_type == 2:
                inner = cursor.length(size)
                end = cursor.position + inner
                try:
                    _map(cursor, end, feature_list, steps)
                    sequence = sequence is not False
                except WireError:  # not FeatureLists: an Example's unknown field, skipped whole
                    sequence = False
                    cursor.skip(end - cursor.position)
            else:
                cursor.skip_value(field, wire_type, size)
    except _Stop:
        found.partial = True
    found.features = dict(sorted(found.features.items()))
    found.lists = dict(sorted(lists.items())) if sequence else None
    return found


def find_value(read: Read, size: int, key: str, item: int) -> tuple[int, int] | None:
    """Where value ``item`` of the bytes feature ``key`` lies in the payload: ``(offset, size)``,
    or None when there is no such value (the last entry of a key counts, as in protobuf).

    Raises:
        WireError: the payload is not an Example.
    """
    cursor = _Cursor(read, size)
    where: list[tuple[int, int] | None] = [None]

    Located = tuple[tuple[int, int] | None, int, bool]

    def locate(end: int, before: Located | None) -> Located:
        """Where value ``item`` of a Feature's BytesList lies (None: it holds none), how many values
        that list holds so far, and whether it is the oneof's list now: a Feature met in pieces
        in its map entry is merged, as protobuf merges it."""
        at, index, listed = before or (None, 0, False)
        for field, wire_type in cursor.fields(end):
            if field == 1 and wire_type == 2:  # a BytesList: merged with the one set before, if any
                inner = cursor.length(end)
                inner += cursor.position
                if not listed:
                    at, index, listed = None, 0, True
                for value_field, value_type in cursor.fields(inner):
                    if value_field == 1 and value_type == 2:
                        length = cursor.length(inner)
                        at = (cursor.position, length) if index == item else at
                        index += 1
                        cursor.skip(length)
                    else:
                        cursor.skip_value(value_field, value_type, inner)
            else:
                if field in _KIND and wire_type == 2:  # another list set: the oneof clears the BytesList
                    at, index, listed = None, 0, False
                cursor.skip_value(field, wire_type, end)
        return at, index, listed

    def commit(name: str, value: Located | None) -> None:
        if name == key:
            where[0] = value[0] if value else None

    try:
        for field, wire_type in cursor.fields(size):
            if field == 1 and wire_type == 2:
                inner = cursor.length(size)
                _map(cursor, cursor.position + inner, locate, commit)
            else:
                cursor.skip_value(field, wire_type, size)
    except _Stop:
        pass
    return where[0]
