"""Exceptions raised by torch_tfrecord.

Every error is a :class:`TFRecordError` and also subclasses the matching builtin, so callers can
catch either. Messages say where the problem is: the file, the byte offset and the record number.
"""

from __future__ import annotations

__all__ = [
    "CompressedIndexError",
    "CorruptRecordError",
    "ExampleDecodeError",
    "FeatureError",
    "FeatureShapeError",
    "FeatureTypeError",
    "IndexFormatError",
    "MissingFeatureError",
    "RemoteIOError",
    "SelectionError",
    "SourceNotFoundError",
    "SpecError",
    "StaleIndexError",
    "StaleShardError",
    "TFRecordError",
    "TruncatedRecordError",
    "UnsupportedVersionError",
]


class TFRecordError(Exception):
    """Base class of every error raised by torch_tfrecord."""


class CorruptRecordError(TFRecordError, ValueError):
    """A record's framing is damaged: a CRC mismatch or an impossible length field.

    Attributes:
        path: the file that holds the record.
        offset: byte offset of the record's header (in the uncompressed stream).
        record: number of the record in the file, counting from 0.
    """

    def __init__(self, message: str, *, path: str, offset: int, record: int) -> None:
        super().__init__(message)
        self.path = path
        self.offset = offset
        self.record = record


class TruncatedRecordError(CorruptRecordError, EOFError):
    """The file ends inside a record (header, payload or footer).

    TensorFlow reads a partial trailing header as the end of the file; we do not, because
    that silently drops the half-written record.
    """


class StaleIndexError(TFRecordError, ValueError):
    """An index file does not describe its data file (appended, rewritten or another file)."""


class StaleShardError(StaleIndexError):
    """A shard is not what its manifest says (``what``: how it differs): the data changed since the
    manifest was written."""

    def __init__(self, manifest_location: str, path: str, what: str) -> None:
        super().__init__(
            f"{path!r} is not the shard manifest {manifest_location!r} describes: {what} (the data "
            "changed since the manifest was written: write it again, `tfrecord-index manifest`)"
        )


class IndexFormatError(TFRecordError, ValueError):
    """An index file is not in the `<offset> <framed_size>` text format."""


class CompressedIndexError(TFRecordError, ValueError):
    """An offset index was asked for a compressed file, whose byte offsets cannot be seeked to."""


class SourceNotFoundError(TFRecordError, FileNotFoundError):
    """A path, glob or directory given as a source names no file."""


class RemoteIOError(TFRecordError, OSError):
    """Remote storage failed: a permission error, or a transient failure that outlasted every
    retry. The message names the URL and the byte range or operation."""


class SelectionError(TFRecordError, ValueError):
    """A selection of records that cannot be used: made for other shards (or shards that changed
    since), a damaged selection file, a filter that names no feature of the data or compares one
    with a value of another type, or one that selects nothing."""


class UnsupportedVersionError(TFRecordError, ImportError):
    """``import torch_tfrecord`` found a Python or torch older than the supported range (the message
    names it); see docs/supported-versions.md."""


class SpecError(TFRecordError, ValueError, TypeError):
    """A feature spec is not valid: an unknown dtype or shorthand, a bad shape or default.

    Raised when the spec is made, never at record 1,000,000. It is a ValueError for a bad
    value and a TypeError for a value of the wrong kind, as the builtins would be.
    """


class FeatureError(TFRecordError, ValueError):
    """A record's features do not match the spec.

    Attributes:
        key: the feature key (None when the record is not an Example at all).
        record: where the record came from, e.g. ``"record 17 of 'train.tfrecord'"``, when known.
    """

    def __init__(self, message: str, *, key: str | None = None, record: str | None = None) -> None:
        super().__init__(message)
        self.key = key
        self.record = record

    def __str__(self) -> str:
        # KeyError would quote the message; every subclass prints it as written.
        return str(self.args[0]) if self.args else ""


class MissingFeatureError(FeatureError, KeyError):
    """A required feature is absent and its spec has no default."""


class FeatureTypeError(FeatureError, TypeError):
    """A feature holds another list type than the spec asks for (e.g. floats for int64)."""


class FeatureShapeError(FeatureError):
    """A feature holds a number of values that does not fit the spec's shape, or overflows its dtype."""


class ExampleDecodeError(FeatureError):
    """The bytes of a record are not a valid serialized Example / SequenceExample."""
