"""Kept for imports written before the package had layers: the offset index lives in
:mod:`torch_tfrecord.records.index` now (``tt.load_index`` and its siblings are the names to use)."""

from .records.index import (
    INDEX_SUFFIX,
    build_index,
    check_index,
    check_table,
    count_records,
    decode_index,
    default_index_path,
    encode_index,
    index_from_sizes,
    load_index,
    read_index_bytes,
    save_index,
    write_index_bytes,
)

__all__ = [
    "INDEX_SUFFIX",
    "build_index",
    "check_index",
    "check_table",
    "count_records",
    "decode_index",
    "default_index_path",
    "encode_index",
    "index_from_sizes",
    "load_index",
    "read_index_bytes",
    "save_index",
    "write_index_bytes",
]
