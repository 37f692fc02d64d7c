"""COCO instance masks: rasterized exactly as pycocotools' own annToMask does, for polygons,
uncompressed (crowd) and compressed RLE, stored as the Object Detection API's PNGs, read back as
Mask R-CNN targets that transforms.v2 keeps aligned with the image and the boxes."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import torch_tfrecord as tt
from torch_tfrecord import convert
from torch_tfrecord.cli import main
from torch_tfrecord.convert.masks import instance_mask, rle_counts
from torch_tfrecord.vision import to_detection_target

PIL_Image = pytest.importorskip("PIL.Image")
mask_utils = pytest.importorskip("pycocotools.mask")
COCO = pytest.importorskip("pycocotools.coco").COCO

# pycocotools 2.0.x's own calls here (annToMask, encode) warn under numpy 2
pytestmark = pytest.mark.filterwarnings("ignore:__array__ implementation:DeprecationWarning")


def _blob(height: int, width: int, seed: int) -> np.ndarray:
    """A ragged mask: a random rectangle with random pixels punched out of it."""
    rng = np.random.default_rng(seed)
    mask = np.zeros((height, width), np.uint8)
    y0, x0 = int(rng.integers(0, height // 2)), int(rng.integers(0, width // 2))
    mask[y0 : y0 + height // 2, x0 : x0 + width // 2] = 1
    mask[rng.random((height, width)) < 0.2] = 0
    return mask


def _bbox(mask: np.ndarray) -> list[float]:
    return [float(v) for v in mask_utils.toBbox(mask_utils.encode(np.asfortranarray(mask)))]


def write_coco(root: Path) -> Path:
    """Images and a COCO file: street.png (48x32) with a two-polygon car, a compressed-RLE dog
    and an uncompressed-RLE crowd of people; empty.png with no objects. Each image's red
    channel is the bit set of the objects covering the pixel (bit k: its k-th annotation), its
    green channel 255: what the alignment test reads back after crops and flips."""
    images = root / "images"
    images.mkdir(parents=True)
    height, width = 32, 48
    compressed = mask_utils.encode(np.asfortranarray(_blob(height, width, 1)))
    crowd = _blob(height, width, 2)
    counts, value, run = [], 0, 0
    for pixel in crowd.flatten(order="F"):  # column-major runs, starting with zeros
        if pixel != value:
            counts.append(run)
            value, run = pixel, 0
        run += 1
    counts.append(run)
    segmentations: list[Any] = [
        [[2.5, 3, 20, 3, 20, 14.5, 2.5, 14.5], [30, 20, 44, 22, 37, 30]],  # car: two polygons
        {"size": [height, width], "counts": compressed["counts"].decode("ascii")},  # dog
        {"size": [height, width], "counts": counts},  # crowd of people
    ]
    annotations = []
    for number, (segmentation, category, crowd_flag) in enumerate(
        zip(segmentations, (3, 18, 1), (0, 0, 1), strict=True)
    ):
        annotations.append(
            {
                "id": 200 + number,
                "image_id": 12,
                "category_id": category,
                "iscrowd": crowd_flag,
                "segmentation": segmentation,
                "bbox": [0, 0, 1, 1],  # set below, from the mask
                "area": 1.0,
            }
        )
    coco = {
        "images": [
            {"id": 12, "file_name": "street.png", "width": width, "height": height},
            {"id": 30, "file_name": "empty.png", "width": 20, "height": 16},
        ],
        "categories": [{"id": 18, "name": "dog"}, {"id": 1, "name": "person"}, {"id": 3, "name": "car"}],
        "annotations": annotations,
    }
    path = root / "instances.json"
    path.write_text(json.dumps(coco))
    # The tight box of each mask as pycocotools rasterizes it, so boxes and masks agree exactly.
    truth = COCO(str(path))
    bits = np.zeros((height, width), np.uint8)
    for k, annotation in enumerate(annotations):
        mask = truth.annToMask(truth.anns[annotation["id"]])
        annotation["bbox"] = _bbox(mask)
        bits |= mask << k
    path.write_text(json.dumps(coco))
    rng = np.random.default_rng(0)
    pixels = np.stack([bits, np.full_like(bits, 255), rng.integers(0, 256, bits.shape, np.uint8)], -1)
    PIL_Image.fromarray(pixels).save(images / "street.png")
    PIL_Image.fromarray(np.full((16, 20, 3), 90, np.uint8)).save(images / "empty.png")
    return path


def read(out: Path) -> dict[str, dict[str, Any]]:
    spec = {**tt.detection_spec(masks=True, extra=True)}
    dataset = tt.TFRecordDataset(str(out / "*.tfrecord"), spec=spec, shuffle=False)
    return {sample["image/filename"]: sample for sample in dataset}


@pytest.fixture
def coco(tmp_path: Path) -> Path:
    return write_coco(tmp_path / "coco")


def test_masks_round_trip_exactly_as_pycocotools_draws_them(coco: Path, tmp_path: Path) -> None:
    result = convert.convert_coco(str(coco), str(coco.parent / "images"), str(tmp_path / "out"), masks=True)
    assert result.total == 2
    samples = read(tmp_path / "out")
    truth = COCO(str(coco))
    street = samples["street.png"]
    expected = [truth.annToMask(truth.anns[i]) for i in (200, 201, 202)]
    assert len(street["image/object/mask"]) == 3
    for png, mask in zip(street["image/object/mask"], expected, strict=True):
        assert mask.any() and not mask.all()
        stored = np.asarray(PIL_Image.open(io.BytesIO(png)))
        assert stored.dtype == np.uint8 and np.array_equal(stored, mask)  # 0 / 1, as the OD API writes
    assert street["image/object/is_crowd"].tolist() == [0, 0, 1]
    _, target = to_detection_target(street)
    assert target["masks"].dtype == torch.uint8 and tuple(target["masks"].shape) == (3, 32, 48)
    for got, mask in zip(target["masks"], expected, strict=True):
        assert torch.equal(got, torch.from_numpy(mask))
    assert target["labels"].tolist() == [2, 3, 1]  # car, dog, person: ids in the order of COCO ids
    assert "mask" not in target  # the PNGs are not passed along undecoded

    empty = samples["empty.png"]
    assert list(empty["image/object/mask"]) == []
    _, nothing = to_detection_target(empty)
    assert tuple(nothing["masks"].shape) == (0, 16, 20) and tuple(nothing["boxes"].shape) == (0, 4)

    again = convert.convert_coco(str(coco), str(coco.parent / "images"), str(tmp_path / "again"), masks=True)
    assert [Path(p).read_bytes() for p in again.shards[""]] == [
        Path(p).read_bytes() for p in result.shards[""]
    ]


def test_cli_masks_option(coco: Path, tmp_path: Path) -> None:
    args = ["convert", "coco", str(coco), str(coco.parent / "images"), "--out", str(tmp_path / "out")]
    assert main([*args, "--masks", "--quiet"]) == 0
    assert len(read(tmp_path / "out")["street.png"]["image/object/mask"]) == 3
    assert main([*args[:-1], str(tmp_path / "plain"), "--quiet"]) == 0
    plain = tt.TFRecordDataset(str(tmp_path / "plain" / "*.tfrecord"), shuffle=False)
    assert all("image/object/mask" not in sample for sample in plain)


def test_transforms_keep_image_boxes_and_masks_aligned(coco: Path, tmp_path: Path) -> None:
    v2 = pytest.importorskip("torchvision.transforms.v2")
    tv_tensors = pytest.importorskip("torchvision.tv_tensors")
    convert.convert_coco(str(coco), str(coco.parent / "images"), str(tmp_path / "out"), masks=True)
    image, target = to_detection_target(read(tmp_path / "out")["street.png"])
    assert isinstance(target["masks"], tv_tensors.Mask) and isinstance(
        target["boxes"], tv_tensors.BoundingBoxes
    )
    augment = v2.Compose(
        [
            v2.RandomCrop((24, 56), pad_if_needed=True, fill=0),  # narrower and wider than 32x48
            v2.RandomHorizontalFlip(),
            v2.RandomVerticalFlip(),
        ]
    )
    torch.manual_seed(0)
    for _ in range(20):
        moved_image, moved = augment(image, target)
        assert tuple(moved["masks"].shape) == (3, 24, 56)
        inside = moved_image[1] == 255  # padding is 0
        for k, (mask, box) in enumerate(zip(moved["masks"], moved["boxes"], strict=True)):
            drawn = (moved_image[0] >> k) & 1  # pixel by pixel: the object's bit of the image
            assert torch.equal(mask[inside], drawn[inside].to(torch.uint8))
            assert not mask[~inside].any()
            if mask.any():  # the box is the moved mask's tight box
                rows, cols = torch.nonzero(mask.any(1))[:, 0], torch.nonzero(mask.any(0))[:, 0]
                tight = [int(cols[0]), int(rows[0]), int(cols[-1]) + 1, int(rows[-1]) + 1]
                assert box.tolist() == tight


def _changed(coco: Path, change: Any) -> Path:
    data = json.loads(coco.read_text())
    change(data)
    path = coco.parent / "changed.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda c: c["annotations"][1]["segmentation"].update(size=[31, 48]),
            r"image id 12 \('street.png'\): annotation 201: RLE size 48x31 .* differs from the image's 48x32",
        ),
        (
            lambda c: c["annotations"][2]["segmentation"]["counts"].append(5),
            r"image id 12 \('street.png'\): annotation 202: RLE run lengths add up to 1541 pixels, not the "
            r"image's 1536",
        ),
        (
            lambda c: c["annotations"][2]["segmentation"]["counts"].__setitem__(0, -1),
            r"annotation 202: RLE 'counts' holds a negative run length",
        ),
        (
            lambda c: c["annotations"][1]["segmentation"].update(counts="05"),
            r"annotation 201: RLE run lengths add up to",
        ),
        (
            lambda c: c["annotations"][1]["segmentation"].update(counts="0a"),
            r"annotation 201: RLE 'counts' string ends inside a run length",
        ),
        (
            lambda c: c["annotations"][0].update(segmentation=[[1, 2, 3, 4, 5]]),
            r"image id 12 \('street.png'\): annotation 200: polygon 0 has 5 coordinates",
        ),
        (
            lambda c: c["annotations"][0].update(segmentation=[[1, 2, 3, 4]]),
            r"annotation 200: segmentation has no polygon of 3 or more points",
        ),
        (
            lambda c: c["annotations"][0].update(segmentation=[[1, 2, "x", 4, 5, 6]]),
            r"annotation 200: polygon 0 is not a list of finite numbers",
        ),
        (
            lambda c: c["annotations"][0].pop("segmentation"),
            r"annotation 200: no 'segmentation'",
        ),
    ],
)
def test_bad_segmentations_name_the_annotation_and_image(
    coco: Path, tmp_path: Path, change: Any, message: str
) -> None:
    changed = _changed(coco, change)
    images = str(coco.parent / "images")
    with pytest.raises(convert.ConversionError, match=message):
        convert.convert_coco(str(changed), images, str(tmp_path / "out"), masks=True)
    assert not list((tmp_path / "out").glob("*.tfrecord"))
    skipped = convert.convert_coco(str(changed), images, str(tmp_path / "skip"), masks=True, on_error="skip")
    assert skipped.total == 1 and len(skipped.skipped) == 1
    # Without masks the segmentation is not looked at.
    assert convert.convert_coco(str(changed), images, str(tmp_path / "plain")).total == 2


def test_degenerate_polygons_are_left_out_as_cocos_tools_do() -> None:
    square = [2, 2, 8, 2, 8, 8, 2, 8]
    with_line = instance_mask([[0, 0, 9, 9], square], 10, 10)
    assert np.array_equal(with_line, instance_mask([square], 10, 10)) and with_line.sum() > 0


def test_compressed_counts_decode_as_pycocotools_encodes_them() -> None:
    for seed in range(20):
        mask = _blob(17 + seed, 23, seed)
        encoded = mask_utils.encode(np.asfortranarray(mask))
        counts = rle_counts(encoded["counts"].decode("ascii"))
        assert sum(counts) == mask.size
        again = mask_utils.frPyObjects({"size": list(mask.shape), "counts": counts}, *mask.shape)
        assert again["counts"] == encoded["counts"]


def test_a_missing_pycocotools_names_the_extra(coco: Path, tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setitem(sys.modules, "pycocotools.mask", None)
    with pytest.raises(ImportError, match=r"pycocotools; install the 'coco' extra: pip install"):
        convert.convert_coco(str(coco), str(coco.parent / "images"), str(tmp_path / "out"), masks=True)


def test_masks_that_do_not_fit_the_image_are_named() -> None:
    image = torch.zeros((3, 8, 10), dtype=torch.uint8)
    sample = {
        "image/encoded": image,
        "image/object/bbox/xmin": torch.tensor([0.0]),
        "image/object/bbox/ymin": torch.tensor([0.0]),
        "image/object/bbox/xmax": torch.tensor([0.5]),
        "image/object/bbox/ymax": torch.tensor([0.5]),
        "image/object/class/label": torch.tensor([1]),
    }
    from torch_tfrecord.convert.masks import mask_png

    small = mask_png(np.ones((4, 5), np.uint8))
    with pytest.raises(ValueError, match=r"mask 0 is \(1, 4, 5\) .* but the image is 8x10"):
        to_detection_target({**sample, "image/object/mask": [small]})
    with pytest.raises(ValueError, match=r"1 boxes but 2 masks"):
        to_detection_target({**sample, "image/object/mask": [small, small]})
    big = mask_png(np.full((8, 10), 255, np.uint8))  # another writer's 0 / 255: non-zero is the object
    _, target = to_detection_target({**sample, "image/object/mask": [big]})
    assert target["masks"].as_subclass(torch.Tensor).unique().tolist() == [1]


def test_targets_train_a_torchvision_mask_rcnn(coco: Path, tmp_path: Path) -> None:
    """Mask R-CNN in training mode takes the targets as they are: its mask loss is computed."""
    detection = pytest.importorskip("torchvision.models.detection")
    v2 = pytest.importorskip("torchvision.transforms.v2")
    convert.convert_coco(str(coco), str(coco.parent / "images"), str(tmp_path / "out"), masks=True)
    image, target = to_detection_target(read(tmp_path / "out")["street.png"])
    image, target = v2.RandomHorizontalFlip(p=1)(image, target)
    torch.manual_seed(0)
    backbone = detection.backbone_utils.resnet_fpn_backbone(backbone_name="resnet18", weights=None)
    model = detection.MaskRCNN(backbone, num_classes=4, min_size=64, max_size=96)  # small: seconds on CPU
    model.train()
    losses = model([v2.functional.to_dtype(image, torch.float32, scale=True)], [target])
    assert "loss_mask" in losses and all(torch.isfinite(loss) for loss in losses.values())


def test_preview_tints_each_objects_pixels(coco: Path, tmp_path: Path) -> None:
    from torch_tfrecord.errors import FeatureError
    from torch_tfrecord.vision.preview import render_grid

    images = str(coco.parent / "images")
    sheets = []
    for name, masks in (("masks", True), ("plain", False)):
        result = convert.convert_coco(str(coco), images, str(tmp_path / name), masks=masks)
        (street,) = (r for r in tt.read_records(result.shards[""][0]) if b"street.png" in r)
        sheets.append(np.asarray(render_grid([street], cell=48)).astype(int))
    # The 48x32 image sits unscaled in its 48x48 cell: with masks, the pixels that change are
    # the objects', all of them but those the boxes and their tabs are drawn over in both.
    top = 8 + (48 - 32) // 2
    tinted, plain = (sheet[top : top + 32, 8 : 8 + 48] for sheet in sheets)
    truth = COCO(str(coco))
    covered = np.zeros((32, 48), bool)
    for annotation_id in (200, 201, 202):
        covered |= truth.annToMask(truth.anns[annotation_id]).astype(bool)
    changed = np.abs(tinted - plain).max(axis=-1) > 0
    shown = (plain == np.asarray(PIL_Image.open(coco.parent / "images" / "street.png"))).all(axis=-1)
    assert not changed[~covered].any() and changed[covered & shown].all() and (covered & shown).sum() >= 10
    bad = tt.encode_example({"image/encoded": (coco.parent / "images" / "street.png").read_bytes(),
                             "image/object/mask": [b"not a png"]})  # fmt: skip
    with pytest.raises(FeatureError, match=r"'image/object/mask' \(mask 0\) of record 0 is not a decodable"):
        render_grid([bad])


def test_reencoding_a_rotated_image_with_masks_is_refused(tmp_path: Path) -> None:
    """Annotations of the stored pixels (48x16) cannot follow the image that reencode turns
    upright (16x48); annotations of the upright image (16x48) can."""
    exif = PIL_Image.Exif()
    exif[0x0112] = 6  # displayed rotated by 90 degrees
    (tmp_path / "images").mkdir()
    PIL_Image.new("RGB", (48, 16), (9, 99, 199)).save(tmp_path / "images" / "turned.jpg", exif=exif)
    annotation = {"id": 5, "image_id": 1, "category_id": 1, "bbox": [1, 1, 5, 5]}
    annotation["segmentation"] = [[1, 1, 6, 1, 6, 6]]
    for width, height in ((48, 16), (16, 48)):
        coco = {
            "images": [{"id": 1, "file_name": "turned.jpg", "width": width, "height": height}],
            "categories": [{"id": 1, "name": "person"}],
            "annotations": [annotation],
        }
        (tmp_path / "instances.json").write_text(json.dumps(coco))
        args = (str(tmp_path / "instances.json"), str(tmp_path / "images"))
        out = str(tmp_path / f"{width}x{height}")
        if width == 48:
            with pytest.raises(
                convert.ConversionError, match=r"'turned.jpg'\): reencoding .* masks would not"
            ):
                convert.convert_coco(*args, out, reencode=True, masks=True)
        else:
            convert.convert_coco(*args, out, reencode=True, masks=True)
            (sample,) = tt.TFRecordDataset(out, spec=tt.detection_spec(masks=True))
            assert tuple(to_detection_target(sample)[1]["masks"].shape) == (1, 48, 16)


def test_example_trains_a_mask_rcnn_on_converted_masks(tmp_path: Path) -> None:
    pytest.importorskip("torchvision.models.detection")
    import subprocess

    script = Path(__file__).parents[1] / "examples" / "train_detection.py"
    command = [sys.executable, "-W", "error::UserWarning", str(script), "--workdir", "work", "--masks"]
    result = subprocess.run(
        [*command, "--steps", "2", "--images", "8"], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "loss_mask" in result.stdout and "trained 2 steps" in result.stdout
    assert "val masks: true (1, 108, 116)" in result.stdout  # the first val image's one object
