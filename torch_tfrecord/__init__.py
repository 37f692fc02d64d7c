"""torch-tfrecord: read and write TFRecord files in PyTorch, with no TensorFlow."""

from ._pipeline import PADDING_KEY, RECORD_ID_KEY
from .codec import decode_batch, decode_example, decode_sequence_batch, decode_sequence_example
from .collate import collate, split_batch
from .dataset import IndexedTFRecordDataset, TFRecordDataset
from .encode import BytesList, FloatList, Int64List, encode_example, encode_sequence_example
from .errors import (
    CompressedIndexError,
    CorruptRecordError,
    ExampleDecodeError,
    FeatureError,
    FeatureShapeError,
    FeatureTypeError,
    IndexFormatError,
    MissingFeatureError,
    RemoteIOError,
    SourceNotFoundError,
    SpecError,
    StaleIndexError,
    TFRecordError,
    TruncatedRecordError,
)
from .framing import encode_record, masked_crc32c
from .index import (
    build_index,
    check_index,
    count_records,
    default_index_path,
    load_index,
    save_index,
)
from .order import EpochPlan
from .ragged import Ragged
from .reader import ReadStats, read_records
from .schema import infer_spec
from .spec import FixedLen, FixedLenSequence, Image, RawTensor, VarLen
from .vision import detection_spec
from .writer import ExampleWriter, RecordWriter, ShardedWriter

__version__ = "0.1.0"

__all__ = [
    "PADDING_KEY",
    "RECORD_ID_KEY",
    "BytesList",
    "CompressedIndexError",
    "CorruptRecordError",
    "EpochPlan",
    "ExampleDecodeError",
    "ExampleWriter",
    "FeatureError",
    "FeatureShapeError",
    "FeatureTypeError",
    "FixedLen",
    "FixedLenSequence",
    "FloatList",
    "Image",
    "IndexFormatError",
    "IndexedTFRecordDataset",
    "Int64List",
    "MissingFeatureError",
    "Ragged",
    "RawTensor",
    "ReadStats",
    "RecordWriter",
    "RemoteIOError",
    "ShardedWriter",
    "SourceNotFoundError",
    "SpecError",
    "StaleIndexError",
    "TFRecordDataset",
    "TFRecordError",
    "TruncatedRecordError",
    "VarLen",
    "build_index",
    "check_index",
    "collate",
    "count_records",
    "decode_batch",
    "decode_example",
    "decode_sequence_batch",
    "decode_sequence_example",
    "default_index_path",
    "detection_spec",
    "encode_example",
    "encode_record",
    "encode_sequence_example",
    "infer_spec",
    "load_index",
    "masked_crc32c",
    "read_records",
    "save_index",
    "split_batch",
]
