"""Writers that also take dicts of features, encoded as Examples (:func:`encode_example`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..records.writer import RecordBytes, RecordWriter, ShardedRecordWriter, as_payload
from .encode import encode_example

__all__ = ["ExampleWriter", "ShardedExampleWriter"]


def _encoded(record: RecordBytes | Mapping[str, Any]) -> RecordBytes:
    """Serialized bytes as they are; a dict of features encoded as an Example."""
    if isinstance(record, Mapping):
        return encode_example(record)
    if not isinstance(record, bytes | bytearray | memoryview):
        raise TypeError(f"write() takes bytes or a dict of features, got {type(record).__name__}")
    return as_payload(record)


class ExampleWriter(RecordWriter):
    """A :class:`RecordWriter` whose :meth:`write` also takes a dict of features.

    Values are encoded by :func:`torch_tfrecord.encode_example`. A feature is a flat list: an
    array or tensor of two or more dimensions is stored flattened (row-major), without its
    shape. Read it back with the shape in the spec, ``tt.FixedLen((2, 3), torch.float32)``; a
    shape that varies per record can be stored as another feature and named by
    ``tt.RawTensor`` (see the converting guide).

    Example:
        >>> with ExampleWriter("train.tfrecord") as writer:  # doctest: +SKIP
        ...     writer.write({"image": tt.BytesList([jpeg]), "label": 3})
    """

    def write(self, record: RecordBytes | Mapping[str, Any]) -> None:  # type: ignore[override]
        """Appends one record: bytes as they are, a dict encoded with :func:`encode_example`."""
        super().write(_encoded(record))


class ShardedExampleWriter(ShardedRecordWriter):
    """Writes records across numbered shards, rolling over by record count or size: bytes as
    they are, a dict of features encoded as an Example.

    Shards are named ``{prefix}-00000-of-00012{suffix}``; the total is known only at
    :meth:`close`, so every shard stays under a temporary name until then, and a crash leaves
    nothing under a final name. Each uncompressed shard gets its index, and the dataset its
    manifest, ``{prefix}.manifest.json``: what a reader needs to start with O(1) requests
    (:mod:`torch_tfrecord.records.manifest`).

    Args:
        prefix: path prefix of the shards, e.g. ``"out/train"``; its directory is created.
        max_records: start a new shard once a shard holds this many records.
        max_bytes: start a new shard before a record would take a shard past this many
            (uncompressed, framed) bytes; a single larger record gets a shard of its own.
        suffix: file name ending; default ``.tfrecord``, plus ``.gz`` / ``.zz`` when compressed.
        compression: None, ``"gzip"`` or ``"zlib"``.
        write_index: write ``.idx`` beside each uncompressed shard.
        storage_options: for the fsspec file system when ``prefix`` is a URL. Each shard is
            uploaded under a hidden temporary name and moved to its final name at close (a
            server-side copy on object stores).
        write_manifest: write ``{prefix}.manifest.json`` at close.

    Example:
        >>> with ShardedExampleWriter("out/train", max_records=10_000) as writer:  # doctest: +SKIP
        ...     for payload in payloads:
        ...         writer.write(payload)
        >>> writer.shard_paths  # doctest: +SKIP
        ['out/train-00000-of-00002.tfrecord', 'out/train-00001-of-00002.tfrecord']
    """

    def write(self, record: RecordBytes | Mapping[str, Any]) -> None:
        """Appends one record (bytes, or a dict of features encoded as an Example) to the
        current shard, starting a new shard when it is full."""
        super().write(record)

    def _payload(self, record: Any) -> RecordBytes:
        return _encoded(record)
