"""VOC segmentation masks: converted exactly, turned into torchvision targets that transforms keep aligned."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import torch_tfrecord as tt
from torch_tfrecord import convert
from torch_tfrecord.cli import main
from torch_tfrecord.vision import to_segmentation_target

Image = pytest.importorskip("PIL.Image")
v2 = pytest.importorskip("torchvision.transforms.v2")
tv_tensors = pytest.importorskip("torchvision.tv_tensors")

# A colour per class index, so that an image drawn from a mask says, pixel by pixel, which class it shows.
COLOURS = np.random.default_rng(0).integers(0, 256, (256, 3), dtype=np.uint8)


def voc_palette() -> list[int]:
    palette = []
    for i in range(256):  # VOC's bit-interleaved palette
        r = g = b = 0
        c = i
        for j in range(8):
            r |= ((c >> 0) & 1) << (7 - j)
            g |= ((c >> 1) & 1) << (7 - j)
            b |= ((c >> 2) & 1) << (7 - j)
            c >>= 3
        palette += [r, g, b]
    return palette


def masks(seed: int, height: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Class and object masks: rectangles of classes 1..20 with 255 borders, like VOC's."""
    rng = np.random.default_rng(seed)
    classes = np.zeros((height, width), np.uint8)
    objects = np.zeros((height, width), np.uint8)
    for k in range(1, 4):
        y0, x0 = rng.integers(0, height - 8), rng.integers(0, width - 8)
        y1, x1 = y0 + rng.integers(6, height - y0 + 1), x0 + rng.integers(6, width - x0 + 1)
        cls = int(rng.integers(1, 21))
        classes[y0:y1, x0:x1], objects[y0:y1, x0:x1] = 255, 255
        classes[y0 + 1 : y1 - 1, x0 + 1 : x1 - 1], objects[y0 + 1 : y1 - 1, x0 + 1 : x1 - 1] = cls, k
    return classes, objects


def write_voc(root, count: int = 3, *, bad_value: bool = False):
    for folder in ("JPEGImages", "SegmentationClass", "SegmentationObject", "ImageSets/Segmentation"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    expected = {}
    for i in range(count):
        name = f"2007_{i:06d}"
        classes, objects = masks(i, 40 + 4 * i, 56)
        if bad_value and i == 1:
            classes[0, 0] = 30
        # The image drawn from the mask, stored losslessly (PNG bytes under a .jpg name are fine
        # for the decoders): the alignment test compares its colours with the mask pixel by pixel.
        Image.fromarray(COLOURS[classes]).save(root / "JPEGImages" / f"{name}.jpg", format="PNG")
        for folder, array in (("SegmentationClass", classes), ("SegmentationObject", objects)):
            png = Image.fromarray(array, mode="P")
            png.putpalette(voc_palette())
            png.save(root / folder / f"{name}.png")
        expected[name] = (classes, objects)
    (root / "ImageSets/Segmentation/train.txt").write_text("".join(f"{n}\n" for n in list(expected)[:2]))
    return expected


def read(out, objects: bool = True) -> dict[str, dict]:
    spec = {**tt.segmentation_spec(objects=objects), "image/source_id": tt.FixedLen((), str)}
    dataset = tt.TFRecordDataset(str(out), spec=spec, shuffle=False)
    return {sample["image/source_id"]: sample for sample in dataset}


def test_masks_round_trip_exactly(tmp_path) -> None:
    expected = write_voc(tmp_path / "voc")
    result = convert.convert_voc_segmentation(str(tmp_path / "voc"), str(tmp_path / "out"), objects=True)
    assert result.total == 3
    label_map = convert.read_label_map(result.label_map)
    assert label_map.names[15] == "person" and len(label_map) == 20
    samples = read(tmp_path / "out")
    assert sorted(samples) == sorted(expected)
    for name, (classes, objects) in expected.items():
        sample = samples[name]
        assert torch.equal(sample["image/segmentation/class/encoded"][0], torch.from_numpy(classes))
        assert torch.equal(sample["image/segmentation/object/encoded"][0], torch.from_numpy(objects))
        assert torch.equal(sample["image/encoded"], torch.from_numpy(COLOURS[classes]).permute(2, 0, 1))


def test_cli_with_an_image_set(tmp_path, capsys) -> None:
    write_voc(tmp_path / "voc")
    args = ["convert", "voc-segmentation", str(tmp_path / "voc"), "--image-set", "train", "--out"]
    assert main([*args, str(tmp_path / "out"), "--quiet"]) == 0
    assert sorted(read(tmp_path / "out", objects=False)) == ["2007_000000", "2007_000001"]


def test_bad_masks_are_named(tmp_path) -> None:
    write_voc(tmp_path / "voc", bad_value=True)
    with pytest.raises(convert.ConversionError, match=r"2007_000001\.png' holds value 30, not a class id"):
        convert.convert_voc_segmentation(str(tmp_path / "voc"), str(tmp_path / "out"))
    Image.new("P", (9, 9)).save(tmp_path / "voc" / "SegmentationClass" / "2007_000001.png")
    with pytest.raises(convert.ConversionError, match=r"is 9x9 but its image is 56x44"):
        convert.convert_voc_segmentation(str(tmp_path / "voc"), str(tmp_path / "out2"))
    result = convert.convert_voc_segmentation(str(tmp_path / "voc"), str(tmp_path / "out3"), on_error="skip")
    assert result.total == 2 and len(result.skipped) == 1


def test_transforms_keep_image_and_mask_aligned(tmp_path) -> None:
    write_voc(tmp_path / "voc")
    convert.convert_voc_segmentation(str(tmp_path / "voc"), str(tmp_path / "out"))
    augment = v2.Compose(
        [
            v2.RandomCrop((32, 40), pad_if_needed=True, fill={tv_tensors.Image: 0, tv_tensors.Mask: 255}),
            v2.RandomHorizontalFlip(),
            v2.RandomResizedCrop((24, 24), interpolation=v2.InterpolationMode.NEAREST),
            v2.RandomVerticalFlip(),
        ]
    )
    lookup = torch.from_numpy(COLOURS).permute(1, 0)  # [3, 256]
    torch.manual_seed(0)
    for sample in read(tmp_path / "out", objects=False).values():
        image, mask = to_segmentation_target(sample)
        assert isinstance(mask, tv_tensors.Mask) and mask.shape == image.shape[-2:]
        for _ in range(10):
            moved_image, moved_mask = augment(image, mask)
            assert moved_mask.shape == (24, 24)
            drawn = lookup[:, moved_mask.long()]
            padded = moved_mask == 255
            assert torch.equal(moved_image[:, ~padded], drawn[:, ~padded])  # pixel by pixel


def test_instance_targets_from_the_object_mask(tmp_path) -> None:
    expected = write_voc(tmp_path / "voc", count=1)
    convert.convert_voc_segmentation(str(tmp_path / "voc"), str(tmp_path / "out"), objects=True)
    classes, objects = expected["2007_000000"]
    (sample,) = read(tmp_path / "out").values()
    image, target = to_segmentation_target(sample, instances=True)
    ids = sorted(set(np.unique(objects).tolist()) - {0, 255})
    assert len(target["masks"]) == len(ids) == len(target["labels"]) == len(target["boxes"])
    for k, mask, label, box in zip(ids, target["masks"], target["labels"], target["boxes"], strict=True):
        assert torch.equal(mask, torch.from_numpy(objects == k).to(torch.uint8))
        assert int(label) == int(classes[objects == k][0])
        rows, cols = np.nonzero(objects == k)
        assert box.tolist() == [cols.min(), rows.min(), cols.max() + 1, rows.max() + 1]
    assert isinstance(target["boxes"], tv_tensors.BoundingBoxes)
    _, flipped = v2.RandomHorizontalFlip(p=1)(image, target)
    assert torch.equal(flipped["masks"], target["masks"].flip(-1))
    with pytest.raises(ValueError, match="objects=True"):
        to_segmentation_target({k: v for k, v in sample.items() if "object" not in k}, instances=True)


def test_preview_tints_mask_pixels_and_adds_a_legend(tmp_path) -> None:
    from torch_tfrecord.vision.preview import render_grid

    expected = write_voc(tmp_path / "voc", count=1)
    convert.convert_voc_segmentation(str(tmp_path / "voc"), str(tmp_path / "out"))
    records = list(tt.read_records(str(tmp_path / "out" / "data-00000-of-00001.tfrecord")))
    sheet = np.asarray(render_grid(records, cell=56, class_names={15: "person"}))
    plain = np.asarray(
        render_grid([tt.encode_example({"image/encoded": records_image(records[0])})], cell=56)
    )
    classes, _ = expected["2007_000000"]
    assert sheet.shape[0] > plain.shape[0]  # the legend below the grid
    # The 56x40 image sits unscaled in its 56x56 cell: a class pixel is half the image's colour,
    # half the class colour; a background pixel is the image's.
    top = 8 + (56 - 40) // 2
    tile = sheet[top : top + 40, 8 : 8 + 56].astype(int)
    base = plain[top : top + 40, 8 : 8 + 56].astype(int)
    background, labelled = classes == 0, (classes != 0) & (classes != 255)
    assert np.array_equal(tile[background], base[background])
    assert np.abs(tile[labelled] - base[labelled]).max() > 20


def records_image(record: bytes) -> bytes:
    return tt.decode_example(record, {"image/encoded": tt.FixedLen((), bytes)})["image/encoded"]


def test_example_converts_voc_and_trains_a_torchvision_segmentation_model(tmp_path) -> None:
    pytest.importorskip("torchvision.models.segmentation")
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).parents[1] / "examples" / "train_segmentation.py"
    result = subprocess.run(
        [
            sys.executable,
            "-W",
            "error::UserWarning",
            str(script),
            "--workdir",
            "work",
            "--steps",
            "2",
            "--images",
            "8",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "trained 2 steps on (4, 3, 96, 96) batches" in result.stdout
    assert len(list((tmp_path / "work" / "tfrecord").glob("data-*.tfrecord"))) == 2
