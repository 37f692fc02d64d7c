"""tt.to_hf: TFRecord shards as a Hugging Face datasets.Dataset, Features from the spec."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from PIL import Image as PILImage

import torch_tfrecord as tt
from torch_tfrecord.convert import LabelMap, write_label_map

datasets = pytest.importorskip("datasets")


def test_to_hf_maps_the_spec_to_features(tmp_path: str) -> None:
    rows = [
        {"image": PILImage.fromarray(np.full((4, 5, 3), i, np.uint8)), "label": i % 2 + 1,
         "x": [1.0, 2.0 * i], "tags": ["a"] * i, "grid": np.arange(4, dtype=np.int32).reshape(2, 2) + i}
        for i in range(4)
    ]  # fmt: skip
    tt.write_dataset(rows, os.path.join(tmp_path, "shards"))
    write_label_map(LabelMap.from_names(["cat", "dog"]), os.path.join(tmp_path, "label_map.pbtxt"))
    hf = tt.to_hf(
        os.path.join(tmp_path, "shards"),
        label_key="label",
        label_map=os.path.join(tmp_path, "label_map.pbtxt"),
        cache_dir=os.path.join(tmp_path, "cache"),
    )
    assert isinstance(hf, datasets.Dataset) and len(hf) == 4
    assert hf.features["label"] == datasets.ClassLabel(names=["<id 0>", "cat", "dog"])
    assert isinstance(hf.features["image"], datasets.Image)
    assert hf.features["x"] == datasets.Sequence(datasets.Value("float32"), length=2)
    assert hf.features["grid"] == datasets.Sequence(
        datasets.Sequence(datasets.Value("int32"), length=2), length=2
    )
    assert hf.features["tags"] == datasets.Sequence(datasets.Value("string"))
    row = hf[3]
    assert np.array_equal(np.asarray(row["image"]), np.full((4, 5, 3), 3, np.uint8))
    assert hf.features["label"].int2str(row["label"]) == "dog"
    assert row["x"] == [1.0, 6.0] and row["tags"] == ["a"] * 3 and row["grid"] == [[3, 4], [5, 6]]


def test_label_map_needs_label_key(tmp_path: str) -> None:
    tt.write_dataset([{"label": 1}], tmp_path)
    with pytest.raises(ValueError, match="label_key"):
        tt.to_hf(str(tmp_path), label_map=LabelMap.from_names(["a"]))
    assert tt.to_hf(str(tmp_path), spec={"label": tt.FixedLen((), torch.int64)})["label"] == [1]
