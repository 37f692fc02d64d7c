"""torch-tfrecord: read and write TFRecord files in PyTorch, with no TensorFlow.

The public names are imported on first use (PEP 562), so that ``import torch_tfrecord``, and the
command lines that need no tensors (``count``, ``verify``, ``head``, ``tfrecord-index``), start
without importing torch.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# Each public name and the submodule that defines it.
_EXPORTS: dict[str, str] = {
    "PADDING_KEY": "_pipeline",
    "RECORD_ID_KEY": "_pipeline",
    "BytesList": "encode",
    "CompressedIndex": "compressed_index",
    "CompressedIndexError": "errors",
    "CorruptRecordError": "errors",
    "DamagedRegion": "reader",
    "EpochPlan": "order",
    "ExampleDecodeError": "errors",
    "ExampleWriter": "writer",
    "FeatureError": "errors",
    "FeatureShapeError": "errors",
    "FeatureTypeError": "errors",
    "FixedLen": "spec",
    "FixedLenSequence": "spec",
    "FloatList": "encode",
    "Image": "spec",
    "IndexFormatError": "errors",
    "IndexedTFRecordDataset": "dataset",
    "Int64List": "encode",
    "MissingFeatureError": "errors",
    "MixedDataset": "mix",
    "Ragged": "ragged",
    "RawTensor": "spec",
    "ReadStats": "reader",
    "RecordWriter": "writer",
    "RemoteIOError": "errors",
    "ShardedWriter": "writer",
    "SourceNotFoundError": "errors",
    "SpecError": "errors",
    "StaleIndexError": "errors",
    "TFRecordDataset": "dataset",
    "TFRecordError": "errors",
    "TruncatedRecordError": "errors",
    "VarLen": "spec",
    "build_compressed_index": "inflate",
    "build_index": "index",
    "check_index": "index",
    "collate": "collate",
    "count_records": "index",
    "decode_batch": "codec",
    "decode_example": "codec",
    "decode_sequence_batch": "codec",
    "decode_sequence_example": "codec",
    "default_index_path": "index",
    "detection_spec": "vision",
    "encode_example": "encode",
    "encode_record": "framing",
    "encode_sequence_example": "encode",
    "from_tfds": "tfds.load",
    "infer_spec": "schema",
    "load_compressed_index": "compressed_index",
    "load_index": "index",
    "masked_crc32c": "framing",
    "mix": "mix",
    "read_records": "reader",
    "save_compressed_index": "compressed_index",
    "save_index": "index",
    "segmentation_spec": "vision",
    "split_batch": "collate",
}

__all__ = [
    "PADDING_KEY",
    "RECORD_ID_KEY",
    "BytesList",
    "CompressedIndex",
    "CompressedIndexError",
    "CorruptRecordError",
    "DamagedRegion",
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
    "MixedDataset",
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
    "build_compressed_index",
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
    "from_tfds",
    "infer_spec",
    "load_compressed_index",
    "load_index",
    "masked_crc32c",
    "mix",
    "read_records",
    "save_compressed_index",
    "save_index",
    "segmentation_spec",
    "split_batch",
]

if TYPE_CHECKING:  # what mypy and IDEs see; at run time each name comes from __getattr__
    from ._pipeline import PADDING_KEY, RECORD_ID_KEY
    from .codec import decode_batch, decode_example, decode_sequence_batch, decode_sequence_example
    from .collate import collate, split_batch
    from .compressed_index import CompressedIndex, load_compressed_index, save_compressed_index
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
    from .index import build_index, check_index, count_records, default_index_path, load_index, save_index
    from .inflate import build_compressed_index
    from .mix import MixedDataset, mix
    from .order import EpochPlan
    from .ragged import Ragged
    from .reader import DamagedRegion, ReadStats, read_records
    from .schema import infer_spec
    from .spec import FixedLen, FixedLenSequence, Image, RawTensor, VarLen
    from .tfds.load import from_tfds
    from .vision import detection_spec, segmentation_spec
    from .writer import ExampleWriter, RecordWriter, ShardedWriter


def __getattr__(name: str) -> Any:
    """A public name, imported from its submodule on first use; else a submodule (``tt.native``)."""
    module_name = _EXPORTS.get(name)
    if module_name is not None:
        value = getattr(importlib.import_module(f".{module_name}", __name__), name)
        globals()[name] = value  # later lookups skip this function
        return value
    if not name.startswith("__"):
        try:
            return importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as error:
            if error.name != f"{__name__}.{name}":
                raise  # the submodule exists but needs something that is missing
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


class _Package(types.ModuleType):
    """Keeps a public name from being replaced by the submodule of the same name.

    Importing a submodule binds it as an attribute of the package: importing
    ``torch_tfrecord.collate`` (as ``dataset`` does) would turn ``tt.collate`` from the function
    into the module.
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if (
            name in _EXPORTS
            and isinstance(value, types.ModuleType)
            and value.__name__ == f"{__name__}.{name}"
        ):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
