"""Fuzzing of a TFDS directory's metadata: dataset_info.json (its splits and file name templates)
and features.json (atheris).

The first byte picks what the rest is: a whole dataset_info.json, a file name template in an
otherwise valid one, or a features.json. Then:

- dataset_info.json gives a DatasetInfo or a TFDSFormatError; every shard path of every split
  lies inside the dataset's directory (or a TFDSFormatError says why not);
- features.json gives a connector tree or a TFRecordError naming it.

    python fuzz/fuzz_tfds_info.py fuzz/corpus/tfds_info -atheris_runs=100000
"""

from __future__ import annotations

import json

from _harness import Rejected, attempt, main

_ROOT = "/data/ds/1.0.0"


def _info(document: object) -> None:
    from torch_tfrecord.integrations.tfds.info import TFDSFormatError, parse_info

    info = attempt(lambda: parse_info(document, _ROOT, "dataset_info.json"))  # type: ignore[arg-type]
    if isinstance(info, Rejected):
        assert isinstance(info.error, TFDSFormatError) and "dataset_info.json" in str(info.error), info
        return
    for split in info.splits:
        paths = attempt(lambda split=split: info.shard_paths(split))  # type: ignore[misc]
        if isinstance(paths, Rejected):
            assert isinstance(paths.error, TFDSFormatError), paths
            continue
        for path in paths:
            assert path.startswith(_ROOT + "/") and "/../" not in path and "/./" not in path, path


def check(data: bytes) -> None:
    """Raises AssertionError (or any non-library exception) on a TFDS metadata bug."""
    import torch_tfrecord as tt
    from torch_tfrecord.integrations.tfds.features import parse_features
    from torch_tfrecord.integrations.tfds.info import decode_json

    mode, text = data[:1], data[1:].decode("utf-8", errors="replace")
    if mode == b"t":  # a template
        splits = [{"name": "train", "shardLengths": ["1", "2"], "filepathTemplate": text}]
        _info({"name": "ds", "splits": splits})
        return
    document = attempt(lambda: decode_json(text, "fuzzed.json"))
    if isinstance(document, Rejected):
        assert isinstance(document.error, tt.TFRecordError), document
        return
    if mode == b"f":
        features = attempt(lambda: parse_features(document))
        if isinstance(features, Rejected):
            assert isinstance(features.error, tt.TFRecordError) and "feature" in str(features.error), features
        return
    _info(document)


def seeds() -> dict[str, bytes]:
    info = {
        "name": "ds",
        "fileFormat": "tfrecord",
        "splits": [
            {
                "name": "train",
                "shardLengths": ["2", "3"],
                "filepathTemplate": "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}",
            }
        ],
        "supervisedKeys": {"tuple": {"items": [{"featureKey": "image"}, {"featureKey": "label"}]}},
    }
    features = {
        "pythonClassName": "tensorflow_datasets.core.features.features_dict.FeaturesDict",
        "featuresDict": {
            "features": {
                "label": {
                    "pythonClassName": "tensorflow_datasets.core.features.class_label_feature.ClassLabel",
                    "classLabel": {"numClasses": "3"},
                }
            }
        },
    }
    return {
        "info": b"i" + json.dumps(info).encode(),
        "template": b"t{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}",
        "regression-dotdot": b"t../../../etc/{SPLIT}",
        "regression-format-spec": b"t{DATASET:>200000000}",
        "features": b"f" + json.dumps(features).encode(),
    }


def load() -> None:
    import torch_tfrecord
    import torch_tfrecord.integrations.tfds.features
    import torch_tfrecord.integrations.tfds.info  # noqa: F401


if __name__ == "__main__":
    main(check, seeds, load)
