"""tt.write_dataset: any dataset to shards, the spec saved beside them and read back by itself."""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest
import torch
from PIL import Image as PILImage

import torch_tfrecord as tt
from torch_tfrecord.codec.spec_file import SPEC_FILE, decode_spec_json, encode_spec_json
from torch_tfrecord.convert import ConversionError
from torch_tfrecord.errors import SpecError


class Pictures(torch.utils.data.Dataset):  # type: ignore[type-arg]
    def __len__(self) -> int:
        return 10

    def __getitem__(self, i: int) -> dict[str, object]:
        return {
            "x": torch.arange(6, dtype=torch.float32).reshape(2, 3) + i,
            "label": i,
            "meta": {"name": f"n{i}", "tags": list(range(i % 3))},
            "image": PILImage.fromarray(np.full((4, 5, 3), i * 20, np.uint8)),
            "raw": np.full((2, 2), i, np.uint8),
            "flag": bool(i % 2),
        }


class Stream(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    def __iter__(self):  # type: ignore[no-untyped-def]
        for i in range(25):
            yield {"tokens": torch.arange(i % 4, dtype=torch.int32), "text": "abc"[: i % 3 + 1]}


def test_map_style_dataset_reads_back_with_no_spec(tmp_path: str) -> None:
    result = tt.write_dataset(Pictures(), tmp_path, shard_size=4)
    assert result.records == {"": 10}
    assert [os.path.basename(p) for p in result.shards[""]] == [
        f"data-0000{k}-of-00003.tfrecord" for k in range(3)
    ]
    assert all(os.path.exists(p + ".idx") for p in result.shards[""])
    assert result.spec == {
        "x": tt.FixedLen((2, 3), torch.float32),
        "label": tt.FixedLen((), torch.int64),
        "meta/name": tt.FixedLen((), str),
        "meta/tags": tt.VarLen(torch.int64),
        "image": tt.Image("RGB"),
        "raw": tt.RawTensor(torch.uint8, (2, 2)),
        "flag": tt.FixedLen((), torch.bool),
    }
    assert result.spec_path == os.path.join(tmp_path, SPEC_FILE)
    dataset = tt.IndexedTFRecordDataset(str(tmp_path))  # no spec: spec.json beside the shards
    for i in range(10):
        sample, want = dataset[i], Pictures()[i]
        assert torch.equal(sample["x"], want["x"])  # type: ignore[arg-type]
        assert sample["label"].item() == i and sample["meta/name"] == f"n{i}"
        assert sample["meta/tags"].tolist() == list(range(i % 3))
        assert torch.equal(sample["image"], torch.full((3, 4, 5), i * 20, dtype=torch.uint8))
        assert torch.equal(sample["raw"], torch.full((2, 2), i, dtype=torch.uint8))
        assert sample["flag"].dtype == torch.bool and sample["flag"].item() == bool(i % 2)
    iterable = tt.TFRecordDataset(str(tmp_path), shuffle=False)
    assert [s["label"].item() for s in iterable] == list(range(10))


def test_iterable_source_in_bounded_shards_with_jobs(tmp_path: str) -> None:
    result = tt.write_dataset(Stream(), tmp_path, shard_size=10, jobs=2, compression="gzip")
    assert result.records == {"": 25}
    assert [os.path.basename(p) for p in result.shards[""]] == [
        f"data-0000{k}-of-00003.tfrecord.gz" for k in range(3)
    ]
    assert result.spec == {"tokens": tt.VarLen(torch.int32), "text": tt.FixedLen((), str)}
    samples = list(tt.TFRecordDataset(str(tmp_path), shuffle=False))
    assert [s["tokens"].tolist() for s in samples] == [list(range(i % 4)) for i in range(25)]
    assert samples[4]["tokens"].dtype == torch.int32


def test_generator_of_dicts_tuples_and_split(tmp_path: str) -> None:
    rows = [(torch.tensor([i, i + 1]), float(i)) for i in range(20)]
    result = tt.write_dataset(
        rows, tmp_path, keys=("pair", "score"), split={"train": 0.5, "val": 0.5}, shards=2
    )
    assert result.records == {"train": 10, "val": 10}
    assert result.spec == {"pair": tt.FixedLen((2,), torch.int64), "score": tt.FixedLen((), torch.float32)}
    train = tt.IndexedTFRecordDataset(sorted(glob.glob(f"{tmp_path}/data-train-*.tfrecord")))
    val = tt.IndexedTFRecordDataset(sorted(glob.glob(f"{tmp_path}/data-val-*.tfrecord")))
    scores = [int(part[i]["score"]) for part in (train, val) for i in range(10)]
    assert sorted(scores) == list(range(20))
    assert all(part[i]["pair"].tolist() == [int(part[i]["score"]), int(part[i]["score"]) + 1]
               for part in (train, val) for i in range(10))  # fmt: skip


def test_jpeg_images(tmp_path: str) -> None:
    rows = ({"image": PILImage.fromarray(np.full((8, 8), 100, np.uint8))} for _ in range(3))
    result = tt.write_dataset(rows, tmp_path, image_format="jpeg")
    assert result.spec == {"image": tt.Image("L")}
    sample = tt.IndexedTFRecordDataset(str(tmp_path))[0]
    assert sample["image"].shape == (1, 8, 8) and abs(int(sample["image"][0, 0, 0]) - 100) <= 2


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([{"a": 1}, {"a": 2}, {"a": "x"}], "row 2 key 'a': text, but earlier rows hold int64 numbers"),
        ([{"a": 1}, {"a": 1.5}], "row 1 key 'a': float numbers, but earlier rows hold int64"),
        ([{"a": [[1], [2, 3]]}], "row 0 key 'a': a list of lists of different lengths is nested deeper"),
        ([{"a": [{"b": 1}]}], "row 0 key 'a': a list of dicts"),
        ([{"a": object()}], "row 0 key 'a': cannot store a object"),
        ([{"a": np.zeros((2, 2))}, {"a": np.zeros((3, 2))}], "row 1 key 'a': shape (3, 2), but earlier rows"),
        ([{"a": np.zeros((2, 2))}, {"b": 1}], "row 1 key 'a': missing"),
        ([{"a": [["x", "y"]]}], "row 0 key 'a': text of shape (1, 2) is nested deeper"),
        ([3], "row 0: a sample must be a dict"),
    ],
)
def test_bad_input_names_key_and_row_and_leaves_nothing(
    tmp_path: str, rows: list[object], message: str
) -> None:
    with pytest.raises(
        ConversionError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
    ):
        tt.write_dataset(rows, tmp_path)
    assert os.listdir(tmp_path) == []
    with pytest.raises(ConversionError, match="row"):
        tt.write_dataset(iter(rows), tmp_path)  # the streaming path too
    assert os.listdir(tmp_path) == []


def test_skip_bad_rows(tmp_path: str) -> None:
    result = tt.write_dataset([{"a": 1}, {"a": object()}, {"a": 3}], tmp_path, on_error="skip")
    assert result.records == {"": 2} and "row 1 key 'a'" in result.skipped[0]
    assert [tt.IndexedTFRecordDataset(str(tmp_path))[i]["a"].item() for i in range(2)] == [1, 3]


def test_a_key_some_rows_lack_is_varlen(tmp_path: str) -> None:
    result = tt.write_dataset([{"a": 1, "b": 2}, {"a": 2}, {"a": 3, "b": 4}], tmp_path)
    assert result.spec == {"a": tt.FixedLen((), torch.int64), "b": tt.VarLen(torch.int64)}
    dataset = tt.IndexedTFRecordDataset(str(tmp_path))
    assert [dataset[i]["b"].tolist() for i in range(3)] == [[2], [], [4]]


def test_given_spec_is_saved(tmp_path: str) -> None:
    spec = {"a": tt.FixedLen((), torch.int64, default=-1)}
    assert tt.write_dataset([{"a": 1}], tmp_path, spec=spec).spec == spec
    with pytest.raises(ConversionError, match="must name the same keys"):
        tt.write_dataset([{"a": 1}], os.path.join(tmp_path, "other"), spec={"b": "int"})


def test_spec_json_round_trip_and_foreign_files(tmp_path: str) -> None:
    spec = {
        "a": tt.FixedLen((2, 3), torch.float16, default=0.5),
        "b": tt.VarLen(str),
        "c": tt.RawTensor(torch.uint16, ("h", -1)),
        "d": tt.Image("L", size=(8, 4), crop="center"),
        "e": tt.FixedLenSequence((2,), torch.int64, allow_missing=True),
    }
    assert decode_spec_json(encode_spec_json(spec)) == {"spec": spec}
    both = decode_spec_json(encode_spec_json(context_spec={"a": "int"}, sequence_spec={"s": spec["e"]}))
    assert both == {"context_spec": {"a": tt.VarLen(torch.int64)}, "sequence_spec": {"s": spec["e"]}}
    assert decode_spec_json('{"name": "someone else\'s"}') is None
    with pytest.raises(SpecError, match="feature 'a': unknown dtype 'nope'"):
        spec_a = '{"a": {"kind": "VarLen", "dtype": "nope"}}'
        decode_spec_json(f'{{"format": "torch-tfrecord-spec", "version": 1, "spec": {spec_a}}}')
    # A foreign spec.json beside shards is not taken for ours: every feature decodes as VarLen.
    tt.write_dataset([{"a": 1}], tmp_path)
    with open(os.path.join(tmp_path, SPEC_FILE), "w") as f:
        f.write('{"name": "x"}')
    assert tt.IndexedTFRecordDataset(str(tmp_path))[0]["a"].tolist() == [1]


def test_hugging_face_dataset(tmp_path: str) -> None:
    datasets = pytest.importorskip("datasets")
    features = datasets.Features(
        {"label": datasets.ClassLabel(names=["cat", "dog"]), "text": datasets.Value("string"),
         "vec": datasets.Sequence(datasets.Value("float32"), length=2)}
    )  # fmt: skip
    hf = datasets.Dataset.from_dict(
        {"label": [0, 1, 1], "text": ["a", "b", "c"], "vec": [[1, 2], [3, 4], [5, 6]]}, features=features
    )
    result = tt.write_dataset(hf, tmp_path)
    assert result.spec == {
        "label": tt.FixedLen((), torch.int64),
        "text": tt.FixedLen((), str),
        "vec": tt.FixedLen((2,), torch.float32),
    }
    back = tt.IndexedTFRecordDataset(str(tmp_path))
    assert back[2]["vec"].tolist() == [5.0, 6.0] and back[1]["text"] == "b"
    streamed = tt.write_dataset(hf.to_iterable_dataset(), os.path.join(tmp_path, "streamed"))
    assert streamed.records == {"": 3} and streamed.spec == result.spec
