"""Kept for imports written before the package had layers: the writers live in
:mod:`torch_tfrecord.records.writer` and :mod:`torch_tfrecord.codec.writer` now
(``tt.RecordWriter``, ``tt.ExampleWriter`` and ``tt.ShardedWriter`` are the names to use)."""

from .codec.writer import ExampleWriter, ShardedWriter
from .records.writer import RecordWriter, WriteCompression

__all__ = ["ExampleWriter", "RecordWriter", "ShardedWriter", "WriteCompression"]
