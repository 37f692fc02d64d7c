"""Convert a small Pascal-VOC-style segmentation set to TFRecord and train a torchvision model on it.

    python examples/train_segmentation.py --workdir /tmp/segmentation --steps 20

(from any directory: only ``--workdir`` names a place, relative to where you run it)

The script draws a toy VOC tree (JPEGImages/ with rectangles and ellipses on noise,
SegmentationClass/ palette PNGs of their class indices with 255 borders, as VOC stores them),
converts it with ``torch_tfrecord.convert.convert_voc_segmentation`` (the same as
``torch-tfrecord convert voc-segmentation``), then trains torchvision's LR-ASPP (MobileNetV3
backbone, no pretrained weights, so nothing is downloaded) for a few steps on CPU, reading the
shards with ``TFRecordDataset(spec=tt.segmentation_spec())`` and
``tt.vision.to_segmentation_target``, with ``transforms.v2`` random crops and flips moving the
mask with the image. Needs torchvision and Pillow.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageDraw
from torch.utils.data import DataLoader

import torch_tfrecord as tt
from torch_tfrecord import convert
from torch_tfrecord.vision import VOID, to_segmentation_target

CLASSES = ("rectangle", "ellipse")
SIZE = 96


def make_voc(root: Path, images: int, seed: int = 0) -> None:
    """Draws ``images`` pictures and their class masks in the Pascal VOC layout under ``root``."""
    rng = np.random.default_rng(seed)
    for folder in ("JPEGImages", "SegmentationClass"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    for number in range(images):
        width, height = int(rng.integers(112, 160)), int(rng.integers(112, 160))
        picture = Image.fromarray(rng.integers(0, 80, (height, width, 3), dtype=np.uint8))
        mask = Image.new("P", (width, height), 0)
        draw_picture, draw_mask = ImageDraw.Draw(picture), ImageDraw.Draw(mask)
        for _ in range(int(rng.integers(1, 4))):
            w, h = int(rng.integers(24, width // 2)), int(rng.integers(24, height // 2))
            x, y = int(rng.integers(0, width - w)), int(rng.integers(0, height - h))
            label = int(rng.integers(1, len(CLASSES) + 1))
            shape = "rectangle" if label == 1 else "ellipse"
            box = (x, y, x + w - 1, y + h - 1)
            getattr(draw_picture, shape)(box, fill=tuple(int(c) for c in rng.integers(120, 256, 3)))
            getattr(draw_mask, shape)(box, fill=label, outline=VOID, width=2)  # VOC's void border
        name = f"2026_{number:06d}"
        picture.save(root / "JPEGImages" / f"{name}.jpg", quality=92)
        mask.putpalette([0, 0, 0, 128, 0, 0, 0, 128, 0] + [224, 224, 192] * 253)
        mask.save(root / "SegmentationClass" / f"{name}.png")


class SegmentationSamples:
    """A transform: decoded sample -> (image as float in [0, 1], int64 mask), cropped and flipped together."""

    def __init__(self) -> None:
        from torchvision import tv_tensors
        from torchvision.transforms import v2

        self.transforms = v2.Compose(
            [
                v2.RandomResizedCrop(SIZE, scale=(0.3, 1.0), antialias=True),  # the mask: nearest
                v2.RandomHorizontalFlip(),
                v2.ToDtype({tv_tensors.Image: torch.float32, "others": None}, scale=True),
            ]
        )

    def __call__(self, sample: dict[str, object]) -> tuple[torch.Tensor, torch.Tensor]:
        image, mask = to_segmentation_target(sample)  # type: ignore[arg-type]
        image, mask = self.transforms(image, mask)
        return image, mask.long()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--workdir",
        default="/tmp/torch-tfrecord-segmentation",
        help="where the toy VOC data and the shards go (default: /tmp/torch-tfrecord-segmentation)",
    )
    parser.add_argument("--images", type=int, default=24, help="toy images to draw (default: 24)")
    parser.add_argument("--steps", type=int, default=10, help="training steps (default: 10)")
    parser.add_argument("--batch-size", type=int, default=4, help="images per step (default: 4)")
    args = parser.parse_args()
    import torchvision

    torch.manual_seed(0)
    root = Path(args.workdir)
    make_voc(root / "voc", args.images)
    result = convert.convert_voc_segmentation(
        str(root / "voc"), str(root / "tfrecord"), label_map=convert.LabelMap.from_names(CLASSES), shards=2
    )
    print(f"converted: {result.records} records, classes {convert.read_label_map(result.label_map).names}")  # type: ignore[arg-type]

    dataset = tt.TFRecordDataset(
        result.shards[""],
        spec=tt.segmentation_spec(),
        transform=SegmentationSamples(),
        shuffle="global",
        seed=0,
    )
    loader = DataLoader(dataset, batch_size=args.batch_size, num_workers=2, collate_fn=tt.collate)
    model = torchvision.models.segmentation.lraspp_mobilenet_v3_large(
        weights=None, weights_backbone=None, num_classes=len(CLASSES) + 1
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train()
    step, epoch, losses = 0, 0, []
    while step < args.steps:
        dataset.set_epoch(epoch)
        for images, masks in loader:
            logits = model(images)["out"]
            loss = torch.nn.functional.cross_entropy(logits, masks, ignore_index=VOID)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            step += 1
            print(f"step {step:3d}  loss {losses[-1]:.3f}")
            if step == args.steps:
                break
        epoch += 1
    print(f"trained {step} steps on {tuple(images.shape)} batches: loss {losses[0]:.3f} -> {losses[-1]:.3f}")


if __name__ == "__main__":
    main()
