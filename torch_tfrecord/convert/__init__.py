"""Converters from the formats people label in to sharded, indexed TFRecord files.

    import torch_tfrecord.convert as ttc
    result = ttc.convert_coco("instances.json", "images/", "out/", split={"train": 0.9, "val": 0.1})

Every converter writes shards ``{out_dir}/{name}[-{split}]-00000-of-0000N.tfrecord`` with their
indexes, in parallel (``jobs``), deterministically (the same input gives the same bytes), all
or nothing (``on_error="raise"``) or leaving bad records out (``on_error="skip"``). The image
converters write ``label_map.pbtxt`` beside them, and take one (a path or a
:class:`LabelMap`) to fix the class ids. Needs Pillow (the ``convert`` extra).
"""

from __future__ import annotations

import glob
import os
from collections.abc import Mapping
from typing import Any

from ..codec.label_map import LabelMap, LabelMapError
from ..records.atomic import atomic_write
from ..records.io import StorageOptions, is_url, join
from ..records.remote import read_bytes, write_bytes
from ._write import ConversionError, ConversionResult, WriteOptions, write_records
from .detection import coco_tasks, voc_tasks
from .detection import encoder as detection_encoder
from .image_folder import encoder as image_encoder
from .image_folder import image_folder_tasks
from .masks import mask_api
from .segmentation import encoder as segmentation_encoder
from .segmentation import segmentation_tasks
from .table import csv_tasks, parse_types
from .table import encoder as row_encoder

__all__ = [
    "ConversionError",
    "ConversionResult",
    "LabelMap",
    "LabelMapError",
    "WriteOptions",
    "convert_coco",
    "convert_csv",
    "convert_image_folder",
    "convert_voc",
    "convert_voc_segmentation",
    "parse_types",
    "read_label_map",
    "write_label_map",
]

LABEL_MAP_NAME = "label_map.pbtxt"


def _read_text(path: str, storage_options: StorageOptions = None) -> str:
    if is_url(path):
        data = read_bytes(path, storage_options)
    else:
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            raise ConversionError(f"{path!r} does not exist") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise ConversionError(f"{path!r} is not UTF-8 text (byte {error.start})") from None


def read_label_map(path: str, storage_options: StorageOptions = None) -> LabelMap:
    """Reads a ``label_map.pbtxt`` file."""
    return LabelMap.decode(_read_text(path, storage_options), source=path)


def write_label_map(label_map: LabelMap, path: str, storage_options: StorageOptions = None) -> None:
    """Writes a ``label_map.pbtxt`` file (atomically)."""
    data = label_map.encode().encode()
    if is_url(path):
        write_bytes(path, data, storage_options)
        return
    with atomic_write(path) as f:
        f.write(data)


def _label_map(value: LabelMap | str | None, storage_options: StorageOptions) -> LabelMap | None:
    return read_label_map(value, storage_options) if isinstance(value, str) else value


def _finish(result: ConversionResult, label_map: LabelMap, options: WriteOptions) -> ConversionResult:
    path = join(options.out_dir, LABEL_MAP_NAME)
    write_label_map(label_map, path, options.storage_options)
    result.label_map = path
    return result


def _options(out_dir: str, write: Mapping[str, Any]) -> WriteOptions:
    return WriteOptions(out_dir=os.fspath(out_dir), **write)


def convert_image_folder(
    root: str, out_dir: str, *, label_map: LabelMap | str | None = None, reencode: bool = False, **write: Any
) -> ConversionResult:
    """Converts ``root/<class>/<image>`` (torchvision's ImageFolder layout).

    Each record: image/encoded (the file's bytes), image/format, image/height, image/width
    (from the header), image/filename, image/class/label (label map id, from 1) and
    image/class/text. ``write`` takes the fields of :class:`WriteOptions` (shards, split ...).
    """
    options = _options(out_dir, write)
    tasks, labels = image_folder_tasks(root, _label_map(label_map, options.storage_options))
    return _finish(write_records(tasks, image_encoder(reencode=reencode), options), labels, options)


def convert_coco(
    annotations: str,
    images_dir: str,
    out_dir: str,
    *,
    label_map: LabelMap | str | None = None,
    drop_empty: bool = False,
    segmentation: bool = False,
    masks: bool = False,
    reencode: bool = False,
    **write: Any,
) -> ConversionResult:
    """Converts COCO detection annotations, one record per image, in the Object Detection API
    layout: image/*, image/source_id (the COCO image id), image/object/bbox/{xmin,xmax,ymin,ymax}
    normalized to [0, 1], image/object/class/{label,text}, image/object/area,
    image/object/is_crowd; with ``segmentation``, the polygons as
    image/object/polygon/{vertices (normalized x, y pairs), num_vertices, object}; with
    ``masks``, each object's instance mask (from its polygons or RLE, crowds' too, rasterized
    by pycocotools: the ``coco`` extra) as image/object/mask, a PNG per box (0 / 1, the
    image's size), as the Object Detection API's ``create_coco_tf_record --include_masks``
    writes them. A malformed segmentation, or an RLE of another size than its image, fails
    its record. Decode with :func:`torch_tfrecord.vision.detection_spec` ``(masks=True)``.
    Images without annotations are kept unless ``drop_empty``.
    """
    if masks:
        mask_api()  # no pycocotools: the ImportError naming the extra, before any work
    options = _options(out_dir, write)
    text = _read_text(annotations, options.storage_options)
    tasks, labels = coco_tasks(
        text,
        images_dir,
        source=annotations,
        label_map=_label_map(label_map, options.storage_options),
        drop_empty=drop_empty,
        with_polygons=segmentation,
        with_masks=masks,
    )
    encode = detection_encoder(reencode=reencode, with_polygons=segmentation)
    return _finish(write_records(tasks, encode, options), labels, options)


def convert_voc(
    voc_dir: str,
    out_dir: str,
    images_dir: str | None = None,
    *,
    label_map: LabelMap | str | None = None,
    drop_empty: bool = False,
    reencode: bool = False,
    **write: Any,
) -> ConversionResult:
    """Converts Pascal VOC XML annotations, one record per XML file, in the layout of
    :func:`convert_coco` plus image/object/difficult and image/object/truncated.

    ``voc_dir`` is a VOC root (with ``Annotations/`` and ``JPEGImages/``) or a folder of XML
    files; ``images_dir`` defaults to ``voc_dir/JPEGImages``.
    """
    options = _options(out_dir, write)
    xml_dir = (
        os.path.join(voc_dir, "Annotations")
        if os.path.isdir(os.path.join(voc_dir, "Annotations"))
        else voc_dir
    )
    if images_dir is None:
        images_dir = os.path.join(voc_dir, "JPEGImages")
    xml_files = sorted(glob.glob(os.path.join(glob.escape(xml_dir), "*.xml")))
    if not xml_files:
        raise ConversionError(f"no .xml files in {xml_dir!r}")
    tasks, labels = voc_tasks(
        xml_files, images_dir, label_map=_label_map(label_map, options.storage_options), drop_empty=drop_empty
    )
    encode = detection_encoder(reencode=reencode)
    return _finish(write_records(tasks, encode, options), labels, options)


def convert_voc_segmentation(
    voc_dir: str,
    out_dir: str,
    *,
    image_set: str | None = None,
    objects: bool = False,
    label_map: LabelMap | str | None = None,
    reencode: bool = False,
    **write: Any,
) -> ConversionResult:
    """Converts Pascal VOC segmentation masks, one record per mask of ``voc_dir/SegmentationClass``
    (or per id of ``ImageSets/Segmentation/{image_set}.txt``), its image from ``JPEGImages/``.

    Each record: the image as :func:`convert_image_folder` stores it, image/source_id, and
    image/segmentation/class/encoded, a grey PNG of the mask's class indices (0 background,
    1..20 VOC's classes, or the ids of ``label_map``; 255 VOC's boundary); with ``objects``,
    image/segmentation/object/encoded, the instance indices of ``SegmentationObject/``. A mask
    value that is no class id fails its record. Decode with
    :func:`torch_tfrecord.vision.segmentation_spec`.
    """
    options = _options(out_dir, write)
    tasks, labels = segmentation_tasks(
        voc_dir,
        image_set=image_set,
        objects=objects,
        label_map=_label_map(label_map, options.storage_options),
    )
    return _finish(write_records(tasks, segmentation_encoder(reencode=reencode), options), labels, options)


def convert_csv(
    path: str, out_dir: str, *, types: Mapping[str, str] | None = None, delimiter: str = ",", **write: Any
) -> ConversionResult:
    """Converts a CSV file with a header line: one Example per row (see ``convert/table.py``)."""
    options = _options(out_dir, write)
    rows, header, column_types = csv_tasks(
        _read_text(path, options.storage_options), source=path, types=types, delimiter=delimiter
    )
    return write_records(rows, row_encoder(header, column_types, path), options)
