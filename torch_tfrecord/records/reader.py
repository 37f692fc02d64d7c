"""Reading the records of a TFRecord file: a whole file, its index entries, or a byte range.

:func:`read_records` is the front door: it picks the read (sequential through
:mod:`.scan`, or by index entry through :mod:`.entries`) and handles
damage as asked: raise, or skip it, log it and count it in :class:`ReadStats`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Literal

from ..errors import CompressedIndexError, TFRecordError
from ..support.extension import for_reading
from ..support.text import plural
from .io import (
    CompressionArg,
    PathLike,
    StorageOptions,
    file_size,
    is_url,
    open_records_stream,
    resolve_compression,
)
from .resync import DamagedRegion
from .scan import Span, scan

# read_entries_at and read_framed_sizes have their own modules; they stay importable from here,
# loaded when asked for: reading from the start imports no numpy (a viewer's first page, `head`).
if TYPE_CHECKING:
    import numpy.typing as npt

    from .entries import read_entries_at
    from .headers import read_framed_sizes

_MOVED = {"read_entries_at": "entries", "read_framed_sizes": "headers"}


def __getattr__(name: str) -> Any:
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f".{_MOVED[name]}", __package__), name)


__all__ = [
    "DamagedRegion",
    "OnError",
    "ReadStats",
    "read_entries_at",
    "read_framed_sizes",
    "read_records",
    "record_skipped_region",
]

logger = logging.getLogger(__name__)

OnError = Literal["raise", "skip"]


@dataclasses.dataclass
class ReadStats:
    """Counters a reader fills in; pass one as ``stats=`` to see what ``on_error="skip"`` skipped.

    Attributes:
        records: records returned.
        payload_bytes: bytes of payload returned.
        files_skipped: files whose reading stopped at damage (a compressed stream that cannot
            be decompressed past it).
        records_skipped: records known to be lost: single records skipped by an index read,
            and the records of each damaged region whose count is known.
        bytes_skipped: bytes of the damaged regions a sequential read stepped over.
        damaged: every :class:`DamagedRegion` a sequential read stepped over, in file order.
        errors: the message of every error that was skipped.
    """

    records: int = 0
    payload_bytes: int = 0
    files_skipped: int = 0
    records_skipped: int = 0
    bytes_skipped: int = 0
    damaged: list[DamagedRegion] = dataclasses.field(default_factory=list)
    errors: list[str] = dataclasses.field(default_factory=list)

    def damage_summary(self) -> str:
        """One line that sums up the damaged regions stepped over (``""`` when none), as
        ``torch-tfrecord verify`` prints it: regions, bytes and records lost, intact records read."""
        if not self.damaged:
            return ""
        lost = sum(region.records or 0 for region in self.damaged)
        unknown = any(region.records is None for region in self.damaged)
        return (
            f"{plural(len(self.damaged), 'damaged region')}: {plural(self.bytes_skipped, 'byte')} "
            f"and {'at least ' if unknown else ''}{plural(lost, 'record')} lost, "
            f"{plural(self.records, 'intact record')} read"
        )


def _skip(stats: ReadStats | None, error: TFRecordError, what: str) -> None:
    logger.warning("skipping %s: %s", what, error)
    if stats is not None:
        stats.errors.append(str(error))
        if what == "record":
            stats.records_skipped += 1
        else:
            stats.files_skipped += 1


def record_skipped_region(stats: ReadStats | None, region: DamagedRegion) -> None:
    """Logs a damaged region that ``on_error="skip"`` stepped over and counts it in ``stats``."""
    logger.warning("skipping damaged bytes: %s", region)
    if stats is not None:
        stats.errors.append(str(region))
        stats.damaged.append(region)
        stats.bytes_skipped += region.size
        stats.records_skipped += region.records or 0


def _counted(records: Iterator[bytes], stats: ReadStats) -> Iterator[bytes]:
    for payload in records:
        stats.records += 1
        stats.payload_bytes += len(payload)
        yield payload


def read_records(
    path: PathLike,
    *,
    compression: CompressionArg = "auto",
    verify_crc: bool = True,
    on_error: OnError = "raise",
    entries: Sequence[tuple[int, int]] | npt.ArrayLike | None = None,
    record_numbers: Sequence[int] | npt.ArrayLike | None = None,
    byte_range: tuple[int, int] | None = None,
    stats: ReadStats | None = None,
    storage_options: StorageOptions = None,
) -> Iterator[bytes]:
    """Yields the payload of each record of a TFRecord file, as ``bytes``.

    Reads the whole file, or only the records named by ``entries`` (index rows), or only the
    records that begin inside ``byte_range``.

    Args:
        path: the file to read.
        compression: ``"auto"`` (by magic bytes, then suffix .gz / .zz / .zlib), ``"gzip"``,
            ``"zlib"`` or None.
        verify_crc: check both CRCs of every record. Lengths are bounds-checked either way.
        on_error: ``"raise"`` (default) or ``"skip"``: log the damage, count it in ``stats``
            and go on. An index read skips just the damaged record; a sequential read searches
            forward for the next position where a record's length CRC, length and payload CRC
            all check out, resumes there, and records the :class:`DamagedRegion` it stepped
            over in ``stats.damaged``: every intact record is returned. (Damage is found
            through the CRCs: with ``verify_crc=False`` only impossible lengths are.)
        entries: ``(offset, framed_size)`` rows, e.g. from :func:`torch_tfrecord.load_index`;
            records are returned in the given order, and neighbouring ones are read together.
            A local file's entries are read a batch at a time (up to 1,024 records) in native
            calls, without Python per record; each call opens the file again, so for many
            small batches of a dataset :meth:`IndexedTFRecordDataset.read_batch` is faster
            (it keeps its files open, and decodes).
        record_numbers: the record number of each entry, for error messages (default: the
            entry's position in ``entries``).
        byte_range: ``(start, end)``: the records that begin at an offset in ``[start, end)``;
            ``start`` must be the offset of a record (or the file size).
        stats: counters to fill in.
        storage_options: for the fsspec file system when ``path`` is a URL.

    Yields:
        Each record's payload.

    Raises:
        CorruptRecordError: a CRC mismatch or an impossible length.
        TruncatedRecordError: the file ends inside a record.
        StaleIndexError: an entry does not match the record at its offset.
        CompressedIndexError: ``entries`` or ``byte_range`` given for a compressed file.

    Example:
        >>> for payload in read_records("train-00000-of-00008.tfrecord"):  # doctest: +SKIP
        ...     example = decode_example(payload)
    """
    if on_error not in ("raise", "skip"):
        raise ValueError(f"{on_error=} must be 'raise' or 'skip'")
    if entries is not None and byte_range is not None:
        raise ValueError("give entries or byte_range, not both")
    name = str(path)
    resolved = resolve_compression(compression, path, storage_options)
    if resolved is not None and (entries is not None or byte_range is not None):
        raise CompressedIndexError(
            f"{name!r} is {resolved.upper()}-compressed: its records can only be read in order, "
            "not by offset; read it whole, or use the datasets, which read it by record through "
            "a compressed index (tt.build_compressed_index)"
        )
    if entries is not None:
        on_skip = None if on_error == "raise" else lambda error: _skip(stats, error, "record")
        extension = None if is_url(name) else for_reading()
        if extension is not None:  # a local file: a batch of records per native call
            from .entry_batches import read_entries_gathered

            records = read_entries_gathered(
                extension, name, entries, record_numbers, verify_crc, on_skip, storage_options
            )
        else:
            from .entries import read_entries

            records = read_entries(name, entries, record_numbers, verify_crc, on_skip, storage_options)
    else:
        records = _read_sequential(name, resolved, byte_range, verify_crc, on_error, stats, storage_options)
    # Counting costs a generator frame per record: only when stats are asked for.
    return records if stats is None else _counted(records, stats)


def _read_sequential(
    path: str,
    compression: str | None,
    byte_range: tuple[int, int] | None,
    verify_crc: bool,
    on_error: OnError,
    stats: ReadStats | None,
    storage_options: StorageOptions,
) -> Iterator[bytes]:
    size = file_size(path, storage_options) if compression is None else None
    start, end = 0, None
    if byte_range is not None:
        start, end = byte_range
        if not 0 <= start <= end:
            raise ValueError(f"{byte_range=} must satisfy 0 <= start <= end")
        if size is not None and start > size:
            raise ValueError(f"{byte_range=} starts past the end of {path!r} ({size} bytes)")
    span = Span(path, start, end, size, first_record=0 if start == 0 else None)
    with open_records_stream(path, compression, storage_options) as stream:  # type: ignore[arg-type]
        if start:
            stream.seek(start)
        on_damage = None if on_error == "raise" else lambda region: record_skipped_region(stats, region)
        try:
            yield from scan(stream, span, verify_crc, on_damage)
        except TFRecordError as error:
            if on_error == "raise":
                raise
            _skip(stats, error, "rest of file")
