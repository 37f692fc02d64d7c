from __future__ import annotations

import io
from pathlib import Path

import pytest
import torch
import wire

import torch_tfrecord as tt
from torch_tfrecord.schema import infer_spec_from_records


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


def _with_empty_feature(features: dict[str, object], empty_key: str) -> bytes:
    """An Example with ``empty_key`` present but no list set (TFX's CSV example gen, empty cell)."""
    return tt.encode_example(features) + wire.example(wire.entry(empty_key.encode(), b""))


def test_infer_spec_on_a_key_with_no_list_in_any_record(tmp_path: Path) -> None:
    records = [_with_empty_feature({"label": i}, "comment") for i in range(3)]
    spec = infer_spec_from_records(records)
    # Never FixedLen((0,)): TensorFlow refuses that shape, and it decodes nothing useful.
    assert spec["comment"] == tt.VarLen(torch.float32)
    assert "type unknown" in spec.notes["comment"] and "type unknown" in repr(spec)
    assert eval(repr(spec), {"tt": tt, "torch": torch}) == dict(spec)
    assert spec["label"] == tt.FixedLen((), torch.int64)


def test_infer_spec_takes_the_type_from_the_records_that_have_values(tmp_path: Path) -> None:
    records = [
        tt.encode_example({"age": 31, "city": tt.BytesList([b"Oslo"])}),
        _with_empty_feature({"city": tt.BytesList([b"Rome"])}, "age"),
        _with_empty_feature({"age": 40}, "city"),
    ]
    spec = infer_spec_from_records(records)
    assert spec == {"age": tt.VarLen(torch.int64), "city": tt.VarLen(bytes)}
    assert spec.notes["age"] == "no values in 1 of 3 records that have it"


def elwc_record() -> bytes:
    """A TF-Ranking ExampleListWithContext (examples = 1, context = 2), built on the wire."""
    context = tt.encode_example({"query_tokens": tt.BytesList([b"rain", b"boots"])})
    examples = [
        tt.encode_example({"document_tokens": tt.BytesList([b"red", b"rain", b"boots"]), "relevance": 2}),
        tt.encode_example({"document_tokens": tt.BytesList([b"blue"]), "relevance": 0, "score": [0.5]}),
    ]
    return b"".join(wire.ld(1, example) for example in examples) + wire.ld(2, context)


def test_infer_spec_doubts_records_that_only_parse_as_examples(caplog: pytest.LogCaptureFixture) -> None:
    spec = infer_spec_from_records([elwc_record()] * 2)
    assert len(spec) == 2  # garbage keys: the serialized Features of the list's examples
    (warning,) = spec.warnings
    assert "probably not tf.train.Examples" in warning and "ExampleListWithContext" in warning
    assert "tt.read_records" in warning and "\\n\\x05score" in warning
    assert "probably not tf.train.Examples" in caplog.text
    assert "# warning:" in repr(spec) and "\n" not in repr(spec).splitlines()[1]
    assert infer_spec_from_records([tt.encode_example({"label": 1, "naïve key": 2})]).warnings == []


def test_non_utf8_keys_are_not_an_example(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # An ExampleListWithContext whose examples hold a value >= 128: the "keys" are not UTF-8, and
    # protobuf refuses the parse; the error suggests reading raw bytes.
    inner = tt.encode_example({"relevance": 200})
    path = tmp_path / "elwc.tfrecord"
    with tt.RecordWriter(path) as writer:
        writer.write(wire.ld(1, inner))
    with pytest.raises(tt.ExampleDecodeError, match=r"not a serialized Example.*tt\.read_records\(path\)"):
        tt.infer_spec(path)
    from torch_tfrecord.cli import main

    assert main(["head", str(path)]) == 0
    assert "not an Example" in capsys.readouterr().out
