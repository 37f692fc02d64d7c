"""Converters: image folders, COCO, Pascal VOC and CSV to TFRecord, read back and checked.

Images are made with Pillow here (RGB and grayscale JPEG, RGBA PNG, CMYK JPEG, an
EXIF-rotated JPEG); tests/data/coco/instances.json is a hand-checked COCO file (a crowd
annotation, an image without annotations, category ids with a gap) whose expected values
below were worked out by hand.
"""

from __future__ import annotations

import io
import json
import multiprocessing
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import torch_tfrecord as tt
from torch_tfrecord import convert
from torch_tfrecord.convert._write import WriteOptions, write_records
from torch_tfrecord.support.processes import WorkerDiedError
from torch_tfrecord.vision import decode_image, to_detection_target

PIL = pytest.importorskip("PIL")
from PIL import Image as PILImage  # noqa: E402
from PIL import ImageOps  # noqa: E402

DATA = Path(__file__).parent / "data"


def _pattern(width: int, height: int, seed: int) -> PILImage.Image:
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 255, (height // 8 + 1, width // 8 + 1, 3), dtype=np.uint8)
    return PILImage.fromarray(np.kron(base, np.ones((8, 8, 1), dtype=np.uint8))[:height, :width])


def _save(image: PILImage.Image, path: Path, **kwargs: Any) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path, **kwargs)
    return path.read_bytes()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "photos"
    _save(_pattern(40, 30, 0), root / "cat" / "a.jpg", quality=90)
    _save(_pattern(33, 21, 1).convert("RGBA"), root / "cat" / "b.png")
    _save(_pattern(24, 24, 2).convert("L"), root / "dog" / "grey.jpg")
    _save(_pattern(32, 16, 3).convert("CMYK"), root / "dog" / "cmyk.jpg")
    exif = PILImage.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to display
    _save(_pattern(48, 16, 4), root / "dog" / "rotated.jpg", exif=exif)
    (root / "dog" / "notes.txt").write_text("not an image")
    return root


FOLDER_SPEC = {
    "image/encoded": tt.FixedLen((), bytes),
    "image/format": tt.FixedLen((), str),
    "image/height": tt.FixedLen((), torch.int64),
    "image/width": tt.FixedLen((), torch.int64),
    "image/filename": tt.FixedLen((), str),
    "image/class/label": tt.FixedLen((), torch.int64),
    "image/class/text": tt.FixedLen((), str),
}


def _read(paths: list[str], spec: dict[str, Any]) -> list[dict[str, Any]]:
    return list(tt.TFRecordDataset(paths, spec=spec, shuffle=False, drop_last=False))


def test_image_folder_stores_original_bytes_sizes_and_labels(folder: Path, tmp_path: Path) -> None:
    result = convert.convert_image_folder(str(folder), str(tmp_path / "out"), shards=2)
    assert result.records == {"": 5} and len(result.shards[""]) == 2 and result.skipped == []
    assert convert.read_label_map(str(tmp_path / "out" / "label_map.pbtxt")).names == {1: "cat", 2: "dog"}
    samples = _read(result.shards[""], FOLDER_SPEC)
    files = ["cat/a.jpg", "cat/b.png", "dog/cmyk.jpg", "dog/grey.jpg", "dog/rotated.jpg"]
    assert [s["image/filename"] for s in samples] == [f.split("/")[1] for f in files]
    for sample, name in zip(samples, files, strict=True):
        original = (folder / name).read_bytes()
        assert sample["image/encoded"] == original  # no re-encoding
        with PILImage.open(folder / name) as image:
            assert (int(sample["image/width"]), int(sample["image/height"])) == image.size
        assert sample["image/format"] == ("png" if name.endswith(".png") else "jpeg")
        assert sample["image/class/text"] == name.split("/")[0]
        assert int(sample["image/class/label"]) == (1 if name.startswith("cat") else 2)
    # Decoded through the Image spec: the pixels of the original file, whatever its mode.
    decoded = _read(result.shards[""], {"image/encoded": tt.Image("RGB")})
    for sample, name in zip(decoded, files, strict=True):
        assert torch.equal(sample["image/encoded"], decode_image((folder / name).read_bytes(), "RGB"))
        assert sample["image/encoded"].shape[0] == 3
    png = decoded[1]["image/encoded"]
    expected = np.asarray(PILImage.open(folder / "cat/b.png").convert("RGB")).transpose(2, 0, 1)
    assert np.array_equal(png.numpy(), expected)  # lossless: exact pixels
    # EXIF orientation is not applied: the stored 48x16 grid, as TensorFlow's decoder sees it.
    assert tuple(decoded[4]["image/encoded"].shape) == (3, 16, 48)


def test_reencode_applies_exif_orientation(folder: Path, tmp_path: Path) -> None:
    result = convert.convert_image_folder(str(folder), str(tmp_path / "out"), reencode=True)
    samples = _read(result.shards[""], {**FOLDER_SPEC, "image/encoded": tt.Image("RGB")})
    rotated = samples[4]
    assert (int(rotated["image/width"]), int(rotated["image/height"])) == (16, 48)
    with PILImage.open(folder / "dog/rotated.jpg") as image:
        upright = np.asarray(ImageOps.exif_transpose(image).convert("RGB")).transpose(2, 0, 1).astype(int)
    assert rotated["image/encoded"].shape == (3, 48, 16)
    assert np.abs(rotated["image/encoded"].numpy().astype(int) - upright).mean() < 8  # JPEG again
    assert samples[1]["image/format"] == "png"


def test_conversion_is_deterministic_across_jobs_and_splits_by_seed(folder: Path, tmp_path: Path) -> None:
    split = {"train": 0.6, "val": 0.4}
    one = convert.convert_image_folder(str(folder), str(tmp_path / "a"), split=split, seed=3, jobs=1)
    two = convert.convert_image_folder(str(folder), str(tmp_path / "b"), split=split, seed=3, jobs=2)
    assert one.records == {"train": 3, "val": 2} == two.records
    for first, second in zip(one.shards.values(), two.shards.values(), strict=True):
        for a, b in zip(first, second, strict=True):
            assert Path(a).read_bytes() == Path(b).read_bytes()
            assert Path(a + ".idx").read_bytes() == Path(b + ".idx").read_bytes()
    other = convert.convert_image_folder(str(folder), str(tmp_path / "c"), split=split, seed=4)
    names = {s: sorted(x["image/filename"] for x in _read(p, FOLDER_SPEC)) for s, p in other.shards.items()}
    assert sorted(names["train"] + names["val"]) == sorted(
        ["a.jpg", "b.png", "cmyk.jpg", "grey.jpg", "rotated.jpg"]
    )
    assert os.path.basename(one.shards["train"][0]) == "data-train-00000-of-00001.tfrecord"


def test_a_bad_image_stops_the_conversion_leaving_nothing_or_is_skipped(folder: Path, tmp_path: Path) -> None:
    (folder / "cat" / "broken.jpg").write_bytes(b"\xff\xd8\xff garbage")
    out = tmp_path / "out"
    with pytest.raises(convert.ConversionError, match=r"broken\.jpg.*not a readable image"):
        convert.convert_image_folder(str(folder), str(out), max_records_per_shard=1)
    assert not list(out.glob("*.tfrecord")) and not list(out.glob("*.idx"))
    result = convert.convert_image_folder(str(folder), str(out), on_error="skip", max_records_per_shard=2)
    assert result.records == {"": 5} and len(result.skipped) == 1 and "broken.jpg" in result.skipped[0]
    assert sum(1 for _ in tt.TFRecordDataset(str(out), spec=FOLDER_SPEC, shuffle=False)) == 5


# ---------------------------------------------------------------- COCO


@pytest.fixture
def coco_images(tmp_path: Path) -> Path:
    images = tmp_path / "images"
    _save(_pattern(200, 100, 5), images / "street.jpg")
    _save(_pattern(160, 120, 6), images / "park.png")
    _save(_pattern(64, 48, 7), images / "empty.jpg")
    return images


DETECTION = {
    **tt.detection_spec(extra=True),
    "image/encoded": tt.FixedLen((), bytes),
    "image/format": tt.FixedLen((), str),
    "image/object/polygon/vertices": tt.VarLen(torch.float32),
    "image/object/polygon/num_vertices": tt.VarLen(torch.int64),
    "image/object/polygon/object": tt.VarLen(torch.int64),
}


def test_coco_hand_checked_fixture(coco_images: Path, tmp_path: Path) -> None:
    result = convert.convert_coco(
        str(DATA / "coco" / "instances.json"), str(coco_images), str(tmp_path / "out"), segmentation=True
    )
    assert convert.read_label_map(result.label_map).names == {1: "person", 2: "car", 3: "dog"}  # type: ignore[arg-type]
    assert (tmp_path / "out" / "label_map.pbtxt").read_text() == (
        "item {\n  id: 1\n  name: 'person'\n}\n"
        "item {\n  id: 2\n  name: 'car'\n}\n"
        "item {\n  id: 3\n  name: 'dog'\n}\n"
    )
    park, empty, street = _read(result.shards[""], DETECTION)  # by image id: 3, 7, 12
    assert [s["image/source_id"] for s in (park, empty, street)] == ["3", "7", "12"]
    assert (park["image/filename"], int(park["image/width"]), int(park["image/height"])) == (
        "park.png",
        160,
        120,
    )
    assert park["image/format"] == "png" and park["image/encoded"] == (coco_images / "park.png").read_bytes()

    def column(sample: dict[str, Any], key: str) -> list[Any]:
        value = sample[key]
        return value.tolist() if isinstance(value, torch.Tensor) else list(value)

    assert column(park, "image/object/bbox/xmin") == [0.25]
    assert column(park, "image/object/bbox/xmax") == [0.75]
    assert column(park, "image/object/bbox/ymin") == [0.25]
    assert column(park, "image/object/bbox/ymax") == [0.75]
    assert column(park, "image/object/class/label") == [3] and column(park, "image/object/class/text") == [
        "dog"
    ]
    assert column(park, "image/object/area") == [4800.0] and column(park, "image/object/is_crowd") == [0]
    assert column(park, "image/object/polygon/vertices") == pytest.approx([0.25, 0.25, 0.75, 0.25, 0.5, 0.75])
    assert column(park, "image/object/polygon/num_vertices") == [3]

    assert column(empty, "image/object/bbox/xmin") == [] and column(empty, "image/object/class/label") == []

    assert column(street, "image/object/class/label") == [2, 1]
    assert column(street, "image/object/class/text") == ["car", "person"]
    assert column(street, "image/object/bbox/xmin") == pytest.approx([0.1, 0.75])
    assert column(street, "image/object/bbox/xmax") == pytest.approx([0.6, 1.0])
    assert column(street, "image/object/bbox/ymin") == pytest.approx([0.1, 0.0])
    assert column(street, "image/object/bbox/ymax") == pytest.approx([0.6, 1.0])
    assert column(street, "image/object/is_crowd") == [0, 1]
    assert column(street, "image/object/area") == [4000.0, 3100.5]
    # The crowd's RLE mask is not a polygon: only the car's polygon is stored.
    assert column(street, "image/object/polygon/vertices") == pytest.approx(
        [0.1, 0.1, 0.6, 0.1, 0.6, 0.6, 0.1, 0.6]
    )
    assert column(street, "image/object/polygon/object") == [0]

    dropped = convert.convert_coco(
        str(DATA / "coco" / "instances.json"), str(coco_images), str(tmp_path / "d"), drop_empty=True
    )
    assert dropped.records == {"": 2}


def test_coco_label_map_given_fixes_the_ids(coco_images: Path, tmp_path: Path) -> None:
    label_map = tmp_path / "label_map.pbtxt"
    label_map.write_text(
        "# ours\nitem { id: 5 name: 'car' }\n"
        "item {\n id: 2\n name: \"dog\"\n display_name: 'Dog'\n}\n"
        "item { id: 9 name: 'person' }\n"
    )
    result = convert.convert_coco(
        str(DATA / "coco" / "instances.json"),
        str(coco_images),
        str(tmp_path / "out"),
        label_map=str(label_map),
    )
    street = _read(result.shards[""], DETECTION)[2]
    assert street["image/object/class/label"].tolist() == [5, 9]
    assert convert.read_label_map(result.label_map).display_names == {2: "Dog"}  # type: ignore[arg-type]
    label_map.write_text("item { id: 1 name: 'car' }\n")
    with pytest.raises(
        convert.ConversionError, match=r"instances.json: category 18 'dog' is not in the label map"
    ):
        convert.convert_coco(
            str(DATA / "coco" / "instances.json"),
            str(coco_images),
            str(tmp_path / "x"),
            label_map=str(label_map),
        )


def _changed_coco(tmp_path: Path, change: Any) -> Path:
    """The hand-checked COCO file with ``change`` applied to its parsed JSON, written anew."""
    coco = json.loads((DATA / "coco" / "instances.json").read_text())
    change(coco)
    annotations = tmp_path / "changed.json"
    annotations.write_text(json.dumps(coco))
    return annotations


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda c: c["annotations"][0].update(bbox=[150, 10, 100, 50]),
            r"image id 12 \('street.jpg'\).*box 0 .*outside the 200x100 image",
        ),
        (
            lambda c: c["annotations"][2].update(category_id=2),
            r"image id 3 \('park.png'\).*annotation 103: category_id 2",
        ),
        (
            lambda c: c["images"][2].update(file_name="missing.jpg"),
            r"image id 7 \('missing.jpg'\).*does not exist",
        ),
        (
            lambda c: c["images"][0].update(width=201),
            r"image id 12.*annotations say 201x100 but .* is 200x100",
        ),
    ],
)
def test_coco_bad_input_names_the_file_and_record(
    coco_images: Path, tmp_path: Path, change: Any, message: str
) -> None:
    annotations = _changed_coco(tmp_path, change)
    out = tmp_path / "out"
    with pytest.raises(convert.ConversionError, match=message):
        convert.convert_coco(str(annotations), str(coco_images), str(out), jobs=2)
    assert not list(out.glob("*.tfrecord"))
    assert not multiprocessing.active_children()  # the encoding workers are gone with the error
    result = convert.convert_coco(str(annotations), str(coco_images), str(out), on_error="skip")
    assert result.records == {"": 2} and len(result.skipped) == 1


@pytest.mark.timeout(120)
def test_encoding_workers_do_not_inherit_the_callers_locks(tmp_path: Path) -> None:
    """A thread of the caller holds a lock the encoder takes: a forked worker would inherit it
    held and hang; the pool's spawned workers start clean (the caller's lock stays held)."""
    import encoders

    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with encoders.LOCK:
            held.set()
            release.wait()

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait()
    try:
        result = write_records(
            list(range(40)), encoders.encode_under_lock, WriteOptions(str(tmp_path), shards=3, jobs=2)
        )
    finally:
        release.set()
        holder.join()
    assert result.records == {"": 40}
    tasks = [int(r["task"][0]) for r in _read(result.shards[""], {"task": tt.FixedLen((1,), torch.int64)})]
    assert tasks == list(range(40))
    assert not multiprocessing.active_children()


def test_a_worker_that_dies_is_a_clear_error_and_leaves_nothing(tmp_path: Path) -> None:
    import encoders

    with pytest.raises(WorkerDiedError, match="worker process died.*killed.*__name__"):
        write_records(list(range(10)), encoders.die, WriteOptions(str(tmp_path / "out"), jobs=2))
    assert not list((tmp_path / "out").glob("*.tfrecord"))
    assert not multiprocessing.active_children()


_SCRIPT = """
import sys
from torch_tfrecord import convert

def main():
    result = convert.convert_csv(sys.argv[1], sys.argv[2], jobs=2)
    print("records", result.total)

{call}
"""


@pytest.mark.parametrize("guarded", [True, False])
def test_scripts_that_convert_in_parallel_need_the_main_guard(tmp_path: Path, guarded: bool) -> None:
    """Workers are spawned: with the guard a script converts; without it, each worker runs the
    script again, and the error says so (instead of a bare BrokenProcessPool)."""
    table = tmp_path / "rows.csv"
    table.write_text("id,name\n" + "".join(f"{i},n{i}\n" for i in range(50)))
    script = tmp_path / "convert_rows.py"
    call = 'if __name__ == "__main__":\n    main()' if guarded else "main()"
    script.write_text(_SCRIPT.format(call=call))
    out = tmp_path / "out"
    run = subprocess.run(
        [sys.executable, str(script), str(table), str(out)], capture_output=True, text=True, timeout=300
    )
    if guarded:
        assert run.returncode == 0, run.stderr
        assert run.stdout.split() == ["records", "50"]
    else:
        assert run.returncode != 0
        assert "WorkerDiedError" in run.stderr and 'lacks `if __name__ == "__main__":`' in run.stderr
        assert "current process has finished its bootstrapping phase" in run.stderr  # the worker's own error
        assert not list(out.glob("*.tfrecord"))


def test_coco_malformed_json(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"images": [')
    with pytest.raises(convert.ConversionError, match=r"bad\.json: not valid JSON.*line 1"):
        convert.convert_coco(str(bad), str(tmp_path), str(tmp_path / "out"))


def test_detection_records_to_torchvision_targets(coco_images: Path, tmp_path: Path) -> None:
    result = convert.convert_coco(
        str(DATA / "coco" / "instances.json"), str(coco_images), str(tmp_path / "out")
    )
    samples = _read(result.shards[""], tt.detection_spec())
    image, target = to_detection_target(samples[2])  # street.jpg: 200x100
    assert tuple(image.shape) == (3, 100, 200)
    assert torch.allclose(
        target["boxes"].as_subclass(torch.Tensor), torch.tensor([[20.0, 10, 120, 60], [150, 0, 200, 100]])
    )
    assert target["labels"].tolist() == [2, 1]
    tv_tensors = pytest.importorskip("torchvision.tv_tensors")
    transforms = pytest.importorskip("torchvision.transforms.v2")
    assert isinstance(target["boxes"], tv_tensors.BoundingBoxes) and target["boxes"].canvas_size == (100, 200)
    flipped_image, flipped = transforms.RandomHorizontalFlip(p=1.0)(image, target)
    assert torch.allclose(
        flipped["boxes"].as_subclass(torch.Tensor), torch.tensor([[80.0, 10, 180, 60], [0, 0, 50, 100]])
    )
    assert torch.equal(flipped_image, image.flip(-1))
    _, empty = to_detection_target(samples[1])
    assert tuple(empty["boxes"].shape) == (0, 4) and empty["labels"].tolist() == []


# ---------------------------------------------------------------- Pascal VOC


def _voc_xml(
    filename: str, width: int, height: int, objects: list[tuple[str, int, int, int, int, int, int]]
) -> str:
    parts = [
        f"<annotation><filename>{filename}</filename><size><width>{width}</width><height>{height}</height><depth>3</depth></size>"
    ]
    for name, x0, y0, x1, y1, difficult, truncated in objects:
        parts.append(
            f"<object><name>{name}</name><truncated>{truncated}</truncated><difficult>{difficult}</difficult>"
            f"<bndbox><xmin>{x0}</xmin><ymin>{y0}</ymin><xmax>{x1}</xmax><ymax>{y1}</ymax></bndbox></object>"
        )
    return "".join(parts) + "</annotation>"


def test_voc_root_converts_with_difficult_and_truncated(tmp_path: Path) -> None:
    root = tmp_path / "VOC2012"
    _save(_pattern(100, 50, 8), root / "JPEGImages" / "0001.jpg")
    _save(_pattern(80, 80, 9), root / "JPEGImages" / "0002.jpg")
    (root / "Annotations").mkdir()
    (root / "Annotations" / "0001.xml").write_text(
        _voc_xml("0001.jpg", 100, 50, [("horse", 10, 5, 60, 45, 0, 1), ("person", 50, 0, 100, 50, 1, 0)])
    )
    (root / "Annotations" / "0002.xml").write_text(
        _voc_xml("0002.jpg", 80, 80, [("person", 0, 0, 40, 20, 0, 0)])
    )
    result = convert.convert_voc(str(root), str(tmp_path / "out"))
    assert convert.read_label_map(result.label_map).names == {1: "horse", 2: "person"}  # type: ignore[arg-type]
    first, second = _read(result.shards[""], DETECTION)
    assert first["image/object/bbox/xmin"].tolist() == pytest.approx([0.1, 0.5])
    assert first["image/object/bbox/ymax"].tolist() == pytest.approx([0.9, 1.0])
    assert first["image/object/class/label"].tolist() == [1, 2]
    assert first["image/object/difficult"].tolist() == [0, 1] and first[
        "image/object/truncated"
    ].tolist() == [1, 0]
    assert second["image/source_id"] == "0002" and second["image/object/class/text"] == ["person"]
    (root / "Annotations" / "0003.xml").write_text("<annotation><filename>")
    with pytest.raises(convert.ConversionError, match=r"0003\.xml: malformed XML"):
        convert.convert_voc(str(root), str(tmp_path / "bad"))
    skipped = convert.convert_voc(
        str(root / "Annotations"),
        str(tmp_path / "skip"),
        str(root / "JPEGImages"),
        label_map=result.label_map,
        on_error="skip",
    )
    assert skipped.records == {"": 2} and "0003.xml" in skipped.skipped[0]


# ---------------------------------------------------------------- CSV


def test_csv_types_inferred_or_given_and_bad_rows_named(tmp_path: Path) -> None:
    table = tmp_path / "rows.csv"
    table.write_text('id,score,name,zip\n1,0.5,ann,01234\n2,,bob,02139\n3,2,"c, d",90210\n')
    result = convert.convert_csv(str(table), str(tmp_path / "out"), types={"zip": "bytes"})
    rows = list(tt.read_records(result.shards[""][0]))
    first = tt.decode_example(rows[0])
    assert first["id"].tolist() == [1] and first["score"].tolist() == [0.5]
    assert first["name"] == [b"ann"] and first["zip"] == [b"01234"]  # kept as text: leading zero
    assert "score" not in tt.decode_example(rows[1])  # empty cell: no feature
    assert tt.decode_example(rows[2])["name"] == [b"c, d"]
    assert tt.infer_spec(result.shards[""][0])["id"] == tt.FixedLen((), torch.int64)
    table.write_text("id,score\n1,0.5\n2,0.1,extra\n")
    with pytest.raises(convert.ConversionError, match=r"rows\.csv line 3: 3 fields, the header has 2"):
        convert.convert_csv(str(table), str(tmp_path / "bad"))
    table.write_text("id,score\n1,x\n")
    with pytest.raises(convert.ConversionError, match=r"line 2 column 'score': 'x' is not float"):
        convert.convert_csv(str(table), str(tmp_path / "bad"), types={"score": "float"})


# ---------------------------------------------------------------- label maps


def test_label_map_round_trip_and_errors() -> None:
    labels = convert.LabelMap({1: "cat", 3: "it's"}, {3: "It"})
    assert convert.LabelMap.decode(labels.encode()) == labels
    with pytest.raises(convert.LabelMapError, match="line 2: an item needs both"):
        convert.LabelMap.decode("item { id: 1 name: 'a' }\nitem { id: 2 }")
    with pytest.raises(convert.LabelMapError, match="names 'a' twice"):
        convert.LabelMap.decode("item { id: 1 name: 'a' }\nitem { id: 2 name: 'a' }")
    with pytest.raises(convert.LabelMapError, match="expected 'item"):
        convert.LabelMap.decode("garbage")


def test_example_converts_coco_and_trains_a_torchvision_detector(tmp_path: Path) -> None:
    pytest.importorskip("torchvision.models.detection")
    import subprocess
    import sys

    script = Path(__file__).parents[1] / "examples" / "train_detection.py"
    result = subprocess.run(
        [
            sys.executable,
            "-W",
            "error::UserWarning",
            str(script),
            "--workdir",
            "work",
            "--steps",
            "3",
            "--images",
            "12",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,  # from any directory, --workdir relative to it
    )
    assert result.returncode == 0, result.stderr[-3000:]
    tmp_path = tmp_path / "work"
    assert (
        "converted: {'train': 9, 'val': 3} records, classes {1: 'rectangle', 2: 'ellipse'}" in result.stdout
    )
    assert "trained 3 steps" in result.stdout
    assert (tmp_path / "tfrecord" / "label_map.pbtxt").exists()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda c: c["annotations"][0].update(image_id=[12]),
            r"annotation 0 has no integer or string 'image_id'",
        ),
        (lambda c: c["images"][1].update(file_name=5), r"image entry 1 needs an integer or string 'id'"),
        (lambda c: c["images"].append("street.jpg"), r"image entry 3 needs"),
        (
            lambda c: c["annotations"][2].update(segmentation=[7]),
            r"image id 3 .*annotation 103: object of type .int. has no len",
        ),
        (
            lambda c: c["annotations"][2].update(area=None),
            r"image id 3 .*annotation 103: float.. argument must be",
        ),
    ],
)
def test_coco_fields_of_the_wrong_type_are_conversion_errors(
    coco_images: Path, tmp_path: Path, change: Any, message: str
) -> None:
    annotations = _changed_coco(tmp_path, change)
    with pytest.raises(convert.ConversionError, match=message):
        convert.convert_coco(str(annotations), str(coco_images), str(tmp_path / "out"), segmentation=True)


def test_csv_column_types_are_checked(tmp_path: Path) -> None:
    table = tmp_path / "rows.csv"
    table.write_text("a,b\n1,2\n")
    with pytest.raises(
        convert.ConversionError, match=r"rows\.csv: column types must be one of int, float, bytes"
    ):
        convert.convert_csv(str(table), str(tmp_path / "out"), types={"a": "floaty"})
    with pytest.raises(convert.ConversionError, match="is not COLUMN:TYPE"):
        convert.parse_types("a:floaty")


def test_preview_names_the_record_whose_image_does_not_decode(tmp_path: Path) -> None:
    from torch_tfrecord.vision.preview import render_grid

    good = io.BytesIO()
    PILImage.new("RGB", (8, 8)).save(good, format="PNG")
    records = [
        tt.encode_example({"image/encoded": tt.BytesList([good.getvalue()])}),
        tt.encode_example({"image/encoded": tt.BytesList([b"\x89PNG\r\n\x1a\n broken"])}),
    ]
    with pytest.raises(tt.FeatureError, match=r"feature 'image/encoded' of record 1 of 'x.tfrecord'") as info:
        render_grid(records, locations=["record 0 of 'x.tfrecord'", "record 1 of 'x.tfrecord'"])
    assert info.value.key == "image/encoded"
    with pytest.raises(tt.FeatureError, match="none of the 1 records holds an image"):
        render_grid([tt.encode_example({"label": 1})])
