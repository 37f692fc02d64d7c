"""The selection file (``.ttsel``): per shard its fingerprint and which of its records are kept.

Layout (little-endian)::

    b"TTSEL\\x00\\x01\\n"                     magic, format 1
    u64 header size
    header                                  zlib-compressed JSON: {"format", "records", "selected",
                                            "where", "shards": [{"name", "size", "records",
                                            "version", "start", "kept", "encoding", "width", "runs"}]}
    payload                                 each shard's part, in shard order
    u32 CRC32C of header and payload

A shard's part is ``all`` or ``none`` (no bytes), ``runs`` (``[start, stop)`` pairs of record
numbers, unsigned, ``width`` bytes each) or ``bits`` (one bit per record, little bit order):
``runs`` where they are smaller than the bitmap, so a file never holds more than one bit per
record plus its header (10^8 records: at most 12.5 MB). A file is checked whole as it is read
(its CRC, its header, each part's size) and never trusted for a size it cannot show.
"""

from __future__ import annotations

import dataclasses
import json
import os
import struct
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...errors import SelectionError
from ...records import remote
from ...records.atomic import atomic_write
from ...records.framing import crc32c
from ...records.io import StorageOptions, is_url, local_path
from .id_sets import IdSet, IdSetParts

__all__ = [
    "FORMAT",
    "MAGIC",
    "SUFFIX",
    "ShardPrint",
    "decode_selection",
    "encode_selection",
    "read_file",
    "write_file",
]

MAGIC = b"TTSEL\x00\x01\n"
FORMAT = "torch_tfrecord.selection/1"
SUFFIX = ".ttsel"
_HEADER_SIZE = struct.Struct("<Q")
_CRC = struct.Struct("<I")
_WIDTHS: dict[int, Any] = {2: np.dtype("<u2"), 4: np.dtype("<u4"), 8: np.dtype("<u8")}
_MAX_HEADER = 1 << 30  # bytes of a header's JSON at most, inflated


@dataclasses.dataclass(frozen=True)
class ShardPrint:
    """What a selection knows of one shard, to tell whether it still is the shard it was made for.

    Attributes:
        name: the file's name (not its folder: the data may move, or be copied to a bucket).
        size: the bytes of its record stream (a compressed shard's: inflated).
        records: its record count.
        version: a remote object's ETag or generation ("" where there is none: compared only
            where both sides have one).
        start: where its first record begins, for part of a file (a TFDS split's slice).
    """

    name: str
    size: int
    records: int
    version: str = ""
    start: int = 0

    def differs(self, other: ShardPrint) -> str | None:
        """How ``other`` (the shard as it is now) differs from this, or None."""
        if other.name != self.name:
            return f"is {other.name!r}, the selection's is {self.name!r}"
        for what in ("records", "size", "start"):
            now, then = getattr(other, what), getattr(self, what)
            if now != then:
                return f"has {what} {now:,}, the selection says {then:,}"
        if self.version and other.version and self.version != other.version:
            return f"has version {other.version!r}, the selection says {self.version!r}"
        return None


def _width(records: int) -> int:
    """Bytes of each run boundary in a shard of ``records`` records."""
    return 2 if records < 1 << 16 else 4 if records < 1 << 32 else 8


def encode_selection(shards: Sequence[ShardPrint], ids: IdSet, where: str) -> bytes:
    """The bytes of the selection file of ``ids`` (record ids of ``shards``)."""
    entries: list[dict[str, Any]] = []
    parts: list[bytes] = []
    bounds = np.concatenate([[0], np.cumsum([shard.records for shard in shards])]).astype(np.int64)
    ranks = ids.rank(bounds).tolist()
    edges = bounds.tolist()
    for shard, low, high, before, after in zip(
        shards, edges[:-1], edges[1:], ranks[:-1], ranks[1:], strict=True
    ):
        kept = after - before
        width = _width(shard.records)
        entry = {**_print_entry(shard), "kept": kept, "width": width}
        if kept == 0:
            entry["encoding"] = "none"
        elif kept == shard.records:
            entry["encoding"] = "all"
        else:
            runs = ids.count_runs(low, high)
            if 2 * width * runs < -(-shard.records // 8):
                starts, stops = ids.runs(low, high)
                pairs = np.stack([starts - low, stops - low], axis=1).astype(_WIDTHS[width])
                entry["encoding"] = "runs"
                entry["runs"] = len(starts)
                parts.append(pairs.tobytes())
            else:
                entry["encoding"] = "bits"
                parts.append(np.packbits(ids.mask(low, high), bitorder="little").tobytes())
        entries.append(entry)
    header = {
        "format": FORMAT,
        "records": int(bounds[-1]),
        "selected": len(ids),
        "where": where,
        "shards": entries,
    }
    packed = zlib.compress(json.dumps(header, separators=(",", ":")).encode(), 6)
    body = _HEADER_SIZE.pack(len(packed)) + packed + b"".join(parts)
    return MAGIC + body + _CRC.pack(crc32c(body))


def _print_entry(shard: ShardPrint) -> dict[str, Any]:
    return {
        "name": shard.name,
        "size": shard.size,
        "records": shard.records,
        "version": shard.version,
        "start": shard.start,
    }


def decode_selection(data: bytes, name: str = "the selection") -> tuple[list[ShardPrint], IdSet, str]:
    """A selection file's shards, record ids and how it was made.

    Raises:
        SelectionError: not a selection file, a damaged one, or one of another format.
    """
    if not data.startswith(MAGIC):
        raise SelectionError(f"{name} is not a selection file (it does not begin with {MAGIC!r})")
    if len(data) < len(MAGIC) + _HEADER_SIZE.size + _CRC.size:
        raise SelectionError(f"{name} is cut short ({len(data)} bytes)")
    body = data[len(MAGIC) : -_CRC.size]
    (stored,) = _CRC.unpack(data[-_CRC.size :])
    if crc32c(body) != stored:
        raise SelectionError(f"{name} is damaged: its CRC does not match its bytes")
    (header_size,) = _HEADER_SIZE.unpack_from(body)
    if header_size > len(body) - _HEADER_SIZE.size:
        raise SelectionError(f"{name} is damaged: a header of {header_size:,} bytes in {len(body):,}")
    header = _header(body[_HEADER_SIZE.size : _HEADER_SIZE.size + header_size], name)
    payload = memoryview(body)[_HEADER_SIZE.size + header_size :]
    shards, parts = [], IdSetParts(int(header["records"]))
    at = 0
    for number, entry in enumerate(header["shards"]):
        shard, encoding, width, runs = _shard(entry, number, name)
        shards.append(shard)
        records = shard.records
        if encoding == "none":
            parts.add_runs(records, [], [])
        elif encoding == "all":
            parts.add_runs(records, [0], [records])
        elif encoding == "bits":
            size = -(-records // 8)
            parts.add_bits(records, np.frombuffer(payload[at : at + size], dtype=np.uint8))
            at += size
        else:
            pairs, at = _runs(payload, at, width, runs, name, number)
            try:
                parts.add_runs(records, pairs[:, 0], pairs[:, 1])
            except ValueError as error:
                raise SelectionError(f"{name} is damaged: shard {number}'s runs: {error}") from None
        if at > len(payload):
            raise SelectionError(f"{name} is damaged: shard {number}'s part ends past the file's end")
    if at != len(payload):
        raise SelectionError(f"{name} is damaged: {len(payload) - at:,} bytes after its last shard's part")
    try:
        ids = parts.build()
    except ValueError as error:
        raise SelectionError(f"{name} is damaged: {error}") from None
    bounds = np.concatenate([[0], np.cumsum([shard.records for shard in shards])]).astype(np.int64)
    counts = np.diff(ids.rank(bounds)).tolist()
    if len(ids) != header["selected"] or counts != [entry["kept"] for entry in header["shards"]]:
        raise SelectionError(f"{name} is damaged: its parts do not hold the counts its header says")
    return shards, ids, str(header.get("where") or "")


def _header(packed: bytes, name: str) -> dict[str, Any]:
    try:
        inflater = zlib.decompressobj()
        text = inflater.decompress(packed, _MAX_HEADER)
        header = json.loads(text)
    except (zlib.error, ValueError) as error:
        raise SelectionError(f"{name} is damaged: its header does not read ({error})") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        found = header.get("format") if isinstance(header, dict) else None
        raise SelectionError(f"{name} is of format {found!r}; this version reads {FORMAT!r}")
    if not isinstance(header.get("shards"), list) or not all(isinstance(e, dict) for e in header["shards"]):
        raise SelectionError(f"{name} is damaged: its header lists no shards")
    for key in ("records", "selected"):
        if not isinstance(header.get(key), int) or header[key] < 0:
            raise SelectionError(f"{name} is damaged: its header's {key!r} is {header.get(key)!r}")
    return header


def _shard(entry: dict[str, Any], number: int, name: str) -> tuple[ShardPrint, str, int, int]:
    try:
        shard = ShardPrint(
            str(entry["name"]),
            int(entry["size"]),
            int(entry["records"]),
            str(entry["version"]),
            int(entry["start"]),
        )
        encoding, width, kept = str(entry["encoding"]), int(entry["width"]), int(entry["kept"])
        runs = int(entry.get("runs", 0))
    except (KeyError, TypeError, ValueError) as error:
        raise SelectionError(f"{name} is damaged: shard {number}'s entry lacks {error}") from None
    if min(shard.size, shard.records, shard.start, kept) < 0 or kept > shard.records:
        raise SelectionError(f"{name} is damaged: shard {number}'s entry {entry!r}")
    if encoding not in ("none", "all", "bits", "runs") or width != _width(shard.records):
        raise SelectionError(f"{name} is damaged: shard {number} encoded as {encoding!r}, width {width}")
    return shard, encoding, width, runs


def _runs(payload: memoryview, at: int, width: int, runs: int, name: str, number: int) -> tuple[Any, int]:
    """A shard's ``runs`` runs, read from ``at``; and where its part ends."""
    end = at + 2 * width * runs
    if runs < 1 or end > len(payload):
        raise SelectionError(f"{name} is damaged: shard {number}'s {runs:,} runs do not fit in the file")
    pairs = np.frombuffer(payload[at:end], dtype=_WIDTHS[width]).astype(np.int64).reshape(-1, 2)
    return pairs, end


def read_file(path: str, storage_options: StorageOptions = None) -> bytes:
    """A small file's bytes, local or remote."""
    if is_url(path):
        return remote.read_bytes(path, storage_options)
    with open(local_path(path), "rb") as handle:
        return handle.read()


def write_file(path: str, data: bytes, storage_options: StorageOptions = None) -> None:
    """Writes ``data`` to ``path`` whole or not at all (a temporary name renamed; an upload committed)."""
    if is_url(path):
        remote.write_bytes(path, data, storage_options)
        return
    folder = os.path.dirname(os.path.abspath(local_path(path)))
    if not os.path.isdir(folder):
        raise SelectionError(f"cannot write {path!r}: there is no folder {folder!r}")
    with atomic_write(local_path(path)) as handle:
        handle.write(data)
