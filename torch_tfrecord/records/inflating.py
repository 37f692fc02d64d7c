"""Inflating a GZIP or ZLIB file with Python's zlib: its uncompressed stream read in order, and
checkpoints of the inflater's state to go back to (or on from) without starting at byte 0.

A checkpoint is a copy of the inflater (its 32 KiB window and state, about 40 KiB) with the
compressed byte it had read up to: it lives in memory only (zlib cannot start at a bit offset,
so it cannot be stored in an index file), and costs nothing to take at the end of a read.
"""

from __future__ import annotations

import dataclasses
import io
import zlib
from typing import Any, BinaryIO

__all__ = ["WBITS", "Checkpoint", "InflatingReader"]

WBITS: dict[str, int] = {"gzip": 16 + zlib.MAX_WBITS, "zlib": zlib.MAX_WBITS}
"""zlib's ``wbits`` for each compression: the header and trailer it expects."""
_READ_CHUNK = 1 << 20


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """Where an :class:`InflatingReader` was: ``position`` bytes of uncompressed stream out,
    the compressed file read up to ``compressed_at``, and a copy of the inflater then."""

    position: int
    compressed_at: int
    inflater: Any


class InflatingReader(io.RawIOBase):
    """A readable stream of the decompressed bytes of a GZIP or ZLIB file.

    Output per call is bounded by the caller's buffer, so a compression bomb never makes us
    hold more than one chunk. Concatenated GZIP members are read as one stream, as TensorFlow
    and gzip(1) do. A stream that ends before its end marker raises EOFError; damaged data
    raises zlib.error. The caller turns both into errors that name the file and offset.

    :meth:`checkpoint` and :meth:`restore` need a seekable ``raw`` file.
    """

    def __init__(self, raw: BinaryIO, compression: str) -> None:
        super().__init__()
        self._raw = raw
        self._wbits = WBITS[compression]
        self._decompressor = zlib.decompressobj(self._wbits)
        self._pending = b""
        self.position = 0
        """Uncompressed bytes read so far."""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        view = memoryview(buffer).cast("B")
        while len(view):
            if self._decompressor.eof:
                rest = self._next_member_input()
                if not rest:
                    return 0
                if self._wbits == WBITS["zlib"]:
                    raise zlib.error("unexpected data after the end of the ZLIB stream")
                self._decompressor = zlib.decompressobj(self._wbits)
                self._pending = rest
            if not self._pending:
                self._pending = self._raw.read(_READ_CHUNK)
                if not self._pending:
                    raise EOFError("compressed stream ended before its end marker")
            out = self._decompressor.decompress(self._pending, len(view))
            self._pending = self._decompressor.unconsumed_tail
            if out:
                view[: len(out)] = out
                self.position += len(out)
                return len(out)
        return 0

    def _next_member_input(self) -> bytes:
        """Input after a finished member, without the NUL padding some writers append."""
        rest = self._decompressor.unused_data.lstrip(b"\x00")
        while not rest:
            more = self._raw.read(_READ_CHUNK)
            if not more:
                return b""
            rest = more.lstrip(b"\x00")
        return rest

    def checkpoint(self) -> Checkpoint:
        """The state to :meth:`restore` to come back here. The input the inflater has not taken
        yet is read again from the file then, rather than kept."""
        return Checkpoint(self.position, self._raw.tell() - len(self._pending), self._decompressor.copy())

    def restore(self, checkpoint: Checkpoint) -> None:
        """Goes back (or on) to where ``checkpoint`` was taken."""
        self._raw.seek(checkpoint.compressed_at)
        self._decompressor = checkpoint.inflater.copy()  # the checkpoint stays usable
        self._pending = b""
        self.position = checkpoint.position

    def close(self) -> None:
        try:
            self._raw.close()
        finally:
            super().close()
