"""TFRecord files for the viewer's tests and benchmark: detection records (an image with one box),
segmentation records (an image with a class mask), a damaged copy, SequenceExamples."""

from __future__ import annotations

import io
import os
from pathlib import Path

from torch_tfrecord.codec.encode import encode_example
from torch_tfrecord.codec.label_map import LabelMap
from torch_tfrecord.proto.example_pb2 import SequenceExample
from torch_tfrecord.records.writer import RecordWriter

__all__ = [
    "BOX",
    "GREY",
    "INSTANCES",
    "damage_record",
    "write_detection",
    "write_empty_records",
    "write_instances",
    "write_segmentation",
    "write_sequences",
]

GREY = (128, 128, 128)
BOX = (0.25, 0.25, 0.75, 0.75)  # xmin, ymin, xmax, ymax of every detection record's box
NAMES = ["cat", "dog", "bird", "fish", "horse", "cow", "sheep"]


def _png(image: object) -> bytes:
    out = io.BytesIO()
    image.save(out, format="PNG")  # type: ignore[attr-defined]
    return out.getvalue()


def detection_record(number: int, width: int = 64, height: int = 48, padding: int = 0) -> bytes:
    """Record ``number``: a grey image, one box at :data:`BOX` of class ``number % 7 + 1``, a
    ``label`` of ``number % 5`` and a caption (and ``padding`` zero bytes, for size)."""
    from PIL import Image

    label = number % 7 + 1
    return encode_example(
        {
            "image/encoded": _png(Image.new("RGB", (width, height), GREY)),
            "image/object/bbox/xmin": [BOX[0]],
            "image/object/bbox/ymin": [BOX[1]],
            "image/object/bbox/xmax": [BOX[2]],
            "image/object/bbox/ymax": [BOX[3]],
            "image/object/class/label": [label],
            "label": number % 5,
            "caption": f"record number {number}",
            "score": [number / 10, 1.0],
            **({"padding": bytes(padding)} if padding else {}),
        }
    )


def write_detection(
    folder: Path,
    records: int = 60,
    name: str = "detection.tfrecord",
    padding: int = 0,
    size: tuple[int, int] = (64, 48),
) -> Path:
    """Detection records with their index and a label_map.pbtxt beside them."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    with RecordWriter(str(path)) as writer:
        for number in range(records):
            writer.write(detection_record(number, *size, padding=padding))
    (folder / "label_map.pbtxt").write_text(LabelMap.from_names(NAMES).encode())
    return path


def write_segmentation(folder: Path, records: int = 3) -> Path:
    """Segmentation records: a black 40x30 image whose class mask holds class 3 in the square
    x, y in [10, 20)."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "segmentation.tfrecord"
    mask = Image.new("L", (40, 30), 0)
    mask.paste(3, (10, 10, 20, 20))
    with RecordWriter(str(path)) as writer:
        for _ in range(records):
            writer.write(
                encode_example(
                    {
                        "image/encoded": _png(Image.new("RGB", (40, 30), (0, 0, 0))),
                        "image/segmentation/class/encoded": _png(mask),
                    }
                )
            )
    return path


# The instance record's two objects (both of class 1) in its grey 60x40 image: each box (pixels
# x0, y0, x1, y1) and the rectangle its mask covers inside the box.
INSTANCES = [((3, 4, 27, 36), (8, 10, 20, 30)), ((33, 4, 57, 36), (38, 10, 50, 30))]


def write_instances(folder: Path, scale: int = 1) -> Path:
    """One record with instance masks (image/object/mask: a PNG per object, 1 on the object, 0
    elsewhere, as the Object Detection API stores them): :data:`INSTANCES` in a grey 60x40 image
    (``scale`` times larger: the docs' screenshot)."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "instances.tfrecord"
    size = (60 * scale, 40 * scale)
    masks = []
    for _, rectangle in INSTANCES:
        mask = Image.new("L", size, 0)
        mask.paste(1, tuple(scale * c for c in rectangle))
        masks.append(_png(mask))
    boxes = [box for box, _ in INSTANCES]
    with RecordWriter(str(path)) as writer:
        writer.write(
            encode_example(
                {
                    "image/encoded": _png(Image.new("RGB", size, GREY)),
                    "image/object/bbox/xmin": [b[0] / 60 for b in boxes],
                    "image/object/bbox/ymin": [b[1] / 40 for b in boxes],
                    "image/object/bbox/xmax": [b[2] / 60 for b in boxes],
                    "image/object/bbox/ymax": [b[3] / 40 for b in boxes],
                    "image/object/class/label": [1, 1],
                    "image/object/mask": masks,
                }
            )
        )
    return path


def write_empty_records(path: Path, records: int) -> Path:
    """``records`` empty records (16 bytes each, written at once): a file whose index takes
    seconds to build, the header walk's slowest case, without its index."""
    with RecordWriter(str(path), write_index=False) as writer:
        writer.write(b"")
    path.write_bytes(path.read_bytes() * records)
    return path


def write_sequences(folder: Path, records: int = 4) -> Path:
    """SequenceExamples: a context ``id`` and a feature list ``tokens`` of 1 + number % 3 steps."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "sequences.tfrecord"
    with RecordWriter(str(path)) as writer:
        for number in range(records):
            message = SequenceExample()
            message.context.feature["id"].int64_list.value.append(number)
            for step in range(1 + number % 3):
                message.feature_lists.feature_list["tokens"].feature.add().int64_list.value.extend(
                    [step, step]
                )
            writer.write(message.SerializeToString())
    return path


def damage_record(path: Path, number: int) -> int:
    """Flips a byte in the payload of record ``number`` (its data CRC then fails); removes the
    index so that the viewer builds its own. Returns the record's offset."""
    data = bytearray(path.read_bytes())
    offset = 0
    for _ in range(number):
        length = int.from_bytes(data[offset : offset + 8], "little")
        offset += length + 16
    data[offset + 12 + 3] ^= 0xFF
    path.write_bytes(bytes(data))
    index = Path(str(path) + ".idx")
    if index.exists():
        os.remove(index)
    return offset
