"""Layer 3, images beyond pixels: detection and segmentation records as torchvision's targets
(:mod:`.targets`), and contact sheets of a file's images (:mod:`.preview`).

``torch_tfrecord.vision`` also gives the image decoder (:func:`decode_image`) it always gave.
Names load on first use, so ``torch-tfrecord preview`` (:mod:`.preview`) starts without torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "DETECTION_KEYS": ".keys",
    "SEGMENTATION_KEYS": ".keys",
    "VOID": ".keys",
    "decode_image": "..codec.image",
    "detection_spec": ".targets",
    "image_backend": "..codec.image",
    "segmentation_spec": ".targets",
    "to_detection_target": ".targets",
    "to_segmentation_target": ".targets",
}
__all__ = [
    "DETECTION_KEYS",
    "SEGMENTATION_KEYS",
    "VOID",
    "decode_image",
    "detection_spec",
    "image_backend",
    "segmentation_spec",
    "to_detection_target",
    "to_segmentation_target",
]

if TYPE_CHECKING:
    from ..codec.image import decode_image, image_backend
    from .targets import (
        DETECTION_KEYS,
        SEGMENTATION_KEYS,
        VOID,
        detection_spec,
        segmentation_spec,
        to_detection_target,
        to_segmentation_target,
    )


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module, __name__), name)
