"""The TFDS connectors beyond the first round, compared with what tensorflow-datasets gives.

tests/data/tfds/golden_more (and the expected values ``tfds.as_numpy`` gave for it) and
golden_legacy (golden_features' test split with a features.json of TFDS before 4.0) were written by
tests/data/make_tfds_golden_more.py with real tensorflow-datasets 4.9.10.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from test_tfds import _compare, _expected, _public

import torch_tfrecord as tt
from torch_tfrecord.integrations.tfds import UnsupportedFeatureError, from_tfds

DATA = Path(__file__).resolve().parent / "data" / "tfds"
MORE = DATA / "golden_more" / "1.0.0"
LEGACY = DATA / "golden_legacy" / "1.0.0"
IMAGES = {"grey16", "rgb16", "depth", "mask"}  # HWC in TFDS, CHW here


def _compare_more(sample: dict[str, Any], expected: dict[str, Any], arrays: Any, where: str) -> None:
    assert set(sample) == set(expected), where
    for key, want in expected.items():
        got, at = sample[key], f"{where}/{key}"
        if "npy" in want:
            array = arrays[want["npy"]]
            assert isinstance(got, torch.Tensor), at
            value = got.numpy()
            if key in IMAGES:
                value = np.moveaxis(value, -3, -1)
            assert value.dtype == array.dtype and value.shape == array.shape, (at, value.dtype, value.shape)
            np.testing.assert_array_equal(value, array, err_msg=at)
        elif "ragged" in want and key == "clips":  # Sequence(Sequence(Image)): lists of [frames, C, H, W]
            assert [np.moveaxis(frames.numpy(), -3, -1).tolist() for frames in got] == want["ragged"], at
            assert all(frames.dtype == torch.uint8 for frames in got), at
        elif "ragged" in want:  # three levels of Sequence: a list (outer steps) of Ragged
            assert all(isinstance(rows, tt.Ragged) for rows in got), at
            assert [rows.tolist() for rows in got] == want["ragged"], at
            assert all(rows.values.dtype == getattr(torch, want["dtype"]) for rows in got), at
        elif "bytes_list" in want and len(want["shape"]) == 2:  # string Tensors of two dimensions
            rows, columns = want["shape"]
            flat = [v.encode("latin-1") for v in want["bytes_list"]]
            assert got == [flat[r * columns : (r + 1) * columns] for r in range(rows)], at
        else:  # Translation, TranslationVariableLanguages: dicts of texts
            _compare(got, want, arrays, at, {})


@pytest.mark.parametrize("batched", [False, True])
def test_the_connectors_left_out_before_equal_tfds_as_numpy(batched: bool) -> None:
    documents, arrays = _expected("golden_more", "train")
    batch_size = 4 if batched else None
    ds = from_tfds(MORE, "train", shuffle=False, drop_last=False, batch_size=batch_size)
    if batched:
        samples = [sample for batch in ds for sample in _rows(batch) if not sample[tt.PADDING_KEY]]
    else:
        samples = list(ds)
    assert len(samples) == len(documents) == 6
    for i, (sample, expected) in enumerate(zip(samples, documents, strict=True)):
        _compare_more(_public(sample), expected, arrays, str(i))


def _rows(value: Any, row: int | None = None) -> Any:
    """A batch's samples (``row`` None), or row ``row`` of each of its (nested) columns."""
    if row is None:
        return [_rows(value, i) for i in range(len(value["id"]))]
    if isinstance(value, dict):
        return {key: _rows(item, row) for key, item in value.items()}
    return value[row]


def test_legacy_features_json_reads_as_tfds_reads_it() -> None:
    documents, arrays = _expected("golden_features", "test")
    samples = list(from_tfds(LEGACY, "test", shuffle=False, drop_last=False))
    assert len(samples) == len(documents) == 10
    diffs: dict[str, int] = {}
    for i, (sample, expected) in enumerate(zip(samples, documents, strict=True)):
        _compare(_public(sample), expected, arrays, str(i), diffs)
    assert max(diffs.values()) <= 15  # the JPEG feature, as in test_tfds


def test_label_names_of_a_labeled_image() -> None:
    ds = from_tfds(MORE, "train", shuffle=False)
    assert ds.features["mask"].names == ("bg", "cat", "dog")
    assert ds.features["mask"].kind == "LabeledImage"


def test_encoded_audio_without_soundfile_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "soundfile", None)
    with pytest.raises(ImportError, match="'audio' extra"):
        next(iter(from_tfds(MORE, "train", shuffle=False)))


def test_what_is_still_not_read_is_named_with_its_connector(tmp_path: Path) -> None:
    copy = tmp_path / "golden_more" / "1.0.0"
    shutil.copytree(MORE, copy)
    features = json.loads((copy / "features.json").read_text())
    inner = features["featuresDict"]["features"]
    # TFDS 4 refuses to write a Text with an encoder; TFDS 3 wrote them.
    inner["translation"] = {
        "pythonClassName": "tensorflow_datasets.core.features.text_feature.Text",
        "text": {"encoder": {"vocab_size": 8}},
    }
    (copy / "features.json").write_text(json.dumps(features))
    with pytest.raises(UnsupportedFeatureError, match=r"feature 'translation'.*Text with a TextEncoder"):
        from_tfds(copy, "train")
    inner["translation"] = {
        "pythonClassName": "tensorflow_datasets.core.features.image_feature.Image",
        "image": {"dtype": "float32", "shape": {"dimensions": ["4", "4", "3"]}},
    }
    (copy / "features.json").write_text(json.dumps(features))
    with pytest.raises(UnsupportedFeatureError, match=r"feature 'translation'.*Image of dtype float32"):
        from_tfds(copy, "train")
