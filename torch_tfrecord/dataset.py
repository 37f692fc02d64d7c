"""Kept for imports written before the package had layers: the datasets live in
:mod:`torch_tfrecord.data` now (``tt.TFRecordDataset`` is the name to use)."""

from .data.dataset import TFRecordDataset
from .data.indexed import IndexedTFRecordDataset
from .data.world import SharedEpoch, resolve_world

__all__ = ["IndexedTFRecordDataset", "SharedEpoch", "TFRecordDataset", "resolve_world"]
