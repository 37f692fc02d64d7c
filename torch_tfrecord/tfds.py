"""Kept for imports written before the package had layers: TFDS directories are read by
:mod:`torch_tfrecord.integrations.tfds` now (``tt.from_tfds`` is the name to use)."""

from __future__ import annotations

from typing import Any

from .integrations import tfds as _moved

__all__ = list(_moved.__all__)


def __getattr__(name: str) -> Any:
    return getattr(_moved, name)
