"""Finding the next intact record after damage: the resynchronisation of a sequential read.

A record header is a u64 length followed by the masked CRC32C of those 8 bytes: a 32-bit check
that random bytes pass once in 2**32 positions. A position is taken as the start of a record
only when its length CRC matches, the length fits in what the file holds, *and* the payload's
own CRC matches: 64 bits of checks, so bytes that are not a record written there pass them
about once in 2**64 positions. (A payload that itself holds a framed TFRecord, such as a file
stored in a bytes feature, does hold positions that pass: a read resynchronising inside such a
damaged record returns the records it holds.)

The search runs over a buffer at a time with numpy: lengths that fit first, then the length
CRC of those candidates, vectorised; only the few left get their payload CRC checked.
"""

from __future__ import annotations

import dataclasses
import functools
import struct
from typing import TYPE_CHECKING

from .framing import FRAME_OVERHEAD, HEADER_SIZE, MASK_DELTA, masked_crc32c

if TYPE_CHECKING:  # numpy is imported by the search itself: reading intact records needs none
    import numpy as np
    import numpy.typing as npt

__all__ = ["ChainCount", "DamagedRegion", "header_candidates", "is_record_at"]

_HEADER = struct.Struct("<QI")
_FOOTER = struct.Struct("<I")
_U32 = 0xFFFFFFFF


@dataclasses.dataclass(frozen=True)
class DamagedRegion:
    """Bytes of a file that hold no intact record: what ``on_error="skip"`` stepped over.

    Attributes:
        path: the file.
        start: byte offset where the damage was found (in the uncompressed stream): the
            header of the first record that does not check out.
        end: byte offset of the next intact record, or where the read ended (the end of the
            file, or of the byte range read) when none follows.
        records: records lost in the region, when the headers inside it say so (a record
            whose payload is damaged but whose header is intact: 1); None when it cannot be
            known (a damaged header, garbage, a cut).
        first_record: number of the first record lost (counting from 0 in the file), when
            known; None after an earlier region of unknown record count.
        error: the message of the error that revealed the damage.
    """

    path: str
    start: int
    end: int
    records: int | None
    first_record: int | None
    error: str

    @property
    def size(self) -> int:
        """Bytes lost: ``end - start``."""
        return self.end - self.start

    def __str__(self) -> str:
        lost = "an unknown number of records" if self.records is None else _plural(self.records, "record")
        first = "" if self.first_record is None or not self.records else f" from record {self.first_record}"
        return (
            f"{self.path!r} bytes {self.start}..{self.end} ({_plural(self.size, 'byte')}) are damaged: "
            f"{lost} lost{first} ({self.error})"
        )


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


@functools.cache
def _crc32c_table() -> npt.NDArray[np.uint32]:
    """The byte-at-a-time CRC32C (Castagnoli, reflected 0x82F63B78) table."""
    import numpy as np

    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> 1) ^ np.uint32(0x82F63B78), table >> 1).astype(np.uint32)
    return table


def _masked_crc_of_8(data: npt.NDArray[np.uint8], positions: npt.NDArray[np.int64]) -> npt.NDArray[np.uint32]:
    """The masked CRC32C of the 8 bytes at each of ``positions`` in ``data``, vectorised."""
    import numpy as np

    table = _crc32c_table()
    crc = np.full(len(positions), _U32, dtype=np.uint32)
    for k in range(8):
        crc = table[(crc ^ data[positions + k]) & 0xFF] ^ (crc >> np.uint32(8))
    crc ^= np.uint32(_U32)
    return ((crc >> np.uint32(15)) | (crc << np.uint32(17))) + np.uint32(MASK_DELTA)


def _u64_at_every_offset(data: npt.NDArray[np.uint8], count: int) -> npt.NDArray[np.uint64]:
    """The little-endian u64 starting at each of the first ``count`` offsets of ``data``."""
    import numpy as np

    values = np.empty(count, dtype=np.uint64)
    raw = data.tobytes() if not data.flags.c_contiguous else data
    for k in range(min(8, count)):
        n = (count - k + 7) // 8
        values[k::8] = np.frombuffer(raw, dtype="<u8", count=n, offset=k)
    return values


def header_candidates(buffer: bytes, lo: int, hi: int, base: int, limit: int | None) -> npt.NDArray[np.int64]:
    """Positions ``p`` in ``[lo, hi)`` of ``buffer`` that hold a header whose length CRC matches.

    ``buffer`` must hold 12 bytes from every such position. With ``limit`` (the absolute offset
    where the file ends; ``base`` is the absolute offset of ``buffer[0]``), the framed record
    must also end by then.
    """
    import numpy as np

    if hi <= lo:
        return np.zeros(0, dtype=np.int64)
    data = np.frombuffer(buffer, dtype=np.uint8, count=hi - lo + HEADER_SIZE - 1, offset=lo)
    lengths = _u64_at_every_offset(data, hi - lo)
    if limit is None:
        fits = lengths < np.uint64(1 << 62)
    else:
        room = limit - (base + lo) - FRAME_OVERHEAD - np.arange(hi - lo, dtype=np.int64)
        fits = (room >= 0) & (lengths <= np.maximum(room, 0).astype(np.uint64))
    candidates = np.flatnonzero(fits)
    if len(candidates) == 0:
        return candidates.astype(np.int64)
    stored = data[candidates + 8].astype(np.uint32)
    for k in range(1, 4):
        stored |= data[candidates + 8 + k].astype(np.uint32) << np.uint32(8 * k)
    match = _masked_crc_of_8(data, candidates) == stored
    found: npt.NDArray[np.int64] = (candidates[match] + lo).astype(np.int64)
    return found


def is_record_at(buffer: bytes, position: int) -> bool:
    """Whether the header at ``position`` (length CRC already matched) frames a payload whose CRC matches.

    ``buffer`` must hold the whole framed record.
    """
    length = _HEADER.unpack_from(buffer, position)[0]
    start = position + HEADER_SIZE
    (stored,) = _FOOTER.unpack_from(buffer, start + length)
    return bool(masked_crc32c(memoryview(buffer)[start : start + length]) == stored)


class ChainCount:
    """Follows the headers of a damaged region from its start, to count the records it held.

    From the first damaged record, each header whose length CRC matches says where the next
    one starts. When this chain lands exactly on the record where the read resumes, its steps
    are the records lost; when a header in it does not check out, the count is unknown.
    """

    def __init__(self, start: int) -> None:
        self.at: int | None = start
        self.steps = 0

    def advance(self, buffer: bytes, base: int, upto: int) -> None:
        """Follows headers that start before ``upto`` and lie whole in ``buffer``."""
        while self.at is not None and self.at < upto and self.at + HEADER_SIZE <= base + len(buffer):
            position = self.at - base
            length, stored = _HEADER.unpack_from(buffer, position)
            if masked_crc32c(buffer[position : position + 8]) != stored:
                self.at = None
                return
            self.at += length + FRAME_OVERHEAD
            self.steps += 1

    def records_to(self, resume: int) -> int | None:
        """Records lost between the region's start and ``resume``, if the chain lands there."""
        return self.steps if self.at == resume else None
