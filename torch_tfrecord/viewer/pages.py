"""What one page of records may cost the viewer, and reading it within that.

A page reads whole records up to :data:`PAGE_BYTES` in all (the index's sizes say what each
costs before it is read); a record over :data:`LARGE_RECORD` is never read whole: it is described
from its wire format a window at a time (:mod:`.wire`). Without an index (a compressed file, or
one not indexed yet) the records are read from the start of the stream the same way: the ones
before the page are stepped over, and a large one is walked, never held, however far it inflates.
"""

from __future__ import annotations

import dataclasses
import math
import os
import struct
from collections.abc import Callable, Iterator, Sequence
from typing import Any, BinaryIO

from ..errors import CorruptRecordError, TFRecordError, TruncatedRecordError
from ..records.framing import HEADER_SIZE, crc32c, mask_crc
from ..records.io import StorageOptions, open_records_stream
from .wire import Described, WireError, describe_payload

__all__ = [
    "LARGE_RECORD",
    "PAGE_BYTES",
    "WALK_COST",
    "RecordRead",
    "StreamRecord",
    "describe_at",
    "intact_payloads",
    "page_length",
    "range_reader",
    "read_sequential",
    "stream_records",
]

PAGE_BYTES = 16 << 20
"""Bytes of whole records one page reads at most (at least one record, unless it is large)."""
LARGE_RECORD = 1 << 20
"""Records with a larger framed size are described from their wire format, not read whole."""
WALK_COST = 1 << 20
"""What a large record counts against a page's budget (what its description reads, about)."""
_CHUNK = 1 << 20
_HEADER = struct.Struct("<QI")
_U32 = struct.Struct("<I")


@dataclasses.dataclass(frozen=True)
class RecordRead:
    """One record as read: its number, where it is (None when unknown), and its payload or the
    error that says why it could not be read. A large record has no payload: ``described`` is
    what its wire format says (None when it is not an Example)."""

    number: int
    offset: int | None
    framed_size: int | None
    payload: bytes | None
    error: str | None = None
    large: bool = False
    described: Described | None = None


def page_length(
    framed_sizes: Sequence[int] | Any, budget: int = PAGE_BYTES, large: int = LARGE_RECORD
) -> int:
    """How many of the records of ``framed_sizes`` (a page's, in order) one page reads: as many
    as fit in ``budget`` (a large record counts :data:`WALK_COST`), and one at least."""
    spent = 0
    for count, size in enumerate(framed_sizes):
        spent += WALK_COST if int(size) > large else int(size)
        if spent > budget and count:
            return count
    return len(framed_sizes)


def range_reader(source: int | Any, start: int) -> Callable[[int, int], bytes]:
    """``read(offset, size)`` of the bytes from ``start`` of an open file (a descriptor, or a
    remote file's ``read_ranges``)."""
    if isinstance(source, int):
        return lambda offset, size: os.pread(source, size, start + offset)
    return lambda offset, size: bytes(source.read_ranges([start + offset], [size])[0])


def describe_at(read: Callable[[int, int], bytes], length: int) -> Described | None:
    """The description of a large record's payload (None: not an Example)."""
    try:
        return describe_payload(read, length)
    except WireError:
        return None


def _exactly(stream: BinaryIO, count: int) -> bytes:
    chunks, left = [], count
    while left:
        chunk = stream.read(min(left, _CHUNK))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


class _Payload:
    """A record's payload read forward from the stream, its CRC computed as it passes."""

    def __init__(self, stream: BinaryIO, length: int) -> None:
        self.stream, self.length, self.position, self.crc = stream, length, 0, 0

    def read(self, offset: int, size: int) -> bytes:
        self.skip(offset - self.position)
        data = _exactly(self.stream, size)
        self.crc, self.position = crc32c(data, self.crc), self.position + len(data)
        return data

    def skip(self, count: int) -> None:
        while count > 0:
            data = self.stream.read(min(count, _CHUNK))
            if not data:
                return
            self.crc, self.position, count = (
                crc32c(data, self.crc),
                self.position + len(data),
                count - len(data),
            )


@dataclasses.dataclass(frozen=True)
class StreamRecord:
    """A record met reading a stream: its payload (None when large: walked, never held), or the
    damage its data CRC shows (its framing is intact, so the stream goes on)."""

    number: int
    position: int
    length: int
    payload: bytes | None
    described: Described | None
    damage: str | None


def stream_records(
    stream: BinaryIO,
    path: str,
    compressed: bool,
    file_size: int | None,
    *,
    large: int = LARGE_RECORD,
    describe_from: float = math.inf,
) -> Iterator[StreamRecord]:
    """Every record of a record stream, each CRC checked, none over ``large`` bytes held (those
    from number ``describe_from`` on are described as they pass).

    Raises:
        CorruptRecordError, TruncatedRecordError: damaged framing (a length that does not check
            out, a file that ends inside a record): the stream cannot go on.
    """
    number = position = 0
    while True:
        where = _Where(path, position, number, compressed)
        header = _exactly(stream, HEADER_SIZE)
        if not header:
            return
        length = _header(header, where, file_size)
        payload, described = None, None
        if length + 16 <= large:
            data = _exactly(stream, length + 4)
            payload = data[:length]
            damage = _damage(payload, data[length:], length, where)
        else:
            walked = _Payload(stream, length)
            described = describe_at(walked.read, length) if number >= describe_from else None
            walked.skip(length - walked.position)
            damage = _damage(None, _exactly(stream, 4), length, where, walked)
        yield StreamRecord(number, position, length, payload, described, damage)
        number, position = number + 1, position + length + 16


def read_sequential(
    path: str,
    compression: str | None,
    storage_options: StorageOptions,
    first: int,
    count: int,
    *,
    file_size: int | None = None,
    budget: int = PAGE_BYTES,
) -> list[RecordRead]:
    """Records ``first`` to ``first + count`` (fewer at the end or past ``budget``), read from the
    start of the (inflated) stream; damaged framing ends the read with a record that says so."""
    out: list[RecordRead] = []
    spent = 0
    with open_records_stream(path, compression, storage_options) as stream:  # type: ignore[arg-type]
        records = stream_records(stream, path, compression is not None, file_size, describe_from=first)
        try:
            for record in records:
                if record.number < first:
                    continue
                cost = WALK_COST if record.payload is None else record.length + 16
                if out and spent + cost > budget:
                    break
                spent += cost
                offset = record.position if compression is None else None
                large = record.payload is None and record.damage is None
                payload = None if record.damage else record.payload
                read = RecordRead(record.number, offset, record.length + 16, payload, record.damage, large)
                out.append(dataclasses.replace(read, described=record.described))
                if len(out) == count:
                    break
        except CorruptRecordError as error:
            if error.record >= first:
                offset = None if compression else error.offset
                out.append(RecordRead(error.record, offset, None, None, _text(error)))
    return out


def intact_payloads(
    path: str,
    compression: str | None,
    storage_options: StorageOptions,
    file_size: int | None,
    on_damage: Callable[[str], None],
) -> Iterator[bytes]:
    """The payload of every intact record not over :data:`LARGE_RECORD` bytes, from the start;
    each damaged one handed to ``on_damage``. Damaged framing ends it (also handed over)."""
    with open_records_stream(path, compression, storage_options) as stream:  # type: ignore[arg-type]
        try:
            for record in stream_records(stream, path, compression is not None, file_size):
                if record.damage is not None:
                    on_damage(record.damage)
                elif record.payload is not None:
                    yield record.payload
        except CorruptRecordError as error:
            on_damage(_text(error))


@dataclasses.dataclass(frozen=True)
class _Where:
    path: str
    offset: int
    record: int
    compressed: bool

    def error(self, kind: type[CorruptRecordError], what: str, detail: str) -> CorruptRecordError:
        stream = " (uncompressed)" if self.compressed else ""
        message = f"{what} in {self.path!r} at byte {self.offset}{stream} (record {self.record}){detail}"
        return kind(message, path=self.path, offset=self.offset, record=self.record)


def _header(header: bytes, where: _Where, file_size: int | None) -> int:
    if len(header) < HEADER_SIZE:
        detail = f": {len(header)} of {HEADER_SIZE} header bytes present"
        raise where.error(TruncatedRecordError, "file ends inside a record header", detail)
    length, stored = _HEADER.unpack(header)
    computed = mask_crc(crc32c(header[:8]))
    if computed != stored:
        detail = f": stored 0x{stored:08x}, computed 0x{computed:08x} (length field reads {length})"
        raise where.error(CorruptRecordError, "length CRC mismatch", detail)
    if file_size is not None and where.offset + length + 16 > file_size:
        detail = f": the header announces {length} payload bytes but the file ends at byte {file_size}"
        raise where.error(TruncatedRecordError, "file ends inside a record", detail)
    return length  # type: ignore[no-any-return]


def _damage(
    payload: bytes | None, footer: bytes, length: int, where: _Where, walked: _Payload | None = None
) -> str | None:
    """What the payload's CRC (or the walked one's running CRC) says against the footer's, if
    they differ.

    Raises:
        TruncatedRecordError: the stream ends inside the record.
    """
    short = payload is not None and len(payload) < length
    if short or len(footer) < 4 or (walked is not None and walked.position < length):
        detail = f": the header announces {length} payload bytes"
        raise where.error(TruncatedRecordError, "file ends inside a record", detail)
    computed = mask_crc(walked.crc if walked is not None else crc32c(payload or b""))
    stored = _U32.unpack(footer)[0]
    if computed == stored:
        return None
    detail = f": stored 0x{stored:08x}, computed 0x{computed:08x}"
    return _text(where.error(CorruptRecordError, "data CRC mismatch", detail))


def _text(error: TFRecordError) -> str:
    return f"{type(error).__name__}: {error}"
