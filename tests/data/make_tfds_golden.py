"""Writes the TFDS golden directories (tests/data/tfds/) with real tensorflow-datasets.

Run it once, in a scratch environment that has tensorflow-cpu and tensorflow-datasets (never a
dependency of this project)::

    /tmp/tfvenv/bin/python tests/data/make_tfds_golden.py

It prepares two small datasets with GeneratorBasedBuilders defined here:

- ``golden_features/1.0.0``: every connector torch_tfrecord.integrations.tfds maps (nested
  FeaturesDict, Image as JPEG and PNG, ClassLabel with names, Tensor of many dtypes, stored
  natively and as bytes, with None dimensions, Text, Scalar, BBoxFeature, Sequence of these,
  an empty Sequence, Audio, Video), splits ``train`` and ``test`` (3 shards each);
- ``golden_episodes/0.1.0``: RLDS-style episodes (a ``tfds.features.Dataset`` of steps).

``expected/<name>/<split>.json`` (+ ``<split>.npz``, arrays only: loads with
``allow_pickle=False``) hold what ``tfds.as_numpy`` gives for each example of the split read in
file order (no shuffling), so the tests compare without TensorFlow; ``splits.json`` holds the ids
TFDS reads for a list of split strings (its slicing and rounding). Values come from fixed seeds.
"""

from __future__ import annotations

import json
import os
import shutil
import sys

import numpy as np
import tensorflow_datasets as tfds

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "tfds")
LABELS = ["cat", "dog", "bird"]


def _image(rng: np.random.Generator, height: int, width: int, channels: int) -> np.ndarray:
    # Smooth gradients plus a little noise: small PNGs, and JPEGs decoders agree on closely.
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([(x * 255 // max(1, width - 1) + 40 * c) % 256 for c in range(channels)], -1)
    noise = rng.integers(0, 16, size=(height, width, channels))
    return ((base + y[..., None] * 3 + noise) % 256).astype(np.uint8)


class GoldenFeatures(tfds.core.GeneratorBasedBuilder):
    VERSION = tfds.core.Version("1.0.0")

    def _info(self) -> tfds.core.DatasetInfo:
        f = tfds.features
        return tfds.core.DatasetInfo(
            builder=self,
            description="Every feature connector, for torch_tfrecord's tests.",
            features=f.FeaturesDict(
                {
                    "id": f.Scalar(np.int64),
                    "label": f.ClassLabel(names=LABELS),
                    "text": f.Text(),
                    "jpeg": f.Image(shape=(None, None, 3), encoding_format="jpeg"),
                    "png_gray": f.Image(shape=(8, 6, 1), encoding_format="png"),
                    "bbox": f.BBoxFeature(),
                    "meta": {
                        "score": f.Scalar(np.float32),
                        "flag": f.Scalar(np.bool_),
                        "inner": {"name": f.Text(), "level": f.Scalar(np.int32)},
                    },
                    "tensors": {
                        "f16": f.Tensor(shape=(2, 3), dtype=np.float16),
                        "f64": f.Tensor(shape=(2,), dtype=np.float64),
                        "u8": f.Tensor(shape=(4,), dtype=np.uint8),
                        "i32": f.Tensor(shape=(None,), dtype=np.int32),
                        "i8": f.Tensor(shape=(3,), dtype=np.int8),
                        "u16": f.Tensor(shape=(2,), dtype=np.uint16),
                        "boolv": f.Tensor(shape=(None,), dtype=np.bool_),
                        "bytes_f32": f.Tensor(shape=(2, 2), dtype=np.float32, encoding="bytes"),
                        "bytes_u8": f.Tensor(shape=(None, 3), dtype=np.uint8, encoding="bytes"),
                        "zlib_i16": f.Tensor(shape=(None, None), dtype=np.int16, encoding="zlib"),
                        "bytes_f16": f.Tensor(shape=(3,), dtype=np.float16, encoding="bytes"),
                        "bytes_bool": f.Tensor(shape=(2,), dtype=np.bool_, encoding="bytes"),
                        "strings": f.Tensor(shape=(2,), dtype=np.str_),
                    },
                    "objects": f.Sequence(
                        {
                            "bbox": f.BBoxFeature(),
                            "label": f.ClassLabel(names=LABELS),
                            "area": f.Scalar(np.float32),
                            "name": f.Text(),
                        }
                    ),
                    "frames_png": f.Sequence(f.Image(shape=(4, 4, 3), encoding_format="png")),
                    "points": f.Sequence(f.Sequence(f.Scalar(np.float32))),
                    "empty": f.Sequence(f.Scalar(np.int64)),
                    "fixed_seq": f.Sequence(f.Tensor(shape=(2,), dtype=np.int64), length=3),
                    "audio": f.Audio(shape=(None,), dtype=np.int16, sample_rate=8000),
                    "video": f.Video(shape=(None, 6, 5, 3), encoding_format="png"),
                }
            ),
            supervised_keys=("jpeg", "label"),
        )

    def _split_generators(self, dl_manager):  # type: ignore[no-untyped-def]
        return {"train": self._generate_examples(0, 24), "test": self._generate_examples(100, 10)}

    def _generate_examples(self, first: int, count: int):  # type: ignore[no-untyped-def]
        for i in range(first, first + count):
            rng = np.random.default_rng(i)
            objects = int(rng.integers(0, 4))
            frames = int(rng.integers(0, 3))
            n_points = int(rng.integers(0, 4))
            yield (
                f"key{i:04d}",
                {
                    "id": i,
                    "label": LABELS[i % 3],
                    "text": f"example {i} \u00e9\u4e2d",
                    "jpeg": _image(rng, 10 + i % 5, 12 + i % 3, 3),
                    "png_gray": _image(rng, 8, 6, 1),
                    "bbox": tfds.features.BBox(ymin=0.1, xmin=0.2, ymax=0.5 + i / 1000, xmax=0.9),
                    "meta": {
                        "score": np.float32(i / 7),
                        "flag": bool(i % 2),
                        "inner": {"name": "" if i % 4 == 0 else f"n{i}", "level": -i},
                    },
                    "tensors": {
                        "f16": rng.standard_normal((2, 3)).astype(np.float16),
                        "f64": rng.standard_normal(2),
                        "u8": rng.integers(0, 256, 4).astype(np.uint8),
                        "i32": rng.integers(-(2**31), 2**31 - 1, int(rng.integers(0, 5))).astype(np.int32),
                        "i8": rng.integers(-128, 128, 3).astype(np.int8),
                        "u16": rng.integers(0, 2**16, 2).astype(np.uint16),
                        "boolv": rng.integers(0, 2, int(rng.integers(0, 4))).astype(np.bool_),
                        "bytes_f32": rng.standard_normal((2, 2)).astype(np.float32),
                        "bytes_u8": rng.integers(0, 256, (int(rng.integers(0, 3)), 3)).astype(np.uint8),
                        "zlib_i16": rng.integers(-300, 300, (int(rng.integers(1, 3)), 2)).astype(np.int16),
                        "bytes_f16": rng.standard_normal(3).astype(np.float16),
                        "bytes_bool": np.array([i % 2 == 0, True]),
                        "strings": [f"s{i}", "\u00fc"],
                    },
                    "objects": {
                        "bbox": [
                            tfds.features.BBox(ymin=0.1 * k, xmin=0.05, ymax=0.1 * k + 0.2, xmax=0.5)
                            for k in range(objects)
                        ],
                        "label": [LABELS[(i + k) % 3] for k in range(objects)],
                        "area": [np.float32(k + 0.5) for k in range(objects)],
                        "name": [f"o{k}" for k in range(objects)],
                    },
                    "frames_png": [_image(rng, 4, 4, 3) for _ in range(frames)],
                    "points": [list(rng.standard_normal(k).astype(np.float32)) for k in range(n_points)],
                    "empty": [],
                    "fixed_seq": rng.integers(-5, 5, (3, 2)),
                    "audio": rng.integers(-(2**15), 2**15, int(rng.integers(5, 20))).astype(np.int16),
                    "video": np.stack([_image(rng, 6, 5, 3) for _ in range(1 + i % 3)]),
                },
            )


class GoldenEpisodes(tfds.core.GeneratorBasedBuilder):
    """RLDS layout: an episode holds a Dataset of steps (observation, action, reward, flags)."""

    VERSION = tfds.core.Version("0.1.0")

    def _info(self) -> tfds.core.DatasetInfo:
        f = tfds.features
        return tfds.core.DatasetInfo(
            builder=self,
            description="RLDS-style episodes for torch_tfrecord's tests.",
            features=f.FeaturesDict(
                {
                    "steps": f.Dataset(
                        {
                            "observation": {
                                "image": f.Image(shape=(4, 4, 3), encoding_format="png"),
                                "state": f.Tensor(shape=(3,), dtype=np.float32),
                            },
                            "action": f.Tensor(shape=(2,), dtype=np.float32),
                            "reward": f.Scalar(np.float32),
                            "discount": f.Scalar(np.float32),
                            "is_first": f.Scalar(np.bool_),
                            "is_last": f.Scalar(np.bool_),
                            "is_terminal": f.Scalar(np.bool_),
                            "language_instruction": f.Text(),
                        }
                    ),
                    "episode_metadata": {"file_path": f.Text(), "episode_id": f.Scalar(np.int64)},
                }
            ),
        )

    def _split_generators(self, dl_manager):  # type: ignore[no-untyped-def]
        return {"train": self._generate_examples(6)}

    def _generate_examples(self, count: int):  # type: ignore[no-untyped-def]
        for e in range(count):
            rng = np.random.default_rng(1000 + e)
            length = 0 if e == 2 else 1 + e % 4  # episode 2 has no steps
            steps = [
                {
                    "observation": {
                        "image": _image(rng, 4, 4, 3),
                        "state": rng.standard_normal(3).astype(np.float32),
                    },
                    "action": rng.standard_normal(2).astype(np.float32),
                    "reward": np.float32(t == length - 1),
                    "discount": np.float32(1.0),
                    "is_first": t == 0,
                    "is_last": t == length - 1,
                    "is_terminal": t == length - 1,
                    "language_instruction": "pick up the block",
                }
                for t in range(length)
            ]
            yield (
                f"episode{e}",
                {
                    "steps": steps,
                    "episode_metadata": {"file_path": f"/data/ep{e}.npz", "episode_id": e},
                },
            )


def _jsonable(value, where: str, arrays: dict[str, np.ndarray]):  # type: ignore[no-untyped-def]
    """A decoded value as JSON; arrays go into ``arrays`` (an .npz), named by their path."""
    if isinstance(value, dict):
        return {key: _jsonable(item, f"{where}/{key}", arrays) for key, item in value.items()}
    if isinstance(value, bytes):
        return {"bytes": value.decode("latin-1")}
    if isinstance(value, np.ndarray) and value.dtype == object:
        return {"bytes_list": [v.decode("latin-1") for v in value.reshape(-1)], "shape": list(value.shape)}
    if isinstance(value, np.ndarray | np.generic):
        arrays[where] = np.asarray(value)
        return {"npy": where}
    if isinstance(value, tf.RaggedTensor):  # nested Sequences: row lists (float32 is exact in JSON)
        return {"ragged": value.to_list(), "dtype": value.dtype.name}
    if hasattr(value, "__iter__"):  # a nested Dataset (RLDS steps) as tfds.as_numpy gives it
        steps = list(value)
        if not steps:
            return {"steps": 0}
        stacked = tf.nest.map_structure(lambda *xs: np.stack(xs), *steps)
        return {"steps": len(steps), "value": _jsonable(stacked, where, arrays)}
    raise TypeError(f"{where}: {type(value).__name__}")


def _save_expected(builder: tfds.core.DatasetBuilder, split: str, directory: str) -> None:
    dataset = builder.as_dataset(split=split, shuffle_files=False)
    os.makedirs(directory, exist_ok=True)
    arrays: dict[str, np.ndarray] = {}
    documents = [_jsonable(example, str(i), arrays) for i, example in enumerate(tfds.as_numpy(dataset))]
    with open(os.path.join(directory, f"{split}.json"), "w") as file:
        json.dump(documents, file, indent=None, sort_keys=True)
    np.savez_compressed(os.path.join(directory, f"{split}.npz"), **arrays)


# Split strings whose records TFDS's own slicing selects (saved as the ids read, in order).
SPLITS = [
    "train[:10%]",
    "train[10%:25%]",
    "train[5:13]",
    "train[-3:]",
    "train[-20%:]",
    "train[1shard:2shard]",
    "test[2shard]",
    "test[:25%]",
    "test[33%:67%]",
    "train[22:]+test[:2]",
    "train[:1]+train[:1]",
    "train[20:10]+test[-1:]",
    "all",
]


def _save_split_ids(builder: tfds.core.DatasetBuilder, path: str) -> None:
    selected = {}
    for split in SPLITS:
        dataset = builder.as_dataset(split=split, shuffle_files=False)
        selected[split] = [int(example["id"]) for example in tfds.as_numpy(dataset)]
    with open(path, "w") as file:
        json.dump(selected, file, indent=1)


def main() -> int:
    shutil.rmtree(OUT, ignore_errors=True)
    for cls, splits, shards in ((GoldenFeatures, ("train", "test"), 3), (GoldenEpisodes, ("train",), 2)):
        builder = cls(data_dir=OUT)
        builder.download_and_prepare(download_config=tfds.download.DownloadConfig(num_shards=shards))
        for split in splits:
            _save_expected(builder, split, os.path.join(OUT, "expected", builder.name))
        if cls is GoldenFeatures:
            _save_split_ids(builder, os.path.join(OUT, "expected", builder.name, "splits.json"))
        print(builder.data_dir, sorted(os.listdir(builder.data_dir)))
    shutil.rmtree(os.path.join(OUT, "downloads"), ignore_errors=True)
    return 0


if __name__ == "__main__":
    import tensorflow as tf

    sys.exit(main())
