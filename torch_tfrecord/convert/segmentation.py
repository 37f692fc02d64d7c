"""Pascal VOC semantic (and instance) segmentation masks to TFRecord.

VOC stores masks as palette PNGs: the stored values are class indices (0 background, 255 the
"void" boundary), the palette only colours them. They are written as plain 8-bit grey PNGs of
those indices (lossless, the same values whatever decoder reads them), beside the image's own
bytes: image/segmentation/class/encoded and, with the instance masks of SegmentationObject/,
image/segmentation/object/encoded (object k's pixels hold k).
"""

from __future__ import annotations

import dataclasses
import functools
import io
import os

import numpy as np

from ..codec.encode import BytesList, Int64List, encode_example
from ..codec.label_map import LabelMap
from ._features import load_image
from ._images import pillow
from ._write import ConversionError

__all__ = ["VOC_CLASSES", "SegmentationTask", "encode_segmentation_task", "segmentation_tasks"]

VOC_CLASSES = (
    "aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair", "cow",
    "diningtable", "dog", "horse", "motorbike", "person", "pottedplant", "sheep", "sofa", "train",
    "tvmonitor",
)  # fmt: skip
"""Pascal VOC's classes, ids 1 to 20 in its masks (0 is background)."""

VOID = 255
"""The mask value of VOC's object boundaries and unlabelled pixels."""


@dataclasses.dataclass(frozen=True)
class SegmentationTask:
    """One image and its masks to convert."""

    image: str
    class_mask: str
    object_mask: str | None
    source_id: str
    classes: int  # the largest class index allowed in the mask


def segmentation_tasks(
    voc_dir: str, *, image_set: str | None = None, objects: bool = False, label_map: LabelMap | None = None
) -> tuple[list[SegmentationTask], LabelMap]:
    """One task per mask in ``voc_dir/SegmentationClass`` (or per id of
    ``ImageSets/Segmentation/{image_set}.txt``), with VOC's label map unless ``label_map``
    gives the class of each mask value (its ids).

    Raises:
        ConversionError: a folder or list is missing, or a listed mask does not exist.
    """
    class_dir = os.path.join(voc_dir, "SegmentationClass")
    object_dir = os.path.join(voc_dir, "SegmentationObject")
    if not os.path.isdir(class_dir):
        raise ConversionError(f"{voc_dir!r} has no SegmentationClass/ folder")
    if objects and not os.path.isdir(object_dir):
        raise ConversionError(f"{voc_dir!r} has no SegmentationObject/ folder (asked for instance masks)")
    if image_set is not None:
        listing = os.path.join(voc_dir, "ImageSets", "Segmentation", f"{image_set}.txt")
        try:
            with open(listing, encoding="utf-8") as f:
                ids = [line.split()[0] for line in f if line.strip()]
        except FileNotFoundError:
            raise ConversionError(f"image set {listing!r} does not exist") from None
    else:
        ids = sorted(name[:-4] for name in os.listdir(class_dir) if name.lower().endswith(".png"))
    if not ids:
        raise ConversionError(f"no masks in {class_dir!r}")
    if label_map is None:
        label_map = LabelMap.from_names(VOC_CLASSES)
    top = max(label_map.names, default=0)
    tasks = [
        SegmentationTask(
            image=os.path.join(voc_dir, "JPEGImages", f"{source_id}.jpg"),
            class_mask=os.path.join(class_dir, f"{source_id}.png"),
            object_mask=os.path.join(object_dir, f"{source_id}.png") if objects else None,
            source_id=source_id,
            classes=top,
        )
        for source_id in ids
    ]
    return tasks, label_map


def _mask_png(path: str, size: tuple[int, int], what: str, largest: int | None) -> bytes:
    """The mask's stored indices as a grey PNG, checked against the image's size and the classes."""
    image_module = pillow()
    try:
        with image_module.open(path) as mask:
            if mask.mode not in ("P", "L"):
                raise ConversionError(
                    f"{what} {path!r} is a {mask.mode} image: expected a palette or grey PNG of indices"
                )
            indices = np.asarray(mask)
    except FileNotFoundError:
        raise ConversionError(f"{what} {path!r} does not exist") from None
    except OSError as error:
        raise ConversionError(f"{what} {path!r}: {error}") from None
    if (indices.shape[1], indices.shape[0]) != size:
        raise ConversionError(
            f"{what} {path!r} is {indices.shape[1]}x{indices.shape[0]} but its image is {size[0]}x{size[1]}"
        )
    if largest is not None:
        bad = indices[(indices > largest) & (indices != VOID)]
        if bad.size:
            raise ConversionError(
                f"{what} {path!r} holds value {int(bad[0])}, not a class id (0..{largest}) nor {VOID}"
            )
    out = io.BytesIO()
    image_module.fromarray(indices.astype(np.uint8), mode="L").save(out, format="PNG")
    return out.getvalue()


def encode_segmentation_task(task: SegmentationTask, *, reencode: bool) -> bytes:
    """The serialized Example of one image and its masks, or a ConversionError naming the file."""
    try:
        data, info = load_image(task.image, reencode)
    except FileNotFoundError:
        raise ConversionError(f"image {task.image!r} (of mask {task.class_mask!r}) does not exist") from None
    except (OSError, ValueError) as error:
        raise ConversionError(f"image {task.image!r}: {error}") from None
    size = (info.width, info.height)
    features = {
        "image/encoded": BytesList([data]),
        "image/format": BytesList([info.format.encode()]),
        "image/height": Int64List([info.height]),
        "image/width": Int64List([info.width]),
        "image/filename": BytesList([os.path.basename(task.image).encode()]),
        "image/source_id": BytesList([task.source_id.encode()]),
        "image/segmentation/class/encoded": BytesList(
            [_mask_png(task.class_mask, size, "mask", task.classes)]
        ),
        "image/segmentation/class/format": BytesList([b"png"]),
    }
    if task.object_mask is not None:
        features["image/segmentation/object/encoded"] = BytesList(
            [_mask_png(task.object_mask, size, "object mask", None)]
        )
        features["image/segmentation/object/format"] = BytesList([b"png"])
    return encode_example(features)


def encoder(*, reencode: bool = False) -> functools.partial[bytes]:
    """A picklable task encoder (for worker processes)."""
    return functools.partial(encode_segmentation_task, reencode=reencode)
