from __future__ import annotations

import io
from pathlib import Path

import pytest
import torch
import wire

import torch_tfrecord as tt
from torch_tfrecord.codec.schema import InferredSequenceSpec, InferredSpec, infer_spec_from_records


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


SEQUENCES = Path(__file__).parent / "data" / "examples" / "sequences.tfrecord"


def test_infer_spec_on_tensorflow_sequence_examples() -> None:
    # sequences.tfrecord was written by TensorFlow (make_examples_golden.py); the proposal is the
    # spec its parse_sequence_example results were made with (test_payloads compares the decoding).
    from test_payloads import CONTEXT_SPEC, SEQUENCE_SPEC

    specs = tt.infer_spec(SEQUENCES)
    assert isinstance(specs, InferredSequenceSpec)
    assert specs.context_spec == CONTEXT_SPEC and specs.sequence_spec == SEQUENCE_SPEC
    assert dict(specs) == {"context_spec": CONTEXT_SPEC, "sequence_spec": SEQUENCE_SPEC}  # **specs
    assert specs.steps == {"frames": (0, 3), "ids": (0, 3), "words": (0, 3)} and specs.warnings == []
    assert eval(repr(specs), {"tt": tt, "torch": torch}) == dict(specs)  # code to paste
    context, lists = tt.decode_sequence_example(next(iter(tt.read_records(SEQUENCES))), **specs)
    assert context["id"] == b"first" and lists["ids"].tolist() == [[1], [2, 3], []]


def _sequence(context: dict[str, object], lists: dict[str, list[object]]) -> bytes:
    return tt.encode_sequence_example(context, lists)


def test_feature_list_proposals() -> None:
    records = [
        _sequence(
            {"id": 0, "tag": tt.BytesList([b"a", b"b"])},
            {
                "xy": [[0.5, 1.5], [2.5, 3.5]],  # two values in every step: FixedLenSequence((2,))
                "token": [[1], [2], [3]],  # one value per step: shape ()
                "ids": [[1], [2, 3]],  # lengths vary: VarLen
                "word": [tt.BytesList([b"hi"])],  # missing in record 1: allow_missing
                "pair": [tt.BytesList([b"a", b"b"])],  # bytes steps of 2 values: only VarLen reads them
                "gaps": [[1], []],  # a step with no list set: VarLen
                "none": [[], []],  # no step sets a list: type unknown
                "id": [[1]],  # also a context key
            },
        ),
        _sequence(
            {"id": 1, "tag": tt.BytesList([b"c"])},
            {
                "xy": [],
                "token": [[4]],
                "ids": [[4, 5, 6]],
                "pair": [tt.BytesList([b"c", b"d"])],
                "gaps": [[2]],
                "none": [],
            },
        ),
    ]
    specs = infer_spec_from_records(records)
    assert isinstance(specs, InferredSequenceSpec)
    assert specs.context_spec == {"id": tt.FixedLen((), torch.int64), "tag": tt.VarLen(bytes)}
    assert specs.sequence_spec == {
        "gaps": tt.VarLen(torch.int64),
        "id": tt.FixedLenSequence((), torch.int64, allow_missing=True),
        "ids": tt.VarLen(torch.int64),
        "none": tt.VarLen(torch.float32),
        "pair": tt.VarLen(bytes),
        "token": tt.FixedLenSequence((), torch.int64),
        "word": tt.FixedLenSequence((), bytes, allow_missing=True),
        "xy": tt.FixedLenSequence((2,), torch.float32),
    }
    notes = specs.sequence_spec.notes
    assert notes["gaps"] == "no values in 1 of 3 steps" and "type unknown" in notes["none"]
    assert "also a context feature" in notes["id"] and set(notes) == {"gaps", "none", "id"}
    assert specs.steps["token"] == (1, 3) and specs.steps["xy"] == (0, 2) and specs.steps["word"] == (1, 1)
    del specs.sequence_spec["id"]  # a key is a context or a sequence key, not both
    batch = tt.decode_sequence_batch(records, **specs)[1]
    assert batch["xy"].shape == (2, 2, 2) and batch["word"] == [[b"hi"], []]


def test_examples_with_some_sequence_examples_are_sequence_examples() -> None:
    # An Example reads as a SequenceExample with no feature lists: TensorFlow's parse_sequence_example
    # reads it so, and the feature lists it lacks are proposed as optional.
    records = [tt.encode_example({"id": 0}), _sequence({"id": 1}, {"x": [[1.0]]})]
    specs = infer_spec_from_records(records)
    assert isinstance(specs, InferredSequenceSpec)
    assert specs.sequence_spec == {"x": tt.FixedLenSequence((), torch.float32, allow_missing=True)}
    assert isinstance(infer_spec_from_records(records[:1]), InferredSpec)  # Examples alone: as ever


def test_feature_list_type_conflict_names_key_and_record(tmp_path: Path) -> None:
    path = tmp_path / "mixed.tfrecord"
    with tt.RecordWriter(path) as writer:
        writer.write(_sequence({}, {"x": [[1]]}))
        writer.write(_sequence({}, {"x": [[1], tt.FloatList([0.5])]}))
    with pytest.raises(
        tt.FeatureTypeError, match=r"feature list 'x' holds float_list in record 1 of '.*mixed"
    ):
        tt.infer_spec(path)
