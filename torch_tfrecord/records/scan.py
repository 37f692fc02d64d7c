"""Sequential iteration over framed records: a stream read in large chunks, parsed in place.

:func:`scan` yields each record's payload as its own ``bytes`` (never a view of a buffer that
is reused), checking lengths against what the stream holds and, when asked, both CRCs. Damage
is raised with the file, the byte offset and the record number (:class:`Span` says how records
are numbered). Every reader of the package (whole files, index entries, byte ranges) uses it.
"""

from __future__ import annotations

import dataclasses
import struct
import zlib
from collections.abc import Callable, Iterator
from typing import BinaryIO

from ..errors import CorruptRecordError, TFRecordError, TruncatedRecordError
from ..support import extension as _extension
from .framing import FRAME_OVERHEAD, HEADER_SIZE, MASK_DELTA, crc32c
from .resync import ChainCount, DamagedRegion, header_candidates, is_record_at

__all__ = [
    "CHUNK",
    "FOOTER",
    "HEADER",
    "Span",
    "bad_length",
    "check_length_crc",
    "length_crc_error",
    "masked",
    "read_stream",
    "scan",
]

CHUNK = 1 << 20
# Growth step while reading a record longer than a chunk from a stream of unknown size: memory
# only grows as bytes actually arrive, so a damaged length field cannot make us allocate 2**63.
_MAX_STEP = 64 << 20
_U32 = 0xFFFFFFFF
HEADER = struct.Struct("<QI")
FOOTER = struct.Struct("<I")


@dataclasses.dataclass(frozen=True)
class Span:
    """Where a scan runs: ``[start, end)`` of the record stream, and how records are numbered."""

    path: str
    start: int
    end: int | None  # stop before a record that begins at or after this offset
    limit: int | None  # no byte of any record may lie at or past this offset
    first_record: int | None  # number of the record at ``start``; None when unknown

    def where(self, offset: int, ordinal: int) -> str:
        if self.first_record is not None:
            return f"{self.path!r} at byte {offset} (record {self.first_record + ordinal})"
        return f"{self.path!r} at byte {offset} (record {ordinal} after byte {self.start})"

    def record_number(self, ordinal: int) -> int:
        return -1 if self.first_record is None else self.first_record + ordinal


def masked(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + MASK_DELTA) & _U32


def length_crc_error(
    span: Span, buffer: bytes, position: int, offset: int, ordinal: int
) -> CorruptRecordError | None:
    """The error for the header at ``position`` if its length CRC does not match, else None."""
    length, stored = HEADER.unpack_from(buffer, position)
    computed = masked(crc32c(buffer[position : position + 8]))
    if computed == stored:
        return None
    return CorruptRecordError(
        f"length CRC mismatch in {span.where(offset, ordinal)}: stored 0x{stored:08x}, "
        f"computed 0x{computed:08x} (length field reads {length})",
        path=span.path,
        offset=offset,
        record=span.record_number(ordinal),
    )


def check_length_crc(span: Span, buffer: bytes, position: int, offset: int, ordinal: int) -> None:
    """Raises :func:`length_crc_error`'s error, if there is one."""
    error = length_crc_error(span, buffer, position, offset, ordinal)
    if error is not None:
        raise error


def bad_length(span: Span, buffer: bytes, position: int, offset: int, ordinal: int) -> TFRecordError:
    """The error for a record whose length runs past the end of the file or span."""
    error = length_crc_error(span, buffer, position, offset, ordinal)
    if error is not None:
        return error
    length = HEADER.unpack_from(buffer, position)[0]
    return TruncatedRecordError(
        f"file ends inside a record in {span.where(offset, ordinal)}: the header announces "
        f"{length} payload bytes ({length + FRAME_OVERHEAD} framed) but the file ends at byte "
        f"{span.limit}",
        path=span.path,
        offset=offset,
        record=span.record_number(ordinal),
    )


def scan(
    stream: BinaryIO,
    span: Span,
    verify_crc: bool,
    on_damage: Callable[[DamagedRegion], None] | None = None,
) -> Iterator[bytes]:
    """Yields the payloads of consecutive records read from ``stream``, positioned at ``span.start``.

    With the compiled extension, the whole, intact records of each buffer are framed and checked
    in one native call; the record it stops at (one that spans the buffer's end, or is damaged)
    takes the Python path below, which reads it or raises the error that says where.

    With ``on_damage``, damage is not raised: the read searches forward for the next intact
    record (:mod:`torch_tfrecord.records.resync`), resumes there, and hands ``on_damage`` the region
    it stepped over, before yielding the next record.
    """
    extension = _extension.for_reading()
    frame = None if extension is None else extension.frame
    unpack_header = HEADER.unpack_from
    unpack_footer = FOOTER.unpack_from
    end = span.end
    limit = span.limit
    buffer = b""
    base = span.start  # stream offset of buffer[0]
    position = 0
    ordinal = 0
    eof = False
    while True:
        if frame is not None and len(buffer) - position >= FRAME_OVERHEAD:
            payloads, position = frame(
                buffer, position, len(buffer) if end is None else end - base, verify_crc
            )
            if payloads:
                ordinal += len(payloads)
                yield from payloads
        available = len(buffer) - position
        error: TFRecordError | None = None
        if available < HEADER_SIZE:
            if end is not None and base + position >= end:
                return
            if not eof:
                buffer, base, position, eof = _refill(
                    stream, span, buffer, base, position, HEADER_SIZE, ordinal
                )
                continue
            if available == 0:
                return
            offset = base + position
            error = TruncatedRecordError(
                f"file ends inside a record header in {span.where(offset, ordinal)}: "
                f"{available} of {HEADER_SIZE} header bytes present",
                path=span.path,
                offset=offset,
                record=span.record_number(ordinal),
            )
        else:
            offset = base + position
            if end is not None and offset >= end:
                return
            length, length_crc = unpack_header(buffer, position)
            frame_end = position + length + FRAME_OVERHEAD
            if frame_end > len(buffer):
                if limit is not None and offset + length + FRAME_OVERHEAD > limit:
                    error = bad_length(span, buffer, position, offset, ordinal)
                elif verify_crc or on_damage is not None:
                    error = length_crc_error(span, buffer, position, offset, ordinal)
                if error is None:
                    needed = length + FRAME_OVERHEAD
                    while len(buffer) - position < needed and not eof:
                        buffer, base, position, eof = _refill(
                            stream, span, buffer, base, position, needed, ordinal
                        )
                    if len(buffer) - position < needed:
                        limit = base + len(buffer)
                        span = dataclasses.replace(span, limit=limit)
                        error = bad_length(span, buffer, position, offset, ordinal)
                    frame_end = position + needed
            elif verify_crc and masked(crc32c(buffer[position : position + 8])) != length_crc:
                error = length_crc_error(span, buffer, position, offset, ordinal)
            if error is None:
                payload = buffer[position + HEADER_SIZE : frame_end - 4]
                if verify_crc:
                    (stored,) = unpack_footer(buffer, frame_end - 4)
                    computed = masked(crc32c(payload))
                    if computed != stored:
                        error = CorruptRecordError(
                            f"data CRC mismatch in {span.where(offset, ordinal)}: stored 0x{stored:08x}, "
                            f"computed 0x{computed:08x}",
                            path=span.path,
                            offset=offset,
                            record=span.record_number(ordinal),
                        )
                if error is None:
                    yield payload
                    position = frame_end
                    ordinal += 1
                    continue
        if on_damage is None:
            raise error
        buffer, base, position, eof, region = _resync(
            stream, span, buffer, base, position, eof, ordinal, error
        )
        if region.records is None:
            # Records after a loss of unknown size are numbered from where the read resumed.
            span = dataclasses.replace(span, start=region.end, first_record=None)
            ordinal = 0
        else:
            ordinal += region.records
        on_damage(region)


def _resync(
    stream: BinaryIO,
    span: Span,
    buffer: bytes,
    base: int,
    position: int,
    eof: bool,
    ordinal: int,
    error: TFRecordError,
) -> tuple[bytes, int, int, bool, DamagedRegion]:
    """Searches from the damaged record at ``position`` for the next intact one.

    Returns the buffer state to resume from (``position`` at the intact record, or at the end of
    the stream or span when none follows) and the damaged region stepped over.
    """
    start = base + position
    chain = ChainCount(start)
    search = position + 1  # buffer index of the next candidate position
    found: int | None = None
    while True:
        # Candidates need a whole header in the buffer, and must begin inside the span.
        stop = len(buffer) - HEADER_SIZE + 1
        if span.end is not None:
            stop = min(stop, span.end - base)
        needed = HEADER_SIZE
        for candidate in header_candidates(buffer, search, stop, base, span.limit).tolist():
            framed = HEADER.unpack_from(buffer, candidate)[0] + FRAME_OVERHEAD
            if candidate + framed > len(buffer):
                if eof:
                    continue  # the stream ends inside it: not a record
                search, needed = candidate, framed
                break
            if is_record_at(buffer, candidate):
                found = candidate
                break
        else:
            search = max(search, stop)
        searched = needed == HEADER_SIZE and (eof or (span.end is not None and base + search >= span.end))
        if found is not None or searched:
            resume = base + (found if found is not None else max(search, len(buffer)))
            if found is None and span.end is not None:
                resume = min(resume, max(span.end, start))
            chain.advance(buffer, base, resume)
            records = chain.records_to(resume) if found is not None else None
            region = DamagedRegion(
                span.path,
                start,
                resume,
                records,
                span.first_record + ordinal if span.first_record is not None else None,
                str(error),
            )
            return buffer, base, resume - base, eof or found is None, region
        chain.advance(buffer, base, base + search)
        base += search
        kept = buffer[search:]
        want = max(CHUNK, min(needed, _MAX_STEP) - len(kept))
        if span.limit is not None:
            want = min(want, span.limit - base - len(kept))
        chunk = read_stream(stream, span, base + len(kept), want, ordinal) if want > 0 else b""
        buffer, search, eof = kept + chunk, 0, not chunk


def _refill(
    stream: BinaryIO,
    span: Span,
    buffer: bytes,
    base: int,
    position: int,
    needed: int,
    ordinal: int,
) -> tuple[bytes, int, int, bool]:
    """Drops consumed bytes and reads more: returns (buffer, base, position=0, eof).

    With nothing kept, reads a chunk, but not past the span's end (a run of index entries is
    read in one request and no more), and at least what the current record needs. With part of
    a record kept, reads only the rest of it: joining a whole chunk to it would copy the chunk,
    and the next refill, with nothing kept, takes its chunk as it comes.
    """
    base += position
    kept = buffer[position:]
    stream_offset = base + len(kept)
    if kept:
        want = min(needed - len(kept), _MAX_STEP)
    else:
        read_end = span.end if span.end is not None else span.limit
        ahead = CHUNK if read_end is None else min(CHUNK, read_end - stream_offset)
        want = max(ahead, min(needed, _MAX_STEP))
    if span.limit is not None:
        want = min(want, span.limit - stream_offset)
    chunk = read_stream(stream, span, stream_offset, want, ordinal) if want > 0 else b""
    return kept + chunk, base, 0, not chunk


def read_stream(stream: BinaryIO, span: Span, offset: int, size: int, ordinal: int) -> bytes:
    """One read from the stream; decompression failures become errors that say where."""
    try:
        return stream.read(size)
    except EOFError as exc:
        raise TruncatedRecordError(
            f"compressed stream ends early in {span.where(offset, ordinal)} (uncompressed offset): {exc}",
            path=span.path,
            offset=offset,
            record=span.record_number(ordinal),
        ) from exc
    except zlib.error as exc:
        raise CorruptRecordError(
            f"compressed stream is damaged in {span.where(offset, ordinal)} (uncompressed offset): {exc}",
            path=span.path,
            offset=offset,
            record=span.record_number(ordinal),
        ) from exc
