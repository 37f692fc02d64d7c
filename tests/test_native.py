"""The native decoder against the protobuf decoder: same values, or both reject.

The protobuf runtime (upb) is the oracle. Hand-written wire-format cases pin down the corners
of the format (packed / unpacked, oneof switching, merged and repeated map entries, unknown
fields and groups, malformed varints and tags); seeded mutations of real records check that
whatever one decoder accepts the other accepts with the same values, and whatever one rejects
the other rejects with the same kind of error.
"""

from __future__ import annotations

import os
import random
import signal
import struct
import subprocess
import sys
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from google.protobuf.message import DecodeError
from wire import entry, example, ld, tag, varint

import torch_tfrecord as tt
from torch_tfrecord import (
    ExampleDecodeError,
    FeatureShapeError,
    FeatureTypeError,
    FixedLen,
    FixedLenSequence,
    MissingFeatureError,
    Ragged,
    RawTensor,
    VarLen,
)
from torch_tfrecord.codec import decode as codec_decode
from torch_tfrecord.codec import native
from torch_tfrecord.codec.spec import normalize_spec
from torch_tfrecord.proto import Example, SequenceExample
from torch_tfrecord.records import gather
from torch_tfrecord.records.framing import encode_record
from torch_tfrecord.support import extension as _extension

pytestmark = pytest.mark.skipif(native._native is None, reason="the native extension is not built")

ERROR_CODES = {ExampleDecodeError: 2, FeatureTypeError: 3, FeatureShapeError: 4, MissingFeatureError: 5}


# ---------------------------------------------------------------------------------------- wire


def groups(n: int) -> bytes:
    return tag(9, 3) * n + tag(9, 4) * n


def ints(*values: int, packed: bool = True) -> bytes:
    if packed:
        return ld(3, ld(1, b"".join(varint(v) for v in values)))
    return ld(3, b"".join(tag(1, 0) + varint(v) for v in values))


def floats(*values: float, packed: bool = True) -> bytes:
    if packed:
        return ld(2, ld(1, struct.pack(f"<{len(values)}f", *values)))
    return ld(2, b"".join(tag(1, 5) + struct.pack("<f", v) for v in values))


def strings(*values: bytes) -> bytes:
    return ld(1, b"".join(ld(1, v) for v in values))


# ----------------------------------------------------------------------------------- decoders


def decode_with(decoder: str, call: Callable[[], Any]) -> Any:
    old = os.environ.get(native.ENV_VAR)
    os.environ[native.ENV_VAR] = decoder
    try:
        return call()
    finally:
        if old is None:
            del os.environ[native.ENV_VAR]
        else:
            os.environ[native.ENV_VAR] = old


def outcome(call: Callable[[], Any]) -> Any:
    """The decoded value, or ``("error", code)`` for the kind of error raised."""
    try:
        return call()
    except native.Rejected as error:
        return ("error", error.code)
    except tuple(ERROR_CODES) as error:  # type: ignore[misc]
        return ("error", ERROR_CODES[type(error)])


def same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        if not (isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape):
            return False
        if a.dtype.is_floating_point:  # NaN equals NaN (payloads may differ), -0.0 is not 0.0
            both_nan = a.isnan() & b.isnan()
            return bool((both_nan | ((a == b) & (a.signbit() == b.signbit()))).all())
        return torch.equal(a, b)
    if isinstance(a, Ragged):
        return isinstance(b, Ragged) and same(a.values, b.values) and same(a.offsets, b.offsets)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return bool(a == b) and type(a) is type(b)


def native_examples(records: list[bytes], spec: Mapping[str, Any]) -> Any:
    normalized = normalize_spec(spec)
    assert normalized is not None
    return native.decode_examples(records, normalized, None)


def reference_examples(records: list[bytes], spec: Mapping[str, Any]) -> Any:
    return decode_with("python", lambda: tt.decode_batch(records, spec))


def is_error(result: Any) -> bool:
    return isinstance(result, tuple) and result[:1] == ("error",)


def agree(ours: Any, reference: Any) -> bool:
    """Same values, or both reject; a malformed message is a parse error for both.

    Which of several bad features is reported first may differ (the extension checks counts
    record by record, the protobuf decoder feature by feature): users never see that, since a
    rejected batch is decoded again by the protobuf decoder, which raises its own error.
    """
    if is_error(ours) or is_error(reference):
        return is_error(ours) and is_error(reference) and (ours[1] == 2) == (reference[1] == 2)
    return same(ours, reference)


def assert_agree(records: list[bytes], spec: Mapping[str, Any]) -> Any:
    ours = outcome(lambda: native_examples(records, spec))
    reference = outcome(lambda: reference_examples(records, spec))
    assert agree(ours, reference), (records, spec, ours, reference)
    user = outcome(lambda: decode_with("native", lambda: tt.decode_batch(records, spec)))
    assert same(user, reference), (records, spec, user, reference)
    return ours


def native_parses(record: bytes, sequence: bool = False) -> bool:
    assert native._native is not None
    result = native._native.decode(record, np.array([0]), np.array([len(record)]), (), sequence=sequence)
    return not isinstance(result, tuple)


def protobuf_parses(record: bytes, sequence: bool = False) -> bool:
    try:
        (SequenceExample if sequence else Example).FromString(record)
    except DecodeError:
        return False
    return True


# -------------------------------------------------------------------------------- wire corners

I = {"x": VarLen(torch.int64)}  # noqa: E741
F = {"x": VarLen(torch.float32)}
B = {"x": VarLen(bytes)}

CORNERS: list[tuple[str, bytes, Mapping[str, Any]]] = [
    ("packed ints", example(entry(b"x", ints(1, -1, 2**63 - 1, -(2**63)))), I),
    ("unpacked ints", example(entry(b"x", ints(5, -7, packed=False))), I),
    ("packed and unpacked mixed", example(entry(b"x", ld(3, ld(1, varint(1)) + tag(1, 0) + varint(2)))), I),
    ("empty packed", example(entry(b"x", ld(3, ld(1, b"")))), I),
    ("unpacked floats", example(entry(b"x", floats(1.5, -0.0, float("inf"), packed=False))), F),
    ("packed floats", example(entry(b"x", floats(1.5, 3e38))), F),
    ("packed floats not a multiple of 4", example(entry(b"x", ld(2, ld(1, b"\0\0\0")))), F),
    ("bytes values", example(entry(b"x", strings(b"", b"a", bytes(range(256))))), B),
    ("no list set", example(entry(b"x", b"")), I),
    ("key without value", example(ld(1, ld(1, b"x"))), I),
    ("value without key", example(ld(1, ld(2, ints(3)))), {"": VarLen(torch.int64)}),
    ("duplicate key: last wins", example(entry(b"x", ints(1)), entry(b"x", ints(2, 3))), I),
    ("duplicate key, other type last", example(entry(b"x", ints(1)), entry(b"x", strings(b"a"))), I),
    ("duplicate key, right type last", example(entry(b"x", strings(b"a")), entry(b"x", ints(9))), I),
    ("features field twice: maps merge", example(entry(b"x", ints(1))) + example(entry(b"y", ints(2))), I),
    ("oneof switches member", example(entry(b"x", ints(1) + strings(b"a"))), I),
    ("oneof switches back", example(entry(b"x", ints(1) + strings(b"a") + ints(2))), I),
    ("same member merges", example(entry(b"x", ints(1) + ints(2))), I),
    ("value field twice merges", example(entry(b"x", ints(1), ints(2))), I),
    (
        "entry with an unknown field is not in the map",
        example(ld(1, ld(1, b"x") + ld(2, ints(1)) + ld(9, b""))),
        I,
    ),
    (
        "entry with a key of wire type 0",
        example(ld(1, tag(1, 0) + varint(1) + ld(1, b"x") + ld(2, ints(1)))),
        I,
    ),
    (
        "unknown-field entry keeps the earlier one",
        example(entry(b"x", ints(5)), ld(1, ld(1, b"x") + tag(7, 0) + varint(0))),
        I,
    ),
    ("an earlier key field not UTF-8", example(ld(1, ld(1, b"\xff") + ld(1, b"x") + ld(2, ints(1)))), I),
    ("key field twice: last wins", example(ld(1, ld(1, b"y") + ld(2, ints(4)) + ld(1, b"x"))), I),
    (
        "unknown fields everywhere",
        example(entry(b"x", ints(1) + ld(9, b"z")) + tag(7, 0) + varint(3)) + tag(5, 5) + b"abcd",
        I,
    ),
    ("unknown group", example(entry(b"x", ints(1))) + tag(9, 3) + tag(1, 0) + varint(1) + tag(9, 4), I),
    ("nested unknown groups", tag(9, 3) + tag(8, 3) + tag(8, 4) + tag(9, 4), I),
    ("unterminated group", tag(9, 3) + tag(1, 0) + varint(1), I),
    ("mismatched group end", tag(9, 3) + tag(8, 4), I),
    ("end group at top level", tag(9, 4), I),
    ("deep groups (99)", b"".join(tag(9, 3) for _ in range(99)) + b"".join(tag(9, 4) for _ in range(99)), I),
    (
        "deep groups (100)",
        b"".join(tag(9, 3) for _ in range(100)) + b"".join(tag(9, 4) for _ in range(100)),
        I,
    ),
    (
        "deep groups (101)",
        b"".join(tag(9, 3) for _ in range(101)) + b"".join(tag(9, 4) for _ in range(101)),
        I,
    ),
    (
        "deep groups (500)",
        b"".join(tag(9, 3) for _ in range(500)) + b"".join(tag(9, 4) for _ in range(500)),
        I,
    ),
    ("groups in a Feature (97)", example(entry(b"x", ints(1) + groups(97))), I),
    ("groups in a Feature (98)", example(entry(b"x", ints(1) + groups(98))), I),
    ("groups in an Int64List (96)", example(entry(b"x", ld(3, groups(96)))), I),
    ("groups in an Int64List (97)", example(entry(b"x", ld(3, groups(97)))), I),
    ("groups in a map entry (98)", ld(1, ld(1, ld(1, b"x") + groups(98))), I),
    ("groups in a map entry (99)", ld(1, ld(1, ld(1, b"x") + groups(99))), I),
    ("features with wire type 0 is unknown", tag(1, 0) + varint(5), I),
    ("int list with wire type 5 is unknown", example(entry(b"x", ld(3, tag(1, 5) + b"abcd"))), I),
    ("float list with wire type 0 is unknown", example(entry(b"x", ld(2, tag(1, 0) + varint(3)))), F),
    ("bytes list with wire type 0 is unknown", example(entry(b"x", ld(1, tag(1, 0) + varint(3)))), B),
    ("field number 0", tag(0, 0) + varint(1), I),
    ("field number 0 inside a group", tag(14, 3) + tag(0, 0) + varint(1) + tag(14, 4), I),
    ("group of field 0 inside a group", tag(14, 3) + tag(0, 3) + tag(0, 4) + tag(14, 4), I),
    ("end of group 0 inside group 14", tag(14, 3) + tag(0, 4), I),
    ("wire type 6", varint(1 << 3 | 6), I),
    ("wire type 7", varint(1 << 3 | 7), I),
    ("tag of 5 bytes", bytes([0x88, 0x80, 0x80, 0x80, 0x00]) + varint(1), I),
    ("tag of 6 bytes", bytes([0x88, 0x80, 0x80, 0x80, 0x80, 0x00]) + varint(1), I),
    ("tag over 32 bits", bytes([0xF8, 0xFF, 0xFF, 0xFF, 0x1F]) + varint(1), I),
    ("largest field number", varint((2**29 - 1) << 3 | 0) + varint(1), I),
    ("varint of 10 bytes", example(entry(b"x", ld(3, ld(1, b"\xff" * 9 + b"\x01")))), I),
    ("varint of 10 bytes, high bits", example(entry(b"x", ld(3, ld(1, b"\xff" * 9 + b"\x7f")))), I),
    ("varint of 11 bytes", example(entry(b"x", ld(3, ld(1, b"\xff" * 10 + b"\x01")))), I),
    ("truncated varint in a packed list", example(entry(b"x", ld(3, ld(1, b"\x81")))), I),
    ("length past the end", ld(1, b"abc")[:-1], I),
    ("length of 2**31", tag(1, 2) + varint(2**31) + b"x", I),
    ("length 0 in 5 bytes", example(ld(1, ld(1, b"x") + tag(2, 2) + b"\x80\x80\x80\x80\x00")), I),
    ("length 0 in 6 bytes", example(ld(1, ld(1, b"x") + tag(2, 2) + b"\x80\x80\x80\x80\x80\x00")), I),
    (
        "list length in 10 bytes",
        example(entry(b"x", tag(3, 2) + b"\x83" + b"\x80" * 8 + b"\x00" + ld(1, b"\x01"))),
        I,
    ),
    ("length of 2**63", tag(1, 2) + varint(2**63) + b"x", I),
    ("fixed64 cut short", tag(9, 1) + b"1234567", I),
    ("invalid UTF-8 key", example(entry(b"\xff", ints(1))), I),
    ("overlong UTF-8 key", example(entry(b"\xc0\xaf", ints(1))), I),
    ("surrogate in key", example(entry(b"\xed\xa0\x80", ints(1))), I),
    ("4-byte UTF-8 key", example(entry("🦀".encode(), ints(1))), {"🦀": VarLen(torch.int64)}),
    ("key beyond U+10FFFF", example(entry(b"\xf4\x90\x80\x80", ints(1))), I),
    ("empty record", b"", I),
]


# upb (protobuf's parser) answers these otherwise before protobuf 7.34; the native decoder gives 7.34's
# answer (found by the compatibility matrix's floor stack, protobuf 5.29: .ci/compat.py)
CHANGED_IN_PROTOBUF_7_34 = {
    "field number 0 inside a group", "group of field 0 inside a group", "length 0 in 6 bytes",
    "list length in 10 bytes",
}  # fmt: skip


@pytest.mark.parametrize("case", [c[0] for c in CORNERS])
def test_wire_corner_agrees_with_protobuf(case: str) -> None:
    from google.protobuf import __version__ as protobuf_version

    release = tuple(int(part) for part in protobuf_version.split(".")[:2])
    if case in CHANGED_IN_PROTOBUF_7_34 and release < (7, 34):
        pytest.skip(f"protobuf {protobuf_version} parses {case!r} as protobuf before 7.34 did")
    _, record, spec = next(c for c in CORNERS if c[0] == case)
    assert native_parses(record) == protobuf_parses(record), case
    assert native_parses(record, sequence=True) == protobuf_parses(record, sequence=True), case
    assert_agree([record], spec)


def test_corner_cases_decode_to_what_the_format_says() -> None:
    # Spot checks that the agreement above is about right values, not shared mistakes.
    batch = native_examples(
        [
            example(entry(b"x", ints(1)), entry(b"x", ints(2, 3))),
            example(entry(b"x", ints(1) + strings(b"a") + ints(7))),
        ],
        I,
    )
    assert batch["x"].tolist() == [[2, 3], [7]]
    big = native_examples([example(entry(b"x", ld(3, ld(1, b"\xff" * 9 + b"\x01"))))], I)
    assert big["x"].tolist() == [[-1]]


# --------------------------------------------------------------------------- specs and shapes


SPEC = {
    "label": FixedLen((), torch.int64, default=-1),
    "pair": FixedLen((2,), torch.int32),
    "score": FixedLen((3,), torch.float32),
    "half": VarLen(torch.float16),
    "tokens": VarLen(torch.int64),
    "names": VarLen(bytes),
    "title": FixedLen((), str, default="none"),
    "seq": FixedLenSequence((2,), torch.float32, allow_missing=True),
    "raw": RawTensor(torch.int16, (2, -1)),
    "flag": FixedLen((), torch.bool, default=0),
}


def good_record(i: int, **overrides: Any) -> bytes:
    features: dict[str, Any] = {
        "pair": [i, -i],
        "score": [i / 2, i / 3, -i],
        "half": [float(i)] * (i % 3),
        "tokens": list(range(i % 5)),
        "names": [f"n{j}".encode() for j in range(i % 4)],
        "seq": [0.5] * (2 * (i % 3)),
        "raw": tt.BytesList([np.arange(2 * (i % 4 + 1), dtype="<i2").tobytes()]),
        "flag": i % 2,
    }
    if i % 3:
        features["label"] = i
        features["title"] = [f"título {i}".encode()]
    return tt.encode_example({**features, **overrides})


def test_batch_of_every_spec_kind_is_identical() -> None:
    records = [good_record(i) for i in range(40)]
    batch = assert_agree(records, SPEC)
    assert isinstance(batch, dict) and batch["label"][0].item() == -1 and batch["title"][1] == "título 1"
    assert batch["pair"].dtype == torch.int32 and batch["half"].values.dtype == torch.float16


@pytest.mark.parametrize(
    ("key", "value", "code"),
    [
        ("pair", [1, 2, 3], 4),  # wrong count
        ("pair", [2**40, 1], 4),  # does not fit int32
        ("score", tt.BytesList([b"x"]), 3),  # wrong type
        ("flag", 2, 4),  # not a bool
        ("title", [b"\xff"], 3),  # not UTF-8
        ("seq", [1.0, 2.0, 3.0], 4),  # not a multiple of the step
        ("raw", tt.BytesList([b"abc"]), 4),  # not whole int16 items
    ],
)
def test_bad_feature_fails_alike(key: str, value: Any, code: int) -> None:
    records = [good_record(1), good_record(4, **{key: value})]
    assert outcome(lambda: native_examples(records, SPEC)) == ("error", code)
    assert_agree(records, SPEC)
    with pytest.raises(next(e for e, c in ERROR_CODES.items() if c == code), match="record 1 of the batch"):
        tt.decode_batch(records, SPEC)  # native first, then protobuf names the record


def test_bytes_values_past_the_unlocked_copy_size_are_cut_exactly() -> None:
    """Batches whose bytes values add up to more than bytes_rows copies while holding the GIL
    (64 KB: then the values are filled after it is released) decode as protobuf decodes them:
    scalars and lists, empty values among them, each value its own bytes object."""
    spec = {"blob": tt.FixedLen((), bytes), "parts": tt.VarLen(bytes)}
    records = [
        tt.encode_example(
            {"blob": bytes([i % 251]) * (4096 + i), "parts": [bytes([i % 7]) * (i * 97 % 3000), b"", b"z"]}
        )
        for i in range(64)
    ]
    batch = assert_agree(records, spec)
    assert sum(len(value) for value in batch["blob"]) > 64 * 1024
    assert batch["blob"][5] == bytes([5]) * 4101 and batch["parts"][3] == [bytes([3]) * 291, b"", b"z"]
    assert len({id(value) for value in batch["blob"]}) == len(records)


def test_missing_required_feature_fails_alike() -> None:
    record = tt.encode_example({"tokens": [1]})
    assert outcome(lambda: native_examples([record], {"pair": SPEC["pair"]})) == ("error", 5)
    assert_agree([record], {"pair": SPEC["pair"]})
    assert_agree([record], {"seq": FixedLenSequence((2,), torch.float32)})


def test_a_default_bytes_list_is_a_list_of_its_own_in_each_row() -> None:
    """Rows filled from a bytes feature's default are separate lists, as protobuf's decoder makes
    them (one list shared by every missing row let a transform's edit of one row change the
    others, and with runs of batches decoded at once, rows of other batches)."""
    spec = {"id": FixedLen((), torch.int64), "tags": FixedLen((2,), bytes, default=[b"a", b"b"])}
    records = [tt.encode_example({"id": i}) for i in range(3)]
    for decoder in ("native", "python"):
        rows = decode_with(decoder, lambda: tt.decode_batch(records, spec))["tags"]
        assert rows == [[b"a", b"b"]] * 3 and len({id(row) for row in rows}) == 3, decoder


def test_errors_are_the_reference_errors_word_for_word() -> None:
    records = [good_record(2), tt.encode_example({"pair": [1]})]
    messages = []
    for decoder in ("native", "python"):
        with pytest.raises(FeatureShapeError) as caught:
            decode_with(
                decoder, lambda: tt.decode_batch(records, {"pair": SPEC["pair"]}, locations=["a", "b"])
            )
        messages.append((str(caught.value), caught.value.key, caught.value.record))
    assert messages[0] == messages[1] and messages[0][1:] == ("pair", "b")


def test_golden_tensorflow_records_decode_identically(examples_dir: Path) -> None:
    records = list(tt.read_records(examples_dir / "examples.tfrecord"))
    spec = {
        "label": FixedLen((), torch.int64, default=-1),
        "tokens": VarLen(torch.int64),
        "names": VarLen(bytes),
        "weights": VarLen(torch.float32),
    }
    assert_agree(records, spec)
    sequences = list(tt.read_records(examples_dir / "sequences.tfrecord"))
    context = {"id": FixedLen((), bytes), "length": FixedLen((), torch.int64)}
    sequence = {
        "frames": FixedLenSequence((3,), torch.float32),
        "words": FixedLenSequence((), bytes, allow_missing=True),
        "ids": VarLen(torch.int64),
    }
    ours = native.decode_sequences(sequences, context, sequence, None)
    reference = decode_with(
        "python", lambda: codec_decode._parse_sequences(sequences, context, sequence, None)
    )
    assert same(ours, reference)


@pytest.fixture(scope="module")
def examples_dir() -> Path:
    return Path(__file__).parent / "data" / "examples"


def test_sequence_corners_agree() -> None:
    def feature_list(*steps: bytes) -> bytes:
        return b"".join(ld(1, s) for s in steps)

    def sequence_example(context: bytes, lists: bytes) -> bytes:
        return ld(1, context) + ld(2, lists)

    def list_entry(key: bytes, *lists: bytes) -> bytes:
        return ld(1, ld(1, key) + b"".join(ld(2, x) for x in lists))

    records = [
        sequence_example(
            ld(1, ld(1, b"c") + ld(2, ints(1))), list_entry(b"s", feature_list(ints(1, 2), ints(3, 4)))
        ),
        sequence_example(b"", list_entry(b"s", feature_list(ints(5, 6)), feature_list(ints(7, 8)))),  # merged
        sequence_example(b"", list_entry(b"s", feature_list(ints(1, 1))) + list_entry(b"s", feature_list())),
        sequence_example(b"", list_entry(b"s", feature_list(b"", ints(9, 9)))),  # an untyped step
        sequence_example(b"", list_entry(b"s", feature_list(strings(b"a") + ints(2, 2)))),  # oneof switch
    ]
    context = {"c": FixedLen((), torch.int64, default=0)}
    for spec in ({"s": FixedLenSequence((2,), torch.int64, allow_missing=True)}, {"s": VarLen(torch.int64)}):
        for subset in ([r] for r in records):
            ours = outcome(lambda s=subset, p=spec: native.decode_sequences(s, context, p, None))
            reference = outcome(
                lambda s=subset, p=spec: decode_with(
                    "python", lambda: codec_decode._parse_sequences(s, context, p, None)
                )
            )
            assert agree(ours, reference), (subset, spec, ours, reference)
    bad_step = sequence_example(b"", list_entry(b"s", feature_list(ints(1, 2), strings(b"x"))))
    spec = {"s": FixedLenSequence((2,), torch.int64)}
    assert outcome(lambda: native.decode_sequences([bad_step], {}, spec, None)) == ("error", 3)
    with pytest.raises(FeatureTypeError, match="'s'"):
        tt.decode_sequence_batch([bad_step], {}, spec)


# ---------------------------------------------------------------------------------- mutations


def mutate(rng: random.Random, record: bytes, other: bytes) -> bytes:
    data = bytearray(record)
    for _ in range(rng.randint(1, 3)):
        op = rng.randrange(6)
        at = rng.randrange(len(data) + 1)
        if op == 0 and data:
            data[min(at, len(data) - 1)] ^= 1 << rng.randrange(8)
        elif op == 1:
            data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 4)))
        elif op == 2:
            del data[at : at + rng.randint(1, 8)]
        elif op == 3 and data:
            data[min(at, len(data) - 1)] = rng.choice([0x00, 0x7F, 0x80, 0xFF, 0x0A, 0x12, 0x1A, 0x08])
        elif op == 4:
            data = data[:at]
        else:
            cut = rng.randrange(len(other) + 1)
            data = data[:at] + other[cut:]
    return bytes(data)


def inferred_spec(record: bytes) -> dict[str, Any]:
    """VarLen of the type each feature holds (float for none), from the protobuf parse."""
    kinds = {"int64_list": torch.int64, "float_list": torch.float32, "bytes_list": bytes, None: torch.float32}
    parsed = Example.FromString(record)
    return {key: VarLen(kinds[f.WhichOneof("kind")]) for key, f in parsed.features.feature.items()}


def test_mutated_records_agree_with_protobuf() -> None:
    rng = random.Random(20261121)
    seeds = [good_record(i) for i in range(12)] + [c[1] for c in CORNERS[:20]]
    parsed = 0
    for _ in range(8000):
        record = mutate(rng, rng.choice(seeds), rng.choice(seeds))
        pb = protobuf_parses(record)
        assert native_parses(record) == pb, record
        assert native_parses(record, sequence=True) == protobuf_parses(record, sequence=True), record
        if pb:
            parsed += 1
            assert_agree([record], SPEC)
            assert_agree([record], inferred_spec(record))
    assert parsed > 600  # the mutations must reach the value paths, not only the parser's errors


def test_mutated_sequence_examples_agree() -> None:
    rng = random.Random(7)
    seeds = [
        tt.encode_sequence_example(
            {"id": tt.BytesList([b"q%d" % i])},
            {"frames": [[float(i), 1.0, 2.0]] * (i % 3), "ids": [[1, 2], [], [i]]},
        )
        for i in range(6)
    ]
    context = {"id": VarLen(bytes)}
    sequence = {
        "frames": FixedLenSequence((3,), torch.float32, allow_missing=True),
        "ids": VarLen(torch.int64),
    }
    for _ in range(2000):
        record = mutate(rng, rng.choice(seeds), rng.choice(seeds))
        assert native_parses(record, sequence=True) == protobuf_parses(record, sequence=True), record
        ours = outcome(lambda r=record: native.decode_sequences([r], context, sequence, None))
        reference = outcome(
            lambda r=record: decode_with(
                "python", lambda: codec_decode._parse_sequences([r], context, sequence, None)
            )
        )
        assert agree(ours, reference), (record, ours, reference)


# ------------------------------------------------------------------------------ framing, reads


def test_framed_records_check_lengths_and_crcs() -> None:
    payloads = [good_record(i) for i in range(5)]
    frames = [encode_record(p) for p in payloads]
    buffer = bytearray(b"".join(frames))
    sizes = np.array([len(f) for f in frames], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    order = np.array([3, 0, 4, 1, 2])
    spec = normalize_spec(SPEC)
    assert spec is not None
    batch = native.decode_framed(buffer, starts[order], sizes[order], spec, verify_crc=True)
    assert same(batch, reference_examples([payloads[i] for i in order], SPEC))

    damaged = bytearray(buffer)
    damaged[starts[2] + 20] ^= 1  # a payload bit: the data CRC
    with pytest.raises(native.Rejected) as caught:
        native.decode_framed(damaged, starts, sizes, spec, verify_crc=True)
    assert (caught.value.code, caught.value.record) == (7, 2)
    damaged = bytearray(buffer)
    damaged[starts[1] + 3] ^= 1  # the length field: its CRC
    with pytest.raises(native.Rejected) as caught:
        native.decode_framed(damaged, starts, sizes, spec, verify_crc=True)
    assert caught.value.record == 1 and caught.value.code in (6, 7)
    wrong = sizes.copy()
    wrong[4] += 1  # the entry disagrees with the length field
    with pytest.raises(native.Rejected) as caught:
        native.decode_framed(buffer + b"\0", starts, wrong, spec, verify_crc=False)
    assert (caught.value.code, caught.value.record) == (6, 4)
    past = starts.copy()
    past[0] = len(buffer) - 3  # beyond the buffer
    with pytest.raises(native.Rejected) as caught:
        native.decode_framed(buffer, past, sizes, spec, verify_crc=False)
    assert (caught.value.code, caught.value.record) == (6, 0)


def test_native_crc_matches_crc32c_package() -> None:
    import crc32c

    rng = random.Random(3)
    # around the three-stream blocks of 3 x 256 and 3 x 8192 bytes, and several of each
    sizes = [0, 1, 7, 8, 9, 63, 64, 767, 768, 769, 1000, 4099, 24575, 24576, 24577, 3 * 24576 + 3 * 768 + 5]
    for n in sizes:
        data = rng.randbytes(n)
        crc = crc32c.crc32c(data)
        expected = (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF
        assert native._native.masked_crc32c(data) == expected  # type: ignore[union-attr]


def test_software_crc_agrees(tmp_path: Path) -> None:
    code = (
        "import crc32c, torch_tfrecord.codec.native as n\n"
        "assert n._native.HW_CRC == 0\n"
        "for size in (0, 5, 8, 100, 4097):\n"
        "    data = bytes(range(256)) * 17\n"
        "    data = data[:size]\n"
        "    c = crc32c.crc32c(data)\n"
        "    assert n._native.masked_crc32c(data) == (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF\n"
    )
    env = {**os.environ, "TORCH_TFRECORD_NO_HW_CRC": "1"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


def test_read_framed_in_one_call_equals_the_per_record_reads(
    id_shards: Callable[..., list[Path]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from torch_tfrecord.records.shards import pool as shard_pool
    from torch_tfrecord.records.shards.files import RecordFiles

    files = RecordFiles.from_sources(id_shards([5, 0, 9, 4]))
    rng = np.random.default_rng(1)
    scratch = bytearray(3)  # grown as needed
    batches = (
        np.arange(18),
        rng.integers(0, 18, 40),
        np.array([17, 0, 17, 3, 3, 9]),
        np.zeros(0, np.int64),
        *(rng.integers(0, 18, size) for size in (17, 100, 257, 600)),  # sorted in C, repeats and all
        np.arange(17, -1, -1).repeat(20),
    )
    for ids in batches:
        buffer, starts, sizes = files.read_framed(ids, scratch)
        records = [bytes(buffer[a + 12 : a + z - 4]) for a, z in zip(starts.tolist(), sizes.tolist())]
        assert records == files.read(ids)
        assert len(set(starts.tolist())) == len(ids)  # a place of its own for each, repeats too
    with pytest.raises(IndexError, match=r"record ids must lie in \[0, 18\)"):
        files.read_framed([3, 18])
    # The records of a batch that lie apart are copied from each file's mapping; without the
    # mappings every run is a pread, with the same bytes.
    assert files.pool.mapped() == 3  # the empty shard is not mapped
    unmapped = RecordFiles(files.shards)
    for ids in batches[:3] + batches[4:]:
        unmapped.read_framed(ids)
        unmapped.pool.maps = [None] * len(files.paths)
        assert unmapped.read(ids) == files.read(ids)
        buffer, starts, sizes = unmapped.read_framed(ids)
        assert [bytes(buffer[a + 12 : a + z - 4]) for a, z in zip(starts, sizes)] == files.read(ids)
    # More shards in a batch than stay open at once: the loop per shard reads it.
    monkeypatch.setitem(shard_pool.CAPS, "local", 2)
    fewer = RecordFiles(files.shards)
    ids = np.array([17, 0, 6, 15, 1])
    buffer, starts, sizes = fewer.read_framed(ids)
    assert [bytes(buffer[a + 12 : a + z - 4]) for a, z in zip(starts, sizes)] == files.read(ids)
    assert len(fewer.pool.opened("local")) == 2


def _long_shard(path: Path, records: int = 600) -> Path:
    with tt.ExampleWriter(path) as writer:
        for i in range(records):
            writer.write({"id": i, "pad": b"x" * 200})  # ~230 bytes a record: 17 to a page
    return path


def test_a_file_cut_short_while_mapped_is_an_error_not_a_crash(tmp_path: Path) -> None:
    from torch_tfrecord.records.shard_access import BatchReadFailed
    from torch_tfrecord.records.shards.files import RecordFiles

    if _extension.compiled is None:
        pytest.skip("the extension is not built")
    path = _long_shard(tmp_path / "cut.tfrecord")
    spec = {"id": tt.FixedLen((), torch.int64)}
    ds = tt.TFRecordDataset([path], spec=spec, batch_size=64, shuffle="global")
    files = ds._decoder.files
    assert isinstance(files, RecordFiles)
    apart = np.array([590, 3, 400, 250, 580])  # far apart: copied from the mapping, not read
    files.read_framed(apart)
    assert files.pool.maps[0] is not None
    with open(path, "r+b") as handle:  # records 400 on lie on pages wholly past the new end
        handle.truncate(8 * 4096)
    # The copy meets SIGBUS on a page past the end: the batch read says it failed...
    with pytest.raises(BatchReadFailed):
        files.read_framed(apart)
    files.read_framed(np.array([1, 30, 60]))  # the pages before the cut are there
    # Past the end but within the last page, a mapping reads zeros, not SIGBUS: the size now is
    # checked, so those records are refused as a pread refuses them.
    offsets = files.tables[0][:, 0]
    last = int(np.flatnonzero(offsets < 8 * 4096)[-1])
    with open(path, "r+b") as handle:
        handle.truncate(int(offsets[last - 5]) + 100)  # records last-5 .. last now cut off
    with pytest.raises(BatchReadFailed):
        files.read_framed(np.array([last - 2, 3, 40]))
    files.read_framed(np.array([last - 20, 3, 40]))
    # ...and the dataset's per-record path names the file and the record.
    with pytest.raises(tt.TFRecordError, match=r"cut\.tfrecord") as raised:
        for _ in ds:
            pass
    assert "record" in str(raised.value)


_BUS_SCRIPT = """
import faulthandler, mmap, numpy as np, os, signal, sys
from torch_tfrecord.records.shards.files import RecordFiles
when, what, shard, other = sys.argv[1:]
if when == "before":
    faulthandler.enable()
files = RecordFiles.from_sources([shard])
assert files.read_framed(np.array([500, 2, 300])) is not None  # our handler is installed now
if when == "after":  # faulthandler over ours, then ours again over it
    faulthandler.enable()
    assert files.read_framed(np.array([501, 3, 301])) is not None
handle = open(other, "r+b")
mapping = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
handle.truncate(0)
print("touching", flush=True)
if what == "fault":
    mapping[40000]
else:
    os.kill(os.getpid(), signal.SIGBUS)
print("not reached", flush=True)
"""


@pytest.mark.parametrize(
    ("when", "what"), [("before", "fault"), ("after", "fault"), ("before", "kill"), ("none", "kill")]
)
def test_a_bus_error_elsewhere_still_reaches_the_handler_before(tmp_path: Path, when: str, what: str) -> None:
    """The SIGBUS handler that turns a cut mapping into an error leaves other bus errors alone: a
    fault of the program's own still reaches faulthandler, enabled before ours or after it (and
    ours installed again over it), and a SIGBUS sent with kill still ends the process."""
    if _extension.compiled is None:
        pytest.skip("the extension is not built")
    path = _long_shard(tmp_path / "a.tfrecord")
    other = tmp_path / "other.bin"
    other.write_bytes(b"y" * 65536)
    done = subprocess.run(
        [sys.executable, "-c", _BUS_SCRIPT, when, what, str(path), str(other)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == -signal.SIGBUS, (done.returncode, done.stderr[-2000:])
    assert "touching" in done.stdout and "not reached" not in done.stdout
    if when != "none":
        assert done.stderr.count("Fatal Python error: Bus error") == 1, done.stderr[-2000:]


def test_copy_ranges_copies_and_refuses_ranges_outside() -> None:
    ext = _extension.compiled
    if ext is None:
        pytest.skip("the extension is not built")
    source = bytes(range(100))
    out = bytearray(10)
    ext.copy_ranges(source, np.array([5, 90, 0], dtype=np.int64), np.array([3, 7, 0], dtype=np.int64),
                    out, np.array([0, 3, 10], dtype=np.int64))  # fmt: skip
    assert bytes(out) == source[5:8] + source[90:97]
    for starts, sizes, targets in (([98], [3], [0]), ([0], [3], [8]), ([-1], [1], [0]), ([0], [-1], [0])):
        with pytest.raises(ValueError, match="outside"):
            ext.copy_ranges(source, np.array(starts, dtype=np.int64), np.array(sizes, dtype=np.int64),
                            out, np.array(targets, dtype=np.int64))  # fmt: skip
    with pytest.raises(ValueError, match="differ in length"):
        ext.copy_ranges(source, np.zeros(2, np.int64), np.zeros(1, np.int64), out, np.zeros(2, np.int64))
    with pytest.raises(TypeError, match="int64"):
        ext.copy_ranges(source, np.zeros(1, np.int32), np.zeros(1, np.int64), out, np.zeros(1, np.int64))
    assert bytes(out) == source[5:8] + source[90:97]  # a refused call writes nothing


def test_read_into_coalesces_and_reports_short_reads(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    data = bytes(range(256)) * 4
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        offsets = np.array([10, 20, 30, 500, 0], dtype=np.int64)
        sizes = np.array([10, 10, 5, 100, 3], dtype=np.int64)
        out = bytearray(2 + int(sizes.sum()))
        assert gather.read_into(fd, offsets, sizes, out, 2) == 5
        assert bytes(out[2:]) == data[10:35] + data[500:600] + data[0:3]
        past = np.array([0, 1000], dtype=np.int64)
        assert gather.read_into(fd, past, np.array([10, 100], dtype=np.int64), bytearray(110), 0) == 1
        with pytest.raises(ValueError, match="too small"):
            gather.read_into(fd, offsets, sizes, bytearray(5), 0)
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- choosing decoders


def test_environment_variable_picks_the_decoder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(native.ENV_VAR, "python")
    assert native.decoder() == "python"
    monkeypatch.setenv(native.ENV_VAR, "native")
    assert native.decoder() == "native"
    monkeypatch.setenv(native.ENV_VAR, "fast")
    with pytest.raises(ValueError, match="TORCH_TFRECORD_DECODER"):
        native.decoder()


def test_python_decoder_forced_never_calls_the_extension(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the extension ran")

    monkeypatch.setattr(native, "decode_examples", boom)
    monkeypatch.setenv(native.ENV_VAR, "python")
    assert tt.decode_batch([good_record(1)], SPEC)["pair"].tolist() == [[1, -1]]
    monkeypatch.setenv(native.ENV_VAR, "native")
    with pytest.raises(AssertionError, match="the extension ran"):
        tt.decode_batch([good_record(1)], SPEC)


def test_without_the_extension_warns_once_and_decodes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native, "_native", None)
    monkeypatch.setattr(_extension, "_warned", set())
    monkeypatch.delenv(native.ENV_VAR, raising=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert tt.decode_batch([good_record(2)], SPEC)["pair"].tolist() == [[2, -2]]
        tt.decode_batch([good_record(2)], SPEC)
    assert [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)] == [
        "torch_tfrecord: the native decoder is not built (no C compiler at install time?); "
        "decoding with the protobuf runtime, several times slower "
        "(`torch-tfrecord doctor` says how to get it)"
    ]
    monkeypatch.setenv(native.ENV_VAR, "native")
    with pytest.raises(ImportError, match="not built"):
        tt.decode_batch([good_record(2)], SPEC)


def test_named_dimensions_go_to_the_protobuf_decoder() -> None:
    spec = {"raw": RawTensor(torch.uint8, ("h", 2)), "h": FixedLen((), torch.int64)}
    assert native_examples([b""], normalize_spec(spec)) is None  # type: ignore[arg-type]
    record = tt.encode_example({"raw": tt.BytesList([bytes(6)]), "h": 3})
    assert [t.shape for t in tt.decode_batch([record], spec)["raw"]] == [(3, 2)]


# -------------------------------------------------------------------------------------- datasets


def test_dataset_batches_are_read_and_decoded_natively(
    id_shards: Callable[..., list[Path]], monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = id_shards([7, 0, 12, 5])
    spec = {"id": FixedLen((), torch.int64), "x": VarLen(torch.float32)}
    calls = []
    decode_framed = native.decode_framed

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(len(args[1]))
        return decode_framed(*args, **kwargs)

    monkeypatch.setattr(native, "decode_framed", spy)
    batches = {}
    for decoder in ("native", "python"):
        monkeypatch.setenv(native.ENV_VAR, decoder)
        dataset = tt.TFRecordDataset(paths, spec=spec, batch_size=5, shuffle="global", seed=3)
        batches[decoder] = list(dataset)
    # 24 records, drop_last: every batch went through the extension (alone, or in a run of them)
    assert sum(calls) == 20 and all(count % 5 == 0 for count in calls), calls
    assert same(batches["native"], batches["python"])
    ids = torch.cat([b["id"] for b in batches["native"]]).tolist()
    assert len(set(ids)) == 20 and all(
        b["x"].lengths.tolist() == (b["id"] % 3).tolist() for b in batches["native"]
    )


def test_damaged_record_in_a_dataset_fails_alike(
    id_shards: Callable[..., list[Path]], monkeypatch: pytest.MonkeyPatch
) -> None:
    (path,) = id_shards([6])
    data = bytearray(path.read_bytes())
    data[-10] ^= 0x01  # the last record's payload: its CRC no longer matches
    path.write_bytes(bytes(data))
    spec = {"id": FixedLen((), torch.int64)}
    messages = []
    for decoder in ("native", "python"):
        monkeypatch.setenv(native.ENV_VAR, decoder)
        with pytest.raises(tt.CorruptRecordError) as caught:
            list(tt.TFRecordDataset([path], spec=spec, batch_size=3, shuffle=False))
        messages.append(str(caught.value))
        skipped = list(tt.TFRecordDataset([path], spec=spec, batch_size=3, shuffle=False, on_error="skip"))
        assert [b[tt.PADDING_KEY].tolist() for b in skipped] == [[False] * 3, [False, False, True]]
    assert messages[0] == messages[1] and "record 5" in messages[0]


def test_empty_batch_decodes_alike(
    id_shards: Callable[..., list[Path]], monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = id_shards([3, 2])
    spec = {"id": FixedLen((), torch.int64), "x": VarLen(torch.float32)}
    results = []
    for decoder in ("native", "python"):
        monkeypatch.setenv(native.ENV_VAR, decoder)
        dataset = tt.IndexedTFRecordDataset(paths, spec=spec)
        results.append((dataset.__getitems__([]), dataset.__getitems__([4, 0])))
    assert same(results[0], results[1]) and results[0][0] == []


def test_read_framed_leaves_damage_and_read_errors_to_the_careful_path(
    id_shards: Callable[..., list[Path]],
) -> None:
    from torch_tfrecord.records.shard_access import BatchReadFailed
    from torch_tfrecord.records.shards.files import RecordFiles

    paths = id_shards([4])
    files = RecordFiles.from_sources(paths)
    buffer, starts, sizes = files.read_framed([2, 0])
    assert bytes(buffer[starts[1] : starts[1] + sizes[1]]) == encode_record(
        tt.encode_example({"id": 0, "x": []})
    )
    source = files.pool.source(0)
    os.close(source.fd)  # the descriptor fails under it: EBADF (read, not mapped)
    source.close = lambda: None  # type: ignore[method-assign]  (closed already)
    files.pool.maps[0] = None
    with pytest.raises(BatchReadFailed):
        files.read_framed([1])
    with pytest.raises(OSError):
        files.read([1])
    indexed_size = os.path.getsize(paths[0])
    with open(paths[0], "r+b") as handle:
        handle.truncate(indexed_size - 5)
    # The shard as the dataset saw it when it was built: the size it had when indexed.
    shrunk = RecordFiles(files.shards)
    with pytest.raises(BatchReadFailed):
        shrunk.read_framed([3])
    with pytest.raises(tt.StaleIndexError, match="shrank"):
        shrunk.read([3])


def test_a_disagreement_is_logged_and_protobuf_wins(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def reject(*args: Any, **kwargs: Any) -> Any:
        raise native.Rejected(2, 0)

    monkeypatch.setattr(native, "decode_examples", reject)
    monkeypatch.setenv(native.ENV_VAR, "native")
    with caplog.at_level("WARNING", logger="torch_tfrecord.codec.decode"):
        batch = tt.decode_batch([good_record(3)], {"pair": SPEC["pair"]})
    assert batch["pair"].tolist() == [[3, -3]]
    assert "native decoder rejected a batch that the protobuf decoder accepts" in caplog.text
