"""Kept for imports written before the package had layers: the reader lives in
:mod:`torch_tfrecord.records.reader` now (``tt.read_records`` is the name to use)."""

from .records.reader import (
    DamagedRegion,
    OnError,
    ReadStats,
    read_entries_at,
    read_framed_sizes,
    read_records,
    record_skipped_region,
)

__all__ = [
    "DamagedRegion",
    "OnError",
    "ReadStats",
    "read_entries_at",
    "read_framed_sizes",
    "read_records",
    "record_skipped_region",
]
