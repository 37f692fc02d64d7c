"""Convert a small COCO-style dataset to TFRecord and train a torchvision detector on it.

    python examples/train_detection.py --workdir /tmp/detection --steps 20

(from any directory: only ``--workdir`` names a place, relative to where you run it)

The script first draws a toy COCO dataset (coloured rectangles and ellipses on noise, with
their boxes in a COCO ``instances.json``), converts it with ``torch_tfrecord.convert`` (the
same as ``torch-tfrecord convert coco``), then trains torchvision's Faster R-CNN
(MobileNetV3 backbone, no pretrained weights, so nothing is downloaded) for a few steps on CPU,
reading the shards with ``TFRecordDataset(spec=tt.detection_spec())`` and
``tt.vision.to_detection_target``, with torchvision.transforms.v2 flips moving the boxes along.
Needs torchvision and Pillow.

With ``--masks``, each shape's instance mask goes into the COCO file too (rectangles as
polygons, ellipses as compressed RLE), is converted with ``masks=True`` (``torch-tfrecord
convert coco --masks``: a PNG per object) and a Mask R-CNN (ResNet-18 FPN, no pretrained
weights) trains on boxes and masks, which the flips move along with the image. Needs
pycocotools too (the ``coco`` extra).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageDraw
from torch.utils.data import DataLoader

import torch_tfrecord as tt
from torch_tfrecord import convert
from torch_tfrecord.vision import to_detection_target

CATEGORIES = [{"id": 1, "name": "rectangle"}, {"id": 4, "name": "ellipse"}]  # COCO ids have gaps


def make_coco(root: Path, images: int, seed: int = 0, masks: bool = False) -> Path:
    """Draws ``images`` pictures under root/images and writes root/instances.json (with
    ``masks``, each shape's segmentation: the rectangle's polygon, the ellipse's drawn pixels
    as compressed RLE)."""
    rng = np.random.default_rng(seed)
    (root / "images").mkdir(parents=True, exist_ok=True)
    coco: dict[str, list[dict[str, object]]] = {"images": [], "annotations": [], "categories": CATEGORIES}
    for image_id in range(1, images + 1):
        width, height = int(rng.integers(96, 160)), int(rng.integers(96, 160))
        noise = rng.integers(0, 80, (height, width, 3), dtype=np.uint8)
        picture = Image.fromarray(noise)
        draw = ImageDraw.Draw(picture)
        for _ in range(int(rng.integers(1, 4))):
            w, h = int(rng.integers(16, width // 2)), int(rng.integers(16, height // 2))
            x, y = int(rng.integers(0, width - w)), int(rng.integers(0, height - h))
            category = CATEGORIES[int(rng.integers(0, 2))]
            colour = tuple(int(c) for c in rng.integers(120, 256, 3))
            shape = draw.rectangle if category["name"] == "rectangle" else draw.ellipse
            shape((x, y, x + w - 1, y + h - 1), fill=colour)
            annotation: dict[str, object] = {
                "id": len(coco["annotations"]) + 1,
                "image_id": image_id,
                "category_id": category["id"],
                "bbox": [x, y, w, h],
                "area": float(w * h),
                "iscrowd": 0,
            }
            if masks:
                annotation["segmentation"] = _segmentation(category["name"], x, y, w, h, width, height)
            coco["annotations"].append(annotation)
        name = f"{image_id:06d}.jpg"
        picture.save(root / "images" / name, quality=92)
        coco["images"].append({"id": image_id, "file_name": name, "width": width, "height": height})
    path = root / "instances.json"
    path.write_text(json.dumps(coco))
    return path


def _segmentation(shape: object, x: int, y: int, w: int, h: int, width: int, height: int) -> object:
    if shape == "rectangle":
        return [[x, y, x + w, y, x + w, y + h, x, y + h]]
    import pycocotools.mask

    drawn = Image.new("L", (width, height))
    ImageDraw.Draw(drawn).ellipse((x, y, x + w - 1, y + h - 1), fill=1)
    rle = pycocotools.mask.encode(np.asfortranarray(np.asarray(drawn, dtype=np.uint8)))
    return {"size": [height, width], "counts": rle["counts"].decode("ascii")}


def build_model(classes: int, masks: bool) -> torch.nn.Module:
    """Faster R-CNN (MobileNetV3), or with ``masks`` Mask R-CNN (ResNet-18 FPN); random weights."""
    from torchvision.models import detection

    if masks:
        # Batch norm that learns: the default frozen one suits pretrained weights only.
        backbone = detection.backbone_utils.resnet_fpn_backbone(
            backbone_name="resnet18", weights=None, norm_layer=torch.nn.BatchNorm2d, trainable_layers=5
        )
        return detection.MaskRCNN(backbone, num_classes=classes, min_size=160, max_size=160)
    return detection.fasterrcnn_mobilenet_v3_large_320_fpn(
        weights=None, weights_backbone=None, num_classes=classes, min_size=160, max_size=160
    )


class DetectionSamples:
    """A transform: decoded sample -> (image as float in [0, 1], target), randomly flipped."""

    def __init__(self) -> None:
        from torchvision.transforms import v2

        self.transforms = v2.Compose([v2.RandomHorizontalFlip(0.5), v2.ToDtype(torch.float32, scale=True)])

    def __call__(self, sample: dict[str, object]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        image, target = to_detection_target(sample)  # type: ignore[arg-type]
        return self.transforms(image, target)  # type: ignore[no-any-return]


def as_lists(batch: list[tuple[torch.Tensor, dict[str, torch.Tensor]]]) -> tuple[tuple[object, ...], ...]:
    """Detection models take lists: images of different sizes are not stacked."""
    return tuple(zip(*batch))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--workdir",
        default="/tmp/torch-tfrecord-detection",
        help="where the toy COCO data and the shards go (default: /tmp/torch-tfrecord-detection)",
    )
    parser.add_argument("--images", type=int, default=24, help="toy images to draw (default: 24)")
    parser.add_argument("--steps", type=int, default=10, help="training steps (default: 10)")
    parser.add_argument("--batch-size", type=int, default=4, help="images per step (default: 4)")
    parser.add_argument("--masks", action="store_true", help="instance masks: train a Mask R-CNN")
    args = parser.parse_args()

    torch.manual_seed(0)
    root = Path(args.workdir)
    annotations = make_coco(root / "coco", args.images, masks=args.masks)
    result = convert.convert_coco(
        str(annotations),
        str(root / "coco" / "images"),
        str(root / "tfrecord"),
        split={"train": 0.75, "val": 0.25},
        shards=2,
        jobs=min(2, os.cpu_count() or 1),
        masks=args.masks,
    )
    label_map = convert.read_label_map(result.label_map)  # type: ignore[arg-type]
    print(f"converted: {result.records} records, classes {label_map.names}")

    dataset = tt.TFRecordDataset(
        result.shards["train"],
        spec=tt.detection_spec(masks=args.masks),
        transform=DetectionSamples(),
        shuffle="global",
        seed=0,
    )
    loader = DataLoader(
        dataset, batch_size=args.batch_size, num_workers=2, collate_fn=lambda batch: tuple(zip(*batch))
    )
    model = build_model(len(label_map) + 1, args.masks)  # ids from 1; 0 is background
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    model.train()
    step, epoch, losses = 0, 0, []
    while step < args.steps:
        dataset.set_epoch(epoch)
        for images, targets in loader:
            loss_parts = model(list(images), list(targets))
            loss = sum(loss_parts.values())
            optimizer.zero_grad()
            loss.backward()  # type: ignore[union-attr]
            torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)  # random weights: tame the first steps
            optimizer.step()
            losses.append(loss.item())  # type: ignore[union-attr]
            step += 1
            print(
                f"step {step:3d}  loss {losses[-1]:.3f}  "
                + "  ".join(f"{k} {v.item():.3f}" for k, v in loss_parts.items())
            )
            if step == args.steps:
                break
        epoch += 1
    model.eval()
    val = tt.TFRecordDataset(
        result.shards["val"], spec=tt.detection_spec(masks=args.masks), shuffle=False, drop_last=False
    )
    with torch.no_grad():
        image, target = to_detection_target(next(iter(val)))
        prediction = model([image.float() / 255])[0]
    print(f"val image: {len(target['boxes'])} true boxes, {len(prediction['boxes'])} predicted")
    if args.masks:
        print(f"val masks: true {tuple(target['masks'].shape)}, predicted {tuple(prediction['masks'].shape)}")
    print(f"trained {step} steps: loss {losses[0]:.3f} -> {losses[-1]:.3f}")


if __name__ == "__main__":
    main()
