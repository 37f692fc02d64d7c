from __future__ import annotations

import io
from pathlib import Path

import pytest
import torch

import torch_tfrecord as tt


def png_bytes() -> bytes:
    pil = pytest.importorskip("PIL.Image")
    buffer = io.BytesIO()
    pil.new("RGB", (4, 3), (10, 20, 30)).save(buffer, format="PNG")
    return buffer.getvalue()


def test_infer_spec(tmp_path: Path) -> None:
    image = png_bytes()
    with tt.ExampleWriter(tmp_path / "a.tfrecord") as writer:
        for i in range(5):
            features = {
                "label": i,
                "vec": [0.5, 1.5],
                "tokens": list(range(i)),
                "image": tt.BytesList([image]),
            }
            if i % 2:
                features["optional"] = 7
            writer.write(features)
    spec = tt.infer_spec(tmp_path / "a.tfrecord")
    assert spec == {
        "image": tt.Image("RGB"),
        "label": tt.FixedLen((), torch.int64),
        "optional": tt.VarLen(torch.int64),
        "tokens": tt.VarLen(torch.int64),
        "vec": tt.FixedLen((2,), torch.float32),
    }
    pasted = eval(repr(spec), {"tt": tt, "torch": torch})
    assert pasted == spec
    batch = tt.decode_batch(list(tt.read_records(tmp_path / "a.tfrecord")), spec)
    assert batch["label"].tolist() == [0, 1, 2, 3, 4] and batch["image"][0].shape == (3, 3, 4)
    # Two records: lengths 0 and 1.
    assert tt.infer_spec(tmp_path / "a.tfrecord", max_records=2)["tokens"] == tt.VarLen(torch.int64)


def test_infer_spec_rejects_non_examples(tmp_path: Path) -> None:
    with tt.RecordWriter(tmp_path / "b.tfrecord") as writer:
        writer.write(b"\x0a\x05\x0a")
    with pytest.raises(tt.ExampleDecodeError, match="record 0 of '.*b.tfrecord' is not a serialized"):
        tt.infer_spec(tmp_path / "b.tfrecord")
    with pytest.raises(ValueError, match="max_records"):
        tt.infer_spec(tmp_path / "b.tfrecord", max_records=0)
