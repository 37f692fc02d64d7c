"""TFDS-prepared directories (``~/tensorflow_datasets/<name>/<version>/``) read with no TensorFlow.

:func:`from_tfds` turns a split of one into a dataset whose spec comes from ``features.json``.
Names are imported on first use, so the torch-free command lines can read the metadata
(:mod:`.info`) without importing torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS: dict[str, str] = {
    "ClassLabel": "features",
    "DatasetInfo": "info",
    "FeaturesDict": "features",
    "Image": "features",
    "IndexedTFDSDataset": "load",
    "Sequence": "features",
    "SplitInfo": "info",
    "TFDSDataset": "load",
    "TFDSFormatError": "info",
    "Tensor": "features",
    "Text": "features",
    "UnsupportedFeatureError": "features",
    "boxes_to_xyxy": "boxes",
    "from_tfds": "load",
    "parse_split": "splits",
    "read_info": "info",
}

__all__ = [
    "ClassLabel",
    "DatasetInfo",
    "FeaturesDict",
    "Image",
    "IndexedTFDSDataset",
    "Sequence",
    "SplitInfo",
    "TFDSDataset",
    "TFDSFormatError",
    "Tensor",
    "Text",
    "UnsupportedFeatureError",
    "boxes_to_xyxy",
    "from_tfds",
    "parse_split",
    "read_info",
]

if TYPE_CHECKING:
    from .boxes import boxes_to_xyxy
    from .features import ClassLabel, FeaturesDict, Image, Sequence, Tensor, Text, UnsupportedFeatureError
    from .info import DatasetInfo, SplitInfo, TFDSFormatError, read_info
    from .load import IndexedTFDSDataset, TFDSDataset, from_tfds
    from .splits import parse_split


def __getattr__(name: str) -> Any:
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module_name}", __name__), name)
    globals()[name] = value
    return value
