"""Detection and segmentation records (the Object Detection API and Pascal VOC layouts): their
specs, and samples turned into the targets torchvision's models and ``transforms.v2`` take.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from ..codec.image import Mode, decode_image
from .keys import DETECTION_KEYS, SEGMENTATION_KEYS, VOID

__all__ = [
    "DETECTION_KEYS",
    "SEGMENTATION_KEYS",
    "VOID",
    "detection_spec",
    "segmentation_spec",
    "to_detection_target",
    "to_segmentation_target",
]


def detection_spec(mode: Mode = "RGB", *, extra: bool = False, masks: bool = False) -> dict[str, Any]:
    """The spec of detection records in the Object Detection API layout (what
    ``torch_tfrecord.convert`` writes from COCO and Pascal VOC): the decoded image, the
    normalized box corners and the class ids; with ``extra``, also size, file name, source id,
    class names, area, is_crowd, difficult and truncated; with ``masks``, the instance masks
    (image/object/mask: a PNG per box, as ``convert coco --masks`` writes them), kept encoded
    here and decoded by :func:`to_detection_target`."""
    from ..codec.spec import FixedLen, Image, VarLen

    spec: dict[str, Any] = {
        DETECTION_KEYS["image"]: Image(mode),
        **{DETECTION_KEYS[k]: VarLen(torch.float32) for k in ("xmin", "ymin", "xmax", "ymax")},
        DETECTION_KEYS["labels"]: VarLen(torch.int64),
    }
    if masks:
        spec[DETECTION_KEYS["masks"]] = VarLen(bytes)
    if extra:
        spec.update(
            {
                "image/height": FixedLen((), torch.int64),
                "image/width": FixedLen((), torch.int64),
                "image/filename": FixedLen((), str),
                "image/source_id": FixedLen((), str),
                "image/object/class/text": VarLen(str),
                "image/object/area": VarLen(torch.float32),
                "image/object/is_crowd": VarLen(torch.int64),
                "image/object/difficult": VarLen(torch.int64),
                "image/object/truncated": VarLen(torch.int64),
            }
        )
    return spec


def to_detection_target(sample: dict[str, Any]) -> tuple[torch.Tensor, dict[str, Any]]:
    """A decoded detection sample (see :func:`detection_spec`) as torchvision's detection models
    and ``transforms.v2`` take it: ``(image, {"boxes", "labels"})``, plus ``"masks"`` when the
    sample has instance masks (Mask R-CNN's targets).

    ``image`` is the ``[C, H, W]`` uint8 tensor (a ``tv_tensors.Image`` when torchvision is
    installed); ``boxes`` are pixel XYXY, a ``tv_tensors.BoundingBoxes`` on the image's canvas
    when torchvision is installed, else a float tensor ``[N, 4]``; ``labels`` int64 ``[N]``;
    ``masks`` the decoded image/object/mask PNGs, ``[N, H, W]`` uint8 (1 on the object, 0
    elsewhere), a ``tv_tensors.Mask`` so that ``transforms.v2`` crops and flips them with the
    image (the image must be decoded at its stored size: no ``tt.Image(size=...)``).
    Other keys of ``sample`` whose name starts with ``image/object/`` are passed along, one
    value per box, under their last name (``area``, ``is_crowd`` ...).
    """
    image = sample[DETECTION_KEYS["image"]]
    if not isinstance(image, torch.Tensor) or image.ndim != 3:
        raise ValueError(
            f"{DETECTION_KEYS['image']!r} must be a decoded [C, H, W] image tensor (use tt.Image)"
        )
    height, width = int(image.shape[-2]), int(image.shape[-1])
    corners = [
        torch.as_tensor(sample[DETECTION_KEYS[k]], dtype=torch.float32)
        for k in ("xmin", "ymin", "xmax", "ymax")
    ]
    if len({len(c) for c in corners}) != 1:
        raise ValueError(f"box corner lists differ in length: {[len(c) for c in corners]}")
    scale = torch.tensor([width, height, width, height], dtype=torch.float32)
    boxes = torch.stack(corners, dim=-1).reshape(-1, 4) * scale
    labels = torch.as_tensor(sample[DETECTION_KEYS["labels"]], dtype=torch.int64).reshape(-1)
    if len(labels) != len(boxes):
        raise ValueError(f"{len(boxes)} boxes but {len(labels)} labels")
    target: dict[str, Any] = {"boxes": boxes, "labels": labels}
    masks = None
    if DETECTION_KEYS["masks"] in sample:
        masks = _instance_masks(sample[DETECTION_KEYS["masks"]], len(boxes), height, width)
        target["masks"] = masks
    for key, value in sample.items():
        per_box = "/bbox/" not in key and "/polygon/" not in key
        if key.startswith("image/object/") and key not in DETECTION_KEYS.values() and per_box:
            target[key.rsplit("/", 1)[-1]] = value
    tv = _tv_tensors()
    if tv is not None:
        image = tv.Image(image)
        target["boxes"] = tv.BoundingBoxes(boxes, format="XYXY", canvas_size=(height, width))
        if masks is not None:
            target["masks"] = tv.Mask(masks)
    return image, target


def _instance_masks(encoded: Any, count: int, height: int, width: int) -> torch.Tensor:
    """The ``[N, H, W]`` uint8 0 / 1 masks of image/object/mask's PNGs (any non-zero value is
    the object's, as the Object Detection API reads them), checked against boxes and image."""
    key = DETECTION_KEYS["masks"]
    if isinstance(encoded, bytes | bytearray | memoryview) or not isinstance(encoded, list | tuple):
        raise ValueError(f"{key!r} must be a list of encoded masks (detection_spec(masks=True))")
    if len(encoded) != count:
        raise ValueError(f"{count} boxes but {len(encoded)} masks in {key!r}")
    planes = []
    for number, data in enumerate(encoded):
        plane = decode_image(bytes(data), "unchanged")
        if plane.shape[0] != 1 or tuple(plane.shape[-2:]) != (height, width):
            raise ValueError(
                f"{key!r} mask {number} is {tuple(plane.shape)} (channels, height, width) but the image "
                f"is {height}x{width} (height x width): decode the image at its stored size"
            )
        planes.append(plane[0] != 0)
    if not planes:
        return torch.zeros((0, height, width), dtype=torch.uint8)
    return torch.stack(planes).to(torch.uint8)


@functools.cache
def _tv_tensors() -> Any:
    try:
        from torchvision import tv_tensors
    except (ImportError, RuntimeError, OSError):
        return None
    return tv_tensors


def segmentation_spec(*, objects: bool = False) -> dict[str, Any]:
    """The spec of segmentation records (what ``torch-tfrecord convert voc-segmentation``
    writes): the RGB image and its class mask (one channel of class indices, exact: a PNG);
    with ``objects``, the instance mask too."""
    from ..codec.spec import Image

    spec: dict[str, Any] = {
        SEGMENTATION_KEYS["image"]: Image("RGB"),
        SEGMENTATION_KEYS["class"]: Image("unchanged"),
    }
    if objects:
        spec[SEGMENTATION_KEYS["object"]] = Image("unchanged")
    return spec


def _mask_plane(sample: dict[str, Any], key: str, height: int, width: int) -> torch.Tensor:
    mask = sample[key]
    if not isinstance(mask, torch.Tensor) or mask.ndim != 3 or mask.shape[0] != 1:
        raise ValueError(f"{key!r} must be a decoded [1, H, W] mask (use tt.Image('unchanged'))")
    if tuple(mask.shape[-2:]) != (height, width):
        raise ValueError(f"{key!r} is {tuple(mask.shape[-2:])} but the image is {(height, width)}")
    return mask[0]


def to_segmentation_target(sample: dict[str, Any], *, instances: bool = False) -> tuple[torch.Tensor, Any]:
    """A decoded segmentation sample (see :func:`segmentation_spec`) as torchvision takes it.

    Without ``instances``: ``(image, mask)``, the mask ``[H, W]`` uint8 class indices (255:
    ignore), a ``tv_tensors.Mask`` so that ``transforms.v2`` crops and flips it with the image
    (nearest, no new values); cast it with ``.long()`` for a loss. With ``instances`` (needs
    the object mask): ``(image, {"boxes", "labels", "masks"})`` for Mask R-CNN, one entry per
    object index of the object mask: its pixels as a ``[N, H, W]`` uint8 mask, its box
    (pixel XYXY, a ``tv_tensors.BoundingBoxes``) and its class, the most common class index
    under it.
    """
    image = sample[SEGMENTATION_KEYS["image"]]
    if not isinstance(image, torch.Tensor) or image.ndim != 3:
        raise ValueError(f"{SEGMENTATION_KEYS['image']!r} must be a decoded [C, H, W] image tensor")
    height, width = int(image.shape[-2]), int(image.shape[-1])
    classes = _mask_plane(sample, SEGMENTATION_KEYS["class"], height, width)
    tv = _tv_tensors()
    if not instances:
        return (tv.Image(image), tv.Mask(classes)) if tv is not None else (image, classes)
    if SEGMENTATION_KEYS["object"] not in sample:
        raise ValueError(
            f"instances=True needs {SEGMENTATION_KEYS['object']!r} (segmentation_spec(objects=True))"
        )
    objects = _mask_plane(sample, SEGMENTATION_KEYS["object"], height, width)
    indices = [int(i) for i in torch.unique(objects).tolist() if i not in (0, VOID)]
    masks = (
        torch.stack([objects == i for i in indices]).to(torch.uint8)
        if indices
        else torch.zeros((0, height, width), dtype=torch.uint8)
    )
    labels, boxes = [], []
    for mask in masks.bool():
        under = classes[mask]
        under = under[(under != 0) & (under != VOID)]
        labels.append(int(torch.mode(under).values) if len(under) else 0)
        rows, cols = torch.nonzero(mask.any(dim=1)), torch.nonzero(mask.any(dim=0))
        boxes.append([int(cols[0]), int(rows[0]), int(cols[-1]) + 1, int(rows[-1]) + 1])
    target: dict[str, Any] = {
        "boxes": torch.tensor(boxes, dtype=torch.float32).reshape(-1, 4),
        "labels": torch.tensor(labels, dtype=torch.int64),
        "masks": masks,
    }
    if tv is not None:
        image = tv.Image(image)
        target["boxes"] = tv.BoundingBoxes(target["boxes"], format="XYXY", canvas_size=(height, width))
        target["masks"] = tv.Mask(masks)
    return image, target
