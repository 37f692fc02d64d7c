"""Our decoders against TensorFlow's parser on ~3,000 mutated records (golden data, no TensorFlow here).

tests/data/make_tf_differential.py made the records from the fuzz corpora and parsed each with
tf.io.parse_example (three specs) and tf.io.parse_single_sequence_example (one). Every record
must get the same answer from us, with each decoder: the same values (floats bit for bit), or a
rejection (a TFRecordError) where TensorFlow raised. Deliberate differences are listed in
docs/robustness.md and recognised by _difference below, each checked on the record itself.
"""

from __future__ import annotations

import base64
import json
import struct
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
from wire import EXAMPLE_SCHEMA, SEQUENCE_EXAMPLE_SCHEMA, cut_short, fields, ld

import torch_tfrecord as tt
from torch_tfrecord import FixedLen, FixedLenSequence, VarLen
from torch_tfrecord.codec import native

DATA = Path(__file__).resolve().parent / "data" / "tf_differential"

SPECS: dict[str, dict[str, Any]] = {
    "varlen": {"x": VarLen(torch.int64), "y": VarLen(torch.float32), "z": VarLen(bytes)},
    "fixed": {
        "x": FixedLen((2,), torch.int64, default=[7, 8]),
        "y": FixedLen((), torch.float32, default=0.5),
        "z": FixedLen((), bytes, default=b""),
    },
    "sequence_in_example": {
        "x": FixedLenSequence((), torch.int64, allow_missing=True),
        "y": FixedLenSequence((2,), torch.float32, allow_missing=True),
    },
}
CONTEXT = {"x": VarLen(torch.int64)}
STEPS = {"y": FixedLenSequence((2,), torch.float32, allow_missing=True), "z": VarLen(bytes)}


@pytest.fixture(scope="module")
def corpus() -> tuple[list[bytes], list[dict[str, Any]]]:
    document = json.loads((DATA / "expected.json").read_text())
    records = list(tt.read_records(DATA / "records.tfrecord"))
    assert len(records) == document["records"] == len(document["expected"]) >= 3000
    return records, document["expected"]


def _ours(record: bytes, name: str) -> dict[str, Any]:
    if name == "sequence":
        context, steps = tt.decode_sequence_example(record, CONTEXT, STEPS)
        return {
            **{f"context/{k}": v for k, v in context.items()},
            **{f"steps/{k}": v for k, v in steps.items()},
        }
    return tt.decode_example(record, SPECS[name])


def _as_golden(value: Any) -> dict[str, Any]:
    """Our value in the golden file's form: shape, then float32 bit patterns, int64s or base64 bytes."""
    if isinstance(value, list):  # bytes features: a list of values, or of steps' lists
        flat = [v for step in value for v in step] if value and isinstance(value[0], list) else value
        return {"shape": [len(flat)], "bytes": [base64.b64encode(v).decode() for v in flat]}
    if isinstance(value, bytes):
        return {"shape": [], "bytes": [base64.b64encode(value).decode()]}
    tensor = value.values if isinstance(value, tt.Ragged) else value
    entry: dict[str, Any] = {"shape": list(tensor.shape)}
    if tensor.dtype == torch.float32:
        entry["float32"] = [struct.pack("<f", v).hex() for v in tensor.reshape(-1).tolist()]
    else:
        entry["int64"] = tensor.reshape(-1).tolist()
    return entry


def _unbatched(name: str, theirs: dict[str, Any]) -> dict[str, Any]:
    """tf.io.parse_example's dense outputs carry the batch dimension (1); decode_example's do not."""
    if "rejected" in theirs or name == "sequence":
        return theirs
    return {
        key: entry if isinstance(SPECS[name][key], VarLen) else {**entry, "shape": entry["shape"][1:]}
        for key, entry in theirs.items()
    }


def _tf_view(record: bytes, wanted: dict[int, set[bytes]]) -> bytes | None:
    """The record as TensorFlow's fast parser reads it: only the map entries of the wanted keys.

    ``wanted`` maps a top-level field (1: features / context, 2: feature_lists) to its keys.
    None when the levels down to the entries cannot be walked.
    """
    top = fields(record)
    if top is None:
        return None
    out = b""
    for field, wire, start, end in top:
        if field not in wanted or wire != 2:
            continue
        entries = fields(record, start, end)
        if entries is None:
            return None
        kept = []
        for entry_field, entry_wire, entry_start, entry_end in entries:
            if entry_field != 1 or entry_wire != 2:
                continue
            parts = fields(record, entry_start, entry_end)
            if parts is None:
                return None
            keys = [record[b:e] for f, w, b, e in parts if f == 1 and w == 2]
            if keys and keys[-1] in wanted[field]:
                kept.append(ld(1, record[entry_start:entry_end]))
        out += ld(field, b"".join(kept))
    return out


def _tf_refuses(record: bytes, containers: set[int]) -> str | None:
    """Which protobuf-valid layout TensorFlow's fast parser refuses, if the record has one."""
    top = fields(record)
    if top is None:
        return None
    for field, wire, start, end in top:
        if wire in (3, 4):
            return "a group field"
        if field not in containers or wire != 2:
            continue
        entries = fields(record, start, end) or []
        for entry_field, entry_wire, entry_start, entry_end in entries:
            if entry_wire in (3, 4):
                return "a group field"
            if entry_field != 1:
                return "a field besides the map in Features / FeatureLists"
            parts = fields(record, entry_start, entry_end) or []
            layout = [(f, w) for f, w, _, _ in parts]
            if layout == [(1, 2)]:
                return "a map entry with a key and no value"
            if layout not in ([(1, 2), (2, 2)], [(2, 2)], []):
                return "a map entry with other fields than one key and one value"
    return None


def _list_damage(record: bytes, wanted: dict[int, set[bytes]]) -> bool:
    """Whether a wanted key's value list holds a malformed or foreign field (TF reads only its values)."""
    view = _tf_view(record, wanted)
    if view is None:
        return False
    stack = [(0, len(view), 0)]
    while stack:  # every length-delimited field below the entries: a value list or its parents
        start, end, depth = stack.pop()
        level = fields(view, start, end)
        if level is None or (depth >= 3 and any(f != 1 for f, _, _, _ in level)):
            return depth >= 3
        stack.extend((b, e, depth + 1) for f, w, b, e in level if w == 2 and depth < 6)
    return False


def _difference(
    record: bytes, name: str, theirs: dict[str, Any], ours: dict[str, Any], error: str
) -> str | None:
    """The documented difference that explains a disagreement, or None (a bug)."""
    sequence = name == "sequence"
    wanted = (
        {1: {k.encode() for k in CONTEXT}, 2: {k.encode() for k in STEPS}}
        if sequence
        else {1: {k.encode() for k in SPECS[name]}}
    )
    if "rejected" not in ours:  # TensorFlow refused what protobuf (and we) accept
        return _tf_refuses(record, set(wanted))
    if "UTF-8" in error:
        return "a key that is not UTF-8"
    view = _tf_view(record, wanted)
    if view is not None and view != record:
        try:
            if {key: _as_golden(value) for key, value in _ours(view, name).items()} == theirs:
                return "damage outside the features TensorFlow was asked for"
        except tt.TFRecordError:
            pass
    if cut_short(record, SEQUENCE_EXAMPLE_SCHEMA if sequence else EXAMPLE_SCHEMA):
        return "a message cut short"
    if _list_damage(record, wanted):
        return "a value list with a malformed or foreign field"
    return None


@pytest.mark.parametrize("decoder", ["python", "native"])
@pytest.mark.parametrize("name", ["varlen", "fixed", "sequence_in_example", "sequence"])
def test_same_answers_as_tensorflow(
    corpus: tuple[list[bytes], list[dict[str, Any]]], name: str, decoder: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(native.ENV_VAR, decoder)
    records, expected = corpus
    unexplained, explained = [], Counter[str]()
    agreed = accepted = 0
    for number, (record, answers) in enumerate(zip(records, expected, strict=True)):
        theirs = _unbatched(name, answers[name])
        error = ""
        try:
            ours: Any = {key: _as_golden(value) for key, value in _ours(record, name).items()}
        except tt.TFRecordError as caught:
            ours, error = {"rejected": type(caught).__name__}, str(caught)
        if ("rejected" in theirs) == ("rejected" in ours) and ("rejected" in theirs or ours == theirs):
            agreed += 1
            accepted += "rejected" not in ours
            continue
        reason = _difference(record, name, theirs, ours, error)
        if reason is None:
            unexplained.append((number, record.hex(), theirs, ours, error))
        else:
            explained[reason] += 1
    print(f"{name}/{decoder}: {agreed} agree ({accepted} accepted), differences: {dict(explained)}")
    assert not unexplained, f"{len(unexplained)} unexplained differences, first: {unexplained[:2]}"
    assert accepted >= 150 and agreed >= 0.9 * len(records), (accepted, agreed)
