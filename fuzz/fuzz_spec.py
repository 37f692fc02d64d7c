"""Fuzzing of the spec parser: shorthands, spec constructors, their checks, repr and use (atheris).

The input is read as a series of choices: keys, spec kinds, shapes, dtypes and defaults drawn
from lists of valid and invalid values (negative and huge dims, bools, floats, NaN, strings
where numbers belong, unsupported dtypes, ...), then the bytes of one record. Then:

- ``normalize_spec`` returns a spec or raises SpecError, nothing else;
- an accepted spec's ``repr`` is Python that rebuilds an equal spec (what infer_spec promises);
- decoding the record and an empty Example with it, by both decoders, returns the same values
  or raises a TFRecordError of the same class;
- ``infer_spec`` of the record proposes a spec with the same guarantees (a context spec and a
  sequence spec when the record sets feature lists, used with ``decode_sequence_example``).

    python fuzz/fuzz_spec.py fuzz/corpus/spec -atheris_runs=100000
"""

from __future__ import annotations

import math
from typing import Any

from _harness import Rejected, attempt, main


class _Draw:
    """Choices read from the input bytes; zeros once they run out."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.position = 0

    def byte(self) -> int:
        value = self.data[self.position] if self.position < len(self.data) else 0
        self.position += 1
        return value

    def pick(self, options: list[Any]) -> Any:
        return options[self.byte() % len(options)]

    def rest(self) -> bytes:
        return self.data[self.position :]


def _choices() -> dict[str, list[Any]]:
    import torch

    dtypes: list[Any] = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool]
    dtypes += [torch.float32, torch.float64, torch.float16, torch.bfloat16, bytes, str]
    dtypes += [torch.uint16, torch.uint32, torch.uint64, torch.complex64, int, float, "float32", None]
    dims: list[Any] = [0, 1, 2, 3, -1, -2, "h", "", True, 2.0, None, 1 << 40]
    return {
        "key": ["a", "b", "h", "", "\u00e9", "_record_id", 7],
        "kind": ["shorthand", "FixedLen", "VarLen", "FixedLenSequence", "RawTensor", "Image", "other"],
        "shorthand": ["int", "int64", "float", "float32", "bytes", "byte", "str", "int32", "", "Int"],
        "dtype": dtypes,
        "dim": dims,
        "rank": [0, 1, 2, 3, "int", "list", "str"],
        "default": [
            None,
            0,
            1,
            -1,
            1.5,
            math.nan,
            math.inf,
            -0.0,
            1 << 70,
            True,
            [1, 2],
            [[1], [2]],
            [],
            "x",
            b"x",
            ["a", "b"],
            [b"a", b"b"],
            [1, "a"],
            "nan",
            [math.nan, 1.0],
            {"a": 1},
        ],
        "mode": ["RGB", "L", "unchanged", "rgb", "", None],
        "other": [42, None, "", object(), {"dtype": "int"}],
    }


_CHOICES: dict[str, list[Any]] = {}


def _shape(draw: _Draw) -> Any:
    rank = draw.pick(_CHOICES["rank"])
    if rank == "int":
        return draw.pick(_CHOICES["dim"])
    if rank == "str":
        return "h"
    dims = [draw.pick(_CHOICES["dim"]) for _ in range(2)]
    return dims if rank == "list" else tuple(dims[:rank] + [draw.pick(_CHOICES["dim"])] * max(0, rank - 2))


def _value(draw: _Draw) -> Any:
    from torch_tfrecord import FixedLen, FixedLenSequence, Image, RawTensor, VarLen

    kind = draw.pick(_CHOICES["kind"])
    dtype = draw.pick(_CHOICES["dtype"])
    if kind == "shorthand":
        return draw.pick(_CHOICES["shorthand"])
    if kind == "FixedLen":
        return FixedLen(_shape(draw), dtype, default=draw.pick(_CHOICES["default"]))
    if kind == "VarLen":
        return VarLen(dtype)
    if kind == "FixedLenSequence":
        return FixedLenSequence(_shape(draw), dtype, bool(draw.byte() & 1), draw.pick(_CHOICES["default"]))
    if kind == "RawTensor":
        return RawTensor(dtype, _shape(draw))
    if kind == "Image":
        return Image(draw.pick(_CHOICES["mode"]))
    return draw.pick(_CHOICES["other"])


def _build(draw: _Draw) -> dict[Any, Any]:
    return {draw.pick(_CHOICES["key"]): _value(draw) for _ in range(draw.byte() % 4)}


def _rebuilt(value: Any) -> Any:
    import torch

    import torch_tfrecord as tt

    return eval(repr(value), {"tt": tt, "torch": torch})  # the repr is Python to paste: test it


def _decode_both(record: bytes, spec: Any) -> Any:
    import torch_tfrecord as tt

    return _both_decoders(lambda: tt.decode_example(record, spec))


def _both_decoders(call: Any) -> Any:
    from fuzz_decoder import _same_outcome
    from test_native import decode_with

    outcomes = [decode_with(d, lambda: attempt(call)) for d in ("python", "native")]
    assert _same_outcome(*outcomes), outcomes
    return outcomes[0]


def check(data: bytes) -> None:
    """Raises AssertionError (or any non-library exception) on a spec bug."""
    import torch_tfrecord as tt
    from torch_tfrecord.codec.schema import InferredSequenceSpec, infer_spec_from_records

    if not _CHOICES:
        _CHOICES.update(_choices())
    draw = _Draw(data)
    from torch_tfrecord.codec.spec import normalize_spec

    spec = attempt(lambda: normalize_spec(_build(draw)))
    record = draw.rest()
    if isinstance(spec, Rejected):
        assert isinstance(spec.error, tt.SpecError), spec
    else:
        assert spec is not None
        for key, value in spec.items():
            assert _rebuilt(value) == value, (key, value, repr(value))
        _decode_both(tt.encode_example({}), spec)
        _decode_both(record, spec)
    inferred = attempt(lambda: infer_spec_from_records([record]))
    if isinstance(inferred, InferredSequenceSpec):
        parts = {name: dict(part) for name, part in inferred.items()}
        assert _rebuilt(inferred) == parts, repr(inferred)
        _both_decoders(lambda: tt.decode_sequence_example(record, **inferred))
    elif not isinstance(inferred, Rejected):
        assert _rebuilt(dict(inferred)) == dict(inferred), repr(inferred)
        _decode_both(record, inferred)


def seeds() -> dict[str, bytes]:
    import torch_tfrecord as tt

    example = tt.encode_example({"a": [1, 2], "b": tt.FloatList([0.5]), "h": [b"xy"]})
    sequence_example = tt.encode_sequence_example(
        {"a": [1]}, {"f": [[0.5, 1.5], [2.5, 3.5]], "i": [[1], [2, 3]], "w": [[b"x"]]}
    )
    return {
        "empty": b"",
        "fixed-int": bytes([1, 0, 1, 0, 1, 2, 0]) + example,
        "varlen-float": bytes([1, 1, 2, 6]) + example,
        "shorthand": bytes([2, 0, 0, 0, 1, 1, 1]) + example,
        "raw": bytes([1, 2, 4, 4, 1, 2, 2]) + example,
        "image": bytes([1, 0, 5, 0, 0]) + example,
        "sequence": bytes([1, 0, 3, 6, 1, 2, 1, 4]) + example,
        "sequence-example": bytes([0]) + sequence_example,
    }


def load() -> None:
    import torch_tfrecord
    import torch_tfrecord.codec.native
    import torch_tfrecord.codec.schema  # noqa: F401


if __name__ == "__main__":
    main(check, seeds, load)
