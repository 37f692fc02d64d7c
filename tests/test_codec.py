from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from wire import entry, example, ld, varint

import torch_tfrecord as tt
from torch_tfrecord import (
    ExampleDecodeError,
    FeatureError,
    FeatureShapeError,
    FeatureTypeError,
    FixedLen,
    FixedLenSequence,
    MissingFeatureError,
    Ragged,
    VarLen,
    decode_batch,
    decode_example,
    decode_sequence_batch,
    decode_sequence_example,
    encode_example,
    read_records,
)

SPEC = {
    "label": FixedLen((), torch.int64, default=-1),
    "neg": FixedLen((2,), torch.int64),
    "score": FixedLen((3,), torch.float32),
    "tokens": VarLen(torch.int64),
    "names": VarLen(bytes),
    "weights": VarLen(torch.float32),
    "seq": FixedLenSequence((2,), torch.float32, allow_missing=True),
}
CONTEXT_SPEC = {"id": FixedLen((), bytes), "length": FixedLen((), torch.int64)}
SEQUENCE_SPEC = {
    "frames": FixedLenSequence((3,), torch.float32),
    "words": FixedLenSequence((), bytes, allow_missing=True),
    "ids": VarLen(torch.int64),
}


@pytest.fixture(autouse=True, params=["native", "python"])
def decoder(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test here runs with both decoders (native skipped where it is not built)."""
    if request.param == "native" and tt.native._native is None:
        pytest.skip("the native extension is not built")
    monkeypatch.setenv(tt.native.ENV_VAR, request.param)
    return str(request.param)


@pytest.fixture(scope="module")
def examples_dir() -> Path:
    return Path(__file__).parent / "data" / "examples"


@pytest.fixture(scope="module")
def tf_results(examples_dir: Path) -> dict[str, Any]:
    return json.loads((examples_dir / "expected.json").read_text())


def dense(result: dict[str, Any]) -> torch.Tensor:
    dtype = {"int64": torch.int64, "float32": torch.float32}[result["dtype"]]
    return torch.tensor(result["values"], dtype=dtype).reshape(result["shape"])


def sparse_rows(result: dict[str, Any], batch: int) -> list[list[Any]]:
    """TF's 2-D SparseTensor (VarLen) as rows of Python values."""
    values = result["values"]
    flat = [base64.b64decode(v) for v in values["bytes"]] if "bytes" in values else values["values"]
    rows: list[list[Any]] = [[] for _ in range(batch)]
    for (row, _), value in zip(result["indices"], flat):
        rows[row].append(value)
    return rows


def check_against_tensorflow(batch: dict[str, Any], expected: dict[str, Any], n: int) -> None:
    for key in ["label", "neg", "score"]:
        assert torch.equal(batch[key], dense(expected[key])), key
        assert batch[key].dtype == dense(expected[key]).dtype
    for key in ["tokens", "weights"]:
        assert isinstance(batch[key], Ragged)
        assert batch[key].tolist() == sparse_rows(expected[key], n), key
    assert batch["names"] == sparse_rows(expected["names"], n)
    # FixedLenSequence in an Example: TF pads to the longest; a Ragged padded with 0 must equal it.
    assert torch.equal(batch["seq"].to_padded(0), dense(expected["seq"]))


@pytest.mark.parametrize("name", ["examples", "ours"])
def test_decode_batch_equals_tensorflow(name: str, examples_dir: Path, tf_results: dict[str, Any]) -> None:
    records = list(read_records(examples_dir / f"{name}.tfrecord"))
    check_against_tensorflow(decode_batch(records, SPEC), tf_results["examples"], len(records))
    # TensorFlow parsed the records our encoder wrote exactly like its own.
    assert tf_results["ours"] == tf_results["examples"]


def test_decode_example_equals_rows_of_tensorflow(examples_dir: Path, tf_results: dict[str, Any]) -> None:
    records = list(read_records(examples_dir / "examples.tfrecord"))
    expected = tf_results["examples"]
    tokens = sparse_rows(expected["tokens"], len(records))
    for i, record in enumerate(records):
        sample = decode_example(record, SPEC)
        assert torch.equal(sample["label"], dense(expected["label"])[i])
        assert torch.equal(sample["neg"], dense(expected["neg"])[i])
        assert sample["tokens"].tolist() == tokens[i]
        assert sample["seq"].shape[1:] == (2,)


def test_sequence_batch_equals_tensorflow(examples_dir: Path, tf_results: dict[str, Any]) -> None:
    for name in ["sequences", "ours_sequences"]:
        records = list(read_records(examples_dir / f"{name}.tfrecord"))
        context, sequences, lengths = decode_sequence_batch(records, CONTEXT_SPEC, SEQUENCE_SPEC)
        expected = tf_results["sequences"]
        assert context["id"] == [base64.b64decode(b) for b in expected["context"]["id"]["bytes"]]
        assert torch.equal(context["length"], dense(expected["context"]["length"]))
        assert torch.equal(sequences["frames"], dense(expected["sequences"]["frames"]))
        for key in ["frames", "words"]:  # TF gives lengths of dense sequence features only
            assert torch.equal(lengths[key], dense(expected["lengths"][key])), key
        assert lengths["ids"].tolist() == [3, 1, 0]
        words = expected["sequences"]["words"]
        flat_words = [base64.b64decode(b) for b in words["bytes"]]
        padded = [
            flat_words[i * words["shape"][1] : (i + 1) * words["shape"][1]] for i in range(len(records))
        ]
        assert sequences["words"] == [row[: int(n)] for row, n in zip(padded, lengths["words"])]
        # VarLen sequence feature: TF's 3-D sparse (record, step, value); ours a Ragged per record.
        ids = expected["sequences"]["ids"]
        steps: dict[tuple[int, int], list[int]] = {}
        for (b, t, _), value in zip(ids["indices"], ids["values"]["values"]):
            steps.setdefault((b, t), []).append(value)
        for b, ragged in enumerate(sequences["ids"]):
            assert ragged.tolist() == [steps.get((b, t), []) for t in range(len(ragged))]
    assert tf_results["ours_sequences"] == tf_results["sequences"]


def test_sequence_example_single(examples_dir: Path) -> None:
    record = next(iter(read_records(examples_dir / "sequences.tfrecord")))
    context, sequences = decode_sequence_example(record, CONTEXT_SPEC, SEQUENCE_SPEC)
    assert context == {"id": b"first", "length": torch.tensor(3)}
    assert sequences["frames"].shape == (3, 3)
    assert sequences["words"] == [b"a", b"bb", b"ccc"]
    assert sequences["ids"].tolist() == [[1], [2, 3], []]


def test_missing_required_feature_list(examples_dir: Path) -> None:
    records = list(read_records(examples_dir / "sequences.tfrecord"))
    spec = {"words": FixedLenSequence((), bytes)}
    with pytest.raises(MissingFeatureError, match="'words' is missing from record 1 of the batch"):
        decode_sequence_batch(records, {}, spec)


def test_feature_list_errors_name_the_record_not_the_step() -> None:
    """A bad value in record 1's first step is record 1's fault (both decoders, every spec kind)."""
    good = tt.encode_sequence_example({}, {"ids": [[1], [3]], "words": [[b"a"], [b"b"]]})
    bad = tt.encode_sequence_example({}, {"ids": [[2**40], [4]], "words": [[b"\xff"], [b"c"]]})
    for spec, error in [
        ({"ids": VarLen(torch.int32)}, FeatureShapeError),
        ({"ids": FixedLenSequence((), torch.int32, allow_missing=True)}, FeatureShapeError),
        ({"words": VarLen(str)}, FeatureTypeError),
        ({"words": FixedLenSequence((), str)}, FeatureTypeError),
    ]:
        with pytest.raises(error, match="of record 1 of the batch") as caught:
            decode_sequence_batch([good, bad], {}, spec)
        assert caught.value.record == "record 1 of the batch"


def test_empty_record_and_untyped_empty_feature(tf_results: dict[str, Any]) -> None:
    empty = decode_batch(
        [b""], {"tokens": VarLen(torch.int64), "label": FixedLen((), torch.int64, default=42)}
    )
    assert empty["tokens"].tolist() == [[]] and empty["label"].tolist() == [42]
    assert tf_results["empty_example"]["label"]["values"] == [42]
    record = base64.b64decode(tf_results["untyped_empty"]["record"])
    batch = decode_batch([record], SPEC)
    assert batch["tokens"].tolist() == [[]] and batch["weights"].tolist() == [[]]
    assert tf_results["untyped_empty"]["parsed"]["weights"]["values"]["values"] == []


@pytest.mark.parametrize(
    ("case", "error", "words"),
    [
        (
            "float for int64 (FixedLen)",
            FeatureTypeError,
            "'label' of record 0 of the batch: expected int64 values",
        ),
        ("bytes for float (FixedLen)", FeatureTypeError, "'score'.*expected float values.*found bytes"),
        ("int64 for bytes (VarLen)", FeatureTypeError, "'names'.*expected bytes values.*found int64"),
        ("two values for a scalar", FeatureShapeError, "'label'.*expects 1 values for shape \\(\\).*found 2"),
        ("missing required neg", MissingFeatureError, "'neg' is missing"),
        ("3 values for seq of shape [2]", FeatureShapeError, "'seq'.*multiple of 2.*found 3"),
        ("truncated message", ExampleDecodeError, "record 0 of the batch is not a valid serialized Example"),
    ],
)
def test_we_reject_what_tensorflow_rejects(case: str, error: type, words: str, examples_dir: Path) -> None:
    rejects = json.loads((examples_dir / "rejects.json").read_text())
    assert rejects[case]["tf_error"] == "InvalidArgumentError"
    record = base64.b64decode(rejects[case]["record"])
    with pytest.raises(error, match=words) as info:
        decode_batch([record], SPEC)
    assert isinstance(info.value, FeatureError) and isinstance(info.value, tt.TFRecordError)


def test_errors_name_location_and_key() -> None:
    record = encode_example({"label": 1})
    with pytest.raises(MissingFeatureError) as info:
        decode_example(record, {"missing": FixedLen((), torch.int64)}, location="record 9 of 'a.tfrecord'")
    assert info.value.key == "missing" and info.value.record == "record 9 of 'a.tfrecord'"
    assert str(info.value).startswith("feature 'missing' is missing from record 9 of 'a.tfrecord'")
    assert isinstance(info.value, KeyError)
    with pytest.raises(ValueError, match="locations"):
        decode_batch([record], None, locations=["a", "b"])


@pytest.mark.parametrize(
    ("dtype", "values", "ok"),
    [
        (torch.int32, [2**31 - 1, -(2**31)], True),
        (torch.int32, [2**31], False),
        (torch.uint8, [255, 0], True),
        (torch.uint8, [-1], False),
        (torch.bool, [0, 1], True),
        (torch.bool, [2], False),
        (torch.float16, [65504.0], True),
        (torch.float16, [1e5], False),
        (torch.bfloat16, [1e38], True),
        (torch.float64, [0.1], True),
    ],
)
def test_casts_refuse_overflow(dtype: torch.dtype, values: list[Any], ok: bool) -> None:
    record = encode_example({"x": values})
    spec = {"x": FixedLen((len(values),), dtype)}
    if ok:
        out = decode_example(record, spec)["x"]
        assert out.dtype == dtype
        assert torch.equal(
            out,
            torch.tensor(values, dtype=torch.float32 if isinstance(values[0], float) else torch.int64).to(
                dtype
            ),
        )
    else:
        with pytest.raises(FeatureShapeError, match="does not fit"):
            decode_example(record, spec)
        with pytest.raises(FeatureShapeError, match="does not fit"):
            decode_batch([record], {"x": VarLen(dtype)})


def test_str_and_bytes_specs() -> None:
    records = [
        encode_example({"s": "héllo", "b": [b"x", b"y"]}),
        encode_example({"s": "b", "b": [b"z", b""]}),
    ]
    batch = decode_batch(records, {"s": FixedLen((), str), "b": FixedLen((2,), bytes)})
    assert batch == {"s": ["héllo", "b"], "b": [[b"x", b"y"], [b"z", b""]]}
    bad = encode_example({"s": b"\xff"})
    with pytest.raises(FeatureTypeError, match="not UTF-8"):
        decode_example(bad, {"s": FixedLen((), str)})


def test_raw_tensor_with_named_dims() -> None:
    image = np.arange(24, dtype=np.uint8).reshape(2, 4, 3)
    record = encode_example({"raw": tt.BytesList([image.tobytes()]), "h": 2, "w": 4})
    out = decode_example(record, {"raw": tt.RawTensor(torch.uint8, ("h", "w", 3))})["raw"]
    assert torch.equal(out, torch.from_numpy(image))
    out = decode_example(record, {"raw": tt.RawTensor(torch.uint8, (-1, 3))})["raw"]
    assert out.shape == (8, 3)
    static = decode_batch([record, record], {"raw": tt.RawTensor(torch.uint8, (2, 4, 3))})["raw"]
    assert static.shape == (2, 2, 4, 3)
    with pytest.raises(FeatureShapeError, match="24 items|for shape"):
        decode_example(record, {"raw": tt.RawTensor(torch.uint8, (5, 5))})
    odd = encode_example({"raw": tt.BytesList([b"x" * 10])})
    with pytest.raises(FeatureShapeError, match="whole number"):
        decode_example(odd, {"raw": tt.RawTensor(torch.float32, (-1,))})
    with pytest.raises(MissingFeatureError, match="'depth'.*gives a dimension of 'raw'"):
        decode_example(record, {"raw": tt.RawTensor(torch.uint8, ("depth", 3))})
    negative = encode_example({"raw": tt.BytesList([b"abcd"]), "h": -2})
    with pytest.raises(FeatureShapeError, match="non-negative"):
        decode_example(negative, {"raw": tt.RawTensor(torch.uint8, ("h", -1))})


def test_spec_none_and_shorthands() -> None:
    records = [encode_example({"a": 1, "f": [0.5, 1.5], "s": b"x"}), encode_example({"a": [2, 3]})]
    batch = decode_batch(records)
    assert batch["a"].tolist() == [[1], [2, 3]]
    assert batch["f"].tolist() == [[0.5, 1.5], []]
    assert batch["s"] == [[b"x"], []]
    same = decode_batch(records, {"a": "int", "f": "float", "s": "byte"})
    assert same["a"] == batch["a"] and same["s"] == batch["s"]
    mixed = [encode_example({"a": 1}), encode_example({"a": 1.5})]
    with pytest.raises(FeatureTypeError, match="give a spec"):
        decode_batch(mixed)
    with pytest.raises(ValueError, match="unknown shorthand"):
        decode_batch(records, {"a": "integer"})


feature_values = st.one_of(
    st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1), max_size=5).map(tt.Int64List),
    st.lists(st.floats(width=32, allow_nan=False), max_size=5).map(tt.FloatList),
    st.lists(st.binary(max_size=10), max_size=5).map(tt.BytesList),
)
feature_dicts = st.dictionaries(st.text(min_size=1, max_size=8), feature_values, max_size=6)


@settings(max_examples=150, deadline=None)
@given(feature_dicts)
def test_encode_decode_round_trip(features: dict[str, Any]) -> None:
    decoded = decode_example(encode_example(features))
    assert set(decoded) == set(features)
    for key, value in features.items():
        got = decoded[key]
        expected = list(value.values)
        if isinstance(value, tt.BytesList) or (not expected and isinstance(got, list)):
            assert got == expected
        else:
            assert got.tolist() == expected


@settings(max_examples=80, deadline=None)
@given(st.lists(feature_dicts, min_size=1, max_size=6), st.data())
def test_batched_decode_equals_per_record_decode(batch: list[dict[str, Any]], data: st.DataObject) -> None:
    # One type per key across the batch, as a spec demands.
    kinds: dict[str, type] = {}
    for features in batch:
        for key, value in list(features.items()):
            if kinds.setdefault(key, type(value)) is not type(value):
                del features[key]
    spec = {
        key: VarLen({tt.Int64List: torch.int64, tt.FloatList: torch.float32, tt.BytesList: bytes}[kind])
        for key, kind in kinds.items()
    }
    records = [encode_example(f) for f in batch]
    columns = decode_batch(records, spec)
    for i, record in enumerate(records):
        single = decode_example(record, spec)
        for key in spec:
            column = columns[key]
            row = column[i]
            if isinstance(row, torch.Tensor):
                assert torch.equal(row, single[key])
            else:
                assert row == single[key]


@pytest.mark.parametrize("count", [3, 200])  # short lists and the packed-bytes fast path
def test_unpacked_and_packed_encodings_decode_alike(count: int) -> None:
    import struct

    ints = [(-1) ** i * (i * 7919) ** 3 for i in range(count)]
    floats = [i / 3 for i in range(count)]
    unpacked_ints = b"".join(varint(1 << 3 | 0) + varint(v) for v in ints)  # field 1, wire type 0
    unpacked_floats = b"".join(varint(1 << 3 | 5) + struct.pack("<f", v) for v in floats)  # wire type 5
    records = [
        example(entry(b"i", ld(3, unpacked_ints))),
        example(entry(b"i", ld(3, ld(1, b"".join(varint(v) for v in ints))))),
    ]
    float_records = [
        example(entry(b"f", ld(2, unpacked_floats))),
        example(entry(b"f", ld(2, ld(1, struct.pack(f"<{count}f", *floats))))),
        # An unknown field inside the FloatList survives re-serialization: the slow path must serve.
        example(entry(b"f", ld(2, ld(1, struct.pack(f"<{count}f", *floats)) + ld(9, b"x")))),
    ]
    spec = {"i": FixedLen((count,), torch.int64)}
    batch = decode_batch(records, spec)
    assert batch["i"].tolist() == [ints, ints]
    assert decode_batch(records, {"i": VarLen(torch.int64)})["i"].tolist() == [ints, ints]
    expected = torch.tensor(floats, dtype=torch.float32).tolist()
    floats_batch = decode_batch(float_records, {"f": FixedLen((count,), torch.float32)})["f"]
    assert floats_batch.tolist() == [expected, expected, expected]


def test_unknown_fields_are_ignored() -> None:
    record = encode_example({"label": 5}) + ld(15, b"future field")
    assert decode_example(record, {"label": FixedLen((), torch.int64)})["label"].item() == 5


EMPTY_FEATURES = Path(__file__).parent / "data" / "empty_features"
_GOLDEN_DTYPES: dict[str, Any] = {"int64": torch.int64, "float32": torch.float32, "bytes": bytes}


def _golden_spec(kind: str, arguments: dict[str, Any]) -> Any:
    dtype = _GOLDEN_DTYPES[arguments["dtype"]]
    if kind == "VarLen":
        return VarLen(dtype)
    default = arguments.get("default")
    default = default.encode() if isinstance(default, str) else default
    if kind == "FixedLen":
        return FixedLen(tuple(arguments["shape"]), dtype, default=default)
    return FixedLenSequence(tuple(arguments["shape"]), dtype, allow_missing=arguments["allow_missing"])


def _flat(values: Any) -> list[Any]:
    if isinstance(values, list):
        return [v for item in values for v in _flat(item)]
    return [values.decode("latin-1") if isinstance(values, bytes) else values]


def _as_tensorflow_gives(decoded: Any, kind: str, n: int) -> dict[str, Any]:
    """Our column in the shape of the golden file's entry (FixedLenSequence: one record)."""
    if kind == "VarLen":
        if isinstance(decoded, Ragged):
            return {"values": decoded.values.tolist(), "lengths": decoded.offsets.diff().tolist()}
        return {"values": _flat(decoded), "lengths": [len(row) for row in decoded]}
    if kind == "FixedLen":
        if isinstance(decoded, torch.Tensor):
            return {"values": decoded.tolist(), "shape": list(decoded.shape)}
        return {"values": _flat(decoded), "shape": [n]}
    assert isinstance(decoded, Ragged) and n == 1
    return {"values": [decoded.values.tolist()], "shape": [1, *decoded.values.shape]}


def _tensorflow_error(message: str) -> type[Exception]:
    if "is required but could not be found" in message:
        return MissingFeatureError
    assert "values != expected" in message, message
    return FeatureShapeError


def test_features_with_no_list_set_decode_as_tensorflow_parses_them() -> None:
    """TFX's CSV example gen writes a Feature with no list for an empty cell: TensorFlow reads it
    as a missing key (the default; zero values; an error for a required feature), and so do we.
    Golden results from tests/data/make_empty_features_golden.py (real TensorFlow)."""
    golden = json.loads((EMPTY_FEATURES / "expected.json").read_text())
    records = list(read_records(EMPTY_FEATURES / "records.tfrecord"))
    assert len(golden["cases"]) == 19
    for name, case in golden["cases"].items():
        key, kind = case["key"], case["kind"]
        spec = {key: _golden_spec(kind, case["arguments"])}
        for i, expected in enumerate(case["per_record"]):
            if "error" in expected:
                with pytest.raises(_tensorflow_error(expected["message"]), match=repr(key)):
                    decode_batch([records[i]], spec)
                continue
            got = _as_tensorflow_gives(decode_batch([records[i]], spec)[key], kind, 1)
            assert got == expected, (name, i)
        expected = case["batch"]
        if "error" in expected:
            with pytest.raises(_tensorflow_error(expected["message"])):
                decode_batch(records, spec)
        elif kind != "FixedLenSequence":  # TensorFlow pads sequences in a batch; ours are Ragged
            assert _as_tensorflow_gives(decode_batch(records, spec)[key], kind, 3) == expected, name
        else:
            ragged = decode_batch(records, spec)[key]
            rows = [_as_tensorflow_gives(ragged[i : i + 1], kind, 1) for i in range(3)]
            assert rows == case["per_record"], name


def test_a_required_feature_with_no_list_set_is_named_as_such() -> None:
    records = list(read_records(EMPTY_FEATURES / "records.tfrecord"))
    with pytest.raises(
        MissingFeatureError,
        match=r"feature 'i' has no values in record 0 of the batch .*"
        r"a Feature with no list set counts as missing, as in TensorFlow",
    ):
        decode_batch(records, {"i": FixedLen((), torch.int64)})
    with pytest.raises(MissingFeatureError, match="feature 'i' is missing from record 0 of the batch and"):
        decode_batch(records[2:], {"i": FixedLen((), torch.int64)})


def test_spec_none_types_a_key_with_no_list_where_its_type_is_known() -> None:
    no_list = example(entry(b"age", b""), entry(b"city", b""))  # TFX: empty CSV cells
    typed = encode_example({"age": 41, "city": tt.BytesList([b"Oslo"])})
    batch = decode_batch([no_list, typed])  # the batch knows the types
    assert batch["age"].values.dtype == torch.int64 and batch["age"].offsets.tolist() == [0, 0, 1]
    assert batch["city"] == [[], [b"Oslo"]]
    alone = decode_batch([no_list], dtypes={"age": torch.int64, "city": bytes})  # known elsewhere
    assert alone["age"].values.dtype == torch.int64 and alone["age"].offsets.tolist() == [0, 0]
    assert alone["city"] == [[]]
    never = decode_batch([no_list])  # typed nowhere: an empty float32 VarLen, as documented
    assert never["age"].values.dtype == torch.float32 and len(never["age"].values) == 0
