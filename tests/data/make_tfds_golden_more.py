"""Writes ``tests/data/tfds/golden_more/1.0.0`` with real tensorflow-datasets: the connectors
``make_tfds_golden.py`` left out.

Run it once, in a scratch environment with tensorflow-cpu, tensorflow-datasets, pillow and pydub
(never dependencies of this project)::

    /tmp/tfvenv/bin/python tests/data/make_tfds_golden_more.py

The dataset (one split, ``train``, 2 shards) holds Images of uint16 (16-bit PNG, grey and RGB)
and float32, a LabeledImage, Translation and TranslationVariableLanguages, string Tensors of two
dimensions, Sequences nested three deep, Sequences of Sequences of images, and Audio stored
encoded (``lazy_decode=True``, WAV). ``expected/golden_more/train.json`` (+ ``.npz``) hold what
``tfds.as_numpy`` gives, as ``make_tfds_golden.py`` saves them. ``golden_legacy/1.0.0`` is the
``golden_features`` dataset's test split with its ``features.json`` rewritten in the format
of TFDS before 4.0 (``type`` / ``content``; a Scalar written as a Tensor of shape ``()``, as
TFDS 3 had no Scalar), which this TFDS reads too: it gives ``expected/golden_features/test.*``
from it (checked here), so that is what the tests compare with.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import wave

import numpy as np
import tensorflow_datasets as tfds

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "tfds")
sys.path.insert(0, HERE)
from make_tfds_golden import _save_expected  # noqa: E402

LANGUAGES = ["de", "en", "fr"]


def _wav(samples: np.ndarray, rate: int) -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as file:
        file.setnchannels(1)
        file.setsampwidth(2)
        file.setframerate(rate)
        file.writeframes(samples.astype("<i2").tobytes())
    return buffer.getvalue()


class GoldenMore(tfds.core.GeneratorBasedBuilder):
    VERSION = tfds.core.Version("1.0.0")

    def _info(self) -> tfds.core.DatasetInfo:
        f = tfds.features
        return tfds.core.DatasetInfo(
            builder=self,
            description="The connectors of issue 32, for torch_tfrecord's tests.",
            features=f.FeaturesDict(
                {
                    "id": f.Scalar(np.int64),
                    "grey16": f.Image(shape=(5, 4, 1), dtype=np.uint16),
                    "rgb16": f.Image(shape=(None, None, 3), dtype=np.uint16),
                    "depth": f.Image(shape=(4, 3, 1), dtype=np.float32),
                    "mask": f.LabeledImage(labels=["bg", "cat", "dog"], shape=(5, 4, 1)),
                    "translation": f.Translation(languages=LANGUAGES),
                    "variable": f.TranslationVariableLanguages(languages=LANGUAGES),
                    "grid": f.Tensor(shape=(2, 3), dtype=np.str_),
                    "rows": f.Tensor(shape=(None, 2), dtype=np.str_),
                    "deep": f.Sequence(f.Sequence(f.Sequence(f.Scalar(np.int64)))),
                    "deep_vec": f.Sequence(f.Sequence(f.Sequence(f.Tensor(shape=(2,), dtype=np.float32)))),
                    "clips": f.Sequence(f.Sequence(f.Image(shape=(2, 3, 3)))),
                    "speech": f.Audio(
                        file_format="wav", lazy_decode=True, shape=(None,), dtype=np.int16, sample_rate=8000
                    ),
                }
            ),
        )

    def _split_generators(self, dl_manager):  # type: ignore[no-untyped-def]
        return {"train": self._generate_examples(6)}

    def _generate_examples(self, count: int):  # type: ignore[no-untyped-def]
        for i in range(count):
            rng = np.random.default_rng(3200 + i)
            height, width = 2 + i % 3, 3 + i % 2
            languages = [lang for k, lang in enumerate(LANGUAGES) if (i >> k) & 1] or ["en"]
            yield (
                f"key{i}",
                {
                    "id": i,
                    "grey16": rng.integers(0, 2**16, (5, 4, 1)).astype(np.uint16),
                    "rgb16": rng.integers(0, 2**16, (height, width, 3)).astype(np.uint16),
                    "depth": rng.standard_normal((4, 3, 1)).astype(np.float32),
                    "mask": rng.integers(0, 3, (5, 4, 1)).astype(np.uint8),
                    "translation": {lang: f"{lang} {i}" for lang in LANGUAGES},
                    "variable": {lang: [f"{lang}{i}", f"{lang}{i}b"][: 1 + i % 2] for lang in languages},
                    "grid": [[f"g{i}{r}{c}" for c in range(3)] for r in range(2)],
                    "rows": np.array(
                        [[f"r{i}{r}a", f"r{i}{r}b"] for r in range(i % 3)], dtype=object
                    ).reshape(-1, 2),
                    "deep": [
                        [list(range(k * 10, k * 10 + (i + k + j) % 3)) for j in range((i + k) % 3)]
                        for k in range(1 + i % 2)
                    ],
                    "deep_vec": [
                        [rng.standard_normal(((i + j) % 3, 2)).astype(np.float32) for j in range(1 + k)]
                        for k in range(i % 3)
                    ],
                    "clips": [
                        [rng.integers(0, 256, (2, 3, 3)).astype(np.uint8) for _ in range((i + k) % 3)]
                        for k in range(1 + i % 2)
                    ],
                    "speech": io.BytesIO(_wav(rng.integers(-(2**15), 2**15, 10 + i).astype(np.int16), 8000)),
                },
            )


def _dims(body: dict) -> list[int | None]:  # type: ignore[type-arg]
    return [None if int(d) < 0 else int(d) for d in (body.get("shape") or {}).get("dimensions", [])]


def _legacy(feature: dict) -> dict:  # type: ignore[type-arg]
    """A features.json node of TFDS 4.x in the format of TFDS 3.x (``type`` / ``content``)."""
    kind = feature["pythonClassName"]
    ((field, body),) = [(k, v) for k, v in feature.items() if k not in ("pythonClassName", "description")]
    body = body or {}
    if field == "featuresDict":
        content = {key: _legacy(value) for key, value in body["features"].items()}
    elif field == "sequence":
        content = {"feature": _legacy(body["feature"]), "length": int(body.get("length", -1))}
        content["length"] = None if content["length"] < 0 else content["length"]
    elif field == "boundingBox":
        content = {}
    elif kind.endswith(".Scalar"):  # no Scalar before 4.0: a Tensor of shape ()
        kind = "tensorflow_datasets.core.features.tensor_feature.Tensor"
        content = {"shape": [], "dtype": body["dtype"]}
    elif field == "tensor":
        content = {"shape": _dims(body), "dtype": body["dtype"]}
        if body.get("encoding") and body["encoding"] != "none":
            content["encoding"] = body["encoding"].lower()
    elif field == "classLabel":
        content = {"num_classes": int(body["numClasses"])}
    elif field == "text":
        content = {}
    elif field == "image":
        content = {
            "shape": _dims(body),
            "dtype": body["dtype"],
            "encoding_format": body.get("encodingFormat"),
        }
    elif field == "video":
        content = {"shape": _dims(body), "dtype": body["dtype"]}
        content.update(encoding_format=body.get("encodingFormat"), ffmpeg_extra_args=[])
    elif field == "audio":
        content = {
            "shape": _dims(body),
            "dtype": body["dtype"],
            "file_format": body.get("fileFormat"),
            "sample_rate": int(body["sampleRate"]),
        }
    else:
        raise TypeError(field)
    return {"type": kind, "content": content}


def main() -> int:
    builder = GoldenMore(data_dir=OUT)
    shutil.rmtree(builder.data_dir, ignore_errors=True)
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(num_shards=2))
    _save_expected(builder, "train", os.path.join(OUT, "expected", builder.name))
    shutil.rmtree(os.path.join(OUT, "downloads"), ignore_errors=True)
    print(builder.data_dir, sorted(os.listdir(builder.data_dir)))
    # The legacy copy: golden_features' train split, features.json in the pre-4.0 format.
    source = os.path.join(OUT, "golden_features", "1.0.0")
    legacy = os.path.join(OUT, "golden_legacy", "1.0.0")
    shutil.rmtree(os.path.dirname(legacy), ignore_errors=True)
    os.makedirs(legacy)
    with open(os.path.join(source, "dataset_info.json")) as file:
        info = json.load(file)
    info["name"] = "golden_legacy"
    info["splits"] = [split for split in info["splits"] if split["name"] == "test"]
    for name in os.listdir(source):
        if name.startswith("golden_features-test"):
            target = name.replace("golden_features", "golden_legacy")
            shutil.copy(os.path.join(source, name), os.path.join(legacy, target))
        elif name.endswith(".labels.txt"):
            shutil.copy(os.path.join(source, name), os.path.join(legacy, name))
    with open(os.path.join(legacy, "dataset_info.json"), "w") as file:
        json.dump(info, file, indent=2)
    with open(os.path.join(source, "features.json")) as file:
        features = json.load(file)
    with open(os.path.join(legacy, "features.json"), "w") as file:
        json.dump(_legacy(features), file, indent=2)
    # TFDS reads the legacy copy as it reads the original: the tests compare it with
    # expected/golden_features/test.json (+ .npz), checked here to be what TFDS gives.
    scratch = os.path.join(OUT, "expected", "_legacy_check")
    _save_expected(tfds.builder_from_directory(legacy), "test", scratch)
    with (
        open(os.path.join(scratch, "test.json")) as a,
        open(os.path.join(OUT, "expected", "golden_features", "test.json")) as b,
    ):
        assert a.read() == b.read(), "TFDS reads the legacy features.json differently"
    shutil.rmtree(scratch)
    return 0


if __name__ == "__main__":
    import make_tfds_golden
    import tensorflow as tf

    make_tfds_golden.tf = tf  # its _jsonable names tf, imported under its __main__
    sys.exit(main())
