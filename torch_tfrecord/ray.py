"""Kept for imports written before the package had layers: Ray Data support lives in
:mod:`torch_tfrecord.integrations.ray` now (needs the ``ray`` extra)."""

from __future__ import annotations

from typing import Any

from .integrations import ray as _moved

__all__ = list(_moved.__all__)


def __getattr__(name: str) -> Any:
    return getattr(_moved, name)
