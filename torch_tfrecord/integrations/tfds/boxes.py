"""TFDS bounding boxes (BBoxFeature: normalized ``[ymin, xmin, ymax, xmax]``) as torchvision's."""

from __future__ import annotations

import torch

__all__ = ["boxes_to_xyxy"]


def boxes_to_xyxy(boxes: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """TFDS boxes to pixel ``[xmin, ymin, xmax, ymax]`` boxes, as torchvision's detection models take.

    Args:
        boxes: float ``[..., 4]``, each row ``[ymin, xmin, ymax, xmax]`` in [0, 1] (TFDS's order).
        height, width: the image's size in pixels (``image.shape[-2:]`` of a CHW image).

    Returns:
        float32 ``[..., 4]`` rows ``[xmin * width, ymin * height, xmax * width, ymax * height]``.

    Example:
        >>> boxes_to_xyxy(torch.tensor([[0.1, 0.2, 0.5, 1.0]]), height=100, width=200)
        tensor([[ 40.,  10., 200.,  50.]])
    """
    if boxes.shape[-1:] != (4,):
        raise ValueError(f"boxes must have shape [..., 4], got {tuple(boxes.shape)}")
    if height <= 0 or width <= 0:
        raise ValueError(f"{height=} and {width=} must be positive")
    ymin, xmin, ymax, xmax = boxes.to(torch.float32).unbind(-1)
    return torch.stack([xmin * width, ymin * height, xmax * width, ymax * height], dim=-1)
