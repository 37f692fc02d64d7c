"""torch-tfrecord: read and write TFRecord files in PyTorch, with no TensorFlow."""

from .errors import (
    CompressedIndexError,
    CorruptRecordError,
    IndexFormatError,
    StaleIndexError,
    TFRecordError,
    TruncatedRecordError,
)
from .framing import encode_record, masked_crc32c
from .index import (
    build_index,
    check_index,
    default_index_path,
    load_index,
    save_index,
)
from .reader import ReadStats, read_records
from .writer import RecordWriter, ShardedWriter

__version__ = "0.1.0"

__all__ = [
    "CompressedIndexError",
    "CorruptRecordError",
    "IndexFormatError",
    "ReadStats",
    "RecordWriter",
    "ShardedWriter",
    "StaleIndexError",
    "TFRecordError",
    "TruncatedRecordError",
    "build_index",
    "check_index",
    "default_index_path",
    "encode_record",
    "load_index",
    "masked_crc32c",
    "read_records",
    "save_index",
]
