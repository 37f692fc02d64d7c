"""Kept for imports written before the package had layers: feature specs live in
:mod:`torch_tfrecord.codec.spec` now (``tt.FixedLen`` and its siblings are the names to use)."""

from .codec.spec import (
    DType,
    FeatureSpec,
    FixedLen,
    FixedLenSequence,
    Image,
    RawTensor,
    VarLen,
    list_kind,
    normalize_spec,
)

__all__ = [
    "DType",
    "FeatureSpec",
    "FixedLen",
    "FixedLenSequence",
    "Image",
    "RawTensor",
    "VarLen",
    "list_kind",
    "normalize_spec",
]
