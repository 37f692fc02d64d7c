from __future__ import annotations

import pytest
import torch

import torch_tfrecord as tt
from torch_tfrecord.codec.spec import normalize_spec


def test_fixed_len_validates_at_construction() -> None:
    assert tt.FixedLen(3, torch.float32).shape == (3,)
    filled = tt.FixedLen([2, 2], torch.int64, default=0)
    assert filled.default_values() == (0, 0, 0, 0)
    assert filled == tt.FixedLen((2, 2), torch.int64, default=[0, 0, 0, 0])  # one canonical form
    assert tt.FixedLen((2,), torch.float32, default=[1, 2]).default_values() == (1.0, 2.0)
    assert tt.FixedLen((2,), torch.float32).default_values() is None
    large = tt.FixedLen((1 << 12, 1 << 12), torch.float32, default=0.5)  # stored as one value
    assert large.default == (0.5,)
    # Filled into every record that lacks it: at most 2**24 values (issue 44: a spec.json with a
    # shape of 10**9 and a default was a MemoryError when decoding began).
    for shape in ((1 << 16, 1 << 14), (10**9,), ((1 << 24) + 1,)):
        with pytest.raises(tt.SpecError, match="a default fills at most 16777216"):
            tt.FixedLen(shape, torch.float32, default=0.5)
    assert tt.FixedLen((10**9,), torch.float32).default is None  # without a default: a record's own
    with pytest.raises(tt.SpecError, match="no record can"):
        tt.FixedLen((1 << 20, 1 << 20), torch.float32, default=0.5)
    # Empty, yet its strides would overflow (torch: "Stride calculation overflowed" on use).
    assert tt.FixedLen((0, 1 << 16, 1 << 14), torch.float64).shape == (0, 1 << 16, 1 << 14)
    for shape in ((0, 1 << 40, 1 << 40), (1 << 40, 0)):
        with pytest.raises(tt.SpecError, match="other than 0 multiply to"):
            tt.FixedLen(shape, torch.float64, default=1.0)
        with pytest.raises(tt.SpecError, match="other than 0 multiply to"):
            tt.FixedLenSequence(shape, torch.float64)
    with pytest.raises(tt.SpecError, match="other than 0 multiply to"):
        tt.RawTensor(torch.uint8, (0, -1, 1 << 40))
    with pytest.raises(tt.SpecError, match="non-negative ints"):
        tt.FixedLen(2.0, torch.float32)  # type: ignore[arg-type]
    with pytest.raises(tt.SpecError, match="must hold bytes"):
        tt.FixedLen((), bytes, default=1.5)
    with pytest.raises(ValueError, match="non-negative ints"):
        tt.FixedLen((-1,), torch.int64)
    with pytest.raises(ValueError, match="not supported"):
        tt.FixedLen((), torch.complex64)
    with pytest.raises(ValueError, match="shape \\(\\) or \\(n,\\)"):
        tt.FixedLen((2, 2), bytes)
    with pytest.raises(ValueError, match="has 3 values, shape \\(2,\\) needs 2"):
        tt.FixedLen((2,), torch.float32, default=[1, 2, 3])
    with pytest.raises(ValueError, match="must hold bytes"):
        tt.FixedLen((), bytes, default="text")
    with pytest.raises(ValueError, match="not numeric"):
        tt.FixedLen((), torch.int64, default="x")


def test_other_specs_validate() -> None:
    with pytest.raises(ValueError, match="-1 once"):
        tt.RawTensor(torch.uint8, (-1, -1))
    with pytest.raises(ValueError, match="feature names"):
        tt.RawTensor(torch.uint8, (-2,))
    with pytest.raises(ValueError, match="numeric torch dtype"):
        tt.RawTensor(bytes, (1,))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="mode"):
        tt.Image("CMYK")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="shape \\(\\)"):
        tt.FixedLenSequence((2,), str)
    with pytest.raises(tt.SpecError, match="cannot be told"):
        tt.FixedLenSequence((3, 0), torch.float32)
    assert tt.RawTensor(torch.uint8, ("h", "w", 3)).shape == ("h", "w", 3)
    assert not tt.RawTensor(torch.uint8, ("h", 3)).is_static and tt.RawTensor(torch.uint8, (2, 3)).is_static


def test_specs_are_hashable_and_frozen() -> None:
    spec = tt.FixedLen((2,), torch.float32, default=[1.0, 2.0])
    assert hash(spec) == hash(tt.FixedLen((2,), torch.float32, default=(1.0, 2.0)))
    with pytest.raises(AttributeError):
        spec.shape = (3,)  # type: ignore[misc]


@pytest.mark.parametrize(
    "spec",
    [
        tt.FixedLen((), torch.int64),
        tt.FixedLen((2, 3), torch.bfloat16, default=0.5),
        tt.FixedLen((), bytes, default=b"x"),
        tt.FixedLen((2,), str),
        tt.VarLen(torch.float32),
        tt.VarLen(bytes),
        tt.FixedLenSequence((3,), torch.float32, allow_missing=True, default=-1.0),
        tt.RawTensor(torch.uint8, ("height", "width", 3)),
        tt.Image("L"),
    ],
)
def test_repr_is_valid_python(spec: object) -> None:
    assert eval(repr(spec), {"tt": tt, "torch": torch}) == spec


def test_shorthands() -> None:
    spec = normalize_spec({"a": "int", "b": "float", "c": "bytes", "d": "byte", "e": "str", "f": tt.Image()})
    assert spec == {
        "a": tt.VarLen(torch.int64),
        "b": tt.VarLen(torch.float32),
        "c": tt.VarLen(bytes),
        "d": tt.VarLen(bytes),
        "e": tt.VarLen(str),
        "f": tt.Image(),
    }
    assert normalize_spec(None) is None
    with pytest.raises(ValueError, match="'a': unknown shorthand 'long'"):
        normalize_spec({"a": "long"})
    with pytest.raises(TypeError, match="not a feature spec"):
        normalize_spec({"a": 3})
    with pytest.raises(TypeError, match="mapping"):
        normalize_spec(["a"])  # type: ignore[arg-type]
