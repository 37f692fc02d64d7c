"""COCO JSON and Pascal VOC XML to TFRecord, in the TensorFlow Object Detection API layout.

Parsing the annotations is pure (JSON / XML text in, one :class:`DetectionTask` per image out);
reading the images and encoding happen per task, in worker processes. Boxes are checked against
the image's size read from its header: a box outside the image, an unknown class, a missing or
unreadable image each fail their record with a message that names the file and the record.
COCO's instance masks are rasterized there too, at the image's size (see ``masks.py``).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import xml.etree.ElementTree as ElementTree
from collections.abc import Mapping, Sequence
from typing import Any

from ..codec.label_map import LabelMap
from ._features import Box, encode_detection, load_image
from ._write import ConversionError
from .masks import instance_mask, mask_png

__all__ = ["DetectionTask", "coco_tasks", "encode_task", "voc_tasks"]

# Boxes may overshoot the image by this many pixels (rounding in labeling tools) and are clipped.
_TOLERANCE = 1.0


@dataclasses.dataclass(frozen=True)
class DetectionTask:
    """One image to convert: where it is, its boxes in pixels, and what to call it in errors."""

    path: str
    filename: str
    source_id: str
    boxes: tuple[Box, ...]
    where: str
    width: int | None = None  # as the annotations say, checked against the image
    height: int | None = None
    error: str | None = None  # found while parsing the annotations
    # COCO with masks: per box, its annotation's id and segmentation (polygons or RLE)
    masks: tuple[tuple[Any, Any], ...] | None = None


def _fail(task: DetectionTask, problem: str) -> ConversionError:
    return ConversionError(f"{task.where}: {problem}")


def encode_task(task: DetectionTask, *, reencode: bool, with_polygons: bool) -> bytes:
    """The serialized Example of one image, or a ConversionError naming file and record."""
    if task.error is not None:
        raise _fail(task, task.error)
    try:
        data, info = load_image(task.path, reencode)
    except FileNotFoundError:
        raise _fail(task, f"image file {task.path!r} does not exist") from None
    except (OSError, ValueError) as error:
        raise _fail(task, f"image file {task.path!r}: {error}") from None
    expected = (task.width, task.height)
    if task.width is not None and task.height is not None and (info.width, info.height) != expected:
        rotated = reencode and (info.height, info.width) == expected
        if not rotated:
            raise _fail(
                task,
                f"the annotations say {task.width}x{task.height} but {task.path!r} is "
                f"{info.width}x{info.height}",
            )
        if task.masks is not None:
            raise _fail(task, f"reencoding {task.path!r} rotates it (EXIF orientation): its masks would not")
    boxes = []
    for number, box in enumerate(task.boxes):
        if not (
            -_TOLERANCE <= box.x0 < box.x1 <= info.width + _TOLERANCE
            and -_TOLERANCE <= box.y0 < box.y1 <= info.height + _TOLERANCE
        ):
            raise _fail(
                task,
                f"box {number} ({box.text!r}: x {box.x0:g}..{box.x1:g}, y {box.y0:g}..{box.y1:g}) is empty "
                f"or lies outside the {info.width}x{info.height} image",
            )
        boxes.append(
            dataclasses.replace(
                box,
                x0=max(0.0, box.x0),
                y0=max(0.0, box.y0),
                x1=min(float(info.width), box.x1),
                y1=min(float(info.height), box.y1),
            )
        )
    masks = None
    if task.masks is not None:
        masks = []
        for annotation_id, segmentation in task.masks:
            try:
                masks.append(mask_png(instance_mask(segmentation, info.height, info.width)))
            except ValueError as problem:
                raise _fail(task, f"annotation {annotation_id}: {problem}") from None
    return encode_detection(
        data, info, task.filename, task.source_id, boxes, with_polygons=with_polygons, masks=masks
    )


def encoder(*, reencode: bool = False, with_polygons: bool = False) -> functools.partial[bytes]:
    """A picklable task encoder (for worker processes)."""
    return functools.partial(encode_task, reencode=reencode, with_polygons=with_polygons)


# ---------------------------------------------------------------- COCO


def coco_tasks(
    text: str,
    images_dir: str,
    *,
    source: str = "annotations.json",
    label_map: LabelMap | None = None,
    drop_empty: bool = False,
    with_polygons: bool = False,
    with_masks: bool = False,
) -> tuple[list[DetectionTask], LabelMap]:
    """One task per COCO image (sorted by image id) and the label map used; ``with_masks``
    gives each task its annotations' segmentations, rasterized when it is encoded.

    Without ``label_map``, the categories sorted by COCO id get contiguous ids from 1 (COCO's
    own ids have gaps); with one, categories are matched to it by name.

    Raises:
        ConversionError: the JSON is malformed, or a category is missing from ``label_map``.
    """
    try:
        coco = json.loads(text)
    except json.JSONDecodeError as error:
        raise ConversionError(
            f"{source}: not valid JSON: {error.msg} at line {error.lineno} column {error.colno}"
        ) from None
    if not isinstance(coco, dict) or not isinstance(coco.get("images"), list):
        raise ConversionError(f"{source}: not COCO annotations (no 'images' list)")
    categories = coco.get("categories") or []
    try:
        by_coco_id = {int(c["id"]): str(c["name"]) for c in categories}
    except (KeyError, TypeError, ValueError):
        raise ConversionError(f"{source}: every category needs an integer 'id' and a 'name'") from None
    if label_map is None:
        label_map = LabelMap.from_names(by_coco_id[i] for i in sorted(by_coco_id))
    contiguous: dict[int, int] = {}
    for coco_id, name in by_coco_id.items():
        label = label_map.id_of(name)
        if label is None:
            raise ConversionError(f"{source}: category {coco_id} {name!r} is not in the label map")
        contiguous[coco_id] = label
    annotations: dict[Any, list[dict[str, Any]]] = {}
    for number, annotation in enumerate(coco.get("annotations") or []):
        if not isinstance(annotation, dict) or not isinstance(annotation.get("image_id"), int | str):
            raise ConversionError(f"{source}: annotation {number} has no integer or string 'image_id'")
        annotations.setdefault(annotation["image_id"], []).append(annotation)
    for number, image in enumerate(coco["images"]):
        if not (isinstance(image, dict) and isinstance(image.get("file_name"), str)) or not isinstance(
            image.get("id"), int | str
        ):
            raise ConversionError(
                f"{source}: image entry {number} needs an integer or string 'id' and a 'file_name'"
            )
    tasks = []
    for image in sorted(coco["images"], key=lambda image: (isinstance(image["id"], str), image["id"])):
        where = f"{source} image id {image['id']} ({image['file_name']!r})"
        found = annotations.get(image["id"], [])
        if drop_empty and not found:
            continue
        boxes: list[Box] = []
        failure = None
        for annotation in found:
            try:
                boxes.append(_coco_box(annotation, contiguous, label_map, with_polygons))
            except (ValueError, TypeError) as problem:  # a field of the wrong type or value
                failure = f"annotation {annotation.get('id', '?')}: {problem}"
                break
        tasks.append(
            DetectionTask(
                path=os.path.join(images_dir, image["file_name"]),
                filename=os.path.basename(str(image["file_name"])),
                source_id=str(image["id"]),
                boxes=tuple(boxes),
                where=where,
                width=_int_or_none(image.get("width")),
                height=_int_or_none(image.get("height")),
                error=failure,
                masks=tuple((a.get("id", "?"), a.get("segmentation")) for a in found) if with_masks else None,
            )
        )
    return tasks, label_map


def _int_or_none(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _coco_box(
    annotation: Mapping[str, Any], labels: Mapping[int, int], label_map: LabelMap, with_polygons: bool
) -> Box:
    try:
        x, y, w, h = (float(v) for v in annotation["bbox"])
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"bbox {annotation.get('bbox')!r} is not [x, y, width, height]") from None
    category = annotation.get("category_id")
    if not isinstance(category, int) or category not in labels:
        raise ValueError(f"category_id {category!r} is not among the categories")
    label = labels[category]
    polygons: tuple[tuple[float, ...], ...] = ()
    segmentation = annotation.get("segmentation")
    if with_polygons and isinstance(segmentation, list):  # (RLE masks of crowds are not polygons)
        polygons = tuple(tuple(float(v) for v in polygon) for polygon in segmentation if len(polygon) >= 6)
    return Box(
        x0=x,
        y0=y,
        x1=x + w,
        y1=y + h,
        label=label,
        text=label_map.names[label],
        area=float(annotation["area"]) if "area" in annotation else None,
        is_crowd=int(bool(annotation.get("iscrowd", 0))),
        polygons=polygons,
    )


# ---------------------------------------------------------------- Pascal VOC


def voc_tasks(
    xml_files: Sequence[str],
    images_dir: str,
    *,
    label_map: LabelMap | None = None,
    drop_empty: bool = False,
) -> tuple[list[DetectionTask], LabelMap]:
    """One task per VOC XML file (in the order given) and the label map used (class names sorted,
    ids from 1, unless ``label_map`` is given).

    Raises:
        ConversionError: without ``label_map``, an XML file that does not parse (the classes
            cannot be known); with it, bad files fail only their own record.
    """
    parsed: list[tuple[str, Any, str | None]] = []
    for path in xml_files:
        try:
            root = ElementTree.parse(path).getroot()
            parsed.append((path, root, None))
        except ElementTree.ParseError as bad_xml:
            if label_map is None:
                raise ConversionError(f"{path}: malformed XML: {bad_xml}") from None
            parsed.append((path, None, f"malformed XML: {bad_xml}"))
        except OSError as unreadable:
            raise ConversionError(f"{path}: {unreadable.strerror or unreadable}") from None
    if label_map is None:
        names = sorted(
            {(o.findtext("name") or "").strip() for _, root, _ in parsed for o in root.iter("object")}
        )
        label_map = LabelMap.from_names(n for n in names if n)
    tasks = []
    for path, root, error in parsed:
        if root is None:
            tasks.append(
                DetectionTask(path, os.path.basename(path), os.path.basename(path), (), path, error=error)
            )
            continue
        filename = (root.findtext("filename") or "").strip() or os.path.splitext(os.path.basename(path))[
            0
        ] + ".jpg"
        boxes: list[Box] = []
        problem = None
        for number, obj in enumerate(root.iter("object")):
            try:
                boxes.append(_voc_box(obj, label_map))
            except (ValueError, TypeError) as bad:
                problem = f"object {number}: {bad}"
                break
        if drop_empty and not boxes and problem is None:
            continue
        size = root.find("size")
        tasks.append(
            DetectionTask(
                path=os.path.join(images_dir, filename),
                filename=filename,
                source_id=os.path.splitext(os.path.basename(path))[0],
                boxes=tuple(boxes),
                where=f"{path} ({filename!r})",
                width=_xml_int(size, "width"),
                height=_xml_int(size, "height"),
                error=problem,
            )
        )
    return tasks, label_map


def _xml_int(element: Any, tag: str) -> int | None:
    if element is None:
        return None
    try:
        value = int(float(element.findtext(tag) or ""))
    except ValueError:
        return None
    return value or None  # VOC files from some tools say 0 for "unknown"


def _voc_box(obj: Any, label_map: LabelMap) -> Box:
    name = (obj.findtext("name") or "").strip()
    label = label_map.id_of(name)
    if label is None:
        raise ValueError(f"class {name!r} is not in the label map")
    box = obj.find("bndbox")
    try:
        x0, y0, x1, y1 = (float(box.findtext(tag)) for tag in ("xmin", "ymin", "xmax", "ymax"))
    except (AttributeError, TypeError, ValueError):
        raise ValueError(f"{name!r} has no numeric bndbox xmin/ymin/xmax/ymax") from None
    return Box(
        x0=x0,
        y0=y0,
        x1=x1,
        y1=y1,
        label=label,
        text=name,
        difficult=int(obj.findtext("difficult") or 0),
        truncated=int(obj.findtext("truncated") or 0),
    )
