"""An image-classification folder (torchvision's ImageFolder layout: one sub-folder per class)."""

from __future__ import annotations

import dataclasses
import functools
import os

from ..codec.encode import BytesList, Int64List, encode_example
from ..codec.label_map import LabelMap
from ._features import load_image
from ._write import ConversionError

__all__ = ["IMAGE_SUFFIXES", "ImageTask", "encode_image_task", "image_folder_tasks"]

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff")


@dataclasses.dataclass(frozen=True)
class ImageTask:
    path: str
    label: int
    text: str


def image_folder_tasks(root: str, label_map: LabelMap | None = None) -> tuple[list[ImageTask], LabelMap]:
    """One task per image under ``root/<class>/`` (classes and files sorted by name).

    Raises:
        ConversionError: ``root`` has no class folder, or a folder is missing from ``label_map``.
    """
    try:
        classes = sorted(e.name for e in os.scandir(root) if e.is_dir() and not e.name.startswith("."))
    except FileNotFoundError:
        raise ConversionError(f"{root!r} does not exist") from None
    if not classes:
        raise ConversionError(f"{root!r} has no class sub-folders (expected ROOT/<class>/<image>)")
    if label_map is None:
        label_map = LabelMap.from_names(classes)
    tasks = []
    for name in classes:
        label = label_map.id_of(name)
        if label is None:
            raise ConversionError(f"class folder {os.path.join(root, name)!r} is not in the label map")
        folder = os.path.join(root, name)
        for dirpath, dirnames, filenames in sorted(os.walk(folder)):
            dirnames.sort()
            for filename in sorted(filenames):
                if filename.lower().endswith(IMAGE_SUFFIXES) and not filename.startswith("."):
                    tasks.append(ImageTask(os.path.join(dirpath, filename), label, name))
    return tasks, label_map


def encode_image_task(task: ImageTask, *, reencode: bool) -> bytes:
    try:
        data, info = load_image(task.path, reencode)
    except (OSError, ValueError) as error:
        raise ConversionError(f"image {task.path!r}: {error}") from None
    return encode_example(
        {
            "image/encoded": BytesList([data]),
            "image/format": BytesList([info.format.encode()]),
            "image/height": Int64List([info.height]),
            "image/width": Int64List([info.width]),
            "image/filename": BytesList([os.path.basename(task.path).encode()]),
            "image/class/label": Int64List([task.label]),
            "image/class/text": BytesList([task.text.encode()]),
        }
    )


def encoder(*, reencode: bool = False) -> functools.partial[bytes]:
    return functools.partial(encode_image_task, reencode=reencode)
