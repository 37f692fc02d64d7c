"""Fuzzing of the public decoders with every spec kind, each run with both decoders (atheris).

The first byte picks a spec (every kind: VarLen / FixedLen of each dtype with defaults,
FixedLenSequence, RawTensor with fixed, -1 and named dimensions, Image in each mode, no spec),
the rest is one record. It goes through ``decode_example``, ``decode_batch`` (after a good
record) and ``decode_sequence_example``, with the protobuf and then the native decoder:

- each call returns or raises a TFRecordError, nothing else;
- both decoders give the same values, or the same error class;
- a batch of the record twice decodes iff the record alone does, with its values in each row.

    python fuzz/fuzz_decoder.py fuzz/corpus/decoder -atheris_runs=100000
"""

from __future__ import annotations

import io
from typing import Any

from _harness import Rejected, attempt, main

SPECS: list[dict[str, Any] | None] = []
SEQUENCE_SPECS: list[tuple[dict[str, Any], dict[str, Any]]] = []


def load() -> None:
    import torch

    import torch_tfrecord.codec.native
    import torch_tfrecord.vision  # noqa: F401
    from torch_tfrecord import FixedLen, FixedLenSequence, Image, RawTensor, VarLen

    SPECS[:] = [
        None,
        {"a": VarLen(torch.int64), "b": VarLen(torch.float32), "c": VarLen(bytes), "d": VarLen(str)},
        {"a": VarLen(torch.int8), "b": VarLen(torch.float16), "d": VarLen(torch.bool)},
        {"a": FixedLen((), torch.int64), "b": FixedLen((2,), torch.float64, default=1.5)},
        {"a": FixedLen((2, 1), torch.uint8, default=0), "c": FixedLen((), bytes, default=b"-")},
        {"d": FixedLen((2,), str), "b": FixedLen((), torch.bfloat16, default=0.0)},
        {
            "b": FixedLenSequence((2,), torch.float32),
            "a": FixedLenSequence((), torch.int32, allow_missing=True),
        },
        {"c": RawTensor(torch.float32, (2, -1)), "a": VarLen(torch.int16)},
        {"c": RawTensor(torch.uint8, ("h", "w")), "h": FixedLen((), torch.int64), "w": VarLen(torch.int64)},
        {"c": RawTensor(torch.int64, ()), "d": RawTensor(torch.uint16, (-1,))},
        {"c": Image("RGB")},
        {"c": Image("L"), "a": FixedLen((), torch.int64, default=0)},
        {"c": Image("unchanged")},
    ]
    SEQUENCE_SPECS[:] = [
        ({"a": VarLen(torch.int64)}, {"b": FixedLenSequence((2,), torch.float32, allow_missing=True)}),
        ({"c": FixedLen((), bytes, default=b"")}, {"a": VarLen(torch.int64), "c": VarLen(str)}),
        ({}, {"a": FixedLenSequence((), torch.int64), "c": FixedLenSequence((), bytes)}),
    ]


def _tiny_png() -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (2, 1), (200, 10, 30)).save(out, format="PNG")
    return out.getvalue()


def _tiny_jpeg() -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (3, 2), (20, 100, 30)).save(out, format="JPEG")
    return out.getvalue()


def _outcomes(record: bytes, choice: int) -> dict[str, Any]:
    import torch_tfrecord as tt

    spec = SPECS[choice % len(SPECS)]
    context, steps = SEQUENCE_SPECS[choice % len(SEQUENCE_SPECS)]
    return {
        "example": attempt(lambda: tt.decode_example(record, spec)),
        "batch": attempt(lambda: tt.decode_batch([record, record], spec)),
        "sequence": attempt(lambda: tt.decode_sequence_example(record, context, steps)),
    }


def _same_outcome(a: Any, b: Any) -> bool:
    from test_native import same

    if isinstance(a, Rejected) or isinstance(b, Rejected):
        return isinstance(a, Rejected) and isinstance(b, Rejected) and type(a.error) is type(b.error)
    return bool(same(a, b))


def check(data: bytes) -> None:
    """Raises AssertionError (or any non-library exception) on a decoder bug."""
    from test_native import decode_with, same

    import torch_tfrecord as tt

    if not SPECS:
        load()
    if not data:
        return
    choice, record = data[0], data[1:]
    python = decode_with("python", lambda: _outcomes(record, choice))
    native = decode_with("native", lambda: _outcomes(record, choice))
    for call in python:
        assert _same_outcome(python[call], native[call]), (call, python[call], native[call])
    example, batch = python["example"], python["batch"]
    assert isinstance(example, Rejected) == isinstance(batch, Rejected), (example, batch)
    if not isinstance(example, Rejected):
        for row in tt.split_batch(batch, 2):
            assert same(row, example), (row, example)


def seeds() -> dict[str, bytes]:
    import numpy as np

    import torch_tfrecord as tt

    load()
    features: dict[str, dict[str, Any]] = {
        "numbers": {"a": [3, -1], "b": tt.FloatList([0.5, 2.0]), "c": [b"\x00\x00\x80?\x00\x00\x00@"]},
        "strings": {"d": [b"ab", "\u00e9".encode()], "c": [b""]},
        "raw": {"c": [np.arange(6, dtype="<f4").tobytes()], "h": 2, "w": [3], "a": [1, 2, 3]},
        "png": {"c": [_tiny_png()], "a": 4},
        "jpeg": {"c": [_tiny_jpeg()], "a": 5},
        "empty": {},
    }
    out = {}
    for i, (name, values) in enumerate(features.items()):
        for choice in range(i % 3, len(SPECS), 3):
            out[f"{name}-{choice}"] = bytes([choice]) + tt.encode_example(values)
    out["sequence"] = bytes([0]) + tt.encode_sequence_example(
        {"a": [3], "c": [b"q"]}, {"b": [[1.0, 2.0], [3.0, 4.0]], "a": [[1], [2]], "c": [[b"a"], [b"b"]]}
    )
    return out


if __name__ == "__main__":
    main(check, seeds, load)
