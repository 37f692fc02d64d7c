"""The feature keys of detection and segmentation records (the Object Detection API and Pascal
VOC layouts the converters write), without torch: the targets, the preview and the viewer share them.
"""

from __future__ import annotations

__all__ = ["DETECTION_KEYS", "SEGMENTATION_KEYS", "VOID"]

DETECTION_KEYS = {
    "image": "image/encoded",
    "xmin": "image/object/bbox/xmin",
    "ymin": "image/object/bbox/ymin",
    "xmax": "image/object/bbox/xmax",
    "ymax": "image/object/bbox/ymax",
    "labels": "image/object/class/label",
    "masks": "image/object/mask",
}

SEGMENTATION_KEYS = {
    "image": "image/encoded",
    "class": "image/segmentation/class/encoded",
    "object": "image/segmentation/object/encoded",
}

VOID = 255
"""The mask value of unlabelled pixels and object boundaries (Pascal VOC's), which losses ignore."""
