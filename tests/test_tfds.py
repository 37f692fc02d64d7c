"""TFDS directories read with no TensorFlow, compared with what tensorflow-datasets itself gives.

The directories under tests/data/tfds/ and the values ``tfds.as_numpy`` gave for every example
(expected/<name>/<split>.json + .npz) were written by tests/data/make_tfds_golden.py with real
tensorflow-datasets 4.9.10.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import torch_tfrecord as tt
from torch_tfrecord.integrations.tfds import UnsupportedFeatureError, boxes_to_xyxy, from_tfds, parse_split
from torch_tfrecord.integrations.tfds.info import TFDSFormatError, resolve_version_dir
from torch_tfrecord.integrations.tfds.splits import SplitError, SplitSlice, shard_ranges
from torch_tfrecord.records.shards.files import RecordFiles

DATA = Path(__file__).resolve().parent / "data" / "tfds"
FEATURES = DATA / "golden_features" / "1.0.0"
EPISODES = DATA / "golden_episodes" / "0.1.0"
# Image features (TFDS gives HWC, we give CHW) and which of them are JPEG.
IMAGES = {"jpeg", "png_gray", "frames_png", "video", "steps/observation/image"}
JPEG = {"jpeg"}
JPEG_TOLERANCE = 0  # from_tfds decodes with TF's fast DCT: see test_jpeg_pixels_against_tensorflow


def _expected(name: str, split: str) -> tuple[list[Any], Any]:
    folder = DATA / "expected" / name
    documents = json.loads((folder / f"{split}.json").read_text())
    return documents, np.load(folder / f"{split}.npz", allow_pickle=False)


def _file_order_ids(split: str) -> list[int]:
    """The ``id`` of each example in file order (TFDS shuffles examples by key as it writes)."""
    documents, arrays = _expected("golden_features", split)
    return [int(arrays[doc["id"]["npy"]]) for doc in documents]


def _to_numpy(value: torch.Tensor) -> np.ndarray:
    if value.dtype in (torch.uint16, torch.uint32, torch.uint64):
        return value.numpy()  # numpy has these types
    return value.numpy()


def _compare(ours: Any, expected: Any, arrays: Any, path: str, diffs: dict[str, int]) -> None:
    feature = path.split("/", 1)[1] if "/" in path else path
    if "npy" in expected:
        want = arrays[expected["npy"]]
        if want.dtype.kind == "S":  # strings of the steps of a nested Dataset, stacked by numpy
            assert [v.encode() if isinstance(v, str) else v for v in ours] == want.tolist(), path
            return
        assert isinstance(ours, torch.Tensor), (path, type(ours))
        got = _to_numpy(ours)
        if feature in IMAGES:
            got = np.moveaxis(got, -3, -1)  # CHW -> HWC
        assert got.dtype == want.dtype, (path, got.dtype, want.dtype)
        assert got.shape == want.shape, (path, got.shape, want.shape)
        if feature in JPEG:
            diffs[path] = int(np.abs(got.astype(int) - want.astype(int)).max(initial=0))
        else:
            np.testing.assert_array_equal(got, want, err_msg=path)
    elif "bytes" in expected:
        want_bytes = expected["bytes"].encode("latin-1")
        assert ours == (want_bytes.decode() if isinstance(ours, str) else want_bytes), path
    elif "bytes_list" in expected:
        want_list = [v.encode("latin-1") for v in expected["bytes_list"]]
        got_list = [v.encode() if isinstance(v, str) else v for v in ours]
        assert got_list == want_list, path
    elif "ragged" in expected:
        assert isinstance(ours, tt.Ragged), path
        assert ours.values.dtype == getattr(torch, expected["dtype"]), path
        assert ours.tolist() == expected["ragged"], path
    elif isinstance(expected.get("steps"), int):  # a nested Dataset: its step count and values
        if expected["steps"] == 0:
            for leaf in _leaves(ours):
                assert len(leaf) == 0, path
        else:
            _compare(ours, expected["value"], arrays, path, diffs)
    else:
        assert isinstance(ours, dict) and set(ours) == set(expected), (path, set(ours), set(expected))
        for key, value in expected.items():
            _compare(ours[key], value, arrays, f"{path}/{key}", diffs)


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [leaf for item in value.values() for leaf in _leaves(item)]
    return [value]


def _public(sample: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in sample.items() if k not in (tt.RECORD_ID_KEY, tt.PADDING_KEY)}


@pytest.mark.parametrize("split", ["train", "test"])
def test_every_connector_equals_tfds_as_numpy(split: str) -> None:
    documents, arrays = _expected("golden_features", split)
    ds = from_tfds(FEATURES, split, shuffle=False, drop_last=False)
    samples = list(ds)
    assert len(ds) == len(samples) == len(documents) == (24 if split == "train" else 10)
    diffs: dict[str, int] = {}
    for i, (sample, expected) in enumerate(zip(samples, documents, strict=True)):
        assert sample[tt.RECORD_ID_KEY] == i and not sample[tt.PADDING_KEY]
        _compare(_public(sample), expected, arrays, str(i), diffs)
    assert diffs and max(diffs.values()) <= JPEG_TOLERANCE, diffs


def test_map_style_twin_gives_the_same_samples() -> None:
    ds = from_tfds(FEATURES, "test", indexed=True)
    assert isinstance(ds, tt.IndexedTFRecordDataset) and len(ds) == 10
    documents, arrays = _expected("golden_features", "test")
    diffs: dict[str, int] = {}
    for i in (9, 0, 4):
        _compare(ds[i], documents[i], arrays, str(i), diffs)
    batch = ds.__getitems__([3, 1])
    test_ids = _file_order_ids("test")
    assert [int(s["id"]) for s in batch] == [test_ids[3], test_ids[1]]


def test_rlds_episodes_decode_to_nested_tensors_per_episode() -> None:
    documents, arrays = _expected("golden_episodes", "train")
    ds = from_tfds(EPISODES, "train", shuffle=False, drop_last=False)
    episodes = [_public(e) for e in ds]
    assert len(episodes) == 6
    for i, (episode, expected) in enumerate(zip(episodes, documents, strict=True)):
        _compare(episode, expected, arrays, str(i), {})
    empty = episodes[[d["steps"]["steps"] for d in documents].index(0)]
    assert empty["steps"]["observation"]["image"].shape == (0, 3, 4, 4)
    assert empty["steps"]["action"].shape == (0, 2)


def test_batches_hold_the_samples_values() -> None:
    samples = [_public(s) for s in from_tfds(FEATURES, "train", shuffle=False)]
    batches = list(from_tfds(FEATURES, "train", shuffle=False, batch_size=5, drop_last=True))
    assert len(batches) == 4
    batch = batches[1]
    rows = samples[5:10]
    assert batch["id"].tolist() == [int(r["id"]) for r in rows]
    assert isinstance(batch["objects"]["bbox"], tt.Ragged)  # Sequence: steps vary per record
    for k, row in enumerate(rows):
        assert torch.equal(batch["objects"]["bbox"][k], row["objects"]["bbox"])
        assert torch.equal(batch["frames_png"][k], row["frames_png"])
        assert torch.equal(batch["video"][k], row["video"])
        assert torch.equal(batch["jpeg"][k], row["jpeg"])  # a list: image sizes vary
        assert batch["points"][k].tolist() == row["points"].tolist()
        assert torch.equal(batch["tensors"]["bytes_u8"][k], row["tensors"]["bytes_u8"])
        assert batch["objects"]["name"][k] == row["objects"]["name"]
        assert batch["text"][k] == row["text"]
    assert batch["png_gray"].shape == (5, 1, 8, 6)  # a static image shape stacks
    assert batch["fixed_seq"].shape == (5, 3, 2)
    assert batch["tensors"]["u16"].dtype == torch.uint16
    assert batch["empty"].values.numel() == 0 and batch["empty"].lengths.tolist() == [0] * 5


def test_jpeg_pixels_against_tensorflow() -> None:
    # TFDS decodes with tf.image.decode_image: TensorFlow's default fast integer DCT, which
    # from_tfds uses too (dct="fast"): the same values on these 24 JPEGs. With dct="accurate"
    # (TF's INTEGER_ACCURATE, torchvision's and Pillow's pixels), measured on these small noisy
    # q95 images: 90.8% of values differ, by 3.3 levels on average, at most 13
    # (docs/tensorflow.md: at most 15 at q95 on a large image).
    documents, arrays = _expected("golden_features", "train")
    for dct in ("fast", None):
        exact = from_tfds(FEATURES, "train", indexed=True, **({"dct": dct} if dct else {}))
        for i, doc in enumerate(documents):
            want = arrays[doc["jpeg"]["npy"]]
            np.testing.assert_array_equal(exact[i]["jpeg"].permute(1, 2, 0).numpy(), want)
    ds = from_tfds(FEATURES, "train", indexed=True, dct="accurate")
    differences = np.concatenate(
        [
            np.abs(
                ds[i]["jpeg"].permute(1, 2, 0).numpy().astype(int) - arrays[doc["jpeg"]["npy"]].astype(int)
            ).ravel()
            for i, doc in enumerate(documents)
        ]
    )
    assert int(differences.max()) == 13
    assert 0.85 < float(np.mean(differences > 0)) < 0.95
    assert 3.0 < float(differences.mean()) < 3.7


def test_class_label_names_and_metadata() -> None:
    ds = from_tfds(FEATURES, "train")
    assert ds.features["label"].names == ("cat", "dog", "bird")
    assert ds.features["objects"]["label"].names == ("cat", "dog", "bird")
    assert ds.features["objects/label"].int2str(2) == "bird"
    assert ds.features["audio"].sample_rate == 8000
    assert ds.info.splits["train"].shard_lengths == (8, 8, 8)
    assert ds.info.supervised_keys == ("jpeg", "label")
    assert "golden_features 1.0.0 'train'" in repr(ds)


def test_boxes_to_xyxy_pixels() -> None:
    sample = from_tfds(FEATURES, "train", indexed=True)[0]
    height, width = sample["jpeg"].shape[-2:]
    boxes = boxes_to_xyxy(sample["objects"]["bbox"], height, width)
    ymin, xmin, ymax, xmax = sample["objects"]["bbox"].unbind(-1)
    assert torch.equal(boxes, torch.stack([xmin * width, ymin * height, xmax * width, ymax * height], -1))
    with pytest.raises(ValueError, match=r"\[\.\.\., 4\]"):
        boxes_to_xyxy(torch.zeros(3), 10, 10)


SPLIT_IDS = json.loads((DATA / "expected" / "golden_features" / "splits.json").read_text())


@pytest.mark.parametrize("split", sorted(SPLIT_IDS))
def test_split_slices_read_what_tfds_reads(split: str) -> None:
    ds = from_tfds(FEATURES, split, shuffle=False, drop_last=False)
    assert len(ds) == ds.num_records == len(SPLIT_IDS[split])
    assert [int(s["id"]) for s in ds] == SPLIT_IDS[split]


def test_split_strings_follow_tfds() -> None:
    splits = {"train": [8, 8, 8], "test": [3, 4, 3]}
    assert parse_split("train[:50%]", splits) == [SplitSlice("train", 0, 12)]
    assert parse_split("test[:25%]", splits) == [SplitSlice("test", 0, 2)]  # round(2.5): to even
    assert parse_split("test[-20%:]", splits) == [SplitSlice("test", 8, 10)]
    assert parse_split("all", splits) == [SplitSlice("train", 0, 24), SplitSlice("test", 0, 10)]
    assert parse_split("train[20:10]", splits) == [SplitSlice("train", 20, 20)]  # empty, as in TFDS
    cut = shard_ranges([SplitSlice("train", 6, 17)], splits)
    assert [(r.shard, r.start, r.stop) for r in cut] == [(0, 6, 8), (1, 0, 8), (2, 0, 1)]
    for bad, message in [
        ("valid", "no split 'valid'"),
        ("train[:30]", "does not fit"),
        ("train[5]", "take a slice"),
        ("train[1:2:3]", "cannot read"),
        ("train[1.2.3%:]", "not a number"),
        ("", "non-empty"),
    ]:
        with pytest.raises(SplitError, match=message):
            parse_split(bad, splits)


def test_record_files_select_reads_ranges_and_fingerprints_them(tmp_path: Path) -> None:
    with tt.ShardedExampleWriter(str(tmp_path / "d"), max_records=5) as writer:
        for i in range(10):
            writer.write(b"%d" % i)
    files = RecordFiles.from_sources(writer.shard_paths)
    part = files.keep_ranges([(1, 1, 4), (0, 0, 2), (1, 4, 5)])
    assert part.shard_sizes == (3, 2, 1)
    assert part.read(np.arange(6)) == [b"6", b"7", b"8", b"0", b"1", b"9"]
    other = files.keep_ranges([(1, 2, 5), (0, 0, 2), (1, 4, 5)])
    assert part.fingerprint != other.fingerprint  # same counts, other records
    assert files.keep_ranges([(0, 0, 5), (1, 0, 5)]).fingerprint == files.fingerprint
    with pytest.raises(ValueError, match="not within the 5 records"):
        files.keep_ranges([(0, 3, 6)])
    with pytest.raises(IndexError, match="shard 2 out of range"):
        files.keep_ranges([(2, 0, 1)])


def test_versions_and_names_resolve(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    shutil.copytree(DATA / "golden_features", data_dir / "golden_features" / "configA")
    older = data_dir / "golden_features" / "configA" / "0.9.0"
    older.mkdir()
    (older / "dataset_info.json").write_text("{}")
    newest = str(data_dir / "golden_features" / "configA" / "1.0.0")
    assert resolve_version_dir(data_dir, "golden_features/configA") == newest
    assert resolve_version_dir(data_dir / "golden_features" / "configA") == newest
    assert resolve_version_dir(data_dir, "golden_features/configA:1.0.0") == newest
    with pytest.raises(tt.SourceNotFoundError, match=r"no version '2.0.0'.*\['0.9.0', '1.0.0'\]"):
        resolve_version_dir(data_dir, "golden_features/configA:2.0.0")
    with pytest.raises(tt.SourceNotFoundError, match="no prepared TFDS version"):
        resolve_version_dir(data_dir, "missing")
    ds = from_tfds(data_dir, "test[:3]", name="golden_features/configA", shuffle=False)
    assert [int(s["id"]) for s in ds] == _file_order_ids("test")[:3]


def _copy(tmp_path: Path) -> Path:
    target = tmp_path / "golden_features" / "1.0.0"
    shutil.copytree(FEATURES, target)
    return target


def test_unsupported_connector_is_named_at_construction(tmp_path: Path) -> None:
    target = _copy(tmp_path)
    document = json.loads((target / "features.json").read_text())
    document["featuresDict"]["features"]["mask"] = {
        "pythonClassName": "tensorflow_datasets.core.features.labeled_image.LabeledImage",
        "labeledImage": {"shape": {"dimensions": ["-1", "-1", "1"]}},
    }
    (target / "features.json").write_text(json.dumps(document))
    with pytest.raises(UnsupportedFeatureError, match=r"feature 'mask'.*LabeledImage"):
        from_tfds(target, "train")
    document["featuresDict"]["features"]["mask"] = {
        "pythonClassName": "tensorflow_datasets.core.features.image_feature.Image",
        "image": {"dtype": "float32", "encodingFormat": "png", "shape": {"dimensions": ["2", "2", "3"]}},
    }
    (target / "features.json").write_text(json.dumps(document))
    # TFDS writes uint8, uint16 and one-channel float32 images (issue 32 reads them all).
    with pytest.raises(UnsupportedFeatureError, match=r"feature 'mask'.*Image of dtype float32"):
        from_tfds(target, "train")


def test_metadata_that_disagrees_with_the_shards_is_an_error(tmp_path: Path) -> None:
    target = _copy(tmp_path)
    info = json.loads((target / "dataset_info.json").read_text())
    info["splits"][0]["shardLengths"] = ["8", "9", "8"]
    (target / "dataset_info.json").write_text(json.dumps(info))
    with pytest.raises(TFDSFormatError, match=r"train.tfrecord-00001-of-00003' holds 8 records.*says 9"):
        from_tfds(target, "train")
    info["fileFormat"] = "array_record"
    (target / "dataset_info.json").write_text(json.dumps(info))
    with pytest.raises(TFDSFormatError, match="'array_record' files"):
        from_tfds(target, "train")
    with pytest.raises(tt.SourceNotFoundError, match="holds no prepared TFDS version"):
        from_tfds(tmp_path, "train")


def test_transform_gets_tfds_values_and_a_seeded_generator() -> None:
    seen: list[float] = []

    def augment(sample: dict[str, Any], generator: torch.Generator) -> dict[str, Any]:
        seen.append(float(torch.rand(1, generator=generator)))
        return {"image": sample["png_gray"].float() / 255, "label": sample["label"]}

    ds = from_tfds(FEATURES, "test", transform=augment, seed=3, shuffle=False, drop_last=False)
    first = list(ds)
    ds.set_epoch(0)
    list(ds)  # the same epoch again: the same random numbers
    assert set(first[0]) == {"image", "label"} and first[0]["image"].shape == (1, 8, 6)
    assert seen[:10] == seen[10:]


def test_dataloader_with_two_workers_reads_each_record_once() -> None:
    ds = from_tfds(FEATURES, "train+test", batch_size=4, seed=1, drop_last=False)
    loader = DataLoader(ds, batch_size=None, num_workers=2)
    ids = [
        i
        for batch in loader
        for i, pad in zip(batch["id"].tolist(), batch["_padding"].tolist(), strict=True)
        if not pad
    ]
    assert sorted(ids) == list(range(24)) + list(range(100, 110))
    samples = DataLoader(
        from_tfds(FEATURES, "test", shuffle=False), batch_size=3, num_workers=2, collate_fn=tt.collate
    )
    assert sorted(i for batch in samples for i in batch["id"].tolist()) == list(range(100, 110))


def test_remote_directory_through_fsspec() -> None:
    fsspec = pytest.importorskip("fsspec")
    memory = fsspec.filesystem("memory")
    for file in FEATURES.iterdir():
        memory.pipe(f"/tfds-remote/golden_features/1.0.0/{file.name}", file.read_bytes())
    try:
        ds = from_tfds("memory://tfds-remote", "test[:4]", name="golden_features", shuffle=False)
        samples = list(ds)
        assert [int(s["id"]) for s in samples] == _file_order_ids("test")[:4]
        assert samples[0]["png_gray"].shape == (1, 8, 6)
        assert ds.features["label"].names == ("cat", "dog", "bird")
    finally:
        memory.rm("/tfds-remote", recursive=True)


def _rank_results() -> dict[str, Any]:
    """One rank's epoch of train+test: (id, padding, image shape) of each sample."""
    ds = from_tfds(FEATURES, "train+test", batch_size=3, seed=5, drop_last=False)
    ds.set_epoch(1)
    loader = DataLoader(ds, batch_size=None, num_workers=2)
    seen = [
        (int(i), bool(p), tuple(image.shape))
        for batch in loader
        for i, p, image in zip(batch["id"], batch["_padding"], batch["png_gray"], strict=True)
    ]
    return {"len": len(ds), "seen": seen}


def test_two_gloo_ranks_with_two_workers_each_read_every_record_once(tmp_path: Path) -> None:
    from gloo import gather_ranks  # the suite's process-group helpers

    ranks = gather_ranks(_rank_results, 2, (), 240, tmp_path / "gathered.json")
    assert ranks[0]["len"] == ranks[1]["len"] == 6  # 34 records: 2 ranks x 6 batches of 3, padded
    assert len(ranks[0]["seen"]) == len(ranks[1]["seen"]) == 18
    real = [i for rank in ranks for i, padding, _ in rank["seen"] if not padding]
    assert sorted(real) == sorted(_file_order_ids("train") + _file_order_ids("test"))
    assert all(shape == [1, 8, 6] for rank in ranks for _, _, shape in rank["seen"])


def test_cli_schema_prints_connectors_and_specs(capsys: pytest.CaptureFixture[str]) -> None:
    from torch_tfrecord.cli import main

    assert main(["schema", str(FEATURES)]) == 0
    out = capsys.readouterr().out
    assert "split train: 24 records in 3 shards" in out
    assert "ClassLabel(num_classes=3, names=['cat', 'dog', 'bird'])" in out
    assert "Video(Image(shape=(6, 5, 3), dtype=uint8, format=png))" in out
    assert "tt.Image(mode='L', dct='fast')" in out
    assert "/ragged_row_lengths_0: tt.VarLen(dtype=torch.int64)" in out


def test_cli_count_and_verify_check_the_metadata_without_torch(tmp_path: Path) -> None:
    from test_cli import _run_without_torch  # a fresh interpreter that fails if torch is imported

    target = _copy(tmp_path)
    out = _run_without_torch([["count", str(FEATURES)], ["verify", str(EPISODES)]])
    assert "          34  total" in out and "2 of 2 files OK" in out
    info = json.loads((target / "dataset_info.json").read_text())
    info["splits"][1]["shardLengths"] = ["3", "5", "3"]
    (target / "dataset_info.json").write_text(json.dumps(info))
    out = _run_without_torch([["count", str(target)], ["verify", str(target)]])
    assert "test.tfrecord-00001-of-00003: holds 4 records, but dataset_info.json says 5" in out
    assert "BAD  " in out and "5 of 6 files OK" in out


def test_resume_mid_epoch_continues_exactly() -> None:
    make = lambda: from_tfds(FEATURES, "train+test", batch_size=4, seed=9, drop_last=False)  # noqa: E731
    whole = [b["_record_id"].tolist() for b in make()]
    stopped = make()
    iterator = iter(stopped)
    taken = [next(iterator)["_record_id"].tolist() for _ in range(3)]
    state = stopped.state_dict()
    resumed = make()
    resumed.load_state_dict(state)
    rest = [b["_record_id"].tolist() for b in resumed]
    assert taken + rest == whole
    other = from_tfds(FEATURES, "train[:20]+test", batch_size=4, seed=9, drop_last=False)
    with pytest.raises(ValueError, match="num_records"):
        other.load_state_dict(state)
    first, second = (from_tfds(FEATURES, s, batch_size=2, seed=9) for s in ("train[:10]", "train[10:20]"))
    with pytest.raises(ValueError, match="saved with data"):  # as many records, other ones
        second.load_state_dict(first.state_dict())
