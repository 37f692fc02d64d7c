"""Reads the data tests/test_wheel.py wrote through every native path, and saves what came out.

    python tests/wheel_check.py DATA OUT.pt

Run twice by the test: by the fresh venv's Python that has the portable wheel installed, and by the
checkout's (the editable build); the two files must hold the same records, tensors and pixels. It
also says which paths ran: the native decoder, the region-of-interest JPEG decoder and its SIMD
resize, each loaded from where (so the test can check they come from the wheel).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch

import torch_tfrecord as tt
from torch_tfrecord.codec import image_roi, native
from torch_tfrecord.records.index import load_index
from torch_tfrecord.support import extension

SPEC = {
    "id": tt.FixedLen((), torch.int64),
    "score": tt.FixedLen((2,), torch.float32),
    "tags": tt.VarLen(torch.int64),
    "name": tt.FixedLen((), bytes),
}
IMAGES = {
    f"{mode}-{crop}-{dct}": tt.Image(mode, size=(40, 48), crop=crop, dct=dct)  # type: ignore[arg-type]
    for mode in ("RGB", "L")
    for crop in ("resize", "center", "random")
    for dct in ("accurate", "fast")
}


def _records(data: Path) -> dict[str, Any]:
    shards = sorted(str(p) for p in data.glob("records-*.tfrecord"))
    raw = [record for shard in shards for record in tt.read_records(shard)]  # the framing loop
    out: dict[str, Any] = {"raw": raw, "index": [load_index(s + ".idx").tolist() for s in shards]}
    out["decoded"] = tt.decode_batch(raw, SPEC)  # the Example wire decoder
    dataset = tt.TFRecordDataset(
        shards, spec=SPEC, batch_size=32, shuffle="global", seed=3
    )  # gather, feistel
    out["epoch"] = [batch for batch in dataset]
    return out


def _images(data: Path) -> dict[str, Any]:
    shard = str(data / "images.tfrecord")
    out = {}
    for name, image in IMAGES.items():
        spec = {"image": image, "id": tt.FixedLen((), torch.int64)}
        dataset = tt.TFRecordDataset(shard, spec=spec, batch_size=25, shuffle=False, seed=1)
        try:
            out[name] = [batch for batch in dataset]
        except ImportError as error:  # a build without _jpeg: TensorFlow's crops need PyTurboJPEG
            out[name] = f"unavailable: {error}"
    return out


def main() -> None:
    data, target = Path(sys.argv[1]), Path(sys.argv[2])
    paths = {
        "package": tt.__file__,
        "decoder": native.decoder(),
        "native": getattr(extension.compiled, "__file__", None),
        "hw_crc": bool(getattr(extension.compiled, "HW_CRC", False)),
        "permutation_avx512": bool(getattr(extension.compiled, "PERMUTATION_AVX512", False)),
        "roi_jpeg": getattr(image_roi.compiled, "__file__", None),
        "native_resize": image_roi.resizes_fast(),
    }
    torch.save({"records": _records(data), "images": _images(data)}, target)
    print(json.dumps(paths))


if __name__ == "__main__":
    main()
