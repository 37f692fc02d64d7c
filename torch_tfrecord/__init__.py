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

from .support import versions as _versions

_versions.check_installed()  # an unsupported Python or torch: one clear error here, naming the range

__version__ = "0.1.0"

# Each public name and the submodule that defines it.
_EXPORTS: dict[str, str] = {
    "PADDING_KEY": "data.pipeline",
    "RECORD_ID_KEY": "data.pipeline",
    "BytesList": "codec.encode",
    "CompressedIndex": "records.compressed.index",
    "CompressedIndexError": "errors",
    "CorruptRecordError": "errors",
    "DamagedRegion": "records.reader",
    "EpochPlan": "data.order",
    "ExampleDecodeError": "errors",
    "ExampleWriter": "codec.writer",
    "FeatureError": "errors",
    "FeatureShapeError": "errors",
    "FeatureTypeError": "errors",
    "FixedLen": "codec.spec",
    "FixedLenSequence": "codec.spec",
    "FloatList": "codec.encode",
    "Image": "codec.spec",
    "IndexFormatError": "errors",
    "IndexedTFRecordDataset": "data.indexed",
    "Int64List": "codec.encode",
    "MissingFeatureError": "errors",
    "MixedDataset": "data.mix",
    "Ragged": "codec.ragged",
    "RawTensor": "codec.spec",
    "ReadStats": "records.reader",
    "RecordWriter": "records.writer",
    "RemoteIOError": "errors",
    "RowList": "codec.selection",
    "ShardedWriter": "codec.writer",
    "SourceNotFoundError": "errors",
    "SpecError": "errors",
    "StaleIndexError": "errors",
    "TFRecordDataset": "data.dataset",
    "TFRecordError": "errors",
    "TruncatedRecordError": "errors",
    "VarLen": "codec.spec",
    "build_compressed_index": "records.compressed.inflate",
    "build_index": "records.index",
    "check_index": "records.index",
    "collate": "data.collate",
    "count_records": "records.index",
    "decode_batch": "codec.decode",
    "decode_example": "codec.decode",
    "decode_sequence_batch": "codec.decode",
    "decode_sequence_example": "codec.decode",
    "default_index_path": "records.index",
    "detection_spec": "vision.targets",
    "encode_example": "codec.encode",
    "encode_record": "records.framing",
    "encode_sequence_example": "codec.encode",
    "from_parquet": "convert.parquet",
    "from_tfds": "integrations.tfds.load",
    "infer_spec": "codec.schema",
    "load_compressed_index": "records.compressed.index",
    "load_index": "records.index",
    "masked_crc32c": "records.framing",
    "mix": "data.mix",
    "read_records": "records.reader",
    "save_compressed_index": "records.compressed.index",
    "save_index": "records.index",
    "segmentation_spec": "vision.targets",
    "split_batch": "codec.rows",
    "to_hf": "integrations.hf",
    "to_parquet": "convert.parquet",
    "write_dataset": "convert.dataset",
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
    "RowList",
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
    "from_parquet",
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
    "to_hf",
    "to_parquet",
    "write_dataset",
]

if TYPE_CHECKING:  # what mypy and IDEs see; at run time each name comes from __getattr__
    from .codec.decode import decode_batch, decode_example, decode_sequence_batch, decode_sequence_example
    from .codec.encode import BytesList, FloatList, Int64List, encode_example, encode_sequence_example
    from .codec.ragged import Ragged
    from .codec.rows import split_batch
    from .codec.schema import infer_spec
    from .codec.selection import RowList
    from .codec.spec import FixedLen, FixedLenSequence, Image, RawTensor, VarLen
    from .codec.writer import ExampleWriter, ShardedWriter
    from .convert.dataset import write_dataset
    from .convert.parquet import from_parquet, to_parquet
    from .data.collate import collate
    from .data.dataset import TFRecordDataset
    from .data.indexed import IndexedTFRecordDataset
    from .data.mix import MixedDataset, mix
    from .data.order import EpochPlan
    from .data.pipeline import PADDING_KEY, RECORD_ID_KEY
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
    from .integrations.hf import to_hf
    from .integrations.tfds.load import from_tfds
    from .records.compressed.index import CompressedIndex, load_compressed_index, save_compressed_index
    from .records.compressed.inflate import build_compressed_index
    from .records.framing import encode_record, masked_crc32c
    from .records.index import (
        build_index,
        check_index,
        count_records,
        default_index_path,
        load_index,
        save_index,
    )
    from .records.reader import DamagedRegion, ReadStats, read_records
    from .records.writer import RecordWriter
    from .vision.targets import detection_spec, segmentation_spec


# Modules the documentation reaches as attributes (``tt.native.decoder()``), by where they live.
_MODULES: dict[str, str] = {
    "native": "codec.native",
    "order": "data.order",
    "remote": "records.remote",
}


def __getattr__(name: str) -> Any:
    """A public name, imported from its submodule on first use; else a submodule (``tt.native``)."""
    module_name = _EXPORTS.get(name)
    if module_name is not None:
        value = getattr(importlib.import_module(f".{module_name}", __name__), name)
        globals()[name] = value  # later lookups skip this function
        return value
    if name in _MODULES:
        return importlib.import_module(f".{_MODULES[name]}", __name__)
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
    ``torch_tfrecord.data.collate`` (as ``dataset`` does) would turn ``tt.collate`` from the function
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
